//! N1, many distinct names: threads of one client lock and release names
//! they never use again (one name per order, say). Whatever the client
//! keeps per name after its last hold shows as memory that grows with the
//! names; the goal is none.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redguard::Client;
use serde_json::{Value, json};

use crate::observe::{heap_in_use, rss_kib};

/// N1's shape.
pub(crate) struct NamesConfig {
    /// Names measured, over all threads.
    pub(crate) n: usize,
    /// Names locked and released before the measurement starts (the
    /// client's connections, buffers and the allocator's arenas settle).
    pub(crate) warmup: usize,
    pub(crate) threads: usize,
    /// Memory samples taken over the measured names.
    pub(crate) samples: usize,
    /// How long each name is held (the work done under it).
    pub(crate) hold: Duration,
}

/// Locks and releases `count` names `bench:n1:<prefix>:t<t>:<i>` on each of
/// `threads` threads (`count` over all of them). Returns the errors.
fn cycle_names(client: &Client, prefix: &str, count: usize, threads: usize, hold: Duration) -> u64 {
    let errors = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for t in 0..threads {
            let per = count / threads + usize::from(t < count % threads);
            let errors = errors.clone();
            scope.spawn(move || {
                for i in 0..per {
                    let lock = client.lock(format!("bench:n1:{prefix}:t{t}:{i}"));
                    match lock.lock() {
                        Ok(guard) => {
                            if !hold.is_zero() {
                                std::thread::sleep(hold);
                            }
                            if guard.unlock().is_err() {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    errors.load(Ordering::Relaxed)
}

/// Waits (at most 10 s) until the client holds nothing and its watchdog
/// keeps no entry, then lets the listened holds' sweep pass: the state
/// left is what stays.
fn settle(client: &Client) -> Value {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let s = client.stats();
        if s.held_locks == 0 && s.watchdog_entries == 0 && s.listened_holds == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1200));
    let s = client.stats();
    json!({"held_locks": s.held_locks, "watchdog_entries": s.watchdog_entries,
           "listened_holds": s.listened_holds, "waiters": s.waiters,
           "subscribed_channels": s.subscribed_channels, "settle_s": start.elapsed().as_secs_f64()})
}

pub(crate) fn run_names(url: &str, cfg: &NamesConfig) -> Value {
    let client = Client::open(url).expect("client");
    let threads = cfg.threads.max(1);
    let t0 = Instant::now();
    let warm_errors = cycle_names(&client, "warm", cfg.warmup, threads, cfg.hold);
    let warmup_s = t0.elapsed().as_secs_f64();
    let after_warmup = settle(&client);
    let (rss0, heap0) = (rss_kib(), heap_in_use());

    // The measured names in `samples` steps, memory read after each (the
    // growth's shape: a step function is a table doubling, a line is
    // per-name state).
    let steps = cfg.samples.max(1);
    let mut curve = Vec::with_capacity(steps);
    let mut errors = 0u64;
    let mut done = 0usize;
    let t1 = Instant::now();
    for step in 0..steps {
        let upto = cfg.n * (step + 1) / steps;
        errors += cycle_names(&client, &format!("s{step}"), upto - done, threads, cfg.hold);
        done = upto;
        curve.push(json!({"names": done, "rss_kib": rss_kib(), "heap_kib": heap_in_use() / 1024}));
    }
    let run_s = t1.elapsed().as_secs_f64();
    let after = settle(&client);
    let (rss1, heap1) = (rss_kib(), heap_in_use());
    let per_name = |grown_b: i64| grown_b as f64 / cfg.n.max(1) as f64;
    let rss_grown_b = (rss1 as i64 - rss0 as i64) * 1024;
    let heap_grown_b = heap1 as i64 - heap0 as i64;
    json!({"names": {
        "n": cfg.n, "warmup": cfg.warmup, "threads": threads,
        "hold_us": cfg.hold.as_micros() as u64,
        "warmup_s": warmup_s, "run_s": run_s, "names_per_s": cfg.n as f64 / run_s,
        "errors": errors + warm_errors,
        "rss_before_kib": rss0, "rss_after_kib": rss1,
        "rss_growth_kib": rss_grown_b / 1024, "rss_per_name_b": per_name(rss_grown_b),
        "heap_before_kib": heap0 / 1024, "heap_after_kib": heap1 / 1024,
        "heap_growth_kib": heap_grown_b / 1024, "heap_per_name_b": per_name(heap_grown_b),
        "stats_after_warmup": after_warmup, "stats_after": after,
        "curve": curve,
    }})
}
