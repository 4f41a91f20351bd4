//! The watchdog's threads and I/O: one long-lived worker per server, a
//! bounded thread count under traffic and faults, no thread left once the
//! last client is gone (and a new start after that), releases at shutdown
//! that never hold up other servers' renewals, and renewal failures that
//! keep their kind (RELIABILITY W3, W4, W5, W6).
//!
//! Thread counts are read from `/proc/self/task/*/comm` in a child process
//! of the test binary: the other tests of this process have threads too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    ChildTest, FaultProxy, Mode, RedisServer, TEST_RESPONSE, TEST_WATCHDOG, capture_logs,
    child_role, logged_lines, ms, say, test_builder, test_client, unique_name, wait_until,
};

/// Names of this process's threads that start with `redguard-` (as the
/// kernel keeps them: at most 15 bytes).
fn redguard_threads() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .filter(|c| c.starts_with("redguard-"))
        .collect()
}

/// Samples [`redguard_threads`] every 2 ms on a thread of its own (not a
/// `redguard-` one) and keeps the largest count seen.
struct PeakSampler {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl PeakSampler {
    fn start() -> PeakSampler {
        let peak = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (peak, stop) = (peak.clone(), stop.clone());
            move || {
                let mut worst = Vec::new();
                // Bounded by the stop flag, and by a count (10 min of 2 ms).
                for _ in 0..300_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let now = redguard_threads();
                    if now.len() > peak.load(Ordering::Relaxed) {
                        peak.store(now.len(), Ordering::Relaxed);
                        worst = now;
                    }
                    crate::support::sleep(ms(2));
                }
                worst
            }
        });
        PeakSampler {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling: the peak and the thread names seen at the peak.
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let worst = self
            .thread
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default();
        (self.peak.load(Ordering::Relaxed), worst)
    }
}

impl Drop for PeakSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The child half of W3: traffic, renewals and lost replies on two
/// servers, sampling the thread count all along.
#[test]
#[ignore = "child process of w3_thread_count_is_bounded_under_traffic_faults_and_renewals"]
fn w3_child_storm() {
    let Some(_) = child_role() else { return };
    let direct = RedisServer::start();
    let behind = RedisServer::start();
    let proxy = FaultProxy::start(behind.port());
    let sampler = PeakSampler::start();

    // Client 1: renewals of 50 held locks and 400 short holds from 4 threads,
    // some of them waiting (subscriber).
    let c1 = test_client(&direct.url());
    let held: Vec<_> = (0..50)
        .map(|i| c1.lock(format!("w3-held-{i}")).lock().unwrap())
        .collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let c1 = c1.clone();
            s.spawn(move || {
                for i in 0..100 {
                    drop(c1.lock(format!("w3-shared-{}", i % 3)).lock().unwrap());
                }
            });
        }
    });
    // Client 2, behind the proxy: every reply comes after the response
    // timeout, so every acquire has a lost reply to undo.
    let c2 = test_builder(&proxy.url()).build().unwrap();
    let kept = c2.lock("w3-kept").lock().unwrap();
    proxy.set_mode(Mode::Delay(TEST_RESPONSE + ms(150)));
    let lost = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (c2, lost) = (c2.clone(), &lost);
            s.spawn(move || {
                // Bounded by the deadline and a count.
                for i in 0..1000 {
                    if Instant::now() >= deadline {
                        break;
                    }
                    match c2.lock(format!("w3-lost-{t}-{i}")).try_lock() {
                        Err(e) if e.is_timeout() => {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) | Ok(_) => {}
                    }
                }
            });
        }
    });
    proxy.set_mode(Mode::Pass);
    // Renewals keep going meanwhile.
    crate::support::sleep(TEST_WATCHDOG);
    for g in &held {
        g.check().unwrap();
    }
    let renewals = c1.stats().renewals;
    let (peak, names) = sampler.finish();
    say(&format!(
        "W3 peak={peak} lost_replies={} renewals={renewals} names={names:?}",
        lost.load(Ordering::Relaxed)
    ));
    drop((held, kept));
}

