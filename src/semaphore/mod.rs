//! Semaphores: [`Semaphore`] (Redisson's `RSemaphore`) and, in `expiring`,
//! [`ExpiringSemaphore`] (Redisson's `RPermitExpirableSemaphore`).

mod expiring;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::scripts::semaphore as script;
use crate::wait::{Attempt, Wake, wait_loop};

pub use expiring::{ExpiringSemaphore, PermitGuard, PermitId};

/// The most permits one call may name: Redisson counts permits in a Java
/// `int`.
pub const MAX_PERMITS: u32 = i32::MAX as u32;

/// A counting semaphore named by a Redis key (Redisson's `RSemaphore`): at
/// most as many holders at once as there are permits, across processes
/// and hosts. Made by [`Client::semaphore`]. A cheap handle
/// (`Clone + Send + Sync`).
///
/// * **Setting up**: [`Semaphore::try_set_permits`] sets the number of
///   permits once (the first caller wins); [`Semaphore::add_permits`] adds
///   or removes some later. A semaphore that was never set has no permits:
///   acquirers wait until someone sets it.
/// * **Acquiring** takes `n` permits at once or none, and returns a
///   [`SemaphoreGuard`] that gives them back when dropped. Waiters sleep
///   until a release message arrives on the semaphore's channel (one
///   pub/sub connection per client), re-checking at least every poll
///   interval in case a message was lost.
/// * **No owner, no lease**: the permits are a bare counter, as in
///   Redisson. A process that dies holding permits never gives them back
///   (Redisson's behaviour); use an [`ExpiringSemaphore`] when a crashed
///   holder must not leak its permit.
///
/// # Wire layout (Redisson's)
///
/// | key | type | content |
/// | --- | --- | --- |
/// | `name` | string | the number of available permits |
/// | `redisson_sc:{name}` | channel | the new number of available permits, published when it grows |
///
/// # Examples
///
/// ```no_run
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let api = client.semaphore("partner-api");
/// api.try_set_permits(3)?;                 // first caller sets the count
/// {
///     let _permit = api.acquire(1)?;       // at most 3 callers in here
///     // ... call the partner API ...
/// }                                        // dropped: the permit is back
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `acquire()` or `try_acquire()` on it"]
pub struct Semaphore {
    client: Client,
    name: Arc<[u8]>,
    channel: Arc<[u8]>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &String::from_utf8_lossy(&self.name))
            .finish_non_exhaustive()
    }
}

/// Permits taken through a client and then kept with
/// [`SemaphoreGuard::forget`], by (client id, semaphore name): what
/// [`Semaphore::release`] may give back.
static KEPT: LazyLock<Mutex<Kept>> = LazyLock::new(Default::default);

/// Kept permits by (client id, semaphore name).
type Kept = HashMap<(u128, Arc<[u8]>), u64>;

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Checks a permit count against [`MAX_PERMITS`].
fn check_permits(permits: u64) -> Result<()> {
    if permits > u64::from(MAX_PERMITS) {
        return Err(Error::invalid(format!(
            "{permits} permits; at most {MAX_PERMITS} (Redisson counts permits in an int)"
        )));
    }
    Ok(())
}

/// The permit counter both kinds of semaphore keep at their name, with its
/// channel (Redisson's layout), and the operations they share on it.
pub(crate) struct Counter<'a> {
    pub(crate) client: &'a Client,
    pub(crate) name: &'a [u8],
    pub(crate) channel: &'a [u8],
}

impl Counter<'_> {
    /// A valid name on an open client.
    pub(crate) fn check(&self) -> Result<()> {
        keys::validate_name(self.name).map_err(Error::InvalidArgument)?;
        self.client.check_open()
    }

    /// Sets the count to `permits` unless it was set (`trySetPermits`).
    pub(crate) fn try_set(&self, permits: u32) -> Result<bool> {
        self.check()?;
        check_permits(u64::from(permits))?;
        self.client.with_conn(self.name, |conn| {
            script::try_set(
                conn,
                self.client.publish(self.name),
                self.name,
                self.channel,
                permits,
            )
        })
    }

    /// Adds `permits` (takes away when negative; `addPermits`).
    pub(crate) fn add(&self, permits: i64) -> Result<()> {
        self.check()?;
        check_permits(permits.unsigned_abs())?;
        if permits == 0 {
            return Ok(());
        }
        self.client.with_conn(self.name, |conn| {
            script::release(
                conn,
                self.client.publish(self.name),
                self.name,
                self.channel,
                permits,
            )
        })?;
        Ok(())
    }
}

