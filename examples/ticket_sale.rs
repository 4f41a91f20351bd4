//! A ticket sale: N threads in each of M processes sell 1,000 tickets from
//! one Redis inventory, each sale a non-atomic read-check-write done under
//! one redguard lock. Prints tickets sold, tickets oversold (must be 0),
//! acquisitions per second and handoff latency (release by one holder to
//! acquisition by the next, across threads and processes).
//!
//! ```text
//! cargo run --release --example ticket_sale -- [--processes M] [--threads N] [--tickets T]
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise starts a private redis-server for
//! the run. The worker processes are this same program, re-run with
//! `--worker`.

#[path = "common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

const EVENTS: &str = "ticket_sale:events";
const INVENTORY: &str = "ticket_sale:inventory";
const SOLD: &str = "ticket_sale:sold";
const LOCK: &str = "ticket_sale:lock";

struct Options {
    processes: usize,
    threads: usize,
    tickets: u64,
    worker: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        processes: 2,
        threads: 4,
        tickets: 1000,
        worker: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match arg.as_str() {
            "--processes" => o.processes = value("--processes")?.max(1) as usize,
            "--threads" => o.threads = value("--threads")?.max(1) as usize,
            "--tickets" => o.tickets = value("--tickets")?,
            "--worker" => o.worker = true,
            "-h" | "--help" => {
                println!("ticket_sale [--processes M] [--threads N] [--tickets T]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// CLOCK_MONOTONIC in ns: comparable between processes on one host.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sells until the inventory is empty; records one event per acquisition.
fn sell(url: &str, threads: usize) -> Result<(), Box<dyn std::error::Error>> {
    let client = redguard::Client::open(url)?;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let lock = client.lock(LOCK);
            let url = url.to_string();
            std::thread::spawn(move || -> Result<(), String> {
                let redis = redis::Client::open(url).map_err(|e| e.to_string())?;
                let mut conn = redis.get_connection().map_err(|e| e.to_string())?;
                let me = lock.client().holder_id().to_string();
                let mut events = Vec::new();
                loop {
                    let guard = lock.lock().map_err(|e| e.to_string())?;
                    let t_acq = monotonic_ns();
                    // The non-atomic read-check-write the lock protects.
                    let left: i64 = redis::cmd("GET")
                        .arg(INVENTORY)
                        .query(&mut conn)
                        .map_err(|e| e.to_string())?;
                    if left > 0 {
                        let _: () = redis::cmd("SET")
                            .arg(INVENTORY)
                            .arg(left - 1)
                            .query(&mut conn)
                            .map_err(|e| e.to_string())?;
                        let _: () = redis::cmd("RPUSH")
                            .arg(SOLD)
                            .arg(left)
                            .query(&mut conn)
                            .map_err(|e| e.to_string())?;
                    }
                    let t_rel = monotonic_ns();
                    guard.unlock().map_err(|e| e.to_string())?;
                    events.push(format!("{t_acq} {t_rel} {me}"));
                    if left <= 0 {
                        break;
                    }
                }
                let _: () = redis::cmd("RPUSH")
                    .arg(EVENTS)
                    .arg(&events)
                    .query(&mut conn)
                    .map_err(|e| e.to_string())?;
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a seller thread panicked")??;
    }
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opts = parse()?;
    if opts.worker {
        let url = std::env::var("REDIS_URL")?;
        return sell(&url, opts.threads);
    }
    let (url, _server) = common::redis_url()?;
    let redis = redis::Client::open(url.as_str())?;
    let mut conn = redis.get_connection()?;
    let _: () = redis::cmd("DEL")
        .arg(&[EVENTS, INVENTORY, SOLD, LOCK])
        .query(&mut conn)?;
    let _: () = redis::cmd("SET")
        .arg(INVENTORY)
        .arg(opts.tickets)
        .query(&mut conn)?;
    println!(
        "selling {} tickets: {} processes x {} threads, one redguard lock ({url_host})",
        opts.tickets,
        opts.processes,
        opts.threads,
        url_host = redis.get_connection_info().addr()
    );

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 1..opts.processes {
        children.push(
            Command::new(&exe)
                .args(["--worker", "--threads", &opts.threads.to_string()])
                .env("REDIS_URL", &url)
                .stdin(Stdio::null())
                .spawn()?,
        );
    }
    let here = sell(&url, opts.threads);
    let mut failed = here.is_err() as usize;
    if let Err(e) = here {
        eprintln!("seller failed: {e}");
    }
    for mut child in children {
        if !child.wait()?.success() {
            failed += 1;
        }
    }
    let elapsed = started.elapsed();

    let sold: Vec<u64> = redis::cmd("LRANGE")
        .arg(SOLD)
        .arg(0)
        .arg(-1)
        .query(&mut conn)?;
    let left: i64 = redis::cmd("GET").arg(INVENTORY).query(&mut conn)?;
    let mut unique = sold.clone();
    unique.sort_unstable();
    unique.dedup();
    let oversold = sold.len() as i64 - opts.tickets as i64 + (sold.len() - unique.len()) as i64;

    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(EVENTS)
        .arg(0)
        .arg(-1)
        .query(&mut conn)?;
    let mut events: Vec<(u64, u64, String)> = lines
        .iter()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            Some((
                it.next()?.parse().ok()?,
                it.next()?.parse().ok()?,
                it.next()?.to_string(),
            ))
        })
        .collect();
    events.sort();
    let mut handoffs: Vec<u64> = events
        .windows(2)
        .filter(|w| w[0].2 != w[1].2)
        .map(|w| w[1].0.saturating_sub(w[0].1))
        .collect();
    handoffs.sort_unstable();
    let overlaps = events.windows(2).filter(|w| w[1].0 < w[0].1).count();

    println!("sold:          {}", sold.len());
    println!("left:          {left}");
    println!("oversold:      {oversold}");
    println!("overlaps:      {overlaps}");
    println!(
        "acquisitions:  {} in {:.2?} = {:.0}/s",
        events.len(),
        elapsed,
        events.len() as f64 / elapsed.as_secs_f64()
    );
    println!(
        "handoff:       p50 {:.3} ms, p99 {:.3} ms over {} holder changes",
        percentile(&handoffs, 50.0) as f64 / 1e6,
        percentile(&handoffs, 99.0) as f64 / 1e6,
        handoffs.len()
    );
    let ok = failed == 0 && oversold == 0 && overlaps == 0 && left == 0;
    if !ok {
        return Err(format!(
            "sale failed: {failed} sellers failed, oversold {oversold}, overlaps {overlaps}"
        )
        .into());
    }
    Ok(())
}
