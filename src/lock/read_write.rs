//! [`ReadWriteLock`] (Redisson's `RReadWriteLock`): a pair of [`Lock`]
//! handles on one hash, the read side shared by readers and the write side
//! exclusive, and what the two kinds of [`Lock`] do differently from the
//! other kinds.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::keys;
use crate::lock::{Inner, Kind, Lock};
use crate::scripts::rwlock::{self, ReadKeys};
use crate::scripts::{Release, SyncHold};

/// A read-write lock named by a Redis key (Redisson's `RReadWriteLock`):
/// many readers at once, or one writer. Made by
/// [`Client::read_write_lock`].
///
/// [`ReadWriteLock::read`] and [`ReadWriteLock::write`] are ordinary
/// [`Lock`] handles: `lock`, `try_lock`, `try_lock_for`, `try_lock_until`,
/// [`Lock::with_lease`] and the [`LockGuard`](crate::LockGuard) work as for
/// every lock.
///
/// * **Readers share**: the read side is granted while no one writes, to
///   any number of holders at once.
/// * **A writer excludes everyone**, readers included.
/// * **Reentrant per thread**, each side on its own: a thread may take the
///   read side or the write side again while it holds it.
/// * **Downgrade**: the holder of the write side may also take the read
///   side; when it then releases the write side, it keeps reading and other
///   readers may join.
/// * **No upgrade**: a thread holding the read side cannot take the write
///   side (it would wait for its own read hold to go). redguard refuses at
///   once with [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the calling thread holds the
///   read side through the same client; Redisson would wait forever (or
///   until its timeout). Through another client the attempt simply waits,
///   as it would for any other reader.
/// * **Leases**: every read hold has its own timeout key
///   `{name}:<holder id>:rwlock_timeout:<n>` whose expiry is that hold's
///   lease, and the lock hash lives as long as the longest of them; the
///   watchdog renews all of a holder's timeout keys and the hash. A reader
///   that dies stops counting once its leases run out, even while other
///   readers keep the hash alive.
/// * **Waking**: waiters sleep on `redisson_rwlock:{name}`; the release of
///   the write side publishes `1` (every waiter may try: readers all get
///   in), the release that frees the lock from its last reader publishes
///   `0` (one waiter is woken). A reader that gets in after waiting wakes
///   the next waiter of its client, so waiting readers follow each other in
///   without waiting for a message each.
///
/// [`Lock::is_locked`], [`Lock::remaining_ttl`] and [`Lock::inspect`] look
/// at the shared hash, so on either side they describe the lock in any
/// mode; [`Lock::hold_count`] counts the calling thread's holds of that
/// side; [`Lock::force_unlock`] deletes the lock only when it is in that
/// side's mode (Redisson's), [`ReadWriteLock::force_unlock`] in either.
///
/// # Writer starvation
///
/// Redisson grants the read side whenever the lock is in read mode, even
/// while writers wait: a steady stream of overlapping readers starves
/// writers for as long as it lasts. redguard keeps Redisson's rule on the
/// server, so readers of other processes can starve a writer in the same
/// way. Within one client it is milder: a thread that starts waiting while
/// other threads of the client already wait on the lock queues behind them
/// (for at most one poll interval) instead of barging in, so a waiting
/// writer is woken before later readers of its own process, and gets the
/// lock as soon as the readers already inside are done. A fair read-write
/// lock does not exist in Redisson, nor here.
///
/// # Wire layout (Redisson's)
///
/// | key | type | content |
/// | --- | --- | --- |
/// | `name` | hash | `mode` → `read`/`write`; `<holder id>` → read hold count; `<holder id>:write` → write hold count; `PEXPIRE` = the longest lease |
/// | `{name}:<holder id>:rwlock_timeout:<n>` | string | `1`, `PEXPIRE` = lease of read hold `n` of that holder |
/// | `redisson_rwlock:{name}` | channel | `0` the lock became free; `1` the write side was released |
///
/// # Examples
///
/// ```no_run
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let rw = client.read_write_lock("catalog");
/// {
///     let _r1 = rw.read().lock()?;        // readers share
///     let _r2 = rw.read().try_lock()?;    // re-entry on this thread
/// }
/// let w = rw.write().lock()?;             // exclusive
/// let r = rw.read().lock()?;              // downgrade: the writer may read
/// drop(w);                                // still reading; others may join
/// drop(r);
/// # Ok::<(), redguard::Error>(())
/// ```
///
/// A handle takes nothing by itself; a bare `rw.write();` is flagged by the
/// compiler (`#[must_use]`, as on every handle and guard):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// client.read_write_lock("catalog").write();
/// ```
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `.read()` or `.write()`, then `lock()` or `try_lock()`"]
pub struct ReadWriteLock {
    read: Lock,
    write: Lock,
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &String::from_utf8_lossy(self.read.name()))
            .field("lease", &self.read.lease())
            .finish_non_exhaustive()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(client: Client, name: &[u8]) -> ReadWriteLock {
        ReadWriteLock {
            read: Lock::new_read(client.clone(), name),
            write: Lock::new_write(client, name),
        }
    }

    /// The read side: a [`Lock`] shared by any number of readers while no
    /// one holds the write side (Redisson's `readLock()`). Cheap: a clone.
    pub fn read(&self) -> Lock {
        self.read.clone()
    }

    /// The write side: a [`Lock`] that excludes readers and other writers
    /// (Redisson's `writeLock()`). Cheap: a clone.
    pub fn write(&self) -> Lock {
        self.write.clone()
    }

    /// The lock name: the Redis key of the lock hash.
    pub fn name(&self) -> &[u8] {
        self.read.name()
    }

    /// The same lock with a fixed `lease` for both sides, not renewed by
    /// the watchdog (see [`Lock::with_lease`]). A read hold is still looked
    /// up every third of the
    /// [`watchdog_timeout`](crate::Builder::watchdog_timeout): an expiry
    /// another client cut short (Redisson's read-lock watchdog sets every
    /// read hold's to its own `lockWatchdogTimeout`) is given back, up to the
    /// hold's own end, and a hold that ran out meanwhile is reported by
    /// [`LockGuard::check`](crate::LockGuard::check).
    pub fn with_lease(&self, lease: Duration) -> ReadWriteLock {
        ReadWriteLock {
            read: self.read.with_lease(lease),
            write: self.write.with_lease(lease),
        }
    }

    /// Deletes the lock in whichever mode, whoever holds it, and wakes
    /// every waiter: `true` when there was a lock to delete. The holders'
    /// timeout keys expire with their leases; holders find out at their
    /// next renewal or [`LockGuard::check`](crate::LockGuard::check).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) (a
    /// value of another type at the name is left alone), connection,
    /// timeout and server errors.
    pub fn force_unlock(&self) -> Result<bool> {
        self.read.check_name()?;
        self.read.client().check_open()?;
        let lock = &self.read;
        lock.inner.client.with_conn(&lock.inner.name, |conn| {
            rwlock::force_unlock(
                conn,
                lock.inner.client.publish(&lock.inner.name),
                &lock.inner.name,
                &lock.inner.channel,
                None,
            )
        })
    }
}

