//! Channel -> waiters, with reference counts and wake-one fan-out. Pure:
//! no threads, no Redis.

use std::collections::{HashMap, VecDeque};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

/// Why a waiter was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The channel's subscription is confirmed: retry, then wait.
    Subscribed,
    /// An unlock message arrived: retry now.
    Unlocked,
    /// The pub/sub connection was re-established; messages may have been
    /// lost meanwhile: retry now.
    Reconnected,
    /// The client shut down.
    Shutdown,
}

/// Identifies one registered waiter.
pub(crate) type WaiterId = u64;

/// Where a waiter's events go. An unlock wake-up counts once: a waiter
/// already woken (and not yet back to waiting) is skipped by
/// [`Registry::wake_one`], while other events (a confirmation, a
/// reconnection) never make a waiter look woken.
#[derive(Debug, Clone)]
pub(crate) struct Mailbox {
    tx: Sender<Event>,
    woken: Arc<AtomicBool>,
}

impl Mailbox {
    /// A mailbox, its receiving end and the flag the receiver clears when
    /// it takes an [`Event::Unlocked`].
    pub(crate) fn new() -> (Mailbox, Receiver<Event>, Arc<AtomicBool>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let woken = Arc::new(AtomicBool::new(false));
        (
            Mailbox {
                tx,
                woken: woken.clone(),
            },
            rx,
            woken,
        )
    }

    /// Delivers an unlock wake-up unless one is pending already. `true`
    /// when delivered.
    fn wake(&self) -> bool {
        if self.woken.swap(true, Ordering::AcqRel) {
            return false;
        }
        if self.tx.send(Event::Unlocked).is_err() {
            // The waiter is leaving (it unregisters itself).
            return false;
        }
        true
    }

    fn notify(&self, event: Event) {
        let _ = self.tx.send(event);
    }
}

#[derive(Debug, Default)]
struct Channel {
    /// Set once the server confirmed the subscription.
    confirmed: bool,
    /// Waiters in arrival order; the front one is woken first.
    waiters: VecDeque<(WaiterId, Mailbox)>,
    /// Every message wakes every waiter (count-down latches), the unlock
    /// message `0` included.
    wake_all: bool,
}

/// What the registering waiter must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registered {
    /// The channel is subscribed already: retry at once.
    Ready,
    /// First waiter of the channel: ask the subscriber thread to SUBSCRIBE,
    /// then wait for [`Event::Subscribed`].
    Subscribe,
    /// A SUBSCRIBE is under way: wait for [`Event::Subscribed`].
    Pending,
}

/// The waiters of every channel of one client.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    channels: HashMap<Vec<u8>, Channel>,
    next_id: WaiterId,
    waiters: usize,
}

impl Registry {
    /// Adds a waiter on `channel`.
    pub(crate) fn register(&mut self, channel: &[u8], tx: Mailbox) -> (WaiterId, Registered) {
        self.next_id += 1;
        let id = self.next_id;
        self.waiters += 1;
        let (entry, fresh) = match self.channels.get_mut(channel) {
            Some(entry) => (entry, false),
            None => (self.channels.entry(channel.to_vec()).or_default(), true),
        };
        entry.waiters.push_back((id, tx));
        let next = if fresh {
            Registered::Subscribe
        } else if entry.confirmed {
            Registered::Ready
        } else {
            Registered::Pending
        };
        (id, next)
    }

    /// Adds a waiter on `channel` only if the channel has waiters already:
    /// one atomic step, so that the waiters it queues behind cannot all
    /// leave (and their last unlock go unheard) between a check and the
    /// registration.
    pub(crate) fn register_behind(
        &mut self,
        channel: &[u8],
        tx: Mailbox,
    ) -> Option<(WaiterId, Registered)> {
        if !self.has_waiters(channel) {
            return None;
        }
        Some(self.register(channel, tx))
    }

    /// Removes a waiter. `true` when the channel has no waiters left (the
    /// caller asks the subscriber thread to UNSUBSCRIBE).
    pub(crate) fn unregister(&mut self, channel: &[u8], id: WaiterId) -> bool {
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        if let Some(pos) = entry.waiters.iter().position(|(w, _)| *w == id) {
            entry.waiters.remove(pos);
            self.waiters -= 1;
        }
        if entry.waiters.is_empty() {
            self.channels.remove(channel);
            crate::capacity::trim(&mut self.channels, crate::capacity::KEEP);
            return true;
        }
        crate::capacity::trim(&mut entry.waiters, crate::capacity::KEEP);
        false
    }

    /// Makes every message on `channel` wake all its waiters (until its
    /// last waiter leaves).
    pub(crate) fn wake_all_on(&mut self, channel: &[u8]) {
        if let Some(entry) = self.channels.get_mut(channel) {
            entry.wake_all = true;
        }
    }

