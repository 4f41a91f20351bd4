//! A release that meets a failover is not lost (issue 18, item 2), on one
//! server behind a fault proxy: while the proxy refuses connections (and
//! the server has dropped the client's), an unlock, a permit release, an
//! `extend` and a run-once completion fail as they would against a dead
//! master, and the watchdog retries them until the server is back or the
//! lease is over.

use std::time::{Duration, Instant};

use crate::support::{FaultProxy, Mode, RedisServer, ms, test_builder, unique_name, wait_until};

/// Lease of the locks here: long enough that only a release frees them
/// within a test.
const LEASE: Duration = Duration::from_secs(10);

/// A server, a proxy in front of it and a client through the proxy.
struct Bed {
    server: RedisServer,
    proxy: FaultProxy,
    client: redguard::Client,
}

impl Bed {
    fn new() -> Bed {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = test_builder(&proxy.url())
            .watchdog_timeout(LEASE)
            .build()
            .unwrap();
        Bed {
            server,
            proxy,
            client,
        }
    }

    /// The server is unreachable: new connects are refused and the open
    /// ones are closed by the server.
    fn cut(&self) {
        self.proxy.set_mode(Mode::Refuse);
        let _: i64 = self.server.cmd("CLIENT", &[b"KILL", b"TYPE", b"normal"]);
    }

    /// The server is reachable again.
    fn heal(&self) {
        self.proxy.set_mode(Mode::Pass);
    }

    fn exists(&self, key: &str) -> bool {
        self.server.exists(key)
    }
}

/// R1: 20 locks unlocked while the server is unreachable: each `unlock`
/// returns `Ok` at once, the keys stay, the releases are pending; once the
/// server is back every key is gone within a second, and
/// `await_releases` says none is left.
#[test]
fn r1_unlocks_that_meet_a_dead_server_are_retried_until_it_is_back() {
    let bed = Bed::new();
    let names: Vec<String> = (0..20).map(|_| unique_name("r1")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| bed.client.lock(n).lock().unwrap())
        .collect();
    bed.cut();
    let started = Instant::now();
    for guard in guards {
        guard.unlock().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the unlocks took {:?}",
        started.elapsed()
    );
    assert_eq!(bed.client.stats().pending_releases, names.len());
    assert!(!bed.client.await_releases(ms(300)));
    assert!(names.iter().all(|n| bed.exists(n)), "a key went meanwhile");

    bed.heal();
    let back = Instant::now();
    assert!(
        wait_until(Duration::from_secs(5), || names
            .iter()
            .all(|n| !bed.exists(n))),
        "the retried releases did not go through"
    );
    let took = back.elapsed();
    eprintln!("R1: 20 releases retried, all through {took:?} after the server came back");
    assert!(
        took < ms(1000),
        "the releases went through only after {took:?}"
    );
    assert!(bed.client.await_releases(ms(500)));
    assert_eq!(bed.client.stats().pending_releases, 0);
}

/// R2: a release retried while the server stays unreachable gives up when
/// the lease is over (the key has expired by then), not later.
#[test]
fn r2_a_retried_release_ends_with_its_lease() {
    let bed = Bed::new();
    let lease = Duration::from_secs(3);
    let name = unique_name("r2");
    let guard = bed.client.lock(&name).with_lease(lease).lock().unwrap();
    let valid = guard.valid_for();
    bed.cut();
    let started = Instant::now();
    guard.unlock().unwrap();
    assert!(bed.client.stats().pending_releases == 1);
    assert!(bed.client.await_releases(Duration::from_secs(5)));
    let took = started.elapsed();
    eprintln!("R2: gave up {took:?} after the unlock, lease valid for {valid:?} then");
    assert!(
        took + ms(100) >= valid && took <= valid + ms(100),
        "gave up after {took:?}, the lease was valid for {valid:?}"
    );
    bed.heal();
    // The local deadline comes the clock-drift allowance before the key's.
    assert!(
        wait_until(ms(500), || !bed.exists(&name)),
        "the key outlived its lease"
    );
}

