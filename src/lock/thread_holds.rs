//! The calling thread's own record of the locks it holds: which shared
//! [`LeaseState`] its guards use and how many holds it took, and which of
//! its releases the watchdog is still retrying after a failover.
//! Thread-local, because a holder id *is* (client, thread): no other thread
//! can hold the same lock under the same holder id, so nothing here is
//! shared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::lease::LeaseState;
use crate::watchdog::retried::Handle;

struct Hold {
    state: Arc<LeaseState>,
    count: u64,
}

/// One client's holds on this thread, by lock name (shared with the `Lock`,
/// so recording a hold copies no name).
type ClientHolds = HashMap<Arc<[u8]>, Hold>;

/// A thread uses one client, rarely a few: a short list, searched by client
/// id, beats hashing the id on every lock call. A client's map stays when it
/// empties, with a small table (a lock/unlock loop then neither allocates nor
/// frees one), and is dropped when another client's map is added.
type Holds = Vec<(u128, ClientHolds)>;

/// Releases of this thread being retried: (client, lock, the retry).
type Releasing = Vec<(u128, Arc<[u8]>, Handle)>;

thread_local! {
    static HOLDS: RefCell<Holds> = const { RefCell::new(Vec::new()) };
    static RELEASING: RefCell<Releasing> = const { RefCell::new(Vec::new()) };
}

/// Records that this thread's release of `key` is being retried.
pub(crate) fn releasing(client: u128, key: &Arc<[u8]>, retry: Handle) {
    RELEASING.with(|releasing| {
        let mut releasing = releasing.borrow_mut();
        releasing.retain(|(_, _, r)| !r.is_finished());
        crate::capacity::trim(&mut *releasing, crate::capacity::KEEP);
        releasing.push((client, key.clone(), retry));
    });
}

/// Waits until no release of `key` by this thread is being retried, or
/// `deadline` (`None`: as long as the retry lasts, at most its lease)
/// passes: `false` then. A thread that takes the lock again must not do so
/// while its release is retried: the retry drops every hold of the holder,
/// the new one included.
pub(crate) fn wait_released(client: u128, key: &[u8], deadline: Option<Instant>) -> bool {
    let pending: Vec<Handle> = RELEASING.with(|releasing| {
        let mut releasing = releasing.borrow_mut();
        releasing.retain(|(_, _, r)| !r.is_finished());
        crate::capacity::trim(&mut *releasing, crate::capacity::KEEP);
        releasing
            .iter()
            .filter(|(c, k, _)| *c == client && k[..] == *key)
            .map(|(_, _, r)| r.clone())
            .collect()
    });
    pending.iter().all(|retry| retry.wait_until(deadline))
}

fn of(holds: &mut Holds, client: u128) -> Option<&mut ClientHolds> {
    holds.iter_mut().find(|(c, _)| *c == client).map(|(_, m)| m)
}

/// After a removal: a map that grew large and is mostly empty gives its
/// memory back (a thread that held 100,000 locks and now holds a few).
fn trim(per_client: &mut ClientHolds) {
    crate::capacity::trim(per_client, crate::capacity::KEEP);
}

/// This thread's holds of `client`, and the room their map keeps.
pub(crate) fn sizes(client: u128) -> (usize, usize) {
    HOLDS.with(|holds| {
        let holds = holds.borrow();
        holds
            .iter()
            .find(|(c, _)| *c == client)
            .map_or((0, 0), |(_, m)| (m.len(), m.capacity()))
    })
}

/// The live state of this thread's hold on `key`, if it has one that is not
/// lost or released.
pub(crate) fn current(client: u128, key: &[u8]) -> Option<Arc<LeaseState>> {
    HOLDS.with(|holds| {
        let holds = holds.borrow();
        let (_, per_client) = holds.iter().find(|(c, _)| *c == client)?;
        let hold = per_client.get(key)?;
        let live = !hold.state.is_marked_lost() && !hold.state.is_released();
        live.then(|| hold.state.clone())
    })
}

/// How many holds this thread has of `key` with a live state (0: none).
pub(crate) fn count(client: u128, key: &[u8]) -> u64 {
    HOLDS.with(|holds| {
        let holds = holds.borrow();
        holds
            .iter()
            .find(|(c, _)| *c == client)
            .and_then(|(_, per_client)| per_client.get(key))
            .filter(|hold| !hold.state.is_marked_lost() && !hold.state.is_released())
            .map_or(0, |hold| hold.count)
    })
}

