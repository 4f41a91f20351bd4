//! Benchmark driver: redguard beside the raw-Redis floor, plus redguard's
//! own scale scenarios.
//!
//! ```text
//! bench --port P                 redguard row: S1/S2/S3 raw driver JSON (../shared/bench protocol)
//! bench --port P --floor         raw-Redis floor row (two EVALSHA round trips per cycle), same JSON
//! bench --port P --w1 [--w1-n 10000,100000] [--w1-watchdog 30s,3s] [--w1-batch 100] [--w1-periods 3]
//! bench --port P --w2 [--w2-threads 1000] [--w2-locks 100] [--w2-gap-ms 20]
//! bench --port P --ab [--ab-rounds 20]   S1/S3 ratios from redguard and the floor interleaved
//! bench --port P --only s1,s2    a subset of S1/S2/S3 (profiling)
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
//! `{"w2": {...}}`); `scripts/bench` runs everything and renders the report.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock, mpsc};
use std::time::{Duration, Instant};

use redguard::{Client, Lock};
use serde_json::{Value, json};

// ---- scenario constants (the shared protocol; keep in step with it) -------
const LOCK_TTL_MS: u64 = 10_000;
const S1_COUNT: usize = 20_000;
const S1_MAX_NS: u64 = 10_000_000_000;
const S1_WARMUP: usize = 200;
const S2_WORKERS: usize = 8;
const S2_DURATION_NS: u64 = 5_000_000_000;
const S3_WORKERS: usize = 8;
const S3_NAMES_PER_WORKER: usize = 1000;
const S3_DURATION_NS: u64 = 5_000_000_000;
const START_DELAY_NS: u64 = 50_000_000;
const DRAIN_LIMIT_NS: u64 = 30_000_000_000;
const MAX_ERRORS: u64 = 1000;

const S1_NAME: &str = "bench:s1";
const S2_NAME: &str = "bench:s2";

/// The protocol's floor scripts, byte for byte.
const FLOOR_LOCK_LUA: &str = "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then redis.call('hincrby', KEYS[1], ARGV[1], 1); redis.call('pexpire', KEYS[1], ARGV[2]); return nil end; return redis.call('pttl', KEYS[1])";
const FLOOR_UNLOCK_LUA: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end; local c = redis.call('hincrby', KEYS[1], ARGV[1], -1); if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end; redis.call('del', KEYS[1]); return 1";

// ---- clock: CLOCK_MONOTONIC via Instant, ns since a process base ----------
static BASE: OnceLock<Instant> = OnceLock::new();

fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn sleep_until_ns(t: u64) {
    let n = now_ns();
    if t > n {
        std::thread::sleep(Duration::from_nanos(t - n));
    }
}

fn s3_name(w: usize, i: usize) -> String {
    format!("bench:s3:w{w}:k{}", i % S3_NAMES_PER_WORKER)
}

// ============================================================================
// One worker's view of a lock library: redguard or the raw floor.
// ============================================================================

/// What S1/S2/S3 need from a library. Implementations are made on the
/// worker's own thread (redguard guards are `!Send`).
trait Worker {
    /// One uncontended acquire (must succeed at once) -> release, on the
    /// worker's name `name_index` (modulo its name count).
    fn cycle(&mut self, name_index: usize) -> Result<(), String>;
    /// The same on any name (warm-up).
    fn cycle_named(&mut self, name: &str) -> Result<(), String>;
    /// S2: blocking acquire with the library's wait policy; `held()` runs
    /// while the lock is held, then the lock is released.
    fn contended(&mut self, hard_deadline: u64, held: &mut dyn FnMut()) -> Result<bool, String>;
}

/// redguard: each worker its own `Lock` handles on the shared client.
struct GuardWorker {
    client: Client,
    locks: Vec<Lock>,
}

impl GuardWorker {
    fn new(client: &Client, names: &[String]) -> GuardWorker {
        GuardWorker {
            client: client.clone(),
            locks: names.iter().map(|n| client.lock(n)).collect(),
        }
    }
}

