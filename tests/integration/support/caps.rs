//! What the server binary under test can do, probed once per process, and
//! the skip of a test that needs what it lacks.
//!
//! The suite runs on Redis 6.2, Redis 7.x and Valkey 8 (`scripts/test`).
//! A test that needs a capability calls [`lacks`] first: when the server
//! lacks it, the test prints `SKIP <test>: <server> lacks <capability>` on
//! the process's real stderr (libtest does not capture it) and returns;
//! `scripts/test` counts those lines. A missing binary is never a skip:
//! that stays a loud failure.

use std::fmt;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::sentinel::redis_sentinel_bin;
use super::{RedisServer, redis_server_bin, wait_until};

/// One thing a server may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `--tls-port`: built with TLS.
    Tls,
    /// Sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`): Redis 7.0+.
    Spublish,
    /// `PEXPIRETIME`: Redis 7.0+.
    Pexpiretime,
    /// `CLIENT SETINFO`: Redis 7.2+, Valkey.
    ClientSetinfo,
    /// `--cluster-port` (a cluster bus port of one's choice): Redis 7.0+.
    /// Without it a cluster node's bus listens on its port + 10000.
    ClusterPort,
    /// Cluster mode (`--cluster-enabled yes`).
    Cluster,
    /// A sentinel binary that starts (`$REDGUARD_REDIS_SENTINEL`).
    Sentinel,
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cap::Tls => "TLS support",
            Cap::Spublish => "SPUBLISH (sharded pub/sub)",
            Cap::Pexpiretime => "PEXPIRETIME",
            Cap::ClientSetinfo => "CLIENT SETINFO",
            Cap::ClusterPort => "--cluster-port",
            Cap::Cluster => "cluster mode",
            Cap::Sentinel => "a working sentinel",
        })
    }
}

/// The probed server.
#[derive(Debug)]
pub struct Caps {
    /// What it calls itself, e.g. `Redis 6.2.14` or `Valkey 8.1.8`.
    pub server: String,
    /// `redis_version` (Valkey reports the Redis version it is compatible
    /// with: 7.2.4).
    pub redis_version: (u32, u32, u32),
    have: Vec<Cap>,
}

impl Caps {
    /// Whether the server has `cap`.
    pub fn has(&self, cap: Cap) -> bool {
        self.have.contains(&cap)
    }
}

/// The capabilities of `$REDGUARD_REDIS_SERVER` (and its sentinel),
/// probed on first use: one throwaway server answers `COMMAND INFO`,
/// `CLIENT SETINFO`, `CONFIG GET` and `INFO server`; TLS is whether the
/// binary accepts `--tls-port` at all.
///
/// # Panics
///
/// If the throwaway server does not start (as [`RedisServer::start`]).
pub fn caps() -> &'static Caps {
    static CAPS: OnceLock<Caps> = OnceLock::new();
    CAPS.get_or_init(probe)
}

/// `true` when the server under test lacks `cap`; then prints
/// `SKIP <test>: <server> lacks <cap>` (the test's name is its thread's)
/// and the caller returns.
pub fn lacks(cap: Cap) -> bool {
    skip_unless(cap, None)
}

/// [`lacks`] for one case of a test that runs several: the line says
/// `SKIP <test> (<case>): …` and only that case is left out.
pub fn case_lacks(cap: Cap, case: &str) -> bool {
    skip_unless(cap, Some(case))
}

fn skip_unless(cap: Cap, case: Option<&str>) -> bool {
    let caps = caps();
    if caps.has(cap) {
        return false;
    }
    say_skip(case, &format!("{} lacks {cap}", caps.server));
    true
}

/// The variable `scripts/test` sets, on the sections of every server but
/// the reference one, to the reference server's name (`redis-7.0`).
pub const REFERENCE_ENV: &str = "REDGUARD_REFERENCE_SERVER";

