//! Integration-test support: a private `redis-server` per test, a TCP fault
//! proxy and small polling helpers.
//!
//! * [`RedisServer`] spawns `redis-server` on a free loopback port, restarts
//!   it on the same port, freezes it (`SIGSTOP`) and kills it on drop.
//!   [`RedisServer::start_tls`] is the same with TLS only.
//! * [`spawn_owned`] starts a server process that dies with the test
//!   process, however that ends.
//! * [`ChildTest`] runs the `#[ignore]`d half of a test in another process.
//! * [`FaultProxy`] sits between a client and a server on loopback and can
//!   delay, blackhole, reset or refuse traffic at runtime.
//! * [`unique_name`], [`wait_until`], [`ms`] and [`sleep`] keep tests short
//!   and free of fixed sleeps.
//!
//! Everything talks only to `127.0.0.1`. A missing `redis-server` is a loud
//! failure, never a skip.
//!
//! The benches reuse this module through
//! `#[path = "../tests/integration/support/mod.rs"] mod support;`, so it must
//! not depend on anything from the test binary itself.

// Each test module uses a different subset of the helpers, and benches that
// include this file through `#[path]` use even fewer.
#![allow(
    dead_code,
    reason = "shared by every test module and the benches; no caller uses every helper"
)]
// The module is private to the test binary, yet its items are `pub` so that
// the benches can `#[path]`-include it unchanged.
#![allow(
    unreachable_pub,
    reason = "items are `pub` for `#[path]` reuse from the benches"
)]

mod caps;
mod child;
mod cluster;
mod contention;
mod context;
mod kinds;
mod logs;
mod owned;
mod proxy;
mod sentinel;
mod server;
#[cfg(feature = "tls")]
mod tls;

#[cfg(test)]
mod selftest;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, TcpListener};
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[cfg(feature = "cli")]
pub use caps::skip_test;
pub use caps::{Cap, caps, case_client_side, case_lacks, lacks};
pub use child::{ChildTest, child_env, child_role, hear, say};
pub use cluster::RedisCluster;
pub use contention::Contention;
pub use context::{
    TEST_RESPONSE, TEST_WATCHDOG, TestContext, bulk_client, test_builder, test_client,
};
pub use kinds::{KINDS, Kind};
pub use logs::{capture_logs, logged_lines};
pub use owned::{OWNER_FILE, owner_of, spawn_owned, sweep_leftovers};
#[allow(
    unused_imports,
    reason = "benches `#[path]`-include this module and may not use every re-export"
)]
pub use proxy::{FaultProxy, GARBAGE, Mode, ReplyFault};
#[cfg(feature = "tls")]
pub use sentinel::TlsSentinel;
#[allow(
    unused_imports,
    reason = "benches `#[path]`-include this module and may not use every re-export"
)]
pub use sentinel::{BedOptions, SentinelBed, Switch};
pub use server::RedisServer;
#[cfg(feature = "tls")]
pub use tls::TestCerts;

/// Environment variable naming the `redis-server` binary to spawn.
pub const REDIS_SERVER_ENV: &str = "REDGUARD_REDIS_SERVER";

/// Interval at which [`wait_until`] re-checks its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Returns a name that is unique within this process and across processes:
/// `<prefix>-<pid>-<counter>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", process::id())
}

/// Runs one case of a test bed and prints how long it took (shown with
/// the test's output, or with `--nocapture`), so that a slow bed says
/// which of its cases is slow.
pub fn timed_case<T>(name: &str, case: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = case();
    eprintln!("case {name}: {:.2?}", started.elapsed());
    out
}

/// Polls `cond` about every 5 ms until it returns `true` or `timeout` has
/// passed. Returns whether the condition became true.
///
/// The condition is always evaluated at least once, and once more at the
/// deadline, so a zero timeout is a plain check.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        sleep(POLL_INTERVAL.min(deadline - now));
    }
}

/// Shorthand for [`Duration::from_millis`].
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Sleeps for `d`.
///
/// The one place the support code sleeps: tests poll with [`wait_until`]
/// and only use this for short, bounded back-offs.
#[allow(
    clippy::disallowed_methods,
    reason = "the ban on thread::sleep targets library code; test support sleeps in bounded back-offs"
)]
pub fn sleep(d: Duration) {
    std::thread::sleep(d);
}

