//! The library worker of `scripts/nemesis`: threads that take one fenced
//! lock in turn and stamp writes to the nemesis's register with their
//! fencing token.
//!
//! Each thread loops: `try_lock_for` the fenced lock, announce the section
//! to the register (`S worker name token lib pid`), make two writes a few
//! tens of milliseconds apart, each only after `LockGuard::check` says the
//! lease still holds (what a careful caller does), then end the section
//! (`E sid ok`, or `E sid lost` when the check failed) and unlock. The
//! register keeps one connection per thread, so a killed process ends its
//! open sections by closing them.
//!
//! Configured by environment variables (set by `scripts/nemesis`):
//! `NEMESIS_URL` (any redguard URL), `NEMESIS_NAME`, `NEMESIS_REGISTER`
//! (`host:port`), `NEMESIS_WORKER` (a label), `NEMESIS_THREADS` (default 2),
//! `NEMESIS_LEASE_MS` (the watchdog lease, default 3000),
//! `NEMESIS_MIN_REPLICA_ACKS` (default 0) and `NEMESIS_SEED`. It runs until
//! it is killed; errors go to stderr, one line each, prefixed `ERR`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn number(name: &str, default: u64) -> u64 {
    env(name, "").parse().unwrap_or(default)
}

/// The section's own work, and the think time between sections: the time a
/// critical section takes, not a wait for anything.
fn pause(d: Duration) {
    let end = Instant::now() + d;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::park_timeout(left);
    }
}

/// One thread's line-based connection to the register.
struct Register {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Register {
    fn connect(addr: &str) -> std::io::Result<Register> {
        let writer = TcpStream::connect(addr)?;
        writer.set_read_timeout(Some(Duration::from_secs(10)))?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Register { reader, writer })
    }

    fn call(&mut self, line: &str) -> std::io::Result<String> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(reply.trim_end().to_owned())
    }
}

/// A small xorshift generator: the pauses need no more, and the example
/// needs no crate for them.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn section(
    register: &mut Register,
    guard: &redguard::LockGuard,
    worker: &str,
    name: &str,
    rng: &mut Rng,
) -> std::io::Result<()> {
    let token = guard
        .fencing_token()
        .map_or_else(|| "-".to_owned(), |t| t.to_string());
    let reply = register.call(&format!(
        "S {worker} {name} {token} lib {}",
        std::process::id()
    ))?;
    let sid = reply.strip_prefix("OK ").unwrap_or("?").to_owned();
    let mut how = "ok";
    for _ in 0..2 {
        pause(Duration::from_millis(30 + rng.below(120)));
        if let Err(e) = guard.check() {
            eprintln!("ERR check {name}: {e}");
            how = "lost";
            break;
        }
        register.call(&format!("W {sid}"))?;
    }
    register.call(&format!("E {sid} {how}"))?;
    Ok(())
}

fn run_thread(client: &redguard::Client, index: u64) {
    let name = env("NEMESIS_NAME", "nemesis");
    let addr = env("NEMESIS_REGISTER", "127.0.0.1:0");
    let worker = format!("{}.{index}", env("NEMESIS_WORKER", "lib"));
    let mut rng = Rng((number("NEMESIS_SEED", 1) ^ u64::from(std::process::id()) << 8 ^ index) | 1);
    let lock = client.fenced_lock(&name);
    let mut register: Option<Register> = None;
    loop {
        let guard = match lock.try_lock_for(Duration::from_secs(5)) {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("ERR lock {name}: {e}");
                pause(Duration::from_millis(100));
                continue;
            }
        };
        if register.is_none() {
            register = Register::connect(&addr)
                .map_err(|e| eprintln!("ERR register: {e}"))
                .ok();
        }
        if let Some(r) = register.as_mut()
            && let Err(e) = section(r, &guard, &worker, &name, &mut rng)
        {
            eprintln!("ERR register: {e}");
            register = None;
        }
        if let Err(e) = guard.unlock() {
            eprintln!("ERR unlock {name}: {e}");
        }
        pause(Duration::from_millis(rng.below(50)));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = env("NEMESIS_URL", "redis://127.0.0.1:6379/");
    let lease = Duration::from_millis(number("NEMESIS_LEASE_MS", 3000));
    let acks = u32::try_from(number("NEMESIS_MIN_REPLICA_ACKS", 0))?;
    let client = redguard::Client::builder()
        .url(&url)
        .watchdog_timeout(lease)
        .response_timeout(Duration::from_millis(1000).min(lease / 3))
        .min_replica_acks(acks)
        .build()?;
    let threads = number("NEMESIS_THREADS", 2);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || run_thread(&client, i))
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
