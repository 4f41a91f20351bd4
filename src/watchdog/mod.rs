//! The watchdog: ONE scheduling thread per process ("redguard-watchdog"),
//! shared by every `Client`, renewing the lease of every lock held with the
//! watchdog while its holder lives, plus one long-lived I/O worker per
//! server ("redguard-renew", see [`worker`]) that does all its network I/O.
//!
//! * Holders hand entries over through a pending list and wake the thread
//!   only when the new entry falls due before the thread's next planned
//!   wake-up or the list grows long, so a steady stream of short holds
//!   costs one thread wake-up per thousand locks.
//! * Releases never talk to the thread: the releaser marks the shared
//!   [`LeaseState`] released (synchronously, before `unlock` returns) and the
//!   thread drops such entries when it meets them, or sweeps them out of
//!   its schedule within a second: nothing of a name stays.
//! * Renewals that fall due together go to each server as multi-key script
//!   calls of at most `renew_batch` renewals, several calls per round trip:
//!   never one round trip per lock.
//! * The scheduling thread never waits on the network. Each server's due
//!   renewals, the release of a departed client's locks and the undo of a
//!   grant whose reply was lost go to that server's worker over a channel,
//!   and renewal results come back the same way: a hung or frozen server
//!   delays only its own work. A worker has at most one renewal job at a
//!   time; renewals falling due meanwhile go out together after it.
//! * Loss is looked for at once, not at the next renewal: when a server
//!   closes the worker's watch connection or the subscriber's pub/sub
//!   connection, or comes back with a new `run_id`, every lease held there
//!   is renewed in one pipelined round trip (fixed leases are looked up
//!   instead), and a renewal answering 0 marks its lease lost.
//! * A force unlock is heard at once: this thread hands every lock hold
//!   that lasted [`crate::lease::LISTEN_AFTER`] to its client's
//!   subscriber, which listens on the lock's channel; an unlock message
//!   there hands the live holds to [`verify`], which renews (or looks up)
//!   just those in one round trip; an answer of 0 marks the lease lost.
//!   New holds wake the thread at that pace at most, so that a short hold
//!   costs nothing more than its pending entry.
//! * A lease runs out on this thread's clock, wherever its entry is: the
//!   thread keeps what it needs of the entries at a worker (and of those
//!   waiting for its job), so a worker held up by a hung server does not
//!   delay the news of a loss past the lease's local deadline.
//! * Threads are bounded: this one, plus one worker per server in use. The
//!   thread starts with the first held lock and ends, with every worker,
//!   once no client is left; a later client starts it again.

mod records;
pub(crate) mod retried;
mod schedule;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::connection::{NodeId, Source};
use crate::context::ClientContext;
use crate::error::Error;
use crate::lease::clock_drift;
use crate::lease::{Counters, Lapse, LeaseState, nanos};
use crate::lost::{HoldKind, LossReason};
use crate::record::{self, RecordWrite};
use crate::replicas::ReplicaAcks;
use crate::retry::Backoff;
use crate::scripts::SyncHold;
use records::RecordState;

use retried::Retry;
use schedule::Schedule;
use worker::{Done, Job, Report};

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
    /// What the hold is, for the lost-lease hooks.
    pub(crate) kind: HoldKind,
    pub(crate) context: Arc<ClientContext>,
    /// When the lease was last known held: the send time of the granting
    /// script, then of each renewal (or look-up) that found it held. A
    /// server restart after it explains a loss.
    pub(crate) renewed_at: Instant,
    /// Replica acknowledgement a renewal needs before the holder's lease
    /// counts as extended, and the response timeout `WAIT` adds to.
    pub(crate) acks: ReplicaAcks,
    pub(crate) response_timeout: Duration,
    /// `None` for a lock-hash field (renewed by multi-key batches); for the
    /// holds of read-write locks and expiring permits, which of their
    /// scripts renew, check and release it.
    pub(crate) sync: Option<Box<SyncHold>>,
    /// For a fixed lease (`renew == false`): how often it is looked up
    /// before its end. `None`: only at its end, to mark it over. Fixed read
    /// holds have it, since another client may shorten them (Redisson's
    /// read-lock watchdog sets every read hold's expiry to its own
    /// `lockWatchdogTimeout`): each look-up restores what was cut, and a
    /// hold whose cut lease ran out meanwhile is lost.
    pub(crate) recheck: Option<Duration>,
    /// How its release at client shutdown wakes waiters (the client's
    /// setting).
    pub(crate) classic_publish: crate::ClassicPublish,
    /// The node whose worker counts this entry and whose holder record
    /// keeps its hold, once the watchdog has taken it in ([`UNHOMED`]
    /// before). On a Cluster the lock's slot may move to another master
    /// while it is held: the entry then moves with it (see
    /// [`Watchdog::rehome`]). A `u32`: it fits beside the entry's flags,
    /// where a `usize` would add a word to each of 100,000 holds.
    pub(crate) home: u32,
    /// A lock hold, whose channel a force unlock publishes on: listened
    /// for once it lasted [`crate::lease::LISTEN_AFTER`].
    pub(crate) listen: bool,
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

    /// When a fixed lease is next looked at, from `now`: its end, or its
    /// next look-up before that.
    fn next_look(&self, now: Instant) -> Instant {
        let end = self.state.valid_until();
        self.recheck.map_or(end, |every| end.min(now + every))
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

    fn server(&self) -> Server {
        (
            Arc::as_ptr(&self.source) as usize,
            self.source.node_of(&self.key),
        )
    }

    /// The server the watchdog counts this entry on (see [`Entry::home`]).
    fn home_server(&self) -> Server {
        if self.home == UNHOMED {
            return self.server();
        }
        (Arc::as_ptr(&self.source) as usize, self.home as NodeId)
    }
}

/// [`Entry::home`] of an entry the watchdog has not taken in yet.
pub(crate) const UNHOMED: u32 = u32::MAX;

/// What one renewal round trip said about one entry.
enum Outcome {
    Renewed,
    /// A fixed lease, looked up by a check: still there, not extended.
    Held,
    /// The holder no longer holds it, for the reason the worker found.
    Gone(LossReason),
    /// The renewal did not get an answer; the error keeps its kind
    /// (connection, authentication, timeout, ...). Shared by every renewal
    /// of a round trip that failed as a whole.
    Failed(Arc<Error>),
}

/// A server: (the deployment's source, as an address, and the node). The
/// watchdog keeps a `Weak` of the source beside it, so the address cannot
/// be reused by another source while the key is in use.
type Server = (usize, NodeId);

enum Command {
    /// New entries are waiting in the pending list.
    Wake,
    /// A client went away: drop its entries (releasing its locks first when
    /// its counters say so). `done` is dropped once the releases are over.
    ClientGone {
        counters: Arc<Counters>,
        done: Option<Sender<()>>,
    },
    /// The last client went: the thread looks whether it should end.
    Detached,
    /// The pub/sub connection of the source at this address broke: check
    /// every lease held on its servers.
    Suspect(usize),
    /// An operation on a held lease met a failover: hand it to the worker
    /// of its key's server.
    Retry(Retry),
    /// An unlock message came on the channel of these holds: check each
    /// now.
    Verify(Vec<Arc<LeaseState>>),
    /// A recorded wait ended without a recorded hold: its field goes with
    /// the next record write on its server.
    WaitEnded(Box<WaitEnded>),
}

/// A wait's field to delete from a client's record on one server.
pub(crate) struct WaitEnded {
    source: Arc<Source>,
    node: NodeId,
    spec: Arc<record::RecordSpec>,
    counters: Arc<Counters>,
    field: Vec<u8>,
}

