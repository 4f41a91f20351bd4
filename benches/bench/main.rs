//! Benchmark driver: redguard beside the raw-Redis floor, plus redguard's
//! own scale scenarios. `scripts/bench` starts a private redis-server and
//! runs everything; by hand:
//!
//! ```text
//! cargo bench --bench bench -- --port P                 redguard row: S1/S2/S3 raw driver JSON
//! cargo bench --bench bench -- --port P --floor         raw-Redis floor row, same JSON
//! cargo bench --bench bench -- --port P --w1 [--w1-n 10000,100000] [--w1-watchdog 30s,3s]
//! cargo bench --bench bench -- --port P --w2 [--w2-threads 1000] [--w2-locks 100]
//! cargo bench --bench bench -- --port P --ab [--ab-rounds 20]
//! cargo bench --bench bench -- --port P --only s1,s2
//! ```
//!
//! S1/S2/S3 follow the shared peers protocol exactly (scenario constants,
//! clock, key names, warm-up, start instant, nearest-rank statistics left to
//! the analyser): one `redguard::Client` shared by all workers, each worker
//! its own `Lock`, default watchdog mode (`try_lock()` for uncontended
//! cycles, blocking `lock()` in S2). The floor is the peers' `raw-sync` row
//! re-implemented here: one blocking `redis::Connection` per worker and two
//! `EVALSHA` round trips per cycle with the protocol's floor scripts.
//!
//! The scale scenarios print their own JSON document (`{"w1": [...]}` /
//! `{"w2": {...}}`); `scripts/bench` renders the report.
//!
//! Files: `peers.rs` (S1/S2/S3 and the two rows), `ab.rs` (the A/B mode),
//! `w1.rs` and `w2.rs` (scale), `observe.rs` (process and server readings).

// A benchmark paces itself: common start instants, hold periods, release
// gaps and a sampler's rate are all sleeps by design.
#![allow(
    clippy::disallowed_methods,
    reason = "the driver's pacing (start instants, holds, gaps) is made of sleeps"
)]

mod ab;
mod observe;
mod peers;
mod w1;
mod w2;

use std::time::Duration;

use clap::Parser;
use redguard::Client;
use serde_json::{Value, json};

/// The driver's command line (see the module docs).
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "redguard's benchmark driver (scripts/bench runs it)"
)]
struct Args {
    /// Port of the redis-server on 127.0.0.1 to benchmark against. Without
    /// it the driver does nothing (so `cargo test --all-targets` passes).
    #[arg(long)]
    port: Option<u16>,
    /// The raw-Redis floor row instead of redguard's.
    #[arg(long, conflicts_with_all = ["w1", "w2", "ab"])]
    floor: bool,
    /// W1, the watchdog at scale.
    #[arg(long, conflicts_with_all = ["w2", "ab"])]
    w1: bool,
    /// W2, waiter fan-out.
    #[arg(long, conflicts_with = "ab")]
    w2: bool,
    /// S1 and S3 with redguard and the floor interleaved in one process
    /// (blocks of 1,000 cycles / phases of 500 ms).
    #[arg(long)]
    ab: bool,
    /// Rounds of the A/B mode.
    #[arg(long, default_value_t = 20)]
    ab_rounds: usize,
    /// A subset of S1/S2/S3, e.g. `s1,s3` (profiling).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// W1: numbers of held locks, one case each.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000_usize, 100_000])]
    w1_n: Vec<usize>,
    /// W1: watchdog timeouts (leases), one case each: `30s`, `3s`, `1500ms`.
    #[arg(long, value_delimiter = ',', value_parser = parse_duration, default_values = ["30s", "3s"])]
    w1_watchdog: Vec<Duration>,
    /// W1: renewals per script call (`Builder::renew_batch`).
    #[arg(long, default_value_t = 100)]
    w1_batch: usize,
    /// W1: renewal periods to hold for.
    #[arg(long, default_value_t = 3)]
    w1_periods: u32,
    /// W2: waiting threads.
    #[arg(long, default_value_t = 1000)]
    w2_threads: usize,
    /// W2: locks they wait on.
    #[arg(long, default_value_t = 100)]
    w2_locks: usize,
    /// W2: pause between the holder's releases, in ms.
    #[arg(long = "w2-gap-ms", default_value_t = 20)]
    w2_gap_ms: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// Test-name filters passed by `cargo test` / `cargo bench`; ignored.
    #[arg(hide = true)]
    filters: Vec<String>,
}

/// `30s`, `1.5s`, `1500ms` or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let secs = |v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("not a duration: {s:?}"))
    };
    if let Some(ms) = s.strip_suffix("ms") {
        Ok(Duration::from_secs_f64(secs(ms)? / 1000.0))
    } else if let Some(v) = s.strip_suffix('s') {
        Ok(Duration::from_secs_f64(secs(v)?))
    } else {
        Ok(Duration::from_secs_f64(secs(s)?))
    }
}

fn main() {
    let args = Args::parse();
    let Some(port) = args.port else {
        eprintln!("bench: no --port given, nothing to run (scripts/bench runs the benchmarks)");
        return;
    };
    let url = format!("redis://127.0.0.1:{port}/");
    let _ = peers::now_ns();

    let out = if args.ab {
        let client = Client::open(&url).expect("redguard client");
        json!({"ab": {
            "s1": ab::run_ab_s1(&client, &url, args.ab_rounds, 1000),
            "s3": ab::run_ab_s3(&client, &url, args.ab_rounds / 2, Duration::from_millis(500)),
        }})
    } else if args.w1 {
        w1::run_w1(
            &url,
            &args.w1_n,
            &args.w1_watchdog,
            args.w1_batch,
            args.w1_periods,
        )
    } else if args.w2 {
        w2::run_w2(
            &url,
            args.w2_threads,
            args.w2_locks,
            Duration::from_millis(args.w2_gap_ms),
        )
    } else if args.floor {
        let (s1, s2, s3) = peers::run_row(&peers::floor_factory(&url), &args.only);
        json!({
            "lang": "rust", "library": "raw-redis-floor (sync)", "version": "redis crate 1.8.1",
            "client": "redguard benches/bench --floor",
            "concurrency": "8 OS threads (std::thread), one sync redis::Connection each",
            "defaults": {"retry": "S2 spins: re-sends the lock EVALSHA immediately, no sleep",
                         "lock_ttl_ms": peers::LOCK_TTL_MS,
                         "commands_per_cycle": "EVALSHA lock + EVALSHA unlock (2 round trips, no pipelining)"},
            "s1": s1, "s2": s2, "s2_tuned": Value::Null, "s3": s3,
        })
    } else {
        let client = Client::open(&url).expect("redguard client");
        let (s1, s2, s3) = peers::run_row(&peers::guard_factory(&client), &args.only);
        json!({
            "lang": "rust", "library": "redguard", "version": env!("CARGO_PKG_VERSION"),
            "client": format!("redguard::Client (pool {})", 16),
            "concurrency": "8 OS threads (std::thread), one shared redguard::Client, one Lock handle each",
            "defaults": {"blocking_api": "Lock::lock(): waits for the unlock message (pub/sub), no polling",
                         "uncontended_api": "Lock::try_lock() + LockGuard::unlock()",
                         "lease": "watchdog: 30 s lease renewed every 10 s (lock TTL argument not applicable)",
                         "pool_size": 16,
                         "poll_interval_ms": 1000u64,
                         "commands_per_cycle": "EVALSHA lock + EVALSHA unlock (unlock PUBLISHes on full release)"},
            "s1": s1, "s2": s2, "s2_tuned": Value::Null, "s3": s3,
        })
    };
    println!("{out}");
}