fn guard_cycle(lock: &Lock) -> Result<(), String> {
    match lock.try_lock() {
        Ok(Some(guard)) => guard.unlock().map_err(|e| e.to_string()),
        Ok(None) => Err("lock busy".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Worker for GuardWorker {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        guard_cycle(&self.locks[i % self.locks.len()])
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        guard_cycle(&self.client.lock(name))
    }

    fn contended(&mut self, _hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        let guard = self.locks[0].lock().map_err(|e| e.to_string())?;
        held();
        guard.unlock().map_err(|e| e.to_string())?;
        Ok(true)
    }
}

/// The raw floor: one blocking connection, two EVALSHA round trips per cycle;
/// in S2 it re-sends the lock script at once when busy (spin).
struct FloorWorker {
    con: redis::Connection,
    token: String,
    lock_sha: String,
    unlock_sha: String,
    names: Vec<String>,
}

impl FloorWorker {
    fn new(url: &str, w: usize, names: &[String]) -> Result<FloorWorker, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut con = client.get_connection().map_err(|e| e.to_string())?;
        let lock_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FLOOR_LOCK_LUA)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        let unlock_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FLOOR_UNLOCK_LUA)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        Ok(FloorWorker {
            con,
            token: format!("floor:{}:w{w}", std::process::id()),
            lock_sha,
            unlock_sha,
            names: names.to_vec(),
        })
    }

    fn try_lock(&mut self, i: usize) -> Result<bool, String> {
        let name = &self.names[i % self.names.len()];
        self.try_lock_named(&name.clone())
    }

    fn unlock(&mut self, i: usize) -> Result<(), String> {
        let name = &self.names[i % self.names.len()];
        self.unlock_named(&name.clone())
    }

    fn try_lock_named(&mut self, name: &str) -> Result<bool, String> {
        let r: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.lock_sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())?;
        Ok(r.is_none())
    }

    fn unlock_named(&mut self, name: &str) -> Result<(), String> {
        let r: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.unlock_sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())?;
        r.map(|_| ()).ok_or_else(|| "unlock: not owner".into())
    }
}

impl Worker for FloorWorker {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        if !self.try_lock(i)? {
            return Err("lock busy".into());
        }
        self.unlock(i)
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        if !self.try_lock_named(name)? {
            return Err("lock busy".into());
        }
        self.unlock_named(name)
    }

    fn contended(&mut self, hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        loop {
            if self.try_lock(0)? {
                break;
            }
            if now_ns() >= hard {
                return Ok(false);
            }
        }
        held();
        self.unlock(0)?;
        Ok(true)
    }
}

/// Makes a worker for worker index `w` over `names`, on the calling thread.
type Factory = Arc<dyn Fn(usize, &[String]) -> Result<Box<dyn Worker>, String> + Send + Sync>;

fn guard_factory(client: &Client) -> Factory {
    let client = client.clone();
    Arc::new(move |_w, names| Ok(Box::new(GuardWorker::new(&client, names)) as Box<dyn Worker>))
}

fn floor_factory(url: &str) -> Factory {
    let url = url.to_owned();
    Arc::new(move |w, names| {
        FloorWorker::new(&url, w, names).map(|f| Box::new(f) as Box<dyn Worker>)
    })
}

// ============================================================================
// S1 / S2 / S3
// ============================================================================

fn run_s1(factory: &Factory) -> Value {
    let mut w = match factory(99, &[S1_NAME.to_owned()]) {
        Ok(w) => w,
        Err(e) => return json!({"lat_ns": [], "elapsed_ns": 0, "errors": 1, "last_error": e}),
    };
    let mut errors = 0u64;
    let mut last_error = None;
    for _ in 0..S1_WARMUP {
        if let Err(e) = w.cycle(0) {
            errors += 1;
            last_error = Some(e);
        }
    }
    let mut lat: Vec<u64> = Vec::with_capacity(S1_COUNT);
    let t_first = now_ns();
    let mut t_last = t_first;
    while lat.len() < S1_COUNT && errors < MAX_ERRORS {
        let t0 = now_ns();
        match w.cycle(0) {
            Ok(()) => {
                let t1 = now_ns();
                lat.push(t1 - t0);
                t_last = t1;
            }
            Err(e) => {
                errors += 1;
                last_error = Some(e);
                t_last = now_ns();
            }
        }
        if t_last - t_first >= S1_MAX_NS {
            break;
        }
    }
    json!({"lat_ns": lat, "elapsed_ns": t_last - t_first, "errors": errors, "last_error": last_error})
}

#[derive(Default)]
struct S2Log {
    events: Vec<(u64, u64, u64)>,
    counter: u64,
    failures: u64,
    errors: u64,
    last_error: Option<String>,
}

