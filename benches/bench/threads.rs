//! The shared connection with many threads: S3 (uncontended cycles, each
//! thread on its own names) at several thread counts on one default
//! client, and S2's release→other latency per run, in one process.

use std::time::Duration;

use redguard::Client;
use serde_json::{Value, json};

use crate::protocol::{S3_NAMES_PER_WORKER, now_ns, s3_name};
use crate::scenarios::{run_s2, start_workers};
use crate::stats::{pct, quartiles, us};
use crate::workers::{Factory, guard_factory};

fn client(url: &str) -> Client {
    Client::builder().url(url).build().expect("redguard client")
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

/// S3 for every thread count of `threads` on one default client,
/// `rounds` phases of `secs` each, the thread counts interleaved (the order
/// reversed every round).
pub(crate) fn run_s3_scale(url: &str, threads: &[usize], rounds: usize, secs: Duration) -> Value {
    let client = client(url);
    let mut phases: Vec<Vec<Value>> = vec![Vec::new(); threads.len()];
    for r in 0..rounds {
        let mut order: Vec<usize> = (0..threads.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            phases[i].push(phase(&client, threads[i], secs));
        }
    }
    let points: Vec<Value> = threads
        .iter()
        .zip(phases)
        .map(|(t, ph)| {
            eprintln!("threads {t}: {ph:?}");
            json!({"threads": t, "phases": ph})
        })
        .collect();
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

/// `rounds` S2 runs (8 threads, one name, 5 s) of `factory`: each run's
/// acquisitions/s and release→other p50/p99, and their quartiles.
pub(crate) fn run_s2_runs(factory: &Factory, rounds: usize) -> Value {
    let runs: Vec<Value> = (0..rounds).map(|_| s2_summary(&run_s2(factory))).collect();
    let field = |k: &str| {
        let mut v: Vec<f64> = runs.iter().filter_map(|r| r[k].as_f64()).collect();
        quartiles(&mut v)
    };
    json!({"runs": runs,
           "acquisitions_per_s": field("acquisitions_per_s"),
           "release_to_other_p50_us": field("release_to_other_p50_us"),
           "release_to_other_p99_us": field("release_to_other_p99_us")})
}

/// The scale goal as an A/B in one process: S3 with 256 threads ("a")
/// against 8 threads ("b"), each on a default client of its own, `rounds`
/// phases of `secs` each per side in ABBA order; the ratio a / b per pair
/// of phases.
pub(crate) fn run_ab_scale(url: &str, rounds: usize, secs: Duration) -> Value {
    let many = client(url);
    let few = client(url);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (pa, pb) = if r % 2 == 0 {
            let pa = phase(&many, 256, secs);
            (pa, phase(&few, 8, secs))
        } else {
            let pb = phase(&few, 8, secs);
            (phase(&many, 256, secs), pb)
        };
        if let (Some(x), Some(y)) = (pa["cycles_per_s"].as_f64(), pb["cycles_per_s"].as_f64())
            && y > 0.0
        {
            ratios.push(x / y);
        }
        eprintln!("round {r}: 256 threads {pa} / 8 threads {pb}");
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
        "a": "256 threads, one client", "b": "8 threads, one client",
        "phase_s": secs.as_secs_f64(), "a_phases": a, "b_phases": b,
        "a_cycles_per_s": cps(&a), "b_cycles_per_s": cps(&b), "ratio_a_to_b": quartiles(&mut ratios)}})
}