/// Whether the thread runs and how many clients exist.
#[derive(Default)]
struct Life {
    clients: usize,
    running: bool,
}

struct Shared {
    pending: Mutex<Vec<(Instant, Entry)>>,
    /// The fields of waits that ended in a hold registered since, pushed
    /// with the hold's entry under the `pending` lock: each is deleted by
    /// the record write that records its hold (kept apart from [`Entry`],
    /// which a held lock keeps for as long as it is held).
    ended_waits: Mutex<Vec<(Server, Vec<u8>)>>,
    /// When the thread plans to wake next (nanos since the origin); 0 while
    /// it is awake and will look at the pending list again before sleeping.
    next_wake: AtomicU64,
    wake_sent: AtomicBool,
    /// Both ends live here, so commands sent while no thread runs wait for
    /// the next one. The thread ends by counting clients, not by
    /// disconnection.
    commands: Sender<Command>,
    receiver: Receiver<Command>,
    life: Mutex<Life>,
    /// `life.running`, readable without the lock on the grant path.
    running: AtomicBool,
    /// (entries, room) of the schedule, the holds waiting to be listened
    /// for and the holds to verify, as the thread last left them (see
    /// [`residue`]).
    sizes: [AtomicUsize; 6],
}

impl Shared {
    fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the thread unless it runs. `false` when it cannot be started.
    fn ensure_running(&'static self) -> bool {
        if self.running.load(Ordering::Acquire) {
            return true;
        }
        let mut life = self.life();
        if life.running {
            return true;
        }
        let spawned = std::thread::Builder::new()
            .name("redguard-watchdog".into())
            .spawn(move || {
                // Its calls are retried on its own schedule.
                crate::connection::budget::set_call(crate::connection::budget::Call::Background);
                run(self);
            });
        match spawned {
            Ok(_) => {
                life.running = true;
                self.running.store(true, Ordering::Release);
                true
            }
            Err(e) => {
                log::error!(
                    "redguard: could not start the watchdog thread: {e}; leases will not be renewed"
                );
                false
            }
        }
    }
}

static WATCHDOG: LazyLock<Shared> = LazyLock::new(|| {
    let (commands, receiver) = crossbeam_channel::unbounded();
    Shared {
        pending: Mutex::new(Vec::new()),
        ended_waits: Mutex::new(Vec::new()),
        next_wake: AtomicU64::new(u64::MAX),
        wake_sent: AtomicBool::new(false),
        commands,
        receiver,
        life: Mutex::new(Life::default()),
        running: AtomicBool::new(false),
        sizes: Default::default(),
    }
});

/// What the watchdog keeps per hold, as (entries, room): its schedule, the
/// holds waiting to be listened for, the holds to verify. Process-wide, as
/// the thread last left them. A released hold's entry leaves the schedule
/// within [`PURGE_EVERY`].
pub(crate) fn residue() -> [(usize, usize); 3] {
    let s = &WATCHDOG.sizes;
    let at = |i: usize| s[i].load(Ordering::Relaxed);
    [(at(0), at(1)), (at(2), at(3)), (at(4), at(5))]
}

/// Pending entries that make the thread wake up to take them, although none
/// falls due soon. Short holds leave their entries in the pending list until
/// the thread next wakes (up to a renewal period later); this bounds that
/// list, and with it the memory of released entries nobody looks at, to a
/// few hundred kilobytes, at the cost of one wake-up per this many locks.
const PENDING_WAKE: usize = 1024;

/// How often released holds' entries are taken out of the schedule.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// Full script calls' worth of renewals (`renew_batch` each) sent to one
/// server in one round trip: a round trip carries up to `renew_batch` x
/// this many renewals, however many calls they take. On a cluster a call
/// may not cross a slot, so thinly spread locks make many small calls, all
/// in the same round trip (see `scripts::renew_batch`). A 3 s lease over 100 000 locks means 1 000 calls a
/// second; one round trip each leaves the renewing thread and the server
/// waking each other 2 000 times a second, which on a busy machine costs
/// more than the renewals themselves.
const CALLS_PER_ROUND_TRIP: usize = 16;

/// Counts a new client. Every client calls this once when it is made and
/// [`client_gone`] once when it goes; the thread ends when none is left.
pub(crate) fn attach() {
    WATCHDOG.life().clients += 1;
}

/// Hands a newly held lock to the watchdog. Its first renewal (or, for a
/// fixed lease, its expiry) is due at `due`.
pub(crate) fn register(entry: Entry, due: Instant) {
    let shared: &'static Shared = &WATCHDOG;
    let server = entry.server();
    let ended = record::wait::hand_over(&entry.source, server.1);
    // A client's first lock (after none) wakes the thread at once, so that
    // its server is watched from the start, not from the next wake-up.
    let first = entry.counters.watchdog_entries.load(Ordering::Relaxed) == 0;
    // A hold to listen for wakes the thread when it is due to be listened
    // for, unless something wakes it before.
    let wake_at = if entry.listen {
        due.min(entry.renewed_at + crate::lease::LISTEN_AFTER)
    } else {
        due
    };
    let pending = {
        let mut list = shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(field) = ended {
            // Under the pending list's lock: taken with the entry.
            shared
                .ended_waits
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((server, field));
        }
        list.push((due, entry));
        list.len()
    };
    shared.ensure_running();
    if (first
        || pending >= PENDING_WAKE
        || nanos(wake_at) < shared.next_wake.load(Ordering::SeqCst))
        && !shared.wake_sent.swap(true, Ordering::SeqCst)
    {
        let _ = shared.commands.send(Command::Wake);
    }
}

/// Hands `retry` to the watchdog, started if needed; dropped (ending with
/// its error) when no thread can be started.
fn retry(retry: Retry) {
    let shared: &'static Shared = &WATCHDOG;
    if shared.ensure_running() {
        let _ = shared.commands.send(Command::Retry(retry));
    } else {
        log::error!(
            "redguard: {} cannot be retried without the watchdog thread",
            retry.what
        );
    }
}

/// Tells the watchdog that an unlock message came on the channel of
/// `holds`: each is checked at once, in one round trip per server (a
/// renewal, or a look-up for a fixed lease), and marked lost when it is not
/// held any more. Redisson's `forceUnlock` and redguard's `unlock --force`
/// publish such a message; so does a read-write lock's release by another
/// holder, which leaves these holds be.
pub(crate) fn verify(holds: Vec<Arc<LeaseState>>) {
    let shared: &'static Shared = &WATCHDOG;
    if shared.running.load(Ordering::Acquire) {
        let _ = shared.commands.send(Command::Verify(holds));
    }
}

/// Tells the watchdog that a recorded wait of a client on node `node` of
/// `source` ended without a hold: `field` is deleted from the client's
/// record there with the next record write (within a second).
pub(crate) fn wait_ended(
    source: Arc<Source>,
    node: NodeId,
    spec: Arc<record::RecordSpec>,
    counters: Arc<Counters>,
    field: Vec<u8>,
) {
    let shared: &'static Shared = &WATCHDOG;
    if shared.ensure_running() {
        let _ = shared.commands.send(Command::WaitEnded(Box::new(WaitEnded {
            source,
            node,
            spec,
            counters,
            field,
        })));
    }
}

