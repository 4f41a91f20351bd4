//! The waiting lines of `-v`: while a command waits for a lock, a permit or
//! a run, one line when the wait starts, naming what it waits for (the
//! holder's host, pid, program and age, as its record says), then a
//! progress line every minute, so that a log read hours later shows what
//! the job was doing all that time. Written by a thread of its own, which
//! looks the holder up once when the wait starts and once per progress
//! line (one snapshot a minute), and only when info lines are logged.
//!
//! `REDGUARD_LOG_PROGRESS` (a duration, 100 ms at least) sets the period
//! between progress lines; tests use about a second.

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender, bounded};

use crate::show;

/// The period between progress lines, unless `REDGUARD_LOG_PROGRESS` says.
const PROGRESS: Duration = Duration::from_secs(60);

/// The shortest period `REDGUARD_LOG_PROGRESS` may set.
const MIN_PROGRESS: Duration = Duration::from_millis(100);

/// How long an acquisition may take before it counts as a wait: a lock
/// that comes at once costs no look-up and no line.
const FIRST_LOOK: Duration = Duration::from_millis(200);

/// The environment variable that sets the progress period.
const PROGRESS_ENV: &str = "REDGUARD_LOG_PROGRESS";

/// The period between progress lines: [`PROGRESS_ENV`] when it holds a
/// duration (at least [`MIN_PROGRESS`]), else a minute.
fn progress_period() -> Duration {
    period_of(std::env::var(PROGRESS_ENV).ok().as_deref())
}

/// The progress period a value of [`PROGRESS_ENV`] sets.
fn period_of(value: Option<&str>) -> Duration {
    value
        .and_then(|v| humantime::parse_duration(v.trim()).ok())
        .map_or(PROGRESS, |d| d.max(MIN_PROGRESS))
}

/// A running waiting logger; [`WaitLog::stop`] (or drop) ends it.
pub(crate) struct WaitLog {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    started: Instant,
}

impl WaitLog {
    /// Starts logging the wait for `what` (such as `lock "nightly"`);
    /// `look` describes who holds it now (one round trip). Does nothing
    /// unless info lines are logged.
    pub(crate) fn start(what: String, look: impl FnMut() -> String + Send + 'static) -> WaitLog {
        let started = Instant::now();
        let none = WaitLog {
            stop: None,
            thread: None,
            started,
        };
        if !log::log_enabled!(log::Level::Info) {
            return none;
        }
        let (stop, stopped) = bounded::<()>(1);
        let mut look = look;
        let period = progress_period();
        let spawned = thread::Builder::new()
            .name("redguard-waitlog".into())
            .spawn(move || {
                if !matches!(
                    stopped.recv_timeout(FIRST_LOOK),
                    Err(RecvTimeoutError::Timeout)
                ) {
                    return;
                }
                log::info!("redguard: waiting for {what}: {}", look());
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    log::info!(
                        "redguard: still waiting for {what} after {}: {}",
                        show::left(started.elapsed()),
                        look()
                    );
                }
            });
        match spawned {
            Ok(thread) => WaitLog {
                stop: Some(stop),
                thread: Some(thread),
                started,
            },
            Err(_) => none,
        }
    }

    /// Ends the waiting lines; returns how long the wait lasted.
    pub(crate) fn stop(mut self) -> Duration {
        self.finish();
        self.started.elapsed()
    }

    fn finish(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.try_send(());
        }
        if let Some(thread) = self.thread.take() {
            // Bounded: the thread checks the channel after at most one
            // look-up (one response timeout).
            let _ = thread.join();
        }
    }
}

impl Drop for WaitLog {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_period_is_a_minute_unless_set() {
        assert_eq!(period_of(None), PROGRESS);
        assert_eq!(period_of(Some(" 1s ")), Duration::from_secs(1));
        assert_eq!(period_of(Some("1ms")), MIN_PROGRESS);
        assert_eq!(period_of(Some("soon")), PROGRESS);
    }
}
