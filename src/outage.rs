//! A waiting call riding out an outage: `lock()`, `try_lock_for`, a
//! semaphore's `acquire`, a run-once wait, a latch's `wait`, a multi-lock's
//! rounds. A holder's lease survives a Redis restart, a freeze or a
//! failover shorter than the lease (the watchdog retries its renewals);
//! a waiter must not give up on less. An attempt that fails with an error
//! retrying can fix ([`Error::is_transient`]: a broken or refused
//! connection, a timeout, `LOADING`, `READONLY`, `MASTERDOWN`, `TRYAGAIN`,
//! `CLUSTERDOWN`, `BUSY`, `NOREPLICAS`) is tried again after a pause, until
//! the call's own deadline; any other error (credentials, ACL, wrong type,
//! bad input, shutdown) ends the call at once.
//!
//! The pauses are the watchdog's retry pauses (see
//! [`crate::watchdog::retry`]): from 10 ms, doubling with jitter up to half
//! a second, so that a server that stays down sees two or three attempts a
//! second from each waiting thread, and waiters that met the same outage do
//! not come back in step.

use std::time::{Duration, Instant};

use crate::backoff::{self, Backoff};
use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::watchdog::retry::MAX_PAUSE;

/// The failures of one waiting call since its last answered attempt.
#[derive(Debug)]
pub(crate) struct Outage {
    backoff: Backoff,
    /// Failed attempts in a row.
    failed: u32,
    /// When the first of them failed.
    since: Option<Instant>,
}

impl Outage {
    pub(crate) fn new() -> Outage {
        Outage {
            backoff: Backoff::new(backoff::FIRST, MAX_PAUSE),
            failed: 0,
            since: None,
        }
    }

    /// After an answered attempt (busy or not): the next failure starts
    /// from the first pause again.
    pub(crate) fn reset(&mut self) {
        if self.failed > 0 {
            log::debug!(
                "redguard: Redis answered again after {} failed attempts",
                self.failed
            );
        }
        self.backoff.reset();
        self.failed = 0;
        self.since = None;
    }

    /// After an attempt that failed with `err`: the pause before the next
    /// attempt (never past `deadline`; `None`: no deadline), or the error
    /// that ends the call. That is `err` itself when retrying cannot fix it,
    /// or when it is the call's first failure and no time is left (a
    /// `try_lock` reports its one error as it is); an [`Error::Timeout`]
    /// naming `err` when the deadline passed after earlier failures.
    pub(crate) fn next(&mut self, err: Error, deadline: Option<Instant>) -> Result<Duration> {
        if !err.is_transient() {
            return Err(err);
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        self.failed = self.failed.saturating_add(1);
        let pause = self.backoff.next_pause();
        match deadline {
            Some(deadline) if deadline <= now => {
                if self.failed == 1 {
                    return Err(err);
                }
                Err(gave_up(
                    &err,
                    self.failed,
                    now.saturating_duration_since(since),
                ))
            }
            Some(deadline) => {
                log::debug!(
                    "redguard: attempt failed ({e}); retrying in {pause:?} (until the \
                     deadline, in {:?})",
                    deadline - now,
                    e = err.chain()
                );
                Ok(pause.min(deadline - now))
            }
            None => {
                log::debug!(
                    "redguard: attempt failed ({e}); retrying in {pause:?}",
                    e = err.chain()
                );
                Ok(pause)
            }
        }
    }

    /// Failed attempts in a row so far.
    #[cfg(test)]
    pub(crate) fn failed(&self) -> u32 {
        self.failed
    }
}

/// The error of a wait whose deadline passed while Redis could not answer:
/// a timeout naming the attempts, how long they failed, and the last error.
fn gave_up(last: &Error, failed: u32, over: Duration) -> Error {
    let over = Duration::from_millis(u64::try_from(over.as_millis()).unwrap_or(u64::MAX));
    Error::Timeout {
        kind: crate::TimeoutKind::Wait,
        limit: over,
        server: None,
        about: Some(format!(
            "Redis was unavailable ({failed} attempts over {} failed; the last: {})",
            Human(over),
            last.chain()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Error {
        Error::io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ))
    }

    #[test]
    fn errors_retrying_cannot_fix_end_the_wait_at_once() {
        let mut outage = Outage::new();
        for err in [
            Error::invalid("bad"),
            Error::Shutdown,
            Error::WrongType { key: "k".into() },
            Error::Protocol("garbage".into()),
        ] {
            let far = Instant::now() + Duration::from_secs(60);
            assert!(outage.next(err, Some(far)).is_err());
            assert!(outage.next(Error::Shutdown, None).is_err());
        }
        assert_eq!(outage.failed(), 0);
    }

    #[test]
    fn transient_errors_pause_with_backoff_bounded_by_the_deadline() {
        let mut outage = Outage::new();
        let mut total = Duration::ZERO;
        for _ in 0..20 {
            let pause = outage.next(refused(), None).unwrap();
            assert!(pause <= MAX_PAUSE, "{pause:?}");
            total += pause;
        }
        // 10 ms doubling to 500 ms, each pause in the upper half of its
        // step: 20 pauses take at least the ramp's halves plus 13 × 250 ms.
        assert!(total >= Duration::from_millis(3_400), "{total:?}");
        assert_eq!(outage.failed(), 20);
        let near = Instant::now() + Duration::from_millis(30);
        let pause = outage.next(refused(), Some(near)).unwrap();
        assert!(pause <= Duration::from_millis(30), "{pause:?}");
        outage.reset();
        assert_eq!(outage.failed(), 0);
        let pause = outage.next(refused(), None).unwrap();
        assert!(pause <= backoff::FIRST, "{pause:?}");
    }

    #[test]
    fn a_deadline_that_passed_names_the_last_failure() {
        let mut outage = Outage::new();
        // The first failure with no time left is the answer as it is.
        let first = outage.next(refused(), Some(Instant::now())).unwrap_err();
        assert!(first.is_connection(), "{first:?}");
        let mut outage = Outage::new();
        let far = Instant::now() + Duration::from_secs(60);
        outage.next(refused(), Some(far)).unwrap();
        let last = match redis::parse_redis_value(b"-LOADING Redis is loading the dataset\r\n") {
            Ok(redis::Value::ServerError(e)) => Error::redis(redis::RedisError::from(e)),
            other => panic!("not an error: {other:?}"),
        };
        assert!(last.is_transient(), "{last:?}");
        let err = outage.next(last, Some(Instant::now())).unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("2 attempts"), "{text}");
        assert!(text.contains("LOADING"), "{text}");
    }
}
