//! Reentrancy per (client, thread): hold counts, one release per guard, one
//! unlock message on the last release.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{TestContext, ms, unique_name, wait_until};

/// A raw subscriber on one channel, recording every payload it receives.
pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    got: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// Subscribes (confirmed before returning) a new connection to `channel`.
    pub(crate) fn start(server: &crate::support::RedisServer, channel: Vec<u8>) -> Listener {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut conn = server.conn();
        let (s, r, g) = (stop.clone(), ready.clone(), got.clone());
        let handle = std::thread::spawn(move || {
            let mut pubsub = conn.as_pubsub();
            pubsub.subscribe(&channel[..]).unwrap();
            pubsub.set_read_timeout(Some(ms(20))).unwrap();
            r.store(true, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !s.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                if let Ok(msg) = pubsub.get_message() {
                    g.lock()
                        .unwrap()
                        .push(msg.get_payload::<Vec<u8>>().unwrap());
                }
            }
        });
        assert!(wait_until(Duration::from_secs(5), || ready.load(Ordering::SeqCst)));
        Listener {
            stop,
            got,
            handle: Some(handle),
        }
    }

    /// Payloads received so far.
    pub(crate) fn messages(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `n` messages arrived, then `settle` more to see whether
    /// any further one follows; returns all of them.
    pub(crate) fn collect(&self, n: usize, settle: Duration) -> Vec<Vec<u8>> {
        assert!(wait_until(Duration::from_secs(5), || self.messages().len() >= n));
        crate::support::sleep(settle);
        self.messages()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[test]
fn hold_count_goes_1_3_0_and_one_unlock_message_is_published() {
    let ctx = TestContext::new();
    let name = unique_name("reentrant");
    let lock = ctx.client.lock(&name);
    let channel = format!("redisson_lock__channel:{{{name}}}").into_bytes();
    let listener = Listener::start(&ctx.server, channel);

    let g1 = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let g2 = lock.lock().unwrap();
    let g3 = lock.try_lock().unwrap().expect("re-entry never waits");
    assert_eq!(lock.hold_count().unwrap(), 3);
    assert_eq!(g3.lock().hold_count().unwrap(), 3);
    drop(g3);
    assert_eq!(lock.hold_count().unwrap(), 2);
    g2.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    g1.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(
        !lock.is_locked().unwrap(),
        "key deleted after the last release"
    );

    // The one message, and no second one after it.
    let got = listener.collect(1, ms(200));
    assert_eq!(got, vec![b"0".to_vec()], "exactly one unlock message");
}

#[test]
fn a3_reentrancy_100_holds_while_another_thread_keeps_failing() {
    let ctx = TestContext::new();
    let name = unique_name("a3");
    let lock = ctx.client.lock(&name);
    let done = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(AtomicUsize::new(0));

    let mut guards = Vec::new();
    for i in 1..=100u64 {
        guards.push(lock.lock().unwrap());
        if i % 25 == 0 {
            assert_eq!(lock.hold_count().unwrap(), i);
        }
    }
    let other = {
        let (lock, done, early, attempts) =
            (lock.clone(), done.clone(), early.clone(), attempts.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !done.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                attempts.fetch_add(1, Ordering::SeqCst);
                if let Some(g) = lock.try_lock().unwrap() {
                    early.fetch_add(1, Ordering::SeqCst);
                    drop(g);
                }
            }
        })
    };
    assert!(wait_until(Duration::from_secs(5), || attempts
        .load(Ordering::SeqCst)
        > 5));
    let mut remaining = 100u64;
    while remaining > 1 {
        guards.pop().unwrap().unlock().unwrap();
        remaining -= 1;
        assert!(lock.is_locked().unwrap(), "released early at {remaining}");
    }
    // Stop the other thread before the last release: after it, getting the
    // lock is no longer early.
    done.store(true, Ordering::SeqCst);
    other.join().unwrap();
    assert_eq!(
        early.load(Ordering::SeqCst),
        0,
        "the other thread never got in early"
    );
    guards.pop().unwrap().unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn holds_are_per_thread_not_per_client() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock(unique_name("per-thread"));
    let _g = lock.lock().unwrap();
    let other = lock;
    let got = std::thread::spawn(move || other.try_lock().unwrap().is_some())
        .join()
        .unwrap();
    assert!(!got, "another thread of the same client is another holder");
}

