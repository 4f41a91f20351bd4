//! Threads of one client waiting for the same lock are served in arrival
//! order: a releaser that locks again queues behind the threads already
//! waiting; re-entry never waits; many waiters share one pub/sub connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{TestContext, ms, sleep, test_builder, unique_name, wait_until};

/// 10 rounds: a releaser that locks again with time to wait
/// (`try_lock_for`) queues behind the thread already waiting. Without the
/// queue, the releaser's own attempt races the waiter's wake-up and wins
/// it in most rounds. The poll interval (10 s) bounds the releaser's wait
/// for its turn: a short one would let it barge in whenever the waiter's
/// attempt is slow (under load).
#[test]
fn releaser_queues_behind_a_waiting_thread() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let name = unique_name("fair");
    let lock = client.lock(&name);
    for round in 0..10 {
        let order = Arc::new(Mutex::new(Vec::new()));
        let guard = lock.lock().unwrap();
        let waiter = {
            let lock = client.lock(&name);
            let order = order.clone();
            std::thread::spawn(move || {
                let guard = lock
                    .try_lock_for(Duration::from_secs(5))
                    .unwrap()
                    .expect("B acquires");
                order.lock().unwrap().push("B");
                sleep(ms(50));
                guard.unlock().unwrap();
            })
        };
        assert!(wait_until(Duration::from_secs(3), || client
            .stats()
            .waiters
            == 1));
        // Release and lock again at once: the waiting thread goes first.
        drop(guard);
        let again = lock
            .try_lock_for(Duration::from_secs(5))
            .unwrap()
            .expect("A acquires");
        order.lock().unwrap().push("A");
        again.unlock().unwrap();
        waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["B", "A"], "round {round}");
    }
}

#[test]
fn reentry_does_not_queue_behind_waiters() {
    let ctx = TestContext::new();
    // A long poll interval: a queued re-entry would sleep through it.
    let client = test_builder(&ctx.server.url())
        .poll_interval(Duration::from_secs(3))
        .build()
        .unwrap();
    let name = unique_name("fair-reentry");
    let lock = client.lock(&name);
    let outer = lock.lock().unwrap();
    let waiter = {
        let lock = client.lock(&name);
        std::thread::spawn(move || {
            let g = lock.try_lock_for(Duration::from_secs(8)).unwrap();
            g.map(|g| g.unlock().is_ok())
        })
    };
    assert!(wait_until(Duration::from_secs(3), || client
        .stats()
        .waiters
        == 1));
    let started = Instant::now();
    let inner = lock
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("re-entered");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "re-entry waited {:?}",
        started.elapsed()
    );
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(inner);
    drop(outer);
    assert_eq!(waiter.join().unwrap(), Some(true));
}

#[test]
fn contending_threads_share_the_lock() {
    let ctx = TestContext::new();
    let name = unique_name("fair-share");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_millis(1500);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = ctx.client.lock(&name);
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            std::thread::spawn(move || {
                let mut got = 0u32;
                while Instant::now() < end && got < 2_000 {
                    let g = lock
                        .try_lock_for(Duration::from_secs(5))
                        .unwrap()
                        .expect("acquired");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                    got += 1;
                }
                got
            })
        })
        .collect();
    let counts: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    assert!(
        min > 0 && max <= 3 * min,
        "per-thread acquisitions {counts:?}"
    );
}

#[test]
fn fan_out_uses_one_pubsub_connection_and_every_waiter_acquires() {
    let ctx = TestContext::new();
    let holder = ctx.other_client();
    let names: Vec<String> = (0..5).map(|_| unique_name("fanout")).collect();
    let held: Vec<_> = names.iter().map(|n| holder.lock(n)).collect();
    let guards: Vec<_> = held.iter().map(|l| l.lock().unwrap()).collect();
    let acquired = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..50)
        .map(|i| {
            let lock = ctx.client.lock(&names[i % names.len()]);
            let acquired = acquired.clone();
            std::thread::spawn(move || {
                if let Some(g) = lock.try_lock_for(Duration::from_secs(8)).unwrap() {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || ctx
        .client
        .stats()
        .waiters
        == 50));
    let stats = ctx.client.stats();
    assert_eq!(stats.pubsub_connections, 1);
    assert_eq!(stats.subscribed_channels, 5);
    drop(guards);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(acquired.load(Ordering::SeqCst), 50);
    assert_eq!(ctx.client.stats().pubsub_connections, 1);
}
