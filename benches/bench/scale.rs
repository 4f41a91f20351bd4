//! redguard's own scale scenarios: W1, the watchdog holding 10,000 to
//! 100,000 locks, and W2, 1,000 threads waiting on 100 locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use redguard::{Client, Lock};
use serde_json::{Value, json};

use crate::observe::{admin, connections, process_cpu_ns, rss_kib, thread_cpu, thread_cpu_ns};
use crate::protocol::now_ns;
use crate::stats::{pct, us};
use crate::target::Target;

// ============================================================================
// W1: the watchdog at scale
// ============================================================================

pub(crate) struct W1Config {
    n: usize,
    watchdog: Duration,
    batch: usize,
    periods: u32,
}

/// Samples PTTL of the first `acquired` keys round robin, in pipelines, until
/// `stop`; returns (lowest pttl seen in ms, samples, keys seen missing).
pub(crate) fn pttl_sampler(
    target: Target,
    names: Arc<Vec<String>>,
    acquired: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    lowest: Arc<AtomicI64>,
    cpu_ns: Arc<AtomicU64>,
) -> (u64, u64, u64) {
    let mut con = target.sampler();
    let chunk = 500;
    let mut samples = 0u64;
    let mut missing = 0u64;
    let mut sweeps = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Acquire) {
        let upto = acquired.load(Ordering::Acquire);
        if upto == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if i >= upto {
            i = 0;
            sweeps += 1;
        }
        let end = (i + chunk).min(upto);
        let Ok(replies) = con.pttls(&names[i..end]) else {
            break;
        };
        for ms in replies {
            samples += 1;
            if ms < 0 {
                missing += 1;
            } else {
                lowest.fetch_min(ms, Ordering::AcqRel);
            }
        }
        i = end;
        cpu_ns.store(thread_cpu_ns(), Ordering::Release);
        // At most ~50 000 PTTL/s: the sampler must not be what slows Redis.
        std::thread::sleep(Duration::from_millis(10));
    }
    (samples, missing, sweeps)
}

