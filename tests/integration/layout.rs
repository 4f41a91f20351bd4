//! Redisson wire compatibility: keys, hash fields, ttl, channel, message.

use std::time::{Duration, Instant};

use crate::reentrant::Listener;
use crate::support::{TEST_WATCHDOG, TestContext, ms, test_builder, unique_name, wait_until};

#[test]
fn lock_is_a_hash_of_holder_id_to_count_with_the_lease_as_pttl() {
    let ctx = TestContext::new();
    let name = unique_name("layout");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    let all: Vec<(String, String)> = ctx.server.cmd("HGETALL", &[name.as_bytes()]);
    let want = ctx.client.holder_id().to_string();
    assert_eq!(all, vec![(want.clone(), "1".to_string())]);
    assert_eq!(guard.holder_id().as_str(), want);
    let kind: String = ctx.server.cmd("TYPE", &[name.as_bytes()]);
    assert_eq!(kind, "hash");
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    let lease = TEST_WATCHDOG.as_millis() as i64;
    assert!(
        pttl > lease - 250 && pttl <= lease,
        "pttl {pttl} vs lease {lease}"
    );
    // Nothing but the lock key is created (beside the client's holder
    // record, which is no part of the lock).
    let keys: Vec<String> = ctx.server.cmd("KEYS", &[b"*"]);
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| *k != format!("redguard:client:{{{}}}", ctx.client.id()))
        .collect();
    assert_eq!(keys, vec![name]);
    drop(guard);
}

#[test]
fn default_lease_is_the_30s_watchdog_timeout() {
    let ctx = TestContext::new();
    let client = redguard::Client::open(&ctx.server.url()).unwrap();
    assert_eq!(client.watchdog_timeout(), Duration::from_secs(30));
    let name = unique_name("default-lease");
    let lock = client.lock(&name);
    let _g = lock.lock().unwrap();
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    assert!((29_000..=30_000).contains(&pttl), "pttl {pttl}");
}

#[test]
fn a_raw_subscriber_gets_0_on_the_redisson_channel_at_release() {
    let ctx = TestContext::new();
    let name = unique_name("channel");
    let listener = Listener::start(
        &ctx.server,
        format!("redisson_lock__channel:{{{name}}}").into_bytes(),
    );
    let lock = ctx.client.lock(&name);
    lock.lock().unwrap().unlock().unwrap();
    assert_eq!(listener.collect(1, ms(100)), vec![b"0".to_vec()]);
}

#[test]
fn a_lock_written_redisson_style_by_another_holder_excludes_us() {
    // What a Java Redisson client leaves behind while holding the lock.
    let ctx = TestContext::new();
    let name = unique_name("redisson-held");
    let foreign = "6f0a2c54-1a57-4d1c-9d07-0d5d8d6f3b2a:57";
    ctx.server
        .cmd::<i64>("HSET", &[name.as_bytes(), foreign.as_bytes(), b"1"]);
    ctx.server.cmd::<i64>("PEXPIRE", &[name.as_bytes(), b"400"]);
    let lock = ctx.client.lock(&name);
    assert!(lock.try_lock().unwrap().is_none());
    let holders = lock.holders().unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!((holders[0].0.as_str(), holders[0].1), (foreign, 1));
    // Released by the lease: we get it afterwards.
    let g = lock.try_lock_for(Duration::from_secs(3)).unwrap();
    assert!(g.is_some());
}

