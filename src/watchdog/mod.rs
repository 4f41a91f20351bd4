//! The watchdog: ONE scheduling thread per process ("redguard-watchdog"),
//! shared by every `Client`, renewing the lease of every lock held with the
//! watchdog while its holder lives.
//!
//! * Holders hand entries over through a pending list and wake the thread
//!   only when the new entry falls due before the thread's next planned
//!   wake-up or the list grows long, so a steady stream of short holds
//!   costs one thread wake-up per thousand locks.
//! * Releases never talk to the thread: the releaser marks the shared
//!   [`LeaseState`] released (synchronously, before `unlock` returns) and the
//!   thread drops such entries when it meets them.
//! * Renewals that fall due together go to each server as multi-key script
//!   calls of at most `renew_batch` renewals, several calls per round trip:
//!   never one round trip per lock.
//! * The scheduling thread never waits on the network: each server's due
//!   batches run on a short-lived I/O thread ("redguard-renew") and come back
//!   as results, so a hung or frozen server delays only its own renewals.

mod schedule;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::connection::{NodeId, Source};
use crate::error::Error;
use crate::lease::clock_drift;
use crate::lease::{Counters, LeaseState, nanos};
use crate::replicas::ReplicaAcks;
use crate::scripts::{self, Renewal};
use schedule::Schedule;

/// One held lock as the watchdog sees it.
pub(crate) struct Entry {
    pub(crate) key: Arc<[u8]>,
    pub(crate) channel: Arc<[u8]>,
    pub(crate) holder: Arc<str>,
    /// The lease applied at each renewal.
    pub(crate) lease: Duration,
    /// `false` for locks taken with an explicit lease: tracked (for release
    /// at shutdown) but never renewed.
    pub(crate) renew: bool,
    pub(crate) renew_batch: usize,
    /// The wait queue of a fair lock, whose head alone is woken when the
    /// lock is released at client shutdown; `None` for other kinds.
    pub(crate) queue: Option<Arc<[u8]>>,
    pub(crate) state: Arc<LeaseState>,
    pub(crate) source: Arc<Source>,
    pub(crate) counters: Arc<Counters>,
    /// Replica acknowledgement a renewal needs before the holder's lease
    /// counts as extended, and the response timeout `WAIT` adds to.
    pub(crate) acks: ReplicaAcks,
    pub(crate) response_timeout: Duration,
}

impl Entry {
    fn interval(&self) -> Duration {
        self.lease / 3
    }

    /// Renewals may go out this much before they are due, so that entries
    /// due close together share a pipeline.
    fn window(&self) -> Duration {
        if self.renew {
            self.interval() / 8
        } else {
            Duration::ZERO
        }
    }

