//! Distributed locks on Redis for blocking Rust code, wire-compatible with
//! Redisson.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let client = redguard::Client::open("redis://127.0.0.1/")?;
//! let lock = client.lock("orders:42");
//! {
//!     let guard = lock.lock()?;          // waits; the watchdog renews the lease
//!     // ... critical section ...
//!     guard.check()?;                    // Err(LockLost) if the lease was lost
//! }                                      // dropped: released
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(3))? {
//!     guard.unlock()?;                   // explicit release, with its error
//! }
//! # Ok::<(), redguard::Error>(())
//! ```
//!
//! # Model
//!
//! A [`Client`] is a shared handle on one Redis deployment. [`Client::lock`]
//! names a reentrant [`Lock`]; acquiring it yields a [`LockGuard`]. Locks
//! taken without a lease get the client's watchdog timeout (30 s) as lease,
//! renewed every third of it by one watchdog thread per process; a holder
//! that dies stops renewing and its lock frees itself within one lease.
//! Waiters sleep until an unlock message arrives on the lock's channel (one
//! pub/sub connection per client), bounded by the holder's remaining ttl.
//!
//! # Kinds of lock
//!
//! All of them are reentrant per (client, thread), renewed by the watchdog
//! unless given a lease, and share the method names and guard semantics of
//! [`Lock`]:
//!
//! * [`Client::lock`]: a reentrant [`Lock`] (Redisson's `RLock`). Waiters
//!   race for a released lock.
//! * [`Client::fair_lock`]: a fair [`Lock`] (Redisson's `RFairLock`).
//!   Waiters are served first come, first served; a release wakes only the
//!   next one; dead waiters are pruned in their turn (deadlines computed
//!   as Redisson does, with [`Builder::fair_wait_timeout`] as the wait), so
//!   a queue shared with Redisson keeps its order.
//! * [`Client::fenced_lock`]: a fenced [`Lock`] (Redisson's `RFencedLock`).
//!   Every grant carries a larger [`FencingToken`]
//!   ([`LockGuard::fencing_token`]) for storage that refuses stale
//!   writers, such as [`Client::fenced_set`].
//! * [`MultiLock`]: several locks, maybe on different servers, all or
//!   nothing (Redisson's `RedissonMultiLock`).
//! * [`RedLock`]: a quorum of independent masters (Redisson's
//!   `RedissonRedLock`).
//!
//! Every handle has the same four ways to acquire (parking_lot's names):
//! `lock()` waits as long as it takes, `try_lock()` never waits,
//! `try_lock_for(Duration)` and `try_lock_until(Instant)` wait at most so
//! long. Guards own their handle, so a function can return one.
//!
//! # Synchronizers
//!
//! * [`Client::read_write_lock`]: a [`ReadWriteLock`] (Redisson's
//!   `RReadWriteLock`), whose [`read`](ReadWriteLock::read) and
//!   [`write`](ReadWriteLock::write) sides are [`Lock`]s: readers share, a
//!   writer excludes everyone.
//! * [`Client::semaphore`]: a [`Semaphore`] (Redisson's `RSemaphore`): at
//!   most N permits out at once; a [`SemaphoreGuard`] gives them back.
//! * [`Client::expiring_semaphore`]: an [`ExpiringSemaphore`] (Redisson's
//!   `RPermitExpirableSemaphore`): permits with an id and a lease, renewed
//!   while their [`PermitGuard`] lives.
//! * [`Client::count_down_latch`]: a [`CountDownLatch`] (Redisson's
//!   `RCountDownLatch`): wait until a count reaches zero.
//!
//! # Wire layout
//!
//! The same keys, fields, channels and messages as Redisson, so Java and
//! Rust processes share every kind (`{name}` is the name in braces, or the
//! bare name when it contains a `{`):
//!
//! | kind | keys | channel and messages |
//! | --- | --- | --- |
//! | reentrant / fenced lock | hash `name`: `<holder id>` → hold count, `PEXPIRE` = lease; fenced: counter `redisson_lock_token:{name}` | `redisson_lock__channel:{name}`: `0` on full release |
//! | fair lock | the hash, list `redisson_lock_queue:{name}`, zset `redisson_lock_timeout:{name}` (holder → wait deadline, ms) | `redisson_lock__channel:{name}:<holder id>`: `0` to the next waiter |
//! | read-write lock | hash `name`: `mode` → `read`/`write`, `<holder id>` → read holds, `<holder id>:write` → write holds; string `{name}:<holder id>:rwlock_timeout:<n>` per read hold, `PEXPIRE` = its lease | `redisson_rwlock:{name}`: `0` when the last reader leaves, `1` when the writer leaves |
//! | semaphore | string `name`: available permits | `redisson_sc:{name}`: the new count |
//! | expiring semaphore | string `name`: available permits; zset `{name}:timeout`: permit id (16 bytes) → lease end (ms since the epoch) | `redisson_sc:{name}`: the new count |
//! | count-down latch | string `name`: the count, deleted at zero | `redisson_countdownlatch__channel__{name}`: `0` at zero, `1` on a new count |
//!
//! A holder id is `<client uuid>:<thread id>`.
//!
//! # Differences from `std::sync::Mutex`
//!
//! * **No poisoning**, and no data inside: the lock protects something
//!   outside the process.
//! * **The lease can be lost** while the guard lives (a stalled process, a
//!   Redis restart without persistence, a failover). [`LockGuard::check`]
//!   says so; pass fencing tokens to storage that can check them.
//! * **Reentrant per thread**: locking twice on one thread succeeds and needs
//!   two releases; guards are `!Send`.
//! * **Dropping the guard is best effort**: the unlock is a network call; its
//!   failure is logged and the lease expires by itself.
//!
//! # Differences from Redisson
//!
//! * Guards instead of `unlock()` on the lock; [`LockGuard::extend`] extends a
//!   held lease; [`LockGuard::check`] detects a lost lease locally.
//! * Waiters re-check at least every poll interval (1 s), so a lost pub/sub
//!   message or a lock key without expiry never blocks a waiter for a whole
//!   lease, and a waiter whose deadline passes always returns.
//! * Renewals of many locks go to Redis as multi-key script calls of up to
//!   100 locks, several calls per round trip; one watchdog thread serves
//!   every client of the process.
//! * Threads of one client waiting for the same lock are served in arrival
//!   order: a thread that releases and at once locks again queues behind the
//!   threads already waiting instead of racing them (Redisson lets it win).
//!   `try_lock` never waits and takes a free lock at once.

mod capacity;
mod client;
mod config;
mod connection;
mod context;
mod duration_text;
mod error;
mod fencing;
mod holder;
mod keys;
mod latch;
mod lease;
mod lock;
mod lost;
mod metrics;
#[cfg(test)]
mod mock_server;
mod multi;
mod once;
mod record;
mod redisson_settings;
mod replicas;
mod retry;
mod scripts;
mod semaphore;
mod snapshot;
mod subscriber;
mod synchronizer_info;
mod token;
mod wait;
mod watchdog;

#[doc(hidden)]
pub use client::Residue;
pub use client::{Client, Stats};
pub use config::Builder;
pub use error::{Error, RedisCause, Result, TimeoutKind};
pub use fencing::FencedWrite;
pub use holder::{ClientId, GuardNoSend, HolderId};
pub use keys::MAX_NAME_LEN;
pub use latch::CountDownLatch;
pub use lease::{MAX_LEASE, MIN_LEASE, Ttl};
pub use lock::{
    FencingToken, Listing, Lock, LockGuard, LockInfo, LockKind, MAX_LOCK_FIELDS, MAX_QUEUE_READ,
    QueuedWaiter, ReadWriteLock,
};
pub use lost::{HoldKind, LossReason, LostLease};
pub use multi::{MultiLock, MultiLockGuard, RedLock, RedLockGuard};
pub use once::{
    AttemptState, MAX_FAILED_ATTEMPT_TTL, MAX_OUTCOME_LEN, Once, OnceAttempt, OnceGuard,
    OnceStatus, Outcome,
};
pub use record::{HolderRecord, RecordCommand, RecordedHold, RecordedWait};
pub use redisson_settings::ClassicPublish;
pub use semaphore::{
    ExpiringSemaphore, MAX_PERMITS, PermitGuard, PermitId, Semaphore, SemaphoreGuard,
};
pub use synchronizer_info::{HeldPermit, LatchInfo, OnceInfo, SemaphoreInfo};
pub use token::{ParseTokenError, TOKEN_BYTES, Token};
pub use wait::retry_until;

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/LIBRARY.md's examples, compiled as doc tests.
#[doc = include_str!("../docs/LIBRARY.md")]
#[cfg(doctest)]
pub struct LibraryDoctests;

/// docs/DEPLOYMENTS.md's examples, compiled as doc tests.
#[doc = include_str!("../docs/DEPLOYMENTS.md")]
#[cfg(doctest)]
pub struct DeploymentsDoctests;

/// docs/REDISSON.md's examples, compiled as doc tests.
#[doc = include_str!("../docs/REDISSON.md")]
#[cfg(doctest)]
pub struct RedissonDoctests;

/// docs/OPERATIONS.md's examples, compiled as doc tests (its runbook's
/// shell recipes are replayed by `tests/integration/cli/runbook.rs`).
#[doc = include_str!("../docs/OPERATIONS.md")]
#[cfg(doctest)]
pub struct OperationsDoctests;

/// docs/CLI.md's examples, compiled as doc tests.
#[doc = include_str!("../docs/CLI.md")]
#[cfg(doctest)]
pub struct CliDoctests;

#[cfg(test)]
mod tests {
    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

    #[test]
    fn handles_are_send_sync_clone() {
        assert_send_sync_clone::<crate::Client>();
        assert_send_sync_clone::<crate::Lock>();
        assert_send_sync_clone::<crate::Builder>();
        assert_send_sync_clone::<crate::ReadWriteLock>();
        assert_send_sync_clone::<crate::Semaphore>();
        assert_send_sync_clone::<crate::ExpiringSemaphore>();
        assert_send_sync_clone::<crate::CountDownLatch>();
        fn assert_send<T: Send>() {}
        assert_send::<crate::SemaphoreGuard>();
        assert_send::<crate::PermitGuard>();
        fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
        assert_error::<crate::Error>();
    }
}

/// Guards are `Sync` like `std::sync::MutexGuard` (the `!Send` half is
/// shown by `compile_fail` examples on each guard).
#[cfg(test)]
mod guard_auto_traits {
    fn sync<T: Sync>() {}

    #[test]
    fn guards_are_sync() {
        sync::<crate::LockGuard>();
        sync::<crate::MultiLockGuard>();
        sync::<crate::RedLockGuard>();
        sync::<crate::OnceGuard>();
        sync::<crate::SemaphoreGuard>();
        sync::<crate::PermitGuard>();
    }
}

/// `Client`, its builder and every handle are `UnwindSafe` and
/// `RefUnwindSafe`, so that `catch_unwind(|| client.lock(..).lock())`
/// compiles, as it does for `std::sync::Mutex`.
#[cfg(test)]
mod unwind_auto_traits {
    use std::panic::{RefUnwindSafe, UnwindSafe};

    fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}

    #[test]
    fn the_client_and_its_handles_are_unwind_safe() {
        unwind_safe::<crate::Client>();
        unwind_safe::<crate::Builder>();
        unwind_safe::<crate::Lock>();
        unwind_safe::<crate::ReadWriteLock>();
        unwind_safe::<crate::MultiLock>();
        unwind_safe::<crate::RedLock>();
        unwind_safe::<crate::Semaphore>();
        unwind_safe::<crate::ExpiringSemaphore>();
        unwind_safe::<crate::CountDownLatch>();
    }

    #[test]
    fn the_guards_are_unwind_safe() {
        unwind_safe::<crate::LockGuard>();
        unwind_safe::<crate::MultiLockGuard>();
        unwind_safe::<crate::RedLockGuard>();
        unwind_safe::<crate::OnceGuard>();
        unwind_safe::<crate::SemaphoreGuard>();
        unwind_safe::<crate::PermitGuard>();
    }
}
