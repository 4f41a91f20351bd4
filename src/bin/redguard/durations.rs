//! Duration arguments: parsed with humantime (`500ms`, `30s`, `2m`,
//! `1h 30m`) and checked against the range each option allows, when the
//! arguments are parsed. A rejected value is reported by clap with the
//! option and the value as typed, and exits 64.

use std::time::Duration;

use redguard::{MAX_LEASE, MIN_LEASE};

/// How durations are written, for messages.
const EXAMPLES: &str = "durations look like 500ms, 30s, 2m, 1h 30m";

/// Response and replica-ack timeouts: the range `redguard::Builder`
/// documents for its timeouts (1 ms ..= 1 day).
const MIN_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Any duration, zero included (`--wait`, `--kill-grace`).
pub(crate) fn any(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err("durations cannot be negative".to_owned());
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} ({EXAMPLES})"))
}

/// A lease or a ttl (`--lease`, `--ttl`): what the library accepts,
/// `MIN_LEASE ..= MAX_LEASE`.
pub(crate) fn lease(text: &str) -> Result<Duration, String> {
    within(any(text)?, MIN_LEASE, MAX_LEASE)
}

/// A timeout of one Redis exchange (`--response-timeout`,
/// `--replica-ack-timeout`).
pub(crate) fn timeout(text: &str) -> Result<Duration, String> {
    within(any(text)?, MIN_TIMEOUT, MAX_TIMEOUT)
}

fn within(d: Duration, min: Duration, max: Duration) -> Result<Duration, String> {
    if d < min || d > max {
        return Err(format!(
            "must be at least {} and at most {}",
            show(min),
            show(max)
        ));
    }
    Ok(d)
}

/// A bound for people: `5ms`, `1day`, `365days`.
fn show(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() == 0 && secs >= 86_400 && secs.is_multiple_of(86_400) {
        let days = secs / 86_400;
        return format!("{days}day{}", if days == 1 { "" } else { "s" });
    }
    humantime::format_duration(d).to_string()
}

/// `true` for an option whose value is a duration: a negative value after
/// it is reported as such, not as an unknown option (for `latch --wait`,
/// whose value is optional and so cannot start with a dash).
pub(crate) fn is_duration_option(arg: &str) -> bool {
    matches!(
        arg,
        "--wait"
            | "-w"
            | "--lease"
            | "-l"
            | "--ttl"
            | "-t"
            | "--kill-grace"
            | "--response-timeout"
            | "--replica-ack-timeout"
            | "--watchdog-timeout"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_negative_ones_say_so() {
        assert_eq!(any("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(any(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(any("0s"), Ok(Duration::ZERO));
        assert!(any("10").is_err());
        assert!(any("soon").is_err());
        assert_eq!(any("-1s"), Err("durations cannot be negative".to_owned()));
    }

    #[test]
    fn bounds_are_shown_as_people_write_them() {
        assert_eq!(
            lease("0s"),
            Err("must be at least 5ms and at most 365days".to_owned())
        );
        assert!(lease("1000years").is_err());
        assert_eq!(lease("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(
            timeout("2days"),
            Err("must be at least 1ms and at most 1day".to_owned())
        );
    }
}
