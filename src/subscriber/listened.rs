//! The holds a client listens for: held locks whose unlock channel the
//! subscriber keeps subscribed, so that a force unlock (redguard's
//! `unlock --force`, Redisson's `forceUnlock`, which both delete the lock
//! and publish on its channel) is heard at once instead of at the next
//! renewal. Pure: no threads, no Redis.
//!
//! A hold is listened for only once it has lasted [`LISTEN_AFTER`]: a
//! short critical section (the common lock/unlock cycle) never costs a
//! `SUBSCRIBE`, nor anything on the acquiring thread. The watchdog, which
//! takes every new hold anyway, hands over those that lasted that long
//! ([`super::Listener`]). A message on a listened channel asks the
//! watchdog to check the live holds there with one round trip (see
//! the watchdog's check, handed in as
//! [`Reactions::verify`](super::Reactions::verify)): a message does not prove a loss, since a
//! read-write lock's channel also carries the releases of other holds.
//!
//! Ended holds are swept out every [`SWEEP_EVERY`], and their channels
//! unsubscribed when nothing else wants them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lease::LeaseState;

pub(crate) use crate::lease::LISTEN_AFTER;

/// How often the listened holds are looked over for ended ones.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Most holds a client listens for at once. Past it, a hold's force unlock
/// is noticed at its next renewal (a third of the lease), as before
/// holders listened: a process with this many long holds is a batch
/// holder, not one whose commands must stop within milliseconds, and each
/// listened hold costs a map entry here (about 45 bytes, which would take
/// W1, 100,000 held locks, past its 512 bytes a lock) and a subscription on
/// the server.
pub(crate) const MAX_LISTENED: usize = 10_000;

/// The listened holds, by channel. Most channels have one hold; the few
/// with more (several threads holding one read lock) keep the rest in
/// `more`, so that the common case costs one map entry and no vector.
#[derive(Default)]
pub(crate) struct Listened {
    one: HashMap<Arc<[u8]>, Arc<LeaseState>>,
    more: Vec<(Arc<[u8]>, Arc<LeaseState>)>,
    /// Channels newly listened for, to `SUBSCRIBE`.
    to_subscribe: Vec<Arc<[u8]>>,
    /// Channels whose last hold ended, to `UNSUBSCRIBE` unless waiters
    /// want them.
    to_unsubscribe: Vec<Arc<[u8]>>,
    next_sweep: Option<Instant>,
}

impl Listened {
    /// Listens for `state` on `channel`.
    /// Past [`MAX_LISTENED`] holds, does nothing.
    pub(crate) fn add(&mut self, channel: Arc<[u8]>, state: Arc<LeaseState>, now: Instant) {
        if self.len() >= MAX_LISTENED {
            return;
        }
        if self.one.contains_key(&channel) {
            self.more.push((channel, state));
        } else {
            self.to_subscribe.push(channel.clone());
            self.one.insert(channel, state);
        }
        self.next_sweep.get_or_insert(now + SWEEP_EVERY);
    }

    /// `true` when a hold listens on `channel`.
    pub(crate) fn listens(&self, channel: &[u8]) -> bool {
        self.one.contains_key(channel)
    }

    /// The live holds on `channel`.
    pub(crate) fn live_on(&self, channel: &[u8]) -> Vec<Arc<LeaseState>> {
        let Some(first) = self.one.get(channel) else {
            return Vec::new();
        };
        std::iter::once(first)
            .chain(
                self.more
                    .iter()
                    .filter(|(c, _)| &c[..] == channel)
                    .map(|(_, s)| s),
            )
            .filter(|s| !s.is_over())
            .cloned()
            .collect()
    }

    /// Queues every listened channel for `SUBSCRIBE` (a new connection).
    pub(crate) fn resubscribe_all(&mut self) {
        self.to_subscribe = self.one.keys().cloned().collect();
    }

    /// Takes at most `max` channels to subscribe.
    pub(crate) fn take_subscribes(&mut self, max: usize) -> Vec<Arc<[u8]>> {
        take_last(&mut self.to_subscribe, max)
    }

    /// Takes at most `max` channels to unsubscribe.
    pub(crate) fn take_unsubscribes(&mut self, max: usize) -> Vec<Arc<[u8]>> {
        take_last(&mut self.to_unsubscribe, max)
    }

    /// Drops the ended holds when a sweep is due at `now`; channels left
    /// without a hold are queued for `UNSUBSCRIBE`.
    pub(crate) fn sweep(&mut self, now: Instant) {
        if self.next_sweep.is_none_or(|at| at > now) {
            return;
        }
        self.more.retain(|(_, s)| !s.is_over());
        let mut emptied = Vec::new();
        for (channel, state) in self.one.iter_mut() {
            if !state.is_over() {
                continue;
            }
            // A live hold of the same channel from `more` takes its place.
            match self.more.iter().position(|(c, _)| c == channel) {
                Some(i) => *state = self.more.swap_remove(i).1,
                None => emptied.push(channel.clone()),
            }
        }
        for channel in emptied {
            self.one.remove(&channel);
            self.to_subscribe.retain(|c| *c != channel);
            self.to_unsubscribe.push(channel);
        }
        crate::capacity::trim(&mut self.one, crate::capacity::KEEP);
        crate::capacity::trim(&mut self.more, crate::capacity::KEEP);
        self.next_sweep = (!self.one.is_empty()).then(|| now + SWEEP_EVERY);
    }