impl Lock {
    fn new_rw(client: Client, name: &[u8], kind: Kind) -> Lock {
        Lock::from_inner(Inner {
            channel: keys::rw_channel(name).into(),
            name: name.into(),
            client,
            lease: None,
            kind,
            acks: None,
        })
    }

    /// The read side of a read-write lock: see [`ReadWriteLock`].
    pub(crate) fn new_read(client: Client, name: &[u8]) -> Lock {
        let kind = Kind::Read {
            hold_key: read_hold_key(name).into(),
            key_prefix: keys::tagged(name).into(),
        };
        Lock::new_rw(client, name, kind)
    }

    /// The write side of a read-write lock: see [`ReadWriteLock`].
    pub(crate) fn new_write(client: Client, name: &[u8]) -> Lock {
        Lock::new_rw(client, name, Kind::Write)
    }

    /// `true` for the read side of a read-write lock
    /// ([`ReadWriteLock::read`]).
    pub fn is_read(&self) -> bool {
        matches!(self.inner.kind, Kind::Read { .. })
    }

    /// `true` for the write side of a read-write lock
    /// ([`ReadWriteLock::write`]).
    pub fn is_write(&self) -> bool {
        matches!(self.inner.kind, Kind::Write)
    }

    pub(crate) fn is_read_write(&self) -> bool {
        self.is_read() || self.is_write()
    }