/// `force_unlock` wakes the waiters at once: the holder's lease (30 s) and
/// the waiter's poll interval (30 s) are both far beyond the bound, so
/// only the unlock message can wake it in time.
#[test]
fn force_unlock_wakes_a_waiter_of_another_client_at_once() {
    let ctx = TestContext::new();
    let name = unique_name("force-wake");
    let slow = || {
        test_builder(&ctx.server.url())
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let holder = slow();
    let _held = holder
        .lock(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .unwrap();
    let waiters = slow();
    let waiter = waiters.lock(&name);
    let waiting = std::thread::spawn(move || {
        let got = waiter.try_lock_for(Duration::from_secs(10)).unwrap();
        (got.map(|g| g.unlock()), Instant::now())
    });
    assert!(wait_until(Duration::from_secs(5), || {
        let s = waiters.stats();
        s.waiters == 1 && s.subscribed_channels == 1
    }));
    assert!(ctx.server.wait_scripts_idle(), "the waiter sleeps");
    let forced = Instant::now();
    assert!(ctx.other_client().lock(&name).force_unlock().unwrap());
    let (got, at) = waiting.join().unwrap();
    assert!(matches!(got, Some(Ok(()))), "the waiter acquires: {got:?}");
    assert!(at - forced < ms(1_000), "woken after {:?}", at - forced);
}

#[test]
fn force_unlock_deletes_whoever_holds_and_wakes() {
    let ctx = TestContext::new();
    let name = unique_name("force");
    let lock = ctx.client.lock(&name);
    let g = lock.lock().unwrap();
    let other = ctx.other_client().lock(&name);
    assert!(other.force_unlock().unwrap());
    assert!(!lock.is_locked().unwrap());
    assert!(!other.force_unlock().unwrap(), "nothing left to delete");
    // The old holder finds out at its next renewal (every 200 ms here).
    assert!(crate::support::wait_until(Duration::from_secs(2), || g.is_lost()));
    assert!(g.check().unwrap_err().is_lock_lost());
    assert!(g.unlock().unwrap_err().is_lock_lost());
}

/// `inspect` reads a fair lock's whole queue in order, each waiter with
/// its own deadline (none without a score, or with one that is no time:
/// infinite or negative), and takes a queue without any deadline for a
/// fair lock too; a plain held lock is `Reentrant` and a
/// free name `Free`, not a fair lock with an empty queue.
#[test]
fn inspect_reads_every_queued_waiter_with_its_own_deadline() {
    use redguard::LockKind;
    use std::time::{SystemTime, UNIX_EPOCH};
    let ctx = TestContext::new();
    let name = unique_name("inspect-queue");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let _: i64 = ctx.server.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10:1",
            b"1",
        ],
    );
    let waiters = ["w1", "w2", "w3", "w4", "w5", "w6"];
    for w in waiters {
        let _: i64 = ctx.server.cmd("RPUSH", &[queue.as_bytes(), w.as_bytes()]);
    }
    // w4 has no deadline; those of w5 and w6 are no time.
    for (w, at) in [
        ("w1", "4000000000001"),
        ("w2", "4000000000002"),
        ("w3", "4000000000003"),
        ("w5", "+inf"),
        ("w6", "-5"),
    ] {
        let _: i64 = ctx
            .server
            .cmd("ZADD", &[timeouts.as_bytes(), at.as_bytes(), w.as_bytes()]);
    }
    let at = |ms: u64| Some(UNIX_EPOCH + Duration::from_millis(ms));
    let queued = |lock: &redguard::Lock| -> Vec<(String, Option<SystemTime>)> {
        match lock.inspect().unwrap().kind {
            LockKind::Fair { queue } => queue
                .into_iter()
                .map(|w| (w.holder.as_str().to_owned(), w.deadline))
                .collect(),
            other => panic!("not a fair lock: {other:?}"),
        }
    };
    let lock = ctx.client.fair_lock(&name);
    assert_eq!(
        queued(&lock),
        vec![
            ("w1".to_owned(), at(4_000_000_000_001)),
            ("w2".to_owned(), at(4_000_000_000_002)),
            ("w3".to_owned(), at(4_000_000_000_003)),
            ("w4".to_owned(), None),
            ("w5".to_owned(), None),
            ("w6".to_owned(), None),
        ]
    );
    let _: i64 = ctx.server.cmd("DEL", &[timeouts.as_bytes()]);
    assert_eq!(
        queued(&lock),
        waiters.map(|w| (w.to_owned(), None)).to_vec(),
        "a queue without deadlines"
    );

    let plain = ctx.client.lock(unique_name("inspect-plain"));
    assert!(matches!(plain.inspect().unwrap().kind, LockKind::Free));
    let guard = plain.lock().unwrap();
    assert!(matches!(plain.inspect().unwrap().kind, LockKind::Reentrant));
    guard.unlock().unwrap();
}

/// `list_locks` reads what `inspect` reads: a fair lock's whole queue (3
/// waiters, not the first two), a plain held lock as `Reentrant` (not a
/// fair lock with an empty queue), and a read-write lock's waiters on the
/// read-write channel (`redisson_rwlock:{name}`), where they subscribe,
/// not on the plain lock channel.
#[test]
fn list_locks_reads_whole_fair_queues_plain_kinds_and_read_write_waiters() {
    use redguard::LockKind;
    let ctx = TestContext::new();
    let prefix = unique_name("list-kinds");
    let listed = |name: &str| -> redguard::LockInfo {
        let mut all = ctx.client.list_locks(name, false).unwrap().found;
        assert_eq!(all.len(), 1, "{name}: {all:?}");
        all.remove(0)
    };

    let fair = format!("{prefix}-fair");
    let queue = format!("redisson_lock_queue:{{{fair}}}");
    let _: i64 = ctx.server.cmd(
        "HSET",
        &[
            fair.as_bytes(),
            b"5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10:1",
            b"1",
        ],
    );
    let timeouts = format!("redisson_lock_timeout:{{{fair}}}");
    for (w, at) in [
        ("w1", "4000000000001"),
        ("w2", "4000000000002"),
        ("w3", "4000000000003"),
    ] {
        let _: i64 = ctx.server.cmd("RPUSH", &[queue.as_bytes(), w.as_bytes()]);
        let _: i64 = ctx
            .server
            .cmd("ZADD", &[timeouts.as_bytes(), at.as_bytes(), w.as_bytes()]);
    }
    match listed(&fair).kind {
        LockKind::Fair { queue } => assert_eq!(
            queue
                .iter()
                .map(|w| (w.holder.as_str().to_owned(), w.deadline))
                .collect::<Vec<_>>(),
            [1, 2, 3].map(|n| (
                format!("w{n}"),
                Some(std::time::UNIX_EPOCH + Duration::from_millis(4_000_000_000_000 + n))
            ))
        ),
        other => panic!("not a fair lock: {other:?}"),
    }

    let plain = ctx.client.lock(format!("{prefix}-plain"));
    let guard = plain.lock().unwrap();
    let kind = listed(&format!("{prefix}-plain")).kind;
    assert!(matches!(kind, LockKind::Reentrant), "{kind:?}");
    guard.unlock().unwrap();

    let rw_name = format!("{prefix}-rw");
    let writer = ctx.client.read_write_lock(&rw_name).write().lock().unwrap();
    let reader = ctx.other_client();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            reader
                .read_write_lock(&rw_name)
                .read()
                .try_lock_for(Duration::from_secs(20))
                .unwrap()
                .map(|g| g.unlock())
        });
        let mut last = None;
        let subscribed = wait_until(Duration::from_secs(10), || {
            last = listed(&rw_name).subscribers;
            last == Some(1)
        });
        writer.unlock().unwrap();
        assert!(subscribed, "the read waiter's subscription: {last:?}");
        assert!(matches!(waiting.join().unwrap(), Some(Ok(()))));
    });
}