#[test]
fn w3_thread_count_is_bounded_under_traffic_faults_and_renewals() {
    let mut child = ChildTest::spawn(
        "watchdog_threads::w3_child_storm",
        "run",
        &[("RUST_LOG", "off")],
    );
    let line = child.expect_line("W3 ", Duration::from_secs(60));
    assert!(
        child.wait_success(Duration::from_secs(20)),
        "child failed: {line}"
    );
    let field = |key: &str| -> usize {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let (peak, lost, renewals) = (field("peak="), field("lost_replies="), field("renewals="));
    eprintln!("W3: {line}");
    assert!(lost >= 8, "the faults made too few lost replies: {line}");
    assert!(renewals >= 50, "renewals did not run: {line}");
    // One watchdog, and per client (one server each): one worker and one
    // subscriber.
    assert!(
        peak <= 5,
        "thread count grew with traffic or faults: {line}"
    );
}

/// The child half of W4: clients come and go; after each generation no
/// `redguard-` thread may be left within 2 s.
#[test]
#[ignore = "child process of w4_no_thread_is_left_once_every_client_is_dropped"]
fn w4_child_generations() {
    let Some(_) = child_role() else { return };
    let a = RedisServer::start();
    let b = RedisServer::start();
    let mut report = Vec::new();
    for generation in 0..2 {
        let ca = test_client(&a.url());
        let cb = test_client(&b.url());
        let name = unique_name("w4");
        let ga = ca.lock(&name).lock().unwrap();
        let gb = cb.lock(&name).lock().unwrap();
        // A waiter, so that a subscriber runs too.
        let waiter = std::thread::spawn({
            let l = cb.clone().lock(&name);
            move || l.try_lock_for(ms(300)).unwrap().is_none()
        });
        // Renewed across several periods, by a watchdog that (from the
        // second generation on) started again.
        crate::support::sleep(TEST_WATCHDOG * 2);
        ga.check().unwrap();
        gb.check().unwrap();
        assert!(waiter.join().unwrap());
        assert!(ca.stats().renewals >= 2, "{:?}", ca.stats());
        let during = redguard_threads();
        drop((ga, gb));
        drop((ca, cb));
        let t0 = Instant::now();
        let gone = wait_until(Duration::from_secs(2), || redguard_threads().is_empty());
        report.push(format!(
            "gen{generation}: during={during:?} gone={gone} after={:?} left={:?}",
            t0.elapsed(),
            redguard_threads()
        ));
    }
    say(&format!("W4 {}", report.join(" | ")));
}

#[test]
fn w4_no_thread_is_left_once_every_client_is_dropped() {
    let mut child = ChildTest::spawn("watchdog_threads::w4_child_generations", "run", &[]);
    let line = child.expect_line("W4 ", Duration::from_secs(60));
    assert!(
        child.wait_success(Duration::from_secs(20)),
        "child failed: {line}"
    );
    eprintln!("W4: {line}");
    assert_eq!(line.matches("gone=true").count(), 2, "{line}");
    assert!(line.contains("redguard-watchd"), "threads ran: {line}");
    assert!(line.contains("redguard-renew"), "threads ran: {line}");
}

#[test]
fn w5_shutdown_against_a_frozen_server_does_not_delay_renewals_elsewhere() {
    let frozen = RedisServer::start();
    let healthy = RedisServer::start();
    // A slow-to-fail client: each release on the frozen server waits 2 s.
    let leaving = test_builder(&frozen.url())
        .response_timeout(Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let staying = test_client(&healthy.url());
    let held: Vec<_> = (0..3)
        .map(|i| {
            leaving
                .lock(unique_name(&format!("w5-{i}")))
                .lock()
                .unwrap()
        })
        .collect();
    let name = unique_name("w5-healthy");
    let guard = staying.lock(&name).lock().unwrap();
    frozen.sigstop();
    let shutdown = std::thread::spawn(move || leaving.shutdown());
    let renewals_before = staying.stats().renewals;
    let lease = TEST_WATCHDOG.as_millis() as i64;
    let mut min_pttl = i64::MAX;
    let t0 = Instant::now();
    // 3 s: longer than the healthy lease, and than one release's timeout.
    while t0.elapsed() < Duration::from_secs(3) {
        let p: i64 = healthy.cmd("PTTL", &[name.as_bytes()]);
        min_pttl = min_pttl.min(p);
        crate::support::sleep(ms(20));
    }
    let renewed = staying.stats().renewals - renewals_before;
    frozen.sigcont();
    shutdown.join().unwrap();
    drop(held);
    eprintln!("W5: min PTTL {min_pttl} ms of {lease}, {renewed} renewals in 3 s");
    guard.check().unwrap();
    assert!(
        min_pttl as f64 >= 0.4 * lease as f64,
        "renewals on the healthy server stalled: min PTTL {min_pttl} of {lease}"
    );
    assert!(renewed >= 6, "{renewed} renewals in 3 s");
}

/// The renewal failure logged for `name` (a retry, or the loss once no
/// renewal succeeded in time), waiting up to 3 s for one containing `kind`.
fn renewal_error_for(name: &str, kind: &str) -> Option<String> {
    let mut found = None;
    wait_until(Duration::from_secs(3), || {
        found = logged_lines().into_iter().find(|l| {
            (l.contains("renewal") || l.contains("last error"))
                && l.contains(name)
                && l.contains(kind)
        });
        found.is_some()
    });
    found
}

#[test]
fn w6_a_renewal_failure_keeps_its_kind() {
    capture_logs();

    // Refused: the server is gone, nothing listens on its port.
    let mut server = RedisServer::start();
    let client = test_client(&server.url());
    let name = unique_name("w6-refused");
    let guard = client.lock(&name).lock().unwrap();
    server.kill();
    let refused = format!(
        "connection to Redis at 127.0.0.1:{}/0 failed: ",
        server.port()
    );
    let line = renewal_error_for(&name, &refused);
    assert!(
        line.is_some(),
        "{:?}",
        logged_lines()
            .iter()
            .filter(|l| l.contains(&name))
            .collect::<Vec<_>>()
    );
    assert!(wait_until(Duration::from_secs(2), || guard.is_lost()));
    drop(guard);

    // Wrong password: the server's password changed under the client.
    let server = RedisServer::start_with(&["--requirepass", "first"]);
    let url = format!("redis://:first@127.0.0.1:{}/", server.port());
    let client = test_client(&url);
    let name = unique_name("w6-auth");
    let guard = client.lock(&name).lock().unwrap();
    let mut admin = server.conn();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("second")
        .query(&mut admin)
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .unwrap();
    let line = renewal_error_for(
        &name,
        &format!(
            "authentication with Redis at 127.0.0.1:{}/0 failed",
            server.port()
        ),
    );
    assert!(
        line.is_some(),
        "{:?}",
        logged_lines()
            .iter()
            .filter(|l| l.contains(&name))
            .collect::<Vec<_>>()
    );
    drop(guard);

    // Stall: the server is frozen.
    let server = RedisServer::start();
    let client = test_client(&server.url());
    let name = unique_name("w6-stall");
    let guard = client.lock(&name).lock().unwrap();
    server.sigstop();
    let line = renewal_error_for(
        &name,
        &format!(
            "no reply from Redis at 127.0.0.1:{}/0 within",
            server.port()
        ),
    );
    server.sigcont();
    assert!(
        line.is_some(),
        "{:?}",
        logged_lines()
            .iter()
            .filter(|l| l.contains(&name))
            .collect::<Vec<_>>()
    );
    drop(guard);
}

/// CPU time (ns) that thread `tid` of this process has had so far
/// (`schedstat`'s first field: exact, not in clock ticks).
fn thread_cpu_ns(tid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Voluntary context switches of thread `tid` so far: each time it
/// blocked (a sleep, a read that waited).
fn thread_sleeps(tid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The id of this process's thread named `name` (the only one).
fn thread_id(name: &str) -> Option<String> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .filter_map(|t| t.ok())
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .map(|t| t.file_name().to_string_lossy().into_owned())
}

/// How much CPU thread `tid` uses over `window`, as a share of what a
/// thread that never sleeps gets meanwhile (one spins beside it: on a busy
/// machine a spinning thread gets far less than a core), and how often it
/// blocks per second.
fn idle_figures(tid: &str, window: Duration) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = std::thread::spawn({
        let stop = stop.clone();
        move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() }.to_string();
            let start = thread_cpu_ns(&tid);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n = std::hint::black_box(n.wrapping_add(1));
            }
            thread_cpu_ns(&tid) - start
        }
    });
    let (cpu0, sleeps0, t0) = (thread_cpu_ns(tid), thread_sleeps(tid), Instant::now());
    crate::support::sleep(window);
    let (cpu, sleeps) = (thread_cpu_ns(tid) - cpu0, thread_sleeps(tid) - sleeps0);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let spun = spinner.join().unwrap().max(1);
    (cpu as f64 / spun as f64, sleeps as f64 / elapsed)
}

