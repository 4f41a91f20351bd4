//! The CLI's own reads before a wait (does the latch exist, does the
//! semaphore have the right count) ride out an outage as the library's
//! waits do: a `--wait` that outlives a Redis restart must not fail on
//! the read before it.

use std::time::{Duration, Instant};

/// The first pause after a failure; pauses double up to [`CAP`], each a
/// random point of the upper half of its step, as the library's waiters
/// and watchdog pause.
const FIRST: Duration = Duration::from_millis(10);
const CAP: Duration = Duration::from_millis(500);

/// Runs `op`, and again after a pause while it fails with an error
/// retrying can fix ([`redguard::Error::is_transient`]), until `deadline`
/// (`None`: for as long as it takes). Any other error is returned at once;
/// at the deadline, the first failure as it is, a later one as a timeout
/// naming it.
pub(crate) fn within<T>(
    deadline: Option<Instant>,
    mut op: impl FnMut() -> redguard::Result<T>,
) -> redguard::Result<T> {
    let started = Instant::now();
    let mut step = FIRST;
    let mut failed = 0_u32;
    // Bounded by the deadline; without one, by the outage (every turn
    // pauses at least 5 ms).
    loop {
        let err = match op() {
            Ok(done) => return Ok(done),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        failed += 1;
        let now = Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            if failed == 1 {
                return Err(err);
            }
            let over = now.duration_since(started);
            return Err(redguard::Error::Timeout {
                kind: redguard::TimeoutKind::Wait,
                limit: over,
                server: None,
                about: Some(format!(
                    "Redis was unavailable ({failed} attempts over {} failed; the last: {})",
                    crate::show::left(over),
                    crate::fail::chain(&err)
                )),
            });
        }
        log::debug!(
            "redguard: reading from Redis failed ({}); retrying",
            crate::fail::chain(&err)
        );
        let half = step / 2;
        let jitter = rand::random_range(0..=u64::try_from(half.as_micros()).unwrap_or(0));
        let mut pause = half + Duration::from_micros(jitter);
        step = (step * 2).min(CAP);
        if let Some(deadline) = deadline {
            pause = pause.min(deadline - now);
        }
        let until = now + pause;
        // Parking may wake early: park again until the pause is over.
        while Instant::now() < until {
            std::thread::park_timeout(until - Instant::now());
        }
    }
}
