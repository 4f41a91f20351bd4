//! The subscriber: one thread per `Client` ("redguard-subscriber") owning
//! ONE pub/sub connection. Channels are subscribed on their first waiter and
//! unsubscribed after their last; each unlock message wakes one local waiter.
//!
//! Waiters register in the shared [`Registry`] themselves (a short critical
//! section, no I/O under it), so a waiter on an already subscribed channel
//! never waits for this thread. Because the thread dispatches a message
//! only after the message has been read, and a waiter registers before it
//! retries, an unlock published after the retry always finds the waiter.
//! Only a channel's first waiter waits for the server's confirmation.
//!
//! Holders listen too: the watchdog hands over every lock hold that lasted
//! [`LISTEN_AFTER`] ([`Listener`]), its channel is subscribed (a few per
//! turn, one round trip each), and any message there has the watchdog
//! check the hold at once ([`listened`]): a force unlock is heard at once.
//!
//! When the connection breaks, every waiter is woken to retry (messages may
//! have been lost) and keeps going on its bounded wait while the thread
//! reconnects with backoff and resubscribes. The watchdog is told too: the
//! server may have restarted and lost its data, so the client's leases
//! there are checked at once.

mod listened;
mod registry;
mod sharded;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

pub(crate) use registry::Event;
use registry::{Mailbox, Registered, Registry, WaiterId};

use crate::connection::Source;
use crate::error::Result;
use crate::lease::LeaseState;
use crate::retry::{self, Backoff};
pub(crate) use listened::LISTEN_AFTER;
use listened::Listened;

/// How long one socket read waits before the thread looks at its control
/// queue again; bounds the delay of a new channel's SUBSCRIBE.
const TICK: Duration = Duration::from_millis(5);
/// The shortest pause before reconnecting when no waiter wants the
/// connection, only listened holds: a waiter is woken sooner by a quick
/// reconnect, a hold is not (the watchdog checks the server's leases after
/// every broken connection anyway), and a process holding many locks must
/// not add a burst of connection attempts to an outage (B9).
const HOLDS_ONLY_BACKOFF: Duration = Duration::from_millis(250);
/// Held locks' channels (un)subscribed per turn (one round trip each), and
/// the least time between such turns: at most 5,000 a second, so that a
/// burst of many long holds (100,000 taken in seconds) costs this thread
/// a few per cent of a core, and keeps unlock messages waiting a
/// millisecond or two at most; those holds are listened for a little later.
const HOLD_CHANNELS_PER_TURN: usize = 25;
const HOLD_TURN_EVERY: Duration = Duration::from_millis(5);

enum Control {
    Subscribe(Vec<u8>),
    Unsubscribe(Vec<u8>),
    /// Held locks wait to be listened for (see [`listened`]).
    Holds,
    Shutdown,
}

struct Shared {
    registry: Mutex<Registry>,
    listened: Mutex<Listened>,
    connections: AtomicUsize,
    reactions: Reactions,
    /// The thread's set of channels subscribed for waiters: its entries
    /// and room, as last seen (for [`Subscriber::residue`]).
    subscribed: [AtomicUsize; 2],
}

/// What the subscriber asks of the watchdog, handed in when the client
/// starts it: the subscriber knows no watchdog, only these two calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reactions {
    /// A message arrived on the channel of these listened holds (a force
    /// unlock publishes there): check them on the server at once.
    pub(crate) verify: fn(Vec<Arc<LeaseState>>),
    /// The pub/sub connection to `source` broke: the server may have
    /// restarted and lost its data, so its leases are checked at once.
    pub(crate) suspect: fn(&Arc<Source>),
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn listened(&self) -> MutexGuard<'_, Listened> {
        self.listened.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sweeps the listened holds when due at `now`.
    fn sweep_holds(&self, now: Instant) {
        self.listened().sweep(now);
    }

    /// When the listened holds need the thread next (a sweep).
    fn holds_due(&self) -> Option<Instant> {
        self.listened().next_sweep()
    }

    fn note_subscribed(&self, subscribed: &std::collections::HashSet<Vec<u8>>) {
        self.subscribed[0].store(subscribed.len(), Ordering::Relaxed);
        self.subscribed[1].store(subscribed.capacity(), Ordering::Relaxed);
    }

    /// `true` when a waiter or a listened hold wants `channel` subscribed.
    fn wanted(&self, channel: &[u8]) -> bool {
        self.registry().is_wanted(channel) || self.listened().listens(channel)
    }
}

