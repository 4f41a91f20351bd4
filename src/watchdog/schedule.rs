//! A deadline-ordered schedule of renewals. No threads, no Redis, no clock
//! reads: the caller passes `now`.

use std::collections::BTreeMap;
use std::time::Instant;

/// Items ordered by due instant; ties keep insertion order.
#[derive(Debug)]
pub(crate) struct Schedule<T> {
    items: BTreeMap<(Instant, u64), T>,
    seq: u64,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Schedule {
            items: BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<T> Schedule<T> {
    /// Schedules `item` at `due`.
    pub(crate) fn insert(&mut self, due: Instant, item: T) {
        self.seq += 1;
        self.items.insert((due, self.seq), item);
    }

    /// The earliest due instant.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.items.keys().next().map(|(due, _)| *due)
    }

    /// Removes and returns, in due order, every item whose due instant minus
    /// its own early-renewal window (`window(item)`) has come by `now`.
    /// Stops at the first item that is not due, so an item with a wide
    /// window behind one with a narrow window waits for a later call.
    pub(crate) fn pop_due(
        &mut self,
        now: Instant,
        window: impl Fn(&T) -> std::time::Duration,
    ) -> Vec<T> {
        let mut due = Vec::new();
        while let Some(entry) = self.items.first_entry() {
            let (at, _) = *entry.key();
            let early = at.checked_sub(window(entry.get())).unwrap_or(at);
            if early > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// Keeps only the items for which `keep` is true; returns the others.
    pub(crate) fn extract(&mut self, mut take: impl FnMut(&T) -> bool) -> Vec<T> {
        let keys: Vec<_> = self
            .items
            .iter()
            .filter(|(_, item)| take(item))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| self.items.remove(&k))
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
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