pub(crate) fn run_w1_case(target: &Target, cfg: &W1Config) -> Value {
    let url = target.client_url.as_str();
    let response_timeout = (cfg.watchdog / 3).min(Duration::from_secs(3));
    let client = Client::builder()
        .url(url)
        .watchdog_timeout(cfg.watchdog)
        .response_timeout(response_timeout)
        .renew_batch(cfg.batch)
        .build()
        .expect("client");
    target.flushall();
    // Warm the client (connection, script cache) and the watchdog thread.
    {
        let warm = client.lock("bench:w1:warm");
        drop(warm.lock().expect("warm-up lock"));
    }
    let names: Arc<Vec<String>> = Arc::new((0..cfg.n).map(|i| format!("bench:w1:k{i}")).collect());
    let rss_before = rss_kib();
    let locks: Vec<Lock> = names.iter().map(|n| client.lock(n)).collect();
    let rss_locks = rss_kib();

    let acquired = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let lowest = Arc::new(AtomicI64::new(i64::MAX));
    let sampler_cpu = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (target, acquired, stop, lowest, cpu) = (
            target.clone(),
            acquired.clone(),
            stop.clone(),
            lowest.clone(),
            sampler_cpu.clone(),
        );
        std::thread::spawn(move || pttl_sampler(target, names, acquired, stop, lowest, cpu))
    };

    let t0 = Instant::now();
    let mut guards = Vec::with_capacity(cfg.n);
    let mut errors = 0u64;
    for lock in &locks {
        match lock.lock() {
            Ok(g) => guards.push(g),
            Err(e) => {
                errors += 1;
                eprintln!("w1: lock failed: {e}");
            }
        }
        acquired.fetch_add(1, Ordering::Release);
    }
    let acquire_s = t0.elapsed().as_secs_f64();
    let rss_held = rss_kib();

    // Hold for `periods` renewal periods, counting from the last acquisition.
    let interval = cfg.watchdog / 3;
    let hold = interval * cfg.periods;
    let stats0 = client.stats();
    let evalsha0 = target.cmd_calls("evalsha");
    // The watchdog is a scheduling thread ("redguard-watchdog", shown as
    // "redguard-watchd") plus short-lived renewal I/O threads
    // ("redguard-renew") whose time only the process total keeps: count
    // the process minus this thread and the sampler.
    let sched0 = thread_cpu("redguard-watch");
    let (proc0, main0, samp0) = (
        process_cpu_ns(),
        thread_cpu_ns(),
        sampler_cpu.load(Ordering::Acquire),
    );
    let th0 = Instant::now();
    std::thread::sleep(hold);
    let hold_s = th0.elapsed().as_secs_f64();
    let (proc1, main1, samp1) = (
        process_cpu_ns(),
        thread_cpu_ns(),
        sampler_cpu.load(Ordering::Acquire),
    );
    let sched1 = thread_cpu("redguard-watch");
    let evalsha1 = target.cmd_calls("evalsha");
    let stats1 = client.stats();
    let rss_end = rss_kib();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    stop.store(true, Ordering::Release);
    let (samples, missing, sweeps) = sampler.join().unwrap_or((0, 0, 0));
    let low = lowest.load(Ordering::Acquire);

    let tr = Instant::now();
    let mut release_errors = 0u64;
    for g in guards.drain(..) {
        if g.unlock().is_err() {
            release_errors += 1;
        }
    }
    let release_s = tr.elapsed().as_secs_f64();
    let left: u64 = target
        .nodes
        .iter()
        .map(|node| {
            redis::cmd("DBSIZE")
                .query::<u64>(&mut admin(node))
                .unwrap_or(0)
        })
        .sum();
    drop(guards);
    drop(locks);

    let rt = stats1.renewal_round_trips - stats0.renewal_round_trips;
    let rn = stats1.renewals - stats0.renewals;
    let ticks = stats1.renewal_ticks - stats0.renewal_ticks;
    let periods_f = hold_s / interval.as_secs_f64();
    let cpu = proc1
        .saturating_sub(proc0)
        .saturating_sub(main1 - main0)
        .saturating_sub(samp1 - samp0) as f64
        / 1e9;
    let sched_cpu = sched1.saturating_sub(sched0).as_secs_f64();
    let lease_ms = cfg.watchdog.as_millis() as f64;
    let per_lock = |kib: u64, from: u64| (kib.saturating_sub(from) as f64 * 1024.0) / cfg.n as f64;
    json!({
        "cluster_masters": if target.cluster { json!(target.nodes.len()) } else { Value::Null },
        "n": cfg.n, "watchdog_s": cfg.watchdog.as_secs_f64(), "renew_batch": cfg.batch,
        "response_timeout_s": response_timeout.as_secs_f64(),
        "acquire_s": acquire_s, "acquire_errors": errors,
        "hold_s": hold_s, "periods": periods_f,
        "renewals": rn, "evalsha_calls": evalsha1 - evalsha0,
        "round_trips": rt, "ticks": ticks,
        "round_trips_per_period": rt as f64 / periods_f,
        "renewals_per_period": rn as f64 / periods_f,
        // Renewals are counted as their round trip is sent, up to
        // `renew_batch` x 16 at once, and each lock's next renewal is due one
        // interval after its previous one was sent: a window of `periods`
        // intervals sees `periods` renewals per lock give or take one round
        // trip's worth at each edge. Per lock says so directly.
        "renewals_per_lock": rn as f64 / cfg.n as f64,
        "interval_s": interval.as_secs_f64(),
        "ceil_n_over_batch": cfg.n.div_ceil(cfg.batch),
        "round_trips_per_tick": if ticks > 0 { rt as f64 / ticks as f64 } else { 0.0 },
        "renewals_per_round_trip": if rt > 0 { rn as f64 / rt as f64 } else { 0.0 },
        "min_pttl_ms": if low == i64::MAX { Value::Null } else { json!(low) },
        "min_pttl_frac": if low == i64::MAX { Value::Null } else { json!(low as f64 / lease_ms) },
        "pttl_samples": samples, "pttl_missing": missing, "pttl_sweeps": sweeps,
        "watchdog_cpu_s": cpu, "watchdog_cpu_frac": cpu / hold_s,
        "watchdog_sched_thread_cpu_frac": sched_cpu / hold_s,
        "rss_before_kib": rss_before, "rss_locks_kib": rss_locks, "rss_held_kib": rss_held,
        "rss_end_kib": rss_end,
        "rss_per_lock_b": per_lock(rss_held, rss_before),
        "rss_per_hold_b": per_lock(rss_held, rss_locks),
        "lost_guards": lost,
        "release_s": release_s, "release_errors": release_errors, "keys_left": left,
    })
}

pub(crate) fn run_w1(
    target: &Target,
    ns: &[usize],
    watchdogs: &[Duration],
    batch: usize,
    periods: u32,
) -> Value {
    let mut cases = Vec::new();
    for &n in ns {
        for &watchdog in watchdogs {
            let cfg = W1Config {
                n,
                watchdog,
                batch,
                periods,
            };
            eprintln!("w1: n={n} watchdog={watchdog:?} batch={batch}");
            let case = run_w1_case(target, &cfg);
            eprintln!("w1: {case}");
            cases.push(case);
        }
    }
    json!({"w1": cases})
}

// ============================================================================
// W2: waiter fan-out
// ============================================================================

