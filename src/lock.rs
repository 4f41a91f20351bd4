//! [`Lock`]: a named reentrant lock handle and its acquire loop.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::config::{clock_drift, lease_ms};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::holder::HolderId;
use crate::holds;
use crate::keys;
use crate::lease::LeaseState;
use crate::scripts::{self, Acquire, FairKeys, Release};
use crate::subscriber::Event;
use crate::watchdog;

/// A reentrant distributed lock (Redisson's `RLock`), named by a Redis key.
///
/// A cheap handle (`Clone + Send + Sync`): make it once and share it, or
/// make one per use. Acquiring returns a [`LockGuard`] that releases one
/// hold when dropped.
///
/// * **Reentrant per thread**: the holder id is `"<client id>:<thread id>"`;
///   a thread that holds the lock can lock it again (the hold count grows);
///   each guard releases one hold, the last one deletes the key and
///   publishes the unlock message.
/// * **Leases**: without an explicit lease the lock's key expires after the
///   client's watchdog timeout (30 s by default) and the watchdog renews it
///   every third of that while the guard lives; a crashed process's lock
///   thus frees itself within one lease. [`Lock::with_lease`] gives a fixed
///   lease that is not renewed.
/// * **Waiting** is woken by Redis pub/sub (one subscriber connection per
///   client), bounded by the holder's remaining ttl and the client's poll
///   interval, so a lost message costs at most one of those.
///
/// Wire layout (Redisson's): a hash at key `name` mapping holder id to hold
/// count, `PEXPIRE` = lease; unlock message `0` on
/// `redisson_lock__channel:{name}`.
///
/// [`Client::fair_lock`] makes the fair kind of this lock (Redisson's
/// `RFairLock`, also an `RLock`): the same handle and guards, with waiters
/// served first come, first served.
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: Arc<[u8]>,
    channel: Arc<[u8]>,
    lease: Option<Duration>,
    kind: Kind,
}

/// Which acquire and release scripts a [`Lock`] runs. Everything else (the
/// wait loop, holds, guards, renewal) is shared by every kind.
#[derive(Clone)]
pub(crate) enum Kind {
    /// Redisson's `RLock`.
    Reentrant,
    /// Redisson's `RFairLock`: a wait queue and a deadline per waiter.
    Fair {
        /// `redisson_lock_queue:{name}`.
        queue: Arc<[u8]>,
        /// `redisson_lock_timeout:{name}`.
        timeouts: Arc<[u8]>,
        /// How long a queued waiter may go without an attempt before it is
        /// presumed dead and pruned.
        wait_timeout: Duration,
    },
    /// Redisson's `RFencedLock`: every acquisition draws a token.
    Fenced {
        /// `redisson_lock_token:{name}`.
        token: Arc<[u8]>,
    },
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Reentrant => f.write_str("Reentrant"),
            Kind::Fair { wait_timeout, .. } => f
                .debug_struct("Fair")
                .field("wait_timeout", wait_timeout)
                .finish_non_exhaustive(),
            Kind::Fenced { .. } => f.write_str("Fenced"),
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("kind", &self.kind)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// A successful attempt: the hold's shared state, when the granting script
/// was sent, and the fencing token it drew (fenced locks only).
pub(crate) struct Granted {
    state: Arc<LeaseState>,
    sent: Instant,
    token: Option<u64>,
}

/// A queued fair-lock waiter's place. Dropped on every way out of the wait
/// (timeout, error, shutdown, panic) while still armed, it takes the waiter
/// out of the queue and the deadline set; a grant disarms it, because the
/// acquire script already removed the waiter.
struct QueueSeat<'a> {
    lock: &'a Lock,
    holder: &'a str,
    armed: bool,
}

impl Drop for QueueSeat<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(keys) = self.lock.fair_keys() else {
            return;
        };
        let left = self.lock.client.with_conn(&self.lock.name, |conn| {
            scripts::fair_leave(conn, keys, self.holder)
        });
        if let Err(e) = left {
            log::warn!(
                "redguard: could not leave the queue of fair lock {:?}: {e}; \
                 the entry is pruned after the fair wait timeout",
                String::from_utf8_lossy(&self.lock.name)
            );
        }
    }
}

