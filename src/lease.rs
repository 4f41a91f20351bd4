//! Everything about leases: the accepted range and its millisecond form,
//! the clock-drift allowance and the validity it leaves, `PTTL` readings,
//! and the shared state of one held lock (valid until when, lost,
//! released), written by the watchdog and the releasing thread and read by
//! guards with atomics only. No I/O.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::lost::HoldKind;

/// How long a hold lasts before its client's subscriber listens on its
/// lock's channel for a force unlock (the watchdog hands it over then). A
/// force unlock within this time of the grant is noticed at the next
/// renewal instead.
pub(crate) const LISTEN_AFTER: Duration = Duration::from_millis(100);

/// The longest lease accepted: 365 days. Longer leases are rejected with
/// [`Error::InvalidArgument`] (Redis itself refuses expiries that overflow
/// its clock arithmetic, well before `i64::MAX` ms).
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest lease accepted: 5 ms. A lease must outlast the clock-drift
/// allowance (1 % + 2 ms) subtracted from every grant, or no grant would
/// ever be valid on arrival.
pub const MIN_LEASE: Duration = Duration::from_millis(5);

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
    /// Round trips that carried only holder-record writes.
    pub(crate) record_round_trips: AtomicU64,
    /// Holder-record writes the server refused (`NOPERM`: an ACL without
    /// the record keys).
    pub(crate) record_refusals: AtomicU64,
    /// Holds checked after an unlock message on their channel.
    pub(crate) hold_checks: AtomicU64,
    /// Releases (and other operations on held leases) of this client that
    /// met a failover and are being retried.
    pub(crate) retries: crate::retry::InFlight,
    /// Retried operations that ended without going through (their lease
    /// ran out, or the client went first).
    pub(crate) failed_retries: AtomicU64,
}

/// The bit of [`LeaseState::valid_until`] that says the lease is lost.
/// Validity and loss share one word so that an extension and a loss at
/// the lease's end are decided in one order: an extension answered after
/// the loss is refused (and given back by its sender), and a loss at the
/// deadline yields to an extension that moved the deadline first.
/// Nanoseconds since the origin stay below it for 292 years.
const LOST: u64 = 1 << 63;

/// What [`LeaseState::lapse`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lapse {
    /// The lease is valid after all (extended since its end was read).
    Extended,
    /// It is lost; `true` when this call turned a live hold into a lost
    /// one (as [`LeaseState::mark_lost`] says).
    Lost(bool),
}

/// State of one lock held by one holder (shared by all its reentrant guards).
#[derive(Debug)]
pub(crate) struct LeaseState {
    released: AtomicBool,
    /// Set before the holder's last release is sent: a loss seen by the
    /// watchdog from then on may be that release, and is not reported.
    releasing: AtomicBool,
    finished: AtomicBool,
    /// Set once a write of the hold's start to its client's holder record
    /// went out: its field is deleted when the hold ends.
    recorded: AtomicBool,
    /// When the hold began (the granting script was sent).
    since: Instant,
    /// What kind of hold it is (the held-locks gauge).
    kind: HoldKind,
    /// Nanoseconds since the origin until which the lease is known to be
    /// valid on this client's clock, with [`LOST`] set once it is lost
    /// for good.
    valid_until: AtomicU64,
    counters: Arc<Counters>,
}

impl LeaseState {
    #[cfg(test)]
    pub(crate) fn new(valid_until: Instant, counters: Arc<Counters>) -> LeaseState {
        LeaseState::since(Instant::now(), valid_until, counters, HoldKind::Reentrant)
    }

    /// A hold granted by a script sent at `since`.
    pub(crate) fn since(
        since: Instant,
        valid_until: Instant,
        counters: Arc<Counters>,
        kind: HoldKind,
    ) -> LeaseState {
        counters.held.fetch_add(1, Ordering::Relaxed);
        crate::metrics::held(kind, 1.0);
        LeaseState {
            released: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            recorded: AtomicBool::new(false),
            since,
            kind,
            valid_until: AtomicU64::new(nanos(valid_until)),
            counters,
        }
    }

    fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            self.counters.held.fetch_sub(1, Ordering::Relaxed);
            crate::metrics::held(self.kind, -1.0);
        }
    }

    /// Marks the lease as lost for good (the watchdog heard 0, or gave up).
    /// `true` when this call turned a live hold into a lost one: not lost
    /// before, and its holder neither released it nor began to.
    pub(crate) fn mark_lost(&self) -> bool {
        let was = self.valid_until.fetch_or(LOST, Ordering::AcqRel);
        self.lost_now(was)
    }

    /// After `LOST` was set over `was`: ends the hold, and says whether
    /// that turned a live hold into a lost one.
    fn lost_now(&self, was: u64) -> bool {
        self.finish();
        was & LOST == 0 && !self.is_released() && !self.releasing.load(Ordering::Acquire)
    }

    /// Marks the lease lost because its end passed: only if, at `now`, it
    /// has (an extension may have moved the end since it was read).
    pub(crate) fn lapse(&self, now: Instant) -> Lapse {
        let now = nanos(now);
        let mut current = self.valid_until.load(Ordering::Acquire);
        loop {
            if current & LOST != 0 {
                return Lapse::Lost(false);
            }
            if now < current {
                return Lapse::Extended;
            }
            match self.valid_until.compare_exchange_weak(
                current,
                current | LOST,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(was) => return Lapse::Lost(self.lost_now(was)),
                Err(seen) => current = seen,
            }
        }
    }

    /// Says that the holder's last release is about to be sent.
    pub(crate) fn begin_release(&self) {
        self.releasing.store(true, Ordering::Release);
    }

    /// `true` once [`LeaseState::begin_release`] ran: the holder's last
    /// release is under way (it ends released or lost).
    pub(crate) fn is_releasing(&self) -> bool {
        self.releasing.load(Ordering::Acquire)
    }

    /// Says that the hold's start went to its holder record.
    pub(crate) fn mark_recorded(&self) {
        self.recorded.store(true, Ordering::Release);
    }

    /// `true` once [`LeaseState::mark_recorded`] ran.
    pub(crate) fn is_recorded(&self) -> bool {
        self.recorded.load(Ordering::Acquire)
    }

    /// `true` once the hold was released or lost.
    pub(crate) fn is_over(&self) -> bool {
        self.is_released() || self.is_marked_lost()
    }

    /// When the hold began: when its granting script was sent.
    pub(crate) fn held_since(&self) -> Instant {
        self.since
    }

    /// What kind of hold it is.
    pub(crate) fn kind(&self) -> HoldKind {
        self.kind
    }

    /// Marks the lock as released by its holder: the watchdog drops it.
    pub(crate) fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
        self.finish();
    }

    /// `true` once [`LeaseState::mark_lost`] ran.
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.valid_until.load(Ordering::Acquire) & LOST != 0
    }

    /// `true` once [`LeaseState::mark_released`] ran.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// `true` when the lease is lost or its validity ran out on our clock.
    pub(crate) fn is_lost_at(&self, now: Instant) -> bool {
        let word = self.valid_until.load(Ordering::Acquire);
        word & LOST != 0 || nanos(now) >= word
    }

    /// The end of the lease on this client's clock (lost or not).
    pub(crate) fn valid_until(&self) -> Instant {
        instant(self.valid_until.load(Ordering::Acquire) & !LOST)
    }

    /// How much longer the lease is known to be valid on our clock; zero
    /// once lost.
    pub(crate) fn valid_for(&self) -> Duration {
        let now = Instant::now();
        if self.is_lost_at(now) {
            return Duration::ZERO;
        }
        self.valid_until().saturating_duration_since(now)
    }

    /// `Ok(())` while the lease is held; [`Error::LockLost`] naming `name`
    /// once it is lost or ran out on our clock.
    pub(crate) fn check(&self, name: &[u8]) -> Result<()> {
        if self.is_lost_at(Instant::now()) {
            return Err(Error::lost(name));
        }
        Ok(())
    }

    /// Moves the validity forward to `until` (never backward). A lost
    /// lease stays lost (`LOST` is above every instant, which never reach
    /// it): `false` then.
    pub(crate) fn extend_to(&self, until: Instant) -> bool {
        self.valid_until.fetch_max(nanos(until), Ordering::AcqRel) & LOST == 0
    }

    /// Sets the validity to `until`, forward or backward (an explicit
    /// shorter lease), if the lease is still valid at `now`, when the
    /// extension's reply came: `false`, and nothing changed, when it is
    /// lost or its end had passed by then (a lease once seen over stays
    /// over; the extension must be given back).
    pub(crate) fn set_valid_until(&self, until: Instant, now: Instant) -> bool {
        let (until, now) = (nanos(until), nanos(now));
        let mut current = self.valid_until.load(Ordering::Acquire);
        loop {
            if current & LOST != 0 || now >= current {
                return false;
            }
            match self.valid_until.compare_exchange_weak(
                current,
                until,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }
}

/// A lease in whole milliseconds, as sent to Redis (fractions round up).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a lease under [`MIN_LEASE`] (zero
/// included) or above [`MAX_LEASE`].
pub(crate) fn lease_ms(lease: Duration) -> Result<u64> {
    if lease.is_zero() {
        return Err(Error::invalid("lease must not be zero"));
    }
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "lease {} is shorter than the minimum {}",
            Human(lease),
            Human(MIN_LEASE)
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "lease {} is longer than the maximum {}",
            Human(lease),
            Human(MAX_LEASE)
        )));
    }
    let ms = lease.as_millis();
    let ms = if Duration::from_millis(ms as u64) < lease {
        ms + 1
    } else {
        ms
    };
    Ok(ms as u64)
}

