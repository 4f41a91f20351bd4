//! MultiLock: all-or-nothing over locks on several servers, canonical order,
//! shared wait budget, release and loss reporting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use redguard::{Client, Error, MultiLock};

use crate::support::{RedisServer, ms, sleep, test_builder, test_client, unique_name, wait_until};

/// Two servers with one test client each.
struct Two {
    servers: [RedisServer; 2],
    clients: [Client; 2],
}

impl Two {
    /// Which of the two servers `lock` lives on.
    fn index_of(&self, lock: &redguard::Lock) -> usize {
        self.clients
            .iter()
            .position(|c| c.same_client(lock.client()))
            .unwrap()
    }
}

fn two() -> Two {
    let servers = [RedisServer::start(), RedisServer::start()];
    let clients = [
        test_client(&servers[0].url()),
        test_client(&servers[1].url()),
    ];
    Two { servers, clients }
}

/// Holds `lock` on a thread of its own until the returned sender is used
/// (or dropped); returns once it is held.
fn hold_elsewhere(lock: redguard::Lock) -> (mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = thread::spawn(move || {
        let guard = lock.lock().unwrap();
        held_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(Duration::from_secs(20));
        guard.unlock().unwrap();
    });
    held_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    (release_tx, holder)
}

#[test]
fn multi_lock_takes_all_and_releases_all() {
    let t = two();
    let (a, b, c) = (unique_name("ma"), unique_name("mb"), unique_name("mc"));
    let multi = MultiLock::new([
        t.clients[1].lock(&c),
        t.clients[0].lock(&a),
        t.clients[1].lock(&b),
    ]);
    let guard = multi.lock().unwrap();
    assert_eq!(guard.guards().len(), 3);
    assert!(t.servers[0].exists(&a));
    assert!(t.servers[1].exists(&b));
    assert!(t.servers[1].exists(&c));
    guard.check().unwrap();
    assert!(guard.valid_for() > Duration::ZERO);
    for lock in multi.locks() {
        assert_eq!(lock.hold_count().unwrap(), 1);
    }
    guard.unlock().unwrap();
    assert!(!t.servers[0].exists(&a));
    assert!(!t.servers[1].exists(&b));
    assert!(!t.servers[1].exists(&c));

    // Dropping releases too.
    drop(multi.lock().unwrap());
    assert!(!t.servers[0].exists(&a));
    assert!(!t.servers[1].exists(&c));
}

