//! Durations in messages, written the way a user types them (`30s`,
//! `1s 500ms`, `365d`): the units the CLI's `--wait 30s` accepts, whole
//! numbers only, largest unit first.
//!
//! `Debug` of a `Duration` prints `0ns` for zero and `31536000s` for a
//! year; `humantime`'s formatter prints years and months of 30.44 days.
//! Neither reads back as what the user wrote, hence this small formatter.

use std::fmt;
use std::time::Duration;

/// Displays a [`Duration`] as whole days, hours, minutes, seconds,
/// milliseconds, microseconds and nanoseconds, largest first, zero parts
/// left out: `0s`, `5ms`, `30s`, `1m 30s`, `365d`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Human(pub(crate) Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let nanos = u64::from(self.0.subsec_nanos());
        if secs == 0 && nanos == 0 {
            return f.write_str("0s");
        }
        let parts = [
            (secs / 86_400, "d"),
            (secs / 3_600 % 24, "h"),
            (secs / 60 % 60, "m"),
            (secs % 60, "s"),
            (nanos / 1_000_000, "ms"),
            (nanos / 1_000 % 1_000, "us"),
            (nanos % 1_000, "ns"),
        ];
        let mut first = true;
        for (n, unit) in parts {
            if n == 0 {
                continue;
            }
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{n}{unit}")?;
            first = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_typed() {
        let text = |d: Duration| Human(d).to_string();
        assert_eq!(text(Duration::ZERO), "0s");
        assert_eq!(text(Duration::from_secs(30)), "30s");
        assert_eq!(text(Duration::from_millis(1)), "1ms");
        assert_eq!(text(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(text(Duration::from_secs(90)), "1m 30s");
        assert_eq!(text(Duration::from_secs(24 * 3600)), "1d");
        assert_eq!(text(Duration::from_secs(365 * 24 * 3600)), "365d");
        assert_eq!(text(Duration::from_nanos(1_001)), "1us 1ns");
        assert_eq!(
            text(Duration::MAX),
            "213503982334601d 7h 15s 999ms 999us 999ns"
        );
    }
}
