//! The library's `log` records on stderr, when asked for with
//! `REDGUARD_LOG=error|warn|info|debug|trace` (off by default, so that
//! errors stay one line). Masked like every other line.

use log::{LevelFilter, Log, Metadata, Record};

/// The environment variable that turns diagnostics on.
const ENV: &str = "REDGUARD_LOG";

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!("[{}] {}", record.level(), record.args());
            // Library messages already start with "redguard: ".
            eprintln!("{}", crate::out::mask(&line));
        }
    }

    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Installs the logger when `REDGUARD_LOG` names a level.
pub(crate) fn init() {
    let Some(level) = std::env::var(ENV)
        .ok()
        .and_then(|v| v.trim().parse::<LevelFilter>().ok())
    else {
        return;
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