    /// After a failed round trip, retry this soon (well before the next
    /// regular renewal).
    fn retry_delay(&self) -> Duration {
        (self.interval() / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    fn lease_ms(&self) -> u64 {
        self.lease.as_millis().clamp(1, u64::MAX as u128) as u64
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    fn finished(&self) -> bool {
        self.state.is_released() || self.state.is_marked_lost()
    }
}

/// What one renewal round trip said about one entry.
enum Outcome {
    Renewed,
    Gone,
    Failed(Error),
}

/// A server: (the deployment's source, as an address, and the node).
type Server = (usize, NodeId);

/// A batch of renewals back from its I/O thread.
struct Done {
    server: Server,
    /// The I/O thread's last batch: the server takes new work again.
    last: bool,
    sent: Instant,
    results: Vec<(Entry, Outcome)>,
}

/// Sends the closing `Done` of an I/O thread however it ends, so a panic in
/// it cannot leave its server marked busy for good.
struct Closing<'a> {
    done: &'a Sender<Done>,
    server: Server,
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        let _ = self.done.send(Done {
            server: self.server,
            last: true,
            sent: Instant::now(),
            results: Vec::new(),
        });
    }
}

enum Command {
    /// New entries are waiting in the pending list.
    Wake,
    /// A client went away: drop its entries (releasing its locks first when
    /// its counters say so); then answer on `done`.
    ClientGone {
        counters: Arc<Counters>,
        done: Option<Sender<()>>,
    },
}

struct Shared {
    pending: Mutex<Vec<(Instant, Entry)>>,
    /// When the thread plans to wake next (nanos since the origin); 0 while
    /// it is awake and will look at the pending list again before sleeping.
    next_wake: AtomicU64,
    wake_sent: AtomicBool,
    commands: Sender<Command>,
}

static WATCHDOG: LazyLock<Arc<Shared>> = LazyLock::new(|| {
    let (tx, rx) = crossbeam_channel::unbounded();
    let shared = Arc::new(Shared {
        pending: Mutex::new(Vec::new()),
        next_wake: AtomicU64::new(u64::MAX),
        wake_sent: AtomicBool::new(false),
        commands: tx,
    });
    let for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("redguard-watchdog".into())
        .spawn(move || run(&for_thread, &rx));
    if let Err(e) = spawned {
        log::error!(
            "redguard: could not start the watchdog thread: {e}; leases will not be renewed"
        );
    }
    shared
});

/// Pending entries that make the thread wake up to take them, although none
/// falls due soon. Short holds leave their entries in the pending list until
/// the thread next wakes (up to a renewal period later); this bounds that
/// list, and with it the memory of released entries nobody looks at, to a
/// few hundred kilobytes, at the cost of one wake-up per this many locks.
const PENDING_WAKE: usize = 1024;

/// Script calls (of at most `renew_batch` renewals each) sent to one server
/// in one round trip. A 3 s lease over 100 000 locks means 1 000 calls a
/// second; one round trip each leaves the renewing thread and the server
/// waking each other 2 000 times a second, which on a busy machine costs
/// more than the renewals themselves.
const CALLS_PER_ROUND_TRIP: usize = 16;

/// Hands a newly held lock to the watchdog. Its first renewal (or, for a
/// fixed lease, its expiry) is due at `due`.
pub(crate) fn register(entry: Entry, due: Instant) {
    let shared = &*WATCHDOG;
    let pending = {
        let mut list = shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        list.push((due, entry));
        list.len()
    };
    if (pending >= PENDING_WAKE || nanos(due) < shared.next_wake.load(Ordering::SeqCst))
        && !shared.wake_sent.swap(true, Ordering::SeqCst)
    {
        let _ = shared.commands.send(Command::Wake);
    }
}

/// Drops every entry of the client owning `counters`, first releasing its
/// locks on Redis when `release` is set. Waits at most `wait` for the
/// watchdog to finish.
pub(crate) fn client_gone(counters: &Arc<Counters>, release: bool, wait: Option<Duration>) {
    counters.release_when_gone.store(release, Ordering::Release);
    counters.gone.store(true, Ordering::Release);
    let (done, finished) = match wait {
        Some(_) => {
            let (tx, rx) = crossbeam_channel::bounded(1);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let _ = WATCHDOG.commands.send(Command::ClientGone {
        counters: counters.clone(),
        done,
    });
    if let (Some(rx), Some(wait)) = (finished, wait) {
        let _ = rx.recv_timeout(wait);
    }
}

struct Watchdog<'a> {
    shared: &'a Shared,
    commands: &'a Receiver<Command>,
    schedule: Schedule<Entry>,
    /// Servers with an I/O thread at work, and the entries that fell due
    /// for them meanwhile: they go out together when it is done. One
    /// thread per server at a time, so that a tick's stragglers do not
    /// each cost a thread and a round trip of their own.
    busy: HashMap<Server, Vec<Entry>>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
}

fn run(shared: &Shared, commands: &Receiver<Command>) {
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut dog = Watchdog {
        shared,
        commands,
        schedule: Schedule::default(),
        busy: HashMap::new(),
        done_tx,
        done_rx,
    };
    loop {
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dog.step()));
        match step {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => log::error!("redguard watchdog: a renewal round panicked; continuing"),
        }
    }
}

