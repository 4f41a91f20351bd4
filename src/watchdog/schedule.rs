//! A deadline-ordered schedule of renewals. No threads, no Redis, no clock
//! reads: the caller passes `now`.
//!
//! Items live in a slab (one vector, reused slots). Items inserted one after
//! another with the same due instant and the same early-renewal window form
//! a *run*, chained through their slots; a binary heap orders one small key
//! per run. A renewal round trip puts back hundreds of leases due at one
//! instant, so with 100 000 held locks the heap holds a few hundred keys
//! rather than 100 000, and taking the earliest item follows a link instead
//! of sifting a 3 MB heap (which was most of the watchdog thread's time).
//! Memory stays an item plus about 16 bytes per lock, and a key per run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// No next slot in a run.
const END: usize = usize::MAX;

/// A run's heap key: (due, run sequence, first slot, early instant). The
/// sequence is unique, so the early instant never takes part in the order.
type Key = Reverse<(Instant, u64, usize, Instant)>;

/// Items ordered by due instant; ties keep insertion order.
#[derive(Debug)]
pub(crate) struct Schedule<T> {
    /// Min-heap of runs.
    heap: BinaryHeap<Key>,
    slab: Vec<Slot<T>>,
    /// Free slab indexes.
    free: Vec<usize>,
    seq: u64,
    len: usize,
    /// The run the latest insert went to, while it is still in the heap
    /// with nothing popped from it: (due, window, its sequence, last slot).
    open: Option<(Instant, Duration, u64, usize)>,
    /// How early an item may be taken before its due instant.
    window: fn(&T) -> Duration,
}

#[derive(Debug)]
struct Slot<T> {
    item: Option<T>,
    /// The next slot of its run, or [`END`].
    next: usize,
}

/// Capacity kept however empty the schedule gets.
const MIN_CAPACITY: usize = 1024;

impl<T> Schedule<T> {
    /// An empty schedule whose items may be taken `window(item)` before
    /// they are due.
    pub(crate) fn new(window: fn(&T) -> Duration) -> Self {
        Schedule {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
            len: 0,
            open: None,
            window,
        }
    }