/// Two multi-locks over {a, b} and {b, a} (on two servers), 4 threads each:
/// no deadlock, and the critical section is exclusive (occupancy probe and
/// a non-atomic counter).
#[test]
fn multi_lock_opposite_orders_never_deadlock() {
    const THREADS: usize = 8;
    const ROUNDS: u64 = 100;
    let t = two();
    // Contention, not faults, is under test: timings that a loaded machine
    // cannot trip.
    let tolerant = |server: &RedisServer| {
        test_builder(&server.url())
            .watchdog_timeout(Duration::from_secs(3))
            .response_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let clients = [tolerant(&t.servers[0]), tolerant(&t.servers[1])];
    let (a, b) = (unique_name("dl-a"), unique_name("dl-b"));
    let forward = Arc::new(MultiLock::new([clients[0].lock(&a), clients[1].lock(&b)]));
    let backward = Arc::new(MultiLock::new([clients[1].lock(&b), clients[0].lock(&a)]));
    let counter = unique_name("dl-n");
    let occupancy = unique_name("dl-occ");
    let max_occupancy = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let started = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let multi = if i % 2 == 0 {
                forward.clone()
            } else {
                backward.clone()
            };
            let url = t.servers[0].url();
            let (counter, occupancy) = (counter.clone(), occupancy.clone());
            let max_occupancy = max_occupancy.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut conn = redis::Client::open(url)
                    .unwrap()
                    .get_connection_with_timeout(ms(2000))
                    .unwrap();
                barrier.wait();
                for _ in 0..ROUNDS {
                    let guard = multi
                        .try_lock_for(Duration::from_secs(8))
                        .unwrap()
                        .expect("a multi-lock waited 8 s: deadlock or starvation");
                    let occ: u64 = redis::cmd("INCR").arg(&occupancy).query(&mut conn).unwrap();
                    max_occupancy.fetch_max(occ, Ordering::Relaxed);
                    crate::support::racy_increment(&mut conn, &counter);
                    let _: i64 = redis::cmd("DECR").arg(&occupancy).query(&mut conn).unwrap();
                    guard.check().unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let total: u64 = t.servers[0].cmd("GET", &[counter.as_bytes()]);
    assert_eq!(total, THREADS as u64 * ROUNDS);
    assert_eq!(max_occupancy.load(Ordering::Relaxed), 1);
    assert!(!t.servers[0].exists(&a));
    assert!(!t.servers[1].exists(&b));
    eprintln!(
        "multi-lock: {} acquisitions over 2 servers in {:?}",
        THREADS as u64 * ROUNDS,
        started.elapsed()
    );
}

#[test]
fn multi_lock_busy_last_lock_leaves_none_held() {
    let t = two();
    let names = [
        unique_name("fl-a"),
        unique_name("fl-b"),
        unique_name("fl-c"),
    ];
    let multi = MultiLock::new([
        t.clients[0].lock(&names[0]),
        t.clients[0].lock(&names[1]),
        t.clients[1].lock(&names[2]),
    ]);
    // The last lock in canonical order, held by another client.
    let last = multi.locks().last().unwrap().clone();
    let other = test_client(&t.servers[t.index_of(&last)].url());
    let (release, holder) = hold_elsewhere(other.lock(last.name()));
    let earlier: Vec<redguard::Lock> = multi.locks().take(2).cloned().collect();

    assert!(multi.try_lock().unwrap().is_none());
    for lock in &earlier {
        assert!(!lock.is_locked().unwrap(), "an earlier lock is still held");
    }

    let started = Instant::now();
    assert!(multi.try_lock_for(ms(300)).unwrap().is_none());
    let waited = started.elapsed();
    assert!(waited >= ms(300), "gave up after {waited:?}");
    assert!(waited < ms(1500), "overran the budget: {waited:?}");
    for lock in &earlier {
        assert!(!lock.is_locked().unwrap(), "an earlier lock is still held");
    }

    // Released while the multi-lock waits: the waiter is woken and takes all.
    let releaser = thread::spawn(move || {
        sleep(ms(200));
        release.send(()).unwrap();
    });
    let started = Instant::now();
    let guard = multi
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("acquired after the release");
    assert!(started.elapsed() < Duration::from_secs(3));
    releaser.join().unwrap();
    holder.join().unwrap();
    guard.unlock().unwrap();
}

/// A server down under the last lock: `try_lock` fails at once, a budget
/// is spent retrying, and no earlier lock stays held; once the server is
/// back, a waiting multi-lock gets through.
#[test]
fn multi_lock_error_on_last_lock_releases_earlier_ones() {
    let mut t = two();
    let names = [unique_name("el-a"), unique_name("el-b")];
    let multi = MultiLock::new([t.clients[0].lock(&names[0]), t.clients[1].lock(&names[1])]);
    let locks: Vec<redguard::Lock> = multi.locks().cloned().collect();
    // Stop the server of the last lock in canonical order.
    let index = t.index_of(&locks[1]);
    t.servers[index].kill();

    let started = Instant::now();
    let err = multi.try_lock().unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        !locks[0].is_locked().unwrap(),
        "the first lock is still held"
    );

    let started = Instant::now();
    let err = multi.try_lock_for(ms(500)).unwrap_err();
    let took = started.elapsed();
    // The budget ran out while the server was down: a timeout naming the
    // last failure.
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(took >= ms(500) && took < ms(1500), "{took:?}");
    assert!(
        !locks[0].is_locked().unwrap(),
        "the first lock is still held"
    );

    // Transient errors are retried within the budget.
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let got = multi
            .try_lock_for(Duration::from_secs(5))
            .map(|g| g.is_some());
        tx.send(()).unwrap();
        got
    });
    sleep(ms(300));
    assert!(rx.try_recv().is_err(), "gave up while the server was down");
    t.servers[index].start_again();
    assert!(
        waiter.join().unwrap().unwrap(),
        "not acquired after the restart"
    );
}

/// Losing one lock makes the multi-lock lost; unlock releases the rest and
/// names the failure.
#[test]
fn multi_lock_reports_loss_and_unlock_failures() {
    let t = two();
    let names = [
        unique_name("lo-a"),
        unique_name("lo-b"),
        unique_name("lo-c"),
    ];
    let multi = MultiLock::new([
        t.clients[0].lock(&names[0]),
        t.clients[1].lock(&names[1]),
        t.clients[1].lock(&names[2]),
    ]);
    let guard = multi.lock().unwrap();
    // Someone deletes one of the locks: the next renewal (every 200 ms)
    // finds it gone.
    assert_eq!(t.servers[1].cmd::<i64>("DEL", &[names[1].as_bytes()]), 1);
    assert!(
        wait_until(Duration::from_secs(3), || guard.is_lost()),
        "the loss was not noticed"
    );
    let err = guard.check().unwrap_err();
    assert!(err.is_lock_lost(), "{err:?}");
    assert_eq!(guard.valid_for(), Duration::ZERO);
    match guard.unlock() {
        Err(Error::Unlock { total, failures }) => {
            assert_eq!(total, 3);
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert!(failures[0].0.starts_with(&names[1]), "{failures:?}");
            assert!(failures[0].1.is_lock_lost(), "{failures:?}");
        }
        other => panic!("expected Error::Unlock, got {other:?}"),
    }
    assert!(!t.servers[0].exists(&names[0]));
    assert!(!t.servers[1].exists(&names[2]));
}

#[test]
fn multi_lock_refuses_the_same_lock_through_two_clients() {
    let t = two();
    let other = test_client(&t.servers[0].url());
    let name = unique_name("dup");
    let multi = MultiLock::new([t.clients[0].lock(&name), other.lock(&name)]);
    assert!(matches!(multi.try_lock(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        MultiLock::new(Vec::new()).try_lock(),
        Err(Error::InvalidArgument(_))
    ));
    // The same handle twice is a reentrant hold.
    let twice = MultiLock::new([t.clients[0].lock(&name), t.clients[0].lock(&name)]);
    let guard = twice.try_lock().unwrap().unwrap();
    assert_eq!(t.clients[0].lock(&name).hold_count().unwrap(), 2);
    guard.unlock().unwrap();
    assert!(!t.servers[0].exists(&name));
}
