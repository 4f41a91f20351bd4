//! The shortest useful redguard program: take a named lock, do the work,
//! let the guard release it.
//!
//! `cargo run --example quickstart` (uses `REDIS_URL`, or starts a private
//! redis-server for the run).

#[path = "common/mod.rs"]
mod common;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = common::redis_url()?;
    let client = redguard::Client::open(&url)?;
    let lock = client.lock("quickstart:nightly-report");

    let guard = lock.lock()?; // waits if another process holds it
    println!(
        "holding {:?} as {}",
        "quickstart:nightly-report",
        guard.holder_id()
    );
    println!(
        "lease left: {:?} (the watchdog renews it)",
        lock.remaining_ttl()?
    );
    guard.check()?; // still ours?
    drop(guard); // released here

    println!("released; locked now: {}", lock.is_locked()?);
    Ok(())
}