/// For one case of a test bed that exercises the client's own mechanisms
/// (scale, pacing of retries, connection modes, repetitions of a case the
/// bed has just run once): `true`, printing `SKIP <test> (<case>):
/// client-side only; runs on <reference>`, on a section whose server is
/// not the reference one. Outside `scripts/test` every case runs.
pub fn case_client_side(case: &str) -> bool {
    let reference = std::env::var(REFERENCE_ENV).unwrap_or_default();
    if reference.is_empty() {
        return false;
    }
    say_skip(
        Some(case),
        &format!("client-side only; runs on {reference}"),
    );
    true
}

/// `SKIP <test>: <why>`, for a test that needs what the run was not given
/// (a peer client's packages); the caller returns.
pub fn skip_test(why: &str) {
    say_skip(None, why);
}

/// `SKIP <test>[ (<case>)]: <why>`, straight to the stream: libtest
/// captures `eprintln!`, and a skip must be seen.
fn say_skip(case: Option<&str>, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let case = case.map_or_else(String::new, |c| format!(" ({c})"));
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}{case}: {why}");
}

fn probe() -> Caps {
    let mut have = Vec::new();
    if tls_built_in() {
        have.push(Cap::Tls);
    }
    if sentinel_answers_version() {
        have.push(Cap::Sentinel);
    }
    let server = RedisServer::start();
    let mut conn = server.conn();
    let commands: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .arg("PEXPIRETIME")
        .query(&mut conn)
        .expect("COMMAND INFO");
    let known = |i: usize| !matches!(commands.get(i), None | Some(redis::Value::Nil));
    if known(0) {
        have.push(Cap::Spublish);
    }
    if known(1) {
        have.push(Cap::Pexpiretime);
    }
    let setinfo: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg("redguard-probe")
        .query(&mut conn);
    if setinfo.is_ok() {
        have.push(Cap::ClientSetinfo);
    }
    let cluster_port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-port")
        .query(&mut conn)
        .expect("CONFIG GET");
    if !cluster_port.is_empty() {
        have.push(Cap::ClusterPort);
    }
    let cluster_enabled: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-enabled")
        .query(&mut conn)
        .unwrap_or_default();
    if !cluster_enabled.is_empty() {
        have.push(Cap::Cluster);
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut conn)
        .expect("INFO server");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let redis_version = field("redis_version").unwrap_or_default();
    let server_name = match field("valkey_version") {
        Some(v) => format!("Valkey {v}"),
        None => format!("Redis {redis_version}"),
    };
    let mut parts = redis_version
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let redis_version = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    Caps {
        server: server_name,
        redis_version,
        have,
    }
}

/// Whether the binary was built with TLS: started with a TLS port and
/// missing certificate files, a TLS build fails on the files; a build
/// without TLS rejects the directive (Redis 6.2) or finds no TLS
/// connection type (Valkey 8). It exits either way.
fn tls_built_in() -> bool {
    let dir = tempfile::Builder::new()
        .prefix("redguard-probe-")
        .tempdir()
        .expect("a temporary directory");
    let log = dir.path().join("probe.log");
    let mut probe = Command::new(redis_server_bin());
    probe
        .args(["--port", "0", "--tls-port", "1", "--save", ""])
        .args(["--tls-cert-file", "/nonexistent/redguard-probe.crt"])
        .args(["--tls-key-file", "/nonexistent/redguard-probe.key"])
        .args(["--tls-ca-cert-file", "/nonexistent/redguard-probe-ca.crt"])
        .arg("--logfile")
        .arg(&log)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let Ok(mut child) = super::spawn_owned(probe, dir.path()) else {
        return false;
    };
    // It exits at once either way; a server that started after all is
    // stopped here.
    let exited = wait_until(Duration::from_secs(5), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    let Ok(out) = child.wait_with_output() else {
        return false;
    };
    let text = format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    !(text.contains("Bad directive")
        || text.contains("Failed finding TLS support")
        || text.contains("connection type tls"))
}

/// Whether the sentinel binary runs at all (`--version`).
fn sentinel_answers_version() -> bool {
    Command::new(redis_sentinel_bin())
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