/// Releasing one of several holds sets the lease again (Redisson's unlock
/// does): a fixed-lease lock held twice, whose key an admin cut to 200 ms,
/// is back at its full lease after the inner unlock, for the reentrant,
/// fair and fenced kinds and the write side of a read-write lock.
#[test]
fn an_inner_unlock_sets_the_lease_again_for_every_reentrant_kind() {
    let ctx = TestContext::new();
    let lease = ms(5_000);
    let tag = unique_name("inner-unlock");
    let rw = ctx.client.read_write_lock(format!("{tag}:rw"));
    let kinds = [
        ("reentrant", ctx.client.lock(format!("{tag}:lock"))),
        ("fair", ctx.client.fair_lock(format!("{tag}:fair"))),
        ("fenced", ctx.client.fenced_lock(format!("{tag}:fenced"))),
        ("write", rw.write()),
    ];
    for (kind, lock) in kinds {
        let lock = lock.with_lease(lease);
        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        let _: i64 = ctx.server.cmd("PEXPIRE", &[lock.name(), b"200"]);
        inner.unlock().unwrap();
        let pttl = ctx.server.pttl(lock.name());
        assert!(
            pttl > 4_000,
            "{kind}: PTTL {pttl} ms after the inner unlock"
        );
        outer.unlock().unwrap();
        assert!(!lock.is_locked().unwrap(), "{kind}");
    }
}

/// `is_held_by_current_thread` follows the calling thread's holds: not
/// before, while held (also re-entered), not from another thread, not
/// after the last release.
#[test]
fn is_held_by_current_thread_follows_the_calling_threads_holds() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock(unique_name("held-here"));
    assert!(!lock.is_held_by_current_thread().unwrap());
    let outer = lock.lock().unwrap();
    assert!(lock.is_held_by_current_thread().unwrap());
    let inner = lock.lock().unwrap();
    assert!(lock.is_held_by_current_thread().unwrap());
    std::thread::scope(|s| {
        let elsewhere = s.spawn(|| lock.is_held_by_current_thread().unwrap());
        assert!(!elsewhere.join().unwrap(), "held by another thread");
    });
    inner.unlock().unwrap();
    assert!(lock.is_held_by_current_thread().unwrap());
    outer.unlock().unwrap();
    assert!(!lock.is_held_by_current_thread().unwrap());
}

/// A thread may re-enter a lock up to the hold-count bound of the shape
/// rule (1,000), and no further: the next acquire is refused before Redis
/// is asked, so its hold count never passes the bound that would make the
/// lock no lock's to its own renewal and release. The lock stays held,
/// and is free once every guard is dropped. Every kind shares the check.
#[test]
fn reentry_stops_at_the_hold_count_bound_and_the_lock_stays_a_lock() {
    const BOUND: usize = 1_000;
    let ctx = TestContext::new();
    let rw = ctx.client.read_write_lock(unique_name("bound-rw"));
    let locks = [
        ("reentrant", ctx.client.lock(unique_name("bound"))),
        ("fair", ctx.client.fair_lock(unique_name("bound-fair"))),
        ("read", rw.read()),
    ];
    let mut conn = ctx.server.conn();
    for (kind, lock) in &locks {
        let guards: Vec<_> = (0..BOUND).map(|_| lock.lock().unwrap()).collect();
        let err = lock.try_lock().unwrap_err();
        assert!(
            matches!(err, redguard::Error::InvalidArgument(_)),
            "{kind}: {err:?}"
        );
        let err = lock.try_lock_for(ms(50)).unwrap_err();
        assert!(
            matches!(err, redguard::Error::InvalidArgument(_)),
            "{kind}: {err:?}"
        );
        // The count on the server is the bound, and the lock is still one:
        // another client sees it held, its guard checks out.
        let counts: Vec<i64> = redis::cmd("HVALS")
            .arg(lock.name())
            .query::<Vec<String>>(&mut conn)
            .unwrap()
            .iter()
            .filter_map(|v| v.parse().ok())
            .collect();
        assert_eq!(counts, vec![BOUND as i64], "{kind}");
        assert!(lock.is_locked().unwrap(), "{kind}");
        guards[0].check().unwrap();
        drop(guards);
        assert!(!lock.is_locked().unwrap(), "{kind}: released");
        // Below the bound again, it re-enters as before.
        let again = lock.lock().unwrap();
        drop(again);
    }
}
