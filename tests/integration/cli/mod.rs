//! The `redguard` binary end to end (`CARGO_BIN_EXE_redguard`), against a
//! private redis-server per test, one file per subcommand or concern:
//! `exec` (running a command under the lock), `logs` (what `-v` writes,
//! against golden files), `exec_lease` (leases, signals
//! and Redis faults under a running exec), `exec_tree` (CMD's process
//! tree), `status`, `unlock`, `args` (usage errors and exit codes), `help`
//! (help text, logging, durations), `readme` (the README's shell examples)
//! and `auth` (passwords).
//!
//! The CLI runs against a private redis-server per test. Lease tests use short timings (600 ms
//! watchdog lease renewed every 200 ms, 200 ms response timeout, through
//! [`redguard_short`]); the others use roomier ones (3 s / 1 s), so that a
//! loaded 2-core machine cannot make them lose a lease by accident.
//!
//! Every redguard process is wrapped in [`Proc`], which kills and reaps it
//! on drop; CMDs that run long write their pid to a file and are killed by
//! the test as well. Every wait is bounded.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(
    unused_imports,
    reason = "shared by the submodules through `use super::*`; each uses a part"
)]
use crate::support::{RedisServer, TestContext, ms, test_builder, unique_name, wait_until};

mod app_keys;
mod args;
mod auth;
mod exec;
mod exec_lease;
mod exec_outage;
mod exec_signals;
mod exec_tree;
mod help;
mod list_scope;
mod logs;
mod once_attempt;
mod ops;
mod opsview;
mod readme;
mod record_secrets;
mod runbook;
mod status;
mod stop_cont;
mod unlock;
mod versions;

const BIN: &str = env!("CARGO_BIN_EXE_redguard");

/// Generous bound for a redguard run that should end promptly.
const RUN_TIMEOUT: Duration = Duration::from_secs(10);

/// `redguard --url URL --watchdog-timeout 3s --response-timeout 1s`.
pub(crate) fn redguard(url: &str) -> Command {
    redguard_timed(url, "3s", "1s")
}

/// `redguard --url URL --watchdog-timeout 600ms --response-timeout 200ms`:
/// for the lease-loss cases.
fn redguard_short(url: &str) -> Command {
    redguard_timed(url, "600ms", "200ms")
}

/// `redguard --url URL --watchdog-timeout W --response-timeout R`.
pub(crate) fn redguard_timed(url: &str, watchdog: &str, response: &str) -> Command {
    let mut cmd = redguard_bare();
    cmd.args(["--url", url]).args([
        "--watchdog-timeout",
        watchdog,
        "--response-timeout",
        response,
    ]);
    cmd
}

/// A bare `redguard` command (no URL, no timings). Nothing is inherited
/// from the runner's `REDIS_URL`, `REDGUARD_WATCHDOG_TIMEOUT`, `RUST_LOG`
/// or `REDGUARD_LOG`; `REDGUARD_TEST_LOG=debug` turns the binary's
/// diagnostics on when a test needs debugging (and breaks the one-line
/// assertions).
fn redguard_bare() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDIS_URL")
        .env_remove("REDISCLI_AUTH")
        .env_remove("REDGUARD_PASSWORD_FILE")
        .env_remove("REDGUARD_WATCHDOG_TIMEOUT")
        .env_remove("REDGUARD_CLASSIC_PUBLISH")
        .env_remove("REDGUARD_RECORD_PREFIX")
        .env_remove("RUST_LOG")
        .env_remove("REDGUARD_LOG");
    if let Ok(level) = std::env::var("REDGUARD_TEST_LOG") {
        cmd.env("REDGUARD_LOG", level);
    }
    cmd
}

/// A running redguard with its stdout and stderr captured in files (not
/// pipes: a CMD that outlives redguard must not block the test). Killed
/// and reaped on drop.
pub(crate) struct Proc {
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

/// How a redguard run ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// From [`Proc::wait`] being called to the exit.
    elapsed: Duration,
}

impl Proc {
    pub(crate) fn spawn(mut cmd: Command) -> Proc {
        let dir = tempfile::Builder::new()
            .prefix("redguard-cli-")
            .tempdir()
            .unwrap();
        let stdout = dir.path().join("stdout");
        let stderr = dir.path().join("stderr");
        cmd.stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap());
        let child = cmd.spawn().unwrap();
        Proc {
            child: Some(child),
            stdout,
            stderr,
            _dir: dir,
        }
    }

    /// What it has written to stderr so far.
    pub(crate) fn stderr_so_far(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub(crate) fn signal(&self, signal: i32) {
        if self.child.is_some() {
            // SAFETY: kill(2) on our own child, not reaped yet.
            unsafe {
                libc::kill(self.pid(), signal);
            }
        }
    }

    /// `true` once the process has exited (it is then reaped by `wait`).
    fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Waits for the exit, at most `timeout`.
    ///
    /// # Panics
    ///
    /// When it does not exit in time (it is killed first) or was already
    /// waited for.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Outcome {
        let start = Instant::now();
        let mut child = self.child.take().expect("already waited for");
        let mut status = None;
        while start.elapsed() < timeout {
            if let Some(s) = child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            crate::support::sleep(ms(5));
        }
        let elapsed = start.elapsed();
        let stderr = fs::read_to_string(&self.stderr).unwrap_or_default();
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redguard did not exit within {timeout:?}; stderr:\n{stderr}");
        };
        Outcome {
            code: status.code(),
            stdout: fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr,
            elapsed,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs a redguard command to its end (bounded by [`RUN_TIMEOUT`]).
pub(crate) fn run(cmd: Command) -> Outcome {
    Proc::spawn(cmd).wait(RUN_TIMEOUT)
}

/// A scratch directory for CMD's marker files.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("redguard-cmd-")
        .tempdir()
        .unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Number of subscribers of the lock's unlock channel: a waiting redguard
/// subscribes before it retries.
fn waiters(server: &RedisServer, name: &str) -> i64 {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let reply: Vec<(String, i64)> = server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
    reply.first().map_or(0, |(_, n)| *n)
}

/// Reads a pid written by CMD into `file`, waiting for it at most 5 s.
fn read_pid(file: &Path) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            pid = fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            pid.is_some()
        }),
        "CMD did not write its pid to {}",
        file.display()
    );
    pid.unwrap_or_default()
}

/// `true` while `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Kills a CMD the test started through redguard (a leftover, if any).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0 > 0 && alive(self.0) {
            // SAFETY: kill(2); the pid was read from CMD itself and is
            // still alive, so it is the same process.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
            }
        }
    }
}

/// Asserts that the one-line error convention holds: exactly one line on
/// stderr, prefixed `redguard: `, no panic, no backtrace.
fn assert_one_line_error(out: &Outcome) {
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {:?}", out.stderr);
    assert!(lines[0].starts_with("redguard: "), "{:?}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{:?}", out.stderr);
    assert!(!out.stderr.contains("backtrace"), "{:?}", out.stderr);
}
