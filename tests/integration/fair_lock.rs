//! The fair lock (`Client::fair_lock`): Redisson's queue layout, first come
//! first served, one wake-up per release, every way out of a wait leaving
//! no trace, dead waiters pruned on the server's clock (A7, A8; H3 is in
//! watchdog.rs with every other kind).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    ChildTest, RedisServer, TEST_WATCHDOG, TestContext, capture_logs, child_role, logged_lines, ms,
    say, test_builder, unique_name, wait_until,
};

fn queue_key(name: &str) -> Vec<u8> {
    format!("redisson_lock_queue:{{{name}}}").into_bytes()
}

fn timeout_key(name: &str) -> Vec<u8> {
    format!("redisson_lock_timeout:{{{name}}}").into_bytes()
}

/// The server's clock in ms since the epoch.
fn server_now_ms(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = server.cmd("TIME", &[]);
    secs * 1000 + micros / 1000
}

/// Queue and deadline set are both gone.
fn no_trace(server: &RedisServer, name: &str) -> bool {
    let n: u64 = server.cmd("EXISTS", &[&queue_key(name), &timeout_key(name)]);
    n == 0
}

/// Waits until the fair queue of `lock` has `n` entries; returns them.
fn wait_queue_len(lock: &redguard::Lock, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            ids = match lock.inspect().unwrap().kind {
                redguard::LockKind::Fair { queue } => {
                    queue.into_iter().map(|w| w.holder.to_string()).collect()
                }
                _ => Vec::new(),
            };
            ids.len() == n
        }),
        "the queue never reached {n} entries: {ids:?}"
    );
    ids
}

#[test]
fn fair_lock_uses_the_redisson_layout_and_reenters() {
    let ctx = TestContext::new();
    let name = unique_name("fair-layout");
    let lock = ctx.client.fair_lock(&name);
    assert!(lock.is_fair());
    assert_eq!(lock.fair_wait_timeout(), Some(Duration::from_secs(300)));
    let outer = lock.lock().unwrap();
    let lease = TEST_WATCHDOG.as_millis() as i64;
    let pttl = ctx.server.pttl(&name);
    assert!(
        pttl > lease - 300 && pttl <= lease,
        "granted with PTTL {pttl}"
    );
    // A re-entry sets the lease again (an admin cut the key to 200 ms).
    let _: i64 = ctx.server.cmd("PEXPIRE", &[name.as_bytes(), b"200"]);
    let inner = lock.try_lock().unwrap().expect("re-entry of a fair lock");
    let pttl = ctx.server.pttl(&name);
    assert!(pttl > lease - 300, "re-entered with PTTL {pttl}");
    assert_eq!(lock.hold_count().unwrap(), 2);
    let holders: Vec<(String, u64)> = ctx.server.cmd("HGETALL", &[name.as_bytes()]);
    assert_eq!(
        holders,
        vec![(ctx.client.holder_id().as_str().to_owned(), 2)]
    );
    assert!(no_trace(&ctx.server, &name), "a holder is never queued");
    drop(inner);
    assert!(lock.is_locked().unwrap());
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    // A waiter queues under its holder id; first in line, its deadline is
    // Redisson's: the lock's expiry plus one fair wait timeout, on the
    // server's clock.
    let guard = lock.lock().unwrap();
    let waiter_lock = lock.clone();
    let (id_tx, id_rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        id_tx
            .send(waiter_lock.client().holder_id().as_str().to_owned())
            .unwrap();
        waiter_lock
            .try_lock_for(Duration::from_secs(5))
            .unwrap()
            .is_some()
    });
    let waiter_id = id_rx.recv().unwrap();
    assert_eq!(wait_queue_len(&lock, 1), vec![waiter_id.clone()]);
    let score: f64 = ctx
        .server
        .cmd("ZSCORE", &[&timeout_key(&name), waiter_id.as_bytes()]);
    let ahead = score as i64 - server_now_ms(&ctx.server) as i64;
    let wait = Duration::from_secs(300).as_millis() as i64;
    assert!(
        (wait - 2_000..=wait + lease).contains(&ahead),
        "deadline {ahead} ms ahead"
    );
    drop(guard);
    assert!(waiter.join().unwrap());
    assert!(no_trace(&ctx.server, &name));
}