/// A client's handle on its subscriber thread.
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    control: Sender<Control>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

impl Subscriber {
    /// Starts the thread. It ends when this handle is dropped or
    /// [`Subscriber::shutdown`] is called.
    pub(crate) fn start(
        source: Arc<Source>,
        response_timeout: Duration,
        reactions: Reactions,
    ) -> Result<Subscriber> {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
            listened: Mutex::new(Listened::default()),
            connections: AtomicUsize::new(0),
            reactions,
            subscribed: [AtomicUsize::new(0), AtomicUsize::new(0)],
        });
        let (control, rx) = crossbeam_channel::unbounded();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("redguard-subscriber".into())
            .spawn(move || {
                // Its calls are retried on its own schedule.
                crate::connection::budget::set_call(crate::connection::budget::Call::Background);
                let mut worker = Worker {
                    shared: thread_shared,
                    source,
                    control: rx,
                    response_timeout,
                };
                worker.run();
            })
            .map_err(crate::error::Error::io)?;
        Ok(Subscriber { shared, control })
    }

    /// Registers a waiter on `channel`. Returns once the channel is
    /// subscribed on the server, or after `max_wait`, whichever is first
    /// (then the waiter relies on its bounded waits).
    pub(crate) fn waiter(&self, channel: &[u8], max_wait: Duration) -> Waiter<'_> {
        let (mailbox, rx, woken) = Mailbox::new();
        let (id, next) = self.shared.registry().register(channel, mailbox);
        self.finish_registration(channel, id, next, rx, woken, max_wait)
    }

    /// Registers a waiter on `channel` whose every message wakes all its
    /// waiters, `0` included (a count-down latch's zero message opens it for
    /// everyone). Otherwise as [`Subscriber::waiter`].
    pub(crate) fn waiter_all(&self, channel: &[u8], max_wait: Duration) -> Waiter<'_> {
        let (mailbox, rx, woken) = Mailbox::new();
        let (id, next) = {
            let mut registry = self.shared.registry();
            let registered = registry.register(channel, mailbox);
            registry.wake_all_on(channel);
            registered
        };
        self.finish_registration(channel, id, next, rx, woken, max_wait)
    }

    /// Wakes the longest-waiting thread of this client on `channel` that is
    /// not woken already, if any (a reader that got in passes the wake-up
    /// on: the next reader may get in too).
    pub(crate) fn wake_next(&self, channel: &[u8]) {
        self.shared.registry().wake_one(channel);
    }

    /// Registers a waiter on `channel` behind the threads already waiting
    /// there; `None` (and nothing registered) when no thread waits.
    pub(crate) fn waiter_behind(&self, channel: &[u8], max_wait: Duration) -> Option<Waiter<'_>> {
        let (mailbox, rx, woken) = Mailbox::new();
        let (id, next) = self.shared.registry().register_behind(channel, mailbox)?;
        Some(self.finish_registration(channel, id, next, rx, woken, max_wait))
    }

    fn finish_registration(
        &self,
        channel: &[u8],
        id: WaiterId,
        next: Registered,
        rx: Receiver<Event>,
        woken: Arc<AtomicBool>,
        max_wait: Duration,
    ) -> Waiter<'_> {
        if next == Registered::Subscribe {
            let _ = self.control.send(Control::Subscribe(channel.to_vec()));
        }
        let waiter = Waiter {
            subscriber: self,
            channel: channel.to_vec(),
            id,
            rx,
            woken,
            early: std::cell::Cell::new(None),
        };
        if next != Registered::Ready {
            // Any event means "go on". One that is more than the
            // confirmation (an unlock message that reached this waiter while
            // the channel was still being confirmed) is kept for the next
            // `wait`, so that it is never swallowed.
            match waiter.rx.recv_timeout(max_wait) {
                Ok(Event::Subscribed) | Err(_) => {}
                Ok(event) => waiter.early.set(Some(event)),
            }
        }
        waiter
    }

    /// Wakes every waiter with [`Event::Shutdown`] and stops the thread.
    pub(crate) fn shutdown(&self) {
        self.shared.registry().wake_everyone(Event::Shutdown);
        let _ = self.control.send(Control::Shutdown);
    }

    /// The handle through which the watchdog hands over the holds to
    /// listen for.
    pub(crate) fn listener(&self) -> Listener {
        Listener {
            shared: self.shared.clone(),
            control: self.control.clone(),
        }
    }

    /// Held locks whose channel is listened to.
    pub(crate) fn listened_holds(&self) -> usize {
        self.shared.listened().len()
    }

    /// Registered waiters.
    pub(crate) fn waiters(&self) -> usize {
        self.shared.registry().waiters()
    }

    /// Channels that have waiters.
    pub(crate) fn channels(&self) -> usize {
        self.shared.registry().channel_count()
    }

    /// What the subscriber keeps per channel or hold, as (entries, room):
    /// channels with waiters, listened holds, channels its thread
    /// subscribed for waiters.
    pub(crate) fn residue(&self) -> [(usize, usize); 3] {
        let waiters = self.shared.registry().sizes();
        let listened = self.shared.listened().sizes();
        let subscribed = (
            self.shared.subscribed[0].load(Ordering::Relaxed),
            self.shared.subscribed[1].load(Ordering::Relaxed),
        );
        [waiters, listened, subscribed]
    }

    /// Open pub/sub connections (0 or 1).
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

