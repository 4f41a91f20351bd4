//! The acquire core every lock kind goes through: one attempt of a kind's
//! acquire script, the wait loop between attempts (pub/sub wake-ups bounded
//! by the holder's ttl and the poll interval), and the four public entry
//! points (`lock`, `try_lock`, `try_lock_for`, `try_lock_until`), written
//! once as [`acquire_methods!`] for every handle type.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::lease::{self, LeaseState, lease_ms};
use crate::lock::guard::LockGuard;
use crate::lock::{Kind, Lock, thread_holds};
use crate::scripts::{self, Acquire, FairKeys, SyncHold};
use crate::wait::{Attempt, Wake, wait_loop};
use crate::watchdog;

/// Writes the four public acquire methods of a handle type, the
/// parking_lot set, with their documentation written once. Each is a door
/// to the type's one core, `fn acquire(&self, deadline: Option<Instant>) ->
/// Result<Option<Guard>>` (`None`: no deadline), whose errors `errors`
/// describes; `handle` is an expression making such a handle in the
/// examples, after the hidden lines of `setup`.
macro_rules! acquire_methods {
    (
        guard: $guard:ident,
        setup: $setup:literal,
        handle: $handle:literal,
        errors: $errors:literal $(,)?
    ) => {
        /// Acquires it, waiting as long as it takes. A thread that already
        /// holds it re-enters at once (the hold count grows).
        ///
        /// The wait rides out what a holder rides out: an attempt that
        /// fails with an error retrying can fix ([`Error::is_transient`]:
        /// a Redis restart, a freeze, a failover, `LOADING`, `READONLY`)
        /// is tried again after the watchdog's retry pause (10 ms doubling
        /// to 500 ms, jittered), for as long as it takes, as Redisson's
        /// `lock()` keeps retrying. Errors retrying cannot fix end it at
        /// once.
        ///
        /// [`Error::is_transient`]: crate::Error::is_transient
        ///
        /// # Errors
        ///
        #[doc = $errors]
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # let client = redguard::Client::open("redis://127.0.0.1/")?;
        #[doc = $setup]
        #[doc = concat!("let lock = ", $handle, ";")]
        /// let guard = lock.lock()?;
        /// // ... critical section ...
        /// guard.unlock()?; // or let it drop
        /// # Ok::<(), redguard::Error>(())
        /// ```
        pub fn lock(&self) -> $crate::Result<$guard> {
            self.acquire(None)?.ok_or_else(|| $crate::Error::Timeout {
                kind: $crate::TimeoutKind::Wait,
                limit: ::std::time::Duration::MAX,
                server: None,
                about: None,
            })
        }

        /// Acquires it if it is free (or held by the calling thread),
        /// without waiting: `Ok(None)` when someone else holds it.
        ///
        /// # Errors
        ///
        #[doc = $errors]
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # let client = redguard::Client::open("redis://127.0.0.1/")?;
        #[doc = $setup]
        #[doc = concat!("let lock = ", $handle, ";")]
        /// match lock.try_lock()? {
        ///     Some(_guard) => { /* ours until the guard drops */ }
        ///     None => { /* busy: skip this run */ }
        /// }
        /// # Ok::<(), redguard::Error>(())
        /// ```
        pub fn try_lock(&self) -> $crate::Result<Option<$guard>> {
            self.acquire(Some(::std::time::Instant::now()))
        }

        /// Acquires it, waiting at most `timeout`: `Ok(None)` when it could
        /// not be had in time. A timeout too large to represent (such as
        /// `Duration::MAX`) waits forever. The attempt in flight when the
        /// time runs out completes, so the call returns within `timeout`
        /// plus one response timeout.
        ///
        /// Attempts that fail with an error retrying can fix
        /// ([`Error::is_transient`]: a Redis restart, a freeze, a failover)
        /// are tried again, as [`lock`](Self::lock) does, until `timeout`:
        /// if the last attempt failed then, the call returns
        /// [`Error::Timeout`] naming that failure (a first attempt that
        /// fails with no time left returns its own error).
        ///
        /// [`Error::is_transient`]: crate::Error::is_transient
        /// [`Error::Timeout`]: crate::Error::Timeout
        ///
        /// # Errors
        ///
        #[doc = $errors]
        ///
        /// # Examples
        ///
        /// ```no_run
        /// use std::time::Duration;
        /// # let client = redguard::Client::open("redis://127.0.0.1/")?;
        #[doc = $setup]
        #[doc = concat!("let lock = ", $handle, ";")]
        /// if let Some(guard) = lock.try_lock_for(Duration::from_secs(3))? {
        ///     guard.check()?; // the lease is still ours
        /// }
        /// # Ok::<(), redguard::Error>(())
        /// ```
        pub fn try_lock_for(
            &self,
            timeout: ::std::time::Duration,
        ) -> $crate::Result<Option<$guard>> {
            self.acquire(::std::time::Instant::now().checked_add(timeout))
        }

        /// Acquires it, waiting until `deadline` at most: `Ok(None)` when it
        /// could not be had in time (a deadline already past makes one
        /// attempt, as [`try_lock`](Self::try_lock) does).
        ///
        /// # Errors
        ///
        #[doc = $errors]
        ///
        /// # Examples
        ///
        /// ```no_run
        /// use std::time::{Duration, Instant};
        /// # let client = redguard::Client::open("redis://127.0.0.1/")?;
        #[doc = $setup]
        #[doc = concat!("let lock = ", $handle, ";")]
        /// let deadline = Instant::now() + Duration::from_secs(10);
        /// let first = lock.try_lock_until(deadline)?;
        /// # Ok::<(), redguard::Error>(())
        /// ```
        pub fn try_lock_until(
            &self,
            deadline: ::std::time::Instant,
        ) -> $crate::Result<Option<$guard>> {
            self.acquire(Some(deadline))
        }
    };
}
pub(crate) use acquire_methods;

