//! S1 uncontended, S2 contended handoff and S3 many keys, exactly as the
//! peers protocol defines them, for any [`Worker`].

use std::sync::{Arc, Barrier, mpsc};

use serde_json::{Value, json};

use crate::protocol::{
    DRAIN_LIMIT_NS, MAX_ERRORS, S1_COUNT, S1_MAX_NS, S1_NAME, S1_WARMUP, S2_DURATION_NS, S2_NAME,
    S2_WORKERS, S3_DURATION_NS, S3_NAMES_PER_WORKER, S3_WORKERS, START_DELAY_NS, now_ns, s3_name,
    sleep_until_ns,
};
use crate::workers::{Factory, Worker};

/// S1 uncontended: one worker, one name, 200 warm-up cycles, then up to
/// 20,000 cycles or 10 s.
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

/// One S2 worker's record: (t_want, t_acq, t_rel) per acquisition.
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

/// S2 contended handoff: 8 workers, one name, blocking acquire, 5 s window;
/// every acquisition as `[worker, t_want, t_acq, t_rel]`.
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

/// S3 many keys: 8 workers, each cycling through its own 1,000 names, 5 s
/// window.
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