/// Where the watchdog hands over the holds that lasted
/// [`LISTEN_AFTER`]: their client's subscriber then listens on their
/// lock's channel, and an unlock message there makes the watchdog check
/// them at once (see [`listened`]).
#[derive(Clone)]
pub(crate) struct Listener {
    shared: Arc<Shared>,
    control: Sender<Control>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl crate::context::HoldListener for Listener {
    /// Listens for a force unlock of `state`'s hold on `channel`. No I/O;
    /// the thread is woken only when it had no subscription work queued.
    fn listen(&self, channel: Arc<[u8]>, state: Arc<LeaseState>) {
        let wake = {
            let mut listened = self.shared.listened();
            // The thread sleeps on its control queue only when it found the
            // listened holds idle: then it must be told.
            let wake = listened.is_idle() || !listened.has_work();
            listened.add(channel, state, Instant::now());
            wake
        };
        if wake {
            let _ = self.control.send(Control::Holds);
        }
    }
}

/// One waiting thread's registration. Dropping it unregisters.
pub(crate) struct Waiter<'a> {
    subscriber: &'a Subscriber,
    channel: Vec<u8>,
    id: WaiterId,
    rx: Receiver<Event>,
    /// Set by the registry when it delivers an unlock wake-up; cleared when
    /// the waiter takes it, so that it is woken again next time.
    woken: Arc<AtomicBool>,
    /// An event received while waiting for the subscription's confirmation.
    early: std::cell::Cell<Option<Event>>,
}

impl Waiter<'_> {
    /// Waits for an event for at most `timeout`. `None` on timeout.
    pub(crate) fn wait(&self, timeout: Duration) -> Option<Event> {
        let event = match self.early.take() {
            Some(event) => Some(event),
            None => self.rx.recv_timeout(timeout).ok(),
        };
        if event == Some(Event::Unlocked) {
            self.woken.store(false, Ordering::Release);
        }
        event
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut registry = self.subscriber.shared.registry();
        let empty = registry.unregister(&self.channel, self.id);
        // A wake-up this waiter received but will not act on goes to the
        // next waiter, so that leaving never swallows an unlock.
        let unused = self.early.take() == Some(Event::Unlocked)
            || self.rx.try_iter().any(|e| e == Event::Unlocked);
        if unused {
            registry.wake_one(&self.channel);
        }
        drop(registry);
        if empty {
            let _ = self
                .subscriber
                .control
                .send(Control::Unsubscribe(std::mem::take(&mut self.channel)));
        }
    }
}

