//! A deadline-ordered schedule of renewals. No threads, no Redis, no clock
//! reads: the caller passes `now`.
//!
//! Items live in a slab (one vector, reused slots); a binary heap orders
//! small (due, sequence, slot) keys. With 100 000 held locks this costs an
//! item plus 32 bytes per lock (a B-tree of items costs about twice that
//! with its half-full nodes), and taking the earliest key moves 32-byte keys
//! rather than whole items, which is what the watchdog thread spends most of
//! its time on.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// Items ordered by due instant; ties keep insertion order.
#[derive(Debug)]
pub(crate) struct Schedule<T> {
    /// Min-heap of (due, insertion sequence, slab index).
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    slab: Vec<Option<T>>,
    /// Free slab indexes.
    free: Vec<usize>,
    seq: u64,
}

/// Capacity kept however empty the schedule gets.
const MIN_CAPACITY: usize = 1024;

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Schedule {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }
}

impl<T> Schedule<T> {
    /// Schedules `item` at `due`.
    pub(crate) fn insert(&mut self, due: Instant, item: T) {
        self.seq += 1;
        let index = match self.free.pop() {
            Some(index) => {
                self.slab[index] = Some(item);
                index
            }
            None => {
                self.slab.push(Some(item));
                self.slab.len() - 1
            }
        };
        self.heap.push(Reverse((due, self.seq, index)));
    }

    /// The earliest due instant.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Removes and returns, in due order, every item whose due instant minus
    /// its own early-renewal window (`window(item)`) has come by `now`.
    /// Stops at the first item that is not due, so an item with a wide
    /// window behind one with a narrow window waits for a later call.
    #[cfg(test)]
    pub(crate) fn pop_due(&mut self, now: Instant, window: impl Fn(&T) -> Duration) -> Vec<T> {
        let mut due = Vec::new();
        while let Some(item) = self.pop_one_due(now, &window) {
            due.push(item);
        }
        due
    }

    /// Removes and returns the earliest item if its due instant minus its
    /// own early-renewal window has come by `now`.
    pub(crate) fn pop_one_due(
        &mut self,
        now: Instant,
        window: impl Fn(&T) -> Duration,
    ) -> Option<T> {
        loop {
            let Some(&Reverse((due, _, index))) = self.heap.peek() else {
                self.shrink();
                return None;
            };
            let Some(item) = self.slab.get(index).and_then(Option::as_ref) else {
                // Cannot happen (every key has its item); drop the key.
                self.heap.pop();
                continue;
            };
            let early = due.checked_sub(window(item)).unwrap_or(due);
            if early > now {
                self.shrink();
                return None;
            }
            self.heap.pop();
            self.free.push(index);
            return self.slab[index].take();
        }
    }

