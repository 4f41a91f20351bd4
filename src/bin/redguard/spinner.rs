//! The waiting line: on a terminal, a spinner on stderr with the time
//! waited and the current holder (indicatif), refreshed by its own thread
//! while the main thread blocks in `lock()`. Nothing at all when stderr is
//! not a terminal, with `-q`, or at `-v` (the log's waiting lines instead).

use std::io::IsTerminal;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Sender, bounded};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::show;

/// How often the holder shown is looked up again.
const REFRESH: Duration = Duration::from_secs(1);

/// A running spinner; [`Spinner::stop`] (or drop) clears its line.
pub(crate) struct Spinner {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts the spinner for `lock`, unless `quiet` or stderr is not a
    /// terminal.
    pub(crate) fn start(lock: &redguard::Lock, quiet: bool) -> Spinner {
        let none = Spinner {
            stop: None,
            thread: None,
        };
        // At `-v` the waiting lines (`crate::waitlog`) take its place: a
        // spinner redrawn under log lines would garble them.
        if quiet || log::log_enabled!(log::Level::Info) || !std::io::stderr().is_terminal() {
            return none;
        }
        let (stop, stopped) = bounded::<()>(1);
        let lock = lock.clone();
        let spawned = thread::Builder::new()
            .name("redguard-spinner".into())
            .spawn(move || {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template(
                    "{spinner} waiting for lock {prefix} [{elapsed}] {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
                bar.set_style(style);
                bar.set_prefix(show::name(lock.name()));
                bar.enable_steady_tick(Duration::from_millis(100));
                loop {
                    bar.set_message(show::look_holder(&lock));
                    match stopped.recv_timeout(REFRESH) {
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                bar.finish_and_clear();
            });
        match spawned {
            Ok(thread) => Spinner {
                stop: Some(stop),
                thread: Some(thread),
            },
            Err(_) => none,
        }
    }

    /// Stops the spinner and clears its line.
    pub(crate) fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.try_send(());
        }
        if let Some(thread) = self.thread.take() {
            // Bounded: the thread checks the channel after at most one
            // inspect (one response timeout) and one refresh period.
            let _ = thread.join();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.finish();
    }
}