/// A successful attempt: the hold's shared state, when the granting script
/// was sent, and the fencing token it drew (fenced locks only).
pub(crate) struct Granted {
    state: Arc<LeaseState>,
    sent: Instant,
    token: Option<u64>,
}

impl Granted {
    /// The guard of this grant, owning `lock`.
    pub(crate) fn into_guard(
        self,
        lock: Lock,
        holder: HolderId,
        ms: u64,
        renew: bool,
    ) -> LockGuard {
        LockGuard::new(lock, holder, self.state, ms, renew, self.sent, self.token)
    }
}

impl Lock {
    /// The lease to apply and whether the watchdog renews it.
    fn lease_mode(&self) -> Result<(Duration, bool)> {
        match self.inner.lease {
            Some(lease) => {
                lease_ms(lease)?;
                Ok((lease, false))
            }
            None => Ok((self.inner.client.watchdog_timeout(), true)),
        }
    }

    /// The acquire core of every kind of [`Lock`]: attempts until granted
    /// or `deadline` (`None`: no deadline) has passed, waiting between
    /// attempts. The guard owns a clone of this handle.
    pub(crate) fn acquire(&self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let started = Instant::now();
        self.check_name()?;
        self.inner.client.check_open()?;
        let (lease, renew) = self.lease_mode()?;
        let ms = lease_ms(lease)?;
        let holder = self.inner.client.holder_id();
        let holder_str: Arc<str> = holder.as_arc().clone();
        if self.is_write() && self.reads_here() {
            return Err(Error::invalid(
                "this thread holds the read side of this read-write lock; the write side \
                 cannot be had while it reads (no upgrade: release the read side first)",
            ));
        }
        // One more hold past the shape bound would make the lock read as
        // no lock's to every script (its own renewal and release included),
        // as a planted count does: refused here, before Redis is asked.
        let held = thread_holds::count(self.inner.client.id().as_u128(), self.hold_key());
        if held >= crate::lock::shape::MAX_HOLD_COUNT {
            return Err(Error::invalid(format!(
                "this thread already holds this lock {held} times, the most one holder may \
                 (a larger hold count is no lock's to the scripts: see docs/OPERATIONS.md)"
            )));
        }
        // This thread's release of the lock may still be retried after a
        // failover: it drops every hold of this holder, a new one too.
        if !thread_holds::wait_released(self.inner.client.id().as_u128(), self.hold_key(), deadline)
        {
            return Ok(None);
        }
        let mut waiting = crate::metrics::Waiting::none();
        let kind = self.hold_kind();
        let mut counted = |attempt: Result<Attempt<Granted>>| {
            if matches!(attempt, Ok(Attempt::Busy(_))) {
                waiting.start(kind);
            }
            trace_attempt(self, &holder_str, &attempt);
            attempt
        };
        let granted = match self.fair_keys() {
            Some(_) => self.wait_fair(&holder_str, deadline, |enqueue| {
                counted(self.attempt(&holder_str, lease, ms, renew, enqueue))
            }),
            None => {
                // A re-entry never queues: it would wait for itself.
                let wake =
                    if thread_holds::current(self.inner.client.id().as_u128(), self.hold_key())
                        .is_none()
                    {
                        Wake::OneInTurn
                    } else {
                        Wake::One
                    };
                wait_loop(
                    &self.inner.client,
                    &self.inner.channel,
                    (&self.inner.name[..], kind.as_str()),
                    deadline,
                    wake,
                    || counted(self.attempt(&holder_str, lease, ms, renew, false)),
                )
            }
        }?;
        if granted.is_some() && self.is_read() {
            self.pass_read_wake();
        }
        drop(waiting);
        log_outcome(self, &holder_str, started, granted.is_some());
        Ok(granted.map(|g| g.into_guard(self.clone(), holder, ms, renew)))
    }