/// Starts `n` worker threads that each build their worker, warm up with one
/// cycle on `bench:warm:w{w}`, then wait for the common start instant fixed
/// by this function once every warm-up is done. Returns the start instant and
/// the join handles.
fn start_workers<T: Send + 'static>(
    n: usize,
    factory: &Factory,
    names: impl Fn(usize) -> Vec<String>,
    body: impl Fn(usize, Box<dyn Worker>, u64) -> T + Send + Sync + 'static,
) -> (u64, Vec<std::thread::JoinHandle<Option<T>>>) {
    let ready = Arc::new(Barrier::new(n + 1));
    let body = Arc::new(body);
    let mut starts = Vec::new();
    let mut handles = Vec::new();
    for w in 0..n {
        let (tx, rx) = mpsc::channel::<u64>();
        starts.push(tx);
        let factory = factory.clone();
        let ready = ready.clone();
        let body = body.clone();
        let names = names(w);
        handles.push(std::thread::spawn(move || {
            let mut worker = factory(w, &names);
            if let Ok(worker) = &mut worker {
                let _ = worker.cycle_named(&format!("bench:warm:w{w}"));
            }
            ready.wait();
            let t_start = rx.recv().ok()?;
            match worker {
                Ok(worker) => {
                    sleep_until_ns(t_start);
                    Some(body(w, worker, t_start))
                }
                Err(e) => {
                    eprintln!("worker {w}: {e}");
                    None
                }
            }
        }));
    }
    ready.wait();
    let t_start = now_ns() + START_DELAY_NS;
    for tx in starts {
        let _ = tx.send(t_start);
    }
    (t_start, handles)
}

fn run_s2(factory: &Factory) -> Value {
    let (t_start, handles) = start_workers(
        S2_WORKERS,
        factory,
        |_| vec![S2_NAME.to_owned()],
        |_w, mut worker, t_start| {
            let t_end = t_start + S2_DURATION_NS;
            let hard = t_end + DRAIN_LIMIT_NS;
            let mut l = S2Log::default();
            let mut t_want: Option<u64> = None;
            loop {
                let n = now_ns();
                if n >= t_end || l.errors >= MAX_ERRORS {
                    break;
                }
                let tw = *t_want.get_or_insert(n);
                let mut rec = None;
                let mut counter = l.counter;
                let res = worker.contended(hard, &mut || {
                    let t_acq = now_ns();
                    counter += 1; // the critical section
                    let t_rel = now_ns();
                    rec = Some((t_acq, t_rel));
                });
                l.counter = counter;
                match res {
                    Ok(true) => {}
                    Ok(false) => l.failures += 1,
                    Err(e) => {
                        l.errors += 1;
                        l.last_error = Some(e);
                    }
                }
                if let Some((a, r)) = rec {
                    l.events.push((tw, a, r));
                    t_want = None;
                }
                if now_ns() >= hard {
                    break;
                }
            }
            l
        },
    );
    let t_end = t_start + S2_DURATION_NS;
    let mut events = Vec::new();
    let (mut failures, mut errors) = (0u64, 0u64);
    let mut last_error = None;
    for (w, h) in handles.into_iter().enumerate() {
        let Some(l) = h.join().ok().flatten() else {
            errors += 1;
            last_error = Some(format!("worker {w} failed"));
            continue;
        };
        failures += l.failures;
        errors += l.errors;
        if l.last_error.is_some() {
            last_error = l.last_error;
        }
        for (t, a, r) in l.events {
            events.push(json!([w, t, a, r]));
        }
    }
    json!({"workers": S2_WORKERS, "t_start_ns": t_start, "t_end_ns": t_end, "events": events,
           "acquire_failures": failures, "errors": errors, "last_error": last_error})
}