/// R3: the thread whose release is being retried takes the lock again:
/// it waits for its release first, then gets a fresh hold (count 1 on the
/// server, not a re-entry that the retry would then delete).
#[test]
fn r3_the_same_thread_waits_for_its_pending_release() {
    let bed = Bed::new();
    let name = unique_name("r3");
    let lock = bed.client.lock(&name);
    let guard = lock.lock().unwrap();
    let holder = guard.holder_id().as_str().to_owned();
    bed.cut();
    guard.unlock().unwrap();
    assert_eq!(bed.client.stats().pending_releases, 1);
    let started = Instant::now();
    let again = std::thread::scope(|s| {
        s.spawn(|| {
            crate::support::sleep(ms(300));
            bed.heal();
        });
        lock.try_lock_for(Duration::from_secs(5))
    });
    let again = again
        .unwrap()
        .expect("the lock, once the release went through");
    let waited = started.elapsed();
    assert!(waited >= ms(300), "took it again after {waited:?}");
    assert_eq!(bed.client.stats().pending_releases, 0);
    let count: Option<u64> = bed
        .server
        .cmd("HGET", &[name.as_bytes(), holder.as_bytes()]);
    assert_eq!(count, Some(1), "the new hold");
    assert_eq!(lock.hold_count().unwrap(), 1);
    // The new hold outlives the old release.
    crate::support::sleep(ms(300));
    assert!(bed.exists(&name));
    again.check().unwrap();
    again.unlock().unwrap();
    assert!(!bed.exists(&name));
}

/// R3 with two locks: a second release retried on the same thread keeps
/// the first one's pending too, and the thread waits for the first one's
/// before it takes that lock again.
#[test]
fn r3_a_second_pending_release_keeps_the_first_one_waited_for() {
    let bed = Bed::new();
    let name = unique_name("r3-first");
    let first = bed.client.lock(&name);
    let second = bed.client.lock(unique_name("r3-second"));
    let (a, b) = (first.lock().unwrap(), second.lock().unwrap());
    bed.cut();
    a.unlock().unwrap();
    b.unlock().unwrap();
    assert_eq!(bed.client.stats().pending_releases, 2);
    let started = Instant::now();
    let again = std::thread::scope(|s| {
        s.spawn(|| {
            crate::support::sleep(ms(300));
            bed.heal();
        });
        first.try_lock_for(Duration::from_secs(5))
    });
    let again = again
        .unwrap()
        .expect("the lock, once its release went through");
    let waited = started.elapsed();
    assert!(waited >= ms(300), "took it again after {waited:?}");
    assert_eq!(first.hold_count().unwrap(), 1);
    crate::support::sleep(ms(300));
    assert!(bed.exists(&name), "the old release dropped the new hold");
    again.check().unwrap();
    again.unlock().unwrap();
}

/// R4: `extend` while the server is unreachable waits for its retry and
/// succeeds once the server is back; the key and the guard get the new
/// lease.
#[test]
fn r4_extend_is_retried_and_waited_for() {
    let bed = Bed::new();
    let name = unique_name("r4");
    let guard = bed.client.lock(&name).with_lease(LEASE).lock().unwrap();
    bed.cut();
    let started = Instant::now();
    let extended = std::thread::scope(|s| {
        s.spawn(|| {
            crate::support::sleep(ms(300));
            bed.heal();
        });
        guard.extend(Duration::from_secs(30))
    });
    extended.unwrap();
    assert!(started.elapsed() >= ms(300));
    assert!(bed.server.pttl(&name) > 20_000, "the key's lease");
    assert!(
        guard.valid_for() > Duration::from_secs(20),
        "the guard's lease"
    );
    guard.unlock().unwrap();
}

/// R5: a permit given back while the server is unreachable comes back
/// once the server is.
#[test]
fn r5_a_permit_release_is_retried() {
    let bed = Bed::new();
    let name = unique_name("r5");
    let semaphore = bed.client.expiring_semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let permit = semaphore.acquire().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    bed.cut();
    permit.release().unwrap();
    assert_eq!(bed.client.stats().pending_releases, 1);
    bed.heal();
    assert!(bed.client.await_releases(Duration::from_secs(5)));
    assert_eq!(semaphore.available_permits().unwrap(), 1);
}

/// R6: a run-once completion while the server is unreachable waits for its
/// retry and records the outcome once the server is back.
#[test]
fn r6_a_completion_is_retried_and_waited_for() {
    let bed = Bed::new();
    let key = unique_name("r6");
    let redguard::Once::Run(run) = bed.client.once(&key, Duration::from_secs(60)).unwrap() else {
        panic!("a fresh key runs");
    };
    bed.cut();
    let completed = std::thread::scope(|s| {
        s.spawn(|| {
            crate::support::sleep(ms(300));
            bed.heal();
        });
        run.complete("done")
    });
    let outcome = completed.unwrap();
    assert_eq!(outcome.value, b"done");
    match bed.client.once(&key, Duration::from_secs(60)).unwrap() {
        redguard::Once::Done(recorded) => assert_eq!(recorded.value, b"done"),
        other => panic!("not recorded: {other:?}"),
    }
}
