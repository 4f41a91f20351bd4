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
//!   next one; dead waiters are pruned after
//!   [`Builder::fair_wait_timeout`].
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

mod client;
mod config;
mod connection;
mod error;
mod fencing;
mod holder;
mod keys;
mod lease;
mod lock;
mod multi;
mod once;
mod replicas;
mod scripts;
mod subscriber;
mod token;
mod watchdog;

pub use client::{Client, Stats};
pub use config::Builder;
pub use error::{Error, RedisCause, Result};
pub use fencing::FencedWrite;
pub use holder::{ClientId, HolderId};
pub use keys::MAX_NAME_LEN;
pub use lease::{MAX_LEASE, MIN_LEASE};
pub use lock::{FencingToken, Lock, LockGuard, LockInfo, LockKind, QueuedWaiter};
pub use multi::{MultiLock, MultiLockGuard, RedLock, RedLockGuard};
pub use once::{MAX_OUTCOME_LEN, Once, OnceGuard, OnceStatus, Outcome};
pub use token::{ParseTokenError, TOKEN_BYTES, Token};

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

    #[test]
    fn handles_are_send_sync_clone() {
        assert_send_sync_clone::<crate::Client>();
        assert_send_sync_clone::<crate::Lock>();
        assert_send_sync_clone::<crate::Builder>();
        fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
        assert_error::<crate::Error>();
    }
}