/// Wakes the waiters of `channel` for a message: one for an unlock message
/// (unless the channel wakes all), all for anything else. The live holds
/// listened for there are checked (any message: a force unlock publishes
/// the unlock message of the lock's kind).
fn dispatch(shared: &Shared, channel: &[u8], payload: &[u8]) {
    {
        let mut registry = shared.registry();
        if payload == crate::keys::UNLOCK_MESSAGE && !registry.wakes_all(channel) {
            registry.wake_one(channel);
        } else {
            registry.wake_all(channel, Event::Unlocked);
        }
    }
    let held = shared.listened().live_on(channel);
    if !held.is_empty() {
        (shared.reactions.verify)(held);
    }
}

struct Worker {
    shared: Arc<Shared>,
    source: Arc<Source>,
    control: Receiver<Control>,
    response_timeout: Duration,
}

enum Exit {
    /// The client is gone or shut down.
    Stop,
    /// The connection broke: reconnect.
    Reconnect,
}

impl Worker {
    fn run(&mut self) {
        let mut backoff = Backoff::subscriber_reconnect();
        loop {
            // Connect only when some waiter or held lock needs it.
            self.shared.sweep_holds(Instant::now());
            let idle = {
                let mut listened = self.shared.listened();
                // Not connected: nothing is subscribed, nothing to undo.
                listened.forget_unsubscribes();
                listened.is_idle()
            };
            if idle && self.shared.registry().channel_count() == 0 {
                match self.recv_until(self.shared.holds_due()) {
                    Ok(Control::Shutdown) | Err(RecvTimeoutError::Disconnected) => return,
                    Ok(_) | Err(RecvTimeoutError::Timeout) => continue,
                }
            }
            // Read before connecting: a master change after this makes the
            // connection reconnect, never listen to a demoted node.
            let generation = self.source.generation();
            let mut conn = match self.source.pubsub_connection() {
                Ok(conn) => conn,
                Err(e) => {
                    let pause = self.pause(&mut backoff);
                    log::debug!(
                        "redguard subscriber: connect failed: {e}; retrying in {pause:?}",
                        e = e.chain()
                    );
                    if self.sleep_or_stop(pause) {
                        return;
                    }
                    continue;
                }
            };
            self.shared.connections.fetch_add(1, Ordering::Relaxed);
            let connected = Instant::now();
            let exit = self.serve(&mut conn, generation);
            self.shared.connections.fetch_sub(1, Ordering::Relaxed);
            drop(conn);
            match exit {
                Exit::Stop => return,
                Exit::Reconnect => {
                    crate::metrics::reconnect();
                    // The server may have restarted and lost its data: the
                    // watchdog checks this client's leases there at once.
                    (self.shared.reactions.suspect)(&self.source);
                    let mut registry = self.shared.registry();
                    registry.unconfirm_all();
                    registry.wake_everyone(Event::Reconnected);
                    drop(registry);
                    // A connection the server keeps dropping at once must
                    // not be reopened at once, again and again.
                    if connected.elapsed() >= retry::SUBSCRIBER_MAX_PAUSE {
                        backoff.reset();
                    }
                    let pause = self.pause(&mut backoff);
                    if self.sleep_or_stop(pause) {
                        return;
                    }
                }
            }
        }
    }

    /// The next pause before reconnecting: the backoff's, and at least
    /// [`HOLDS_ONLY_BACKOFF`] while no waiter wants the connection.
    fn pause(&self, backoff: &mut Backoff) -> Duration {
        let pause = backoff.next_pause();
        if self.shared.registry().channel_count() == 0 {
            pause.max(HOLDS_ONLY_BACKOFF)
        } else {
            pause
        }
    }

    /// The next control message, waiting at most until `until` (forever
    /// without it).
    fn recv_until(&self, until: Option<Instant>) -> std::result::Result<Control, RecvTimeoutError> {
        match until {
            Some(at) => self.control.recv_deadline(at),
            None => self
                .control
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
        }
    }

