//! The one retry policy of the library: exponential backoff with jitter
//! for every loop that retries something that failed (renewals and
//! releases while a server is down, waiting calls through an outage,
//! reconnects, rediscovery of a Sentinel master or a Cluster's slot map),
//! each loop's pauses named here ([`Backoff::waiting_call`] and its
//! siblings); the one give-back retried after a lost reply
//! ([`give_back`]); and the count of a client's operations being retried
//! ([`InFlight`]). No I/O, no clock reads: the caller waits for the pause
//! it is given. Which errors are worth a retry is the error's own
//! classification ([`Error::is_transient`](crate::Error::is_transient)).
//!
//! Each pause is drawn uniformly from the upper half of the current step
//! ("equal jitter"), and the step doubles after every pause up to a cap, so
//! that clients that met the same outage do not come back in step, and a
//! dead server sees a handful of attempts per second instead of a flood.

use std::time::{Duration, Instant};

mod give_back;
mod in_flight;

pub(crate) use give_back::give_back;
pub(crate) use in_flight::InFlight;

/// The first step of a retry loop that follows a lease: 10 ms.
pub(crate) const FIRST: Duration = Duration::from_millis(10);

/// The longest pause before the subscriber reopens its pub/sub connection;
/// a connection that lived at least this long starts the pauses small
/// again.
pub(crate) const SUBSCRIBER_MAX_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause of a waiting call riding out an outage, and between
/// two rounds of the watchdog's retries: short enough that a release lands
/// within about a second of a promotion, long enough that a server that
/// stays down sees a couple of attempts a second.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Pauses of a retry loop: doubling steps from `first` up to `cap`, each
/// pause a random point of the upper half of its step.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    cap: Duration,
    step: Duration,
}

impl Backoff {
    /// Steps from `first` (at least 1 ms) doubling up to `cap` (at least
    /// `first`).
    pub(crate) fn new(first: Duration, cap: Duration) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        Backoff {
            first,
            cap: cap.max(first),
            step: first,
        }
    }

    /// The backoff of a loop that keeps a lease of `lease` alive (or frees
    /// it): from [`FIRST`] up to a sixth of the lease, so that even at the
    /// cap a lease sees several attempts before it runs out.
    pub(crate) fn for_lease(lease: Duration) -> Backoff {
        let cap = lease / 6;
        Backoff::new(FIRST.min(cap), cap)
    }

    /// A waiting call's attempts through an outage (`lock()`, `acquire`,
    /// a latch's `wait`), and the watchdog's rounds of retried renewals and
    /// releases: 10 ms doubling up to [`MAX_PAUSE`] (500 ms).
    pub(crate) fn waiting_call() -> Backoff {
        Backoff::new(FIRST, MAX_PAUSE)
    }

    /// A Cluster call sent again after `TRYAGAIN`, `CLUSTERDOWN` or a
    /// moved slot: 5 ms doubling up to 50 ms (a slot migrates in a few ms).
    pub(crate) fn cluster_call() -> Backoff {
        Backoff::new(Duration::from_millis(5), Duration::from_millis(50))
    }

    /// A Cluster call sent again while the master of its slot cannot be
    /// reached (a failover under way): 20 ms doubling up to 250 ms, so that
    /// the call goes on within a quarter second of the promotion without a
    /// storm of connects to the dead node.
    pub(crate) fn cluster_failover() -> Backoff {
        Backoff::new(Duration::from_millis(20), Duration::from_millis(250))
    }

    /// A Cluster call waiting for a slot that moves (`TRYAGAIN` while a
    /// migration holds the call's keys split): 5 ms doubling up to 250 ms,
    /// so that a migration of a few milliseconds costs little, and one
    /// that lasts a minute sees four attempts a second from each caller.
    pub(crate) fn slot_moving() -> Backoff {
        Backoff::new(Duration::from_millis(5), Duration::from_millis(250))
    }

    /// A Cluster's slot map read again after failed refreshes: every
    /// `every` at first, doubling up to 2 s.
    pub(crate) fn slot_map_refresh(every: Duration) -> Backoff {
        Backoff::new(every, Duration::from_secs(2))
    }

    /// A Sentinel master looked up again while none answers: 10 ms doubling
    /// up to 100 ms (a failover elects a new master within a second or so).
    pub(crate) fn sentinel_lookup() -> Backoff {
        Backoff::new(Duration::from_millis(10), Duration::from_millis(100))
    }

    /// The listener of Sentinel's `+switch-master` reconnecting: 50 ms
    /// doubling up to 2 s.
    pub(crate) fn sentinel_listener() -> Backoff {
        Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
    }

    /// The subscriber's pub/sub connection reopened: 10 ms doubling up to
    /// [`SUBSCRIBER_MAX_PAUSE`] (1 s).
    pub(crate) fn subscriber_reconnect() -> Backoff {
        Backoff::new(FIRST, SUBSCRIBER_MAX_PAUSE)
    }

    /// The watchdog's watch connection opened again: from its look pace
    /// `every` up to 500 ms, so that a server that comes back is seen, and
    /// its leases checked, within that; a server that stays down sees about
    /// two attempts a second.
    pub(crate) fn watch_connection(every: Duration) -> Backoff {
        Backoff::new(every, MAX_PAUSE)
    }

    /// A sharded subscription (`SSUBSCRIBE`) tried again on a node: 100 ms
    /// doubling up to 2 s.
    pub(crate) fn sharded_subscribe() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
    }

    /// The next pause, in `[step / 2, step]`; the step then doubles (up to
    /// the cap).
    pub(crate) fn next_pause(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(self.cap);
        let half = step / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rand::Rng::random_range(&mut rand::rng(), 0..=nanos))
    }

    /// Starts again from the first step (after a success).
    pub(crate) fn reset(&mut self) {
        self.step = self.first;
    }

    /// The step the next pause is drawn from (its upper bound).
    #[cfg(test)]
    pub(crate) fn step(&self) -> Duration {
        self.step
    }
}