/// Tells the watchdog that a connection to `source` broke: every lease held
/// there is checked at once.
pub(crate) fn suspect(source: &Arc<Source>) {
    let shared: &'static Shared = &WATCHDOG;
    if shared.running.load(Ordering::Acquire) {
        let _ = shared
            .commands
            .send(Command::Suspect(Arc::as_ptr(source) as usize));
    }
}

/// Drops every entry of the client owning `counters`, first releasing its
/// locks on Redis when `release` is set, and stops counting the client.
/// Waits at most `wait` for the releases to be over.
pub(crate) fn client_gone(counters: &Arc<Counters>, release: bool, wait: Option<Duration>) {
    counters.release_when_gone.store(release, Ordering::Release);
    counters.gone.store(true, Ordering::Release);
    let shared: &'static Shared = &WATCHDOG;
    let (done, finished) = match wait {
        Some(_) => {
            let (tx, rx) = crossbeam_channel::bounded::<()>(1);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    // A client that never held a lock never started the thread: there is
    // nothing of it to drop. Sent before the client stops being counted, so
    // that the thread cannot end without it.
    if shared.running.load(Ordering::Acquire) {
        let _ = shared.commands.send(Command::ClientGone {
            counters: counters.clone(),
            done,
        });
    } else {
        // Nothing to wait for: the wait below ends at once.
        drop(done);
    }
    {
        let mut life = shared.life();
        life.clients = life.clients.saturating_sub(1);
        if life.clients == 0 && life.running {
            let _ = shared.commands.send(Command::Detached);
        }
    }
    if let (Some(rx), Some(wait)) = (finished, wait) {
        // Ends early when every release job dropped its `done`.
        let _ = rx.recv_timeout(wait);
    }
}

/// The scheduling thread's view of one server.
struct ServerState {
    jobs: Sender<Job>,
    source: Weak<Source>,
    /// Entries on this server the watchdog owns (scheduled, waiting, or at
    /// the worker): the worker watches the server while there are any.
    entries: usize,
    /// `Some` while a renewal job is at the worker: the entries that fell
    /// due meanwhile, sent together when it is done. One renewal job per
    /// server at a time, so that a tick's stragglers, or the ticks of a
    /// frozen server, do not each cost a job and a round trip of their own.
    busy: Option<Vec<Entry>>,
    /// What this thread keeps of the entries at the worker (see [`Sent`]).
    sent: Vec<Sent>,
    /// No lease at the worker or waiting in `busy` runs out before this
    /// (a lower bound: leases only move later): the thread looks at them
    /// then, however long the worker is held up.
    held_until: Option<Instant>,
    /// When the server was last suspected of having lost its data:
    /// renewals sent before that are checked again.
    suspect_at: Option<Instant>,
    /// Renewals that failed, waiting for the server's next attempt: one
    /// pause per server, however many leases wait.
    retry: Option<Retrying>,
    /// The pauses between those attempts; `None` while renewals succeed.
    backoff: Option<Backoff>,
    /// Renewals failed since the last round trip that went through (the
    /// warning is logged once per streak, and when it ends).
    failing: bool,
    /// The client's holder record there, when it keeps one.
    record: Option<RecordState>,
}

impl ServerState {
    /// The state of a server whose worker was just started: nothing at it.
    fn new(jobs: Sender<Job>, source: Weak<Source>) -> ServerState {
        ServerState {
            jobs,
            source,
            entries: 0,
            busy: None,
            sent: Vec::new(),
            held_until: None,
            suspect_at: None,
            retry: None,
            backoff: None,
            failing: false,
            record: None,
        }
    }

    /// When the holder record here needs a write of its own, if it does
    /// (it lives while the client holds something on the server).
    fn record_due_at(&self, now: Instant) -> Option<Instant> {
        self.record.as_ref()?.due_at(self.entries > 0, now)
    }

    /// The renewal job at the worker is over (done, or never sent): what
    /// the thread kept of its entries goes, and the entries that waited
    /// for it are handed back.
    fn job_over(&mut self) -> Option<Vec<Entry>> {
        self.sent.clear();
        self.held_until = None;
        self.busy.take()
    }
}

/// An entry at a worker, as the scheduling thread keeps it: enough to mark
/// its lease lost and tell the hooks at its local deadline while the worker
/// is held up (a blackholed server costs it a response timeout per round
/// trip, a reconnect more), instead of whenever the worker gets to report.
/// The entry's own report, later, finds it lost and only drops it.
struct Sent {
    state: Arc<LeaseState>,
    key: Arc<[u8]>,
    holder: Arc<str>,
    kind: HoldKind,
    context: Arc<ClientContext>,
}

impl Sent {
    fn of(entry: &Entry) -> Sent {
        Sent {
            state: entry.state.clone(),
            key: entry.key.clone(),
            holder: entry.holder.clone(),
            kind: entry.kind,
            context: entry.context.clone(),
        }
    }
}

/// Renewals of one server waiting out a pause after a failed round trip.
struct Retrying {
    entries: Vec<Entry>,
    /// When they go out again.
    at: Instant,
    /// The earliest local deadline among them: that lease is marked lost
    /// then, without another round trip.
    first_deadline: Instant,
}

impl Retrying {
    fn new(at: Instant) -> Retrying {
        Retrying {
            entries: Vec::new(),
            at,
            first_deadline: far_future(at),
        }
    }

    fn push(&mut self, entry: Entry) {
        self.first_deadline = self.first_deadline.min(entry.state.valid_until());
        self.entries.push(entry);
    }

    /// When the thread must look at these entries next.
    fn wake_at(&self) -> Instant {
        self.at.min(self.first_deadline)
    }
}

/// The key of `client`'s holder record under `prefix` on node `node` of
/// `source`; `None`
/// at once when the node serves no slot (the search would try every
/// suffix in vain, on the scheduling thread).
fn record_key(source: &Source, node: NodeId, prefix: &str, client: &str) -> Option<Vec<u8>> {
    if !source.serves_slots(node) {
        return None;
    }
    record::key_for(prefix, client, |key| source.node_of(key) == node)
}

/// The earlier of two optional instants; `None` only when both are.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.into_iter().chain(b).min()
}

/// An instant no deadline reaches (a year after `now`).
fn far_future(now: Instant) -> Instant {
    now + crate::lease::MAX_LEASE
}

struct Watchdog {
    shared: &'static Shared,
    schedule: Schedule<Entry>,
    servers: HashMap<Server, ServerState>,
    reports_tx: Sender<Report>,
    reports_rx: Receiver<Report>,
    /// Holds to check after an unlock message on their channel (by the
    /// address of their lease state), with the message's arrival: a
    /// renewal sent before it says nothing about it.
    verify: HashMap<usize, Instant>,
    /// Lock holds taken from the pending list, to be listened for when
    /// they have lasted [`crate::lease::LISTEN_AFTER`]: the instant
    /// that happens, their channel, their lease and their client's hooks.
    young: std::collections::VecDeque<Young>,
    /// While lock holds come in: when the thread looks at the pending list
    /// next, at the latest.
    listen_tick: Option<Instant>,
    /// When released holds' entries are next taken out of the schedule.
    next_purge: Instant,
}

/// A hold waiting to be listened for (see [`Watchdog::young`]).
type Young = (Instant, Arc<[u8]>, Arc<LeaseState>, Arc<ClientContext>);

fn run(shared: &'static Shared) {
    let (reports_tx, reports_rx) = crossbeam_channel::unbounded();
    let mut dog = Watchdog {
        shared,
        schedule: Schedule::new(Entry::window),
        servers: HashMap::new(),
        reports_tx,
        reports_rx,
        verify: HashMap::new(),
        young: std::collections::VecDeque::new(),
        listen_tick: None,
        next_purge: Instant::now(),
    };
    loop {
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dog.step()));
        match step {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => log::error!("redguard watchdog: a renewal round panicked; continuing"),
        }
    }
    dog.finish();
}

