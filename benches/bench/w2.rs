//! W2: waiter fan-out: 1,000 threads of one client wait on 100 locks held
//! by another client, which releases them one by one.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redguard::{Client, Lock};
use serde_json::{Value, json};

use crate::observe::{admin, connections, pct, us};
use crate::peers::now_ns;

// W2: waiter fan-out

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