    /// Runs this kind's acquire script once; sets `sent_script` once a
    /// connection was had (the script may have run from then on). With
    /// replica acknowledgement asked for, a grant is followed by `WAIT` on
    /// the same connection and `short_acks` gets the count when it falls
    /// short.
    fn run_acquire(
        &self,
        holder: &str,
        ms: u64,
        enqueue: bool,
        sent: &mut Instant,
        sent_script: &mut bool,
        short_acks: &mut Option<u64>,
    ) -> Result<Acquire> {
        let acks = self.replica_acks();
        acks.validate()?;
        let response_timeout = self.inner.client.config().response_timeout;
        let script = |conn: &mut dyn redis::ConnectionLike| match &self.inner.kind {
            Kind::Reentrant => scripts::acquire(conn, &self.inner.name, holder, ms),
            Kind::Fenced { token, .. } => {
                scripts::fenced_acquire(conn, &self.inner.name, token, holder, ms)
            }
            Kind::Read { .. } | Kind::Write => self.rw_acquire(conn, holder, ms),
            Kind::Fair {
                queue,
                timeouts,
                wait_timeout,
            } => {
                let keys = FairKeys {
                    key: &self.inner.name,
                    queue,
                    timeouts,
                    channel: &self.inner.channel,
                };
                let wait_ms = lease_ms(*wait_timeout)?;
                scripts::fair_acquire(conn, keys, holder, ms, wait_ms, enqueue)
            }
        };
        let reply = if acks.min == 0 {
            // Nothing to WAIT for: the call may share a connection.
            self.inner
                .client
                .with_shared_conn(&self.inner.name, |conn| {
                    // A script still queued at its deadline, or whose
                    // shared connection could not be made, was not
                    // written: nothing ran, nothing is to be undone.
                    crate::connection::shared::forget_unsent();
                    // The lease counts from the attempt that ran, not the
                    // first one (a Cluster slot that moves is waited for).
                    *sent = Instant::now();
                    let result = script(conn);
                    if !crate::connection::shared::unsent() {
                        *sent_script = true;
                    }
                    result
                })
        } else {
            self.inner.client.with_conn(&self.inner.name, |conn| {
                *sent_script = true;
                *sent = Instant::now();
                let source = self.inner.client.source();
                // A waiting thread's record entry rides ahead of the script.
                let before = crate::connection::prelude::take_for(source, &self.inner.name);
                let (reply, acked) = acks.run(conn, response_timeout, before, script)?;
                if let (Acquire::Acquired { .. }, Some(acked)) = (&reply, acked)
                    && acked < u64::from(acks.min)
                {
                    *short_acks = Some(acked);
                }
                Ok(reply)
            })
        };
        reply.map(|reply| match (&self.inner.kind, reply) {
            // A queued waiter must attempt again well before its
            // deadline, or the others prune it as dead.
            (Kind::Fair { wait_timeout, .. }, Acquire::Busy { pttl }) => {
                let heartbeat = *wait_timeout / 3;
                Acquire::Busy {
                    pttl: Some(pttl.map_or(heartbeat, |p| p.min(heartbeat))),
                }
            }
            (_, reply) => reply,
        })
    }