/// The safety margin subtracted from a lease when computing how long a
/// grant stays valid on the client's clock: 1 % of the lease + 2 ms (the
/// Redis distlock drift allowance).
pub(crate) fn clock_drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The instant until which a lease granted (or renewed) by a script sent at
/// `sent` is known to be valid on this client's clock: `sent` + lease −
/// [`clock_drift`]. The reply may arrive any time after `sent`; the server
/// started counting the lease no earlier than that.
pub(crate) fn valid_until(sent: Instant, lease: Duration) -> Instant {
    sent + lease.saturating_sub(clock_drift(lease))
}

/// The remaining lifetime of a key that exists, as
/// [`Lock::remaining_ttl`](crate::Lock::remaining_ttl) and
/// [`LockInfo::ttl`](crate::LockInfo::ttl) report it (Redis's `PTTL`, in
/// milliseconds, read as a [`Duration`]).
///
/// A key without an expiry is [`Ttl::Persistent`], not a huge duration, so
/// `Instant::now() + ttl` cannot overflow by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ttl {
    /// The key expires after this long (millisecond resolution).
    Expires(Duration),
    /// The key exists without an expiry (`PTTL` answered `-1`): written by
    /// someone else, or by a holder that set none. Nothing will free it but
    /// a release or [`Lock::force_unlock`](crate::Lock::force_unlock).
    Persistent,
}

impl Ttl {
    /// How long until the key expires; `None` for a key that never does.
    pub fn expires_in(self) -> Option<Duration> {
        match self {
            Ttl::Expires(d) => Some(d),
            Ttl::Persistent => None,
        }
    }
}

/// What `PTTL` (or a busy acquire script, which answers with the holder's
/// PTTL) says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pttl {
    /// No such key (`-2`).
    Missing,
    /// The key exists without an expiry (`-1`).
    NoExpiry,
    /// The key expires after this long.
    Expires(Duration),
}

impl Pttl {
    /// Reads a `PTTL` reply in milliseconds.
    pub(crate) fn from_ms(ms: i64) -> Pttl {
        match ms {
            -2 => Pttl::Missing,
            ms if ms < 0 => Pttl::NoExpiry,
            ms => Pttl::Expires(Duration::from_millis(ms.unsigned_abs())),
        }
    }

    /// The public reading: `None` when there is no key.
    pub(crate) fn remaining(self) -> Option<Ttl> {
        match self {
            Pttl::Missing => None,
            Pttl::NoExpiry => Some(Ttl::Persistent),
            Pttl::Expires(d) => Some(Ttl::Expires(d)),
        }
    }