/// A7: waiters that enqueue one after the other on a held lock get it in
/// exactly that order, run after run.
#[test]
fn a7_fair_lock_fifo() {
    const RUNS: usize = 50;
    const WAITERS: usize = 10;
    let ctx = TestContext::new();
    for run in 0..RUNS {
        let name = unique_name("a7");
        let lock = ctx.client.fair_lock(&name);
        let holder = lock.lock().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut expected_ids = Vec::new();
        let mut threads = Vec::new();
        for i in 0..WAITERS {
            let waiter = lock.clone();
            let order = order.clone();
            let (id_tx, id_rx) = mpsc::channel();
            threads.push(thread::spawn(move || {
                id_tx
                    .send(waiter.client().holder_id().as_str().to_owned())
                    .unwrap();
                let guard = waiter
                    .try_lock_for(Duration::from_secs(10))
                    .unwrap()
                    .expect("a queued waiter gets the lock");
                order.lock().unwrap().push(i);
                guard.unlock().unwrap();
            }));
            expected_ids.push(id_rx.recv().unwrap());
            // Staggered: the next waiter starts once this one is queued.
            let queued = wait_queue_len(&lock, i + 1);
            assert_eq!(queued, expected_ids, "run {run}: queue order");
        }
        drop(holder);
        for t in threads {
            t.join().unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "run {run}");
        assert!(no_trace(&ctx.server, &name), "run {run}: queue left behind");
        assert!(!lock.is_locked().unwrap());
    }
}

/// A `try_lock_for` that times out, and a `try_lock` that finds the lock
/// busy, leave nothing in the queue or the deadline set.
#[test]
fn fair_timed_out_waiter_leaves_no_trace() {
    let ctx = TestContext::new();
    let name = unique_name("fair-timeout");
    let lock = ctx.client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let other = lock.clone();
    let started = Instant::now();
    let got = thread::spawn(move || other.try_lock_for(ms(400)).unwrap().is_some())
        .join()
        .unwrap();
    assert!(!got);
    assert!(started.elapsed() >= ms(400));
    assert!(
        no_trace(&ctx.server, &name),
        "timed-out waiter left a trace"
    );

    let other = lock;
    let got = thread::spawn(move || other.try_lock().unwrap().is_some())
        .join()
        .unwrap();
    assert!(!got);
    assert!(no_trace(&ctx.server, &name), "try_lock left a trace");
    drop(guard);
}

/// A waiter whose client shuts down returns `Shutdown` and leaves the queue.
#[test]
fn fair_waiter_leaves_queue_on_shutdown() {
    let ctx = TestContext::new();
    let name = unique_name("fair-shutdown");
    let lock = ctx.client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let other_client = ctx.other_client();
    let waiter_lock = other_client.fair_lock(&name);
    let waiter = thread::spawn(move || waiter_lock.lock().map(|_| ()));
    wait_queue_len(&lock, 1);
    other_client.shutdown();
    let result = waiter.join().unwrap();
    assert!(
        matches!(result, Err(redguard::Error::Shutdown)),
        "{result:?}"
    );
    assert!(no_trace(&ctx.server, &name));
    drop(guard);
}

/// A waiter whose attempt fails (the key now holds a string) returns the
/// error and leaves the queue.
#[test]
fn fair_waiter_leaves_queue_on_error() {
    let ctx = TestContext::new();
    let name = unique_name("fair-error");
    let lock = ctx.client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let waiter_lock = lock.clone();
    let waiter = thread::spawn(move || waiter_lock.lock().map(|_| ()));
    wait_queue_len(&lock, 1);
    let () = ctx.server.cmd("SET", &[name.as_bytes(), b"not a lock"]);
    let result = waiter.join().unwrap();
    assert!(
        matches!(result, Err(redguard::Error::WrongType { .. })),
        "{result:?}"
    );
    assert!(no_trace(&ctx.server, &name));
    drop(guard); // its unlock fails on the string: logged, no panic
}