    /// One acquisition attempt. On success the hold is recorded and, when
    /// new, handed to the watchdog.
    fn attempt(
        &self,
        holder: &Arc<str>,
        lease: Duration,
        ms: u64,
        renew: bool,
        enqueue: bool,
    ) -> Result<Attempt<Granted>> {
        let mut interrupted = 0;
        let (reply, sent, sent_script, short_acks) = loop {
            let mut sent = Instant::now();
            let mut sent_script = false;
            let mut short_acks = None;
            let reply = self.run_acquire(
                holder,
                ms,
                enqueue,
                &mut sent,
                &mut sent_script,
                &mut short_acks,
            );
            // A stopped and continued process (EINTR) lost the reply of a
            // script that ran on a live server: give back what it may have
            // granted, as for any lost reply, and ask once more rather than
            // fail the call. Not for a thread that holds the lock already:
            // its grant cannot be told from its earlier holds.
            if let Err(e) = &reply
                && e.is_interrupted()
                && sent_script
                && interrupted < MAX_INTERRUPTED_ATTEMPTS
                && thread_holds::current(self.inner.client.id().as_u128(), self.hold_key())
                    .is_none()
            {
                interrupted += 1;
                self.release_unknown(holder);
                continue;
            }
            break (reply, sent, sent_script, short_acks);
        };
        if let (Ok(Acquire::Acquired { .. }), Some(acked)) = (&reply, short_acks) {
            // Too few replicas have the grant: a failover could hand the
            // lock (or the fencing token) to someone else. Undo it, as
            // Redisson's syncedEval does, and say why.
            self.release_one(holder, ms);
            return Err(self
                .replica_acks()
                .not_replicated(&self.inner.name, Some(acked)));
        }
        self.settle(reply, sent_script, holder, lease, ms, renew, sent)
    }

