//! Passing the fencing token to a storage write.
//!
//! Takes the fenced lock "report", then stores a value with
//! `Client::fenced_set`, which refuses the write if a holder with a newer
//! token has written meanwhile (our lease ran out while we were paused).
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fencing`.

use std::time::Duration;

use redguard::FencedWrite;

fn main() -> Result<(), redguard::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redguard::Client::open(&url)?;
    let lock = client.fenced_lock("report");
    let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? else {
        eprintln!("the report is locked by someone else");
        return Ok(());
    };
    let token = guard.fencing_token();
    let report = format!("generated under token {token}");
    match client.fenced_set("{report}:latest", report.as_bytes(), token)? {
        FencedWrite::Written => println!("stored with token {token}"),
        FencedWrite::Rejected { last_token } => {
            println!("refused: a newer holder (token {last_token}) wrote meanwhile");
        }
    }
    guard.unlock()
}