/// The child half of W7: one client holds a lock, then releases it; the
/// figures of its server's renewal worker in both states.
#[test]
#[ignore = "child process of w7_an_idle_renewal_worker_sleeps"]
fn w7_child_idle() {
    let Some(_) = child_role() else { return };
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let guard = client.lock(unique_name("w7")).lock().unwrap();
    assert!(wait_until(Duration::from_secs(5), || thread_id(
        "redguard-renew"
    )
    .is_some()));
    let tid = thread_id("redguard-renew").unwrap();
    crate::support::sleep(ms(300));
    let (held_cpu, held_sleeps) = idle_figures(&tid, Duration::from_secs(2));
    guard.unlock().unwrap();
    // The watchdog drops the released entry at its next renewal time (at
    // most L/3 later): the worker then stops watching the server.
    crate::support::sleep(ms(1000));
    let (idle_cpu, idle_sleeps) = idle_figures(&tid, Duration::from_secs(2));
    assert_eq!(thread_id("redguard-renew").as_deref(), Some(&tid[..]));
    say(&format!(
        "W7 held_cpu={held_cpu:.4} held_sleeps={held_sleeps:.1} idle_cpu={idle_cpu:.4} \
         idle_sleeps={idle_sleeps:.1}"
    ));
    drop(client);
}