    /// (Un)subscribes, a bounded number per turn, the channels of held
    /// locks that began or ended being listened for. A channel that waiters
    /// subscribed already is not subscribed again; one that waiters (or
    /// another hold) still want stays.
    fn sync_holds(
        &self,
        pubsub: &mut redis::PubSub<'_>,
        subscribed: &mut std::collections::HashSet<Vec<u8>>,
        mut sharded: Option<&mut sharded::Router>,
        pairing: &Mutex<sharded::Pairing>,
        next_turn: &mut Instant,
    ) -> redis::RedisResult<()> {
        let now = Instant::now();
        if self.shared.holds_due().is_some_and(|at| at <= now) {
            self.shared.sweep_holds(now);
        }
        if now < *next_turn || !self.shared.listened().has_work() {
            return Ok(());
        }
        *next_turn = now + HOLD_TURN_EVERY;
        let timeout = self.response_timeout;
        let unsubscribes = self
            .shared
            .listened()
            .take_unsubscribes(HOLD_CHANNELS_PER_TURN);
        for channel in unsubscribes {
            if self.shared.wanted(&channel) {
                continue;
            }
            subscribed.remove(&channel[..]);
            crate::capacity::trim(subscribed, crate::capacity::KEEP);
            if let Some(sh) = sharded.as_deref_mut() {
                sh.unsubscribe(&channel);
            }
            sharded::lock(pairing).reset(&channel);
            let _ = pubsub.set_read_timeout(Some(timeout));
            pubsub.unsubscribe(&channel[..])?;
        }
        let subscribes = self
            .shared
            .listened()
            .take_subscribes(HOLD_CHANNELS_PER_TURN);
        for channel in subscribes {
            if subscribed.contains(&channel[..]) {
                continue;
            }
            let _ = pubsub.set_read_timeout(Some(timeout));
            if let Err(e) = pubsub.subscribe(&channel[..]) {
                subscribe_failed(&channel, &e);
                return Err(e);
            }
            sharded::lock(pairing).reset(&channel);
            if let Some(sh) = sharded.as_deref_mut() {
                sh.subscribe(&channel);
            }
        }
        Ok(())
    }

