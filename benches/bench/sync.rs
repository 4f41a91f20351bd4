//! The synchronizers under load: the read-write lock in an S2-style
//! contention run with a mostly-reads mix, beside the reentrant lock in the
//! same process, and the semaphore's acquire/release cycle beside the raw
//! floor's two script calls.

use std::time::Duration;

use redguard::Client;
use serde_json::{Value, json};

use crate::ab::{run_ab_s1, run_ab_s3};
use crate::observe::admin;
use crate::protocol::{MAX_ERRORS, S2_WORKERS, now_ns};
use crate::scenarios::start_workers;
use crate::stats::{pct, quartiles, us};
use crate::workers::{floor_factory, guard_factory, semaphore_factory};

/// What a contention phase takes: the reentrant lock, or the read-write
/// lock with this share of reads in percent.
#[derive(Debug, Clone, Copy)]
enum Mix {
    Exclusive,
    ReadWrite { read_percent: u32 },
}

/// One worker's phase: (exclusive?, t_want, t_acq, t_rel) per acquisition.
#[derive(Default)]
struct PhaseLog {
    events: Vec<(bool, u64, u64, u64)>,
    errors: u64,
    last_error: Option<String>,
}

/// A small, fast, seeded generator: each worker's sequence of reads and
/// writes is the same in every run.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// S2's procedure (8 workers, one name, warm-up, common start, a window of
/// `window`) with blocking `lock()` calls: on the reentrant lock `name`, or
/// on the read-write lock `name` taking its read lock `read_percent` % of
/// the time and its write lock otherwise.
fn contention_phase(client: &Client, name: &str, mix: Mix, window: Duration) -> Value {
    let window_ns = window.as_nanos() as u64;
    let (c, n) = (client.clone(), name.to_owned());
    let (t_start, handles) = start_workers(
        S2_WORKERS,
        &guard_factory(client),
        |w| vec![format!("bench:warm:w{w}")],
        move |w, _warm, t_start| {
            let t_end = t_start + window_ns;
            let rw = c.read_write_lock(&n);
            let (read, write, plain) = (rw.read(), rw.write(), c.lock(&n));
            let mut seed = (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut log = PhaseLog::default();
            loop {
                let t_want = now_ns();
                if t_want >= t_end || log.errors >= MAX_ERRORS {
                    break;
                }
                let (lock, exclusive) = match mix {
                    Mix::Exclusive => (&plain, true),
                    Mix::ReadWrite { read_percent } => {
                        if xorshift(&mut seed) % 100 < u64::from(read_percent) {
                            (&read, false)
                        } else {
                            (&write, true)
                        }
                    }
                };
                match lock.lock() {
                    Ok(guard) => {
                        let t_acq = now_ns();
                        let t_rel = now_ns();
                        if let Err(e) = guard.unlock() {
                            log.errors += 1;
                            log.last_error = Some(e.to_string());
                        }
                        log.events.push((exclusive, t_want, t_acq, t_rel));
                    }
                    Err(e) => {
                        log.errors += 1;
                        log.last_error = Some(e.to_string());
                    }
                }
            }
            log
        },
    );
    let t_end = t_start + window_ns;
    let mut events = Vec::new();
    let mut per_worker = Vec::new();
    let (mut errors, mut last_error) = (0u64, None);
    for (w, h) in handles.into_iter().enumerate() {
        let Some(log) = h.join().ok().flatten() else {
            errors += 1;
            last_error = Some(format!("worker {w} failed"));
            per_worker.push(0);
            continue;
        };
        errors += log.errors;
        if log.last_error.is_some() {
            last_error = log.last_error;
        }
        let mine: Vec<_> = log.events.into_iter().filter(|e| e.2 <= t_end).collect();
        per_worker.push(mine.len());
        events.extend(mine);
    }
    events.sort_unstable_by_key(|e| e.2);
    // An exclusive hold overlaps when any other hold was still on at its
    // acquisition, or the next one began before its release.
    let mut overlaps = 0;
    let mut latest_release = 0u64;
    for (i, &(exclusive, _, a, r)) in events.iter().enumerate() {
        if exclusive && (latest_release > a || events.get(i + 1).is_some_and(|next| next.2 < r)) {
            overlaps += 1;
        }
        latest_release = latest_release.max(r);
    }
    let writes = events.iter().filter(|e| e.0).count();
    let mut wait: Vec<u64> = events.iter().map(|e| e.2 - e.1).collect();
    wait.sort_unstable();
    let secs = window.as_secs_f64();
    let (lo, hi) = (
        per_worker.iter().copied().min().unwrap_or(0),
        per_worker.iter().copied().max().unwrap_or(0),
    );
    json!({
        "lock": match mix { Mix::Exclusive => "reentrant", Mix::ReadWrite { .. } => "read-write" },
        "read_percent": match mix { Mix::Exclusive => 0, Mix::ReadWrite { read_percent } => read_percent },
        "workers": S2_WORKERS, "window_s": secs,
        "acquisitions": events.len(), "acquisitions_per_s": events.len() as f64 / secs,
        "reads": events.len() - writes, "writes": writes,
        "per_worker_acquisitions": per_worker,
        "starvation_ratio": if lo > 0 { json!(hi as f64 / lo as f64) } else { Value::Null },
        "wait_p50_us": us(pct(&wait, 50.0)), "wait_p99_us": us(pct(&wait, 99.0)),
        "overlaps": overlaps, "errors": errors, "last_error": last_error,
    })
}

/// `rounds` pairs of contention phases, the reentrant lock and the
/// read-write lock in ABBA order, each phase `window` long.
pub(crate) fn run_rw(client: &Client, read_percent: u32, rounds: usize, window: Duration) -> Value {
    let mut phases = Vec::new();
    let (mut ratios, mut rw_rate, mut lock_rate) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..rounds {
        let rw_first = pair % 2 == 1;
        let mut rate = [0.0f64; 2];
        for k in 0..2 {
            let rw_turn = (k == 0) == rw_first;
            let (name, mix) = if rw_turn {
                ("bench:rw", Mix::ReadWrite { read_percent })
            } else {
                ("bench:s2", Mix::Exclusive)
            };
            eprintln!("rw: pair {pair} {mix:?}");
            let phase = contention_phase(client, name, mix, window);
            rate[usize::from(rw_turn)] = phase["acquisitions_per_s"].as_f64().unwrap_or(0.0);
            phases.push(phase);
        }
        lock_rate.push(rate[0]);
        rw_rate.push(rate[1]);
        if rate[0] > 0.0 {
            ratios.push(rate[1] / rate[0]);
        }
    }
    json!({"rw": {
        "read_percent": read_percent, "rounds": rounds, "window_s": window.as_secs_f64(),
        "rw_acquisitions_per_s": quartiles(&mut rw_rate),
        "lock_acquisitions_per_s": quartiles(&mut lock_rate),
        "ratio": quartiles(&mut ratios),
        "phases": phases,
    }})
}

/// Resets the semaphore `name` to `permits` free permits.
fn reset_semaphore(url: &str, client: &Client, name: &str, permits: u32) -> Result<(), String> {
    let mut con = admin(url);
    redis::cmd("DEL")
        .arg(name)
        .query::<()>(&mut con)
        .map_err(|e| e.to_string())?;
    match client.semaphore(name).try_set_permits(permits) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("semaphore {name} was set meanwhile")),
        Err(e) => Err(e.to_string()),
    }
}