pub(crate) fn run_w2(url: &str, threads: usize, nlocks: usize, gap: Duration) -> Value {
    let mut con = admin(url);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("flushall");
    let (total_before, pubsub_before) = connections(&mut con);
    let names: Vec<String> = (0..nlocks).map(|i| format!("bench:w2:k{i}")).collect();

    // The holder: another client, one thread holding every lock until told.
    let holder_client = Client::open(url).expect("holder client");
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let names = names.clone();
        std::thread::spawn(move || {
            let locks: Vec<Lock> = names.iter().map(|n| holder_client.lock(n)).collect();
            let mut guards: Vec<_> = locks
                .iter()
                .map(|l| Some(l.lock().expect("holder lock")))
                .collect();
            let _ = held_tx.send(());
            let _ = go_rx.recv_timeout(Duration::from_secs(120));
            let mut released = Vec::with_capacity(guards.len());
            for g in &mut guards {
                let t = now_ns();
                if let Some(g) = g.take() {
                    let _ = g.unlock();
                }
                released.push(t);
                std::thread::sleep(gap);
            }
            released
        })
    };
    held_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("holder ready");

    let client = Client::open(url).expect("waiter client");
    let deadline = Duration::from_secs(120);
    let mut waiters = Vec::with_capacity(threads);
    for t in 0..threads {
        let lock = client.lock(&names[t % nlocks]);
        let h = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let t_want = now_ns();
                match lock.try_lock_for(deadline) {
                    Ok(Some(g)) => {
                        let t_acq = now_ns();
                        let t_rel = now_ns();
                        let r = g.unlock();
                        Ok((t % nlocks, t_want, t_acq, t_rel, r.is_ok()))
                    }
                    Ok(None) => Err("timed out".to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .expect("spawn waiter");
        waiters.push(h);
    }
    // Every waiter registered (bounded wait).
    let t_reg = Instant::now();
    while client.stats().waiters < threads && t_reg.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let registered_s = t_reg.elapsed().as_secs_f64();
    let stats_waiting = client.stats();
    let (total_waiting, pubsub_waiting) = connections(&mut con);

    let _ = go_tx.send(());
    let released = holder.join().unwrap_or_default();
    let mut events: Vec<(usize, u64, u64, u64)> = Vec::new();
    let mut failures = Vec::new();
    for h in waiters {
        match h.join() {
            Ok(Ok((lock, tw, ta, tr, ok))) => {
                events.push((lock, tw, ta, tr));
                if !ok {
                    failures.push("unlock failed".to_owned());
                }
            }
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("waiter panicked".to_owned()),
        }
    }
    let stats_end = client.stats();
    let (total_end, pubsub_end) = connections(&mut con);

    // Per lock, in acquisition order: first wake-up after the holder's
    // release, then each handoff from the previous waiter.
    let mut by_lock: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for (l, _, a, r) in &events {
        by_lock.entry(*l).or_default().push((*a, *r));
    }
    let mut first = Vec::new();
    let mut chain = Vec::new();
    let mut overlaps = 0;
    for (l, mut ev) in by_lock {
        ev.sort_unstable();
        if let Some(&t_rel) = released.get(l)
            && let Some(&(a, _)) = ev.first()
        {
            first.push(a.saturating_sub(t_rel));
            if a < t_rel {
                overlaps += 1;
            }
        }
        for pair in ev.windows(2) {
            chain.push(pair[1].0.saturating_sub(pair[0].1));
            if pair[1].0 < pair[0].1 {
                overlaps += 1;
            }
        }
    }
    let mut all: Vec<u64> = first.iter().chain(&chain).copied().collect();
    first.sort_unstable();
    chain.sort_unstable();
    all.sort_unstable();
    json!({"w2": {
        "threads": threads, "locks": nlocks, "release_gap_ms": gap.as_secs_f64() * 1000.0,
        "acquired": events.len(), "failures": failures.len(),
        "failure_examples": failures.iter().take(3).collect::<Vec<_>>(),
        "overlaps": overlaps,
        "registered_s": registered_s,
        "waiters_registered": stats_waiting.waiters,
        "subscribed_channels": stats_waiting.subscribed_channels,
        "client_pubsub_connections": stats_waiting.pubsub_connections,
        "client_pool_connections": stats_waiting.pool_connections,
        "redis_connections_before": total_before, "redis_pubsub_before": pubsub_before,
        "redis_connections_waiting": total_waiting, "redis_pubsub_waiting": pubsub_waiting,
        "redis_connections_end": total_end, "redis_pubsub_end": pubsub_end,
        "client_pubsub_connections_end": stats_end.pubsub_connections,
        "wake_first_p50_us": us(pct(&first, 50.0)), "wake_first_p99_us": us(pct(&first, 99.0)),
        "wake_first_max_us": us(first.last().copied()),
        "handoff_p50_us": us(pct(&chain, 50.0)), "handoff_p99_us": us(pct(&chain, 99.0)),
        "wake_p50_us": us(pct(&all, 50.0)), "wake_p99_us": us(pct(&all, 99.0)),
        "wake_max_us": us(all.last().copied()),
        "wake_samples": all.len(),
    }})
}
