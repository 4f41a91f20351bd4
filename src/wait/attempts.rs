//! The one wait loop of every kind: a lock's, a read or write hold's, a
//! fair lock's, a permit's, a run-once claim's and a latch's wait all run
//! [`wait_loop`], which attempts, registers with the subscriber when busy,
//! sleeps until a wake-up, the busy hint, the poll interval or the
//! deadline, and rides out an outage ([`Outage`]).

use std::time::{Duration, Instant};

use super::{Outage, WaitEntry};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::subscriber::Event;

/// The outcome of one acquisition attempt inside the wait loop.
pub(crate) enum Attempt<T> {
    /// Acquired: stop waiting.
    Acquired(T),
    /// Busy: wait at most this long (the holder's remaining ttl; `None`
    /// when unknown or without expiry) before the next attempt.
    Busy(Option<Duration>),
    /// Failed with an outcome that is unknown and cannot be undone (a
    /// semaphore's permits taken by a script whose reply was lost): the
    /// wait ends with this error, as another attempt might take them twice.
    Unknown(Error),
}

/// How a waiter is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// By an unlock message on its channel, one waiter of the client at a
    /// time (a lock, a permit).
    One,
    /// As [`Wake::One`]; and a caller that finds other threads of its
    /// client already waiting on the channel joins the back of their queue
    /// and waits for its wake-up before its first attempt, instead of
    /// barging in ahead of the waiter an unlock message just woke. Within
    /// one client, waiters are thus served in arrival order, and a thread
    /// that releases and at once locks again lets the waiters have their
    /// turn. Its first wait is bounded by the poll interval like every
    /// other.
    OneInTurn,
    /// Every waiter on the channel at once (a latch that opened).
    All,
}

/// The wait loop shared by every kind: attempt; when busy, register on
/// `channel` (confirmed before the next attempt, so no unlock published
/// after it is missed), then alternate attempts and waits of at most
/// min(busy hint, poll interval, time left).
///
/// An attempt that fails with an error retrying can fix (a restart, a
/// freeze, a failover: [`Error::is_transient`]) is tried again after the
/// watchdog's retry pause ([`Outage`]) until `deadline` (`None`: for as
/// long as it takes), so a waiter rides out what a holder rides out;
/// any other error ends the wait at once. While attempts fail, no
/// subscription is waited for (the pub/sub connection is down as well):
/// a registered waiter sleeps out the pause, and is woken early when the
/// subscriber reconnects. A grant whose reply was lost was undone before
/// the attempt returned its error (see `Lock::settle`); one that could
/// not be undone is this holder's, and the next attempt re-enters it
/// (its extra hold is dropped by the guard's release).
///
/// `what` names the wait for the client's holder record: the name waited
/// for and its kind (see [`crate::RecordedWait::kind`]).
///
/// `wake` says how the waiter is woken (see [`Wake`]).
pub(crate) fn wait_loop<T>(
    client: &Client,
    channel: &[u8],
    what: (&[u8], &'static str),
    deadline: Option<Instant>,
    wake: Wake,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    // Recorded from the first busy attempt on, deleted when this returns
    // (or unwinds), whatever the end.
    let mut entry = WaitEntry::new(client, what.0, what.1);
    let poll = client.config().poll_interval;
    let response_timeout = client.config().response_timeout;
    let mut waiter = None;
    let mut outage = Outage::new(deadline);
    if wake == Wake::OneInTurn
        && let Some(sub) = client.running_subscriber()
    {
        let now = Instant::now();
        let left = deadline.map(|d| d.saturating_duration_since(now));
        if left.is_none_or(|l| !l.is_zero()) {
            let confirm_wait = left.map_or(response_timeout, |l| l.min(response_timeout));
            if let Some(w) = sub.waiter_behind(channel, confirm_wait) {
                let turn = left.map_or(poll, |l| l.min(poll));
                if w.wait(turn) == Some(Event::Shutdown) {
                    return Err(Error::Shutdown);
                }
                client.check_open()?;
                waiter = Some(w);
            }
        }
    }
    loop {
        let hint = match attempt() {
            Ok(Attempt::Acquired(granted)) => return Ok(Some(granted)),
            Ok(Attempt::Busy(hint)) => {
                outage.reset();
                entry.busy();
                hint
            }
            Ok(Attempt::Unknown(e)) => return Err(e),
            Err(e) => {
                let pause = outage.next(e)?;
                match &waiter {
                    Some(w) => {
                        if w.wait(pause) == Some(Event::Shutdown) {
                            return Err(Error::Shutdown);
                        }
                    }
                    None => crate::retry::pause_until(Instant::now() + pause),
                }
                client.check_open()?;
                continue;
            }
        };
        let now = Instant::now();
        let left = match deadline {
            Some(deadline) if deadline <= now => return Ok(None),
            Some(deadline) => Some(deadline - now),
            None => None,
        };
        if waiter.is_none()
            && let Some(sub) = client.subscriber()
        {
            let confirm_wait = left.map_or(response_timeout, |l| l.min(response_timeout));
            waiter = Some(match wake {
                Wake::All => sub.waiter_all(channel, confirm_wait),
                Wake::One | Wake::OneInTurn => sub.waiter(channel, confirm_wait),
            });
            client.check_open()?;
            // Attempt again now that an unlock cannot go unnoticed.
            continue;
        }
        let mut sleep = poll;
        if let Some(hint) = hint {
            sleep = sleep.min(hint);
        }
        if let Some(left) = left {
            sleep = sleep.min(left);
        }
        match &waiter {
            Some(w) => {
                if w.wait(sleep) == Some(Event::Shutdown) {
                    return Err(Error::Shutdown);
                }
            }
            None => std::thread::park_timeout(sleep),
        }
        client.check_open()?;
    }
}
