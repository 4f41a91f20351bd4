//! redguard's metrics in Prometheus's text format.
//!
//! Installs `metrics-exporter-prometheus` as the `metrics` recorder, then
//! runs every kind through what the series count: acquisitions (one after
//! a wait, with a thread waiting), a timeout, renewals, releases, and a
//! lease lost because another client deleted the lock; fair, fenced, read
//! and write locks, a plain semaphore's permits and an expiring one's, a
//! latch and a run-once key, each taken and given back, and the semaphores,
//! the latch and the run-once key each given up once while taken (a
//! timeout of their kind). Prints the scrape
//! text a Prometheus server would read (a real service would serve it over
//! HTTP: the exporter's `http-listener` feature).
//!
//! `cargo run --example metrics --features metrics` (uses `REDIS_URL`, or
//! starts a private redis-server for the run).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;

/// Bucket bounds, in seconds, for `redguard_wait_seconds` and
/// `redguard_hold_seconds`: from a millisecond to an hour. With buckets the
/// exporter writes histograms (`_bucket` series), which Prometheus can add
/// up across instances (`histogram_quantile(0.99, sum by (le)
/// (rate(redguard_wait_seconds_bucket[5m])))`); without, it writes
/// summaries, whose quantiles cannot be combined.
pub(crate) const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0,
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = common::redis_url()?;
    let prometheus = PrometheusBuilder::new()
        .set_buckets(BUCKETS)?
        .install_recorder()?;
    exercise(&url)?;
    println!("{}", prometheus.render());
    Ok(())
}

/// Runs locks through every counted event against the Redis at `url`.
pub(crate) fn exercise(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    // A short lease, so that renewals happen within the run.
    let client = redguard::Client::builder()
        .url(url)
        .watchdog_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(100))
        .on_lease_lost(|lost| eprintln!("lost {}: {}", lost.name_lossy(), lost.reason))
        .build()?;
    let other = redguard::Client::open(url)?;

    // Held across renewals while a thread of another client waits, and one
    // more gives up.
    let job = client.lock("metrics:job");
    let guard = job.lock()?;
    let waiter = std::thread::spawn({
        let lock = other.lock("metrics:job");
        move || lock.lock().map(drop)
    });
    let impatient = other
        .lock("metrics:job")
        .try_lock_for(Duration::from_millis(50))?;
    assert!(impatient.is_none(), "the lock is held");
    std::thread::park_timeout(Duration::from_millis(400));
    guard.unlock()?;
    waiter.join().map_err(|_| "the waiter panicked")??;

    // Every other kind, taken and given back.
    client.fair_lock("metrics:fair").lock()?.unlock()?;
    client.fenced_lock("metrics:fenced").lock()?.unlock()?;
    let rw = client.read_write_lock("metrics:rw");
    rw.read().lock()?.unlock()?;
    rw.write().lock()?.unlock()?;
    // The others each once more, given up while the one permit, the
    // latch's count or the run is taken (timeouts).
    let pool = client.semaphore("metrics:pool");
    pool.try_set_permits(1)?;
    let permits = pool.acquire(1)?;
    assert!(other.semaphore("metrics:pool").try_acquire(1)?.is_none());
    permits.release()?;
    let renders = client.expiring_semaphore("metrics:renders");
    renders.try_set_permits(1)?;
    let permit = renders.acquire()?;
    let busy = other.expiring_semaphore("metrics:renders").try_acquire()?;
    assert!(busy.is_none(), "the one permit is taken");
    permit.release()?;
    let latch = client.count_down_latch("metrics:latch");
    latch.try_set_count(1)?;
    assert!(!latch.wait_for(Duration::ZERO)?, "the latch is still set");
    latch.count_down()?;
    latch.wait()?;
    let ttl = Duration::from_secs(60);
    let redguard::Once::Run(run) = client.once("metrics:nightly", ttl)? else {
        return Err("the run-once key was claimed before".into());
    };
    let running = other.once("metrics:nightly", ttl)?;
    assert!(matches!(running, redguard::Once::Running { .. }));
    run.complete("ok")?;

    // Deleted under its holder: the watchdog reports the loss.
    let doomed = client.lock("metrics:doomed").lock()?;
    other.lock("metrics:doomed").force_unlock()?;
    let since = Instant::now();
    while !doomed.is_lost() && since.elapsed() < Duration::from_secs(5) {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    drop(doomed);
    client.shutdown();
    Ok(())
}