    /// Turns the reply of a script that grants this lock (this kind's
    /// acquire script, or a script built on it, such as a run-once claim)
    /// into the attempt's outcome: a grant is recorded as a hold and, when
    /// new, handed to the watchdog; a grant whose reply was lost is undone.
    /// `sent_script`: whether the script may have run; `sent`: when it was
    /// sent.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one attempt, passed through unchanged"
    )]
    pub(crate) fn settle(
        &self,
        reply: Result<Acquire>,
        sent_script: bool,
        holder: &Arc<str>,
        lease: Duration,
        ms: u64,
        renew: bool,
        sent: Instant,
    ) -> Result<Attempt<Granted>> {
        let client_id = self.inner.client.id().as_u128();
        let token = match reply {
            Ok(Acquire::Acquired { token }) => token,
            Ok(Acquire::Busy { pttl }) => return Ok(Attempt::Busy(pttl)),
            Err(e) => {
                // Only a script that was sent can have run: a refused connect
                // or a wrong password never got that far.
                if sent_script
                    && e.breaks_connection()
                    && thread_holds::current(client_id, self.hold_key()).is_none()
                {
                    // The script may have run: do not leave a hold nobody
                    // knows of (it would block everyone for a whole lease).
                    self.release_unknown(holder);
                }
                return Err(e);
            }
        };
        let valid_until = lease::valid_until(sent, lease);
        let now = Instant::now();
        if self.inner.client.is_shut_down() || now >= valid_until {
            // Granted too late to be of use (the reply took longer than the
            // lease), or the client shut down meanwhile: give it back.
            self.release_one(holder, ms);
            self.inner.client.check_open()?;
            return Ok(Attempt::Busy(Some(Duration::ZERO)));
        }
        let counters = self.inner.client.counters().clone();
        let (state, fresh) = thread_holds::enter(client_id, self.hold_key(), || {
            Arc::new(LeaseState::since(
                sent,
                valid_until,
                counters,
                self.hold_kind(),
            ))
        });
        if fresh {
            let sync = self.sync_hold(holder).map(Box::new);
            // Fixed read holds are looked up (and kept) every third of the
            // watchdog timeout or of their own lease, whichever is shorter:
            // in a deployment shared with Redisson, that is within its
            // read-lock watchdog's own period (see `Entry::recheck`), and a
            // lease shorter than the watchdog timeout is looked up before
            // its end, so that a cut is given back before it runs out.
            let recheck = (!renew && matches!(sync.as_deref(), Some(SyncHold::Read { .. })))
                .then(|| self.inner.client.config().watchdog_timeout.min(lease) / 3);
            let entry = watchdog::Entry {
                key: self.inner.name.clone(),
                channel: self.inner.channel.clone(),
                holder: match self.holder_field(holder) {
                    std::borrow::Cow::Owned(field) => Arc::from(field),
                    std::borrow::Cow::Borrowed(_) => holder.clone(),
                },
                sync,
                lease,
                renew,
                recheck,
                renew_batch: self.inner.client.config().renew_batch,
                queue: self.queue_key().map(Arc::from),
                state: state.clone(),
                source: self.inner.client.source().clone(),
                counters: self.inner.client.counters().clone(),
                kind: self.hold_kind(),
                context: self.inner.client.context().clone(),
                renewed_at: sent,
                acks: self.replica_acks(),
                response_timeout: self.inner.client.config().response_timeout,
                classic_publish: self.inner.client.config().interop.classic_publish,
                listen: true,
                home: watchdog::UNHOMED,
            };
            let due = match (renew, recheck) {
                (true, _) => sent + lease / 3,
                (false, Some(every)) => valid_until.min(sent + every),
                (false, None) => valid_until,
            };
            // A force unlock deletes the lock and publishes on its channel:
            // the watchdog has the subscriber listen there once the hold
            // lasted a moment, so that it hears of the loss at once.
            let _ = self.inner.client.subscriber();
            watchdog::register(entry, due);
        } else if renew {
            // A re-entry into a hold lost meanwhile stays lost: its guard
            // says so, and the key keeps the lease this grant set.
            state.extend_to(valid_until);
        } else {
            state.set_valid_until(valid_until, now);
        }
        Ok(Attempt::Acquired(Granted { state, sent, token }))
    }

    pub(crate) fn release_one(&self, holder: &str, ms: u64) {
        let released = self.release_str(holder, ms);
        if let Err(e) = released {
            log::warn!(
                "redguard: could not give back lock {:?} held by {holder}: {e}; it expires \
                 with its lease",
                String::from_utf8_lossy(&self.inner.name),
                e = e.chain()
            );
        }
    }

    /// Undoes a grant whose reply was lost (the acquire script may or may
    /// not have run) by releasing every hold of `holder`, before the
    /// attempt's error reaches the caller. It must not run later: by then
    /// the same thread may have acquired again under the same holder id,
    /// and a late undo would delete that grant while its guard lives (two
    /// owners). It costs the failing call one more round trip, or two when
    /// the first one's connection broke or its reply was unreadable
    /// ([`crate::undo`]).
    pub(crate) fn release_unknown(&self, holder: &Arc<str>) {
        let field = match self.holder_field(holder) {
            std::borrow::Cow::Owned(field) => Arc::from(field),
            std::borrow::Cow::Borrowed(_) => holder.clone(),
        };
        let sync = self.sync_hold(holder);
        let (key, channel) = (&self.inner.name, &self.inner.channel);
        let released = crate::retry::give_back(|| {
            self.inner.client.with_shared_conn(key, |conn| match &sync {
                Some(hold) => scripts::release_sync_hold(
                    conn,
                    self.inner.client.publish(key),
                    hold,
                    key,
                    channel,
                    &field,
                ),
                None => scripts::release_holder(
                    conn,
                    self.inner.client.publish(key),
                    key,
                    channel,
                    self.queue_key(),
                    &field,
                ),
            })
        });
        match released {
            Ok(true) => log::debug!(
                "redguard: released a grant of lock {:?} to {holder} whose reply was lost",
                String::from_utf8_lossy(key)
            ),
            Ok(false) => {}
            Err(e) => log::warn!(
                "redguard: acquire of lock {:?} by {holder} has an unknown outcome and could \
                 not be undone ({e}); a grant, if any, expires with its lease (and is dropped \
                 by this thread's next release of the lock)",
                String::from_utf8_lossy(key),
                e = e.chain()
            ),
        }
    }
}