    /// Schedules `item` at `due`.
    pub(crate) fn insert(&mut self, due: Instant, item: T) {
        let window = (self.window)(&item);
        let slot = Slot {
            item: Some(item),
            next: END,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.slab[index] = slot;
                index
            }
            None => {
                self.slab.push(slot);
                self.slab.len() - 1
            }
        };
        self.len += 1;
        if let Some((at, w, _, last)) = self.open.as_mut()
            && *at == due
            && *w == window
        {
            self.slab[*last].next = index;
            *last = index;
            return;
        }
        self.seq += 1;
        let early = due.checked_sub(window).unwrap_or(due);
        self.heap.push(Reverse((due, self.seq, index, early)));
        self.open = Some((due, window, self.seq, index));
    }

    /// The earliest due instant.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, ..))| *due)
    }

    /// Removes and returns, in due order, every item whose due instant minus
    /// its early-renewal window has come by `now`. Stops at the first item
    /// that is not due, so an item with a wide window behind one with a
    /// narrow window waits for a later call.
    #[cfg(test)]
    pub(crate) fn pop_due(&mut self, now: Instant) -> Vec<T> {
        let mut due = Vec::new();
        while let Some(item) = self.pop_one_due(now) {
            due.push(item);
        }
        due
    }

    /// Removes and returns the earliest item if its due instant minus its
    /// early-renewal window has come by `now`.
    pub(crate) fn pop_one_due(&mut self, now: Instant) -> Option<T> {
        let Some(mut top) = self.heap.peek_mut() else {
            self.shrink();
            return None;
        };
        let Reverse((_, seq, index, early)) = *top;
        if early > now {
            drop(top);
            self.shrink();
            return None;
        }
        if self.open.is_some_and(|open| open.2 == seq) {
            // Nothing more joins a run once it is being taken.
            self.open = None;
        }
        let next = self.slab[index].next;
        if next == END {
            std::collections::binary_heap::PeekMut::pop(top);
        } else {
            // Same due instant and sequence: the order holds.
            top.0.2 = next;
        }
        self.free.push(index);
        self.len -= 1;
        self.slab[index].item.take()
    }

    /// Every item, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().filter_map(|slot| slot.item.as_ref())
    }

    /// Removes and returns, in due order, the items for which `take` is
    /// true.
    pub(crate) fn extract(&mut self, mut take: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut runs = std::mem::take(&mut self.heap).into_sorted_vec();
        // Reverse keys sort descending: earliest due last.
        runs.reverse();
        self.open = None;
        self.len = 0;
        let mut taken = Vec::new();
        for Reverse((due, _, head, _)) in runs {
            let mut index = head;
            while index != END {
                let next = self.slab[index].next;
                let item = self.slab[index].item.take();
                self.free.push(index);
                if let Some(item) = item {
                    if take(&item) {
                        taken.push(item);
                    } else {
                        // Kept items re-form their runs in order.
                        self.insert(due, item);
                    }
                }
                index = next;
            }
        }
        self.shrink();
        taken
    }

    /// Removes and returns, in place, every item for which `gone` is true:
    /// the other items keep their runs and their order, and a run left
    /// empty leaves the heap. One walk over the items, no move of those
    /// kept.
    pub(crate) fn remove_where(&mut self, mut gone: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        let runs = std::mem::take(&mut self.heap).into_vec();
        let mut kept = Vec::with_capacity(runs.len());
        for Reverse((due, seq, head, early)) in runs {
            let (mut first, mut last) = (END, END);
            let mut index = head;
            while index != END {
                let next = self.slab[index].next;
                let drop = self.slab[index].item.as_ref().is_some_and(&mut gone);
                if drop {
                    if let Some(item) = self.slab[index].item.take() {
                        removed.push(item);
                    }
                    self.slab[index].next = END;
                    self.free.push(index);
                    self.len -= 1;
                } else {
                    if last == END {
                        first = index;
                    } else {
                        self.slab[last].next = index;
                    }
                    last = index;
                }
                index = next;
            }
            if last != END {
                self.slab[last].next = END;
                kept.push(Reverse((due, seq, first, early)));
            }
            if let Some((at, w, s, _)) = self.open
                && s == seq
            {
                self.open = (last != END).then_some((at, w, s, last));
            }
        }
        self.heap = BinaryHeap::from(kept);
        self.shrink();
        removed
    }

    /// Gives memory back after many locks were released: when at most a
    /// quarter of the slab is in use, items move to a compact slab.
    fn shrink(&mut self) {
        let capacity = self.slab.capacity();
        if capacity <= MIN_CAPACITY || self.len >= capacity / 4 {
            return;
        }
        let runs = std::mem::take(&mut self.heap).into_vec();
        let mut slab: Vec<Slot<T>> = Vec::with_capacity((self.len * 2).max(MIN_CAPACITY));
        let mut heap = Vec::with_capacity(runs.len());
        let mut open = None;
        for Reverse((due, seq, head, early)) in runs {
            let first = slab.len();
            let mut index = head;
            while index != END {
                let next = self.slab[index].next;
                if let Some(item) = self.slab[index].item.take() {
                    if slab.len() > first {
                        let last = slab.len() - 1;
                        slab[last].next = slab.len();
                    }
                    slab.push(Slot {
                        item: Some(item),
                        next: END,
                    });
                }
                index = next;
            }
            if slab.len() > first {
                if let Some((at, w, s, _)) = self.open
                    && s == seq
                {
                    open = Some((at, w, s, slab.len() - 1));
                }
                heap.push(Reverse((due, seq, first, early)));
            }
        }
        self.slab = slab;
        self.heap = BinaryHeap::from(heap);
        self.free = Vec::new();
        self.open = open;
    }

    /// How many items are scheduled.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// How many items the slab has room for.
    pub(crate) fn room(&self) -> usize {
        self.slab.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn no_window<T>(_: &T) -> Duration {
        Duration::ZERO
    }

    #[test]
    fn removing_items_keeps_the_others_in_order_and_runs_open() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::new(no_window::<u32>);
        for i in 0..10 {
            s.insert(t0 + ms(10), i);
        }
        for i in 10..20 {
            s.insert(t0 + ms(u64::from(i)), i);
        }
        // The last run is still open: an insert at its instant joins it.
        let mut gone = s.remove_where(|i| i % 3 == 0 || *i == 19);
        gone.sort_unstable();
        assert_eq!(gone, vec![0, 3, 6, 9, 12, 15, 18, 19]);
        assert_eq!(s.len(), 12);
        s.insert(t0 + ms(18), 100);
        s.insert(t0 + ms(19), 101);
        let all = s.pop_due(t0 + ms(100));
        assert_eq!(
            all,
            vec![1, 2, 4, 5, 7, 8, 10, 11, 13, 14, 16, 17, 100, 101]
        );
        assert_eq!(s.len(), 0);
        assert!(s.remove_where(|_| true).is_empty());
    }

    #[test]
    fn pops_in_due_order_with_windows() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // (name, window in ms)
        let mut s = Schedule::new(|item: &(&str, u64)| Duration::from_millis(item.1));
        s.insert(t0 + ms(30), ("c", 20));
        s.insert(t0 + ms(10), ("a", 0));
        s.insert(t0 + ms(20), ("b", 10));
        s.insert(t0 + ms(40), ("d", 0));
        assert_eq!(s.next_due(), Some(t0 + ms(10)));
        assert!(s.pop_due(t0).is_empty());
        // b's window lets it go at 10 ms, c's at 10 ms; d waits for 40.
        assert_eq!(s.pop_due(t0 + ms(15)), vec![("a", 0), ("b", 10), ("c", 20)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.pop_due(t0 + ms(40)), vec![("d", 0)]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_narrow_window_ahead_holds_back_a_wide_one() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::new(|item: &(&str, u64)| Duration::from_millis(item.1));
        s.insert(t0 + ms(10), ("a", 0));
        s.insert(t0 + ms(20), ("b", 20));
        assert!(s.pop_due(t0 + ms(5)).is_empty());
        assert_eq!(s.pop_due(t0 + ms(10)), vec![("a", 0), ("b", 20)]);
        // Due together, but the second may not go early: two runs.
        s.insert(t0 + ms(30), ("c", 10));
        s.insert(t0 + ms(30), ("d", 0));
        assert_eq!(s.pop_due(t0 + ms(25)), vec![("c", 10)]);
        assert_eq!(s.pop_due(t0 + ms(30)), vec![("d", 0)]);
    }

    #[test]
    fn ties_keep_insertion_order_and_extract_filters() {
        let t0 = Instant::now();
        let mut s = Schedule::new(no_window);
        for i in 0..10 {
            s.insert(t0, i);
        }
        let odd = s.extract(|i| i % 2 == 1);
        assert_eq!(odd, vec![1, 3, 5, 7, 9]);
        assert_eq!(s.pop_due(t0), vec![0, 2, 4, 6, 8]);
    }

    #[test]
    fn items_due_together_share_one_heap_key() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::new(no_window);
        for i in 0..1_000 {
            s.insert(t0 + ms(10), i);
        }
        s.insert(t0 + ms(5), 1_000);
        // Not the open run any more: a new key, though due at 10 ms too.
        s.insert(t0 + ms(10), 1_001);
        assert_eq!(s.heap.len(), 3);
        assert_eq!(s.len(), 1_002);
        assert_eq!(s.pop_one_due(t0 + ms(10)), Some(1_000));
        assert_eq!(s.pop_one_due(t0 + ms(10)), Some(0));
        // Taking from a run closes it: a later insert at its instant goes
        // after everything inserted before it.
        s.insert(t0 + ms(10), 1_002);
        let mut want: Vec<i32> = (1..1_000).collect();
        want.extend([1_001, 1_002]);
        assert_eq!(s.pop_due(t0 + ms(10)), want);
        assert_eq!(s.heap.len(), 0);
    }

    #[test]
    fn iter_sees_every_scheduled_item_once() {
        let t0 = Instant::now();
        let mut s = Schedule::new(no_window);
        for i in 0..5 {
            s.insert(t0 + Duration::from_millis(i), i);
        }
        assert_eq!(s.pop_due(t0), vec![0]);
        let mut seen: Vec<u64> = s.iter().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3, 4]);
    }

    #[test]
    fn memory_is_given_back_after_a_burst() {
        let t0 = Instant::now();
        for per_run in [1u64, 1_000] {
            let mut s = Schedule::new(no_window);
            for i in 0..100_000u64 {
                s.insert(t0 + Duration::from_micros(i / per_run * per_run), i);
            }
            let big = s.slab.capacity();
            let first = s.pop_due(t0 + Duration::from_millis(90));
            assert_eq!(first.len(), if per_run == 1 { 90_001 } else { 91_000 });
            assert!(
                s.slab.capacity() < big / 4,
                "{} of {big}",
                s.slab.capacity()
            );
            assert!(s.slab.capacity() >= MIN_CAPACITY);
            // The last run is still open after the compaction.
            let runs = s.heap.len();
            s.insert(
                t0 + Duration::from_micros(99_999 / per_run * per_run),
                100_000,
            );
            assert_eq!(s.heap.len(), runs);
            // What is left is intact and in order.
            let rest = s.pop_due(t0 + Duration::from_secs(1));
            assert_eq!(rest, (first.len() as u64..=100_000).collect::<Vec<_>>());
            assert_eq!(s.len(), 0);
        }
    }

    #[test]
    fn a_schedule_a_quarter_full_keeps_its_memory() {
        let t0 = Instant::now();
        let mut s = Schedule::new(no_window);
        for i in 0..2_000u64 {
            s.insert(t0 + Duration::from_millis(i), i);
        }
        assert!(s.slab.capacity() > MIN_CAPACITY);
        let slab = s.slab.as_ptr();
        // Half popped, then one not due: still more than a quarter full,
        // so the slab stays where it is (a rebuild costs a copy of every
        // item, on the watchdog thread).
        assert_eq!(s.pop_due(t0 + Duration::from_millis(999)).len(), 1_000);
        assert_eq!(s.extract(|i| *i == 1_500), vec![1_500]);
        assert_eq!(s.slab.as_ptr(), slab, "the slab was rebuilt");
    }

    #[test]
    fn interleaved_operations_match_a_model() {
        use rand::Rng;
        let mut rng = rand::rng();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Few distinct instants, so that runs form, grow, are cut by pops
        // and extracts, and are rebuilt by shrinks.
        let mut s = Schedule::new(no_window);
        // (due ms, insertion number, value)
        let mut model: Vec<(u64, u64, u32)> = Vec::new();
        let mut n = 0u64;
        let mut clock = 0u64;
        for _ in 0..20_000 {
            match rng.random_range(0..12) {
                0..=6 => {
                    let burst = rng.random_range(1..40);
                    let at = clock + rng.random_range(0..5u64) * 20;
                    for _ in 0..burst {
                        n += 1;
                        let v = rng.random_range(0..1000u32);
                        s.insert(t0 + ms(at), v);
                        model.push((at, n, v));
                    }
                }
                7..=9 => {
                    clock += rng.random_range(0..50u64);
                    model.sort_unstable();
                    let cut = model.partition_point(|(at, _, _)| *at <= clock);
                    // Sometimes only part of what is due.
                    let take = if rng.random_bool(0.5) { cut } else { cut / 2 };
                    let got: Vec<u32> = (0..take)
                        .map_while(|_| s.pop_one_due(t0 + ms(clock)))
                        .collect();
                    let want: Vec<u32> = model.drain(..take).map(|(_, _, v)| v).collect();
                    assert_eq!(got, want);
                }
                10 => {
                    let odd = s.extract(|v| v % 2 == 1);
                    model.sort_unstable();
                    let want: Vec<u32> = model.iter().map(|m| m.2).filter(|v| v % 2 == 1).collect();
                    model.retain(|m| m.2 % 2 == 0);
                    assert_eq!(odd, want);
                }
                _ => {
                    model.sort_unstable();
                    assert_eq!(s.next_due(), model.first().map(|m| t0 + ms(m.0)));
                    let mut seen: Vec<u32> = s.iter().copied().collect();
                    let mut want: Vec<u32> = model.iter().map(|m| m.2).collect();
                    seen.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(seen, want);
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
            let mut s = Schedule::new(no_window);
            let mut model: Vec<(u64, usize)> = Vec::new();
            for i in 0..200 {
                let at = rng.random_range(0..1000u64);
                s.insert(t0 + Duration::from_millis(at), i);
                model.push((at, i));
            }
            model.sort();
            let cut = rng.random_range(0..1000u64);
            let got = s.pop_due(t0 + Duration::from_millis(cut));
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
