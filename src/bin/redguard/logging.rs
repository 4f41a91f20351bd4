//! Diagnostics on stderr through `env_logger`: off by default, so that an
//! error stays one line; `-v` (info), `-vv` (debug), `-vvv` (trace), or
//! `RUST_LOG` in env_logger's syntax (`debug`, `redguard=trace`, ...).
//! `REDGUARD_LOG` is read, in the same syntax, when `RUST_LOG` is not
//! set. Every line is masked like every other line redguard writes.
//!
//! Each line says when (UTC, milliseconds), which process and which lock
//! or key, so that the lines of several hosts' cron mails or of one
//! journal can be put side by side:
//!
//! ```text
//! 2026-11-28T01:20:00.123Z pid=4242 lock="nightly" [INFO] redguard: acquired reentrant lock "nightly" after 2ms as …
//! ```
//!
//! What `-v` tells of a run (the wait, its progress, the grant, CMD's start
//! and end, the release) is written where it happens; the wait's lines by
//! [`crate::waitlog`].

use std::io::Write;

use log::LevelFilter;

/// The alias read when `RUST_LOG` is not set.
const ALIAS: &str = "REDGUARD_LOG";

/// The level `-v` repeated `verbose` times asks for; `None` without `-v`.
fn level(verbose: u8) -> Option<LevelFilter> {
    match verbose {
        0 => None,
        1 => Some(LevelFilter::Info),
        2 => Some(LevelFilter::Debug),
        _ => Some(LevelFilter::Trace),
    }
}

/// The filter given in the environment: `RUST_LOG`, else `REDGUARD_LOG`
/// (blank values count as unset).
fn env_filter() -> Option<String> {
    [env_logger::DEFAULT_FILTER_ENV, ALIAS]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|v| !v.trim().is_empty())
}

/// Installs the logger. `-v` wins over the environment for every module
/// it does not name; with neither, nothing is logged. `subject`: the lock
/// or key the command works on (shown escaped and quoted), named on every
/// line.
pub(crate) fn init(verbose: u8, subject: Option<&[u8]>) {
    let who = who(std::process::id(), subject);
    let mut builder = env_logger::Builder::new();
    builder.filter_level(LevelFilter::Off);
    if let Some(spec) = env_filter() {
        builder.parse_filters(&spec);
    }
    if let Some(level) = level(verbose) {
        builder.filter_level(level);
    }
    builder
        .format(move |out, record| {
            let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
            let line = format!("{now} {who} [{}] {}", record.level(), record.args());
            // Library messages start with "redguard: " already.
            writeln!(out, "{}", crate::out::mask(&line))
        })
        .target(env_logger::Target::Stderr);
    // Only fails when a logger is installed already: keep that one.
    let _ = builder.try_init();
}

/// The part of every line after the time: the pid, and the lock or key
/// when the command has one.
fn who(pid: u32, subject: Option<&[u8]>) -> String {
    match subject {
        Some(subject) => format!("pid={pid} lock={}", crate::show::name(subject)),
        None => format!("pid={pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_raises_the_level() {
        assert_eq!(level(0), None);
        assert_eq!(level(1), Some(LevelFilter::Info));
        assert_eq!(level(2), Some(LevelFilter::Debug));
        assert_eq!(level(7), Some(LevelFilter::Trace));
    }

    #[test]
    fn lines_name_the_process_and_the_lock() {
        assert_eq!(who(42, None), "pid=42");
        assert_eq!(who(42, Some(b"job \"1\"")), "pid=42 lock=\"job \\\"1\\\"\"");
    }
}
