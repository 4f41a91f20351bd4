//! The count of a client's operations that the watchdog is retrying after
//! a failover (see `watchdog::retried`), and the wait for it to reach zero:
//! [`Client::await_releases`](crate::Client::await_releases).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Operations of one client that are being retried.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: Mutex<usize>,
    none_left: Condvar,
}

impl InFlight {
    fn count(&self) -> MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One more operation is being retried.
    pub(crate) fn begin(&self) {
        *self.count() += 1;
    }

    /// One operation ended (done, failed or given up).
    pub(crate) fn end(&self) {
        let mut count = self.count();
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.none_left.notify_all();
        }
    }

    /// Operations still being retried.
    pub(crate) fn get(&self) -> usize {
        *self.count()
    }

    /// Waits until none is left, at most `timeout`; `true` when none is.
    pub(crate) fn wait_none(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut count = self.count();
        // Bounded: each turn waits until the deadline, or returns.
        loop {
            if *count == 0 {
                return true;
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if d <= now => return false,
                Some(d) => d - now,
                None => Duration::from_secs(3600),
            };
            count = self
                .none_left
                .wait_timeout(count, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
