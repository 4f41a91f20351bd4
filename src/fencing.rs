//! Fencing: [`FencedLock`] (a reentrant lock whose every acquisition draws a
//! token), its [`FencedGuard`], and the storage-side check
//! [`Client::fenced_set`] that refuses writes carrying an older token.
//!
//! A lease can run out while its holder is paused (a GC pause, `SIGSTOP`, a
//! slow disk) and the holder may not notice before it writes. Locks alone
//! cannot stop that write; the storage can, if every write carries the
//! token of the grant it was made under and the storage refuses tokens older
//! than the newest it has seen (Kleppmann, "How to do distributed locking",
//! 2016).

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys;
use crate::lock::{Kind, Lock};
use crate::scripts;

/// A reentrant lock with fencing tokens (Redisson's `RFencedLock`), made by
/// [`Client::fenced_lock`].
///
/// It behaves like [`Lock`] (same methods, same lease and watchdog rules,
/// reentrant per thread) and each acquisition, re-entry included, also
/// increments the counter `redisson_lock_token:{name}` in the same script,
/// so grants carry strictly increasing tokens: [`FencedGuard::fencing_token`].
/// Pass the token along with every write made under the lock and let the
/// storage refuse older ones, for instance with [`Client::fenced_set`].
///
/// The counter never expires (as in Redisson). It survives as long as Redis
/// keeps the key: a restart without persistence, or a failover that loses
/// the latest `INCR`, can hand out a token again.
///
/// # Examples
///
/// ```no_run
/// use redguard::FencedWrite;
///
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let lock = client.fenced_lock("reports");
/// let guard = lock.lock()?;
/// let token = guard.fencing_token();
/// match client.fenced_set("reports:latest", b"v2", token)? {
///     FencedWrite::Written => {}
///     FencedWrite::Rejected { last_token } => {
///         // Our lease ran out and a holder with token `last_token` wrote
///         // meanwhile: our write was refused, nothing was overwritten.
///     }
/// }
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
pub struct FencedLock {
    lock: Lock,
}

impl fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLock")
            .field("name", &String::from_utf8_lossy(self.lock.name()))
            .field("lease", &self.lock.lease())
            .finish_non_exhaustive()
    }
}

impl FencedLock {
    pub(crate) fn new(lock: Lock) -> FencedLock {
        FencedLock { lock }
    }

    /// The underlying lock handle (for inspection and waiting). Guards
    /// taken through it hold the same lock and draw tokens too, but do not
    /// report them: use [`FencedLock::lock`] and friends to get the token.
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// The lock name: the Redis key of the lock hash.
    pub fn name(&self) -> &[u8] {
        self.lock.name()
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    /// The explicit lease set by [`FencedLock::with_lease`], if any.
    pub fn lease(&self) -> Option<Duration> {
        self.lock.lease()
    }

    /// The same lock with a fixed `lease`, not renewed by the watchdog: see
    /// [`Lock::with_lease`].
    pub fn with_lease(&self, lease: Duration) -> FencedLock {
        FencedLock {
            lock: self.lock.with_lease(lease),
        }
    }

    /// Acquires the lock, waiting as long as it takes, and draws a token.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; also [`Error::Redis`] when the token counter holds
    /// something that is not an integer (nothing is acquired then).
    pub fn lock(&self) -> Result<FencedGuard<'_>> {
        self.acquire(None)?
            .ok_or_else(|| Error::Timeout("lock() gave up without a deadline".into()))
    }

    /// Acquires the lock if it is free (or held by the calling thread),
    /// without waiting. `Ok(None)` when someone else holds it.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::lock`].
    pub fn try_lock(&self) -> Result<Option<FencedGuard<'_>>> {
        self.acquire(Some(Instant::now()))
    }

    /// Acquires the lock, waiting at most `timeout`: see
    /// [`Lock::try_lock_for`].
    ///
    /// # Errors
    ///
    /// As [`FencedLock::lock`].
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<FencedGuard<'_>>> {
        self.acquire(Instant::now().checked_add(timeout))
    }

    /// Acquires the lock, waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::lock`].
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<FencedGuard<'_>>> {
        self.acquire(Some(deadline))
    }

    /// `true` when someone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    pub fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked()
    }

    /// `true` when the calling thread holds the lock through this client.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_held_by_current_thread`].
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.lock.is_held_by_current_thread()
    }

    /// How many holds the calling thread has on the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::hold_count`].
    pub fn hold_count(&self) -> Result<u64> {
        self.lock.hold_count()
    }

    /// Every holder id with its hold count.
    ///
    /// # Errors
    ///
    /// As [`Lock::holders`].
    pub fn holders(&self) -> Result<Vec<(String, u64)>> {
        self.lock.holders()
    }

    /// The remaining lease of the lock's key.
    ///
    /// # Errors
    ///
    /// As [`Lock::remaining_ttl`].
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.lock.remaining_ttl()
    }

    /// Deletes the lock whoever holds it: see [`Lock::force_unlock`]. The
    /// token counter is kept, so later grants still get larger tokens.
    ///
    /// # Errors
    ///
    /// As [`Lock::force_unlock`].
    pub fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock()
    }

    /// The last token drawn (Redisson's `getToken`): `None` before the first
    /// acquisition.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::Protocol`] when
    /// the counter holds something that is not a token, connection, timeout
    /// and server errors.
    pub fn last_token(&self) -> Result<Option<u64>> {
        keys::validate_name(self.name()).map_err(Error::InvalidArgument)?;
        let Kind::Fenced { token } = self.lock.kind() else {
            return Err(Error::Protocol("a fenced lock without a token key".into()));
        };
        let raw: Option<String> = self.lock.client().with_conn(self.name(), |conn| {
            redis::cmd("GET")
                .arg(&token[..])
                .query(conn)
                .map_err(|e| Error::from_redis(e, token))
        })?;
        raw.map(|raw| {
            raw.parse::<u64>()
                .map_err(|_| Error::Protocol(format!("fencing token counter holds {raw:?}")))
        })
        .transpose()
    }

    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<FencedGuard<'_>>> {
        let Some((guard, token)) = self.lock.acquire_with_token(deadline)? else {
            return Ok(None);
        };
        match token {
            Some(token) => Ok(Some(FencedGuard { guard, token })),
            // Unreachable with the fenced script; the guard's drop gives
            // the hold back.
            None => Err(Error::Protocol(
                "the fenced acquire returned no token".into(),
            )),
        }
    }
}