/// Only the queue head may take a free lock; a head whose deadline passed
/// is pruned by the next acquire; an entry without a deadline never blocks.
#[test]
fn fair_free_lock_goes_to_the_head_and_stale_heads_are_pruned() {
    let ctx = TestContext::new();
    let name = unique_name("fair-ghost");
    // A 10 s poll interval: only the time until the head's deadline, which
    // the busy acquire reports, bounds the wait for the ghost to go.
    let client = test_builder(&ctx.server.url())
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let lock = client.fair_lock(&name);
    let ghost_deadline = server_now_ms(&ctx.server) + 1_000;
    let deadline = ghost_deadline.to_string();
    let () = ctx.server.cmd(
        "ZADD",
        &[&timeout_key(&name), deadline.as_bytes(), b"ghost:1"],
    );
    let _: u64 = ctx.server.cmd("RPUSH", &[&queue_key(&name), b"ghost:1"]);

    assert!(
        lock.try_lock().unwrap().is_none(),
        "the lock is free, but promised to the queue head"
    );
    let started = Instant::now();
    let calls = ctx.server.command_calls(&["evalsha", "eval"]);
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("acquired once the dead head is pruned");
    let waited = started.elapsed();
    // It slept until the head's deadline instead of trying again and again.
    let attempts = ctx.server.command_calls(&["evalsha", "eval"]) - calls;
    assert!(attempts < 10, "{attempts} script calls while waiting");
    assert!(
        server_now_ms(&ctx.server) >= ghost_deadline,
        "acquired before the head's deadline"
    );
    assert!(waited <= ms(1_000 + 600), "waited {waited:?}");
    assert!(no_trace(&ctx.server, &name), "the ghost was pruned");
    drop(guard);

    // A queue entry without a deadline is dropped when it reaches the head.
    let _: u64 = ctx.server.cmd("RPUSH", &[&queue_key(&name), b"ghost:2"]);
    let guard = lock.try_lock().unwrap().expect("entry without deadline");
    assert!(no_trace(&ctx.server, &name));
    drop(guard);

    // The caller's own entry is never dropped as one without a deadline: at
    // the head, ahead of a live waiter, it keeps its turn.
    let me = client.holder_id();
    let live = (server_now_ms(&ctx.server) + 60_000).to_string();
    let () = ctx
        .server
        .cmd("ZADD", &[&timeout_key(&name), live.as_bytes(), b"live:1"]);
    let _: u64 = ctx.server.cmd(
        "RPUSH",
        &[&queue_key(&name), me.as_str().as_bytes(), b"live:1"],
    );
    let guard = lock.try_lock().unwrap().expect("the head's turn");
    let queue: Vec<String> = ctx.server.cmd("LRANGE", &[&queue_key(&name), b"0", b"-1"]);
    assert_eq!(queue, ["live:1"], "the live waiter is next");
    drop(guard);

    // Entries someone else left without a deadline, while the lock is held:
    // the caller's own gets one at its first attempt (no script error), and
    // one behind the caller is not given one when the caller raises its
    // own stale deadline (nor when it leaves).
    let name = unique_name("fair-no-deadline");
    let lock = client.fair_lock(&name);
    let _held = ctx.other_client().fair_lock(&name).lock().unwrap();
    let _: u64 = ctx
        .server
        .cmd("DEL", &[&queue_key(&name), &timeout_key(&name)]);
    let _: u64 = ctx.server.cmd(
        "RPUSH",
        &[&queue_key(&name), me.as_str().as_bytes(), b"ghost:3"],
    );
    assert!(lock.try_lock_for(ms(100)).unwrap().is_none());
    let stale = (server_now_ms(&ctx.server) - 1_000).to_string();
    let () = ctx.server.cmd(
        "ZADD",
        &[
            &timeout_key(&name),
            stale.as_bytes(),
            me.as_str().as_bytes(),
        ],
    );
    let _: u64 = ctx.server.cmd(
        "RPUSH",
        &[&queue_key(&name), me.as_str().as_bytes(), b"ghost:3"],
    );
    assert!(lock.try_lock_for(ms(100)).unwrap().is_none());
    let ghost: Option<f64> = ctx.server.cmd("ZSCORE", &[&timeout_key(&name), b"ghost:3"]);
    assert_eq!(ghost, None, "an entry without a deadline was given one");
}