/// The read of an expiring semaphore's lease set (`timeouts`): its first
/// [`keys::MAX_PERMITS_READ`](crate::keys::MAX_PERMITS_READ) members with
/// their lease ends, a member longer than a permit id (16 bytes) sent as
/// its length only (`lua/bounded_read.lua`; read with
/// `bounded_read::zset_reply`).
pub(crate) fn lease_read(timeouts: &[u8]) -> redis::Cmd {
    crate::scripts::bounded_read::zset(
        timeouts,
        std::mem::size_of::<PermitId>(),
        crate::keys::MAX_PERMITS_READ as u64,
    )
}

/// The leases of a [`lease_read`] reply: each member that is a permit id,
/// with the time left until its lease ends, counted from `now_ms` (the
/// server's clock, Unix epoch ms); members of another length are left out.
///
/// # Errors
///
/// The reply's own error (`WRONGTYPE` for a lease set of another type),
/// naming `timeouts`, or one of a reply of another shape.
pub(crate) fn leases_of(
    reply: redis::Value,
    timeouts: &[u8],
    now_ms: u64,
) -> Result<Vec<(PermitId, Duration)>> {
    let members = crate::scripts::bounded_read::zset_reply(reply)
        .map_err(|e| Error::from_redis(e, timeouts))?;
    Ok(members
        .into_iter()
        .filter_map(|(id, ends)| {
            let id = PermitId::from_bytes(id.bytes()?.try_into().ok()?);
            let left = (ends.max(0.0) as u64).saturating_sub(now_ms);
            Some((id, Duration::from_millis(left)))
        })
        .collect())
}