    /// The hash field under which `holder` holds this lock: the holder id,
    /// or `<holder id>:write` for the write side of a read-write lock.
    pub(crate) fn holder_field<'a>(&self, holder: &'a str) -> Cow<'a, str> {
        match self.inner.kind {
            Kind::Write => Cow::Owned(keys::write_field(holder)),
            _ => Cow::Borrowed(holder),
        }
    }

    /// What the watchdog must know to renew and release `holder`'s hold,
    /// for the kinds with scripts of their own.
    pub(crate) fn sync_hold(&self, holder: &str) -> Option<SyncHold> {
        match &self.inner.kind {
            Kind::Read { key_prefix, .. } => Some(SyncHold::Read {
                timeout_prefix: keys::rw_timeout_prefix(&self.inner.name, holder).into(),
                key_prefix: key_prefix.clone(),
            }),
            Kind::Write => Some(SyncHold::Write),
            _ => None,
        }
    }

    /// `true` when the calling thread holds the read side of this
    /// read-write lock through this client (a write attempt would wait for
    /// itself).
    pub(crate) fn reads_here(&self) -> bool {
        let read_key = read_hold_key(&self.inner.name);
        crate::lock::thread_holds::current(self.inner.client.id().as_u128(), &read_key).is_some()
    }

    pub(crate) fn rw_acquire(
        &self,
        conn: &mut dyn redis::ConnectionLike,
        holder: &str,
        ms: u64,
    ) -> Result<crate::scripts::Acquire> {
        let field = keys::write_field(holder);
        match &self.inner.kind {
            Kind::Read { .. } => {
                let prefix = keys::rw_timeout_prefix(&self.inner.name, holder);
                rwlock::read_acquire(conn, &self.inner.name, &prefix, holder, &field, ms)
            }
            _ => rwlock::write_acquire(conn, &self.inner.name, &field, ms),
        }
    }

    pub(crate) fn rw_release(&self, holder: &str, ms: u64, all: bool) -> Result<Release> {
        self.inner
            .client
            .with_conn(&self.inner.name, |conn| match &self.inner.kind {
                Kind::Read { key_prefix, .. } => {
                    let prefix = keys::rw_timeout_prefix(&self.inner.name, holder);
                    let keys = ReadKeys {
                        key: &self.inner.name,
                        channel: &self.inner.channel,
                        timeout_prefix: &prefix,
                        key_prefix,
                    };
                    rwlock::read_release(
                        conn,
                        self.inner.client.publish(&self.inner.name),
                        keys,
                        holder,
                        all,
                    )
                }
                _ => {
                    let field = keys::write_field(holder);
                    rwlock::write_release(
                        conn,
                        self.inner.client.publish(&self.inner.name),
                        &self.inner.name,
                        &self.inner.channel,
                        &field,
                        ms,
                        all,
                    )
                }
            })
    }

    pub(crate) fn rw_renew(&self, holder: &str, ms: u64) -> Result<bool> {
        self.inner
            .client
            .with_conn(&self.inner.name, |conn| match &self.inner.kind {
                Kind::Read { .. } => {
                    let prefix = keys::rw_timeout_prefix(&self.inner.name, holder);
                    rwlock::read_renew(conn, &self.inner.name, &prefix, holder, ms)
                }
                _ => {
                    let field = keys::write_field(holder);
                    crate::scripts::renew(conn, &self.inner.name, &field, ms)
                }
            })
    }

    /// Redisson's `forceUnlock` of one side: deletes the lock only when it
    /// is in this side's mode.
    pub(crate) fn rw_force_unlock(&self) -> Result<bool> {
        let mode = if self.is_read() { "read" } else { "write" };
        self.inner.client.with_conn(&self.inner.name, |conn| {
            rwlock::force_unlock(
                conn,
                self.inner.client.publish(&self.inner.name),
                &self.inner.name,
                &self.inner.channel,
                Some(mode),
            )
        })
    }

    /// After a read grant: wakes the next waiter of this client, since
    /// another reader may get in too (a writer woken so just waits again).
    pub(crate) fn pass_read_wake(&self) {
        if let Some(sub) = self.inner.client.running_subscriber() {
            sub.wake_next(&self.inner.channel);
        }
    }
}

/// The read side's key in a thread's record of holds: apart from the write
/// side's (the name), so that a downgrading writer counts its two kinds of
/// hold separately. The prefix is not valid UTF-8, so no text lock name can
/// equal it.
fn read_hold_key(name: &[u8]) -> Vec<u8> {
    const PREFIX: &[u8] = b"\xff\xferead\xff";
    let mut key = Vec::with_capacity(PREFIX.len() + name.len());
    key.extend_from_slice(PREFIX);
    key.extend_from_slice(name);
    key
}

/// The read-write lock handle of a client.
impl Client {
    /// A read-write lock named `name` (Redisson's `RReadWriteLock`): its
    /// [`read`](ReadWriteLock::read) side is shared by readers, its
    /// [`write`](ReadWriteLock::write) side exclusive; both are [`Lock`]
    /// handles. Cheap: no I/O.
    pub fn read_write_lock(&self, name: impl AsRef<[u8]>) -> ReadWriteLock {
        ReadWriteLock::new(self.clone(), name.as_ref())
    }
}
