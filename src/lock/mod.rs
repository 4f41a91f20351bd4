//! [`Lock`]: the handle on one named lock, whatever its kind (reentrant,
//! fair, fenced), and its read-only and admin operations. Acquiring lives in
//! `acquire`, the guard in `guard`, the fair queue seat in `fair`.

pub(crate) mod acquire;
mod fair;
mod fencing_token;
mod guard;
mod inspect;
mod read_write;
mod scan;
mod shape;
pub(crate) mod thread_holds;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::keys;
use crate::lease::{Pttl, Ttl};
use crate::lost::HoldKind;
use crate::replicas::ReplicaAcks;
use crate::scripts::{self, FairKeys, Release};
use acquire::acquire_methods;

pub use fencing_token::FencingToken;
pub use guard::LockGuard;
pub use inspect::{LockInfo, LockKind, MAX_LOCK_FIELDS, MAX_QUEUE_READ, QueuedWaiter};
pub use read_write::ReadWriteLock;
pub use scan::Listing;

/// A distributed lock named by a Redis key: reentrant ([`Client::lock`],
/// Redisson's `RLock`), fair ([`Client::fair_lock`], `RFairLock`) or fenced
/// ([`Client::fenced_lock`], `RFencedLock`). Every kind has the same
/// methods and the same guard, [`LockGuard`].
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
/// The fair kind keeps its waiters in a queue on the server and serves them
/// first come, first served; the fenced kind draws a fencing token with
/// every grant ([`LockGuard::fencing_token`]).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("orders:42");
/// {
///     let guard = lock.lock()?;         // waits; the watchdog renews the lease
///     guard.check()?;                   // Err(LockLost) if the lease was lost
/// }                                     // dropped: released
/// let batch = lock.with_lease(Duration::from_secs(10)); // fixed lease, no watchdog
/// if let Some(guard) = batch.try_lock()? {
///     guard.extend(Duration::from_secs(20))?;
/// }
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `lock()` or `try_lock()` on it"]
pub struct Lock {
    // One pointer: every guard owns a clone of its handle, so a held lock
    // costs a pointer here, not a copy of the handle.
    inner: Arc<Inner>,
}

