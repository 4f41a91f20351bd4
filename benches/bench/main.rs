//! Benchmark driver: redguard beside the raw-Redis floor, plus redguard's
//! own scale and synchronizer scenarios. Needs a running `redis-server`:
//! `scripts/bench` starts a private one, builds this target and runs every
//! mode (see BENCHMARKS.md).
//!
//! ```text
//! bench --port P                 redguard row: S1/S2/S3 raw driver JSON (../shared/bench protocol)
//! bench --port P --floor         raw-Redis floor row (two EVALSHA round trips per cycle), same JSON
//! bench --port P --ab [--ab-rounds 20]   S1/S3 ratios from redguard and the floor interleaved
//! bench --port P --rw [--rw-read-percent 90] [--rw-rounds 2]   read-write lock vs reentrant lock, S2-style
//! bench --port P --sem [--sem-rounds 20] semaphore cycles vs the floor, interleaved
//! bench --port P --w1 [--w1-n 10000,100000] [--w1-watchdog 30s,3s] [--w1-batch 100] [--w1-periods 3]
//! bench --port P --w2 [--w2-threads 1000] [--w2-locks 100] [--w2-gap-ms 20]
//! bench --port P --names [--names-n 220000] [--names-warmup 20000] [--names-threads 8]
//! bench --port P --only s1,s2    a subset of S1/S2/S3 (profiling)
//! bench --port P --s2-runs [--s2-rounds 4]   S2 runs: release→other p50/p99 per run
//! bench --port P --ab-scale [--scale-rounds 2] [--scale-secs 1]   S3: 256 threads ("a") vs 8
//!                                threads ("b"), each on one default client
//! bench --port P --s3-scale [--scale-threads 8,64,256] [--scale-secs 1]
//!                                S3 with many threads on one client
//! bench --cluster-seeds P1,P2,P3 --ab-classic   S1/S3 A/B of ClassicPublish::Always against Auto
//! bench --port P --ab-records                     S1/S3 A/B of holder records on against off
//! bench --cluster-seeds P1,P2,P3 [--floor | --ab [--floor-publish] | --w1 ...]   the same modes on a running
//!                                cluster (CLUSTER=1 scripts/bench starts one)
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
//! The other modes print their own JSON document (`{"ab": ..}`, `{"rw": ..}`,
//! `{"sem": ..}`, `{"w1": [..]}`, `{"w2": ..}`, `{"names": ..}`); `scripts/bench` renders
//! the report.

// A benchmark paces itself: common start instants, hold periods, release
// gaps and a sampler's rate are sleeps by design (clippy.toml bans them in
// the library).
#![allow(
    clippy::disallowed_methods,
    reason = "the driver's pacing (start instants, holds, gaps) is made of sleeps"
)]

mod ab;
mod names;
mod observe;
mod protocol;
mod scale;
mod scenarios;
mod stats;
mod sync;
mod target;
mod threads;
mod workers;

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser, ValueEnum};
use redguard::Client;
use serde_json::{Value, json};

use crate::protocol::{LOCK_TTL_MS, now_ns};
use crate::target::Target;
use crate::workers::{Factory, guard_factory};

/// One of the peers protocol's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    S1,
    S2,
    S3,
}