/// Records one more hold on `key`. Uses the existing live state, or
/// `fresh()` when there is none (which replaces a lost or released one).
/// Returns the state and whether it is new.
pub(crate) fn enter(
    client: u128,
    key: &Arc<[u8]>,
    fresh: impl FnOnce() -> Arc<LeaseState>,
) -> (Arc<LeaseState>, bool) {
    HOLDS.with(|holds| {
        let mut holds = holds.borrow_mut();
        let index = match holds.iter().position(|(c, _)| *c == client) {
            Some(index) => index,
            None => {
                holds.retain(|(_, m)| !m.is_empty());
                holds.push((client, HashMap::new()));
                holds.len() - 1
            }
        };
        let per_client = &mut holds[index].1;
        if let Some(hold) = per_client.get_mut(&key[..])
            && !hold.state.is_marked_lost()
            && !hold.state.is_released()
        {
            hold.count += 1;
            return (hold.state.clone(), false);
        }
        let state = fresh();
        per_client.insert(
            key.clone(),
            Hold {
                state: state.clone(),
                count: 1,
            },
        );
        (state, true)
    })
}

/// Records the end of one hold that used `state`. Returns how many holds
/// this thread still has with that state (0 when `state` is not the
/// current one: a lost hold that was replaced).
pub(crate) fn leave(client: u128, key: &[u8], state: &Arc<LeaseState>) -> u64 {
    HOLDS.with(|holds| {
        let mut holds = holds.borrow_mut();
        let Some(per_client) = of(&mut holds, client) else {
            return 0;
        };
        let Some(hold) = per_client.get_mut(key) else {
            return 0;
        };
        if !Arc::ptr_eq(&hold.state, state) {
            return 0;
        }
        hold.count = hold.count.saturating_sub(1);
        let left = hold.count;
        if left == 0 {
            per_client.remove(key);
            trim(per_client);
        }
        left
    })
}

/// Forgets this thread's record of `key` when it still uses `state`
/// (the lock was released or lost as a whole).
pub(crate) fn forget(client: u128, key: &[u8], state: &Arc<LeaseState>) {
    HOLDS.with(|holds| {
        let mut holds = holds.borrow_mut();
        if let Some(per_client) = of(&mut holds, client)
            && per_client
                .get(key)
                .is_some_and(|hold| Arc::ptr_eq(&hold.state, state))
        {
            per_client.remove(key);
            trim(per_client);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Counters;
    use std::time::{Duration, Instant};

    fn key() -> Arc<[u8]> {
        Arc::from(&b"k"[..])
    }

    fn state() -> Arc<LeaseState> {
        Arc::new(LeaseState::new(
            Instant::now() + Duration::from_secs(10),
            Arc::new(Counters::default()),
        ))
    }

    #[test]
    fn reentry_shares_state_and_counts() {
        let (a, new) = enter(1, &key(), state);
        assert!(new);
        let (b, new) = enter(1, &key(), state);
        assert!(!new);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(leave(1, b"k", &a), 1);
        assert_eq!(leave(1, b"k", &a), 0);
        assert!(current(1, b"k").is_none());
    }

    #[test]
    fn a_lost_state_is_replaced_and_its_guards_do_not_count() {
        let (a, _) = enter(2, &key(), state);
        a.mark_lost();
        assert!(current(2, b"k").is_none());
        let (b, new) = enter(2, &key(), state);
        assert!(new);
        assert_eq!(
            leave(2, b"k", &a),
            0,
            "the old guard is not the current hold"
        );
        assert!(current(2, b"k").is_some());
        forget(2, b"k", &b);
        assert!(current(2, b"k").is_none());
    }

    #[test]
    fn a_second_client_on_the_thread_keeps_the_first_ones_holds() {
        let (a, _) = enter(4, &key(), state);
        let (_b, new) = enter(5, &key(), state);
        assert!(new, "another client's hold is its own");
        assert!(current(4, b"k").is_some_and(|s| Arc::ptr_eq(&s, &a)));
    }

    #[test]
    fn leaving_one_of_many_holds_keeps_the_others() {
        let keys: Vec<Arc<[u8]>> = (0..100)
            .map(|i| Arc::from(format!("k{i}").as_bytes()))
            .collect();
        let states: Vec<_> = keys.iter().map(|k| enter(6, k, state).0).collect();
        assert_eq!(leave(6, &keys[0], &states[0]), 0);
        forget(6, &keys[1], &states[1]);
        for (k, s) in keys.iter().zip(&states).skip(2) {
            assert!(current(6, k).is_some_and(|c| Arc::ptr_eq(&c, s)));
        }
    }

    #[test]
    fn holds_are_per_thread() {
        let (_a, _) = enter(3, &key(), state);
        let other = std::thread::spawn(|| current(3, b"k").is_some())
            .join()
            .unwrap();
        assert!(!other);
    }
}
