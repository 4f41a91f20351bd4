//! Mutual exclusion across threads and OS processes (RELIABILITY A1, A2).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::support::{
    ChildTest, TestContext, child_env, child_role, hear, ms, say, test_builder, test_client,
    unique_name,
};

/// A1: threads per process.
const THREADS: usize = 8;
/// A1: holds per thread; 2 processes × 8 threads × 80 = 1,280 holds.
const ITERATIONS: usize = 80;
/// A1's lease: short, so that the 1 % of holds that last 2 × L keep the
/// whole test near 15 s while the watchdog renews under contention.
const A1_LEASE: Duration = Duration::from_millis(500);

/// What one process saw: critical sections entered while another was
/// inside (the `INCR` probe did not return 1), the highest occupancy, and
/// holds of 2 × L.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    overlaps: u64,
    max_occupancy: u64,
    long_holds: u64,
}

/// `THREADS` threads each take the lock `ITERATIONS` times and, inside,
/// run a non-atomic GET → SET+1 on a counter, wrapped in an occupancy
/// probe (`INCR occ` on entry must return 1, `DECR occ` on exit). Holds last
/// 0–2 ms at random, and 1 % of them (one in a hundred, drawn at random)
/// last 2 × L, so that the watchdog renews a lock that others wait for.
fn hammer(url: &str, name: &str) -> Seen {
    let client = test_builder(url)
        .watchdog_timeout(A1_LEASE)
        .response_timeout(A1_LEASE / 3)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let overlaps = Arc::new(AtomicU64::new(0));
    let max_occupancy = Arc::new(AtomicU64::new(0));
    let long_holds = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = client.lock(name);
            let (overlaps, max_occupancy, long_holds) =
                (overlaps.clone(), max_occupancy.clone(), long_holds.clone());
            let counter = format!("{name}:counter");
            let occupancy = format!("{name}:occ");
            let admin = redis::Client::open(url).unwrap();
            std::thread::spawn(move || {
                let mut conn = admin.get_connection().unwrap();
                let mut rng = rand::rng();
                for _ in 0..ITERATIONS {
                    let hold = if rng.random_ratio(1, 100) {
                        long_holds.fetch_add(1, Ordering::SeqCst);
                        A1_LEASE * 2
                    } else {
                        Duration::from_micros(rng.random_range(0..=2_000))
                    };
                    let guard = lock.lock().unwrap();
                    let occ: u64 = redis::cmd("INCR").arg(&occupancy).query(&mut conn).unwrap();
                    max_occupancy.fetch_max(occ, Ordering::SeqCst);
                    if occ != 1 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    crate::support::racy_increment(&mut conn, &counter);
                    crate::support::sleep(hold);
                    let _: i64 = redis::cmd("DECR").arg(&occupancy).query(&mut conn).unwrap();
                    guard.check().unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Seen {
        overlaps: overlaps.load(Ordering::SeqCst),
        max_occupancy: max_occupancy.load(Ordering::SeqCst),
        long_holds: long_holds.load(Ordering::SeqCst),
    }
}

/// The child half of A1: the same workload in a second process.
#[test]
#[ignore = "child process of a1_mutual_exclusion_two_processes_eight_threads_each"]
fn a1_child_worker() {
    let Some(_) = child_role() else { return };
    let url = child_env("RG_URL");
    let name = child_env("RG_NAME");
    say("READY");
    assert_eq!(hear(), "GO");
    let seen = hammer(&url, &name);
    say(&format!(
        "RESULT {} {} {}",
        seen.overlaps, seen.max_occupancy, seen.long_holds
    ));
}

/// A1: 2 processes × 8 threads × 80 holds of random length (1 % of them
/// 2 × L, renewed while others wait): the non-atomic counter is exact and
/// the occupancy probe never saw two holders.
#[test]
fn a1_mutual_exclusion_two_processes_eight_threads_each() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    let name = unique_name("a1");
    let url = ctx.server.url();
    let mut child = ChildTest::spawn(
        "mutual_exclusion::a1_child_worker",
        "a1",
        &[("RG_URL", &url), ("RG_NAME", &name)],
    );
    child.expect_line("READY", Duration::from_secs(10));
    child.send_line("GO");
    let t0 = Instant::now();
    let here = hammer(&url, &name);
    let there = child.expect_line("RESULT ", Duration::from_secs(120));
    assert!(child.wait_success(Duration::from_secs(10)), "child failed");
    let there: Vec<u64> = there.split(' ').map(|n| n.parse().unwrap()).collect();
    let total: u64 = ctx
        .server
        .cmd("GET", &[format!("{name}:counter").as_bytes()]);
    eprintln!(
        "A1: {total} increments in {:?}; here {here:?}, child {there:?} (overlaps, max occupancy, holds of 2 L)",
        t0.elapsed()
    );
    assert_eq!(here.overlaps + there[0], 0, "two holders at once");
    assert_eq!(here.max_occupancy.max(there[1]), 1);
    assert_eq!(total, (2 * THREADS * ITERATIONS) as u64);
    assert!(
        here.long_holds + there[2] > 0,
        "no hold of 2 L was drawn: renewal under contention did not run"
    );
    // Nothing left behind.
    assert!(!test_client(&url).lock(&name).is_locked().unwrap());
    assert_eq!(
        ctx.server
            .cmd::<i64>("GET", &[format!("{name}:occ").as_bytes()]),
        0
    );
}

/// A2 child: one process of many. Says `READY`, waits for `GO`, takes the
/// lock `A2_HOLDS` times, holding it 1 ms each time, and reports each
/// interval on `CLOCK_MONOTONIC` (comparable between processes of one
/// host), next to an external probe: `SETNX` of a marker key on entry must
/// succeed, and the marker is deleted before the release.
#[test]
#[ignore = "child process of a2_interval_overlap_across_125_processes"]
fn a2_child_process() {
    let Some(_) = child_role() else { return };
    let url = child_env("RG_URL");
    let name = child_env("RG_NAME");
    let client = test_builder(&url)
        // 125 processes on 2 cores: replies can take seconds. The test is
        // about overlap, which no timeout setting can hide.
        .watchdog_timeout(Duration::from_secs(15))
        .response_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
        .pool_size(1)
        .build()
        .unwrap();
    let lock = client.lock(&name);
    let marker = format!("{name}:inside");
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(3))
        .unwrap();
    // Connections open before the start, so that all processes race.
    lock.lock().unwrap().unlock().unwrap();
    say("READY");
    assert_eq!(hear(), "GO");
    let mut report = Vec::new();
    for _ in 0..A2_HOLDS {
        let guard = lock.try_lock_for(Duration::from_secs(60)).unwrap().unwrap();
        let start = monotonic_ns();
        let entered: bool = redis::cmd("SETNX")
            .arg(&marker)
            .arg(1)
            .query(&mut conn)
            .unwrap();
        crate::support::sleep(ms(1));
        let _: i64 = redis::cmd("DEL").arg(&marker).query(&mut conn).unwrap();
        let end = monotonic_ns();
        guard.unlock().unwrap();
        report.push(format!("{start}-{end}-{}", u8::from(entered)));
    }
    say(&format!("INTERVALS {}", report.join(" ")));
}

/// A2: intervals per process.
const A2_HOLDS: usize = 4;
/// A2: processes.
const A2_PROCESSES: usize = 125;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A2: 125 processes, released together, each holding the lock 1 ms four
/// times: no two of the 500 (acquire, release) intervals overlap, and the
/// external `SETNX` probe never found the marker taken.
#[test]
fn a2_interval_overlap_across_125_processes() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    let name = unique_name("a2");
    let url = ctx.server.url();
    let mut children: Vec<ChildTest> = (0..A2_PROCESSES)
        .map(|_| {
            ChildTest::spawn(
                "mutual_exclusion::a2_child_process",
                "a2",
                &[("RG_URL", &url), ("RG_NAME", &name)],
            )
        })
        .collect();
    for child in &children {
        child.expect_line("READY", Duration::from_secs(60));
    }
    let t0 = Instant::now();
    for child in &mut children {
        child.send_line("GO");
    }
    let mut intervals = Vec::new();
    let mut probe_failures = 0;
    for child in &children {
        let line = child.expect_line("INTERVALS ", Duration::from_secs(120));
        for part in line.split(' ') {
            let v: Vec<u64> = part.split('-').map(|n| n.parse().unwrap()).collect();
            intervals.push((v[0], v[1]));
            if v[2] != 1 {
                probe_failures += 1;
            }
        }
    }
    let took = t0.elapsed();
    for child in &mut children {
        assert!(
            child.wait_success(Duration::from_secs(10)),
            "a child failed"
        );
    }
    assert_eq!(intervals.len(), A2_PROCESSES * A2_HOLDS);
    // Sorted by start, any overlap shows between neighbours; count every
    // overlapping pair anyway (n(n − 1) / 2 = 124,750 pairs).
    let mut overlapping = 0;
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a.0 < b.1 && b.0 < a.1 {
                overlapping += 1;
            }
        }
    }
    eprintln!(
        "A2: {} intervals from {A2_PROCESSES} processes in {took:?}: {overlapping} overlapping pairs, {probe_failures} probe failures",
        intervals.len()
    );
    assert_eq!(overlapping, 0);
    assert_eq!(probe_failures, 0);
    assert!(!ctx.server.exists(&name));
}
