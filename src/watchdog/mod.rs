//! The watchdog: ONE thread per process ("redguard-watchdog"), shared by
//! every `Client`, renewing the lease of every lock held with the watchdog
//! while its holder lives.
//!
//! Holders hand entries over through a pending list and wake the thread only
//! when the new entry falls due before the thread's next planned wake-up, so
//! a steady stream of short holds costs no thread wake-ups. Releases never
//! talk to the thread: the releaser marks the shared [`LeaseState`] released
//! (synchronously, before `unlock` returns) and the thread drops such entries
//! when it meets them. Renewals that fall due together go to each server as
//! pipelines of at most `renew_batch` scripts: one round trip per batch,
//! never one per lock.

mod schedule;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::config::clock_drift;
use crate::lease::{Counters, LeaseState, nanos};
use crate::scripts::{self, Renewal};
use crate::source::{NodeId, Source};
use schedule::Schedule;

/// One held lock as the watchdog sees it.
pub(crate) struct Entry {
    pub(crate) client: u128,
    pub(crate) key: Arc<[u8]>,
    pub(crate) channel: Arc<[u8]>,
    pub(crate) holder: Arc<str>,
    /// The lease applied at each renewal.
    pub(crate) lease: Duration,
    /// `false` for locks taken with an explicit lease: tracked (for release
    /// at shutdown) but never renewed.
    pub(crate) renew: bool,
    pub(crate) renew_batch: usize,
    pub(crate) state: Arc<LeaseState>,
    pub(crate) source: Arc<Source>,
    pub(crate) counters: Arc<Counters>,
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

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

enum Command {
    /// New entries are waiting in the pending list.
    Wake,
    /// A client went away: drop its entries, releasing its locks first
    /// when `release` is set; then answer on `done`.
    ClientGone {
        client: u128,
        release: bool,
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

/// Hands a newly held lock to the watchdog. Its first renewal (or, for a
/// fixed lease, its expiry) is due at `due`.
pub(crate) fn register(entry: Entry, due: Instant) {
    let shared = &*WATCHDOG;
    shared
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((due, entry));
    if nanos(due) < shared.next_wake.load(Ordering::SeqCst)
        && !shared.wake_sent.swap(true, Ordering::SeqCst)
    {
        let _ = shared.commands.send(Command::Wake);
    }
}

/// Drops every entry of `client`, first releasing its locks on Redis when
/// `release` is set. Waits at most `wait` for the watchdog to finish.
pub(crate) fn client_gone(client: u128, release: bool, wait: Option<Duration>) {
    let (done, finished) = match wait {
        Some(_) => {
            let (tx, rx) = crossbeam_channel::bounded(1);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let _ = WATCHDOG.commands.send(Command::ClientGone {
        client,
        release,
        done,
    });
    if let (Some(rx), Some(wait)) = (finished, wait) {
        let _ = rx.recv_timeout(wait);
    }
}

fn run(shared: &Shared, commands: &Receiver<Command>) {
    let mut schedule: Schedule<Entry> = Schedule::default();
    loop {
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            step(shared, commands, &mut schedule)
        }));
        match step {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => log::error!("redguard watchdog: a renewal round panicked; continuing"),
        }
    }
}

/// One turn of the loop: take pending entries, renew what is due, sleep
/// until the next due entry or a command. `false` when the thread should end.
fn step(shared: &Shared, commands: &Receiver<Command>, schedule: &mut Schedule<Entry>) -> bool {
    shared.next_wake.store(0, Ordering::SeqCst);
    take_pending(shared, schedule);
    renew_due(schedule, Instant::now());

    let next = schedule.next_due();
    shared
        .next_wake
        .store(next.map_or(u64::MAX, nanos), Ordering::SeqCst);
    // An entry pushed after `take_pending` but before the store above saw
    // `next_wake == 0` and did not wake us: look once more.
    if !shared
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_empty()
    {
        return true;
    }
    let received = match next {
        Some(at) => commands.recv_deadline(at),
        None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
    };
    match received {
        Ok(Command::Wake) => shared.wake_sent.store(false, Ordering::SeqCst),
        Ok(Command::ClientGone {
            client,
            release,
            done,
        }) => {
            take_pending(shared, schedule);
            drop_client(schedule, client, release);
            if let Some(done) = done {
                let _ = done.send(());
            }
        }
        Err(RecvTimeoutError::Timeout) => {}
        Err(RecvTimeoutError::Disconnected) => return false,
    }
    true
}

fn take_pending(shared: &Shared, schedule: &mut Schedule<Entry>) {
    let pending = std::mem::take(
        &mut *shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for (due, entry) in pending {
        if entry.state.is_released() || entry.state.is_marked_lost() {
            continue;
        }
        entry
            .counters
            .watchdog_entries
            .fetch_add(1, Ordering::Relaxed);
        schedule.insert(due, entry);
    }
}

fn forget(entry: Entry) {
    entry
        .counters
        .watchdog_entries
        .fetch_sub(1, Ordering::Relaxed);
}

fn renew_due(schedule: &mut Schedule<Entry>, now: Instant) {
    let due = schedule.pop_due(now, Entry::window);
    if due.is_empty() {
        return;
    }
    // Group by (deployment, node): one pipeline per server per batch.
    let mut groups: HashMap<(usize, NodeId), Vec<Entry>> = HashMap::new();
    for entry in due {
        if entry.state.is_released() || entry.state.is_marked_lost() {
            forget(entry);
            continue;
        }
        if !entry.renew {
            let valid_until = entry.state.valid_until();
            if valid_until > now {
                // Extended meanwhile (`LockGuard::extend`): look again then.
                schedule.insert(valid_until, entry);
                continue;
            }
            // A fixed lease ran out: the lock is gone on the server.
            entry.state.mark_lost();
            forget(entry);
            continue;
        }
        let node = entry.source.node_of(&entry.key);
        let source = Arc::as_ptr(&entry.source) as usize;
        groups.entry((source, node)).or_default().push(entry);
    }
    for ((_, node), entries) in groups {
        let batch = entries.first().map_or(1, |e| e.renew_batch.max(1));
        let mut entries = entries.into_iter().peekable();
        while entries.peek().is_some() {
            let chunk: Vec<Entry> = entries.by_ref().take(batch).collect();
            renew_chunk(schedule, node, chunk);
        }
    }
}

fn renew_chunk(schedule: &mut Schedule<Entry>, node: NodeId, chunk: Vec<Entry>) {
    let Some(first) = chunk.first() else {
        return;
    };
    let source = first.source.clone();
    let lease_ms: Vec<u64> = chunk
        .iter()
        .map(|e| e.lease.as_millis().clamp(1, u64::MAX as u128) as u64)
        .collect();
    let renewals: Vec<Renewal<'_>> = chunk
        .iter()
        .zip(&lease_ms)
        .map(|(e, ms)| Renewal {
            key: &e.key,
            holder: &e.holder,
            lease_ms: *ms,
        })
        .collect();
    let sent = Instant::now();
    let replies = source.with_node_conn(node, |conn| scripts::renew_batch(conn, &renewals));
    drop(renewals);
    let now = Instant::now();
    match replies {
        Ok(replies) => {
            for (entry, reply) in chunk.into_iter().zip(replies) {
                match reply {
                    Ok(true) => {
                        entry
                            .state
                            .extend_to(sent + entry.lease - clock_drift(entry.lease));
                        schedule.insert(sent + entry.interval(), entry);
                    }
                    Ok(false) => {
                        if !entry.state.is_released() {
                            log::warn!(
                                "redguard: lease of lock {:?} lost: the renewal found it no longer held by {}",
                                entry.name(),
                                entry.holder
                            );
                            entry.state.mark_lost();
                        }
                        forget(entry);
                    }
                    Err(e) if matches!(e, crate::Error::WrongType { .. }) => {
                        log::warn!(
                            "redguard: lease of lock {:?} lost: the key now holds another type",
                            entry.name()
                        );
                        entry.state.mark_lost();
                        forget(entry);
                    }
                    Err(e) => retry_or_lose(schedule, entry, now, &e),
                }
            }
        }
        Err(e) => {
            for entry in chunk {
                retry_or_lose(schedule, entry, now, &e);
            }
        }
    }
}

fn retry_or_lose(schedule: &mut Schedule<Entry>, entry: Entry, now: Instant, err: &crate::Error) {
    if entry.state.is_released() {
        forget(entry);
        return;
    }
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
    schedule.insert(retry, entry);
}

fn drop_client(schedule: &mut Schedule<Entry>, client: u128, release: bool) {
    let entries = schedule.extract(|e| e.client == client);
    for entry in entries {
        if release && !entry.state.is_released() && !entry.state.is_marked_lost() {
            let released = entry.source.with_conn(&entry.key, |conn| {
                scripts::release_holder(conn, &entry.key, &entry.channel, &entry.holder)
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