fn run_s3(factory: &Factory) -> Value {
    let (t_start, handles) = start_workers(
        S3_WORKERS,
        factory,
        |w| (0..S3_NAMES_PER_WORKER).map(|i| s3_name(w, i)).collect(),
        |_w, mut worker, t_start| {
            let t_end = t_start + S3_DURATION_NS;
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut last_error = None;
            let mut i = 0usize;
            loop {
                let t0 = now_ns();
                if t0 >= t_end || errors >= MAX_ERRORS {
                    break;
                }
                let r = worker.cycle(i);
                i += 1;
                match r {
                    Ok(()) => lat.push(now_ns() - t0),
                    Err(e) => {
                        errors += 1;
                        last_error = Some(e);
                    }
                }
            }
            (lat, errors, last_error, now_ns())
        },
    );
    let t_end = t_start + S3_DURATION_NS;
    let mut lat_all = Vec::new();
    let mut errors = 0;
    let mut last_error = None;
    let mut t_fin = t_end;
    for h in handles {
        match h.join().ok().flatten() {
            Some((lat, e, le, tf)) => {
                lat_all.extend(lat);
                errors += e;
                if le.is_some() {
                    last_error = le;
                }
                t_fin = t_fin.max(tf);
            }
            None => {
                errors += 1;
                last_error = Some("worker failed".to_owned());
            }
        }
    }
    json!({"workers": S3_WORKERS, "names_per_worker": S3_NAMES_PER_WORKER, "t_start_ns": t_start,
           "t_end_ns": t_end, "t_finish_ns": t_fin, "lat_ns": lat_all, "errors": errors,
           "last_error": last_error})
}

fn run_row(factory: &Factory, only: &[String]) -> (Value, Value, Value) {
    let want = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let s1 = if want("s1") {
        run_s1(factory)
    } else {
        Value::Null
    };
    let s2 = if want("s2") {
        run_s2(factory)
    } else {
        Value::Null
    };
    let s3 = if want("s3") {
        run_s3(factory)
    } else {
        Value::Null
    };
    (s1, s2, s3)
}

// ============================================================================
// A/B: redguard and the floor interleaved in one process
// ============================================================================

/// Median and quartiles of `v` (sorted in place).
fn quartiles(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    json!({"median": q(0.5), "p25": q(0.25), "p75": q(0.75), "min": v[0], "max": v[v.len() - 1], "n": v.len()})
}