/// Reads a permit counter: 0 when absent.
pub(crate) fn read_counter(client: &Client, key: &[u8]) -> Result<i64> {
    // Bounded: another tenant's 20 MB string is not read whole.
    let raw = client.with_conn(key, |conn| crate::snapshot::counter(conn, key))?;
    match raw {
        None => Ok(0),
        Some(raw) => std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
            }),
    }
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: &[u8]) -> Semaphore {
        Semaphore {
            channel: keys::semaphore_channel(name).into(),
            name: name.into(),
            client,
        }
    }

    /// The semaphore's name: the Redis key of its permit counter.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client this handle belongs to.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    fn counter(&self) -> Counter<'_> {
        Counter {
            client: &self.client,
            name: &self.name,
            channel: &self.channel,
        }
    }

    fn check(&self) -> Result<()> {
        self.counter().check()
    }

    /// Sets the number of permits to `permits` if it was never set
    /// (Redisson's `trySetPermits`): `true` when this call set it, `false`
    /// when it was set before (nothing changed). Waiters are woken.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or more than
    /// [`MAX_PERMITS`], [`Error::WrongType`] when the name holds something
    /// that is not a permit count (left untouched), [`Error::Shutdown`],
    /// connection, timeout and server errors.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.counter().try_set(permits)
    }

    /// Adds `permits` available permits (Redisson's `addPermits`); a
    /// negative number takes permits away, and may leave fewer than zero
    /// available until holders give theirs back. Sets the semaphore when it
    /// was never set. Waiters are woken when permits were added. Zero does
    /// nothing (no round trip).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_set_permits`], [`Error::InvalidArgument`] for a
    /// magnitude over [`MAX_PERMITS`].
    pub fn add_permits(&self, permits: i64) -> Result<()> {
        self.counter().add(permits)
    }

    /// The number of permits available now (Redisson's
    /// `availablePermits`): 0 when the semaphore was never set; below zero
    /// after [`Semaphore::add_permits`] took away permits that are held.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`],
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn available_permits(&self) -> Result<i64> {
        self.check()?;
        read_counter(&self.client, &self.name)
    }

    /// Takes `permits` permits, all at once, waiting as long as it takes
    /// (Redisson's `acquire(permits)`). Zero permits returns a guard at
    /// once, without a round trip.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or more than
    /// [`MAX_PERMITS`], [`Error::WrongType`], [`Error::Shutdown`] (also
    /// while waiting), connection, timeout and server errors. A call that
    /// never reached the server (a refused or failed connect,
    /// [`Error::is_transient`]) is tried again with the waiters' backoff
    /// (10 ms doubling to 500 ms, jittered) until the deadline, then
    /// [`Error::Timeout`] names the last failure. One whose reply was lost
    /// ends the wait with its error: the permits may have been taken, and
    /// a permit has no owner to give it back by (an [`ExpiringSemaphore`]
    /// waiter retries that too: its permits are given back by id). A
    /// waiter whose pub/sub connection broke keeps polling.
    pub fn acquire(&self, permits: u32) -> Result<SemaphoreGuard> {
        self.acquire_until(permits, None)?
            .ok_or_else(|| Error::Timeout {
                kind: crate::error::TimeoutKind::Wait,
                limit: std::time::Duration::MAX,
                server: None,
                about: None,
            })
    }

    /// Takes `permits` permits if they are available now, without waiting
    /// (Redisson's `tryAcquire(permits)`): `Ok(None)` when they are not.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    pub fn try_acquire(&self, permits: u32) -> Result<Option<SemaphoreGuard>> {
        self.acquire_until(permits, Some(Instant::now()))
    }

    /// Takes `permits` permits, waiting at most `wait` (Redisson's
    /// `tryAcquire(permits, waitTime)`): `Ok(None)` when they could not be
    /// had in time. A wait too large to represent waits forever.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let licences = client.semaphore("licences");
    /// match licences.try_acquire_for(2, Duration::from_secs(5))? {
    ///     Some(guard) => assert_eq!(guard.permits(), 2),
    ///     None => eprintln!("no licence free within 5 s"),
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn try_acquire_for(&self, permits: u32, wait: Duration) -> Result<Option<SemaphoreGuard>> {
        self.acquire_until(permits, Instant::now().checked_add(wait))
    }

    /// Takes `permits` permits, waiting until `deadline` at most:
    /// `Ok(None)` when they could not be had in time.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    pub fn try_acquire_until(
        &self,
        permits: u32,
        deadline: Instant,
    ) -> Result<Option<SemaphoreGuard>> {
        self.acquire_until(permits, Some(deadline))
    }

    fn acquire_until(
        &self,
        permits: u32,
        deadline: Option<Instant>,
    ) -> Result<Option<SemaphoreGuard>> {
        self.check()?;
        check_permits(u64::from(permits))?;
        if permits == 0 {
            return Ok(Some(SemaphoreGuard::new(self.clone(), 0)));
        }
        let started = Instant::now();
        let mut waiting = crate::metrics::Waiting::none();
        let what = (&self.name[..], "semaphore");
        let granted = wait_loop(
            &self.client,
            &self.channel,
            what,
            deadline,
            Wake::One,
            || {
                let mut sent = false;
                let taken = self.client.with_conn(&self.name, |conn| {
                    sent = true;
                    crate::connection::prelude::ride_plain(
                        conn,
                        self.client.source(),
                        &self.name,
                        |conn| script::acquire(conn, &self.name, permits),
                    )
                });
                Ok(match taken {
                    Ok(true) => Attempt::Acquired(()),
                    Ok(false) => {
                        waiting.start(crate::metrics::Kind::Semaphore);
                        Attempt::Busy(None)
                    }
                    // The permits may have been taken, and a permit has no
                    // owner to give it back by: trying again could take them
                    // twice. A call that never reached the server is retried.
                    Err(e) if sent && e.breaks_connection() => Attempt::Unknown(e),
                    Err(e) => return Err(e),
                })
            },
        )?;
        drop(waiting);
        match granted {
            Some(()) => crate::metrics::acquired(self.labels(), started.elapsed()),
            None => crate::metrics::timed_out(self.labels()),
        }
        Ok(granted.map(|()| SemaphoreGuard::new(self.clone(), permits)))
    }

    /// The metrics labels of this semaphore's events.
    fn labels(&self) -> crate::metrics::Labels<'_> {
        self.client
            .context()
            .labels(crate::metrics::Kind::Semaphore, &self.name)
    }

    /// Gives back `permits` permits that this client took and kept with
    /// [`SemaphoreGuard::forget`] (Redisson's `release(permits)`, minus the
    /// chance to give back more than was taken). Waiters are woken. Zero
    /// does nothing.
    ///
    /// To add permits that were never taken, use
    /// [`Semaphore::add_permits`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when this client kept fewer permits of
    /// this semaphore (nothing is released then), and as
    /// [`Semaphore::add_permits`].
    pub fn release(&self, permits: u32) -> Result<()> {
        self.check()?;
        if permits == 0 {
            return Ok(());
        }
        let key = (self.client.id().as_u128(), self.name.clone());
        {
            let mut kept = kept();
            let have = kept.get(&key).copied().unwrap_or(0);
            if have < u64::from(permits) {
                return Err(Error::invalid(format!(
                    "releasing {permits} permits of semaphore {:?}, but this client kept only \
                     {have} (guards give theirs back themselves; add_permits adds new ones)",
                    String::from_utf8_lossy(&self.name)
                )));
            }
            if have == u64::from(permits) {
                kept.remove(&key);
            } else {
                kept.insert(key.clone(), have - u64::from(permits));
            }
        }
        let released = self.give_back(permits, None);
        if released.is_err() {
            // Not given back: still this client's to release.
            *kept().entry(key).or_insert(0) += u64::from(permits);
        }
        released
    }

    /// Gives `permits` back; `since`: when the guard giving them back took
    /// them (`None`: kept permits, whose hold time is not known).
    fn give_back(&self, permits: u32, since: Option<Instant>) -> Result<()> {
        self.client.with_conn(&self.name, |conn| {
            script::release(
                conn,
                self.client.publish(&self.name),
                &self.name,
                &self.channel,
                i64::from(permits),
            )
        })?;
        if permits > 0 {
            crate::metrics::released(self.labels(), since.map(|s| s.elapsed()));
        }
        Ok(())
    }
}

