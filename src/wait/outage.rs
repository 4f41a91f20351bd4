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
//! The pauses are [`Backoff::waiting_call`], the watchdog's too: from 10 ms,
//! doubling with jitter up to half a second, so that a server that stays down sees two or three attempts a
//! second from each waiting thread, and waiters that met the same outage do
//! not come back in step.
//!
//! The call's deadline also bounds what one attempt spends inside the
//! connection layer, which rides out a failover on its own for a call made
//! outside a wait (a Sentinel master rediscovered, a Cluster slot
//! retried, within the connect timeout). While an [`Outage`] lives, its
//! thread is in a waiting call, which sets its connection budget
//! (`connection::budget`): the first attempt's own retries end at the
//! deadline, and once an attempt has failed, the next ones make a single
//! try each (the waiting call pauses between them, with its backoff) and
//! connect and set up within what is left of the deadline.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::connection::budget::{self, Call};
use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::retry::{self, Backoff};

/// The failures of one waiting call since its last answered attempt. While
/// it lives, its thread is in that waiting call (see the module docs); it
/// stays on the thread that made it.
#[derive(Debug)]
pub(crate) struct Outage {
    backoff: Backoff,
    /// Failed attempts in a row.
    failed: u32,
    /// When the first of them started: the call's start, or the last
    /// answer (the first failure may have taken a connect timeout).
    since: Instant,
    /// The call's deadline; `None`: none.
    deadline: Option<Instant>,
    /// The thread's call before this one (a multi-lock's wait around one
    /// member's), put back on drop.
    outer: Call,
    _this_thread: PhantomData<*const ()>,
}

