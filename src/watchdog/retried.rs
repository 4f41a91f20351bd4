//! Operations on a held lease that must not be lost to a failover: a
//! release (of a lock, a permit, a run-once claim), an `extend`, a run-once
//! completion. One that fails because the master is gone or changing
//! ([`Error::is_failover`]) is handed to the watchdog, whose worker for the
//! key's server tries it again, after a pause that grows with each failed
//! round, until it succeeds, fails for another reason, or the lease is over
//! (the key has then expired on its own).
//!
//! Each operation must be safe to run again after a round whose reply was
//! lost: releases drop every hold of the holder, permit releases name the
//! permit, extensions set the lease again, and a completion that finds the
//! key no longer held looks for its own record.
//!
//! Whoever waits for the outcome holds a [`Handle`]: `extend` and
//! `complete` wait for it (bounded by the lease), releases do not. Every
//! operation counts as pending for its client until it ends:
//! [`Client::await_releases`](crate::Client::await_releases) waits for
//! that, and a thread that takes the lock again first waits for its own
//! release (see `lock::holds`).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::connection::Source;
use crate::error::{Error, Result};
use crate::lease::Counters;

/// One operation to retry. Dropped unfinished (its worker gone), it ends
/// with the last error it met.
pub(crate) struct Retry {
    /// What it is, for logs: `release of lock "x"`.
    pub(super) what: String,
    pub(super) key: Arc<[u8]>,
    pub(super) source: Arc<Source>,
    /// The lease it belongs to, whose sixth bounds the pause between rounds
    /// (with [`MAX_PAUSE`]).
    pub(super) lease: Duration,
    /// When the lease is over: the operation is given up then.
    pub(super) until: Instant,
    op: Box<dyn FnMut() -> Result<()> + Send>,
    /// The last error met (the first is the one that made it a retry).
    last: Option<Error>,
    done: Arc<Done>,
}

impl std::fmt::Debug for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retry")
            .field("what", &self.what)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

/// What one attempt of a [`Retry`] came to.
pub(super) enum Step {
    /// Over (succeeded, failed for good, or the lease ended).
    Finished,
    /// Failed because of a failover: try again next round. `unreachable`
    /// when the server could not be reached at all (the rest of the round
    /// would only fail the same way).
    Again { unreachable: bool },
}

impl Retry {
    /// Runs the operation once.
    pub(super) fn attempt(&mut self, now: Instant) -> Step {
        if now >= self.until {
            self.give_up();
            return Step::Finished;
        }
        match (self.op)() {
            Ok(()) => {
                log::debug!("redguard: {} went through on a retry", self.what);
                self.done.finish(Ok(()));
                Step::Finished
            }
            Err(e) if e.is_failover() && Instant::now() < self.until => {
                log::debug!(
                    "redguard: {} failed again ({e}); retrying",
                    self.what,
                    e = e.chain()
                );
                let unreachable = e.is_connection();
                self.last = Some(e);
                Step::Again { unreachable }
            }
            Err(e) => {
                log::warn!("redguard: {} failed: {e}", self.what, e = e.chain());
                self.done.finish(Err(e));
                Step::Finished
            }
        }
    }

    /// Ends it because its lease is over: the key expired by itself.
    pub(super) fn give_up(&mut self) {
        let err = self.last.take().unwrap_or(Error::Shutdown);
        log::warn!(
            "redguard: {} gave up: its lease ran out while the server could not be reached \
             (last error: {err}); the key expired by itself",
            self.what,
            err = err.chain()
        );
        self.done.finish(Err(err));
    }
}

impl Drop for Retry {
    fn drop(&mut self) {
        if !self.done.is_finished() {
            let err = self.last.take().unwrap_or(Error::Shutdown);
            self.done.finish(Err(err));
        }
    }
}

/// The outcome of a [`Retry`], once it ends; it counts as pending for its
/// client until then.
struct Done {
    outcome: Mutex<Option<Result<()>>>,
    finished: std::sync::atomic::AtomicBool,
    ended: Condvar,
    counters: Arc<Counters>,
}

impl Done {
    fn outcome(&self) -> MutexGuard<'_, Option<Result<()>>> {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_finished(&self) -> bool {
        self.finished.load(std::sync::atomic::Ordering::Acquire)
    }

    fn finish(&self, outcome: Result<()>) {
        {
            let mut slot = self.outcome();
            if self
                .finished
                .swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                return;
            }
            // Not pending any more before anyone waiting for it wakes.
            if outcome.is_err() {
                self.counters
                    .failed_retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.counters.retries.end();
            *slot = Some(outcome);
        }
        self.ended.notify_all();
    }
}

/// A waiter's hold on a retried operation.
#[derive(Clone)]
pub(crate) struct Handle(Arc<Done>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl Handle {
    /// `true` once the operation ended, whatever its outcome.
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Waits until the operation ends or `deadline` (`None`: no bound, the
    /// operation's own lease bounds it) passes. `true` when it ended.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> bool {
        let mut slot = self.0.outcome();
        // Bounded: each turn waits until the deadline, or returns.
        loop {
            if self.is_finished() {
                return true;
            }
            match deadline {
                None => {
                    slot = self
                        .0
                        .ended
                        .wait(slot)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    slot = self
                        .0
                        .ended
                        .wait_timeout(slot, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    /// The outcome, once ended (taken: a second call gets `None`).
    pub(crate) fn take_outcome(&self) -> Option<Result<()>> {
        self.0.outcome().take()
    }

    /// What an explicit release (`LockGuard::unlock`,
    /// `PermitGuard::release`) handed to this retry reports: its outcome
    /// when it ends within `response`, else [`Error::ReleasePending`] for
    /// `name`, whose lease is valid until `until`, with `cause`, the
    /// failure that made it a retry.
    pub(crate) fn confirm(
        &self,
        response: Duration,
        name: &[u8],
        until: Instant,
        cause: String,
    ) -> Result<()> {
        if self.wait_until(Some(Instant::now() + response)) {
            return self.take_outcome().unwrap_or(Ok(()));
        }
        Err(Error::ReleasePending {
            name: String::from_utf8_lossy(name).into_owned(),
            left: until.saturating_duration_since(Instant::now()),
            cause,
        })
    }
}

/// Hands `op`, which just failed with `err` (a failover error) on a lease
/// of `lease` valid until `until`, to the watchdog to be retried, and
/// returns a handle on its outcome. `what` names it in logs. An operation
/// whose lease is over already ends at once with `err`.
#[allow(
    clippy::too_many_arguments,
    reason = "the parts of one operation, each needed by the worker"
)]
pub(crate) fn submit(
    what: String,
    key: Arc<[u8]>,
    source: Arc<Source>,
    counters: &Arc<Counters>,
    lease: Duration,
    until: Instant,
    err: Error,
    op: impl FnMut() -> Result<()> + Send + 'static,
) -> Handle {
    counters.retries.begin();
    let done = Arc::new(Done {
        outcome: Mutex::new(None),
        finished: std::sync::atomic::AtomicBool::new(false),
        ended: Condvar::new(),
        counters: counters.clone(),
    });
    let handle = Handle(done.clone());
    log::info!(
        "redguard: {what} failed ({err}); retrying it until it goes through or the lease ends",
        err = err.chain()
    );
    let retry = Retry {
        what,
        key,
        source,
        lease,
        until,
        op: Box::new(op),
        last: Some(err),
        done,
    };
    if Instant::now() >= until {
        let mut retry = retry;
        retry.give_up();
        return handle;
    }
    // Dropped (and so ended with its error) when the watchdog cannot take it.
    super::retry(retry);
    handle
}