/// redguard's benchmark driver (the default mode prints redguard's row of
/// the shared peers protocol as raw driver JSON).
#[derive(Debug, Parser)]
#[command(name = "bench", bin_name = "bench", group(ArgGroup::new("mode").args(["floor", "ab", "ab_classic", "ab_records", "s2_runs", "ab_scale", "s3_scale", "rw", "sem", "w1", "w2", "names"])))]
struct Args {
    /// Port of the redis-server to use, on 127.0.0.1.
    #[arg(long)]
    port: Option<u16>,
    /// Ports (on 127.0.0.1) of Redis Cluster nodes, instead of `--port`:
    /// redguard opens a `redis+cluster://` URL with them as seeds, and the
    /// floor uses redis-rs's `ClusterConnection`. For S1/S2/S3, `--ab` and
    /// `--w1`.
    #[arg(long, value_delimiter = ',', conflicts_with = "port")]
    cluster_seeds: Vec<u16>,
    /// With `--cluster-seeds`: the floor's unlock script also `PUBLISH`es
    /// (one message, as redguard's unlock sends), to tell the cost of a
    /// cluster-wide publish from the rest (not part of the protocol).
    #[arg(long, requires = "cluster_seeds")]
    floor_publish: bool,
    /// redguard's `ClassicPublish` on a cluster (`auto`, the default, or
    /// `always`), for every mode.
    #[arg(long, value_parser = parse_classic_publish, default_value = "auto")]
    classic_publish: redguard::ClassicPublish,
    /// With `--cluster-seeds`: S1 and S3 A/B of redguard with
    /// `ClassicPublish::Always` (reported as "redguard") against redguard
    /// with `Auto` (reported as "floor"): the cost of the classic message.
    #[arg(long, requires = "cluster_seeds")]
    ab_classic: bool,
    /// S1 and S3 A/B of redguard with holder records on (reported as
    /// "redguard") against records off (reported as "floor"): what the
    /// records cost.
    #[arg(long)]
    ab_records: bool,
    /// `--s2-rounds` S2 runs of redguard: each run's acquisitions/s and
    /// release→other p50/p99.
    #[arg(long)]
    s2_runs: bool,
    /// S3 A/B of 256 threads against 8 threads, each on one default
    /// client, `--scale-rounds` phases of `--scale-secs` per side,
    /// interleaved.
    #[arg(long)]
    ab_scale: bool,
    /// S2 runs.
    #[arg(long, default_value_t = 4)]
    s2_rounds: usize,
    /// S3 with each of `--scale-threads` on one client, interleaved.
    #[arg(long)]
    s3_scale: bool,
    /// S3 scale: thread counts.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 64, 256])]
    scale_threads: Vec<usize>,
    /// S3 scale: seconds per phase.
    #[arg(long, default_value_t = 1.0)]
    scale_secs: f64,
    /// S3 scale: phases per thread count.
    #[arg(long, default_value_t = 2)]
    scale_rounds: usize,
    /// The raw-Redis floor's row instead of redguard's: two EVALSHA round
    /// trips per cycle, spinning in S2.
    #[arg(long)]
    floor: bool,
    /// Only these scenarios of the row (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,

    /// S1 and S3 with redguard and the floor interleaved in one process
    /// (S1: blocks of 1,000 cycles; S3: 500 ms phases; ABBA order).
    #[arg(long)]
    ab: bool,
    /// A/B: S1 blocks per library (S3 phase pairs: half as many).
    #[arg(long, default_value_t = 20)]
    ab_rounds: usize,

    /// The read-write lock under S2-style contention (8 threads, 5 s per
    /// phase), beside the reentrant lock in alternating phases.
    #[arg(long)]
    rw: bool,
    /// Share of read-lock acquisitions, in percent.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=100))]
    rw_read_percent: u32,
    /// Pairs of phases (reentrant, read-write), ABBA order.
    #[arg(long, default_value_t = 2)]
    rw_rounds: usize,

    /// Semaphore acquire/release cycles beside the floor, interleaved: one
    /// thread on 1 permit, then 8 threads on 8 permits.
    #[arg(long)]
    sem: bool,
    /// Semaphore A/B: 1-thread blocks per side (8-thread phase pairs: half
    /// as many).
    #[arg(long, default_value_t = 20)]
    sem_rounds: usize,

    /// W1, the watchdog at scale: one client, one thread holding N locks
    /// for a few renewal periods; one case per N and lease.
    #[arg(long)]
    w1: bool,
    /// W1: numbers of held locks.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 100_000])]
    w1_n: Vec<usize>,
    /// W1: watchdog leases (e.g. 30s,3s).
    #[arg(long, value_delimiter = ',', value_parser = humantime::parse_duration, default_values = ["30s", "3s"])]
    w1_watchdog: Vec<Duration>,
    /// W1: renewals per script call.
    #[arg(long, default_value_t = 100)]
    w1_batch: usize,
    /// W1: renewal periods to hold for.
    #[arg(long, default_value_t = 3)]
    w1_periods: u32,

    /// W2, waiter fan-out: threads block on locks held by another client,
    /// which releases them one by one.
    #[arg(long)]
    w2: bool,
    /// W2: waiting threads.
    #[arg(long, default_value_t = 1000)]
    w2_threads: usize,
    /// W2: locks they wait on.
    #[arg(long, default_value_t = 100)]
    w2_locks: usize,
    /// W2: milliseconds between two releases of the holder.
    #[arg(long, default_value_t = 20)]
    w2_gap_ms: u64,