/// W7: a server's renewal worker sleeps between its looks at the watch
/// connection (every 100 ms) while a lease is held there, and wakes once a
/// second once none is (a thread that spins, or looks back to back, crosses
/// the bounds). Its CPU is compared with that of a spinning thread beside
/// it, which a loaded machine slows down as much.
#[test]
fn w7_an_idle_renewal_worker_sleeps() {
    /// Blocking waits per second while a lease is held: two per look (the
    /// wait for a job, the look's read), a few per renewal.
    const HELD_SLEEPS: f64 = 60.0;
    /// Wake-ups per second with nothing held: one.
    const IDLE_SLEEPS: f64 = 5.0;
    /// CPU as a share of a spinning thread's, with nothing held.
    const IDLE_CPU: f64 = 0.05;
    let mut child = ChildTest::spawn("watchdog_threads::w7_child_idle", "run", &[]);
    let line = child.expect_line("W7 ", Duration::from_secs(60));
    assert!(
        child.wait_success(Duration::from_secs(20)),
        "child failed: {line}"
    );
    eprintln!("W7: {line}");
    let field = |key: &str| -> f64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    assert!(
        field("held_sleeps=") <= HELD_SLEEPS,
        "the worker looked too often: {line}"
    );
    assert!(
        field("idle_cpu=") <= IDLE_CPU && field("idle_sleeps=") <= IDLE_SLEEPS,
        "the worker of a server with nothing held did not sleep: {line}"
    );
}