/// The outcome of one acquisition attempt inside the wait loop.
pub(crate) enum Attempt<T> {
    /// Acquired: stop waiting.
    Acquired(T),
    /// Busy: wait at most this long (the holder's remaining ttl; `None`
    /// when unknown or without expiry) before the next attempt.
    Busy(Option<Duration>),
}

impl Lock {
    pub(crate) fn new(client: Client, name: &[u8]) -> Lock {
        Lock {
            channel: keys::channel(name).into(),
            name: name.into(),
            client,
            lease: None,
            kind: Kind::Reentrant,
        }
    }

    /// A fair lock: see [`Client::fair_lock`].
    pub(crate) fn new_fair(client: Client, name: &[u8]) -> Lock {
        let wait_timeout = client.config().fair_wait_timeout;
        Lock {
            kind: Kind::Fair {
                queue: keys::fair_queue(name).into(),
                timeouts: keys::fair_timeouts(name).into(),
                wait_timeout,
            },
            ..Lock::new(client, name)
        }
    }

    /// A fenced lock's inner lock: see [`Client::fenced_lock`].
    pub(crate) fn new_fenced(client: Client, name: &[u8]) -> Lock {
        Lock {
            kind: Kind::Fenced {
                token: keys::token(name).into(),
            },
            ..Lock::new(client, name)
        }
    }

    /// `true` for a fair lock ([`Client::fair_lock`]).
    pub fn is_fair(&self) -> bool {
        matches!(self.kind, Kind::Fair { .. })
    }

    /// For a fair lock, how long a queued waiter may go without an attempt
    /// before the others prune it as dead ([`Builder::fair_wait_timeout`]
    /// when the lock was made); `None` for other kinds.
    ///
    /// [`Builder::fair_wait_timeout`]: crate::Builder::fair_wait_timeout
    pub fn fair_wait_timeout(&self) -> Option<Duration> {
        match self.kind {
            Kind::Fair { wait_timeout, .. } => Some(wait_timeout),
            _ => None,
        }
    }

    /// The lock name: the Redis key of the lock hash.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The explicit lease set by [`Lock::with_lease`], if any.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The same lock, acquired with a fixed `lease`: the key expires `lease`
    /// after each acquisition and the watchdog does not renew it (Redisson's
    /// `lock(leaseTime, unit)`). Fractions of a millisecond round up.
    ///
    /// The lease is checked when the lock is acquired: one under
    /// [`MIN_LEASE`](crate::MIN_LEASE) (5 ms) or above
    /// [`MAX_LEASE`](crate::MAX_LEASE) makes that call return
    /// [`Error::InvalidArgument`].
    pub fn with_lease(&self, lease: Duration) -> Lock {
        Lock {
            lease: Some(lease),
            ..self.clone()
        }
    }

