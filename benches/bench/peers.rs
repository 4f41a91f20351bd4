//! S1/S2/S3 of the shared peers protocol (`../shared/bench/README.md`):
//! the scenario constants, the clock, one worker's view of a lock library
//! (redguard, or the raw floor of two `EVALSHA` round trips per cycle), and
//! the three scenarios.

use std::sync::{Arc, Barrier, OnceLock, mpsc};
use std::time::{Duration, Instant};

use redguard::{Client, Lock};
use serde_json::{Value, json};

// ---- scenario constants (the shared protocol; keep in step with it) -------
pub(crate) const LOCK_TTL_MS: u64 = 10_000;
pub(crate) const S1_COUNT: usize = 20_000;
pub(crate) const S1_MAX_NS: u64 = 10_000_000_000;
pub(crate) const S1_WARMUP: usize = 200;
pub(crate) const S2_WORKERS: usize = 8;
pub(crate) const S2_DURATION_NS: u64 = 5_000_000_000;
pub(crate) const S3_WORKERS: usize = 8;
pub(crate) const S3_NAMES_PER_WORKER: usize = 1000;
pub(crate) const S3_DURATION_NS: u64 = 5_000_000_000;
pub(crate) const START_DELAY_NS: u64 = 50_000_000;
pub(crate) const DRAIN_LIMIT_NS: u64 = 30_000_000_000;
pub(crate) const MAX_ERRORS: u64 = 1000;

pub(crate) const S1_NAME: &str = "bench:s1";
pub(crate) const S2_NAME: &str = "bench:s2";

/// The protocol's floor scripts, byte for byte.
pub(crate) const FLOOR_LOCK_LUA: &str = "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then redis.call('hincrby', KEYS[1], ARGV[1], 1); redis.call('pexpire', KEYS[1], ARGV[2]); return nil end; return redis.call('pttl', KEYS[1])";
pub(crate) const FLOOR_UNLOCK_LUA: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end; local c = redis.call('hincrby', KEYS[1], ARGV[1], -1); if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end; redis.call('del', KEYS[1]); return 1";

// ---- clock: CLOCK_MONOTONIC via Instant, ns since a process base ----------
pub(crate) static BASE: OnceLock<Instant> = OnceLock::new();

pub(crate) fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

pub(crate) fn sleep_until_ns(t: u64) {
    let n = now_ns();
    if t > n {
        std::thread::sleep(Duration::from_nanos(t - n));
    }
}

pub(crate) fn s3_name(w: usize, i: usize) -> String {
    format!("bench:s3:w{w}:k{}", i % S3_NAMES_PER_WORKER)
}

// One worker's view of a lock library: redguard or the raw floor.

/// What S1/S2/S3 need from a library. Implementations are made on the
/// worker's own thread (redguard guards are `!Send`).
pub(crate) trait Worker {
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
pub(crate) struct GuardWorker {
    client: Client,
    locks: Vec<Lock>,
}

impl GuardWorker {
    pub(crate) fn new(client: &Client, names: &[String]) -> GuardWorker {
        GuardWorker {
            client: client.clone(),
            locks: names.iter().map(|n| client.lock(n)).collect(),
        }
    }
}

pub(crate) fn guard_cycle(lock: &Lock) -> Result<(), String> {
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
pub(crate) struct FloorWorker {
    con: redis::Connection,
    token: String,
    lock_sha: String,
    unlock_sha: String,
    names: Vec<String>,
}

impl FloorWorker {
    pub(crate) fn new(url: &str, w: usize, names: &[String]) -> Result<FloorWorker, String> {
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
pub(crate) type Factory =
    Arc<dyn Fn(usize, &[String]) -> Result<Box<dyn Worker>, String> + Send + Sync>;

pub(crate) fn guard_factory(client: &Client) -> Factory {
    let client = client.clone();
    Arc::new(move |_w, names| Ok(Box::new(GuardWorker::new(&client, names)) as Box<dyn Worker>))
}

pub(crate) fn floor_factory(url: &str) -> Factory {
    let url = url.to_owned();
    Arc::new(move |w, names| {
        FloorWorker::new(&url, w, names).map(|f| Box::new(f) as Box<dyn Worker>)
    })
}

// S1 / S2 / S3

pub(crate) fn run_s1(factory: &Factory) -> Value {
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
pub(crate) struct S2Log {
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
pub(crate) fn start_workers<T: Send + 'static>(
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

pub(crate) fn run_s2(factory: &Factory) -> Value {
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

pub(crate) fn run_s3(factory: &Factory) -> Value {
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

pub(crate) fn run_row(factory: &Factory, only: &[String]) -> (Value, Value, Value) {
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