/// W8: short holds taken while the watchdog thread sleeps (a 30 s watchdog
/// timeout: 10 s until the one long hold's renewal) are left in its pending
/// list and wake it once per 1,024 of them, not once each: 3,000
/// lock/unlock cycles cost the thread a handful of blocking waits, where a
/// wake-up per hold costs thousands. Counted in a child process, whose
/// only watchdog thread is this client's.
#[test]
fn w8_short_holds_wake_the_watchdog_in_batches() {
    /// Blocking waits of the watchdog thread over the 3,000 cycles: about
    /// 3 (one per 1,024 holds) as it is.
    const WAKES: u64 = 30;
    let mut child = ChildTest::spawn("watchdog_threads::w8_child_short_holds", "run", &[]);
    let line = child.expect_line("W8 ", Duration::from_secs(60));
    assert!(
        child.wait_success(Duration::from_secs(20)),
        "child failed: {line}"
    );
    eprintln!("W8: {line}");
    let wakes: u64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("wakes="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no wakes= in {line}"));
    assert!(
        wakes <= WAKES,
        "3,000 short holds woke the watchdog thread {wakes} times"
    );
}

/// The child half of W8.
#[test]
#[ignore = "child process of w8_short_holds_wake_the_watchdog_in_batches"]
fn w8_child_short_holds() {
    let Some(_) = child_role() else { return };
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let held = client.lock(unique_name("w8-held")).lock().unwrap();
    assert!(wait_until(Duration::from_secs(5), || client
        .stats()
        .watchdog_entries
        == 1));
    // The kernel keeps 15 bytes of a thread's name.
    let tid = thread_id("redguard-watchd").expect("the watchdog thread");
    // The thread goes to sleep a moment after taking the hold in.
    crate::support::sleep(ms(100));
    let before = thread_sleeps(&tid);
    let prefix = unique_name("w8");
    for i in 0..3_000 {
        let lock = client.lock(format!("{prefix}-{i}"));
        lock.lock().unwrap().unlock().unwrap();
    }
    let wakes = thread_sleeps(&tid) - before;
    held.check().unwrap();
    say(&format!("W8 wakes={wakes}"));
    held.unlock().unwrap();
}

/// Renewals that failed for a while (the server unreachable until a
/// renewal failed, and 200 ms more, within a 3 s lease) and then go
/// through again are said to succeed again, in a warning after the one
/// that said they were failing (once for the whole streak), and the lease
/// is kept. The watchdog knows it from a round trip answered without a
/// failure, which also starts the retry pause small again.
///
/// The lease leaves room for a loaded machine: the last renewal before
/// the cut may be a period (L/3) old, and after the 200 ms the retry pause
/// (up to L/6) and the test's own look at the log (all of the process's
/// lines) come before the renewal that goes through. With 1.5 s that left
/// 50 to 550 ms, and the lease ran out under load.
#[test]
fn renewals_that_succeed_again_after_failing_say_so() {
    // The watchdog's punctuality within the lease is what is measured: no
    // test that keeps both cores busy runs beside it.
    let _heavy = crate::support::cpu_heavy();
    capture_logs();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .watchdog_timeout(ms(3_000))
        .build()
        .unwrap();
    let name = unique_name("recovered");
    let guard = client.lock(&name).lock().unwrap();
    let count = |text: &str, also: &str| {
        logged_lines()
            .iter()
            .filter(|l| l.contains(text) && l.contains(also))
            .count()
    };
    let (failing, again) = (
        "lease renewals failing",
        "lease renewals succeed again after failing",
    );
    let before = count(again, "");
    proxy.set_mode(Mode::ResetAll);
    proxy.set_mode(Mode::Refuse);
    // A renewal is due within L/3 (1 s).
    let failed = wait_until(Duration::from_secs(3), || count(failing, &name) > 0);
    // Several more failed round trips (the pause starts at 10 ms).
    crate::support::sleep(ms(200));
    proxy.set_mode(Mode::Pass);
    assert!(failed, "no renewal failed while the server was unreachable");
    assert!(
        wait_until(Duration::from_secs(3), || count(again, "") > before),
        "renewals went through again and nobody said so"
    );
    assert_eq!(
        count(failing, &name),
        1,
        "one warning for the whole failure streak"
    );
    guard.check().unwrap();
    guard.unlock().unwrap();
}
