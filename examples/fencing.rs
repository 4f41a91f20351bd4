//! Passing the fencing token to a storage write.
//!
//! Holder A takes the fenced lock "fencing:report" with a short lease and
//! stalls past it; B takes the lock (a larger token) and stores its report
//! with `Client::fenced_set`; A's late write carries the older token and is
//! refused, so B's report survives.
//!
//! `cargo run --example fencing` (uses `REDIS_URL`, or starts a private
//! redis-server for the run).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use redguard::FencedWrite;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = common::redis_url()?;
    let a = redguard::Client::open(&url)?;
    let b = redguard::Client::open(&url)?;
    let data = "{fencing:report}:latest";

    let lock_a = a
        .fenced_lock("fencing:report")
        .with_lease(Duration::from_millis(200));
    let guard_a = lock_a.lock()?;
    let token_a = guard_a
        .fencing_token()
        .ok_or("a fenced grant carries a token")?;
    println!("A holds the lock with token {token_a}, then stalls");
    // A's pause outlives its lease.
    let stalled = Instant::now();
    while lock_a.is_locked()? && stalled.elapsed() < Duration::from_secs(5) {
        std::thread::park_timeout(Duration::from_millis(20));
    }

    let lock_b = b.fenced_lock("fencing:report");
    let guard_b = lock_b.lock()?;
    let token_b = guard_b
        .fencing_token()
        .ok_or("a fenced grant carries a token")?;
    let outcome = b.fenced_set(data, b"report by B", token_b)?;
    println!("B holds it with token {token_b}; its write: {outcome:?}");

    match a.fenced_set(data, b"report by A", token_a)? {
        FencedWrite::Written => println!("A's late write went through (unexpected)"),
        FencedWrite::Rejected { last_token } => {
            println!("A's late write refused: the data has seen token {last_token}");
        }
    }
    println!("A's guard: {:?}", guard_a.check().err());
    drop(guard_a); // its lease is gone: nothing is sent
    guard_b.unlock()?;
    if let Some((value, token)) = b.fenced_get(data)? {
        println!(
            "stored: {:?} (token {token})",
            String::from_utf8_lossy(&value)
        );
    }
    Ok(())
}
