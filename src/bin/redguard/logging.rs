//! Diagnostics on stderr through `env_logger`: off by default, so that an
//! error stays one line; `-v` (info), `-vv` (debug), `-vvv` (trace), or
//! `RUST_LOG` in env_logger's syntax (`debug`, `redguard=trace`, ...).
//! `REDGUARD_LOG` is read, in the same syntax, when `RUST_LOG` is not
//! set. Every line is masked like every other line redguard writes.

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
/// it does not name; with neither, nothing is logged.
pub(crate) fn init(verbose: u8) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(LevelFilter::Off);
    if let Some(spec) = env_filter() {
        builder.parse_filters(&spec);
    }
    if let Some(level) = level(verbose) {
        builder.filter_level(level);
    }
    builder
        .format(|out, record| {
            let line = format!("[{}] {}", record.level(), record.args());
            // Library messages start with "redguard: " already.
            writeln!(out, "{}", crate::out::mask(&line))
        })
        .target(env_logger::Target::Stderr);
    // Only fails when a logger is installed already: keep that one.
    let _ = builder.try_init();
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
}