/// Permits of a [`Semaphore`], given back when dropped.
///
/// Unlike a [`LockGuard`](crate::LockGuard), it is `Send`: a semaphore's
/// permits belong to no thread. Dropping it is best effort (the release is
/// a network call; its failure is logged); call [`SemaphoreGuard::release`]
/// to see the error.
#[must_use = "the permits are given back as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct SemaphoreGuard {
    semaphore: Semaphore,
    permits: u32,
    done: bool,
    /// When the permits were granted (the hold-time histogram).
    since: Instant,
}

impl fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("semaphore", &String::from_utf8_lossy(&self.semaphore.name))
            .field("permits", &self.permits)
            .finish()
    }
}

impl SemaphoreGuard {
    fn new(semaphore: Semaphore, permits: u32) -> SemaphoreGuard {
        SemaphoreGuard {
            semaphore,
            permits,
            done: false,
            since: Instant::now(),
        }
    }

    /// The semaphore the permits belong to.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// How many permits the guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back now and reports the outcome.
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors: the permits may then not be
    /// back (a semaphore has no lease to fall back on).
    pub fn release(mut self) -> Result<()> {
        self.done = true;
        self.semaphore.give_back(self.permits, Some(self.since))
    }

    /// Keeps the permits taken without giving them back; this client may
    /// give them back later with [`Semaphore::release`] (Redisson's style
    /// of acquiring in one place and releasing in another).
    pub fn forget(mut self) {
        self.done = true;
        if self.permits > 0 {
            let key = (
                self.semaphore.client.id().as_u128(),
                self.semaphore.name.clone(),
            );
            *kept().entry(key).or_insert(0) += u64::from(self.permits);
        }
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if self.done || self.permits == 0 {
            return;
        }
        if let Err(e) = self.semaphore.give_back(self.permits, Some(self.since)) {
            log::warn!(
                "redguard: could not give back {} permits of semaphore {:?}: {e}",
                self.permits,
                String::from_utf8_lossy(&self.semaphore.name),
                e = e.chain()
            );
        }
    }
}

/// The semaphore handle of a client.
impl Client {
    /// A counting semaphore named `name` (Redisson's `RSemaphore`). Cheap:
    /// no I/O.
    pub fn semaphore(&self, name: impl AsRef<[u8]>) -> Semaphore {
        Semaphore::new(self.clone(), name.as_ref())
    }
}
