//! The shared state of one held lock: valid until when, lost, released.
//! Written by the watchdog and the releasing thread, read by guards; atomics
//! only, no locks.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `at` as nanoseconds since a process-wide origin (0 for instants before it).
pub(crate) fn nanos(at: Instant) -> u64 {
    at.saturating_duration_since(*EPOCH)
        .as_nanos()
        .min(u64::MAX as u128) as u64
}

/// The instant `n` nanoseconds after the process-wide origin.
pub(crate) fn instant(n: u64) -> Instant {
    *EPOCH + Duration::from_nanos(n)
}

/// Per-client counters, shared by the client, its held locks and the
/// watchdog entries.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Locks this client holds (one per lock and thread, whatever the hold count).
    pub(crate) held: AtomicUsize,
    /// Entries of this client in the watchdog's schedule.
    pub(crate) watchdog_entries: AtomicUsize,
    /// Set when the client is gone (shut down or dropped): the watchdog
    /// drops its entries, releasing them first when `release_when_gone`.
    pub(crate) gone: AtomicBool,
    /// Whether the client's locks are released when it goes.
    pub(crate) release_when_gone: AtomicBool,
    /// Lease renewals the watchdog sent for this client.
    pub(crate) renewals: AtomicU64,
    /// Round trips that carried them.
    pub(crate) renewal_round_trips: AtomicU64,
    /// Watchdog rounds that renewed at least one of this client's leases.
    pub(crate) renewal_ticks: AtomicU64,
}

/// State of one lock held by one holder (shared by all its reentrant guards).
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: AtomicBool,
    released: AtomicBool,
    finished: AtomicBool,
    /// Nanoseconds since the origin until which the lease is known to be
    /// valid on this client's clock.
    valid_until: AtomicU64,
    counters: Arc<Counters>,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant, counters: Arc<Counters>) -> LeaseState {
        counters.held.fetch_add(1, Ordering::Relaxed);
        LeaseState {
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            valid_until: AtomicU64::new(nanos(valid_until)),
            counters,
        }
    }

    fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            self.counters.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Marks the lease as lost for good (the watchdog heard 0, or gave up).
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
        self.finish();
    }

    /// Marks the lock as released by its holder: the watchdog drops it.
    pub(crate) fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
        self.finish();
    }

    /// `true` once [`LeaseState::mark_lost`] ran.
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// `true` once [`LeaseState::mark_released`] ran.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// `true` when the lease is lost or its validity ran out on our clock.
    pub(crate) fn is_lost_at(&self, now: Instant) -> bool {
        self.is_marked_lost() || nanos(now) >= self.valid_until.load(Ordering::Acquire)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        instant(self.valid_until.load(Ordering::Acquire))
    }

    /// Moves the validity forward to `until` (never backward).
    pub(crate) fn extend_to(&self, until: Instant) {
        self.valid_until.fetch_max(nanos(until), Ordering::AcqRel);
    }

    /// Sets the validity to `until`, forward or backward (an explicit
    /// shorter lease).
    pub(crate) fn set_valid_until(&self, until: Instant) {
        self.valid_until.store(nanos(until), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_and_flags() {
        let counters = Arc::new(Counters::default());
        let now = Instant::now();
        let s = LeaseState::new(now + Duration::from_secs(1), counters.clone());
        assert_eq!(counters.held.load(Ordering::Relaxed), 1);
        assert!(!s.is_lost_at(now));
        assert!(s.is_lost_at(now + Duration::from_secs(2)));
        s.extend_to(now + Duration::from_secs(3));
        assert!(!s.is_lost_at(now + Duration::from_secs(2)));
        s.extend_to(now);
        assert!(!s.is_lost_at(now + Duration::from_secs(2)));
        s.mark_lost();
        s.mark_released();
        assert!(s.is_lost_at(now));
        assert_eq!(counters.held.load(Ordering::Relaxed), 0, "finished once");
    }
}