    /// When the next sweep is due, if any.
    pub(crate) fn next_sweep(&self) -> Option<Instant> {
        self.next_sweep
    }

    /// `true` when there is subscription work to do.
    pub(crate) fn has_work(&self) -> bool {
        !self.to_subscribe.is_empty() || !self.to_unsubscribe.is_empty()
    }

    /// Listened holds.
    pub(crate) fn len(&self) -> usize {
        self.one.len() + self.more.len()
    }

    /// Listened holds, and the room their map and list keep.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.len(), self.one.capacity() + self.more.capacity())
    }

    /// `true` when no hold is listened for.
    pub(crate) fn is_empty(&self) -> bool {
        self.one.is_empty()
    }

    /// `true` when no hold is listened for and no channel waits to be
    /// (un)subscribed: only then may the subscriber thread sleep until it
    /// is told of a new hold. A thread that slept with unsubscribes queued
    /// was never woken again ([`Listened::add`] wakes it only when it is
    /// idle), and every later hold stayed here for good.
    pub(crate) fn is_idle(&self) -> bool {
        self.is_empty() && !self.has_work()
    }

    /// Forgets the queued unsubscribes: a new connection has none of the
    /// old one's subscriptions.
    pub(crate) fn forget_unsubscribes(&mut self) {
        self.to_unsubscribe = Vec::new();
    }
}

/// Takes at most `max` items off the end of `queue`; an emptied queue
/// gives back the memory a burst made it take.
fn take_last<T>(queue: &mut Vec<T>, max: usize) -> Vec<T> {
    let at = queue.len().saturating_sub(max);
    let taken = queue.split_off(at);
    if queue.is_empty() && queue.capacity() > 1024 {
        *queue = Vec::new();
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Counters;

    fn state() -> Arc<LeaseState> {
        Arc::new(LeaseState::new(
            Instant::now() + Duration::from_secs(60),
            Arc::new(Counters::default()),
        ))
    }

    fn ch(name: &str) -> Arc<[u8]> {
        Arc::from(name.as_bytes())
    }

    #[test]
    fn a_channel_is_subscribed_once_and_unsubscribed_after_its_last_hold() {
        let t0 = Instant::now();
        let mut l = Listened::default();
        let (a, b) = (state(), state());
        l.add(ch("rw"), a.clone(), t0);
        l.add(ch("rw"), b.clone(), t0);
        assert_eq!(l.take_subscribes(10), vec![ch("rw")]);
        assert_eq!(l.len(), 2);
        assert_eq!(l.live_on(b"rw").len(), 2);
        assert!(l.live_on(b"other").is_empty());
        a.mark_released();
        assert_eq!(l.live_on(b"rw").len(), 1, "an ended hold is never checked");
        l.sweep(t0);
        assert_eq!(l.len(), 2, "no sweep before its time");
        l.sweep(t0 + SWEEP_EVERY);
        assert!(l.listens(b"rw") && l.len() == 1 && !l.has_work());
        assert!(Arc::ptr_eq(&l.live_on(b"rw")[0], &b));
        b.mark_lost();
        l.sweep(t0 + SWEEP_EVERY * 2);
        assert!(!l.listens(b"rw") && l.is_empty());
        assert_eq!(l.take_unsubscribes(10), vec![ch("rw")]);
        assert_eq!(l.next_sweep(), None);
    }

    #[test]
    fn at_most_max_listened_holds_are_listened_for() {
        let t0 = Instant::now();
        let mut l = Listened::default();
        for i in 0..=MAX_LISTENED {
            l.add(ch(&format!("c{i}")), state(), t0);
        }
        assert_eq!(l.len(), MAX_LISTENED);
        assert!(!l.listens(format!("c{MAX_LISTENED}").as_bytes()));
        assert_eq!(l.take_subscribes(usize::MAX).len(), MAX_LISTENED);
    }

    #[test]
    fn subscriptions_go_in_bounded_chunks_and_a_reconnection_takes_all() {
        let t0 = Instant::now();
        let mut l = Listened::default();
        for i in 0..5 {
            l.add(ch(&format!("c{i}")), state(), t0);
        }
        assert_eq!(l.take_subscribes(2).len(), 2);
        l.resubscribe_all();
        let mut all = l.take_subscribes(10);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 5);
        assert!(!l.has_work());
    }
}