    /// `true` when every message on `channel` wakes all its waiters.
    pub(crate) fn wakes_all(&self, channel: &[u8]) -> bool {
        self.channels.get(channel).is_some_and(|c| c.wake_all)
    }

    /// `true` when `channel` has waiters.
    pub(crate) fn has_waiters(&self, channel: &[u8]) -> bool {
        self.channels.contains_key(channel)
    }

    /// `true` when `channel` has waiters (and so must stay subscribed).
    pub(crate) fn is_wanted(&self, channel: &[u8]) -> bool {
        self.channels.contains_key(channel)
    }

    /// Marks `channel` subscribed and tells its waiters.
    pub(crate) fn confirm(&mut self, channel: &[u8]) {
        if let Some(entry) = self.channels.get_mut(channel) {
            entry.confirmed = true;
            Self::send_all(entry, Event::Subscribed);
        }
    }

    /// Marks every channel unsubscribed (the connection broke).
    pub(crate) fn unconfirm_all(&mut self) {
        for entry in self.channels.values_mut() {
            entry.confirmed = false;
        }
    }

    /// Wakes one waiter of `channel`: the longest-waiting one that is not
    /// already woken and has not gone. `false` when none
    /// could be woken.
    pub(crate) fn wake_one(&mut self, channel: &[u8]) -> bool {
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        entry.waiters.iter().any(|(_, mailbox)| mailbox.wake())
    }

    /// Wakes every waiter of `channel` with `event`.
    pub(crate) fn wake_all(&mut self, channel: &[u8], event: Event) {
        if let Some(entry) = self.channels.get_mut(channel) {
            Self::send_all(entry, event);
        }
    }

    /// Wakes every waiter of every channel with `event`.
    pub(crate) fn wake_everyone(&mut self, event: Event) {
        for entry in self.channels.values_mut() {
            Self::send_all(entry, event);
        }
    }

    fn send_all(entry: &mut Channel, event: Event) {
        for (_, mailbox) in &entry.waiters {
            if event == Event::Unlocked {
                mailbox.wake();
            } else {
                mailbox.notify(event);
            }
        }
    }

    /// Every channel that has waiters.
    pub(crate) fn channels(&self) -> Vec<Vec<u8>> {
        self.channels.keys().cloned().collect()
    }

    /// Registered waiters.
    pub(crate) fn waiters(&self) -> usize {
        self.waiters
    }

    /// Channels with waiters.
    pub(crate) fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Channels with waiters, and the room the map keeps.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.channels.len(), self.channels.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn waiter() -> (Mailbox, Receiver<Event>) {
        let (mailbox, rx, _) = Mailbox::new();
        (mailbox, rx)
    }

    #[test]
    fn first_waiter_subscribes_later_ones_wait_or_go() {
        let mut r = Registry::default();
        let (a, _ra) = waiter();
        let (b, rb) = waiter();
        let (ida, first) = r.register(b"ch", a);
        assert_eq!(first, Registered::Subscribe);
        let (_, second) = r.register(b"ch", b);
        assert_eq!(second, Registered::Pending);
        r.confirm(b"ch");
        assert_eq!(rb.try_recv(), Ok(Event::Subscribed));
        let (c, _rc) = waiter();
        assert_eq!(r.register(b"ch", c).1, Registered::Ready);
        assert_eq!(r.waiters(), 3);
        assert!(!r.unregister(b"ch", ida));
        assert_eq!(r.waiters(), 2);
    }

    #[test]
    fn wake_one_wakes_exactly_one_in_order_skipping_gone_and_woken() {
        let mut r = Registry::default();
        let (a, ra, _) = Mailbox::new();
        let (b, rb, b_woken) = Mailbox::new();
        let (c, rc, _) = Mailbox::new();
        r.register(b"ch", a);
        r.register(b"ch", b);
        r.register(b"ch", c);
        drop(ra);
        assert!(r.wake_one(b"ch"));
        assert_eq!(rb.try_recv(), Ok(Event::Unlocked));
        assert!(rc.try_recv().is_err(), "only one waiter woken");
        assert_eq!(r.waiters(), 3, "a gone waiter stays until it unregisters");
        // b has not gone back to waiting: the next wake-up goes to c.
        assert!(r.wake_one(b"ch"));
        assert_eq!(rc.try_recv(), Ok(Event::Unlocked));
        assert!(rb.try_recv().is_err());
        // Both are busy: nobody to wake.
        assert!(!r.wake_one(b"ch"));
        // b waits again: it is first in line once more.
        b_woken.store(false, Ordering::Release);
        assert!(r.wake_one(b"ch"));
        assert_eq!(rb.try_recv(), Ok(Event::Unlocked));
    }