    /// How long until the key expires, when it does: a bound on a waiter's
    /// sleep. `None` when unknown or never.
    pub(crate) fn expiry(self) -> Option<Duration> {
        match self {
            Pttl::Expires(d) => Some(d),
            Pttl::Missing | Pttl::NoExpiry => None,
        }
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
    #[test]
    fn an_extension_and_a_loss_at_the_end_exclude_each_other() {
        let counters = Arc::new(Counters::default());
        let start = Instant::now();
        let s = LeaseState::new(start + Duration::from_secs(1), counters.clone());
        let later = start + Duration::from_secs(2);
        // Not over yet at `start`: a lapse yields.
        assert_eq!(s.lapse(start), Lapse::Extended);
        assert!(!s.is_marked_lost());
        // An extension whose reply came after the end is refused.
        assert!(!s.set_valid_until(start + Duration::from_secs(30), later));
        assert_eq!(s.valid_until(), start + Duration::from_secs(1));
        // One that came before it moves the end, backward too.
        assert!(s.set_valid_until(start + Duration::from_millis(1500), start));
        assert_eq!(s.valid_until(), start + Duration::from_millis(1500));
        // A lapse read against the old end yields to the moved one.
        assert_eq!(
            s.lapse(start + Duration::from_millis(1200)),
            Lapse::Extended
        );
        assert_eq!(s.lapse(later), Lapse::Lost(true));
        assert_eq!(s.lapse(later), Lapse::Lost(false), "told once");
        assert_eq!(counters.held.load(Ordering::Relaxed), 0);
        // Lost is for good: no extension brings it back.
        assert!(!s.set_valid_until(later + Duration::from_secs(60), start));
        assert!(!s.extend_to(later + Duration::from_secs(60)));
        assert!(s.is_lost_at(start));
        assert!(s.is_marked_lost());
        assert_eq!(s.valid_for(), Duration::ZERO);
        assert_eq!(s.valid_until(), start + Duration::from_millis(1500));
        assert!(!s.mark_lost(), "already lost");
    }

    #[test]
    fn a_loss_after_a_release_began_is_not_told() {
        let counters = Arc::new(Counters::default());
        let start = Instant::now();
        let s = LeaseState::new(start + Duration::from_secs(1), counters.clone());
        assert!(s.extend_to(start + Duration::from_secs(2)));
        s.begin_release();
        assert_eq!(s.lapse(start + Duration::from_secs(3)), Lapse::Lost(false));
        let r = LeaseState::new(start + Duration::from_secs(1), counters);
        r.mark_released();
        assert!(!r.mark_lost());
    }

    #[test]
    fn the_documented_bounds() {
        assert_eq!(MAX_LEASE, Duration::from_secs(31_536_000), "365 days");
        assert_eq!(MIN_LEASE, Duration::from_millis(5));
    }

    #[test]
    fn lease_rounding_and_bounds() {
        assert!(lease_ms(Duration::ZERO).is_err());
        assert!(lease_ms(Duration::from_nanos(1)).is_err());
        assert!(lease_ms(Duration::from_micros(4999)).is_err());
        assert_eq!(lease_ms(MIN_LEASE).unwrap(), 5);
        assert_eq!(lease_ms(Duration::from_micros(5500)).unwrap(), 6);
        assert_eq!(lease_ms(Duration::from_secs(30)).unwrap(), 30_000);
        assert!(lease_ms(MAX_LEASE).is_ok());
        assert!(lease_ms(MAX_LEASE + Duration::from_millis(1)).is_err());
        assert!(lease_ms(Duration::MAX).is_err());
    }

    #[test]
    fn pttl_conventions() {
        assert_eq!(Pttl::from_ms(-2).remaining(), None);
        assert_eq!(Pttl::from_ms(-1).remaining(), Some(Ttl::Persistent));
        assert_eq!(Pttl::from_ms(-1).expiry(), None);
        assert_eq!(Ttl::Persistent.expires_in(), None);
        assert_eq!(
            Ttl::Expires(Duration::from_millis(250)).expires_in(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            Pttl::from_ms(250).remaining(),
            Some(Ttl::Expires(Duration::from_millis(250)))
        );
        assert_eq!(
            Pttl::from_ms(250).expiry(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(Pttl::from_ms(0).expiry(), Some(Duration::ZERO));
    }

    #[test]
    fn validity_subtracts_the_drift() {
        let t = Instant::now();
        let l = Duration::from_secs(10);
        assert_eq!(valid_until(t, l), t + l - Duration::from_millis(102));
        assert_eq!(
            valid_until(t, MIN_LEASE),
            t + MIN_LEASE - Duration::from_micros(2050)
        );
    }
}