/// The `redis-server` binary to spawn: `$REDGUARD_REDIS_SERVER`, or
/// `redis-server` from `PATH`.
pub fn redis_server_bin() -> String {
    std::env::var(REDIS_SERVER_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// A redis-rs client for a harness connection to `url` (admin commands,
/// readiness checks): without the `CLIENT SETINFO` pair redis-rs sends
/// after connecting, which would show in the `INFO commandstats` that
/// tests read.
///
/// # Errors
///
/// When `url` does not parse.
pub fn admin_client(url: &str) -> redis::RedisResult<redis::Client> {
    redis::Client::open(admin_info(url)?)
}

/// The connection settings of [`admin_client`], for clients built
/// otherwise (TLS).
///
/// # Errors
///
/// When `url` does not parse.
pub fn admin_info(url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(info.set_redis_settings(settings))
}

/// docs/SECURITY.md's `ACL SETUSER redguard …` line for the server under test:
/// the one with sharded pub/sub (`+spublish`) where the server has it, the
/// one without (Redis 6.2) where it does not.
///
/// # Panics
///
/// When the README has no such line.
pub fn readme_acl_line() -> &'static str {
    let sharded = caps().has(Cap::Spublish);
    include_str!("../../../docs/SECURITY.md")
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER redguard "))
        .find(|l| l.contains(" +spublish ") == sharded)
        .unwrap_or_else(|| {
            panic!(
                "docs/SECURITY.md has no `ACL SETUSER redguard ...` line {} `+spublish`",
                if sharded { "with" } else { "without" }
            )
        })
}

/// Ports owned by live [`RedisServer`]s and [`FaultProxy`]s of this process,
/// including ports that are closed for a while (a killed server waiting for
/// `restart`, a proxy in `Refuse`). Fresh ports never come from this set, so
/// parallel tests cannot take each other's ports in those windows.
static RESERVED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Taken for its whole run by each test that keeps both cores of a CI
/// machine busy (many processes or threads, a six-node cluster, a
/// failover bed) or that measures the watchdog's punctuality: such tests
/// run one at a time, so that none starves another's watchdog. Other tests
/// still run beside them.
pub fn cpu_heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks `port` as owned; `false` if another server or proxy of this process
/// owns it already.
fn reserve_port(port: u16) -> bool {
    RESERVED_PORTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(port)
}

/// Gives `port` back.
fn release_port(port: u16) {
    RESERVED_PORTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&port);
}

/// Binds `127.0.0.1:0` until the kernel hands out a port that no server or
/// proxy of this process owns, reserves it and returns the listener
/// (bounded: 100 tries).
///
/// # Panics
///
/// If binding fails or every try returned an owned port.
fn bind_reserved() -> TcpListener {
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        if reserve_port(port) {
            return listener;
        }
    }
    panic!("bind 127.0.0.1:0 kept returning ports owned by other test servers");
}

/// One line of `INFO commandstats`: how often the server ran a command
/// (`calls`), refused it before running it (`rejected_calls`, e.g. no
/// permission) and ran it to an error (`failed_calls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStat {
    /// `calls=`.
    pub calls: u64,
    /// `rejected_calls=`.
    pub rejected: u64,
    /// `failed_calls=`.
    pub failed: u64,
}

impl CommandStat {
    /// Every time the command reached the server, run or not.
    pub fn reached(&self) -> u64 {
        self.calls + self.rejected + self.failed
    }
}

/// Parses the text of `INFO commandstats`: command name (lower case, e.g.
/// `evalsha`, `client|list`) to its counts.
pub fn commandstats(info: &str) -> BTreeMap<String, CommandStat> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let mut stat = CommandStat::default();
            for kv in fields.split(',') {
                let Some((k, v)) = kv.split_once('=') else {
                    continue;
                };
                let slot = match k {
                    "calls" => &mut stat.calls,
                    "rejected_calls" => &mut stat.rejected,
                    "failed_calls" => &mut stat.failed,
                    _ => continue,
                };
                *slot = v.parse().unwrap_or(0);
            }
            Some((name.to_owned(), stat))
        })
        .collect()
}

/// The sum of `calls` of `commands` (lower case, e.g. `["evalsha"]`) in
/// the text of `INFO commandstats`; 0 for a command never run.
pub fn command_calls(info: &str, commands: &[&str]) -> u64 {
    commandstats(info)
        .iter()
        .filter(|(name, _)| commands.contains(&name.as_str()))
        .map(|(_, stat)| stat.calls)
        .sum()
}

/// The read-modify-write a lock must protect: `GET counter`, then `SET` it
/// to one more. Deliberately not atomic, so that two holders at once lose
/// an increment.
pub fn racy_increment(conn: &mut redis::Connection, counter: &str) {
    let n: Option<u64> = redis::cmd("GET").arg(counter).query(conn).unwrap();
    let () = redis::cmd("SET")
        .arg(counter)
        .arg(n.unwrap_or(0) + 1)
        .query(conn)
        .unwrap();
}