/// S1 as A/B blocks: one thread alternates blocks of `block` uncontended
/// cycles with redguard and with the floor (ABBA order), so that both sides
/// of each ratio see the same minute of a shared machine. Not part of the
/// peers protocol; it sharpens the S1 ratio where run-to-run spread is ±20 %.
fn run_ab_s1(client: &Client, url: &str, rounds: usize, block: usize) -> Value {
    let names = ["bench:ab:s1".to_owned()];
    let mut guard: Box<dyn Worker> = Box::new(GuardWorker::new(client, &names));
    let mut floor: Box<dyn Worker> = match FloorWorker::new(url, 0, &names) {
        Ok(f) => Box::new(f),
        Err(e) => return json!({"error": e}),
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

/// CPU time (user + system) of the whole process, exited threads included,
/// in ns.
fn process_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    (ut + st) * 10_000_000 // USER_HZ = 100
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// S3 as A/B phases: 8 threads, each with its own 1000 names, a redguard
/// worker and a floor worker; all threads switch library together every
/// `phase` (ABBA order). Ratio per pair of phases.
fn run_ab_s3(client: &Client, url: &str, rounds: usize, phase: Duration) -> Value {
    let phases = rounds * 2;
    let t0 = now_ns() + 200_000_000;
    let phase_ns = phase.as_nanos() as u64;
    let handles: Vec<_> = (0..S3_WORKERS)
        .map(|w| {
            let client = client.clone();
            let url = url.to_owned();
            std::thread::spawn(move || -> Result<Vec<u64>, String> {
                let names: Vec<String> = (0..S3_NAMES_PER_WORKER).map(|i| s3_name(w, i)).collect();
                let mut guard = GuardWorker::new(&client, &names);
                let mut floor = FloorWorker::new(&url, w, &names)?;
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

// ============================================================================
// Process and server observations
// ============================================================================

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of this process's threads whose name starts with
/// `prefix` (Linux truncates thread names to 15 bytes: "redguard-watchd").
fn thread_cpu(prefix: &str) -> Duration {
    let ticks_per_s = 100.0; // USER_HZ; sysconf(_SC_CLK_TCK) is 100 on Linux
    let mut ticks = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if !comm.trim_end().starts_with(prefix) {
                continue;
            }
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
                let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
                ticks += ut + st;
            }
        }
    }
    Duration::from_secs_f64(ticks as f64 / ticks_per_s)
}

fn admin(url: &str) -> redis::Connection {
    let client = redis::Client::open(url).expect("redis url");
    let con = client
        .get_connection_with_timeout(Duration::from_secs(3))
        .expect("admin connection");
    con.set_read_timeout(Some(Duration::from_secs(10))).ok();
    con
}

/// `calls` of one command from `INFO commandstats` (e.g. "evalsha").
fn cmd_calls(con: &mut redis::Connection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .unwrap_or_default();
    let key = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// (total client connections except `con` itself, pub/sub connections).
fn connections(con: &mut redis::Connection) -> (usize, usize) {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .unwrap_or_default();
    let lines: Vec<&str> = list.lines().filter(|l| !l.trim().is_empty()).collect();
    let pubsub = lines
        .iter()
        .filter(|l| {
            l.split_whitespace()
                .any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('P')))
        })
        .count();
    (lines.len().saturating_sub(1), pubsub)
}

fn pct(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let k = ((p / 100.0 * sorted.len() as f64).ceil() as usize).max(1);
    Some(sorted[k.min(sorted.len()) - 1])
}

fn us(ns: Option<u64>) -> Value {
    ns.map_or(Value::Null, |n| json!((n as f64 / 100.0).round() / 10.0))
}

fn parse_duration(s: &str) -> Duration {
    let s = s.trim();
    if let Some(ms) = s.strip_suffix("ms") {
        Duration::from_millis(ms.parse().expect("duration in ms"))
    } else if let Some(secs) = s.strip_suffix('s') {
        Duration::from_secs_f64(secs.parse().expect("duration in s"))
    } else {
        Duration::from_secs_f64(s.parse().expect("duration"))
    }
}

// ============================================================================
// W1: the watchdog at scale
// ============================================================================

struct W1Config {
    n: usize,
    watchdog: Duration,
    batch: usize,
    periods: u32,
}

/// Samples PTTL of the first `acquired` keys round robin, in pipelines, until
/// `stop`; returns (lowest pttl seen in ms, samples, keys seen missing).
fn pttl_sampler(
    url: String,
    names: Arc<Vec<String>>,
    acquired: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    lowest: Arc<AtomicI64>,
    cpu_ns: Arc<AtomicU64>,
) -> (u64, u64, u64) {
    let mut con = admin(&url);
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
        let mut pipe = redis::pipe();
        for name in &names[i..end] {
            pipe.cmd("PTTL").arg(name);
        }
        let Ok(replies) = pipe.query::<Vec<i64>>(&mut con) else {
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

fn run_w1_case(url: &str, cfg: &W1Config) -> Value {
    let response_timeout = (cfg.watchdog / 3).min(Duration::from_secs(3));
    let client = Client::builder()
        .url(url)
        .watchdog_timeout(cfg.watchdog)
        .response_timeout(response_timeout)
        .renew_batch(cfg.batch)
        .build()
        .expect("client");
    let mut con = admin(url);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("flushall");
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
        let (url, acquired, stop, lowest, cpu) = (
            url.to_owned(),
            acquired.clone(),
            stop.clone(),
            lowest.clone(),
            sampler_cpu.clone(),
        );
        std::thread::spawn(move || pttl_sampler(url, names, acquired, stop, lowest, cpu))
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
    let evalsha0 = cmd_calls(&mut con, "evalsha");
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
    let evalsha1 = cmd_calls(&mut con, "evalsha");
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
    let left: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap_or(0);
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
        "n": cfg.n, "watchdog_s": cfg.watchdog.as_secs_f64(), "renew_batch": cfg.batch,
        "response_timeout_s": response_timeout.as_secs_f64(),
        "acquire_s": acquire_s, "acquire_errors": errors,
        "hold_s": hold_s, "periods": periods_f,
        "renewals": rn, "evalsha_calls": evalsha1 - evalsha0,
        "round_trips": rt, "ticks": ticks,
        "round_trips_per_period": rt as f64 / periods_f,
        "renewals_per_period": rn as f64 / periods_f,
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

fn run_w1(url: &str, ns: &[usize], watchdogs: &[Duration], batch: usize, periods: u32) -> Value {
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
            let case = run_w1_case(url, &cfg);
            eprintln!("w1: {case}");
            cases.push(case);
        }
    }
    json!({"w1": cases})
}

// ============================================================================
// W2: waiter fan-out
// ============================================================================

fn run_w2(url: &str, threads: usize, nlocks: usize, gap: Duration) -> Value {
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

// ============================================================================

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut port: Option<u16> = None;
    let mut floor = false;
    let mut w1 = false;
    let mut w2 = false;
    let mut only: Vec<String> = Vec::new();
    let mut w1_n = vec![10_000usize, 100_000];
    let mut w1_watchdog = vec![Duration::from_secs(30), Duration::from_secs(3)];
    let mut w1_batch = 100;
    let mut w1_periods = 3u32;
    let mut w2_threads = 1000usize;
    let mut w2_locks = 100usize;
    let mut w2_gap = Duration::from_millis(20);
    let mut ab = false;
    let mut ab_rounds = 20usize;
    let mut i = 1;
    let value = |i: usize| -> &str {
        args.get(i + 1).map(String::as_str).unwrap_or_else(|| {
            eprintln!("{} needs a value", args[i]);
            std::process::exit(2)
        })
    };
    while i < args.len() {
        match args[i].as_str() {
            "--port" => {
                port = Some(value(i).parse().expect("--port N"));
                i += 1;
            }
            "--floor" => floor = true,
            "--w1" => w1 = true,
            "--w2" => w2 = true,
            "--ab" => ab = true,
            "--ab-rounds" => {
                ab_rounds = value(i).parse().expect("--ab-rounds");
                i += 1;
            }
            "--only" => {
                only = value(i).split(',').map(str::to_owned).collect();
                i += 1;
            }
            "--w1-n" => {
                w1_n = value(i)
                    .split(',')
                    .map(|v| v.parse().expect("--w1-n"))
                    .collect();
                i += 1;
            }
            "--w1-watchdog" => {
                w1_watchdog = value(i).split(',').map(parse_duration).collect();
                i += 1;
            }
            "--w1-batch" => {
                w1_batch = value(i).parse().expect("--w1-batch");
                i += 1;
            }
            "--w1-periods" => {
                w1_periods = value(i).parse().expect("--w1-periods");
                i += 1;
            }
            "--w2-threads" => {
                w2_threads = value(i).parse().expect("--w2-threads");
                i += 1;
            }
            "--w2-locks" => {
                w2_locks = value(i).parse().expect("--w2-locks");
                i += 1;
            }
            "--w2-gap-ms" => {
                w2_gap = Duration::from_millis(value(i).parse().expect("--w2-gap-ms"));
                i += 1;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let Some(port) = port else {
        eprintln!("--port P is required\n{USAGE}");
        std::process::exit(2);
    };
    let url = format!("redis://127.0.0.1:{port}/");
    let _ = now_ns();

    let out = if ab {
        let client = Client::open(&url).expect("redguard client");
        json!({"ab": {
            "s1": run_ab_s1(&client, &url, ab_rounds, 1000),
            "s3": run_ab_s3(&client, &url, ab_rounds / 2, Duration::from_millis(500)),
        }})
    } else if w1 {
        run_w1(&url, &w1_n, &w1_watchdog, w1_batch, w1_periods)
    } else if w2 {
        run_w2(&url, w2_threads, w2_locks, w2_gap)
    } else if floor {
        let (s1, s2, s3) = run_row(&floor_factory(&url), &only);
        json!({
            "lang": "rust", "library": "raw-redis-floor (sync)", "version": "redis crate 1.8.1",
            "client": "redguard examples/bench.rs --floor",
            "concurrency": "8 OS threads (std::thread), one sync redis::Connection each",
            "defaults": {"retry": "S2 spins: re-sends the lock EVALSHA immediately, no sleep",
                         "lock_ttl_ms": LOCK_TTL_MS,
                         "commands_per_cycle": "EVALSHA lock + EVALSHA unlock (2 round trips, no pipelining)"},
            "s1": s1, "s2": s2, "s2_tuned": Value::Null, "s3": s3,
        })
    } else {
        let client = Client::open(&url).expect("redguard client");
        let (s1, s2, s3) = run_row(&guard_factory(&client), &only);
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

const USAGE: &str = "usage: bench --port P [--floor | --w1 [...] | --w2 [...]] [--only s1,s2,s3]
  (no mode)      redguard row: S1/S2/S3 raw driver JSON (shared peers protocol)
  --floor        raw-Redis floor row: two EVALSHA round trips per cycle
  --w1           watchdog at scale: --w1-n 10000,100000 --w1-watchdog 30s,3s --w1-batch 100 --w1-periods 3
  --w2           waiter fan-out: --w2-threads 1000 --w2-locks 100 --w2-gap-ms 20
  --ab           S1 and S3 with redguard and the floor interleaved in one process
                 (blocks of 1000 cycles / phases of 500 ms): --ab-rounds 20";