/// On each release exactly one waiter is woken: one message, on the next
/// waiter's own channel, and no script call by anyone else.
#[test]
fn fair_release_wakes_exactly_one_waiter() {
    const WAITERS: usize = 5;
    let server = RedisServer::start();
    // Long poll interval and lease: a waiter that runs a script between a
    // release and the next grant can only have been woken by a message.
    let client = test_builder(&server.url())
        .poll_interval(Duration::from_secs(30))
        .build()
        .unwrap();
    let lease = Duration::from_secs(20);
    // Load every script once, so that no NOSCRIPT retry is counted.
    {
        let warm = client.fair_lock(unique_name("warm")).with_lease(lease);
        let g = warm.lock().unwrap();
        let w = warm;
        thread::spawn(move || assert!(w.try_lock_for(ms(50)).unwrap().is_none()))
            .join()
            .unwrap();
        g.unlock().unwrap();
    }
    let name = unique_name("fair-herd");
    let lock = client.fair_lock(&name).with_lease(lease);

    let mut monitor = server.conn();
    monitor
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut pubsub = monitor.as_pubsub();
    pubsub
        .psubscribe(format!("redisson_lock__channel:{{{name}}}*"))
        .unwrap();
    let mut messages = |within: Duration| -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while Instant::now() < deadline {
            if let Ok(msg) = pubsub.get_message() {
                got.push(msg.get_channel_name().to_owned());
            }
        }
        got
    };

    let holder = lock.lock().unwrap();
    let (acquired_tx, acquired_rx) = mpsc::channel::<usize>();
    let mut release_txs = Vec::new();
    let mut ids = Vec::new();
    let mut threads = Vec::new();
    for i in 0..WAITERS {
        let waiter = lock.clone();
        let acquired_tx = acquired_tx.clone();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (id_tx, id_rx) = mpsc::channel();
        release_txs.push(release_tx);
        threads.push(thread::spawn(move || {
            id_tx
                .send(waiter.client().holder_id().as_str().to_owned())
                .unwrap();
            let guard = waiter
                .try_lock_for(Duration::from_secs(15))
                .unwrap()
                .expect("queued waiter acquires");
            acquired_tx.send(i).unwrap();
            release_rx.recv().unwrap();
            guard.unlock().unwrap();
        }));
        ids.push(id_rx.recv().unwrap());
        wait_queue_len(&lock, i + 1);
    }
    // Every waiter has made its attempts (enqueue, then again once its
    // channel is subscribed) and sleeps: the script count stands still.
    let mut last = server.command_calls(&["eval", "evalsha"]);
    let mut still = 0;
    assert!(wait_until(Duration::from_secs(5), || {
        let now = server.command_calls(&["eval", "evalsha"]);
        still = if now == last { still + 1 } else { 0 };
        last = now;
        still >= 20
    }));
    assert_eq!(client.stats().waiters, WAITERS);

    let mut holder = Some(holder);
    for next in 0..WAITERS {
        let before = server.command_calls(&["eval", "evalsha"]);
        let _ = messages(Duration::ZERO);
        if next == 0 {
            holder.take().unwrap().unlock().unwrap();
        } else {
            release_txs[next - 1].send(()).unwrap();
        }
        let woken = acquired_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(woken, next, "grant order");
        let calls = server.command_calls(&["eval", "evalsha"]) - before;
        assert_eq!(calls, 2, "release {next}: one release and one acquire only");
        let published = messages(ms(100));
        let expected = format!("redisson_lock__channel:{{{name}}}:{}", ids[next]);
        assert_eq!(published, vec![expected], "release {next}");
    }
    release_txs[WAITERS - 1].send(()).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert!(messages(ms(100)).is_empty(), "last release: nobody to wake");
    assert!(no_trace(&server, &name));
}

