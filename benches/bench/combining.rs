//! The scale case of connection combining: S3 (uncontended cycles, each
//! thread on its own names) with many threads and few connections, each
//! point measured for exclusive connections and for combining ones in
//! alternating order, in one process.

use std::time::Duration;

use redguard::{Client, ConnectionMode};
use serde_json::{Value, json};

use crate::protocol::{S3_NAMES_PER_WORKER, now_ns, s3_name};
use crate::scenarios::start_workers;
use crate::stats::{pct, us};
use crate::workers::guard_factory;

fn client(url: &str, mode: ConnectionMode, pool: usize) -> Client {
    let builder = Client::builder().url(url).pool_size(pool);
    match mode {
        ConnectionMode::Exclusive => builder,
        _ => builder.connection_mode(mode),
    }
    .build()
    .expect("redguard client")
}

/// One S3 phase of `phase` with `threads` threads on `client`: cycles/s
/// and the latency percentiles of a cycle. The phase starts once every
/// thread has made its lock handles and warmed up (256 threads making
/// 1,000 handles each take a noticeable part of a second).
fn phase(client: &Client, threads: usize, phase: Duration) -> Value {
    let factory = guard_factory(client);
    let phase_ns = phase.as_nanos() as u64;
    let (_, handles) = start_workers(
        threads,
        &factory,
        |w| (0..S3_NAMES_PER_WORKER).map(|i| s3_name(w, i)).collect(),
        move |_w, mut worker, t0| {
            let end = t0 + phase_ns;
            let mut samples = Vec::with_capacity(4096);
            let mut errors = 0u64;
            let mut i = 0;
            loop {
                let start = now_ns();
                if start >= end {
                    break;
                }
                match worker.cycle(i) {
                    Ok(()) => samples.push(now_ns() - start),
                    Err(_) => errors += 1,
                }
                i += 1;
            }
            (samples, errors)
        },
    );
    let mut all = Vec::new();
    let mut errors = 0;
    for h in handles {
        match h.join() {
            Ok(Some((s, e))) => {
                all.extend(s);
                errors += e;
            }
            Ok(None) => return json!({"error": "a worker could not start"}),
            Err(_) => return json!({"error": "worker panicked"}),
        }
    }
    all.sort_unstable();
    json!({"cycles_per_s": (all.len() as f64 / phase.as_secs_f64()).round(),
           "p50_us": us(pct(&all, 50.0)), "p99_us": us(pct(&all, 99.0)), "errors": errors})
}

/// One mode of the scale case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ScaleMode {
    Exclusive,
    Combining,
}

/// S3 for every `threads` × `pools` point, exclusive (pool size = the
/// point's) and combining (connections = the point's), `rounds` phases of
/// `secs` each per mode, in ABBA order; with `only`, that mode's phases
/// alone.
pub(crate) fn run_s3_scale(
    url: &str,
    threads: &[usize],
    pools: &[usize],
    rounds: usize,
    secs: Duration,
    only: Option<ScaleMode>,
) -> Value {
    let wants = |m: ScaleMode| only.is_none_or(|o| o == m);
    let mut points = Vec::new();
    for &t in threads {
        for &p in pools {
            let exclusive = client(url, ConnectionMode::Exclusive, p);
            let combining = client(url, ConnectionMode::Combining { connections: p }, p);
            let (mut ex, mut co) = (Vec::new(), Vec::new());
            for r in 0..rounds {
                let order = if r % 2 == 0 {
                    [ScaleMode::Exclusive, ScaleMode::Combining]
                } else {
                    [ScaleMode::Combining, ScaleMode::Exclusive]
                };
                for mode in order.into_iter().filter(|&m| wants(m)) {
                    match mode {
                        ScaleMode::Exclusive => ex.push(phase(&exclusive, t, secs)),
                        ScaleMode::Combining => co.push(phase(&combining, t, secs)),
                    }
                }
            }
            eprintln!("threads {t} pool {p}: exclusive {ex:?} combining {co:?}");
            points.push(json!({"threads": t, "connections": p,
                               "exclusive": ex, "combining": co}));
        }
    }
    json!({"s3_scale": points, "phase_s": secs.as_secs_f64(), "rounds": rounds})
}