    /// N1, many distinct names: threads of one client lock and release
    /// names never used twice; the client's memory growth per name.
    #[arg(long)]
    names: bool,
    /// N1: names measured (after the warm-up), over all threads.
    #[arg(long, default_value_t = 220_000)]
    names_n: usize,
    /// N1: names locked and released before the measurement.
    #[arg(long, default_value_t = 20_000)]
    names_warmup: usize,
    /// N1: threads.
    #[arg(long, default_value_t = 8)]
    names_threads: usize,
    /// N1: memory samples over the measured names.
    #[arg(long, default_value_t = 11)]
    names_samples: usize,
    /// N1: how long each name is held, in microseconds.
    #[arg(long, default_value_t = 0)]
    names_hold_us: u64,

    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> ExitCode {
    let port_given =
        std::env::args().any(|a| a.starts_with("--port") || a.starts_with("--cluster"));
    let args = match Args::try_parse() {
        Ok(args) => args,
        // `cargo test` (`--all-targets`, as CI runs it) starts bench targets
        // too, with the test harness's arguments (filters, --test-threads):
        // without a server there is nothing to measure, which is no failure.
        Err(e) if !port_given && e.use_stderr() => return nothing_to_measure(),
        Err(e) => e.exit(),
    };
    let mut target = match (args.port, args.cluster_seeds.is_empty()) {
        (Some(port), _) => Target::single(port),
        (None, false) => match Target::cluster(&args.cluster_seeds) {
            Ok(target) => target,
            Err(e) => {
                eprintln!("bench: {e}");
                return ExitCode::FAILURE;
            }
        },
        (None, true) => return nothing_to_measure(),
    };
    target.floor_publish = args.floor_publish;
    if target.cluster && (args.rw || args.sem || args.w2 || args.names) {
        eprintln!("bench: --rw, --sem, --w2 and --names take --port (one server)");
        return ExitCode::FAILURE;
    }
    let url = target.client_url.clone();
    let _ = now_ns();
    let classic = args.classic_publish;
    let client_with = |classic| {
        Client::builder()
            .url(&url)
            .classic_publish(classic)
            .build()
            .expect("redguard client")
    };
    let client = || client_with(classic);

    let out = if args.ab_records {
        let records = |on: bool| {
            Client::builder()
                .url(&url)
                .classic_publish(classic)
                .holder_record(on)
                .build()
                .expect("redguard client")
        };
        let (on, off) = (
            guard_factory(&records(true)),
            guard_factory(&records(false)),
        );
        json!({"ab_records": {
            "a": "redguard, holder records on", "b": "redguard, holder records off",
            "s1": ab::run_ab_s1(&on, &off, "bench:ab:s1", args.ab_rounds, 1000),
            "s3": ab::run_ab_s3(&on, &off, args.ab_rounds / 2, Duration::from_millis(500)),
        }})
    } else if args.ab_classic {
        let always = guard_factory(&client_with(redguard::ClassicPublish::Always));
        let auto = guard_factory(&client_with(redguard::ClassicPublish::Auto));
        json!({"ab_classic": {
            "a": "redguard, ClassicPublish::Always", "b": "redguard, ClassicPublish::Auto",
            "s1": ab::run_ab_s1(&always, &auto, "bench:ab:s1", args.ab_rounds, 1000),
            "s3": ab::run_ab_s3(&always, &auto, args.ab_rounds / 2, Duration::from_millis(500)),
        }})
    } else if args.s2_runs {
        json!({ "s2_runs": threads::run_s2_runs(&guard_factory(&client()), args.s2_rounds) })
    } else if args.ab_scale {
        threads::run_ab_scale(
            &url,
            args.scale_rounds,
            Duration::from_secs_f64(args.scale_secs.clamp(0.05, 60.0)),
        )
    } else if args.s3_scale {
        threads::run_s3_scale(
            &url,
            &args.scale_threads,
            args.scale_rounds,
            Duration::from_secs_f64(args.scale_secs.clamp(0.05, 60.0)),
        )
    } else if args.ab {
        let (sut, floor) = (guard_factory(&client()), target.floor_factory());
        json!({"ab": {
            "s1": ab::run_ab_s1(&sut, &floor, "bench:ab:s1", args.ab_rounds, 1000),
            "s3": ab::run_ab_s3(&sut, &floor, args.ab_rounds / 2, Duration::from_millis(500)),
        }})
    } else if args.rw {
        sync::run_rw(
            &client(),
            args.rw_read_percent,
            args.rw_rounds,
            Duration::from_nanos(protocol::S2_DURATION_NS),
        )
    } else if args.sem {
        sync::run_sem(&client(), &url, args.sem_rounds)
    } else if args.w1 {
        scale::run_w1(
            &target,
            &args.w1_n,
            &args.w1_watchdog,
            args.w1_batch,
            args.w1_periods,
        )
    } else if args.names {
        names::run_names(
            &url,
            &names::NamesConfig {
                n: args.names_n,
                warmup: args.names_warmup,
                threads: args.names_threads,
                samples: args.names_samples,
                hold: Duration::from_micros(args.names_hold_us),
            },
        )
    } else if args.w2 {
        scale::run_w2(
            &url,
            args.w2_threads,
            args.w2_locks,
            Duration::from_millis(args.w2_gap_ms),
        )
    } else if args.floor {
        let (s1, s2, s3) = run_row(&target.floor_factory(), &args.only);
        let (library, concurrency) = if target.cluster {
            (
                "raw-redis-floor (sync, cluster)",
                "8 OS threads (std::thread), one sync redis::cluster::ClusterConnection each",
            )
        } else {
            (
                "raw-redis-floor (sync)",
                "8 OS threads (std::thread), one sync redis::Connection each",
            )
        };
        json!({
            "lang": "rust", "library": library, "version": "redis crate 1.8.1",
            "client": "redguard benches/bench --floor",
            "concurrency": concurrency,
            "defaults": {"retry": "S2 spins: re-sends the lock EVALSHA immediately, no sleep",
                         "lock_ttl_ms": LOCK_TTL_MS,
                         "commands_per_cycle": "EVALSHA lock + EVALSHA unlock (2 round trips, no pipelining)"},
            "s1": s1, "s2": s2, "s2_tuned": Value::Null, "s3": s3,
        })
    } else {
        let (s1, s2, s3) = run_row(&guard_factory(&client()), &args.only);
        json!({
            "lang": "rust",
            "library": if target.cluster { "redguard (cluster)" } else { "redguard" },
            "version": env!("CARGO_PKG_VERSION"),
            "client": format!("redguard::Client (pool {})", 16),
            "concurrency": "8 OS threads (std::thread), one shared redguard::Client, one Lock handle each",
            "defaults": {"blocking_api": "Lock::lock(): waits for the unlock message (pub/sub), no polling",
                         "uncontended_api": "Lock::try_lock() + LockGuard::unlock()",
                         "lease": "watchdog: 30 s lease renewed every 10 s (lock TTL argument not applicable)",
                         "pool_size": 16,
                         "connections": "lock calls pipelined on one shared connection; the pool for MULTI/EXEC, WAIT, status",
                         "poll_interval_ms": 1000u64,
                         "commands_per_cycle": "EVALSHA lock + EVALSHA unlock (unlock PUBLISHes on full release)"},
            "s1": s1, "s2": s2, "s2_tuned": Value::Null, "s3": s3,
        })
    };
    println!("{out}");
    ExitCode::SUCCESS
}

/// Run without `--port` (plain `cargo bench`, `cargo test --all-targets`):
/// says how to run it and succeeds.
fn nothing_to_measure() -> ExitCode {
    eprintln!(
        "bench: nothing measured without --port P of a running redis-server; \
         scripts/bench starts one and runs every mode (see --help)"
    );
    ExitCode::SUCCESS
}

/// The row's scenarios (`only` empty: all three); `null` for the others.
fn run_row(factory: &Factory, only: &[Scenario]) -> (Value, Value, Value) {
    let want = |s: Scenario| only.is_empty() || only.contains(&s);
    let run = |s: Scenario, f: fn(&Factory) -> Value| {
        if want(s) { f(factory) } else { Value::Null }
    };
    (
        run(Scenario::S1, scenarios::run_s1),
        run(Scenario::S2, scenarios::run_s2),
        run(Scenario::S3, scenarios::run_s3),
    )
}

/// `--classic-publish`: `auto` or `always`.
fn parse_classic_publish(s: &str) -> Result<redguard::ClassicPublish, String> {
    s.parse().map_err(|e: redguard::Error| e.to_string())
}
