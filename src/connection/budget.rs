//! What one call may spend inside the connection layer, set by the waiting
//! call on this thread, if any (`wait::outage`).
//!
//! The connection layer rides out a failover on its own for a call made
//! outside a wait: a Sentinel master rediscovered, a Cluster slot retried,
//! within the connect timeout. A waiting call (`lock()`, `try_lock_for`,
//! `acquire`, a latch's `wait`) has a deadline of its own and pauses
//! between its attempts with its own backoff: while it lives, the first
//! attempt's inner retries end at its deadline, and once an attempt has
//! failed, the next ones make a single try each and connect and set up
//! within what is left of the deadline. Without this a `--wait 3s` on a
//! Sentinel whose master was down took 6 s: two attempts of one connect
//! timeout each, re-asking the sentinel every 10 to 100 ms.
//!
//! Thread-local: a call's budget is its thread's.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// What the waiting call on this thread, if any, allows one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// No waiting call: the connection layer's own budgets.
    Plain,
    /// A call that waits for nothing (`try_lock`, a `try_acquire`): one
    /// attempt, no retries of its own, but a slot that moves is waited for
    /// (see [`moving_budget`]): a busy or free answer is what it asks for,
    /// and Redis gives none while the slot's keys are split.
    Trying,
    /// A background thread (the watchdog's, the subscriber's), which
    /// retries by itself on its own schedule and must not stall every
    /// lease it serves on one slot that moves.
    Background,
    /// A waiting call whose attempts were answered so far, until its
    /// deadline (`None`: none).
    Waiting(Option<Instant>),
    /// A waiting call whose last attempt failed: it retries by itself.
    Retrying(Option<Instant>),
}

thread_local! {
    static CALL: Cell<Call> = const { Cell::new(Call::Plain) };
}

/// The least time a connect or a set-up step is given once a waiting call
/// retries: less fails even on a healthy loopback server.
const LEAST_STEP: Duration = Duration::from_millis(10);

/// Sets this thread's call to `call`; returns the one it replaces (to be
/// put back when the waiting call ends: a multi-lock's wait around one
/// member's).
pub(crate) fn set_call(call: Call) -> Call {
    CALL.with(|c| c.replace(call))
}

/// How long the connection layer may go on retrying one call by itself
/// (rediscovering a Sentinel master, waiting out a Cluster slot's move),
/// from its `full` budget: all of it outside a waiting call; what is left
/// of the deadline in a waiting call's attempt; nothing once the waiting
/// call has met a failure, as it then pauses and retries by itself.
pub(crate) fn inner_budget(full: Duration) -> Duration {
    match CALL.with(Cell::get) {
        Call::Plain | Call::Background | Call::Waiting(None) => full,
        Call::Waiting(Some(deadline)) => {
            full.min(deadline.saturating_duration_since(Instant::now()))
        }
        Call::Trying | Call::Retrying(_) => Duration::ZERO,
    }
}

/// Runs `f` as a call that must be answered by `deadline` (a release, by
/// the end of its lease: one that goes through later is worth nothing, as
/// the key expired by then), whatever call this thread was in; that call
/// is its own again afterwards.
pub(crate) fn within<T>(deadline: Instant, f: impl FnOnce() -> T) -> T {
    struct Restore(Call);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_call(self.0);
        }
    }
    let _restore = Restore(set_call(Call::Waiting(Some(deadline))));
    f()
}

/// How long the connection layer may go on waiting for a Cluster slot that
/// moves (`TRYAGAIN`, or `ASK` and `MOVED` without end) for one call:
/// `moving` (a lease: a slot still half-moved after that is stuck, and the
/// locks in it could not be released in time anyway) outside a waiting
/// call and for a call that waits for nothing; what is left of the
/// deadline in a waiting call's attempt; `full` (the budget of any other
/// retry) on a background thread; nothing once a waiting call has met a
/// failure, as it then pauses and retries by itself.
pub(crate) fn moving_budget(moving: Duration, full: Duration) -> Duration {
    match CALL.with(Cell::get) {
        Call::Plain | Call::Trying | Call::Waiting(None) => moving,
        Call::Background => full,
        Call::Waiting(Some(deadline)) => {
            moving.min(deadline.saturating_duration_since(Instant::now()))
        }
        Call::Retrying(_) => Duration::ZERO,
    }
}

/// The timeout of one connect or connection set-up step, from its `full`
/// timeout: cut to what is left of the deadline (never under 10 ms) once
/// the waiting call on this thread has met a failure. A first attempt
/// keeps the full timeout, so that a `try_lock` on a loaded machine still
/// connects; set-up commands (`AUTH`, `SELECT`, `ROLE`) change nothing, so
/// cutting them short loses nothing.
pub(crate) fn setup_timeout(full: Duration) -> Duration {
    match CALL.with(Cell::get) {
        Call::Retrying(Some(deadline)) => full
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(LEAST_STEP.min(full)),
        _ => full,
    }
}