    #[test]
    fn a_confirmation_never_makes_a_waiter_look_woken() {
        let mut r = Registry::default();
        let (a, ra, _) = Mailbox::new();
        r.register(b"ch", a);
        r.confirm(b"ch");
        r.wake_everyone(Event::Reconnected);
        // The unlock still reaches the waiter behind the other events.
        assert!(r.wake_one(b"ch"));
        let events: Vec<Event> = ra.try_iter().collect();
        assert_eq!(
            events,
            vec![Event::Subscribed, Event::Reconnected, Event::Unlocked]
        );
    }

    #[test]
    fn a_broken_connection_makes_new_waiters_wait_for_the_subscription() {
        let mut r = Registry::default();
        let (a, _ra) = waiter();
        r.register(b"ch", a);
        r.confirm(b"ch");
        r.unconfirm_all();
        // Resubscribed on the next connection: until then a new waiter
        // must not retry as if an unlock could reach it.
        let (b, _rb) = waiter();
        assert_eq!(r.register(b"ch", b).1, Registered::Pending);
        assert_eq!(r.channels(), vec![b"ch".to_vec()]);
    }

    #[test]
    fn waiters_queue_behind_only_a_channel_with_waiters() {
        let mut r = Registry::default();
        let (a, _ra) = waiter();
        assert!(r.register_behind(b"ch", a).is_none());
        assert_eq!(r.waiters(), 0);
        assert!(!r.has_waiters(b"ch"));
        let (b, _rb) = waiter();
        let (first, _) = r.register(b"ch", b);
        assert!(r.has_waiters(b"ch") && r.is_wanted(b"ch"));
        assert!(!r.has_waiters(b"other") && !r.is_wanted(b"other"));
        let (c, _rc) = waiter();
        let (behind, next) = r.register_behind(b"ch", c).expect("queued behind");
        assert_ne!(behind, first);
        assert_eq!(next, Registered::Pending);
        assert_eq!((r.waiters(), r.channel_count()), (2, 1));
    }

    #[test]
    fn a_wake_all_channel_wakes_every_waiter_and_events_reach_all() {
        let mut r = Registry::default();
        let rxs: Vec<Receiver<Event>> = (0..3)
            .map(|_| {
                let (tx, rx) = waiter();
                r.register(b"latch", tx);
                rx
            })
            .collect();
        let (d, rd) = waiter();
        r.register(b"lock", d);
        assert!(!r.wakes_all(b"latch"));
        r.wake_all_on(b"latch");
        assert!(r.wakes_all(b"latch") && !r.wakes_all(b"lock"));
        r.wake_all(b"latch", Event::Unlocked);
        for rx in &rxs {
            assert_eq!(rx.try_recv(), Ok(Event::Unlocked));
        }
        assert!(rd.try_recv().is_err(), "another channel's waiter slept on");
        r.wake_everyone(Event::Shutdown);
        for rx in rxs.iter().chain([&rd]) {
            assert_eq!(rx.try_recv(), Ok(Event::Shutdown));
        }
    }

    #[test]
    fn last_waiter_leaving_empties_the_channel() {
        let mut r = Registry::default();
        let mut ids = Vec::new();
        let mut rxs = Vec::new();
        for _ in 0..5 {
            let (tx, rx) = waiter();
            ids.push(r.register(b"x", tx).0);
            rxs.push(rx);
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(r.unregister(b"x", *id), i == 4);
        }
        assert_eq!(r.channel_count(), 0);
        assert_eq!(r.waiters(), 0);
        assert!(!r.is_wanted(b"x"));
        assert!(!r.wake_one(b"x"));
    }

    #[test]
    fn mixed_operations_return_to_empty() {
        use rand::Rng;
        let mut rng = rand::rng();
        let mut r = Registry::default();
        let mut live: Vec<(Vec<u8>, WaiterId, Receiver<Event>)> = Vec::new();
        for _ in 0..10_000 {
            if live.is_empty() || rng.random_bool(0.55) {
                let ch = vec![rng.random_range(0..20u8)];
                let (tx, rx) = waiter();
                let (id, _) = r.register(&ch, tx);
                live.push((ch, id, rx));
            } else {
                let i = rng.random_range(0..live.len());
                let (ch, id, _) = live.swap_remove(i);
                r.unregister(&ch, id);
            }
            if rng.random_bool(0.1) {
                r.wake_one(&[rng.random_range(0..20u8)]);
            }
        }
        for (ch, id, _) in live.drain(..) {
            r.unregister(&ch, id);
        }
        assert_eq!(r.waiters(), 0);
        assert_eq!(r.channel_count(), 0);
    }
}