impl Watchdog {
    /// One turn: take pending entries, send what is due, then sleep until
    /// the next due entry, a command or a report. `false` when the thread
    /// should end.
    fn step(&mut self) -> bool {
        self.shared.next_wake.store(0, Ordering::SeqCst);
        if self.listen_tick.is_some_and(|at| at <= Instant::now()) {
            self.listen_tick = None;
        }
        self.take_pending();
        let now = Instant::now();
        self.dispatch_due(now);
        self.retry_due(now);
        self.records_due(now);
        self.held_up(now);
        self.listen_due(now);
        self.purge(now);
        crate::metrics::pending_renewals(self.schedule.len());
        self.note_sizes();

        let next = [
            self.schedule.next_due(),
            self.next_retry(),
            self.next_record(now),
            self.next_held_up(),
            self.young.front().map(|y| y.0),
            self.listen_tick,
            (self.schedule.len() > 0).then_some(self.next_purge),
        ]
        .into_iter()
        .flatten()
        .min();
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
            recv(self.shared.receiver) -> cmd => match cmd {
                Ok(Command::Wake) => self.shared.wake_sent.store(false, Ordering::SeqCst),
                Ok(Command::ClientGone { counters, done }) => {
                    self.take_pending();
                    self.drop_client(&counters, done);
                }
                Ok(Command::Detached) => {}
                Ok(Command::Retry(retry)) => {
                    let source = retry.source.clone();
                    let server = (Arc::as_ptr(&source) as usize, source.node_of(&retry.key));
                    if !self.send(server, &source, Job::Retry(retry)) {
                        log::error!("redguard watchdog: a retry could not reach its worker");
                    }
                }
                Ok(Command::Verify(holds)) => self.verify_holds(holds),
                Ok(Command::WaitEnded(ended)) => self.wait_ended(*ended),
                Ok(Command::Suspect(source)) => {
                    let servers: Vec<Server> = self
                        .servers
                        .keys()
                        .filter(|s| s.0 == source)
                        .copied()
                        .collect();
                    for server in servers {
                        self.check(server);
                    }
                }
                // Cannot happen: both ends are in a static.
                Err(_) => {}
            },
            recv(self.reports_rx) -> report => match report {
                Ok(Report::Renewed(done)) => self.apply(done),
                Ok(Report::Suspect(server)) => self.check(server),
                Ok(Report::Recorded { server, write, result }) => {
                    self.recorded(server, write, result);
                }
                Err(_) => {}
            },
            recv(timeout) -> _ => {},
        }
        !self.should_end()
    }

    /// Takes the entries of released (or lost) holds out of the schedule,
    /// at most every [`PURGE_EVERY`]: an entry otherwise stays until its
    /// renewal falls due (a third of the lease; a fixed lease's end), and a
    /// process holding many short-lived names, each a little longer than
    /// the thread's look at new holds, would keep thousands of them.
    fn purge(&mut self, now: Instant) {
        if now < self.next_purge {
            return;
        }
        self.next_purge = now + PURGE_EVERY;
        for entry in self.schedule.remove_where(Entry::finished) {
            self.forget(entry);
        }
    }

    fn note_sizes(&self) {
        let sizes = [
            self.schedule.len(),
            self.schedule.room(),
            self.young.len(),
            self.young.capacity(),
            self.verify.len(),
            self.verify.capacity(),
        ];
        for (slot, size) in self.shared.sizes.iter().zip(sizes) {
            slot.store(size, Ordering::Relaxed);
        }
    }

    /// `true` (and the thread is marked stopped) when no client is left and
    /// no command waits. Decided under the lock that [`attach`] and
    /// [`Shared::ensure_running`] take, so a new client's first lock starts
    /// a new thread instead of relying on this one.
    fn should_end(&self) -> bool {
        let mut life = self.shared.life();
        if life.clients > 0 || !self.shared.receiver.is_empty() {
            return false;
        }
        life.running = false;
        self.shared.running.store(false, Ordering::Release);
        true
    }

    /// The thread's last act: what is left belongs to clients that are gone.
    /// Dropping the job senders ends every worker after its queued jobs.
    ///
    /// The pending list is not looked at: every entry that was there when
    /// the last client went was taken with its `ClientGone`, and anything
    /// there now is a new client's, for the next thread.
    fn finish(&mut self) {
        self.young.clear();
        let mut left = self.schedule.extract(|_| true);
        for state in self.servers.values_mut() {
            left.extend(state.busy.take().unwrap_or_default());
            left.extend(state.retry.take().map(|r| r.entries).unwrap_or_default());
        }
        self.release_gone(left, None);
        self.servers.clear();
    }

    fn take_pending(&mut self) {
        let (pending, ended) = {
            let mut list = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let ended = std::mem::take(
                &mut *self
                    .shared
                    .ended_waits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            (std::mem::take(&mut *list), ended)
        };
        let now = Instant::now();
        if pending.iter().any(|(_, e)| e.listen) && self.listen_tick.is_none() {
            // Holds to listen for come in: look at the pending list again
            // after LISTEN_AFTER, so that the holds registered meanwhile
            // do not each wake the thread (see `register`).
            self.listen_tick = Some(now + crate::lease::LISTEN_AFTER);
        }
        let mut last_used: Option<Server> = None;
        for (due, mut entry) in pending {
            entry.home = u32::try_from(entry.server().1).unwrap_or(UNHOMED);
            if entry.context.record.is_some() {
                // Short holds too keep the record alive: the client uses
                // the server. Once per run of entries of one server.
                let server = entry.server();
                if last_used != Some(server) {
                    last_used = Some(server);
                    self.record_use(&entry, now);
                }
            }
            if entry.finished() {
                continue;
            }
            entry
                .counters
                .watchdog_entries
                .fetch_add(1, Ordering::Relaxed);
            self.count(&entry);
            if let Some(record) = self
                .servers
                .get_mut(&entry.server())
                .and_then(|s| s.record.as_mut())
            {
                record.hold(
                    record::hold_field(&entry.holder, &entry.key),
                    entry.state.clone(),
                );
            }
            if entry.listen && entry.context.listener.get().is_some() {
                self.young.push_back((
                    entry.renewed_at + crate::lease::LISTEN_AFTER,
                    entry.channel.clone(),
                    entry.state.clone(),
                    entry.context.clone(),
                ));
            }
            self.schedule.insert(due, entry);
        }
        // Taken with the entries of their holds (under one lock): each goes
        // with the write recording its hold.
        for (server, field) in ended {
            if let Some(record) = self
                .servers
                .get_mut(&server)
                .and_then(|s| s.record.as_mut())
            {
                record.ended(field);
            }
        }
    }

    /// Hands the holds that have lasted long enough by `now`, and are
    /// still held, to their clients' subscribers to listen for.
    fn listen_due(&mut self, now: Instant) {
        while self.young.front().is_some_and(|y| y.0 <= now) {
            let Some((_, channel, state, context)) = self.young.pop_front() else {
                break;
            };
            if state.is_over() {
                continue;
            }
            if let Some(listener) = context.listener.get() {
                listener.listen(channel, state);
            }
        }
        crate::capacity::trim(&mut self.young, 1024);
    }

    /// Deletes an ended wait's field with the next record write on its
    /// server. A client with no record there yet gets one that is not
    /// kept alive: it lives for the write.
    fn wait_ended(&mut self, ended: WaitEnded) {
        let server = (Arc::as_ptr(&ended.source) as usize, ended.node);
        let now = Instant::now();
        let Some(state) = self.state(server, &ended.source) else {
            return;
        };
        state
            .record
            .get_or_insert_with(|| RecordState::idle(ended.spec, ended.counters, now))
            .ended(ended.field);
    }

    /// Notes that the client of `entry` uses its server: its holder record
    /// there is made (and kept) from now on.
    fn record_use(&mut self, entry: &Entry, now: Instant) {
        let Some(spec) = entry.context.record.clone() else {
            return;
        };
        let Some(state) = self.state(entry.server(), &entry.source) else {
            return;
        };
        state
            .record
            .get_or_insert_with(|| RecordState::new(spec, entry.counters.clone(), now))
            .used(now);
    }

    /// Sends the holder-record writes that are due and cannot wait for a
    /// renewal round trip.
    fn records_due(&mut self, now: Instant) {
        let due: Vec<Server> = self
            .servers
            .iter()
            .filter(|(_, s)| s.record_due_at(now).is_some_and(|at| at <= now))
            .map(|(server, _)| *server)
            .collect();
        for server in due {
            let Some(state) = self.servers.get_mut(&server) else {
                continue;
            };
            let Some(source) = state.source.upgrade() else {
                continue;
            };
            let Some(write) = state.record.as_mut().and_then(|r| {
                r.take(
                    |prefix, client| record_key(&source, server.1, prefix, client),
                    now,
                )
            }) else {
                continue;
            };
            if let Err(write) = self.send_record(server, &source, write) {
                self.recorded(server, write, Err(Error::Shutdown));
            }
        }
    }

    fn send_record(
        &mut self,
        server: Server,
        source: &Arc<Source>,
        write: RecordWrite,
    ) -> Result<(), RecordWrite> {
        let Some(state) = self.state(server, source) else {
            return Err(write);
        };
        state.jobs.send(Job::Record(write)).map_err(|e| match e.0 {
            Job::Record(write) => write,
            _ => unreachable!("the job sent back is the one sent"),
        })
    }

    /// The earliest instant a holder record needs a write of its own.
    fn next_record(&self, now: Instant) -> Option<Instant> {
        self.servers
            .values()
            .filter_map(|s| s.record_due_at(now))
            .min()
    }

    /// What became of a holder-record write. A record found gone gets every
    /// live hold on the server again, for the next write to rebuild it:
    /// scheduled ones, and those at the worker or waiting for it. A write
    /// that rides on a renewal round trip is reported before the renewals,
    /// so the holds that round trip renewed are still at the worker here.
    fn recorded(&mut self, server: Server, write: RecordWrite, result: crate::error::Result<bool>) {
        let schedule = &self.schedule;
        let Some(state) = self.servers.get_mut(&server) else {
            return;
        };
        let Some(record) = state.record.as_mut() else {
            return;
        };
        if !record.settle(write, result) {
            return;
        }
        let scheduled = schedule
            .iter()
            .filter(|e| e.home_server() == server)
            .map(|e| (&e.holder, &e.key, &e.state));
        let sent = state.sent.iter().map(|s| (&s.holder, &s.key, &s.state));
        let waiting = (state.busy.iter().flatten())
            .chain(state.retry.iter().flat_map(|r| r.entries.iter()))
            .map(|e| (&e.holder, &e.key, &e.state));
        // A job of several round trips puts the entries of its first ones
        // back in the schedule before `sent` is cleared: one field each.
        let mut live = HashMap::new();
        for (holder, key, lease) in scheduled.chain(sent).chain(waiting) {
            if !lease.is_over() {
                live.insert(record::hold_field(holder, key), lease);
            }
        }
        for (field, lease) in live {
            record.hold(field, lease.clone());
        }
    }

    /// Deletes the holder records of the client owning `counters` (when it
    /// released its locks: otherwise they expire with the leases they
    /// describe). `done` is dropped when the deletions are over.
    fn forget_records(&mut self, counters: &Arc<Counters>, done: Option<Sender<()>>) {
        let release = counters.release_when_gone.load(Ordering::Acquire);
        let mine: Vec<(Server, Option<Arc<[u8]>>)> = self
            .servers
            .iter_mut()
            .filter(|(_, s)| {
                s.record
                    .as_ref()
                    .is_some_and(|r| Arc::ptr_eq(&r.counters, counters))
            })
            .filter_map(|(server, s)| {
                let record = s.record.take()?;
                Some((*server, record.key().cloned()))
            })
            .collect();
        for (server, key) in mine {
            let (Some(key), true) = (key, release) else {
                continue;
            };
            if let Some(state) = self.servers.get(&server)
                && let Some(source) = state.source.upgrade()
            {
                let _ = state.jobs.send(Job::Forget {
                    key,
                    source,
                    done: done.clone(),
                });
            }
        }
    }

    /// Counts an entry the watchdog now owns; the first on a server makes
    /// its worker watch it.
    fn count(&mut self, entry: &Entry) {
        let server = entry.server();
        let Some(state) = self.state(server, &entry.source) else {
            return;
        };
        state.entries += 1;
        if state.entries == 1 {
            let _ = state.jobs.send(Job::Watch(true));
        }
    }

    /// The reverse of [`Watchdog::count`].
    fn uncount(&mut self, server: Server) {
        if let Some(state) = self.servers.get_mut(&server) {
            state.entries = state.entries.saturating_sub(1);
            if state.entries == 0 {
                let _ = state.jobs.send(Job::Watch(false));
            }
        }
    }

    /// Drops an entry the watchdog is done with.
    fn forget(&mut self, entry: Entry) {
        self.unverify(&entry);
        if entry.state.is_recorded()
            && let Some(record) = self
                .servers
                .get_mut(&entry.home_server())
                .and_then(|s| s.record.as_mut())
        {
            record.ended(record::hold_field(&entry.holder, &entry.key));
        }
        entry
            .counters
            .watchdog_entries
            .fetch_sub(1, Ordering::Relaxed);
        self.uncount(entry.home_server());
    }

    /// Drops `entry`'s pending check, if any: nothing of a hold the
    /// watchdog is done with stays.
    fn unverify(&mut self, entry: &Entry) {
        if !self.verify.is_empty() {
            self.verify.remove(&(Arc::as_ptr(&entry.state) as usize));
            crate::capacity::trim(&mut self.verify, crate::capacity::KEEP);
        }
    }

    /// The state of `server`, with a live worker: started when there is
    /// none, or when the one there served a source that is gone. `None`
    /// when no thread can be started.
    fn state(&mut self, server: Server, source: &Arc<Source>) -> Option<&mut ServerState> {
        let live = self.servers.get(&server).is_some_and(|s| {
            s.source.strong_count() > 0 && s.source.as_ptr() == Arc::as_ptr(source)
        });
        if !live {
            match worker::spawn(server, source, self.reports_tx.clone()) {
                Ok(jobs) => {
                    self.servers
                        .insert(server, ServerState::new(jobs, Arc::downgrade(source)));
                }
                Err(e) => {
                    log::error!("redguard watchdog: cannot start a renewal thread: {e}");
                    return None;
                }
            }
        }
        self.servers.get_mut(&server)
    }

    /// Sends `job` to the worker of `server`. A job that cannot be sent is
    /// dropped: its leases run out on their own clock, its releases are
    /// left to the lease.
    fn send(&mut self, server: Server, source: &Arc<Source>, job: Job) -> bool {
        let Some(state) = self.state(server, source) else {
            return false;
        };
        match state.jobs.send(job) {
            Ok(()) => true,
            Err(crossbeam_channel::SendError(job)) => {
                // The worker ended (it cannot, while its source lives; this
                // is a second line of defence): start another, once.
                self.servers.remove(&server);
                self.state(server, source)
                    .is_some_and(|state| state.jobs.send(job).is_ok())
            }
        }
    }

    /// Hands every due renewal to its server's worker; a server with a
    /// renewal job at work gets them when it is done.
    fn dispatch_due(&mut self, now: Instant) {
        let mut groups: HashMap<Server, Vec<Entry>> = HashMap::new();
        // Straight from the schedule into the groups: with 100 000 held
        // locks a tick's due entries are many megabytes, copied once.
        while let Some(entry) = self.schedule.pop_one_due(now) {
            let Some(mut entry) = self.still_wanted(entry) else {
                continue;
            };
            self.rehome(&mut entry, now);
            if !entry.renew {
                let valid_until = entry.state.valid_until();
                if valid_until > now && entry.recheck.is_some() {
                    // A look-up before its end.
                    groups.entry(entry.server()).or_default().push(entry);
                    continue;
                }
                if valid_until > now {
                    // Extended meanwhile (`LockGuard::extend`): look again then.
                    self.schedule.insert(valid_until, entry);
                    continue;
                }
                // A fixed lease ran out: the lock is gone on the server.
                self.lapse(entry, now, None);
                continue;
            }
            groups.entry(entry.server()).or_default().push(entry);
        }
        for (server, entries) in groups {
            self.renew_or_wait(server, entries);
        }
    }

    /// Moves `entry` to the node that serves its lock now, when its slot
    /// has moved since the watchdog took it in (a Cluster reshard or
    /// failover, learned from a redirection): the new node's worker counts
    /// it, and its hold leaves the client's record on the old node for the
    /// one on the new node, where `status` and `list` look for it.
    fn rehome(&mut self, entry: &mut Entry, now: Instant) {
        let (old, new) = (entry.home_server(), entry.server());
        if old == new || entry.home == UNHOMED {
            return;
        }
        let field = record::hold_field(&entry.holder, &entry.key);
        if let Some(record) = self.servers.get_mut(&old).and_then(|s| s.record.as_mut()) {
            record.moved_away(&field);
        }
        self.uncount(old);
        entry.home = u32::try_from(new.1).unwrap_or(UNHOMED);
        self.count(entry);
        if entry.context.record.is_some() {
            self.record_use(entry, now);
            if let Some(record) = self.servers.get_mut(&new).and_then(|s| s.record.as_mut()) {
                record.hold(field, entry.state.clone());
            }
        }
    }

    /// Renews `entries` (all on `server`) now, unless the server is
    /// pausing after a failed round trip: then they go with its next
    /// attempt.
    fn renew_or_wait(&mut self, server: Server, entries: Vec<Entry>) {
        if let Some(retry) = self.servers.get_mut(&server).and_then(|s| s.retry.as_mut()) {
            for entry in entries {
                retry.push(entry);
            }
            return;
        }
        let per_trip = entries
            .first()
            .map_or(1, |e| e.renew_batch.max(1) * CALLS_PER_ROUND_TRIP);
        self.start(server, entries, per_trip);
    }

    /// The earliest instant a pausing server needs the thread: its next
    /// attempt, or a lease among its entries running out.
    fn next_retry(&self) -> Option<Instant> {
        self.servers
            .values()
            .filter_map(|s| s.retry.as_ref().map(Retrying::wake_at))
            .min()
    }

    /// Marks lost, at their local deadline, the leases waiting for a
    /// server's next attempt, and sends the attempts that are due.
    fn retry_due(&mut self, now: Instant) {
        let due: Vec<Server> = self
            .servers
            .iter()
            .filter(|(_, s)| s.retry.as_ref().is_some_and(|r| r.wake_at() <= now))
            .map(|(server, _)| *server)
            .collect();
        for server in due {
            let Some(retry) = self.servers.get_mut(&server).and_then(|s| s.retry.take()) else {
                continue;
            };
            let mut waiting = Retrying::new(retry.at);
            for entry in retry.entries {
                let Some(entry) = self.still_wanted(entry) else {
                    continue;
                };
                if entry.state.valid_until() <= now {
                    self.lapse(entry, now, None);
                } else {
                    waiting.push(entry);
                }
            }
            if waiting.at <= now {
                // A key's server may have changed meanwhile (a Cluster
                // failover: the slot map was asked for again after the
                // node refused): such renewals go to their new server.
                let mut groups: HashMap<Server, Vec<Entry>> = HashMap::new();
                for entry in waiting.entries {
                    groups.entry(entry.server()).or_default().push(entry);
                }
                for (to, entries) in groups {
                    if to == server {
                        let per_trip = entries[0].renew_batch.max(1) * CALLS_PER_ROUND_TRIP;
                        self.start(server, entries, per_trip);
                    } else {
                        self.renew_or_wait(to, entries);
                    }
                }
            } else if let Some(state) = self.servers.get_mut(&server) {
                state.retry = Some(waiting);
            }
        }
    }

    /// A lease whose end passed at `now` without a renewal: lost, unless
    /// an extension moved its end meanwhile (`LockGuard::extend`, decided
    /// atomically with the loss: see `LeaseState::lapse`); then it is
    /// looked at again at once. `detail`: the last renewal error.
    fn lapse(&mut self, entry: Entry, now: Instant, detail: Option<&Error>) {
        match entry.state.lapse(now) {
            Lapse::Extended => self.schedule.insert(now, entry),
            Lapse::Lost(told) => {
                let reason = if entry.renew {
                    LossReason::DeadlinePassed
                } else {
                    LossReason::LeaseEnded
                };
                self.tell_and_forget(entry, told, reason, detail);
            }
        }
    }

    /// The earliest instant a lease at a worker, or waiting for its job,
    /// may run out.
    fn next_held_up(&self) -> Option<Instant> {
        self.servers.values().filter_map(|s| s.held_until).min()
    }

    /// Marks lost, at their local deadline, the leases of servers whose
    /// worker still has them (or has not yet taken them: `busy`): a worker
    /// held up by a hung server must not delay the news.
    fn held_up(&mut self, now: Instant) {
        let due: Vec<Server> = self
            .servers
            .iter()
            .filter(|(_, s)| s.held_until.is_some_and(|at| at <= now))
            .map(|(server, _)| *server)
            .collect();
        for server in due {
            let Some(state) = self.servers.get_mut(&server) else {
                continue;
            };
            let mut first_end: Option<Instant> = None;
            for sent in &state.sent {
                if sent.state.is_released() || sent.state.is_marked_lost() {
                    continue;
                }
                let end = sent.state.valid_until();
                if end > now {
                    first_end = earliest(first_end, Some(end));
                    continue;
                }
                match sent.state.lapse(now) {
                    Lapse::Lost(true) => sent.context.lease_lost(
                        &sent.key,
                        sent.kind,
                        &sent.holder,
                        LossReason::DeadlinePassed,
                    ),
                    Lapse::Lost(false) => {}
                    Lapse::Extended => {
                        first_end = earliest(first_end, Some(sent.state.valid_until()));
                    }
                }
            }
            let mut lapsed = Vec::new();
            if let Some(waiting) = state.busy.take() {
                let (over, waiting): (Vec<Entry>, Vec<Entry>) = waiting
                    .into_iter()
                    .partition(|e| e.state.valid_until() <= now);
                for entry in &waiting {
                    first_end = earliest(first_end, Some(entry.state.valid_until()));
                }
                state.busy = Some(waiting);
                lapsed = over;
            }
            state.held_until = first_end;
            for entry in lapsed {
                self.lapse(entry, now, None);
            }
        }
    }

    /// Marks a lease lost for `reason` and drops its entry. The hooks
    /// (warning, callback) hear of it once, unless the holder released it
    /// or began to meanwhile: then the loss is that release, whose own
    /// reply tells the holder. `detail` goes into the warning.
    fn lose(&mut self, entry: Entry, reason: LossReason, detail: Option<&Error>) {
        let told = entry.state.mark_lost();
        self.tell_and_forget(entry, told, reason, detail);
    }

    /// After `entry`'s lease was marked lost: tells the hooks when `told`
    /// (see `lose`), and drops the entry.
    fn tell_and_forget(
        &mut self,
        entry: Entry,
        told: bool,
        reason: LossReason,
        detail: Option<&Error>,
    ) {
        if told {
            if let Some(e) = detail {
                log::debug!(
                    "redguard: last renewal error of lock {:?} held by {} before its loss: {e}",
                    entry.name(),
                    entry.holder,
                    e = e.chain()
                );
            }
            entry
                .context
                .lease_lost(&entry.key, entry.kind, &entry.holder, reason);
        }
        self.forget(entry);
    }

    /// Sends a renewal job for `entries`, all on `server`, unless one is at
    /// work there: then they wait for it.
    fn start(&mut self, server: Server, entries: Vec<Entry>, per_trip: usize) {
        let Some(first) = entries.first() else {
            return;
        };
        let source = first.source.clone();
        let counters = first.counters.clone();
        let Some(state) = self.state(server, &source) else {
            // No thread can renew them: they run out unrenewed.
            for entry in entries {
                self.lose(entry, LossReason::DeadlinePassed, None);
            }
            return;
        };
        let first_end = entries.iter().map(|e| e.state.valid_until()).min();
        state.held_until = earliest(state.held_until, first_end);
        if let Some(waiting) = state.busy.as_mut() {
            waiting.extend(entries);
            return;
        }
        state.busy = Some(Vec::new());
        state.sent = entries.iter().map(Sent::of).collect();
        // The record's expiry is refreshed in the same round trip.
        let record = state.record.as_mut().and_then(|r| {
            r.take(
                |prefix, client| record_key(&source, server.1, prefix, client),
                Instant::now(),
            )
        });
        counters.renewal_ticks.fetch_add(1, Ordering::Relaxed);
        let job = Job::Renew {
            entries,
            per_trip,
            record,
        };
        if !self.send(server, &source, job) {
            // The entries went with the job; their guards see the lease run
            // out on their own clock.
            if let Some(state) = self.servers.get_mut(&server) {
                state.job_over();
            }
            log::error!("redguard watchdog: a renewal job could not reach its worker");
        }
    }

    /// Checks every lease held on `server` now, in one pipelined round trip
    /// (two when fixed leases are held there too: they are looked up, not
    /// extended): the server may have lost its data.
    fn check(&mut self, server: Server) {
        let now = Instant::now();
        self.take_pending();
        let mut waiting = Vec::new();
        if let Some(state) = self.servers.get_mut(&server) {
            state.suspect_at = Some(now);
            // The server answered a connection just now (or broke one it
            // had): renewals waiting out a pause go along, and the pauses
            // start small again.
            waiting = state.retry.take().map(|r| r.entries).unwrap_or_default();
            state.backoff = None;
        }
        let mut entries = self.schedule.extract(|e| e.server() == server);
        entries.extend(waiting);
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter_map(|e| self.still_wanted(e))
            .collect();
        self.start(server, entries, usize::MAX);
    }

    /// Checks `holds` now (an unlock message came on their channel): their
    /// entries go to their servers' workers at once, in one round trip per
    /// server. Entries at a worker already are checked again when their
    /// renewal, sent before the message, comes back.
    fn verify_holds(&mut self, holds: Vec<Arc<LeaseState>>) {
        // The hold may be younger than the thread's last look at the
        // pending list.
        self.take_pending();
        let now = Instant::now();
        // A hold its holder is releasing is no one's to check: the unlock
        // message may be its own release's, heard before the releasing
        // thread marked it released, and a check then would reach the
        // server after the release.
        let wanted: std::collections::HashSet<usize> = holds
            .iter()
            .filter(|s| !s.is_over() && !s.is_releasing())
            .map(|s| Arc::as_ptr(s) as usize)
            .collect();
        if wanted.is_empty() {
            return;
        }
        for &hold in &wanted {
            self.verify.insert(hold, now);
        }
        let entries = self
            .schedule
            .extract(|e| wanted.contains(&(Arc::as_ptr(&e.state) as usize)));
        let mut groups: HashMap<Server, Vec<Entry>> = HashMap::new();
        for entry in entries {
            if let Some(entry) = self.still_wanted(entry) {
                groups.entry(entry.server()).or_default().push(entry);
            }
        }
        for (server, entries) in groups {
            self.start(server, entries, usize::MAX);
        }
    }

    /// What a round trip sent at `sent` says of `entry` with respect to
    /// an unlock message on its channel: `None` when none is to be looked
    /// into; `Some(true)` when the message came after it was sent (check
    /// again, at once); `Some(false)` when it was the check (counted once
    /// its outcome is applied).
    fn verify_again(&mut self, entry: &Entry, sent: Instant) -> Option<bool> {
        if self.verify.is_empty() {
            return None;
        }
        let key = Arc::as_ptr(&entry.state) as usize;
        let at = *self.verify.get(&key)?;
        if sent >= at {
            self.verify.remove(&key);
            crate::capacity::trim(&mut self.verify, crate::capacity::KEEP);
            return Some(false);
        }
        Some(true)
    }

    /// Applies the outcome of one batch; after a job's last batch, sends
    /// what fell due for the server meanwhile.
    fn apply(&mut self, done: Done) {
        let now = Instant::now();
        let suspect_at = self
            .servers
            .get(&done.server)
            .and_then(|state| state.suspect_at);
        // Fixed leases found held by a look-up sent before the server was
        // suspected: they would not come up again before they expire.
        let mut recheck = Vec::new();
        let mut failed = Vec::new();
        let mut answered = false;
        for (entry, outcome) in done.results {
            if !matches!(outcome, Outcome::Failed(_)) {
                answered = true;
            }
            if let Outcome::Failed(e) = &outcome
                && entry.state.is_marked_lost()
            {
                // Its loss was told at its deadline, while this attempt was
                // under way: what became of it still says why.
                log::debug!(
                    "redguard: last renewal error of lock {:?} held by {} before its loss: {e}",
                    entry.name(),
                    entry.holder,
                    e = e.chain()
                );
            }
            let Some(mut entry) = self.still_wanted(entry) else {
                continue;
            };
            let verified = self.verify_again(&entry, done.sent);
            let again = verified == Some(true);
            let checked = (verified == Some(false)).then(|| entry.counters.clone());
            match outcome {
                // The reply came after the lease ran out on this client's
                // clock: its holder may already have been told it was lost,
                // and a lease once reported lost stays lost.
                Outcome::Renewed if entry.state.is_lost_at(now) => {
                    self.lapse(entry, now, None);
                }
                Outcome::Renewed => {
                    entry.renewed_at = done.sent;
                    // A loss since `still_wanted` (a guard that heard
                    // `NotHeld`) stays: the entry goes at its next look.
                    entry
                        .state
                        .extend_to(done.sent + entry.lease - clock_drift(entry.lease));
                    // Renewed before the server was suspected: that says
                    // nothing about it now.
                    let next = if again || suspect_at.is_some_and(|at| done.sent < at) {
                        now
                    } else {
                        done.sent + entry.interval()
                    };
                    self.schedule.insert(next, entry);
                }
                Outcome::Held if again || suspect_at.is_some_and(|at| done.sent < at) => {
                    recheck.push(entry);
                }
                Outcome::Held => {
                    entry.renewed_at = done.sent;
                    let due = entry.next_look(now);
                    self.schedule.insert(due, entry);
                }
                Outcome::Gone(reason) => self.lose(entry, reason, None),
                Outcome::Failed(e) => failed.push((entry, e)),
            }
            if let Some(counters) = checked {
                counters.hold_checks.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.retry_later(done.server, failed, answered, now);
        if done.last
            && let Some(waiting) = self
                .servers
                .get_mut(&done.server)
                .and_then(ServerState::job_over)
        {
            let waiting: Vec<Entry> = waiting
                .into_iter()
                .filter_map(|e| self.still_wanted(e))
                .collect();
            if !waiting.is_empty() {
                self.renew_or_wait(done.server, waiting);
            }
        }
        self.start(done.server, recheck, usize::MAX);
    }

    /// Puts renewals that failed aside until the server's next attempt,
    /// after a pause that grows with each failed round trip (from 10 ms up
    /// to a sixth of the shortest lease among them) and starts small again
    /// once a round trip goes through (`answered` with no failure). A lease
    /// whose local deadline has come is lost, without another round trip.
    fn retry_later(
        &mut self,
        server: Server,
        failed: Vec<(Entry, Arc<Error>)>,
        answered: bool,
        now: Instant,
    ) {
        if failed.is_empty() {
            if answered && let Some(state) = self.servers.get_mut(&server) {
                state.backoff = None;
                if std::mem::take(&mut state.failing) {
                    log::warn!("redguard: lease renewals succeed again after failing");
                }
            }
            return;
        }
        crate::metrics::renewal_failures(failed.len() as u64);
        if let Some(state) = self.servers.get_mut(&server)
            && !std::mem::replace(&mut state.failing, true)
            && let Some((entry, err)) = failed.first()
        {
            // Once per failure streak; the rest of it is logged at debug
            // level, and its end at warn level again.
            log::warn!(
                "redguard: lease renewals failing ({err}, lock {:?} held by {} and {} more); \
                 retried with backoff until each lease runs out",
                entry.name(),
                entry.holder,
                failed.len() - 1,
                err = err.chain()
            );
        }
        let mut kept = Vec::with_capacity(failed.len());
        let mut shortest = crate::lease::MAX_LEASE;
        for (entry, err) in failed {
            if now >= entry.state.valid_until() {
                self.lapse(entry, now, Some(&err));
                continue;
            }
            shortest = shortest.min(entry.lease);
            kept.push((entry, err));
        }
        let Some((first, err)) = kept.first() else {
            return;
        };
        let source = first.source.clone();
        log::debug!(
            "redguard: renewal of lock {:?} held by {} failed ({err}); retrying after a pause, \
             with the server's {} other failed renewal(s)",
            first.name(),
            first.holder,
            kept.len() - 1,
            err = err.chain()
        );
        let Some(state) = self.state(server, &source) else {
            for (entry, _) in kept {
                self.lose(entry, LossReason::DeadlinePassed, None);
            }
            return;
        };
        let retry = match state.retry.as_mut() {
            Some(retry) => retry,
            None => {
                let pause = state
                    .backoff
                    .get_or_insert_with(|| Backoff::for_lease(shortest))
                    .next_pause();
                state.retry.insert(Retrying::new(now + pause))
            }
        };
        for (entry, _) in kept {
            retry.push(entry);
        }
    }

    fn drop_client(&mut self, counters: &Arc<Counters>, done: Option<Sender<()>>) {
        let mut entries = self
            .schedule
            .extract(|e| Arc::ptr_eq(&e.counters, counters));
        for state in self.servers.values_mut() {
            if let Some(retry) = state.retry.as_mut() {
                let (gone, kept) = std::mem::take(&mut retry.entries)
                    .into_iter()
                    .partition(|e| Arc::ptr_eq(&e.counters, counters));
                retry.entries = kept;
                entries.extend::<Vec<Entry>>(gone);
            }
        }
        self.forget_records(counters, done.clone());
        self.release_gone(entries, done);
        // Workers whose source is gone end by themselves; forget them.
        self.servers
            .retain(|_, s| s.source.strong_count() > 0 || s.busy.is_some());
    }

    /// `Some(entry)` when it still needs the watchdog; otherwise disposes of
    /// it: released or lost entries are dropped, and entries of a client
    /// that went (perhaps while their renewal was in flight) are released as
    /// it asked.
    fn still_wanted(&mut self, entry: Entry) -> Option<Entry> {
        if entry.finished() {
            self.forget(entry);
            return None;
        }
        if entry.counters.gone.load(Ordering::Acquire) {
            self.release_gone(vec![entry], None);
            return None;
        }
        Some(entry)
    }

    /// Hands entries of departed clients to their servers' workers, which
    /// release the locks (when the client asked for it) and mark them lost.
    /// `done` goes along with each job and is dropped when all are over.
    fn release_gone(&mut self, entries: Vec<Entry>, done: Option<Sender<()>>) {
        let mut groups: HashMap<Server, Vec<Entry>> = HashMap::new();
        for entry in entries {
            self.unverify(&entry);
            groups.entry(entry.server()).or_default().push(entry);
        }
        for (server, entries) in groups {
            for _ in &entries {
                self.uncount(server);
            }
            let source = entries[0].source.clone();
            let job = Job::Release {
                entries,
                done: done.clone(),
            };
            if !self.send(server, &source, job) {
                log::warn!(
                    "redguard watchdog: cannot release a departed client's locks; they expire with their lease"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watchdog() -> Watchdog {
        let (reports_tx, reports_rx) = crossbeam_channel::unbounded();
        Watchdog {
            shared: &WATCHDOG,
            schedule: Schedule::new(Entry::window),
            servers: HashMap::new(),
            reports_tx,
            reports_rx,
            verify: HashMap::new(),
            young: std::collections::VecDeque::new(),
            listen_tick: None,
            next_purge: Instant::now(),
        }
    }

    /// A process that makes and drops clients while another client lives
    /// keeps the thread running: the states of the gone clients' servers
    /// must go with them, or the map grows by one per dropped client's
    /// server. A state whose worker still has a job stays until the job's
    /// report.
    #[test]
    fn a_gone_clients_servers_are_forgotten_unless_their_worker_has_a_job() {
        let mut dog = watchdog();
        let (jobs, _worker) = crossbeam_channel::unbounded();
        dog.servers
            .insert((1, 0), ServerState::new(jobs.clone(), Weak::new()));
        dog.servers
            .insert((2, 0), ServerState::new(jobs.clone(), Weak::new()));
        let mut at_work = ServerState::new(jobs, Weak::new());
        at_work.busy = Some(Vec::new());
        dog.servers.insert((3, 0), at_work);
        dog.drop_client(&Arc::new(Counters::default()), None);
        let left: Vec<Server> = dog.servers.keys().copied().collect();
        assert_eq!(left, [(3, 0)]);
    }
}