/// Blocks the calling thread until `until`. The library does not use
/// `thread::sleep`; parking may wake early, hence the loop.
pub(crate) fn pause_until(until: Instant) {
    // Bounded: each turn parks until `until` or returns.
    loop {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::park_timeout(until - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn pauses_double_up_to_the_cap_within_their_jitter() {
        let mut b = Backoff::new(MS(10), MS(100));
        for step in [10, 20, 40, 80, 100, 100, 100] {
            assert_eq!(b.step(), MS(step));
            let pause = b.next_pause();
            assert!(
                pause >= MS(step) / 2 && pause <= MS(step),
                "{pause:?} outside [{step}/2, {step}] ms"
            );
        }
        b.reset();
        assert_eq!(b.step(), MS(10));
    }

    #[test]
    fn pauses_are_jittered() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut b = Backoff::new(MS(100), MS(100));
            seen.insert(b.next_pause());
        }
        assert!(
            seen.len() > 10,
            "50 draws gave {} distinct pauses",
            seen.len()
        );
    }

    #[test]
    fn a_lease_caps_at_a_sixth_of_it() {
        let mut b = Backoff::for_lease(Duration::from_secs(30));
        let total: Duration = (0..40).map(|_| b.next_pause()).sum();
        assert_eq!(b.step(), Duration::from_secs(5));
        // 40 attempts take at least the ramp plus 30 capped pauses of 2.5 s.
        assert!(total >= Duration::from_secs(75), "{total:?}");
        // A tiny lease still pauses (1 ms at least), never for long.
        let mut tiny = Backoff::for_lease(MS(5));
        assert_eq!(tiny.step(), MS(1));
        assert!(tiny.next_pause() <= MS(1));
    }

    #[test]
    fn the_attempt_rate_falls_to_the_cap() {
        // Attempts in the first second and in each later second, for the
        // reconnect loop of a 30 s lease: a burst of a few, then one or
        // two a second at most.
        let mut b = Backoff::for_lease(Duration::from_secs(30));
        let mut at = Duration::ZERO;
        let mut first_second = 0;
        while at < Duration::from_secs(1) {
            at += b.next_pause();
            first_second += 1;
        }
        assert!(
            first_second <= 10,
            "{first_second} attempts in the first second"
        );
        let start = at;
        let mut later = 0;
        while at < start + Duration::from_secs(60) {
            at += b.next_pause();
            later += 1;
        }
        assert!(later <= 60 / 2 + 1, "{later} attempts in 60 s");
    }
}