impl Watchdog<'_> {
    /// One turn: take pending entries, send what is due, then sleep until
    /// the next due entry, a command or a finished batch. `false` when the
    /// thread should end.
    fn step(&mut self) -> bool {
        self.shared.next_wake.store(0, Ordering::SeqCst);
        self.take_pending();
        self.dispatch_due(Instant::now());

        let next = self.schedule.next_due();
        self.shared
            .next_wake
            .store(next.map_or(u64::MAX, nanos), Ordering::SeqCst);
        // An entry pushed after `take_pending` but before the store above
        // saw `next_wake == 0` and did not wake us: look once more.
        if !self
            .shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
        {
            return true;
        }
        let timeout = match next {
            Some(at) => crossbeam_channel::at(at),
            None => crossbeam_channel::never(),
        };
        crossbeam_channel::select! {
            recv(self.commands) -> cmd => match cmd {
                Ok(Command::Wake) => self.shared.wake_sent.store(false, Ordering::SeqCst),
                Ok(Command::ClientGone { counters, done }) => {
                    self.take_pending();
                    self.drop_client(&counters);
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
                Err(_) => return false,
            },
            recv(self.done_rx) -> done => {
                if let Ok(done) = done {
                    self.apply(done);
                }
            },
            recv(timeout) -> _ => {},
        }
        true
    }

    fn take_pending(&mut self) {
        let pending = std::mem::take(
            &mut *self
                .shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (due, entry) in pending {
            if entry.finished() {
                continue;
            }
            entry
                .counters
                .watchdog_entries
                .fetch_add(1, Ordering::Relaxed);
            self.schedule.insert(due, entry);
        }
    }

    /// Hands every due renewal to an I/O thread, one per server; a server
    /// whose thread is still at work gets them when it is done.
    fn dispatch_due(&mut self, now: Instant) {
        let mut groups: HashMap<Server, Vec<Entry>> = HashMap::new();
        // Straight from the schedule into the groups: with 100 000 held
        // locks a tick's due entries are many megabytes, copied once.
        while let Some(entry) = self.schedule.pop_one_due(now, Entry::window) {
            let Some(entry) = still_wanted(entry) else {
                continue;
            };
            if !entry.renew {
                let valid_until = entry.state.valid_until();
                if valid_until > now {
                    // Extended meanwhile (`LockGuard::extend`): look again then.
                    self.schedule.insert(valid_until, entry);
                    continue;
                }
                // A fixed lease ran out: the lock is gone on the server.
                entry.state.mark_lost();
                forget(entry);
                continue;
            }
            let node = entry.source.node_of(&entry.key);
            let server = (Arc::as_ptr(&entry.source) as usize, node);
            match self.busy.get_mut(&server) {
                Some(waiting) => waiting.push(entry),
                None => groups.entry(server).or_default().push(entry),
            }
        }
        for (server, entries) in groups {
            self.start(server, entries);
        }
    }

    /// Starts an I/O thread renewing `entries`, all on `server`.
    fn start(&mut self, server: Server, entries: Vec<Entry>) {
        let Some(first) = entries.first() else {
            return;
        };
        first.counters.renewal_ticks.fetch_add(1, Ordering::Relaxed);
        let done_tx = self.done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("redguard-renew".into())
            .spawn(move || renew_group(server, entries, &done_tx));
        match spawned {
            Ok(_) => {
                self.busy.insert(server, Vec::new());
            }
            // Entries moved into the failed closure are gone with it;
            // their guards see the lease run out on their own clock.
            Err(e) => log::error!("redguard watchdog: cannot start a renewal thread: {e}"),
        }
    }

    /// Applies the outcome of one batch; after a server's last batch, sends
    /// what fell due for it meanwhile.
    fn apply(&mut self, done: Done) {
        let now = Instant::now();
        if done.last
            && let Some(waiting) = self.busy.remove(&done.server)
        {
            let waiting: Vec<Entry> = waiting.into_iter().filter_map(still_wanted).collect();
            self.start(done.server, waiting);
        }
        for (entry, outcome) in done.results {
            let Some(entry) = still_wanted(entry) else {
                continue;
            };
            match outcome {
                Outcome::Renewed => {
                    entry
                        .state
                        .extend_to(done.sent + entry.lease - clock_drift(entry.lease));
                    self.schedule.insert(done.sent + entry.interval(), entry);
                }
                Outcome::Gone => {
                    log::warn!(
                        "redguard: lease of lock {:?} lost: the renewal found it no longer held by {}",
                        entry.name(),
                        entry.holder
                    );
                    entry.state.mark_lost();
                    forget(entry);
                }
                Outcome::Failed(e) => self.retry_or_lose(entry, now, &e),
            }
        }
    }

    fn retry_or_lose(&mut self, entry: Entry, now: Instant, err: &Error) {
        let valid_until = entry.state.valid_until();
        if now >= valid_until {
            log::warn!(
                "redguard: lease of lock {:?} lost: no renewal succeeded before it ran out (last error: {err})",
                entry.name()
            );
            entry.state.mark_lost();
            forget(entry);
            return;
        }
        log::debug!(
            "redguard: renewal of lock {:?} failed ({err}); retrying",
            entry.name()
        );
        let retry = (now + entry.retry_delay()).min(valid_until);
        self.schedule.insert(retry, entry);
    }

    fn drop_client(&mut self, counters: &Arc<Counters>) {
        let entries = self
            .schedule
            .extract(|e| Arc::ptr_eq(&e.counters, counters));
        release_gone(entries);
    }
}

/// `Some(entry)` when it still needs the watchdog; otherwise disposes of it:
/// released or lost entries are dropped, and entries of a client that went
/// (perhaps while their renewal was in flight) are released as it asked.
fn still_wanted(entry: Entry) -> Option<Entry> {
    if entry.finished() {
        forget(entry);
        return None;
    }
    if entry.counters.gone.load(Ordering::Acquire) {
        release_gone(vec![entry]);
        return None;
    }
    Some(entry)
}

fn forget(entry: Entry) {
    entry
        .counters
        .watchdog_entries
        .fetch_sub(1, Ordering::Relaxed);
}

/// Drops entries of a gone client, releasing their locks first when the
/// client asked for it.
fn release_gone(entries: Vec<Entry>) {
    for entry in entries {
        let release = entry.counters.release_when_gone.load(Ordering::Acquire);
        if release && !entry.finished() {
            let released = entry.source.with_conn(&entry.key, |conn| {
                scripts::release_holder(
                    conn,
                    &entry.key,
                    &entry.channel,
                    entry.queue.as_deref(),
                    &entry.holder,
                )
            });
            if let Err(e) = released {
                log::warn!(
                    "redguard: could not release lock {:?} at client shutdown: {e}",
                    entry.name()
                );
            }
        }
        entry.state.mark_lost();
        forget(entry);
    }
}

/// Runs on an I/O thread: renews `entries` (all on one server) in batches
/// and sends each batch's outcome back.
fn renew_group(server: Server, entries: Vec<Entry>, done: &Sender<Done>) {
    let _closing = Closing { done, server };
    let node = server.1;
    let Some(first) = entries.first() else {
        return;
    };
    let per_call = first.renew_batch.max(1);
    let per_trip = per_call * CALLS_PER_ROUND_TRIP;
    let source = first.source.clone();
    let counters = first.counters.clone();
    let mut entries = entries.into_iter().peekable();
    while entries.peek().is_some() {
        let chunk: Vec<Entry> = entries.by_ref().take(per_trip).collect();
        let renewals: Vec<Renewal<'_>> = chunk
            .iter()
            .map(|e| Renewal {
                key: &e.key,
                holder: &e.holder,
                lease_ms: e.lease_ms(),
            })
            .collect();
        let sent = Instant::now();
        counters
            .renewals
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        counters.renewal_round_trips.fetch_add(1, Ordering::Relaxed);
        // One WAIT after the batch, on its connection, for the most any of
        // its locks asks (see `replicas`).
        let acks = chunk
            .iter()
            .map(|e| e.acks)
            .max_by_key(|a| (a.min, a.timeout))
            .unwrap_or_default();
        let response_timeout = chunk
            .first()
            .map_or(Duration::from_secs(3), |e| e.response_timeout);
        let replies = source.with_node_conn(node, |conn| {
            let replies = scripts::renew_batch(conn, &renewals, per_call)?;
            let acked = acks.wait(conn, response_timeout)?;
            Ok((replies, acked))
        });
        drop(renewals);
        let results = match replies {
            Ok((replies, acked)) => chunk
                .into_iter()
                .zip(replies)
                .map(|(entry, reply)| {
                    let outcome = match reply {
                        // Extended on the master only: a failover could
                        // bring back the shorter lease, so the holder's
                        // lease does not count as extended; retried.
                        Ok(true) if entry.acks.short(acked) => {
                            Outcome::Failed(Error::NotReplicated {
                                name: entry.name(),
                                acked: acked.unwrap_or(0),
                                wanted: u64::from(entry.acks.min),
                            })
                        }
                        Ok(true) => Outcome::Renewed,
                        Ok(false) => Outcome::Gone,
                        // Another type now lives at the key: the lock is gone.
                        Err(Error::WrongType { .. }) => Outcome::Gone,
                        Err(e) => Outcome::Failed(e),
                    };
                    (entry, outcome)
                })
                .collect(),
            Err(e) => {
                let text = e.to_string();
                chunk
                    .into_iter()
                    .map(|entry| (entry, Outcome::Failed(Error::Timeout(text.clone()))))
                    .collect::<Vec<_>>()
            }
        };
        let batch = Done {
            server,
            last: false,
            sent,
            results,
        };
        if done.send(batch).is_err() {
            return;
        }
    }
}