    /// Sleeps for `pause` unless the client stops meanwhile (`true`).
    fn sleep_or_stop(&self, pause: Duration) -> bool {
        let deadline = Instant::now() + pause;
        loop {
            match self.control.recv_deadline(deadline) {
                Ok(Control::Shutdown) | Err(RecvTimeoutError::Disconnected) => return true,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    fn serve(&self, conn: &mut redis::Connection, generation: u64) -> Exit {
        let mut pubsub = conn.as_pubsub();
        let mut subscribed: std::collections::HashSet<Vec<u8>> = Default::default();
        let timeout = self.response_timeout;
        // On a cluster, Redisson 3.2x's sharded unlocks are listened to as
        // well.
        let pairing = Arc::new(Mutex::new(sharded::Pairing::default()));
        let mut sharded = self.source.is_cluster().then(|| {
            sharded::Router::new(
                self.source.clone(),
                self.shared.clone(),
                pairing.clone(),
                timeout,
            )
        });

        // (Re)subscribe everything waiters want, then tell them.
        for channel in self.shared.registry().channels() {
            if let Err(e) = pubsub.subscribe(&channel[..]) {
                subscribe_failed(&channel, &e);
                return Exit::Reconnect;
            }
            if let Some(sh) = sharded.as_mut() {
                sh.subscribe(&channel);
            }
            subscribed.insert(channel);
        }
        {
            let mut registry = self.shared.registry();
            for channel in &subscribed {
                registry.confirm(channel);
            }
        }
        // Held locks' channels follow, a few per turn.
        {
            let mut listened = self.shared.listened();
            listened.resubscribe_all();
            listened.forget_unsubscribes();
        }
        let mut hold_turn = Instant::now();

        loop {
            // The deployment moved to another node (a Sentinel failover):
            // unlocks are published there now.
            if self.source.generation() != generation {
                return Exit::Reconnect;
            }
            // Control first, so that a SUBSCRIBE asked for before a message
            // was read is in place before that message is dispatched.
            loop {
                let control = match self.control.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Exit::Stop,
                };
                let result = match control {
                    Control::Shutdown => return Exit::Stop,
                    Control::Subscribe(channel) => {
                        let wanted = self.shared.registry().is_wanted(&channel);
                        if wanted && !subscribed.contains(&channel) {
                            let _ = pubsub.set_read_timeout(Some(timeout));
                            let r = pubsub.subscribe(&channel[..]);
                            if r.is_ok() {
                                sharded::lock(&pairing).reset(&channel);
                                if let Some(sh) = sharded.as_mut() {
                                    sh.subscribe(&channel);
                                }
                                subscribed.insert(channel.clone());
                            }
                            r.map(|()| Some(channel))
                        } else {
                            Ok(wanted.then_some(channel))
                        }
                    }
                    Control::Holds => Ok(None),
                    Control::Unsubscribe(channel) => {
                        // A held lock listened for keeps its channel.
                        let wanted = self.shared.wanted(&channel);
                        if !wanted && subscribed.remove(&channel) {
                            crate::capacity::trim(&mut subscribed, crate::capacity::KEEP);
                            if let Some(sh) = sharded.as_mut() {
                                sh.unsubscribe(&channel);
                            }
                            sharded::lock(&pairing).reset(&channel);
                            let _ = pubsub.set_read_timeout(Some(timeout));
                            pubsub.unsubscribe(&channel[..]).map(|()| None)
                        } else {
                            Ok(None)
                        }
                    }
                };
                match result {
                    Ok(Some(channel)) => self.shared.registry().confirm(&channel),
                    Ok(None) => {}
                    Err(e) => {
                        log::debug!("redguard subscriber: (un)subscribe failed: {e}");
                        return Exit::Reconnect;
                    }
                }
            }

            if self
                .sync_holds(
                    &mut pubsub,
                    &mut subscribed,
                    sharded.as_mut(),
                    &pairing,
                    &mut hold_turn,
                )
                .is_err()
            {
                return Exit::Reconnect;
            }

            if subscribed.is_empty() && self.shared.listened().is_idle() {
                self.shared.note_subscribed(&subscribed);
                // Nothing to listen to: sleep on the control queue alone.
                match self.recv_until(self.shared.holds_due()) {
                    Ok(Control::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                        return Exit::Stop;
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(Control::Subscribe(channel)) => {
                        let wanted = self.shared.registry().is_wanted(&channel);
                        if wanted {
                            let _ = pubsub.set_read_timeout(Some(timeout));
                            if let Err(e) = pubsub.subscribe(&channel[..]) {
                                subscribe_failed(&channel, &e);
                                return Exit::Reconnect;
                            }
                            sharded::lock(&pairing).reset(&channel);
                            if let Some(sh) = sharded.as_mut() {
                                sh.subscribe(&channel);
                            }
                            subscribed.insert(channel.clone());
                            self.shared.registry().confirm(&channel);
                        }
                    }
                    Ok(Control::Unsubscribe(_) | Control::Holds) => {}
                }
                continue;
            }

            self.shared.note_subscribed(&subscribed);
            let _ = pubsub.set_read_timeout(Some(TICK));
            match pubsub.get_message() {
                Ok(msg) => {
                    let channel: Vec<u8> = msg.get_channel().unwrap_or_default();
                    let payload: Vec<u8> = msg.get_payload().unwrap_or_default();
                    // A message on a channel no longer listened to (one
                    // in flight at its unsubscribe) wakes no one, and must
                    // leave no pairing count behind.
                    let listened_to = || {
                        subscribed.contains(&channel) || self.shared.listened().listens(&channel)
                    };
                    if sharded.is_none()
                        || (listened_to()
                            && sharded::lock(&pairing).admit(&channel, sharded::Kind::Classic))
                    {
                        dispatch(&self.shared, &channel, &payload);
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => {
                    log::debug!("redguard subscriber: connection lost: {e}");
                    return Exit::Reconnect;
                }
            }
            if let Some(sh) = sharded.as_mut() {
                sh.tick(|channel| {
                    subscribed.contains(channel) || self.shared.listened().listens(channel)
                });
            }
        }
    }
}

/// Logs a failed `SUBSCRIBE`. A channel the ACL refuses does not come here:
/// redis-rs takes the `NOPERM` reply to a `SUBSCRIBE` as done, so such a
/// channel's waiters poll (every poll interval) while the other channels
/// keep their wake-ups; the ACL line of docs/SECURITY.md grants the channels.
fn subscribe_failed(channel: &[u8], err: &redis::RedisError) {
    if err.code() == Some("NOPERM") {
        log::warn!(
            "redguard subscriber: the Redis ACL refuses channel {:?} ({err}); waiters on it \
             poll instead of being woken (grant it with an `&` pattern)",
            String::from_utf8_lossy(channel)
        );
    } else {
        log::debug!("redguard subscriber: subscribe failed: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{ConnectOptions, Deployment, Tls};

    /// A subscriber whose server refuses every connection: nothing confirms
    /// or delivers by itself, so each message is the test's own.
    fn offline() -> Subscriber {
        // Port 1 on loopback: refused at once, and the thread backs off.
        let deployment = Deployment::parse("redis://127.0.0.1:1/").unwrap();
        let options = ConnectOptions {
            name: None,
            tls: Tls::default(),
            pool_size: 1,
            connect_timeout: Duration::from_millis(200),
            response_timeout: Duration::from_millis(200),
            failover_wait: Duration::from_millis(200),
            slot_move_wait: Duration::from_millis(200),
        };
        let source = Arc::new(Source::open(&deployment, &options).unwrap());
        let reactions = Reactions {
            verify: |_| {},
            suspect: |_| {},
        };
        Subscriber::start(source, Duration::from_millis(200), reactions).unwrap()
    }

    fn unlock(subscriber: &Subscriber, channel: &[u8]) {
        dispatch(&subscriber.shared, channel, crate::keys::UNLOCK_MESSAGE);
    }

    const QUIET: Duration = Duration::from_millis(100);

    #[test]
    fn a_waiter_leaving_with_an_unused_wake_up_passes_it_on() {
        let subscriber = offline();
        let first = subscriber.waiter(b"ch", Duration::ZERO);
        let second = subscriber.waiter(b"ch", Duration::ZERO);
        // The unlock reaches the longest waiting, which leaves (its
        // deadline passed) without acting on it.
        unlock(&subscriber, b"ch");
        drop(first);
        assert_eq!(second.wait(QUIET), Some(Event::Unlocked));
        subscriber.shutdown();
    }

    #[test]
    fn a_waiter_leaving_with_a_wake_up_it_took_or_none_wakes_no_one() {
        let subscriber = offline();
        let first = subscriber.waiter(b"ch", Duration::ZERO);
        let second = subscriber.waiter(b"ch", Duration::ZERO);
        let third = subscriber.waiter(b"ch", Duration::ZERO);
        // Leaving with nothing received: the others stay asleep.
        drop(first);
        assert_eq!(second.wait(QUIET), None);
        // Leaving after acting on its wake-up: it is not passed on.
        unlock(&subscriber, b"ch");
        assert_eq!(second.wait(QUIET), Some(Event::Unlocked));
        drop(second);
        assert_eq!(third.wait(QUIET), None);
        subscriber.shutdown();
    }

    #[test]
    fn a_wake_up_received_while_registering_is_passed_on_when_unused() {
        let subscriber = offline();
        let first = subscriber.waiter(b"ch", Duration::ZERO);
        // The first is woken already; the next unlock reaches the second
        // while it still awaits the channel's confirmation, and is kept
        // for its next wait.
        unlock(&subscriber, b"ch");
        let second = std::thread::scope(|s| {
            let registering = s.spawn(|| subscriber.waiter(b"ch", Duration::from_secs(5)));
            let deadline = Instant::now() + Duration::from_secs(5);
            while subscriber.waiters() < 2 && Instant::now() < deadline {
                std::thread::yield_now();
            }
            unlock(&subscriber, b"ch");
            registering.join().unwrap()
        });
        let third = subscriber.waiter(b"ch", Duration::ZERO);
        assert_eq!(first.wait(QUIET), Some(Event::Unlocked));
        drop(first);
        // The second leaves without a wait: its kept wake-up goes on.
        drop(second);
        assert_eq!(third.wait(QUIET), Some(Event::Unlocked));
        subscriber.shutdown();
    }
}
