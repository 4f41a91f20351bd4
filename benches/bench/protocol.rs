//! The shared peers protocol (`../shared/bench/README.md`): its constants,
//! key names, floor scripts and clock. Keep in step with the protocol.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
