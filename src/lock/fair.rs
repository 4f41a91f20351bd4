//! The fair kind of [`Lock`] (Redisson's `RFairLock`): a waiter's seat in
//! the server's queue, and the wait that keeps it.

use std::sync::Arc;
use std::time::Instant;

use crate::error::Result;
use crate::keys;
use crate::lock::Lock;
use crate::scripts;
use crate::wait::{Attempt, Wake, wait_loop};

/// A queued fair-lock waiter's place. Dropped on every way out of the wait
/// (timeout, error, shutdown, panic) while still armed, it takes the waiter
/// out of the queue and the deadline set; a grant disarms it, because the
/// acquire script already removed the waiter.
struct QueueSeat<'a> {
    lock: &'a Lock,
    holder: &'a str,
    armed: bool,
}

impl Drop for QueueSeat<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (Some(keys), Some(wait)) = (self.lock.fair_keys(), self.lock.fair_wait_timeout())
        else {
            return;
        };
        // The same wait the attempts passed, so that what its joining added
        // to the deadlines behind it comes off again.
        let Ok(wait_ms) = crate::lease::lease_ms(wait) else {
            return;
        };
        let left = self
            .lock
            .inner
            .client
            .with_conn(&self.lock.inner.name, |conn| {
                scripts::fair_leave(
                    conn,
                    self.lock.inner.client.publish(&self.lock.inner.name),
                    keys,
                    self.holder,
                    wait_ms,
                )
            });
        if let Err(e) = left {
            log::warn!(
                "redguard: could not leave the queue of fair lock {:?} as {}: {e}; \
                 the entry is pruned once it heads the queue past its deadline",
                String::from_utf8_lossy(&self.lock.inner.name),
                self.holder,
                e = e.chain()
            );
        }
    }
}

impl Lock {
    /// The wait of a fair waiter: `attempt(enqueue)` until granted or the
    /// deadline passes. The waiter is woken on its own channel, by the
    /// release that makes it the one to go next; the server's queue orders
    /// the waiters, so there is no local queue.
    pub(super) fn wait_fair<T>(
        &self,
        holder: &Arc<str>,
        deadline: Option<Instant>,
        mut attempt: impl FnMut(bool) -> Result<Attempt<T>>,
    ) -> Result<Option<T>> {
        let channel = keys::fair_channel(&self.inner.name, holder);
        let mut seat = QueueSeat {
            lock: self,
            holder,
            armed: false,
        };
        let what = (&self.inner.name[..], self.hold_kind().as_str());
        wait_loop(
            &self.inner.client,
            &channel,
            what,
            deadline,
            Wake::One,
            || {
                // Once the deadline has passed this is the last attempt: do not
                // join the queue only to leave it again.
                let enqueue = deadline.is_none_or(|d| Instant::now() < d);
                seat.armed |= enqueue;
                let outcome = attempt(enqueue);
                if let Ok(Attempt::Acquired(_)) = &outcome {
                    seat.armed = false;
                }
                outcome
            },
        )
    }
}