/// A client that shuts down while holding a fair lock releases it and wakes
/// the queue head on its own channel (not after a poll or lease).
#[test]
fn fair_release_at_shutdown_and_force_unlock_wake_the_head() {
    let server = RedisServer::start();
    let slow_poll = || {
        test_builder(&server.url())
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let name = unique_name("fair-shutdown-release");
    let lease = Duration::from_secs(20);
    let holder_client = slow_poll();
    let waiter_client = slow_poll();
    let holder_lock = holder_client.fair_lock(&name).with_lease(lease);
    let w = waiter_client.fair_lock(&name).with_lease(lease);
    let admin_lock = slow_poll().fair_lock(&name);

    let guard = holder_lock.lock().unwrap();
    let waiter = thread::spawn(move || {
        let g = w.try_lock_for(Duration::from_secs(10)).unwrap();
        let at = Instant::now();
        if let Some(g) = g {
            // Keep holding after this thread ends: force_unlock ends it.
            std::mem::forget(g);
            return Some(at);
        }
        None
    });
    wait_queue_len(&admin_lock, 1);
    // The waiter has made its attempts and sleeps: only the wake-up on
    // its channel can get it the lock within the bound (poll 30 s, lease
    // 20 s).
    assert!(server.wait_scripts_idle());
    let shutdown_at = Instant::now();
    holder_client.shutdown();
    let at = waiter.join().unwrap().expect("the head acquires");
    assert!(
        at - shutdown_at < ms(1_000),
        "woken after {:?}",
        at - shutdown_at
    );
    drop(guard); // lost at shutdown: nothing is sent

    // The waiter now holds it; a second waiter queues, and force_unlock
    // wakes that one.
    let w2 = waiter_client.fair_lock(&name).with_lease(lease);
    let second = thread::spawn(move || {
        let g = w2.try_lock_for(Duration::from_secs(10)).unwrap();
        (g.is_some(), Instant::now())
    });
    wait_queue_len(&admin_lock, 1);
    assert!(server.wait_scripts_idle());
    let forced_at = Instant::now();
    assert!(admin_lock.force_unlock().unwrap());
    let (got, at) = second.join().unwrap();
    assert!(got);
    assert!(
        at - forced_at < ms(1_000),
        "woken after {:?}",
        at - forced_at
    );
    waiter_client.shutdown();
}

/// A queue head that leaves (here: its client shuts down) while the lock is
/// free passes the wake-up on to the next waiter at once.
#[test]
fn fair_leaving_head_passes_the_wake_up_on() {
    let server = RedisServer::start();
    // Slow poll and a long lease: only a message wakes a waiter quickly.
    let slow_poll = || {
        test_builder(&server.url())
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let name = unique_name("fair-pass-on");
    let lease = Duration::from_secs(20);
    let holder_client = slow_poll();
    let first_client = slow_poll();
    let second_client = slow_poll();
    let holder = holder_client.fair_lock(&name).with_lease(lease);
    let guard = holder.lock().unwrap();

    let first = first_client.fair_lock(&name).with_lease(lease);
    let first_thread = thread::spawn(move || first.lock().map(|_| ()));
    wait_queue_len(&holder, 1);
    let second = second_client.fair_lock(&name).with_lease(lease);
    let second_thread = thread::spawn(move || {
        let got = second.try_lock_for(Duration::from_secs(10)).unwrap();
        (got.is_some(), Instant::now())
    });
    wait_queue_len(&holder, 2);
    // Both have made their attempts and sleep: a second attempt of the
    // second waiter after the first left would take the lock unwoken.
    assert!(server.wait_scripts_idle());

    // The lock frees silently (no unlock message): both waiters sleep on.
    let _: u64 = server.cmd("DEL", &[name.as_bytes()]);
    std::mem::forget(guard);
    let left_at = Instant::now();
    first_client.shutdown();
    let first_result = first_thread.join().unwrap();
    assert!(
        matches!(first_result, Err(redguard::Error::Shutdown)),
        "{first_result:?}"
    );
    let (got, at) = second_thread.join().unwrap();
    assert!(got);
    assert!(at - left_at < ms(1_000), "woken after {:?}", at - left_at);
    assert!(no_trace(&server, &name));
}

/// The head of a free lock's queue that leaves with nobody behind it (the
/// lock freed silently, then the waiter's client shut down): the leave
/// finds no one to wake and ends cleanly, without a trace in the queue and
/// without a failure logged.
#[test]
fn fair_a_leaving_head_with_nobody_behind_it_leaves_cleanly() {
    capture_logs();
    let server = RedisServer::start();
    let slow_poll = || {
        test_builder(&server.url())
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let name = unique_name("fair-last-leaves");
    let holder_client = slow_poll();
    let waiter_client = slow_poll();
    let holder = holder_client
        .fair_lock(&name)
        .with_lease(Duration::from_secs(20));
    let guard = holder.lock().unwrap();
    let waiter = waiter_client.fair_lock(&name);
    let waiting = thread::spawn(move || waiter.lock().map(|_| ()));
    wait_queue_len(&holder, 1);
    assert!(server.wait_scripts_idle(), "the waiter sleeps");
    let _: u64 = server.cmd("DEL", &[name.as_bytes()]);
    std::mem::forget(guard);
    waiter_client.shutdown();
    let result = waiting.join().unwrap();
    assert!(
        matches!(result, Err(redguard::Error::Shutdown)),
        "{result:?}"
    );
    assert!(no_trace(&server, &name));
    let failures: Vec<String> = logged_lines()
        .into_iter()
        .filter(|l| l.contains(&name) && !l.starts_with("DEBUG") && !l.starts_with("TRACE"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The child half of A8: joins the queue of a fair lock and waits there
/// until the parent kills it.
#[test]
#[ignore = "child process of a8_fair_lock_dead_waiter"]
fn a8_child_waiter() {
    let Some(role) = child_role() else { return };
    assert_eq!(role, "a8");
    let url = std::env::var("A8_URL").unwrap();
    let name = std::env::var("A8_LOCK").unwrap();
    let client = test_builder(&url)
        .fair_wait_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    say(&format!("HOLDER {}", client.holder_id()));
    // Bounded, in case the parent dies without killing us.
    let lock = client.fair_lock(&name);
    let got = lock.try_lock_for(Duration::from_secs(30)).unwrap();
    say(&format!("ACQUIRED {}", got.is_some()));
}

/// A8: five queued waiters; the second is a process killed with SIGKILL.
/// The queue skips it once its deadline (fair wait timeout 1 s, server
/// clock) has passed; no deadline of the k-th in line lies further ahead
/// than now + lease + k x wait timeout (Redisson's arithmetic: each joins at
/// the deadline ahead plus its wait); the third waiter acquires within
/// 1 s + L of the first one's release.
#[test]
fn a8_fair_lock_dead_waiter() {
    let wait_timeout = Duration::from_secs(1);
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .fair_wait_timeout(wait_timeout)
        .build()
        .unwrap();
    let name = unique_name("a8");
    let lock = client.fair_lock(&name);
    let holder = lock.lock().unwrap();

    let (event_tx, event_rx) = mpsc::channel::<(usize, &'static str, Instant)>();
    let spawn_waiter = |i: usize| {
        let lock = lock.clone();
        let tx = event_tx.clone();
        thread::spawn(move || {
            let guard = lock
                .try_lock_for(Duration::from_secs(10))
                .unwrap()
                .expect("live waiter acquires");
            tx.send((i, "acquired", Instant::now())).unwrap();
            guard.unlock().unwrap();
            tx.send((i, "released", Instant::now())).unwrap();
        })
    };
    let mut threads = vec![spawn_waiter(1)];
    wait_queue_len(&lock, 1);
    let mut child = ChildTest::spawn(
        "fair_lock::a8_child_waiter",
        "a8",
        &[("A8_URL", &server.url()), ("A8_LOCK", &name)],
    );
    let child_id = child.expect_line("HOLDER ", Duration::from_secs(10));
    let queued = wait_queue_len(&lock, 2);
    assert_eq!(queued[1], child_id);
    for i in 3..=5 {
        threads.push(spawn_waiter(i));
        wait_queue_len(&lock, i);
    }

    // Redisson drift check: each waiter joined at the deadline of the one
    // ahead plus its wait, so the k-th in line lies within now + L + k x
    // wait, and no further.
    let scores: Vec<(String, f64)> =
        server.cmd("ZRANGE", &[&timeout_key(&name), b"0", b"-1", b"WITHSCORES"]);
    assert_eq!(scores.len(), 5);
    let now = server_now_ms(&server);
    for (k, (id, score)) in scores.iter().enumerate() {
        let bound = now + (TEST_WATCHDOG + wait_timeout * (k as u32 + 1)).as_millis() as u64;
        assert!(
            (*score as u64) <= bound,
            "{id}: deadline {score} beyond {bound}"
        );
    }

    child.kill();
    let killed_at = Instant::now();
    let killed_server_ms = server_now_ms(&server);
    holder.unlock().unwrap();
    // #1's grant moves every later deadline (Redisson subtracts one wait
    // timeout from each): read the dead waiter's once #1 has it.
    let first = event_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter #1 acquires");
    assert_eq!((first.0, first.1), (1, "acquired"));
    let dead_deadline: f64 = server.cmd("ZSCORE", &[&timeout_key(&name), child_id.as_bytes()]);
    let mut events = vec![first];
    while events.len() < 8 {
        let e = event_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("every live waiter acquires and releases");
        events.push(e);
    }
    let order: Vec<usize> = events
        .iter()
        .filter(|(_, what, _)| *what == "acquired")
        .map(|(i, _, _)| *i)
        .collect();
    assert_eq!(order, vec![1, 3, 4, 5], "the dead waiter is skipped");
    let released_1 = events
        .iter()
        .find(|(i, what, _)| *i == 1 && *what == "released")
        .unwrap()
        .2;
    let acquired_3 = events
        .iter()
        .find(|(i, what, _)| *i == 3 && *what == "acquired")
        .unwrap()
        .2;
    let gap = acquired_3 - released_1;
    // The dead waiter #2 heads the queue once #1 releases, and is pruned
    // once its deadline (a server-clock score) has passed: not before (that
    // would drop live waiters), and by 1 s + L after the release.
    let acquired_3_server_ms = killed_server_ms + (acquired_3 - killed_at).as_millis() as u64;
    let early = dead_deadline as i64 - acquired_3_server_ms as i64;
    eprintln!(
        "A8: waiter #3 acquired {gap:?} after #1 released, {} ms after the dead waiter's deadline",
        -early
    );
    // 10 ms for reading the server clock and the instants apart.
    assert!(
        early <= 10,
        "the dead waiter was skipped {early} ms before its deadline"
    );
    // Redisson's arithmetic leaves the dead waiter's deadline at most L +
    // wait after #1's release (#1 joined at the lock's expiry plus its
    // wait, and its grant takes one wait off); #3 attempts right after that
    // deadline, given 1 s here for a loaded machine (617 ms late was seen
    // at load 12). Without the pruning, #3 would wait out its 10 s.
    assert!(
        gap <= wait_timeout + TEST_WATCHDOG + ms(1_000),
        "waiter #3 waited {gap:?} after #1 released"
    );
    for t in threads {
        t.join().unwrap();
    }
    assert!(no_trace(&server, &name), "dead waiter pruned");
}

/// A fair waiter sleeps until the holder's lease ends: the holder's fixed
/// lease runs out (no unlock message comes), and the waiter, whose poll
/// interval is 10 s, acquires right after it.
#[test]
fn fair_waiter_sleeps_until_the_holders_lease_ends() {
    let ctx = TestContext::new();
    let name = unique_name("fair-ttl");
    let holder = ctx.other_client();
    let _held = holder.fair_lock(&name).with_lease(ms(500)).lock().unwrap();
    let waiter = test_builder(&ctx.server.url())
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let got = waiter
        .fair_lock(&name)
        .try_lock_for(Duration::from_secs(5))
        .unwrap();
    let waited = started.elapsed();
    assert!(got.is_some(), "never acquired");
    assert!(waited < ms(500 + 400), "acquired after {waited:?}");
}

/// A waiter that leaves the queue wakes the next one only when it was the
/// head the free lock was promised to: not when the lock is held (the next
/// waiter is woken by the release), not when another waiter is the head.
#[test]
fn fair_a_leaving_waiter_wakes_no_one_unless_it_was_the_promised_head() {
    use crate::reentrant::Listener;
    let ctx = TestContext::new();
    let channel = |name: &str, id: &str| format!("redisson_lock__channel:{{{name}}}:{id}");
    // Live entries behind a waiter: a deadline beyond the waiter's own plus
    // its wait (300 s), which its leaving takes off again (Redisson's
    // arithmetic), so that they stay live after it.
    let live = |name: &str, id: &str| {
        let deadline = (server_now_ms(&ctx.server) + 900_000).to_string();
        let () = ctx.server.cmd(
            "ZADD",
            &[&timeout_key(name), deadline.as_bytes(), id.as_bytes()],
        );
        let _: u64 = ctx.server.cmd("RPUSH", &[&queue_key(name), id.as_bytes()]);
    };

    // Held: the head times out and leaves; the waiter behind it is told
    // nothing (the holder's release will tell it).
    let held = unique_name("fair-leave-held");
    let holder = ctx.other_client();
    let _guard = holder.fair_lock(&held).lock().unwrap();
    let lock = ctx.client.fair_lock(&held);
    let head = thread::spawn({
        let lock = lock.clone();
        move || lock.try_lock_for(ms(500)).unwrap().is_none()
    });
    wait_queue_len(&lock, 1);
    live(&held, "next:1");
    let next = Listener::start(&ctx.server, channel(&held, "next:1").into_bytes());
    assert!(head.join().unwrap(), "the head timed out");
    crate::support::sleep(ms(100));
    assert!(next.messages().is_empty(), "woken while the lock is held");

    // Free, promised to a live head: a waiter behind it times out and
    // leaves; the head is told nothing more.
    let free = unique_name("fair-leave-free");
    live(&free, "head:1");
    let promised = Listener::start(&ctx.server, channel(&free, "head:1").into_bytes());
    let got = ctx.client.fair_lock(&free).try_lock_for(ms(300)).unwrap();
    assert!(got.is_none(), "the lock is promised to the head");
    crate::support::sleep(ms(100));
    assert!(
        promised.messages().is_empty(),
        "woken by a waiter behind it"
    );
}

/// A queued waiter attempts again every third of the fair wait timeout,
/// whatever its poll interval and the holder's lease, so that the others
/// never prune it as dead (each attempt raises its deadline to at least
/// now + the wait timeout). Wait timeout 2 s, poll interval 60 s, a holder
/// whose lease (30 s) outlives the test; the waiter joins behind a ghost
/// entry whose deadline is 300 ms ahead, so that its own deadline (the
/// ghost's plus its wait, Redisson's arithmetic) is 2.3 s ahead, not the
/// lock's expiry plus its wait; a third client's attempts, each of which
/// prunes the heads whose deadline passed, run every 100 ms for 4.5 s: the
/// waiter stays queued throughout. With a heartbeat of 3 × the wait
/// timeout it would be pruned 2.3 s after joining.
#[test]
fn a_queued_waiter_keeps_its_place_with_a_heartbeat_of_a_third_of_the_wait_timeout() {
    let server = RedisServer::start();
    let build = || {
        test_builder(&server.url())
            .watchdog_timeout(Duration::from_secs(30))
            .poll_interval(Duration::from_secs(60))
            .fair_wait_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let (holder, waiter, pruner) = (build(), build(), build());
    let name = unique_name("fair-heartbeat");
    let held = holder.fair_lock(&name).lock().unwrap();
    let ghost = (server_now_ms(&server) + 300).to_string();
    let () = server.cmd("ZADD", &[&timeout_key(&name), ghost.as_bytes(), b"ghost:1"]);
    let _: u64 = server.cmd("RPUSH", &[&queue_key(&name), b"ghost:1"]);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .fair_lock(&name)
                .try_lock_for(Duration::from_secs(20))
                .unwrap()
                .map(redguard::LockGuard::unlock)
        });
        let queued = wait_queue_len(&holder.fair_lock(&name), 2)[1..].to_vec();
        assert!(wait_until(Duration::from_secs(5), || {
            assert!(pruner.fair_lock(&name).try_lock().unwrap().is_none());
            let queue: Vec<String> = server.cmd("LRANGE", &[&queue_key(&name), b"0", b"-1"]);
            queue == queued
        }));
        let until = Instant::now() + Duration::from_millis(4500);
        let mut checks = 0;
        while Instant::now() < until {
            assert!(pruner.fair_lock(&name).try_lock().unwrap().is_none());
            let queue: Vec<String> = server.cmd("LRANGE", &[&queue_key(&name), b"0", b"-1"]);
            assert_eq!(queue, queued, "the queue after {checks} pruning attempts");
            checks += 1;
            crate::support::sleep(ms(100));
        }
        held.unlock().unwrap();
        assert!(matches!(waiting.join().unwrap(), Some(Ok(()))));
    });
}
