//! Threads contending for one lock while a fault happens, each critical
//! section checked: the workload of the failover cases (E1 and its stress
//! run through Sentinel, F1 on a Cluster).
//!
//! Every thread loops `try_lock_for` on its own [`redguard::Lock`] handle
//! of the same name. Inside, it claims the "holder" slot (another thread
//! found there is an overlap), increments a counter non-atomically (load,
//! yield, store: an overlap loses increments) and leaves.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{sleep, wait_until};

/// Errors kept per run (after the fault), so a long outage cannot grow
/// them without bound.
const MAX_ERRORS: usize = 1_000;

/// One grant seen while another thread was inside.
#[derive(Clone, Copy)]
pub struct Overlap {
    /// Since the fault ([`Contention::fault_at`]), if it happened by then.
    pub at: Option<Duration>,
    /// Thread indexes: the one inside, the one that entered.
    pub inside: usize,
    pub entered: usize,
}

impl std::fmt::Debug for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "thread {} entered while {} was inside, {:?} after the fault",
            self.entered, self.inside, self.at
        )
    }
}

/// What the threads saw, once stopped.
#[derive(Debug)]
pub struct Report {
    /// Critical sections completed.
    pub completed: u64,
    /// The non-atomic counter: equal to `completed` when nothing overlapped.
    pub counter: u64,
    pub overlaps: Vec<Overlap>,
    /// The first critical section completed after the fault.
    pub resumed: Option<Instant>,
    /// Errors of `try_lock_for` after the fault, with when (since it).
    pub errors: Vec<(Duration, String)>,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// 0 when nobody is inside, else the thread's index + 1.
    holder: AtomicUsize,
    counter: AtomicU64,
    completed: AtomicU64,
    overlaps: Mutex<Vec<Overlap>>,
    fault: Mutex<Option<Instant>>,
    resumed: Mutex<Option<Instant>>,
    errors: Mutex<Vec<(Duration, String)>>,
}

/// The running threads; [`Contention::stop`] ends them.
pub struct Contention {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Contention {
    /// Starts one thread per handle in `locks`, each waiting up to `wait`
    /// per attempt; an error costs the thread a 20 ms pause.
    pub fn start(locks: Vec<redguard::Lock>, wait: Duration) -> Contention {
        let shared = Arc::new(Shared::default());
        let threads = locks
            .into_iter()
            .enumerate()
            .map(|(i, lock)| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    // Bounded in count and time.
                    for _ in 0..1_000_000 {
                        if shared.stop.load(Ordering::Acquire) {
                            break;
                        }
                        match lock.try_lock_for(wait) {
                            Ok(Some(guard)) => {
                                shared.critical_section(i);
                                // Errors here (a lost key on the new master)
                                // are logged by the guard; not the case's.
                                drop(guard);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                shared.note_error(&e);
                                sleep(Duration::from_millis(20));
                            }
                        }
                    }
                })
            })
            .collect();
        Contention { shared, threads }
    }

    /// Critical sections completed so far.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }

    /// Waits up to `within` until `more` critical sections are completed
    /// beyond the `completed()` count at the call.
    pub fn wait_for_more(&self, more: u64, within: Duration) -> bool {
        let before = self.completed();
        wait_until(within, || self.completed() >= before + more)
    }

    /// Notes when the fault happened: overlaps and errors are timed from
    /// it, and the first critical section after it is the resumption.
    pub fn fault_at(&self, at: Instant) {
        *self.shared.fault.lock().unwrap() = Some(at);
    }

    /// The first critical section completed after the fault, if any yet.
    pub fn resumed(&self) -> Option<Instant> {
        *self.shared.resumed.lock().unwrap()
    }

    /// Stops the threads, waits for them and reports.
    pub fn stop(self) -> Report {
        self.shared.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().unwrap();
        }
        let s = &self.shared;
        Report {
            completed: s.completed.load(Ordering::Relaxed),
            counter: s.counter.load(Ordering::Relaxed),
            overlaps: s.overlaps.lock().unwrap().clone(),
            resumed: *s.resumed.lock().unwrap(),
            errors: s.errors.lock().unwrap().clone(),
        }
    }
}

impl Shared {
    fn since_fault(&self) -> Option<Duration> {
        self.fault.lock().unwrap().map(|f| f.elapsed())
    }

    fn critical_section(&self, i: usize) {
        let prev = self.holder.swap(i + 1, Ordering::AcqRel);
        if prev != 0 {
            self.overlaps.lock().unwrap().push(Overlap {
                at: self.since_fault(),
                inside: prev - 1,
                entered: i,
            });
        }
        let n = self.counter.load(Ordering::Acquire);
        std::thread::yield_now();
        self.counter.store(n + 1, Ordering::Release);
        let _ = self
            .holder
            .compare_exchange(i + 1, 0, Ordering::AcqRel, Ordering::Acquire);
        self.completed.fetch_add(1, Ordering::Relaxed);
        if self.fault.lock().unwrap().is_some() {
            self.resumed
                .lock()
                .unwrap()
                .get_or_insert_with(Instant::now);
        }
    }

    fn note_error(&self, e: &redguard::Error) {
        if let Some(at) = self.since_fault() {
            let mut errors = self.errors.lock().unwrap();
            if errors.len() < MAX_ERRORS {
                errors.push((at, e.to_string()));
            }
        }
    }
}