impl Outage {
    /// The outage state of a waiting call that ends at `deadline` (`None`:
    /// never), on this thread.
    pub(crate) fn new(deadline: Option<Instant>) -> Outage {
        let outer = budget::set_call(call_of(deadline));
        Outage {
            backoff: Backoff::waiting_call(),
            failed: 0,
            since: Instant::now(),
            deadline,
            outer,
            _this_thread: PhantomData,
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
        self.since = Instant::now();
        budget::set_call(call_of(self.deadline));
    }

    /// After an attempt that failed with `err`: the pause before the next
    /// attempt (never past the call's deadline), or the error
    /// that ends the call. That is `err` itself when retrying cannot fix it,
    /// or when it is the call's first failure and no time is left (a
    /// `try_lock` reports its one error as it is); an [`Error::Timeout`]
    /// naming `err` when the deadline passed after earlier failures.
    pub(crate) fn next(&mut self, err: Error) -> Result<Duration> {
        if !err.is_transient() {
            return Err(err);
        }
        let deadline = self.deadline;
        budget::set_call(Call::Retrying(deadline));
        let now = Instant::now();
        let since = self.since;
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

/// Runs `op`, and runs it again after a pause while it fails with an error
/// that retrying can fix ([`Error::is_transient`]: a refused or broken
/// connection, a timeout, `LOADING`, `READONLY`, `MASTERDOWN`,
/// `TRYAGAIN`, `CLUSTERDOWN`, `BUSY`, `NOREPLICAS`), until `deadline`
/// (`None`: for as long as the outage lasts). This is how the library's
/// own waits (`lock`, `try_lock_for`, `acquire`, `wait`) ride out a Redis
/// restart, a freeze or a failover; use it for a call that must do the same,
/// such as a read before a wait.
///
/// The pauses start at 10 ms and double, with jitter, up to 500 ms: a
/// server that stays down sees two or three attempts a second from the
/// thread. `deadline` also bounds the time one attempt spends
/// reconnecting: once an attempt has failed, the next connect within it
/// is cut to what is left (at least 10 ms), and a Sentinel master or a
/// Cluster slot is looked up once per attempt rather than retried within
/// it. A first attempt keeps its full connect timeout
/// ([`Builder::connect_timeout`](crate::Builder::connect_timeout)), so
/// the call can end up to that much after `deadline` when Redis stops
/// answering just then.
///
/// # Errors
///
/// `op`'s first error that retrying cannot fix, at once. At `deadline`:
/// the failure as it is when it was the only attempt, otherwise
/// [`Error::Timeout`] of kind [`TimeoutKind::Wait`](crate::TimeoutKind::Wait)
/// naming the attempts, how long Redis was unavailable and the last error.
///
/// # Panics
///
/// Never by itself; a panic in `op` unwinds through it.
pub fn retry_until<T>(deadline: Option<Instant>, mut op: impl FnMut() -> Result<T>) -> Result<T> {
    let mut outage = Outage::new(deadline);
    // Bounded by the deadline; without one, by the outage (every failed
    // attempt is followed by a pause of at least 5 ms).
    loop {
        match op() {
            Ok(value) => return Ok(value),
            Err(e) => {
                let pause = outage.next(e)?;
                retry::pause_until(Instant::now() + pause);
            }
        }
    }
}

/// The call a waiting call that ends at `deadline` makes on its thread: one
/// whose deadline has come already (`try_lock`, a zero wait) waits for
/// nothing, and is answered in its one attempt (see `budget::Call::Trying`).
fn call_of(deadline: Option<Instant>) -> Call {
    match deadline {
        Some(at) if at <= Instant::now() => Call::Trying,
        deadline => Call::Waiting(deadline),
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        budget::set_call(self.outer);
    }
}

/// The error of a wait whose deadline passed while Redis could not answer:
/// a timeout naming the attempts, how long they failed, and the last error.
fn gave_up(last: &Error, failed: u32, over: Duration) -> Error {
    let over = Duration::from_millis(u64::try_from(over.as_millis()).unwrap_or(u64::MAX));
    // Redis answers while a Cluster slot moves; it only will not serve
    // the call until the keys are on one node.
    let why = if last.redirect().is_some_and(|r| r.slot_moving()) {
        "the key's Cluster slot was moving"
    } else {
        "Redis was unavailable"
    };
    Error::Timeout {
        kind: crate::error::TimeoutKind::Wait,
        limit: over,
        server: None,
        about: Some(format!(
            "{why} ({failed} attempts over {} failed; the last: {})",
            Human(over),
            last.chain()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::budget::{inner_budget, setup_timeout};

    const LEAST_STEP: Duration = Duration::from_millis(10);

    fn refused() -> Error {
        Error::io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ))
    }

    #[test]
    fn errors_retrying_cannot_fix_end_the_wait_at_once() {
        let mut outage = Outage::new(Some(Instant::now() + Duration::from_secs(60)));
        for err in [
            Error::invalid("bad"),
            Error::Shutdown,
            Error::WrongType { key: "k".into() },
            Error::Protocol("garbage".into()),
        ] {
            assert!(outage.next(err).is_err());
            assert!(outage.next(Error::Shutdown).is_err());
        }
        assert_eq!(outage.failed(), 0);
    }

    #[test]
    fn transient_errors_pause_with_backoff_bounded_by_the_deadline() {
        let mut outage = Outage::new(None);
        let mut total = Duration::ZERO;
        for _ in 0..20 {
            let pause = outage.next(refused()).unwrap();
            assert!(pause <= retry::MAX_PAUSE, "{pause:?}");
            total += pause;
        }
        // 10 ms doubling to 500 ms, each pause in the upper half of its
        // step: 20 pauses take at least the ramp's halves plus 13 × 250 ms.
        assert!(total >= Duration::from_millis(3_400), "{total:?}");
        assert_eq!(outage.failed(), 20);
        outage.reset();
        assert_eq!(outage.failed(), 0);
        let pause = outage.next(refused()).unwrap();
        assert!(pause <= retry::FIRST, "{pause:?}");
        drop(outage);
        let mut outage = Outage::new(Some(Instant::now() + Duration::from_millis(30)));
        for _ in 0..5 {
            outage.next(refused()).unwrap();
        }
        let pause = outage.next(refused()).unwrap();
        assert!(pause <= Duration::from_millis(30), "{pause:?}");
    }

    #[test]
    fn a_deadline_that_passed_names_the_last_failure() {
        let outage = || Outage::new(Some(Instant::now() + Duration::from_millis(50)));
        // The first failure with no time left is the answer as it is.
        let mut first_only = Outage::new(Some(Instant::now()));
        let first = first_only.next(refused()).unwrap_err();
        assert!(first.is_connection(), "{first:?}");
        drop(first_only);
        let mut outage = outage();
        outage.next(refused()).unwrap();
        retry::pause_until(Instant::now() + Duration::from_millis(60));
        let last = match redis::parse_redis_value(b"-LOADING Redis is loading the dataset\r\n") {
            Ok(redis::Value::ServerError(e)) => Error::redis(redis::RedisError::from(e)),
            other => panic!("not an error: {other:?}"),
        };
        assert!(last.is_transient(), "{last:?}");
        let err = outage.next(last).unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("2 attempts"), "{text}");
        assert!(text.contains("LOADING"), "{text}");
    }

    #[test]
    fn a_slot_that_moves_is_waited_for_by_calls_that_wait_for_nothing() {
        use crate::connection::budget::{Call, moving_budget, set_call, within};
        let (moving, full) = (Duration::from_secs(30), Duration::from_secs(2));
        assert_eq!(moving_budget(moving, full), moving, "no waiting call");
        {
            // A try (its deadline is now): no retries of its own, but the
            // slot is waited for, up to the lease.
            let _try = Outage::new(Some(Instant::now()));
            assert_eq!(inner_budget(full), Duration::ZERO);
            assert_eq!(moving_budget(moving, full), moving);
        }
        {
            // A wait: until its deadline, not longer.
            let mut wait = Outage::new(Some(Instant::now() + Duration::from_secs(1)));
            let budget = moving_budget(moving, full);
            assert!(budget <= Duration::from_secs(1) && budget > Duration::from_millis(500));
            wait.next(refused()).unwrap();
            assert_eq!(moving_budget(moving, full), Duration::ZERO, "it retries");
        }
        {
            let _forever = Outage::new(None);
            assert_eq!(moving_budget(moving, full), moving);
        }
        // A release: until its lease ends.
        let lease_end = Instant::now() + Duration::from_secs(3);
        let inside = within(lease_end, || moving_budget(moving, full));
        assert!(inside <= Duration::from_secs(3) && inside > Duration::from_secs(2));
        assert_eq!(moving_budget(moving, full), moving, "restored");
        // A background thread: no longer than any other retry.
        let outer = set_call(Call::Background);
        assert_eq!(moving_budget(moving, full), full);
        assert_eq!(inner_budget(full), full);
        set_call(outer);
    }

    #[test]
    fn a_wait_that_ran_out_on_a_moving_slot_says_so() {
        let tryagain = match redis::parse_redis_value(
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
        ) {
            Ok(redis::Value::ServerError(e)) => Error::redis(redis::RedisError::from(e)),
            other => panic!("not an error: {other:?}"),
        };
        let text = gave_up(&tryagain, 3, Duration::from_secs(2)).to_string();
        assert!(text.contains("slot was moving"), "{text}");
        assert!(text.contains("TRYAGAIN"), "{text}");
        let text = gave_up(&refused(), 3, Duration::from_secs(2)).to_string();
        assert!(text.contains("unavailable"), "{text}");
    }

    #[test]
    fn a_waiting_call_bounds_the_connection_layers_own_retries() {
        let full = Duration::from_secs(3);
        assert_eq!(inner_budget(full), full, "no waiting call");
        assert_eq!(setup_timeout(full), full);
        {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut outage = Outage::new(Some(deadline));
            // The first attempt: its own retries end at the deadline, its
            // connect keeps the full timeout.
            let budget = inner_budget(full);
            assert!(budget <= Duration::from_secs(1) && budget > Duration::from_millis(500));
            assert_eq!(setup_timeout(full), full);
            outage.next(refused()).unwrap();
            // Retrying: one try per attempt, connects within the deadline.
            assert_eq!(inner_budget(full), Duration::ZERO);
            let step = setup_timeout(full);
            assert!(
                step <= Duration::from_secs(1) && step >= LEAST_STEP,
                "{step:?}"
            );
            {
                // A wait inside it (a multi-lock's member) has its own state,
                // and gives the outer one back when it ends.
                let _inner = Outage::new(None);
                assert_eq!(inner_budget(full), full);
            }
            assert_eq!(inner_budget(full), Duration::ZERO);
            outage.reset();
            assert!(inner_budget(full) > Duration::ZERO, "answered again");
            outage.next(refused()).unwrap();
        }
        assert_eq!(inner_budget(full), full, "the call ended");
        assert_eq!(setup_timeout(full), full);
        // A retry past its deadline still gets the least step.
        let mut late = Outage::new(Some(Instant::now() + Duration::from_millis(40)));
        late.next(refused()).unwrap();
        retry::pause_until(Instant::now() + Duration::from_millis(50));
        assert_eq!(setup_timeout(full), LEAST_STEP);
    }
}