    /// Every item, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().flatten()
    }

    /// Removes and returns, in due order, the items for which `take` is
    /// true.
    pub(crate) fn extract(&mut self, mut take: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut keys = std::mem::take(&mut self.heap).into_sorted_vec();
        // Reverse keys sort descending: earliest due last.
        keys.reverse();
        let mut taken = Vec::new();
        let mut kept = Vec::with_capacity(keys.len());
        for key in keys {
            let index = key.0.2;
            let matches = self.slab[index].as_ref().is_some_and(&mut take);
            if matches {
                taken.extend(self.slab[index].take());
                self.free.push(index);
            } else {
                kept.push(key);
            }
        }
        self.heap = BinaryHeap::from(kept);
        self.shrink();
        taken
    }

    /// Gives memory back after many locks were released: when at most a
    /// quarter of the slab is in use, items move to a compact slab.
    fn shrink(&mut self) {
        let (len, capacity) = (self.heap.len(), self.slab.capacity());
        if capacity <= MIN_CAPACITY || len >= capacity / 4 {
            return;
        }
        let keys = std::mem::take(&mut self.heap).into_vec();
        let mut slab = Vec::with_capacity((len * 2).max(MIN_CAPACITY));
        let mut heap = Vec::with_capacity(slab.capacity());
        for Reverse((due, seq, index)) in keys {
            if let Some(item) = self.slab[index].take() {
                slab.push(Some(item));
                heap.push(Reverse((due, seq, slab.len() - 1)));
            }
        }
        self.slab = slab;
        self.heap = BinaryHeap::from(heap);
        self.free = Vec::new();
    }

    /// How many items are scheduled.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pops_in_due_order_with_windows() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::default();
        s.insert(t0 + ms(30), "c");
        s.insert(t0 + ms(10), "a");
        s.insert(t0 + ms(20), "b");
        assert_eq!(s.next_due(), Some(t0 + ms(10)));
        assert!(s.pop_due(t0, |_| ms(0)).is_empty());
        assert_eq!(s.pop_due(t0 + ms(15), |_| ms(0)), vec!["a"]);
        assert_eq!(s.pop_due(t0 + ms(15), |_| ms(20)), vec!["b", "c"]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn ties_keep_insertion_order_and_extract_filters() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..10 {
            s.insert(t0, i);
        }
        let odd = s.extract(|i| i % 2 == 1);
        assert_eq!(odd, vec![1, 3, 5, 7, 9]);
        assert_eq!(s.pop_due(t0, |_| Duration::ZERO), vec![0, 2, 4, 6, 8]);
    }

    #[test]
    fn iter_sees_every_scheduled_item_once() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..5 {
            s.insert(t0 + Duration::from_millis(i), i);
        }
        assert_eq!(s.pop_due(t0, |_| Duration::ZERO), vec![0]);
        let mut seen: Vec<u64> = s.iter().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3, 4]);
    }

    #[test]
    fn memory_is_given_back_after_a_burst() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..100_000u64 {
            s.insert(t0 + Duration::from_micros(i), i);
        }
        let big = s.slab.capacity();
        let first = s.pop_due(t0 + Duration::from_millis(90), |_| Duration::ZERO);
        assert_eq!(first.len(), 90_001);
        assert!(
            s.slab.capacity() < big / 4,
            "{} of {big}",
            s.slab.capacity()
        );
        assert!(s.slab.capacity() >= MIN_CAPACITY);
        // What is left is intact and in order.
        let rest = s.pop_due(t0 + Duration::from_secs(1), |_| Duration::ZERO);
        assert_eq!(rest, (90_001..100_000).collect::<Vec<_>>());
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_schedule_a_quarter_full_keeps_its_memory() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..2_000u64 {
            s.insert(t0 + Duration::from_millis(i), i);
        }
        assert!(s.slab.capacity() > MIN_CAPACITY);
        let slab = s.slab.as_ptr();
        // Half popped, then one not due: still more than a quarter full,
        // so the slab stays where it is (a rebuild costs a copy of every
        // item, on the watchdog thread).
        assert_eq!(
            s.pop_due(t0 + Duration::from_millis(999), |_| Duration::ZERO)
                .len(),
            1_000
        );
        assert_eq!(s.extract(|i| *i == 1_500), vec![1_500]);
        assert_eq!(s.slab.as_ptr(), slab, "the slab was rebuilt");
    }

    #[test]
    fn interleaved_operations_match_a_model() {
        use rand::Rng;
        let mut rng = rand::rng();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::default();
        // (due ms, insertion number, value)
        let mut model: Vec<(u64, u64, u32)> = Vec::new();
        let mut n = 0u64;
        let mut clock = 0u64;
        for _ in 0..20_000 {
            match rng.random_range(0..10) {
                0..=5 => {
                    n += 1;
                    let at = clock + rng.random_range(0..500u64);
                    let v = rng.random_range(0..1000u32);
                    s.insert(t0 + ms(at), v);
                    model.push((at, n, v));
                }
                6..=8 => {
                    clock += rng.random_range(0..50u64);
                    let got = s.pop_due(t0 + ms(clock), |_| Duration::ZERO);
                    model.sort_unstable();
                    let cut = model.partition_point(|(at, _, _)| *at <= clock);
                    let want: Vec<u32> = model.drain(..cut).map(|(_, _, v)| v).collect();
                    assert_eq!(got, want);
                }
                _ => {
                    let odd = s.extract(|v| v % 2 == 1);
                    model.sort_unstable();
                    let want: Vec<u32> = model.iter().map(|m| m.2).filter(|v| v % 2 == 1).collect();
                    model.retain(|m| m.2 % 2 == 0);
                    assert_eq!(odd, want);
                }
            }
            assert_eq!(s.len(), model.len());
        }
    }

    #[test]
    fn randomized_against_a_sorted_model() {
        use rand::Rng;
        let mut rng = rand::rng();
        let t0 = Instant::now();
        for _ in 0..50 {
            let mut s = Schedule::default();
            let mut model: Vec<(u64, usize)> = Vec::new();
            for i in 0..200 {
                let at = rng.random_range(0..1000u64);
                s.insert(t0 + Duration::from_millis(at), i);
                model.push((at, i));
            }
            model.sort();
            let cut = rng.random_range(0..1000u64);
            let got = s.pop_due(t0 + Duration::from_millis(cut), |_| Duration::ZERO);
            let want: Vec<usize> = model
                .iter()
                .filter(|(at, _)| *at <= cut)
                .map(|(_, i)| *i)
                .collect();
            assert_eq!(got, want);
            assert_eq!(s.len(), 200 - want.len());
        }
    }
}
