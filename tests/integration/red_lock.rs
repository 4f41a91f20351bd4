//! RedLock over 3 and 5 spawned masters: quorum, masters down or frozen,
//! masters restarted empty, mutual exclusion across two processes, and the
//! documented violation without persistence (RELIABILITY.md, G1–G7).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redguard::{Client, Error, RedLock};

use crate::support::{
    ChildTest, RedisServer, child_env, child_role, hear, ms, say, test_builder, unique_name,
    wait_until,
};

/// Per-master connect and response timeout of the RedLock clients.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// The worst case of one master in one round: 2 × connect + response
/// timeout (see `RedLock`'s docs).
const NODE_BUDGET: Duration = Duration::from_millis(300);
/// Lease of the RedLock clients: a round over 5 masters may take
/// 5 × 300 ms = 1.5 s, which must fit in half the lease.
const RED_LEASE: Duration = Duration::from_secs(4);

/// A client for a RedLock master: short per-node timeouts, 4 s lease.
fn red_client(url: &str) -> Client {
    test_builder(url)
        .watchdog_timeout(RED_LEASE)
        .response_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap()
}

/// N independent masters and one client per master.
struct Masters {
    servers: Vec<RedisServer>,
    clients: Vec<Client>,
}

impl Masters {
    fn start(n: usize) -> Masters {
        let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let clients = servers.iter().map(|s| red_client(&s.url())).collect();
        Masters { servers, clients }
    }

    /// Another set of clients (other client ids) on the same masters.
    fn other_clients(&self) -> Vec<Client> {
        self.servers.iter().map(|s| red_client(&s.url())).collect()
    }

    /// A RedLock named `name` over every master, with short retry pauses.
    fn red(&self, name: &str) -> RedLock {
        red_over(&self.clients, name)
    }

    /// How many masters hold a key `name`.
    fn holding(&self, name: &str) -> usize {
        self.servers
            .iter()
            .filter(|s| s.is_running() && s.exists(name))
            .count()
    }
}

fn red_over(clients: &[Client], name: &str) -> RedLock {
    RedLock::new(clients.iter().map(|c| c.lock(name))).retry_delay(ms(5), ms(30))
}

/// A hold in Redisson's layout by a holder that is not us, on `server`.
fn foreign_hold(server: &RedisServer, name: &str) {
    let mut conn = server.conn();
    let () = redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg("00000000-0000-0000-0000-000000000000:1")
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(name)
        .arg(60_000)
        .ignore()
        .query(&mut conn)
        .unwrap();
}

/// The hash fields (holder ids) of `name` on `server`.
fn holders(server: &RedisServer, name: &str) -> Vec<String> {
    server.cmd("HKEYS", &[name.as_bytes()])
}

