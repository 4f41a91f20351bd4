//! When CMD is stopped because its lease is running out, and the shortest
//! lease that leaves room for it.
//!
//! Redguard's *local deadline* is the end of the lease on this host's
//! clock: the send time of the last grant or renewal that succeeded, plus
//! the lease, minus the clock-drift allowance (1 % + 2 ms), so it comes
//! before the key can expire on the server. When renewals stop succeeding
//! (partition, refused renewal, redguard stopped or starved), CMD's tree
//! is ended by that deadline:
//!
//! ```text
//! SIGTERM at  deadline − kill grace − STOP_MARGIN
//! SIGKILL at  deadline − STOP_MARGIN
//! ```
//!
//! [`STOP_MARGIN`] is what is left for the SIGKILL to land and the tree to
//! be reaped: the supervisor's late wake-up on a loaded host, one `/proc`
//! scan per generation of the tree, and the kernel tearing the processes
//! down. The supervisor keeps the deadline itself (redguard sends it every
//! new one), so this holds while redguard is stopped or hung too.
//!
//! SIGTERM may come no earlier than half a lease after the last renewal:
//! `kill grace + STOP_MARGIN ≤ lease / 2`. Renewals go every third of the
//! lease, so a renewal has a sixth of it to come through before CMD is
//! stopped. Hence the shortest lease `exec` accepts: `2 × (kill grace +
//! STOP_MARGIN)`. Without `--kill-grace`, SIGTERM goes two thirds of a
//! lease after the last renewal (a renewal then has a third of the lease,
//! as long as a Redis pause the watchdog rides out, to come through): the
//! grace is what is left until the SIGKILL, `lease / 3 − STOP_MARGIN −
//! drift`, at most 10 s, and none below a lease of about 790 ms, so the
//! shortest lease is 500 ms (SIGKILL with no SIGTERM before it).

use std::time::Duration;

use crate::fail::{Failure, code};

/// Between the SIGKILL and the local deadline: see [the module](self).
/// Measured on a 2-core host at load 15-17: the supervisor acted 120 ms
/// late now and then, so 100 ms was not enough.
pub(crate) const STOP_MARGIN: Duration = Duration::from_millis(250);

/// The kill grace when none is given and the lease allows it.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// The kill grace for `lease`: `asked` (`--kill-grace`) when the lease
/// leaves room for it; by default what is left of the lease's last third
/// after [`STOP_MARGIN`] and the clock-drift allowance, at most
/// [`DEFAULT_KILL_GRACE`]. `option` names where the lease came from, for
/// the message (`--lease 2s`).
///
/// # Errors
///
/// A usage error (64) when `grace + STOP_MARGIN` exceeds half the lease.
pub(crate) fn kill_grace(
    asked: Option<Duration>,
    lease: Duration,
    option: &str,
) -> Result<Duration, Failure> {
    let grace = asked.unwrap_or_else(|| {
        (lease / 3)
            .saturating_sub(STOP_MARGIN + clock_drift(lease))
            .min(DEFAULT_KILL_GRACE)
    });
    if (grace + STOP_MARGIN).saturating_mul(2) <= lease {
        return Ok(grace);
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let (shortest, because) = match asked {
        Some(g) => (
            (g + STOP_MARGIN) * 2,
            format!("with --kill-grace {}", show(g)),
        ),
        None => (STOP_MARGIN * 2, "even with no kill grace".to_owned()),
    };
    Err(Failure::new(
        code::USAGE,
        format!(
            "{option} is too short: {because} the lease must be at least {} \
             (2 × (kill grace + {} margin)), so that CMD can be stopped and killed \
             before the lease ends; give a longer lease or a shorter --kill-grace",
            show(shortest),
            show(STOP_MARGIN)
        ),
    ))
}

/// The library's clock-drift allowance, taken off every lease to make the
/// local deadline: 1 % + 2 ms.
fn clock_drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock `Instant` reads on
/// Linux, shared by redguard and its supervisor (same boot, same time
/// namespace), so a deadline can pass between them as a number.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only to `ts`; CLOCK_MONOTONIC always
    // exists.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Nanoseconds of `d`, saturating.
pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_must_leave_half_the_lease() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(kill_grace(None, s(30), "x").unwrap(), ms(9_448));
        assert_eq!(kill_grace(None, s(60), "x").unwrap(), s(10));
        assert_eq!(
            kill_grace(None, s(2), "x").unwrap(),
            Duration::from_nanos(394_666_666)
        );
        assert_eq!(kill_grace(None, ms(600), "x").unwrap(), ms(0));
        assert_eq!(kill_grace(None, ms(500), "x").unwrap(), ms(0));
        let e = kill_grace(None, ms(499), "x").unwrap_err();
        assert!(e.message.contains("at least 500ms"), "{}", e.message);
        assert_eq!(kill_grace(Some(s(10)), s(30), "x").unwrap(), s(10));
        assert_eq!(kill_grace(Some(ms(750)), s(2), "x").unwrap(), ms(750));
        let e = kill_grace(Some(ms(751)), s(2), "--lease 2s").unwrap_err();
        assert_eq!(e.code, 64);
        assert!(
            e.message.contains("--lease 2s is too short"),
            "{}",
            e.message
        );
        assert!(e.message.contains("at least 2s 2ms"), "{}", e.message);
        assert_eq!(kill_grace(Some(ms(0)), ms(500), "x").unwrap(), ms(0));
    }
}
