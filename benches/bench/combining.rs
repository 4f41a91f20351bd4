//! The scale case of connection combining: S3 (uncontended cycles, each
//! thread on its own names) with many threads and few connections, each
//! point measured for exclusive connections and for combining ones in
//! alternating order, in one process.

use std::time::Duration;

use redguard::{Client, ConnectionMode};
use serde_json::{Value, json};

use crate::protocol::{S3_NAMES_PER_WORKER, now_ns, s3_name};
use crate::scenarios::{run_s2, start_workers};
use crate::stats::{pct, quartiles, us};
use crate::workers::{Factory, guard_factory};

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
    /// Combining with writes and reads overlapping (`ConnectionMode::Duplex`).
    Duplex,
}

impl ScaleMode {
    fn key(self) -> &'static str {
        match self {
            ScaleMode::Exclusive => "exclusive",
            ScaleMode::Combining => "combining",
            ScaleMode::Duplex => "duplex",
        }
    }

    fn connection_mode(self, connections: usize) -> ConnectionMode {
        match self {
            ScaleMode::Exclusive => ConnectionMode::Exclusive,
            ScaleMode::Combining => ConnectionMode::Combining { connections },
            ScaleMode::Duplex => ConnectionMode::Duplex { connections },
        }
    }
}

/// S3 for every `threads` × `pools` point, exclusive (pool size = the
/// point's) and combining (connections = the point's), `rounds` phases of
/// `secs` each per mode, the order of the modes reversed every round; with
/// `only`, those modes' phases alone (default: exclusive and combining).
pub(crate) fn run_s3_scale(
    url: &str,
    threads: &[usize],
    pools: &[usize],
    rounds: usize,
    secs: Duration,
    only: &[ScaleMode],
) -> Value {
    let modes: Vec<ScaleMode> = if only.is_empty() {
        vec![ScaleMode::Exclusive, ScaleMode::Combining]
    } else {
        only.to_vec()
    };
    let mut points = Vec::new();
    for &t in threads {
        for &p in pools {
            let clients: Vec<Client> = modes
                .iter()
                .map(|m| client(url, m.connection_mode(p), p))
                .collect();
            let mut phases: Vec<Vec<Value>> = vec![Vec::new(); modes.len()];
            for r in 0..rounds {
                let mut order: Vec<usize> = (0..modes.len()).collect();
                if r % 2 == 1 {
                    order.reverse();
                }
                for i in order {
                    phases[i].push(phase(&clients[i], t, secs));
                }
            }
            let mut point = json!({"threads": t, "connections": p});
            for (m, ph) in modes.iter().zip(phases) {
                eprintln!("threads {t} pool {p}: {} {ph:?}", m.key());
                point[m.key()] = json!(ph);
            }
            points.push(point);
        }
    }
    json!({"s3_scale": points, "phase_s": secs.as_secs_f64(), "rounds": rounds})
}

/// One S2 run's acquisitions per second and release→other latency
/// (release to the next acquisition by another worker), as the peers'
/// analyser computes them.
fn s2_summary(run: &Value) -> Value {
    let t0 = run["t_start_ns"].as_u64().unwrap_or(0);
    let t1 = run["t_end_ns"].as_u64().unwrap_or(0);
    let mut ev: Vec<[u64; 4]> = run["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    let f = |i: usize| e.get(i).and_then(Value::as_u64);
                    Some([f(0)?, f(1)?, f(2)?, f(3)?])
                })
                .filter(|e| e[2] <= t1)
                .collect()
        })
        .unwrap_or_default();
    ev.sort_by_key(|e| e[2]);
    let mut rel_other = Vec::with_capacity(ev.len());
    let mut next = None;
    for i in (0..ev.len()).rev() {
        if i + 1 < ev.len() && ev[i + 1][0] != ev[i][0] {
            next = Some(ev[i + 1][2]);
        }
        if let Some(n) = next {
            rel_other.push(n.saturating_sub(ev[i][3]));
        }
    }
    rel_other.sort_unstable();
    let secs = t1.saturating_sub(t0) as f64 / 1e9;
    json!({"acquisitions_per_s": if secs > 0.0 { (ev.len() as f64 / secs).round() } else { 0.0 },
           "release_to_other_p50_us": us(pct(&rel_other, 50.0)),
           "release_to_other_p99_us": us(pct(&rel_other, 99.0)),
           "errors": run["errors"], "acquire_failures": run["acquire_failures"]})
}

/// S2 (8 threads, one name, 5 s) of `a` and `b` alternating in one process,
/// `rounds` runs each in ABBA order: each run's acquisitions/s and
/// release→other p50/p99, and their quartiles per side.
pub(crate) fn run_ab_s2(a: &Factory, b: &Factory, rounds: usize) -> Value {
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        if r % 2 == 0 {
            ra.push(s2_summary(&run_s2(a)));
            rb.push(s2_summary(&run_s2(b)));
        } else {
            rb.push(s2_summary(&run_s2(b)));
            ra.push(s2_summary(&run_s2(a)));
        }
    }
    let side = |runs: &[Value]| {
        let field = |k: &str| {
            let mut v: Vec<f64> = runs.iter().filter_map(|r| r[k].as_f64()).collect();
            quartiles(&mut v)
        };
        json!({"runs": runs,
               "acquisitions_per_s": field("acquisitions_per_s"),
               "release_to_other_p50_us": field("release_to_other_p50_us"),
               "release_to_other_p99_us": field("release_to_other_p99_us")})
    };
    json!({"a": side(&ra), "b": side(&rb)})
}

/// The scale goal as an A/B in one process: S3 with 256 threads
/// combining on 4 shared connections ("a") against 8 threads on exclusive
/// connections (pool 16: one each, "b"), `rounds` phases of `secs` each
/// per side in ABBA order; the ratio a / b per pair of phases.
pub(crate) fn run_ab_scale(url: &str, rounds: usize, secs: Duration) -> Value {
    let combining = client(url, ConnectionMode::Combining { connections: 4 }, 4);
    let exclusive = client(url, ConnectionMode::Exclusive, 16);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (pa, pb) = if r % 2 == 0 {
            let pa = phase(&combining, 256, secs);
            (pa, phase(&exclusive, 8, secs))
        } else {
            let pb = phase(&exclusive, 8, secs);
            (phase(&combining, 256, secs), pb)
        };
        if let (Some(x), Some(y)) = (pa["cycles_per_s"].as_f64(), pb["cycles_per_s"].as_f64())
            && y > 0.0
        {
            ratios.push(x / y);
        }
        eprintln!("round {r}: 256 x 4 combining {pa} / 8 exclusive {pb}");
        a.push(pa);
        b.push(pb);
    }
    let cps = |v: &[Value]| {
        let mut c: Vec<f64> = v
            .iter()
            .filter_map(|p| p["cycles_per_s"].as_f64())
            .collect();
        quartiles(&mut c)
    };
    json!({"ab_scale": {
        "a": "256 threads, combining on 4 connections", "b": "8 threads, exclusive connections (pool 16)",
        "phase_s": secs.as_secs_f64(), "a_phases": a, "b_phases": b,
        "a_cycles_per_s": cps(&a), "b_cycles_per_s": cps(&b), "ratio_a_to_b": quartiles(&mut ratios)}})
}