/// G1: for every subset of masters held by someone else (8 masks of 3 and
/// 32 of 5), the lock is granted iff the free masters are a quorum, and a
/// failed round leaves no hold of ours anywhere.
#[test]
fn g1_quorum_masks() {
    let mut checked = 0;
    for n in [3_usize, 5] {
        let m = Masters::start(n);
        let quorum = n / 2 + 1;
        for mask in 0..(1_u32 << n) {
            let name = unique_name(&format!("g1-{n}-{mask}"));
            let red = m.red(&name);
            // `red` tries the masters in canonical order; mask the servers
            // by index in `m`, which is what matters for the outcome.
            for (i, server) in m.servers.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    foreign_hold(server, &name);
                }
            }
            let free = n - mask.count_ones() as usize;
            let guard = red.try_lock().unwrap();
            assert_eq!(
                guard.is_some(),
                free >= quorum,
                "n={n} mask={mask:0n$b} free={free}"
            );
            if let Some(guard) = guard {
                assert_eq!(guard.guards().len(), free);
                guard.check().unwrap();
                let validity = guard.validity();
                assert!(validity > Duration::ZERO && validity <= RED_LEASE);
                guard.unlock().unwrap();
            }
            // No hold of ours is left: masked masters keep exactly the
            // foreign hold, the others have no key.
            for (i, server) in m.servers.iter().enumerate() {
                let fields = holders(server, &name);
                if mask & (1 << i) != 0 {
                    assert_eq!(
                        fields.len(),
                        1,
                        "n={n} mask={mask:0n$b} master {i}: {fields:?}"
                    );
                    assert!(fields[0].starts_with("00000000-"));
                } else {
                    assert!(
                        fields.is_empty(),
                        "n={n} mask={mask:0n$b} master {i}: {fields:?}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 40);
}

/// Issue case: 1 of 3 masters down, the lock still works.
#[test]
fn one_of_three_masters_down_still_works() {
    let mut m = Masters::start(3);
    m.servers[1].kill();
    let name = unique_name("down1");
    let red = m.red(&name);
    let started = Instant::now();
    let guard = red.lock().unwrap();
    assert!(
        started.elapsed() < 3 * NODE_BUDGET,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(guard.guards().len(), 2);
    guard.check().unwrap();
    assert_eq!(m.holding(&name), 2);
    // Contention still decided by the two live masters.
    let other = red_over(&m.other_clients(), &name);
    assert!(other.try_lock().unwrap().is_none());
    guard.unlock().unwrap();
    assert_eq!(m.holding(&name), 0);
    assert!(other.try_lock().unwrap().is_some());
}

/// G2: 2 of 5 masters killed: acquire, extend and release succeed, each
/// dead master costing at most its per-node budget.
#[test]
fn g2_minority_down() {
    let mut m = Masters::start(5);
    m.servers[0].kill();
    m.servers[3].kill();
    let name = unique_name("g2");
    let red = m.red(&name).with_lease(RED_LEASE);
    let started = Instant::now();
    let guard = red.try_lock().unwrap().expect("3 of 5 masters are up");
    let took = started.elapsed();
    eprintln!("g2: acquire with 2 of 5 masters down took {took:?}");
    assert!(took < 2 * NODE_BUDGET, "acquire took {took:?}");
    assert_eq!(guard.guards().len(), 3);
    assert!(guard.validity() >= RED_LEASE - took - RED_LEASE / 100 - ms(2) - ms(50));
    guard.extend(RED_LEASE * 2).unwrap();
    assert!(guard.validity() > RED_LEASE);
    guard.unlock().unwrap();
    assert_eq!(m.holding(&name), 0);
}

/// Issue case and G3: a majority down fails within the per-node timeouts
/// (not after the wait budget) and leaves no key on the live masters.
#[test]
fn g3_majority_down_fails_fast_and_leaves_no_key() {
    for (n, down) in [(3_usize, vec![0_usize, 2]), (5, vec![1, 2, 4])] {
        let mut m = Masters::start(n);
        for &i in &down {
            m.servers[i].kill();
        }
        let name = unique_name("g3");
        let red = m.red(&name);
        let started = Instant::now();
        let err = red.try_lock_for(Duration::from_secs(5)).unwrap_err();
        let took = started.elapsed();
        eprintln!("g3: {} of {n} masters down: failed in {took:?}", down.len());
        assert!(err.is_connection(), "n={n}: {err:?}");
        assert!(
            took < n as u32 * NODE_BUDGET,
            "n={n}: failing took {took:?}"
        );
        assert_eq!(m.holding(&name), 0, "n={n}: a key was left behind");
    }
}

/// Issue case with frozen masters: 2 of 3 `SIGSTOP`ped fails within the
/// per-node timeouts, and no key is left once they resume.
#[test]
fn majority_frozen_fails_within_node_timeouts() {
    let m = Masters::start(3);
    m.servers[0].sigstop();
    m.servers[2].sigstop();
    let name = unique_name("frozen2");
    let red = m.red(&name);
    let started = Instant::now();
    let err = red.try_lock_for(Duration::from_secs(5)).unwrap_err();
    let took = started.elapsed();
    eprintln!("2 of 3 masters frozen: failed in {took:?}");
    assert!(err.is_timeout() || err.is_connection(), "{err:?}");
    assert!(took < 3 * NODE_BUDGET + ms(300), "failing took {took:?}");
    assert!(
        holders(&m.servers[1], &name).is_empty(),
        "the live master kept a key"
    );
    m.servers[0].sigcont();
    m.servers[2].sigcont();
    // The frozen masters never received a script (the connection set-up
    // timed out first): no key appears once they run again.
    assert!(!wait_until(ms(300), || m.holding(&name) > 0));
}

/// G4: one of 5 masters hangs (`SIGSTOP`): acquire and release still
/// succeed, the hang costing one per-node budget; once it resumes, anything
/// the hung master applied expires with its lease.
#[test]
fn g4_hanging_master() {
    let m = Masters::start(5);
    let name = unique_name("g4");
    let red = m.red(&name);
    // Warm every pool, so that the hung master gets the script on an open
    // connection, as it would in production.
    drop(red.lock().unwrap());
    m.servers[2].sigstop();
    let started = Instant::now();
    let guard = red.try_lock().unwrap().expect("4 of 5 masters answer");
    let took = started.elapsed();
    eprintln!("g4: acquire with 1 of 5 masters frozen took {took:?}");
    assert!(took < NODE_BUDGET + ms(300), "acquire took {took:?}");
    assert_eq!(guard.guards().len(), 4);
    let lower = RED_LEASE.saturating_sub(took + RED_LEASE / 100 + ms(2) + ms(50));
    assert!(
        guard.validity() >= lower,
        "{:?} < {lower:?}",
        guard.validity()
    );
    guard.unlock().unwrap();
    m.servers[2].sigcont();
    // The buffered attempt may run on the resumed master: with its lease.
    let pttl: i64 = m.servers[2].cmd("PTTL", &[name.as_bytes()]);
    assert!(
        pttl == -2 || (0..=RED_LEASE.as_millis() as i64).contains(&pttl),
        "pttl {pttl}"
    );
    for (i, server) in m.servers.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert!(holders(server, &name).is_empty(), "master {i} kept a key");
    }
}

/// Issue case: a master restarted empty while the lock is held. With a
/// quorum left the lock is still held; without one it is reported lost.
#[test]
fn master_restarted_empty_while_held() {
    let mut m = Masters::start(3);
    let name = unique_name("restart");
    let red = m.red(&name);
    let guard = red.lock().unwrap();
    assert_eq!(guard.guards().len(), 3);

    m.servers[0].restart();
    let on_first = guard
        .guards()
        .iter()
        .position(|g| g.lock().client().same_client(&m.clients[0]))
        .unwrap();
    // The next renewal (every lease / 3) finds the key gone on master 0.
    assert!(
        wait_until(RED_LEASE, || guard.guards()[on_first].is_lost()),
        "the restarted master's loss was not noticed"
    );
    guard.check().unwrap();
    assert!(!guard.is_lost());
    assert!(guard.validity() > RED_LEASE / 2);
    // Still exclusive: another client cannot reach a quorum.
    let other = red_over(&m.other_clients(), &name);
    assert!(other.try_lock().unwrap().is_none());

    m.servers[1].restart();
    assert!(
        wait_until(RED_LEASE, || guard.is_lost()),
        "losing the quorum was not noticed"
    );
    assert!(guard.check().unwrap_err().is_lock_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    match guard.unlock() {
        Err(Error::Unlock { total, failures }) => {
            assert_eq!(total, 3);
            assert_eq!(failures.len(), 2, "{failures:?}");
            assert!(
                failures.iter().all(|(_, e)| e.is_lock_lost()),
                "{failures:?}"
            );
        }
        other => panic!("expected Error::Unlock, got {other:?}"),
    }
    assert_eq!(m.holding(&name), 0);
}

/// G6: contenders that start together do not split the votes forever:
/// every one of them gets the lock in turn, and never two at once.
#[test]
fn g6_contenders_starting_together_all_win_in_turn() {
    const CONTENDERS: usize = 5;
    let m = Masters::start(5);
    let name = unique_name("g6");
    let inside = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    let red = Arc::new(m.red(&name));
    let started = Instant::now();
    let workers: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let (red, inside, barrier) = (red.clone(), inside.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                let guard = red
                    .try_lock_for(Duration::from_secs(8))
                    .unwrap()
                    .expect("won within the budget");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                crate::support::sleep(ms(20));
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().unwrap();
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    eprintln!(
        "g6: {CONTENDERS} contenders served in {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(m.holding(&name), 0);
}

/// G7, kept as an executable warning: a master that restarts without
/// persistence while the lock is held forgets its vote, and another client
/// reaches a quorum while the first still believes it holds the lock. The
/// RedLock docs recommend delayed restarts or `appendfsync always`. Since
/// the watchdog checks every lease on a server that comes back with a new
/// `run_id`, the first holder is told within about a second; the window
/// until then remains.
#[test]
fn g7_crash_restart_without_persistence_breaks_mutual_exclusion() {
    let mut m = Masters::start(5);
    let name = unique_name("g7");
    // A holds the lock on exactly 3 of 5 masters (two are down when it
    // acquires), with a fixed lease so that no renewal tells it anything.
    m.servers[3].kill();
    m.servers[4].kill();
    let red_a = m.red(&name).with_lease(RED_LEASE);
    let a = red_a.try_lock().unwrap().expect("3 of 5 masters are up");
    assert_eq!(a.guards().len(), 3);
    m.servers[3].start_again();
    m.servers[4].start_again();
    // One of A's three masters crashes and restarts empty.
    m.servers[2].restart();

    let red_b = red_over(&m.other_clients(), &name).with_lease(RED_LEASE);
    let b = red_b
        .try_lock()
        .unwrap()
        .expect("the violation: B reaches 3 of 5 (masters 2, 3, 4)");
    b.check().unwrap();
    assert!(b.validity() > Duration::ZERO);
    assert_eq!(b.guards().len(), 3);
    // A is told: the restarted master's new run_id makes A's watchdog
    // check A's hold there, find it gone, and A falls below its quorum.
    assert!(
        wait_until(Duration::from_secs(2), || a.is_lost()),
        "A was never told that its quorum is gone"
    );
    drop(b);
    drop(a);
}

const THREADS_PER_PROCESS: usize = 4;
const ROUNDS_PER_THREAD: u64 = 50;

/// The key names of the shared counter and the occupancy probe.
struct Keys {
    counter: String,
    /// A list of the pid of each holder, in order of entry.
    trace: String,
    occupancy: String,
}

fn keys(name: &str) -> Keys {
    Keys {
        counter: format!("{name}:n"),
        trace: format!("{name}:trace"),
        occupancy: format!("{name}:occ"),
    }
}

/// `THREADS_PER_PROCESS` threads, each taking the RedLock
/// `ROUNDS_PER_THREAD` times and incrementing a counter on master 0
/// non-atomically (GET, then SET) inside, with an occupancy probe.
fn count_under_red_lock(urls: &[String], name: &str) {
    let clients: Vec<Client> = urls.iter().map(|u| red_client(u)).collect();
    let red = Arc::new(red_over(&clients, name));
    let Keys {
        counter,
        occupancy,
        trace,
    } = keys(name);
    let workers: Vec<_> = (0..THREADS_PER_PROCESS)
        .map(|_| {
            let red = red.clone();
            let url = urls[0].clone();
            let (counter, occupancy, trace) = (counter.clone(), occupancy.clone(), trace.clone());
            thread::spawn(move || {
                let mut conn = redis::Client::open(url)
                    .unwrap()
                    .get_connection_with_timeout(ms(2000))
                    .unwrap();
                for _ in 0..ROUNDS_PER_THREAD {
                    let guard = red
                        .try_lock_for(Duration::from_secs(10))
                        .unwrap()
                        .expect("acquired within 10 s");
                    let occ: u64 = redis::cmd("INCR").arg(&occupancy).query(&mut conn).unwrap();
                    assert_eq!(occ, 1, "two holders inside the critical section");
                    let _: i64 = redis::cmd("RPUSH")
                        .arg(&trace)
                        .arg(std::process::id())
                        .query(&mut conn)
                        .unwrap();
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
}

/// Mutual exclusion across 2 processes: this test and a child process (this
/// test binary running `red_lock_child_process`) count under the same
/// RedLock over 3 masters.
#[test]
fn mutual_exclusion_across_two_processes() {
    let m = Masters::start(3);
    let name = unique_name("xproc");
    let urls: Vec<String> = m.servers.iter().map(RedisServer::url).collect();
    let keys = keys(&name);
    let joined = urls.join(",");
    let mut child = ChildTest::spawn(
        "red_lock::red_lock_child_process",
        "red",
        &[("RG_URLS", &joined), ("RG_NAME", &name)],
    );
    // Start together: the child says it is ready and waits for the go.
    child.expect_line("READY", Duration::from_secs(10));
    child.send_line("GO");
    let started = Instant::now();
    count_under_red_lock(&urls, &name);
    eprintln!(
        "two processes: this one's {} acquisitions took {:?}",
        THREADS_PER_PROCESS as u64 * ROUNDS_PER_THREAD,
        started.elapsed()
    );
    assert!(
        child.wait_success(Duration::from_secs(30)),
        "the child failed: {:?}",
        child.transcript()
    );
    let total: u64 = m.servers[0].cmd("GET", &[keys.counter.as_bytes()]);
    assert_eq!(total, 2 * THREADS_PER_PROCESS as u64 * ROUNDS_PER_THREAD);
    // The two processes really competed: the holders alternate.
    let trace: Vec<u32> = m.servers[0].cmd("LRANGE", &[keys.trace.as_bytes(), b"0", b"-1"]);
    let switches = trace.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!("two processes: the holder changed process {switches} times");
    assert!(
        switches >= 2,
        "the processes did not overlap: {switches} switches"
    );
}

/// The child side of [`mutual_exclusion_across_two_processes`]; does
/// nothing unless started by it.
#[test]
#[ignore = "run as a child process by mutual_exclusion_across_two_processes"]
fn red_lock_child_process() {
    let Some(_) = child_role() else { return };
    let urls: Vec<String> = child_env("RG_URLS").split(',').map(str::to_owned).collect();
    let name = child_env("RG_NAME");
    say("READY");
    assert_eq!(hear(), "GO");
    count_under_red_lock(&urls, &name);
}