/// What a [`Lock`] handle is; shared by its clones and its guards.
#[derive(Clone)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) name: Arc<[u8]>,
    pub(crate) channel: Arc<[u8]>,
    pub(crate) lease: Option<Duration>,
    pub(crate) kind: Kind,
    /// Replica acknowledgement of this handle's writes; the client's
    /// ([`Builder::min_replica_acks`](crate::Builder::min_replica_acks))
    /// when `None`.
    pub(crate) acks: Option<ReplicaAcks>,
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
        /// The waiter's wait in Redisson's queue arithmetic, and how long a
        /// queued waiter may go without an attempt before it is presumed
        /// dead and pruned (once it heads the queue).
        wait_timeout: Duration,
    },
    /// Redisson's `RFencedLock`: every acquisition draws a token.
    Fenced {
        /// `redisson_lock_token:{name}`.
        token: Arc<[u8]>,
        /// A run-once claim ([`Client::once`]) rather than a fenced lock:
        /// the same scripts, another kind of hold.
        once: bool,
    },
    /// The read side of Redisson's `RReadWriteLock`.
    Read {
        /// This side's key in the thread's record of holds (the write side
        /// of the same name uses the name).
        hold_key: Arc<[u8]>,
        /// `{name}`: the base of every reader's timeout keys.
        key_prefix: Arc<[u8]>,
    },
    /// The write side of Redisson's `RReadWriteLock`.
    Write,
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
            Kind::Read { .. } => f.write_str("Read"),
            Kind::Write => f.write_str("Write"),
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &String::from_utf8_lossy(&self.inner.name))
            .field("kind", &self.inner.kind)
            .field("lease", &self.inner.lease)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn from_inner(inner: Inner) -> Lock {
        Lock {
            inner: Arc::new(inner),
        }
    }

    /// A new handle: this one with `change` applied.
    pub(crate) fn with_inner(&self, change: impl FnOnce(&mut Inner)) -> Lock {
        let mut inner = Inner::clone(&self.inner);
        change(&mut inner);
        Lock::from_inner(inner)
    }

    pub(crate) fn new(client: Client, name: &[u8]) -> Lock {
        Lock::from_inner(Inner {
            channel: keys::channel(name).into(),
            name: name.into(),
            client,
            lease: None,
            kind: Kind::Reentrant,
            acks: None,
        })
    }

    /// A fair lock: see [`Client::fair_lock`].
    pub(crate) fn new_fair(client: Client, name: &[u8]) -> Lock {
        let wait_timeout = client.config().fair_wait_timeout;
        Lock::new(client, name).with_inner(|inner| {
            inner.kind = Kind::Fair {
                queue: keys::fair_queue(name).into(),
                timeouts: keys::fair_timeouts(name).into(),
                wait_timeout,
            };
        })
    }

    /// A fenced lock: see [`Client::fenced_lock`].
    pub(crate) fn new_fenced(client: Client, name: &[u8]) -> Lock {
        Lock::new(client, name).with_inner(|inner| {
            inner.kind = Kind::Fenced {
                token: keys::token(name).into(),
                once: false,
            };
        })
    }

    /// The lock a run of run-once key `key` holds: a fenced lock in layout
    /// (see [`Client::once`]).
    pub(crate) fn new_once(client: Client, key: &[u8]) -> Lock {
        Lock::new(client, key).with_inner(|inner| {
            inner.kind = Kind::Fenced {
                token: keys::token(key).into(),
                once: true,
            };
        })
    }

    /// `true` for a fair lock ([`Client::fair_lock`]).
    pub fn is_fair(&self) -> bool {
        matches!(self.inner.kind, Kind::Fair { .. })
    }

    /// `true` for a fenced lock ([`Client::fenced_lock`]): its guards carry
    /// a fencing token.
    pub fn is_fenced(&self) -> bool {
        matches!(self.inner.kind, Kind::Fenced { .. })
    }

    /// For a fair lock, the waiter's wait in Redisson's queue arithmetic,
    /// and how long a queued waiter may go without an attempt before the
    /// others prune it as dead once it heads the queue
    /// ([`Builder::fair_wait_timeout`] when the lock was made); `None` for
    /// other kinds.
    ///
    /// [`Builder::fair_wait_timeout`]: crate::Builder::fair_wait_timeout
    pub fn fair_wait_timeout(&self) -> Option<Duration> {
        match self.inner.kind {
            Kind::Fair { wait_timeout, .. } => Some(wait_timeout),
            _ => None,
        }
    }

    /// The kind of hold this handle takes.
    pub(crate) fn hold_kind(&self) -> HoldKind {
        match self.inner.kind {
            Kind::Reentrant => HoldKind::Reentrant,
            Kind::Fair { .. } => HoldKind::Fair,
            Kind::Fenced { once: true, .. } => HoldKind::Once,
            Kind::Fenced { .. } => HoldKind::Fenced,
            Kind::Read { .. } => HoldKind::Read,
            Kind::Write => HoldKind::Write,
        }
    }

    /// The lock name: the Redis key of the lock hash.
    pub fn name(&self) -> &[u8] {
        &self.inner.name
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The explicit lease set by [`Lock::with_lease`], if any.
    pub fn lease(&self) -> Option<Duration> {
        self.inner.lease
    }

    /// The same lock, acquired with a fixed `lease`: the key expires `lease`
    /// after each acquisition and the watchdog does not renew it (Redisson's
    /// `lock(leaseTime, unit)`). Fractions of a millisecond round up.
    ///
    /// The lease is checked when the lock is acquired: one under
    /// [`MIN_LEASE`](crate::MIN_LEASE) (5 ms) or above
    /// [`MAX_LEASE`](crate::MAX_LEASE) makes that call return
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let nightly = client.lock("report:nightly").with_lease(Duration::from_secs(60));
    /// if let Some(guard) = nightly.try_lock()? {
    ///     // ... at most a minute of work; nothing renews the lease ...
    ///     guard.extend(Duration::from_secs(60))?; // more time, if still ours
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn with_lease(&self, lease: Duration) -> Lock {
        self.with_inner(|inner| inner.lease = Some(lease))
    }

    /// The same lock, whose grants, extensions and fencing tokens need
    /// `replicas` acknowledgements (Redis's `WAIT`) instead of the client's
    /// [`Builder::min_replica_acks`](crate::Builder::min_replica_acks);
    /// 0 turns the check off for this handle. Checked when used: above 1000
    /// is [`Error::InvalidArgument`].
    pub fn min_replica_acks(&self, replicas: u32) -> Lock {
        let acks = ReplicaAcks {
            min: replicas,
            ..self.replica_acks()
        };
        self.with_inner(|inner| inner.acks = Some(acks))
    }

    /// The same lock, waiting at most `timeout` for its replica
    /// acknowledgements instead of the client's
    /// [`Builder::replica_ack_timeout`](crate::Builder::replica_ack_timeout).
    /// Checked when used: outside 1 ms ..= 1 day is
    /// [`Error::InvalidArgument`].
    pub fn replica_ack_timeout(&self, timeout: Duration) -> Lock {
        let acks = ReplicaAcks {
            timeout,
            ..self.replica_acks()
        };
        self.with_inner(|inner| inner.acks = Some(acks))
    }

    /// The replica acknowledgement this handle's writes need.
    pub(crate) fn replica_acks(&self) -> ReplicaAcks {
        self.inner.acks.unwrap_or(self.inner.client.config().acks)
    }

    acquire_methods! {
        guard: LockGuard,
        setup: "",
        handle: "client.lock(\"orders:42\")",
        errors: "[`Error::InvalidArgument`] (bad name or lease, or this thread already holds the lock 1,000 times), [`Error::WrongType`] \
                 (a value of another type is stored at the name, or at the fair queue's \
                 or fencing counter's key), [`Error::Shutdown`], and connection, \
                 timeout and server errors that retrying cannot fix, at once. Errors \
                 retrying can fix (a Redis restart, a freeze, a failover) are retried \
                 until the deadline, then [`Error::Timeout`] names the last one \
                 (`lock` retries them for as long as it takes; `try_lock` returns its \
                 one error as it is). A waiter whose pub/sub connection broke keeps \
                 polling.",
    }

    /// `true` when someone holds the lock (any holder; any value at the key).
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// if client.lock("report:nightly").is_locked()? {
    ///     // someone (any holder, any process) holds it now
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        self.inner.client.with_conn(&self.inner.name, |conn| {
            redis::cmd("EXISTS")
                .arg(&self.inner.name[..])
                .query::<bool>(conn)
                .map_err(Error::redis)
        })
    }

    /// `true` when the calling thread holds the lock through this client.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.lock("report:nightly");
    /// let guard = lock.lock()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many holds the calling thread has on the lock (0 when it does
    /// not hold it), as stored in Redis.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.lock("report:nightly");
    /// let outer = lock.lock()?;
    /// let inner = lock.lock()?; // re-entry
    /// assert_eq!(lock.hold_count()?, 2);
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.check_name()?;
        let holder = self.inner.client.holder_id();
        let field = self.holder_field(holder.as_str());
        self.inner.client.with_conn(&self.inner.name, |conn| {
            redis::cmd("HGET")
                .arg(&self.inner.name[..])
                .arg(&*field)
                .query::<Option<u64>>(conn)
                .map(Option::unwrap_or_default)
                .map_err(|e| Error::from_redis(e, &self.inner.name))
        })
    }

    /// Every holder id with its hold count, as stored in Redis (empty when
    /// the lock is free). A read-write lock lists its readers' ids, and its
    /// writer's as Redisson stores it, with a `:write` suffix. Ids of
    /// foreign (Redisson) holders come back as stored.
    ///
    /// Bounded, whatever is stored at the name: `HLEN` and a first page of
    /// `HSCAN` (one round trip; more pages only for a read-write lock with
    /// many readers), never `HGETALL`.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the name holds a value that is not a lock:
    /// another type, or a hash that is not a lock's (see
    /// [`LockKind::Other`]); connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// for (holder, count) in client.lock("report:nightly").holders()? {
    ///     println!("{holder} holds it {count} times");
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn holders(&self) -> Result<Vec<(HolderId, u64)>> {
        self.check_name()?;
        let (kind, holders) = self.inner.client.with_conn(&self.inner.name, |conn| {
            inspect::read_lock_hash(conn, &self.inner.name)
        })?;
        match kind {
            LockKind::Other { .. } => Err(Error::WrongType {
                key: String::from_utf8_lossy(&self.inner.name).into_owned(),
            }),
            _ => Ok(holders),
        }
    }

    /// The remaining lease of the lock's key (`PTTL`): `None` when the lock
    /// is free, [`Ttl::Persistent`] when the key exists without an expiry.
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// use redguard::Ttl;
    ///
    /// match client.lock("report:nightly").remaining_ttl()? {
    ///     None => println!("free"),
    ///     Some(Ttl::Expires(ttl)) => println!("held for {ttl:?} more unless renewed"),
    ///     Some(Ttl::Persistent) => println!("held with no expiry"),
    ///     Some(_) => {}
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn remaining_ttl(&self) -> Result<Option<Ttl>> {
        self.check_name()?;
        let pttl: i64 = self.inner.client.with_conn(&self.inner.name, |conn| {
            redis::cmd("PTTL")
                .arg(&self.inner.name[..])
                .query(conn)
                .map_err(Error::redis)
        })?;
        Ok(Pttl::from_ms(pttl).remaining())
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`). `true` when there was a lock to delete. Holders find
    /// out at their next renewal or [`LockGuard::check`].
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] (a value of another type at the name is left
    /// alone), connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let deleted = client.lock("report:nightly").force_unlock()?;
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        self.inner.client.check_open()?;
        if self.is_read_write() {
            return self.rw_force_unlock();
        }
        self.inner.client.with_conn(&self.inner.name, |conn| {
            scripts::force_unlock(
                conn,
                self.inner.client.publish(&self.inner.name),
                &self.inner.name,
                &self.inner.channel,
                self.queue_key(),
            )
        })
    }

    /// The last fencing token drawn at this name by a fenced lock
    /// (Redisson's `RFencedLock.getToken`): `None` before the first grant.
    /// Every fenced grant, re-entry included, draws a larger one
    /// ([`LockGuard::fencing_token`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] or
    /// [`Error::Protocol`] when the counter `redisson_lock_token:{name}`
    /// holds something that is not a token, connection, timeout and server
    /// errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.fenced_lock("invoice:7");
    /// let before = lock.last_fencing_token()?;
    /// let guard = lock.lock()?;
    /// assert!(guard.fencing_token() > before);
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn last_fencing_token(&self) -> Result<Option<FencingToken>> {
        self.check_name()?;
        let counter = keys::token(&self.inner.name);
        // Bounded: another tenant's 20 MB string at the counter's key is
        // read no further than any number's length.
        let raw = self.inner.client.with_conn(&self.inner.name, |conn| {
            crate::snapshot::counter(conn, &counter)
        })?;
        raw.map(|raw| {
            std::str::from_utf8(&raw)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .map(FencingToken::new)
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "fencing token counter holds {:?}",
                        String::from_utf8_lossy(&raw)
                    ))
                })
        })
        .transpose()
    }

    pub(crate) fn fair_keys(&self) -> Option<FairKeys<'_>> {
        match &self.inner.kind {
            Kind::Fair {
                queue, timeouts, ..
            } => Some(FairKeys {
                key: &self.inner.name,
                queue,
                timeouts,
                channel: &self.inner.channel,
            }),
            _ => None,
        }
    }

    /// The unlock channel, `redisson_lock__channel:{name}`.
    pub(crate) fn channel(&self) -> &[u8] {
        &self.inner.channel
    }

    pub(crate) fn queue_key(&self) -> Option<&[u8]> {
        match &self.inner.kind {
            Kind::Fair { queue, .. } => Some(queue),
            _ => None,
        }
    }

    /// The lock's key (its name), shared.
    pub(crate) fn key(&self) -> &Arc<[u8]> {
        &self.inner.name
    }

    /// Hands `op` on this lock, which just failed with `err` (a failover
    /// error) on a lease of `lease` valid until `until`, to the watchdog to
    /// be retried (see `watchdog::retried`); `what` names it in logs.
    pub(crate) fn submit_retry(
        &self,
        what: String,
        lease: Duration,
        until: std::time::Instant,
        err: Error,
        op: impl FnMut() -> Result<()> + Send + 'static,
    ) -> crate::watchdog::retried::Handle {
        let client = self.client();
        crate::watchdog::retried::submit(
            what,
            self.key().clone(),
            client.source().clone(),
            client.counters(),
            lease,
            until,
            err,
            op,
        )
    }

    /// This kind's key in the calling thread's record of holds: the name,
    /// except for the read side of a read-write lock, whose holds are
    /// counted apart from the write side's.
    pub(crate) fn hold_key(&self) -> &Arc<[u8]> {
        match &self.inner.kind {
            Kind::Read { hold_key, .. } => hold_key,
            _ => &self.inner.name,
        }
    }

    pub(crate) fn check_name(&self) -> Result<()> {
        keys::validate_name(&self.inner.name).map_err(Error::InvalidArgument)
    }

    /// Releases one hold of `holder`: the guard's unlock.
    pub(crate) fn release(&self, holder: &HolderId, ms: u64) -> Result<Release> {
        self.release_str(holder.as_str(), ms)
    }

    fn release_str(&self, holder: &str, ms: u64) -> Result<Release> {
        if self.is_read_write() {
            return self.rw_release(holder, ms, false);
        }
        self.inner
            .client
            .with_shared_conn(&self.inner.name, |conn| match self.fair_keys() {
                Some(keys) => scripts::fair_release(
                    conn,
                    self.inner.client.publish(&self.inner.name),
                    keys,
                    holder,
                    ms,
                ),
                None => scripts::release(
                    conn,
                    self.inner.client.publish(&self.inner.name),
                    &self.inner.name,
                    &self.inner.channel,
                    holder,
                    ms,
                ),
            })
    }

    /// What became of a release of `holder` whose reply an interrupted
    /// socket call lost (see [`Error::is_interrupted`]): it was written
    /// whole, so it ran, and sending it again would release a second hold
    /// or find the lock gone. One read of the hold tells: still counted is
    /// [`Release::StillHeld`]; gone is [`Release::Released`] when the lease
    /// was `valid` when the release was sent (this release ended it), else
    /// [`Release::NotHeld`]. `None` for a read-write lock, whose holds this
    /// read does not show, and when the read fails too.
    pub(crate) fn settle_interrupted_release(
        &self,
        holder: &HolderId,
        valid: bool,
    ) -> Option<Release> {
        if self.is_read_write() {
            return None;
        }
        let field = self.holder_field(holder.as_str());
        let mut tries = 0;
        loop {
            let read = self.inner.client.with_conn(&self.inner.name, |conn| {
                redis::cmd("HGET")
                    .arg(&self.inner.name[..])
                    .arg(&*field)
                    .query::<Option<u64>>(conn)
                    .map_err(|e| Error::from_redis(e, &self.inner.name))
            });
            return match read {
                Ok(Some(count)) if count > 0 => Some(Release::StillHeld),
                Ok(_) if valid => Some(Release::Released),
                Ok(_) => Some(Release::NotHeld),
                // A read may be sent again: it changes nothing.
                Err(e) if e.is_interrupted() && tries < 3 => {
                    tries += 1;
                    continue;
                }
                Err(e) => {
                    log::debug!(
                        "redguard: could not learn what became of an interrupted release of \
                         lock {:?} by {holder}: {e}",
                        String::from_utf8_lossy(&self.inner.name),
                        e = e.chain()
                    );
                    None
                }
            };
        }
    }

    /// Drops every hold of `holder`.
    pub(crate) fn release_all(&self, holder: &HolderId) -> Result<bool> {
        self.release_all_str(holder.as_str())
    }

    /// Gives back every hold of `holder` that Redis still counts after its
    /// lease was declared lost here (an extension answered after the
    /// lease's end): nobody would release it before its new lease ran out.
    /// A failure is logged; the key then expires with that lease.
    pub(crate) fn give_back_lost(&self, holder: &HolderId) {
        if let Err(e) = self.release_all(holder) {
            log::warn!(
                "redguard: could not give back lock {:?} held by {holder}, extended after its \
                 lease was lost: {e}; it expires with the new lease",
                String::from_utf8_lossy(&self.inner.name),
                e = e.chain()
            );
        }
    }

    pub(crate) fn release_all_str(&self, holder: &str) -> Result<bool> {
        if self.is_read_write() {
            return Ok(self.rw_release(holder, 1, true)? != Release::NotHeld);
        }
        self.inner.client.with_conn(&self.inner.name, |conn| {
            scripts::release_holder(
                conn,
                self.inner.client.publish(&self.inner.name),
                &self.inner.name,
                &self.inner.channel,
                self.queue_key(),
                holder,
            )
        })
    }

    /// Sets the lease of `holder`'s hold to `ms` from now: `false` when it
    /// no longer holds the lock; [`Error::NotReplicated`] when it was
    /// extended on the master but too few replicas acknowledged it.
    pub(crate) fn renew(&self, holder: &HolderId, ms: u64) -> Result<bool> {
        if self.is_read_write() {
            return self.rw_renew(holder.as_str(), ms);
        }
        let acks = self.replica_acks();
        acks.validate()?;
        let response_timeout = self.inner.client.config().response_timeout;
        let (renewed, acked) = self.inner.client.with_conn(&self.inner.name, |conn| {
            acks.run(conn, response_timeout, None, |conn| {
                scripts::renew(conn, &self.inner.name, holder.as_str(), ms)
            })
        })?;
        if renewed && acks.short(acked) {
            return Err(acks.not_replicated(&self.inner.name, acked));
        }
        Ok(renewed)
    }
}

/// The lock handles of a client (defined here, beside [`Lock`], so that
/// the client core knows no lock kind).
impl Client {
    /// What this client keeps per lock name, channel or hold: the calling
    /// thread's holds, the subscriber's waiters, listened holds and
    /// subscriptions, and the watchdog's entries (process-wide). For the
    /// tests that check that none outlives its last hold or wait; not part
    /// of the API.
    #[doc(hidden)]
    pub fn residue(&self) -> crate::client::Residue {
        crate::client::Residue {
            thread_holds: thread_holds::sizes(self.id().as_u128()),
            ..self.residue_of_threads()
        }
    }

    /// A reentrant lock named `name` (Redisson's `RLock`). Cheap: no I/O.
    ///
    /// The name is the Redis key of the lock hash, byte for byte, so a
    /// Redisson client using the same name excludes and is excluded by this
    /// lock. Any bytes are allowed; an empty name or one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) is reported as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) by the lock's operations.
    pub fn lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new(self.clone(), name.as_ref())
    }

    /// A fair lock named `name` (Redisson's `RFairLock`): a [`Lock`] whose
    /// waiters get it first come, first served. Cheap: no I/O.
    ///
    /// * **Order**: a waiter joins the queue `redisson_lock_queue:{name}` on
    ///   its first attempt, once; only the queue head may take the free
    ///   lock. Re-entry by the holding thread works as for [`Lock`].
    /// * **No herd**: a release wakes only the next waiter, on its own
    ///   channel `redisson_lock__channel:{name}:<holder id>`.
    /// * **Dead waiters**: each waiter has a deadline in
    ///   `redisson_lock_timeout:{name}` (ms since the epoch, on the Redis
    ///   server's clock, never the client's), computed as Redisson does: the
    ///   deadline of the waiter ahead plus its wait,
    ///   [`Builder::fair_wait_timeout`](crate::Builder::fair_wait_timeout) (300 s by default), less the waits
    ///   of those granted since. Each attempt of a queued waiter raises its
    ///   deadline to at least now + its wait (and the deadlines behind it by
    ///   as much); a queue head whose deadline passed is pruned by the next
    ///   acquire or release.
    /// * **Every way out of a wait** (acquired, timed out, error, client
    ///   shut down) removes the waiter from the queue and the deadline set.
    ///
    /// A Redisson `RFairLock` of the same name excludes and is excluded by
    /// this lock and shares its queue with the same arithmetic: Java and
    /// redguard waiters in any mix are served in the order they joined
    /// (docs/REDISSON.md, "Mixing with Redisson", for clocks and limits).
    pub fn fair_lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new_fair(self.clone(), name.as_ref())
    }

    /// A fenced lock named `name` (Redisson's `RFencedLock`): a reentrant
    /// [`Lock`] whose every acquisition, re-entry included, also increments
    /// the counter `redisson_lock_token:{name}` in the same script, so each
    /// guard carries a larger [`FencingToken`](crate::FencingToken)
    /// ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    /// Pass it with every write made under the lock and let the storage
    /// refuse older ones, for instance with [`Client::fenced_set`](crate::Client::fenced_set). Cheap:
    /// no I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.fenced_lock("invoice:7").lock()?;
    /// let token = guard.fencing_token().expect("fenced grants carry a token");
    /// client.fenced_set("{invoice:7}:pdf", b"...", token)?;
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn fenced_lock(&self, name: impl AsRef<[u8]>) -> Lock {
        Lock::new_fenced(self.clone(), name.as_ref())
    }
}