/// Semaphore acquire/release cycles beside the floor's lock/unlock, A/B in
/// one process: one thread on a semaphore of 1 permit (blocks of 1,000
/// cycles, `rounds` each), then 8 threads sharing a semaphore of 8 permits
/// (500 ms phases, `rounds / 2` each), so that no acquire ever waits.
pub(crate) fn run_sem(client: &Client, url: &str, rounds: usize) -> Value {
    let floor = floor_factory(url);
    let mut out = serde_json::Map::new();
    for (key, name, permits) in [("s1", "bench:sem:s1", 1), ("s3", "bench:sem:s3", 8)] {
        if let Err(e) = reset_semaphore(url, client, name, permits) {
            out.insert(key.into(), json!({"error": e}));
            continue;
        }
        let sut = semaphore_factory(client, name);
        let mut ab = if key == "s1" {
            run_ab_s1(&sut, &floor, "bench:ab:sem", rounds, 1000)
        } else {
            run_ab_s3(&sut, &floor, rounds / 2, Duration::from_millis(500))
        };
        // Every permit must be back: the cycles gave back what they took.
        let left = client.semaphore(name).available_permits();
        ab["permits"] = json!(permits);
        ab["permits_left"] = left.map_or_else(|e| json!(e.to_string()), |n| json!(n));
        out.insert(key.into(), ab);
    }
    json!({"sem": out})
}