/// How many times one acquisition attempt is made again after its reply
/// was lost to an interrupted socket call (see [`Lock::attempt`]).
const MAX_INTERRUPTED_ATTEMPTS: u32 = 3;

/// Logs (debug) how an acquisition of `lock` that began at `started`
/// ended: granted after how long a wait, or not granted in time. Contention
/// is no error: never more than debug.
fn log_outcome(lock: &Lock, holder: &str, started: Instant, granted: bool) {
    let labels = lock
        .client()
        .context()
        .labels(lock.hold_kind(), lock.name());
    if granted {
        crate::metrics::acquired(labels, started.elapsed());
    } else {
        crate::metrics::timed_out(labels);
    }
    if log::log_enabled!(log::Level::Debug) {
        let name = String::from_utf8_lossy(lock.name());
        let kind = lock.hold_kind();
        let waited = started.elapsed();
        if granted {
            log::debug!(
                "redguard: acquired {kind} lock {name:?} as {holder} after waiting {waited:?}"
            );
        } else {
            log::debug!(
                "redguard: {kind} lock {name:?} not acquired by {holder}: busy for {waited:?}"
            );
        }
    }
}

/// Logs (trace) what one acquire attempt of `holder` on `lock` met: the
/// finest line there is, one per attempt, for `-vvv`.
fn trace_attempt(lock: &Lock, holder: &str, attempt: &Result<Attempt<Granted>>) {
    if !log::log_enabled!(log::Level::Trace) {
        return;
    }
    let met = match attempt {
        Ok(Attempt::Acquired(_)) => "granted".to_owned(),
        Ok(Attempt::Busy(Some(ttl))) => format!("busy, the holder's lease ends in {ttl:?}"),
        Ok(Attempt::Busy(None)) => "busy".to_owned(),
        Ok(Attempt::Unknown(e)) => format!("unknown outcome ({e})"),
        Err(e) => format!("failed ({e})"),
    };
    log::trace!(
        "redguard: attempt on {} lock {:?} as {holder}: {met}",
        lock.hold_kind(),
        String::from_utf8_lossy(lock.name())
    );
}
