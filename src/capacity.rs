//! Giving memory back. A map or queue keyed by lock name, channel or hold
//! keeps the table a burst made it take (100,000 held locks, a storm of
//! waiters) after its entries go; [`trim`] shrinks one that is mostly
//! empty, leaving room to spare so that a collection whose size swings
//! does not shrink and grow by turns.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};

/// Room kept however empty a collection gets: a lock/unlock loop on a
/// few names neither frees nor allocates a table.
pub(crate) const KEEP: usize = 64;

/// A collection whose room can be given back.
pub(crate) trait Room {
    fn entries(&self) -> usize;
    fn room(&self) -> usize;
    fn shrink_room(&mut self, to: usize);
}

/// Shrinks `c` when at most an eighth of its room (and more than `keep`)
/// is in use, to twice its entries (at least `keep`). It grows again only
/// after its entries have grown some 1.75 times, and shrinks again only
/// after they fell to a sixteenth of that: no thrash.
pub(crate) fn trim<C: Room>(c: &mut C, keep: usize) {
    let (len, room) = (c.entries(), c.room());
    if room > keep && len <= room / 8 {
        c.shrink_room((len * 2).max(keep));
    }
}

impl<K: Eq + Hash, V, S: BuildHasher> Room for HashMap<K, V, S> {
    fn entries(&self) -> usize {
        self.len()
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn shrink_room(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

impl<K: Eq + Hash, S: BuildHasher> Room for HashSet<K, S> {
    fn entries(&self) -> usize {
        self.len()
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn shrink_room(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

impl<T> Room for Vec<T> {
    fn entries(&self) -> usize {
        self.len()
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn shrink_room(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

impl<T> Room for VecDeque<T> {
    fn entries(&self) -> usize {
        self.len()
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn shrink_room(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_that_emptied_gives_its_room_back_and_churn_does_not_thrash() {
        let mut m: HashMap<u32, u32> = HashMap::new();
        for i in 0..100_000 {
            m.insert(i, i);
        }
        let grown = m.capacity();
        for i in 10..100_000 {
            m.remove(&i);
            trim(&mut m, KEEP);
        }
        assert!(m.capacity() <= 4 * KEEP, "room kept: {}", m.capacity());
        assert!(m.capacity() < grown / 100);
        // Entries swinging between 10 and 40: no shrink after the first.
        let settled = m.capacity();
        let mut shrinks = 0;
        for round in 0..1000u32 {
            for i in 10..40 {
                if round % 2 == 0 {
                    m.insert(i, i);
                } else {
                    m.remove(&i);
                }
                let before = m.capacity();
                trim(&mut m, KEEP);
                shrinks += usize::from(m.capacity() < before);
            }
        }
        assert_eq!(shrinks, 0);
        assert_eq!(m.capacity(), settled);
    }

    #[test]
    fn small_collections_keep_their_room() {
        let mut v: Vec<u8> = Vec::with_capacity(KEEP);
        trim(&mut v, KEEP);
        assert_eq!(v.capacity(), KEEP);
        let mut q: VecDeque<u8> = VecDeque::with_capacity(10_000);
        q.push_back(1);
        trim(&mut q, KEEP);
        assert!(q.capacity() >= KEEP && q.capacity() < 10_000);
    }
}
