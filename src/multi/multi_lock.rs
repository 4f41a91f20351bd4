//! [`MultiLock`]: all-or-nothing over several [`Lock`]s, which may live on
//! different servers.

use std::fmt;
use std::marker::PhantomData;

use crate::holder::NotSend;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lock::acquire::acquire_methods;
use crate::lock::{Lock, LockGuard};
use crate::multi::members::{Held, Member, canonical, check_members};
use crate::retry::pause_until;
use crate::wait::Outage;

/// Several locks taken together: all of them or none (Redisson's
/// `RedissonMultiLock`).
///
/// The locks may come from different [`Client`](crate::Client)s, so from
/// different Redis servers. A cheap handle (`Clone + Send + Sync`); the
/// guard it returns holds every lock.
///
/// * **Canonical order.** The locks are kept sorted by (server, name), and
///   every acquisition takes them in that order, so two multi-locks over
///   the same set, built in any order, do not lock each other out.
/// * **All or nothing.** A round tries each lock without waiting. When one
///   is busy, the locks taken so far are released, the round waits (woken
///   by the busy lock's unlock message) until it gets the busy lock, and
///   starts over, keeping only that lock. No thread ever waits for a lock
///   while holding others, so no set of multi-locks can deadlock. The wait
///   budget (`try_lock_for`, `try_lock_until`) is shared by every wait of
///   the call.
/// * **Errors.** A transient error on one lock ([`Error::is_transient`]:
///   a Redis restart, a freeze, a failover) fails the round like a busy
///   lock: what was taken is released and the round is retried after the
///   waiters' backoff pause (10 ms doubling to 500 ms, jittered), while the
///   budget lasts ([`MultiLock::lock`]: for as long as it takes); when it
///   runs out, an [`Error::Timeout`] names the last error.
///   [`MultiLock::try_lock`] returns its error at once, and errors retrying
///   cannot fix (credentials, ACL, wrong type, bad input) end every call
///   at once, as with [`Lock::lock`].
/// * **Leases.** Each lock keeps its own lease: locks without an explicit
///   lease are renewed by the watchdog. Losing any one of them makes the
///   whole guard lost ([`MultiLockGuard::check`]).
/// * **Release.** Dropping the guard releases every lock (best effort,
///   failures logged); [`MultiLockGuard::unlock`] releases every lock and
///   reports each failure.
///
/// Two entries with the same server and name must be the same lock of the
/// same client (a reentrant hold); two clients naming the same lock on the
/// same server would wait for each other forever, and are refused with
/// [`Error::InvalidArgument`].
///
/// # Examples
///
/// ```no_run
/// let east = redguard::Client::open("redis://10.0.0.1/")?;
/// let west = redguard::Client::open("redis://10.0.0.2/")?;
/// let both = redguard::MultiLock::new([east.lock("account:1"), west.lock("account:2")]);
/// let guard = both.lock()?;
/// // ... move money from account 1 to account 2 ...
/// guard.unlock()?;
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `lock()` or `try_lock()` on it"]
pub struct MultiLock {
    members: Vec<Member>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field(
                "locks",
                &self.members.iter().map(Member::label).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl MultiLock {
    /// A multi-lock over `locks`, kept in canonical order (sorted by server,
    /// then name). Cheap: no I/O. The set is checked when it is acquired.
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> MultiLock {
        MultiLock {
            members: canonical(locks),
        }
    }

    /// The locks, in canonical order (the order in which they are taken).
    pub fn locks(&self) -> impl ExactSizeIterator<Item = &Lock> {
        self.members.iter().map(|m| &m.lock)
    }

    /// The same multi-lock with a fixed `lease` on every lock (see
    /// [`Lock::with_lease`]): not renewed by the watchdog.
    pub fn with_lease(&self, lease: Duration) -> MultiLock {
        MultiLock {
            members: self
                .members
                .iter()
                .map(|m| Member {
                    lock: m.lock.with_lease(lease),
                    server: m.server.clone(),
                })
                .collect(),
        }
    }

    acquire_methods! {
        guard: MultiLockGuard,
        setup: "# let (east, west) = (client.clone(), client.clone());",
        handle: "redguard::MultiLock::new([east.lock(\"account:1\"), west.lock(\"account:2\")])",
        errors: "[`Error::InvalidArgument`] for an empty set, two clients naming the \
                 same lock on one server, or a bad name or lease; otherwise the first \
                 error met on any lock ([`Error::WrongType`], [`Error::Shutdown`], \
                 connection, timeout and server errors), after releasing the locks \
                 taken so far. Transient errors ([`Error::is_transient`]) are \
                 retried while the budget lasts (`lock`: for as long as it takes), \
                 then an [`Error::Timeout`] names the last one; `try_lock` returns \
                 its error at once. When not every lock can be had, none is held.",
    }

    /// The one acquire path: rounds of non-blocking attempts over every
    /// lock, waiting only for the busy lock, while holding nothing else.
    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<MultiLockGuard>> {
        check_members(&self.members, "MultiLock")?;
        // The busy lock of the previous round, won by waiting: kept across
        // the next round so that the wait is not wasted. Only non-blocking
        // attempts happen while it is held.
        let mut won: Option<LockGuard> = None;
        let mut outage = Outage::new(deadline);
        // Bounded by the deadline: every round either succeeds, fails with
        // an error, or is followed by a wait that consumes the budget.
        loop {
            let mut guards = Held::default();
            let mut busy = None;
            let mut failed = None;
            for (i, member) in self.members.iter().enumerate() {
                match member.lock.try_lock() {
                    Ok(Some(guard)) => guards.push(guard),
                    Ok(None) => {
                        busy = Some(i);
                        break;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // The round's own hold of the won lock (a re-entry) stays.
            drop(won.take());
            if let Some(e) = failed {
                drop(guards);
                retry_after_error(e, &mut outage)?;
                continue;
            }
            outage.reset();
            let Some(busy) = busy else {
                return Ok(Some(MultiLockGuard {
                    multi: self.clone(),
                    guards,
                    _not_send: PhantomData,
                }));
            };
            drop(guards);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            let lock = &self.members[busy].lock;
            let waited = match deadline {
                Some(deadline) => lock.try_lock_until(deadline),
                None => lock.lock().map(Some),
            };
            match waited {
                Ok(Some(guard)) => won = Some(guard),
                Ok(None) => return Ok(None),
                Err(e) => retry_after_error(e, &mut outage)?,
            }
        }
    }
}

/// Decides what a round that failed with `e` does next: `Err` when
/// retrying cannot fix `e` or the deadline passed (see [`Outage::next`]);
/// otherwise pauses with the waiters' backoff (never past the deadline)
/// and returns `Ok(())` to retry.
fn retry_after_error(e: Error, outage: &mut Outage) -> Result<()> {
    let pause = outage.next(e)?;
    pause_until(Instant::now() + pause);
    Ok(())
}

/// Every lock of a [`MultiLock`], held; dropping it releases them all.
///
/// Dropping is best effort: each release is bounded by its client's
/// response timeout and its failure logged. Call
/// [`MultiLockGuard::unlock`] to see the failures. `!Send`, like
/// [`LockGuard`].
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// let multilock = redguard::MultiLock::new([client.lock("x")]);
/// let guard = multilock.lock().unwrap();
/// assert_send(guard);
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    multi: MultiLock,
    /// One guard per lock, in canonical order.
    guards: Held,
    _not_send: NotSend,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("multi", &self.multi)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl MultiLockGuard {
    /// The multi-lock this guard holds.
    pub fn multi_lock(&self) -> &MultiLock {
        &self.multi
    }

    /// The guard of each lock, in canonical order.
    pub fn guards(&self) -> &[LockGuard] {
        self.guards.guards()
    }

    /// `true` when the lease of any of the locks is known to be lost (see
    /// [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guards.guards().iter().any(LockGuard::is_lost)
    }

    /// How much longer every lease is known to be valid on this process's
    /// clock: the shortest [`LockGuard::valid_for`] of the locks. Zero once
    /// any is lost.
    pub fn valid_for(&self) -> Duration {
        self.guards
            .guards()
            .iter()
            .map(LockGuard::valid_for)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// `Ok(())` while every lease is held. Purely local: no round trip.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] naming the first lock (in canonical order) whose
    /// lease is lost (see [`LockGuard::check`]).
    pub fn check(&self) -> Result<()> {
        self.guards.guards().iter().try_for_each(LockGuard::check)
    }

    /// Sets the lease of every lock to `lease` from now (see
    /// [`LockGuard::extend`]). Every lock is attempted.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero or too long lease; otherwise the
    /// first failure (in canonical order) among the locks, as
    /// [`LockGuard::extend`].
    pub fn extend(&self, lease: Duration) -> Result<()> {
        let mut first = None;
        for guard in self.guards.guards() {
            if let Err(e) = guard.extend(lease) {
                if matches!(e, Error::InvalidArgument(_)) {
                    return Err(e);
                }
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Releases every lock now (last taken first) and reports the outcome.
    /// A failure on one lock does not stop the others from being released.
    ///
    /// # Errors
    ///
    /// [`Error::Unlock`] listing each lock whose release failed, with its
    /// error as [`LockGuard::unlock`] reports it ([`Error::LockLost`],
    /// [`Error::NotHeld`], connection, timeout and server errors).
    pub fn unlock(self) -> Result<()> {
        self.guards.unlock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str) -> crate::client::Client {
        crate::client::Client::open(url).unwrap()
    }

    #[test]
    fn canonical_order_is_by_server_then_name() {
        let a = client("redis://127.0.0.1:7001/");
        let b = client("redis://127.0.0.1:7000/");
        let one = MultiLock::new([a.lock("x"), b.lock("y"), a.lock("a"), b.lock("b")]);
        let two = MultiLock::new([b.lock("b"), a.lock("a"), b.lock("y"), a.lock("x")]);
        let order = |m: &MultiLock| m.members.iter().map(Member::label).collect::<Vec<String>>();
        assert_eq!(
            order(&one),
            [
                "b on 127.0.0.1:7000/0",
                "y on 127.0.0.1:7000/0",
                "a on 127.0.0.1:7001/0",
                "x on 127.0.0.1:7001/0"
            ]
        );
        assert_eq!(order(&one), order(&two));
    }

    #[test]
    fn bad_sets_are_refused() {
        let a = client("redis://127.0.0.1:7000/");
        let b = client("redis://127.0.0.1:7000/");
        let empty = MultiLock::new(Vec::new());
        assert!(matches!(
            check_members(&empty.members, "MultiLock"),
            Err(Error::InvalidArgument(_))
        ));
        let twice = MultiLock::new([a.lock("x"), b.lock("x")]);
        assert!(matches!(
            check_members(&twice.members, "MultiLock"),
            Err(Error::InvalidArgument(_))
        ));
        let reentrant = MultiLock::new([a.lock("x"), a.lock("x")]);
        assert!(check_members(&reentrant.members, "MultiLock").is_ok());
        let other_db = MultiLock::new([a.lock("x"), client("redis://127.0.0.1:7000/1").lock("x")]);
        assert!(check_members(&other_db.members, "MultiLock").is_ok());
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<MultiLock>();
    }
}
