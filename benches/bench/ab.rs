//! A/B: a library and the raw floor interleaved in one process, so that
//! both sides of a ratio see the same seconds of a shared machine. Not part
//! of the peers protocol; it sharpens ratios where the run-to-run spread of
//! separate runs is ±20 %.

use std::time::Duration;

use serde_json::{Value, json};

use crate::observe::thread_cpu_ns;
use crate::protocol::{
    S1_WARMUP, S3_NAMES_PER_WORKER, S3_WORKERS, now_ns, s3_name, sleep_until_ns,
};
use crate::stats::quartiles;
use crate::workers::{Factory, Worker};

/// S1 as A/B blocks: one thread alternates blocks of `block` uncontended
/// cycles of `sut` (reported as "redguard") and of `floor` on the name
/// `name`, in ABBA order. Ratio = sut / floor per pair of blocks.
pub(crate) fn run_ab_s1(
    sut: &Factory,
    floor: &Factory,
    name: &str,
    rounds: usize,
    block: usize,
) -> Value {
    let names = [name.to_owned()];
    let (mut guard, mut floor) = match (sut(0, &names), floor(0, &names)) {
        (Ok(g), Ok(f)) => (g, f),
        (Err(e), _) | (_, Err(e)) => return json!({"error": e}),
    };
    for _ in 0..S1_WARMUP {
        let _ = guard.cycle(0);
        let _ = floor.cycle(0);
    }
    let (mut g_cpu, mut f_cpu) = (Vec::new(), Vec::new());
    let time_block = |w: &mut Box<dyn Worker>, cpu: &mut Vec<f64>| -> Option<f64> {
        let c0 = thread_cpu_ns();
        let t0 = now_ns();
        for _ in 0..block {
            w.cycle(0).ok()?;
        }
        let t1 = now_ns();
        cpu.push((thread_cpu_ns() - c0) as f64 / 1000.0 / block as f64);
        Some(block as f64 / ((t1 - t0) as f64 / 1e9))
    };
    let (mut ratios, mut g_cps, mut f_cps) = (Vec::new(), Vec::new(), Vec::new());
    let mut errors = 0;
    for r in 0..rounds {
        let (g, f) = if r % 2 == 0 {
            let f = time_block(&mut floor, &mut f_cpu);
            (time_block(&mut guard, &mut g_cpu), f)
        } else {
            let g = time_block(&mut guard, &mut g_cpu);
            (g, time_block(&mut floor, &mut f_cpu))
        };
        match (g, f) {
            (Some(g), Some(f)) => {
                ratios.push(g / f);
                g_cps.push(g);
                f_cps.push(f);
            }
            _ => errors += 1,
        }
    }
    json!({"rounds": rounds, "block_cycles": block, "errors": errors,
           "ratio": quartiles(&mut ratios), "redguard_cps": quartiles(&mut g_cps),
           "floor_cps": quartiles(&mut f_cps),
           "redguard_thread_cpu_us_per_cycle": quartiles(&mut g_cpu),
           "floor_thread_cpu_us_per_cycle": quartiles(&mut f_cpu)})
}

/// S3 as A/B phases: 8 threads, each with its own 1000 names, a `sut`
/// worker and a `floor` worker; all threads switch library together every
/// `phase` (ABBA order). Ratio per pair of phases.
pub(crate) fn run_ab_s3(sut: &Factory, floor: &Factory, rounds: usize, phase: Duration) -> Value {
    let phases = rounds * 2;
    let t0 = now_ns() + 200_000_000;
    let phase_ns = phase.as_nanos() as u64;
    let handles: Vec<_> = (0..S3_WORKERS)
        .map(|w| {
            let (sut, floor) = (sut.clone(), floor.clone());
            std::thread::spawn(move || -> Result<Vec<u64>, String> {
                let names: Vec<String> = (0..S3_NAMES_PER_WORKER).map(|i| s3_name(w, i)).collect();
                let mut guard = sut(w, &names)?;
                let mut floor = floor(w, &names)?;
                let _ = guard.cycle_named(&format!("bench:warm:w{w}"));
                let _ = floor.cycle_named(&format!("bench:warm:w{w}"));
                let mut counts = vec![0u64; phases];
                let mut i = 0usize;
                for (k, count) in counts.iter_mut().enumerate() {
                    let start = t0 + k as u64 * phase_ns;
                    let end = start + phase_ns;
                    // Phase pairs alternate FG, GF, FG, ... (k even within a pair = first).
                    let pair_first = k % 2 == 0;
                    let floor_turn = ((k / 2) % 2 == 0) == pair_first;
                    sleep_until_ns(start);
                    while now_ns() < end {
                        let r = if floor_turn {
                            floor.cycle(i)
                        } else {
                            guard.cycle(i)
                        };
                        i += 1;
                        if r.is_ok() {
                            *count += 1;
                        }
                    }
                }
                Ok(counts)
            })
        })
        .collect();
    let mut totals = vec![0u64; phases];
    for h in handles {
        match h.join() {
            Ok(Ok(counts)) => {
                for (t, c) in totals.iter_mut().zip(counts) {
                    *t += c;
                }
            }
            Ok(Err(e)) => return json!({"error": e}),
            Err(_) => return json!({"error": "worker panicked"}),
        }
    }
    let secs = phase.as_secs_f64();
    let (mut ratios, mut g_cps, mut f_cps) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..rounds {
        let (a, b) = (
            totals[2 * pair] as f64 / secs,
            totals[2 * pair + 1] as f64 / secs,
        );
        let (f, g) = if pair % 2 == 0 { (a, b) } else { (b, a) };
        if f > 0.0 {
            ratios.push(g / f);
        }
        g_cps.push(g);
        f_cps.push(f);
    }
    json!({"rounds": rounds, "phase_s": secs, "workers": S3_WORKERS,
           "ratio": quartiles(&mut ratios), "redguard_cps": quartiles(&mut g_cps),
           "floor_cps": quartiles(&mut f_cps)})
}