/// One hold of a [`FencedLock`]: a [`LockGuard`] (reachable through
/// `Deref`: [`check`](LockGuard::check), [`is_lost`](LockGuard::is_lost),
/// [`extend`](LockGuard::extend), ...) plus the fencing token of the grant.
///
/// Dropping it releases the hold, as for [`LockGuard`]. It is `!Send`: the
/// hold belongs to the thread that took it.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// let lock = client.fenced_lock("x");
/// let guard = lock.lock().unwrap();
/// assert_send(guard);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct FencedGuard<'a> {
    guard: LockGuard<'a>,
    token: u64,
}

impl fmt::Debug for FencedGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedGuard")
            .field("guard", &self.guard)
            .field("token", &self.token)
            .finish()
    }
}

impl<'a> FencedGuard<'a> {
    /// The fencing token of this grant: larger than the token of every
    /// earlier grant of the lock (re-entries included), never 0. Send it
    /// with every write made under the lock, for the storage to check (see
    /// [`Client::fenced_set`]).
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Releases this hold now and reports the outcome: see
    /// [`LockGuard::unlock`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`].
    pub fn unlock(self) -> Result<()> {
        self.guard.unlock()
    }

    /// Splits the guard into the plain [`LockGuard`] that holds the lock
    /// (dropping it still releases the hold) and the fencing token.
    pub fn into_parts(self) -> (LockGuard<'a>, u64) {
        (self.guard, self.token)
    }
}

impl<'a> Deref for FencedGuard<'a> {
    type Target = LockGuard<'a>;

    fn deref(&self) -> &LockGuard<'a> {
        &self.guard
    }
}

/// Outcome of [`Client::fenced_set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a rejected write changed nothing"]
pub enum FencedWrite {
    /// Stored: the token was at least as new as every token accepted at the
    /// key before.
    Written,
    /// Refused, nothing changed: the key has accepted a newer token.
    Rejected {
        /// The newest token accepted at the key so far.
        last_token: u64,
    },
}

impl FencedWrite {
    /// `true` for [`FencedWrite::Written`].
    pub fn is_written(&self) -> bool {
        matches!(self, FencedWrite::Written)
    }
}

impl Client {
    /// Stores `value` at `key` unless `key` has already accepted a write
    /// with a newer fencing token: the storage side of fencing, as one
    /// atomic Lua script. `key` holds a hash with fields `value` and `token`
    /// (the newest token accepted); read it with [`Client::fenced_get`].
    ///
    /// A token equal to the last one is accepted (one holder writing twice
    /// under the same grant). This is what makes a paused holder harmless:
    /// once its lease expired and the next holder wrote with its larger
    /// token, the late write of the paused holder is
    /// [`FencedWrite::Rejected`].
    ///
    /// Use the same pattern for other storage: keep the newest token next
    /// to the data, and make "compare and write" one atomic step (a
    /// conditional `UPDATE ... WHERE token <= ?`, a transaction, a script).
    ///
    /// `key` should share the lock's hash tag (e.g. `"{orders:42}:data"`
    /// for the lock `"orders:42"`) only if both must live in one Redis
    /// Cluster slot; nothing here requires it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty key or one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), [`Error::WrongType`] when
    /// something other than a hash is stored at `key` (left untouched),
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn fenced_set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        token: u64,
    ) -> Result<FencedWrite> {
        let key = key.as_ref();
        keys::validate_name(key).map_err(Error::InvalidArgument)?;
        self.check_open()?;
        self.with_conn(key, |conn| {
            scripts::fenced_set(conn, key, token, value.as_ref())
        })
    }

    /// The value and token last stored at `key` by [`Client::fenced_set`],
    /// or `None` when nothing was.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key, [`Error::WrongType`] when
    /// something other than a hash is stored at `key`, [`Error::Protocol`]
    /// when the hash holds no valid token, connection, timeout and server
    /// errors.
    pub fn fenced_get(&self, key: impl AsRef<[u8]>) -> Result<Option<(Vec<u8>, u64)>> {
        let key = key.as_ref();
        keys::validate_name(key).map_err(Error::InvalidArgument)?;
        let (value, token): (Option<Vec<u8>>, Option<String>) = self.with_conn(key, |conn| {
            redis::cmd("HMGET")
                .arg(key)
                .arg("value")
                .arg("token")
                .query(conn)
                .map_err(|e| Error::from_redis(e, key))
        })?;
        match (value, token) {
            (None, None) => Ok(None),
            (Some(value), Some(token)) => match token.parse::<u64>() {
                Ok(token) => Ok(Some((value, token))),
                Err(_) => Err(Error::Protocol(format!(
                    "fenced key holds the token {token:?}"
                ))),
            },
            _ => Err(Error::Protocol(
                "fenced key lacks its value or its token".into(),
            )),
        }
    }
}