    /// Acquires the lock, waiting as long as it takes (Redisson's `lock()`).
    /// Re-entering a lock the calling thread holds succeeds at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (bad name or lease), [`Error::WrongType`]
    /// (a value of another type is stored at the name), [`Error::Shutdown`],
    /// and connection, timeout and server errors. The wait itself never
    /// fails: a waiter whose pub/sub connection broke keeps retrying.
    pub fn lock(&self) -> Result<LockGuard<'_>> {
        self.acquire(None)?
            .ok_or_else(|| Error::Timeout("lock() gave up without a deadline".into()))
    }

    /// Acquires the lock if it is free (or held by the calling thread),
    /// without waiting. `Ok(None)` when someone else holds it.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`].
    pub fn try_lock(&self) -> Result<Option<LockGuard<'_>>> {
        self.acquire(Some(Instant::now()))
    }

    /// Acquires the lock, waiting at most `timeout`. `Ok(None)` when it
    /// could not be had in time. A timeout too large to represent (such as
    /// `Duration::MAX`) waits forever.
    ///
    /// The attempt in flight when the time runs out completes (bounded by
    /// the response timeout), so the call returns within `timeout` plus one
    /// response timeout.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`].
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_>>> {
        self.acquire(Instant::now().checked_add(timeout))
    }

    /// Acquires the lock, waiting until `deadline` at most. `Ok(None)` when
    /// it could not be had in time.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`].
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard<'_>>> {
        self.acquire(Some(deadline))
    }

    /// `true` when someone holds the lock (any holder; any value at the key).
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors.
    pub fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        self.client.with_conn(&self.name, |conn| {
            redis::cmd("EXISTS")
                .arg(&self.name[..])
                .query::<bool>(conn)
                .map_err(Error::from)
        })
    }

    /// `true` when the calling thread holds the lock through this client.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], connection, timeout and server errors.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many holds the calling thread has on the lock (0 when it does
    /// not hold it), as stored in Redis.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], connection, timeout and server errors.
    pub fn hold_count(&self) -> Result<u64> {
        self.check_name()?;
        let holder = self.client.holder_id();
        self.client.with_conn(&self.name, |conn| {
            redis::cmd("HGET")
                .arg(&self.name[..])
                .arg(holder.as_str())
                .query::<Option<u64>>(conn)
                .map(Option::unwrap_or_default)
                .map_err(|e| Error::from_redis(e, &self.name))
        })
    }

    /// Every holder id with its hold count, as stored in Redis (empty when
    /// the lock is free).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], connection, timeout and server errors.
    pub fn holders(&self) -> Result<Vec<(String, u64)>> {
        self.check_name()?;
        self.client.with_conn(&self.name, |conn| {
            redis::cmd("HGETALL")
                .arg(&self.name[..])
                .query::<Vec<(String, u64)>>(conn)
                .map_err(|e| Error::from_redis(e, &self.name))
        })
    }

    /// The remaining lease of the lock's key: `None` when the lock is free,
    /// `Some(Duration::MAX)` when the key exists without an expiry.
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.check_name()?;
        let pttl: i64 = self.client.with_conn(&self.name, |conn| {
            redis::cmd("PTTL")
                .arg(&self.name[..])
                .query(conn)
                .map_err(Error::from)
        })?;
        Ok(match pttl {
            -2 => None,
            ms if ms < 0 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms as u64)),
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`). `true` when there was a lock to delete. Holders find
    /// out at their next renewal or [`LockGuard::check`].
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] (a value of another type at the name is left
    /// alone), connection, timeout and server errors.
    pub fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        self.client.check_open()?;
        self.client.with_conn(&self.name, |conn| {
            scripts::force_unlock(conn, &self.name, &self.channel, self.queue_key())
        })
    }

    /// The waiters queued on a fair lock, head first: each one's holder id
    /// and how long it keeps its place without a further attempt (zero once
    /// its deadline has passed; the next acquire or release prunes it), on
    /// the Redis server's clock. Always empty for other kinds of lock, which
    /// keep no queue.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the queue or deadline keys hold another
    /// type, connection, timeout and server errors.
    pub fn queue(&self) -> Result<Vec<(String, Duration)>> {
        self.check_name()?;
        let Some(keys) = self.fair_keys() else {
            return Ok(Vec::new());
        };
        // Queue, deadlines and the server's TIME, read atomically.
        type Snapshot = (Vec<String>, Vec<(String, f64)>, (u64, u64));
        let (ids, deadlines, (secs, micros)): Snapshot =
            self.client.with_conn(&self.name, |conn| {
                redis::pipe()
                    .atomic()
                    .cmd("LRANGE")
                    .arg(keys.queue)
                    .arg(0)
                    .arg(-1)
                    .cmd("ZRANGE")
                    .arg(keys.timeouts)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .cmd("TIME")
                    .query(conn)
                    .map_err(|e| Error::from_redis(e, keys.queue))
            })?;
        let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
        let deadlines: std::collections::HashMap<String, f64> = deadlines.into_iter().collect();
        Ok(ids
            .into_iter()
            .map(|id| {
                let left = deadlines.get(&id).map_or(0, |&deadline| {
                    let deadline = if deadline.is_finite() && deadline > 0.0 {
                        deadline as u64
                    } else {
                        0
                    };
                    deadline.saturating_sub(now_ms)
                });
                (id, Duration::from_millis(left))
            })
            .collect())
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    fn fair_keys(&self) -> Option<FairKeys<'_>> {
        match &self.kind {
            Kind::Fair {
                queue, timeouts, ..
            } => Some(FairKeys {
                key: &self.name,
                queue,
                timeouts,
                channel: &self.channel,
            }),
            _ => None,
        }
    }

    fn queue_key(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Fair { queue, .. } => Some(queue),
            _ => None,
        }
    }

    fn check_name(&self) -> Result<()> {
        keys::validate_name(&self.name).map_err(Error::InvalidArgument)
    }

    /// The lease to apply and whether the watchdog renews it.
    fn lease_mode(&self) -> Result<(Duration, bool)> {
        match self.lease {
            Some(lease) => {
                lease_ms(lease)?;
                Ok((lease, false))
            }
            None => Ok((self.client.watchdog_timeout(), true)),
        }
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<LockGuard<'_>>> {
        Ok(self.acquire_with_token(deadline)?.map(|(guard, _)| guard))
    }

    /// Acquires, waiting until `deadline` (`None`: forever); also returns
    /// the fencing token the grant drew (fenced locks only).
    pub(crate) fn acquire_with_token(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<(LockGuard<'_>, Option<u64>)>> {
        self.check_name()?;
        self.client.check_open()?;
        let (lease, renew) = self.lease_mode()?;
        let ms = lease_ms(lease)?;
        let holder = self.client.holder_id();
        let holder_str: Arc<str> = holder.as_arc().clone();
        let granted = match &self.kind {
            Kind::Fair { .. } => {
                // A fair waiter is woken on its own channel, by the release
                // that makes it the one to go next.
                let channel = keys::fair_channel(&self.name, &holder_str);
                let mut seat = QueueSeat {
                    lock: self,
                    holder: &holder_str,
                    armed: false,
                };
                // The server's queue orders the waiters; no local queue.
                wait_loop(&self.client, &channel, deadline, false, || {
                    // Once the deadline has passed this is the last attempt:
                    // do not join the queue only to leave it again.
                    let enqueue = deadline.is_none_or(|d| Instant::now() < d);
                    seat.armed |= enqueue;
                    let attempt = self.attempt(&holder_str, lease, ms, renew, enqueue);
                    if let Ok(Attempt::Acquired(_)) = &attempt {
                        seat.armed = false;
                    }
                    attempt
                })
            }
            _ => {
                // A re-entry never queues: it would wait for itself.
                let queue_first = holds::current(self.client.id().as_u128(), &self.name).is_none();
                wait_loop(&self.client, &self.channel, deadline, queue_first, || {
                    self.attempt(&holder_str, lease, ms, renew, false)
                })
            }
        }?;
        Ok(granted.map(|g| {
            let guard = LockGuard::new(self, holder.clone(), g.state, ms, renew, g.sent);
            (guard, g.token)
        }))
    }

    /// Runs this kind's acquire script once; sets `sent_script` once a
    /// connection was had (the script may have run from then on).
    fn run_acquire(
        &self,
        holder: &str,
        ms: u64,
        enqueue: bool,
        sent_script: &mut bool,
    ) -> Result<Acquire> {
        self.client
            .with_conn(&self.name, |conn| {
                *sent_script = true;
                match &self.kind {
                    Kind::Reentrant => scripts::acquire(conn, &self.name, holder, ms),
                    Kind::Fenced { token } => {
                        scripts::fenced_acquire(conn, &self.name, token, holder, ms)
                    }
                    Kind::Fair {
                        queue,
                        timeouts,
                        wait_timeout,
                    } => {
                        let keys = FairKeys {
                            key: &self.name,
                            queue,
                            timeouts,
                            channel: &self.channel,
                        };
                        let wait_ms = lease_ms(*wait_timeout)?;
                        scripts::fair_acquire(conn, keys, holder, ms, wait_ms, enqueue)
                    }
                }
            })
            .map(|reply| match (&self.kind, reply) {
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
        let client_id = self.client.id().as_u128();
        let sent = Instant::now();
        let mut sent_script = false;
        let reply = self.run_acquire(holder, ms, enqueue, &mut sent_script);
        let token = match reply {
            Ok(Acquire::Acquired { token }) => token,
            Ok(Acquire::Busy { pttl }) => return Ok(Attempt::Busy(pttl)),
            Err(e) => {
                // Only a script that was sent can have run: a refused connect
                // or a wrong password never got that far.
                if sent_script
                    && e.breaks_connection()
                    && holds::current(client_id, &self.name).is_none()
                {
                    // The script may have run: do not leave a hold nobody
                    // knows of (it would block everyone for a whole lease).
                    self.release_unknown(holder);
                }
                return Err(e);
            }
        };
        let valid_until = sent + lease.saturating_sub(clock_drift(lease));
        let now = Instant::now();
        if self.client.is_shut_down() || now >= valid_until {
            // Granted too late to be of use (the reply took longer than the
            // lease), or the client shut down meanwhile: give it back.
            self.release_one(holder, ms);
            self.client.check_open()?;
            return Ok(Attempt::Busy(Some(Duration::ZERO)));
        }
        let counters = self.client.counters().clone();
        let (state, fresh) = holds::enter(client_id, &self.name, || {
            Arc::new(LeaseState::new(valid_until, counters))
        });
        if fresh {
            let entry = watchdog::Entry {
                key: self.name.clone(),
                channel: self.channel.clone(),
                holder: holder.clone(),
                lease,
                renew,
                renew_batch: self.client.config().renew_batch,
                queue: self.queue_key().map(Arc::from),
                state: state.clone(),
                source: self.client.source().clone(),
                counters: self.client.counters().clone(),
            };
            let due = if renew { sent + lease / 3 } else { valid_until };
            watchdog::register(entry, due);
        } else if renew {
            state.extend_to(valid_until);
        } else {
            state.set_valid_until(valid_until);
        }
        Ok(Attempt::Acquired(Granted { state, sent, token }))
    }

    fn release_one(&self, holder: &str, ms: u64) {
        let released = self.release_str(holder, ms);
        if let Err(e) = released {
            log::warn!(
                "redguard: could not give back lock {:?}: {e}; it expires with its lease",
                String::from_utf8_lossy(&self.name)
            );
        }
    }

    /// Undoes a grant whose reply was lost, off the caller's thread so the
    /// caller's deadline is not stretched by a second round trip to a
    /// server that just failed to answer.
    fn release_unknown(&self, holder: &Arc<str>) {
        let (client, name, channel, queue, holder) = (
            self.client.clone(),
            self.name.clone(),
            self.channel.clone(),
            self.queue_key().map(Arc::<[u8]>::from),
            holder.clone(),
        );
        let undo = move || {
            let released = client.with_conn(&name, |conn| {
                scripts::release_holder(conn, &name, &channel, queue.as_deref(), &holder)
            });
            match released {
                Ok(true) => log::debug!("redguard: released a grant whose reply was lost"),
                Ok(false) => {}
                Err(e) => log::warn!(
                    "redguard: acquire of {:?} has an unknown outcome and could not be undone \
                     ({e}); a grant, if any, expires with its lease",
                    String::from_utf8_lossy(&name)
                ),
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("redguard-undo".into())
            .spawn(undo)
        {
            log::warn!("redguard: cannot start a thread to undo a lost grant: {e}");
        }
    }

    /// Releases one hold of `holder`: the guard's unlock.
    pub(crate) fn release(&self, holder: &HolderId, ms: u64) -> Result<Release> {
        self.release_str(holder.as_str(), ms)
    }

    fn release_str(&self, holder: &str, ms: u64) -> Result<Release> {
        self.client
            .with_conn(&self.name, |conn| match self.fair_keys() {
                Some(keys) => scripts::fair_release(conn, keys, holder, ms),
                None => scripts::release(conn, &self.name, &self.channel, holder, ms),
            })
    }

    /// Drops every hold of `holder`.
    pub(crate) fn release_all(&self, holder: &HolderId) -> Result<bool> {
        self.release_all_str(holder.as_str())
    }

    fn release_all_str(&self, holder: &str) -> Result<bool> {
        self.client.with_conn(&self.name, |conn| {
            scripts::release_holder(conn, &self.name, &self.channel, self.queue_key(), holder)
        })
    }

    /// Sets the lease of `holder`'s hold to `ms` from now: `false` when it
    /// no longer holds the lock.
    pub(crate) fn renew(&self, holder: &HolderId, ms: u64) -> Result<bool> {
        self.client.with_conn(&self.name, |conn| {
            scripts::renew(conn, &self.name, holder.as_str(), ms)
        })
    }
}

/// The waiter loop shared by every lock kind: attempt; when busy, register
/// on `channel` (confirmed before the next attempt, so no unlock published
/// after it is missed), then alternate attempts and waits of at most
/// min(busy hint, poll interval, time left).
///
/// With `queue_first`, a caller that finds other threads of its client
/// already waiting on `channel` joins the back of their queue and waits for
/// its wake-up before its first attempt, instead of barging in ahead of the
/// waiter an unlock message just woke. Within one client, waiters are thus
/// served in arrival order, and a thread that releases and at once locks
/// again lets the waiters have their turn. Its first wait is bounded by the
/// poll interval like every other.
pub(crate) fn wait_loop<T>(
    client: &Client,
    channel: &[u8],
    deadline: Option<Instant>,
    queue_first: bool,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let poll = client.config().poll_interval;
    let response_timeout = client.config().response_timeout;
    let mut waiter = None;
    if queue_first && let Some(sub) = client.running_subscriber() {
        let now = Instant::now();
        let left = deadline.map(|d| d.saturating_duration_since(now));
        if left.is_none_or(|l| !l.is_zero()) {
            let confirm_wait = left.map_or(response_timeout, |l| l.min(response_timeout));
            if let Some(w) = sub.waiter_behind(channel, confirm_wait) {
                let turn = left.map_or(poll, |l| l.min(poll));
                if w.wait(turn) == Some(Event::Shutdown) {
                    return Err(Error::Shutdown);
                }
                client.check_open()?;
                waiter = Some(w);
            }
        }
    }
    loop {
        let hint = match attempt()? {
            Attempt::Acquired(granted) => return Ok(Some(granted)),
            Attempt::Busy(hint) => hint,
        };
        let now = Instant::now();
        let left = match deadline {
            Some(deadline) if deadline <= now => return Ok(None),
            Some(deadline) => Some(deadline - now),
            None => None,
        };
        if waiter.is_none()
            && let Some(sub) = client.subscriber()
        {
            let confirm_wait = left.map_or(response_timeout, |l| l.min(response_timeout));
            waiter = Some(sub.waiter(channel, confirm_wait));
            client.check_open()?;
            // Attempt again now that an unlock cannot go unnoticed.
            continue;
        }
        let mut sleep = poll;
        if let Some(hint) = hint {
            sleep = sleep.min(hint);
        }
        if let Some(left) = left {
            sleep = sleep.min(left);
        }
        match &waiter {
            Some(w) => {
                if w.wait(sleep) == Some(Event::Shutdown) {
                    return Err(Error::Shutdown);
                }
            }
            None => std::thread::park_timeout(sleep),
        }
        client.check_open()?;
    }
}
