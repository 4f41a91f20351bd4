//! The `redguard` binary end to end (`CARGO_BIN_EXE_redguard`), against a
//! private redis-server per test. Lease tests use short timings (600 ms
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

use crate::support::{RedisServer, TestContext, ms, test_builder, unique_name, wait_until};

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
fn redguard_timed(url: &str, watchdog: &str, response: &str) -> Command {
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
/// from the runner's `REDIS_URL`, `REDGUARD_WATCHDOG_TIMEOUT` or
/// `REDGUARD_LOG`; `REDGUARD_TEST_LOG=debug` turns the binary's
/// diagnostics on when a test needs debugging (and breaks the one-line
/// assertions).
fn redguard_bare() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDIS_URL")
        .env_remove("REDGUARD_WATCHDOG_TIMEOUT")
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

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    fn signal(&self, signal: i32) {
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

fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd::<i64>("EXISTS", &[key.as_bytes()]) == 1
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd("PTTL", &[key.as_bytes()])
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

#[test]
fn exec_runs_cmd_with_its_env_and_passes_its_exit_status() {
    let server = RedisServer::start();
    let name = unique_name("exec-env");
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--"]).args([
        "sh",
        "-c",
        "echo \"$REDGUARD_LOCK|$REDGUARD_HOLDER\"; exit 7",
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(7), "{out:?}");
    let line = out.stdout.trim();
    let (lock, holder) = line.split_once('|').unwrap();
    assert_eq!(lock, name);
    assert!(holder.contains(':'), "holder id {holder:?}");
    assert!(!exists(&server, &name), "released after CMD ended");
    assert_eq!(out.stderr, "", "silent on success");
}

#[test]
fn exec_reports_a_signal_death_as_128_plus_n() {
    let server = RedisServer::start();
    let name = unique_name("exec-sig");
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "sh", "-c", "kill -KILL $$"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(137), "{out:?}");
    assert!(!exists(&server, &name));
}

#[test]
fn four_concurrent_execs_never_overlap() {
    let server = RedisServer::start();
    let name = unique_name("exec-race");
    let dir = scratch();
    let log = dir.path().join("log");
    // Each critical section appends "S <pid>", holds ~150 ms, appends
    // "E <pid>" (O_APPEND writes of one short line do not interleave).
    let body = format!(
        "echo \"S $$\" >> {log}; sleep 0.15; echo \"E $$\" >> {log}",
        log = path_str(&log)
    );
    let mut procs: Vec<Proc> = (0..4)
        .map(|_| {
            let mut cmd = redguard(&server.url());
            cmd.args(["exec", &name, "--", "sh", "-c", &body]);
            Proc::spawn(cmd)
        })
        .collect();
    for p in &mut procs {
        let out = p.wait(Duration::from_secs(20));
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("S ").expect(&text);
        let end = pair[1].strip_prefix("E ").expect(&text);
        assert_eq!(start, end, "critical sections overlap:\n{text}");
    }
    assert!(!exists(&server, &name));
}

#[test]
fn no_wait_while_held_exits_75_names_the_holder_and_does_not_run_cmd() {
    let ctx = TestContext::new();
    let name = unique_name("no-wait");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    let holder = guard.holder_id().as_str().to_owned();
    let dir = scratch();
    let marker = dir.path().join("ran");

    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", "--no-wait", &name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(!marker.exists(), "CMD must not run");
    assert_one_line_error(&out);
    assert!(out.stderr.contains(&name), "{}", out.stderr);
    assert!(out.stderr.contains(&holder), "{}", out.stderr);
    assert!(out.stderr.contains("ttl"), "{}", out.stderr);

    // A custom code, and a bounded wait that runs out.
    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", "--wait", "300ms", "--conflict-exit-code", "9"])
        .args([&name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(9), "{out:?}");
    assert!(!marker.exists());
    assert!(out.elapsed >= ms(250), "waited {:?}", out.elapsed);

    // -q: the exit status speaks alone.
    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", "-q", "-n", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!((out.code, out.stderr.as_str()), (Some(75), ""));
    drop(guard);
}

#[test]
fn a_waiting_exec_runs_once_the_holder_releases() {
    let ctx = TestContext::new();
    let name = unique_name("wait-then-run");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", "--wait", "5s", &name, "--", "echo", "ran"]);
    let mut p = Proc::spawn(cmd);
    assert!(wait_until(Duration::from_secs(5), || waiters(
        &ctx.server,
        &name
    ) >= 1));
    let released = Instant::now();
    drop(guard);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!((out.code, out.stdout.trim()), (Some(0), "ran"), "{out:?}");
    // stderr is not a terminal: no spinner, nothing at all.
    assert_eq!(out.stderr, "");
    // Woken by the unlock message, not by polling out the 600 ms lease.
    assert!(released.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_fixed_lease_is_not_renewed_and_running_past_it_counts_as_lost() {
    let server = RedisServer::start();
    let name = unique_name("lease");
    let dir = scratch();
    let ready = dir.path().join("ready");
    // Within the lease: CMD's status, and the ttl only ever goes down.
    let body = format!("echo $$ > {}; sleep 0.6; exit 5", path_str(&ready));
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--lease", "5s", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    let first = pttl(&server, &name);
    assert!(first > 0 && first <= 5_000, "pttl {first}");
    crate::support::sleep(ms(400));
    let later = pttl(&server, &name);
    assert!(
        later > 0 && later <= first - 300,
        "renewed? {first} -> {later}"
    );
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(5), "{out:?}");
    assert!(!exists(&server, &name));

    // Past the lease: stopped like any lost lease.
    let ready2 = dir.path().join("ready2");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&ready2));
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--lease", "500ms", "--kill-grace", "1s", &name])
        .args(["--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&ready2);
    let _cmd = KillOnDrop(cmd_pid);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("--lease 500ms"), "{}", out.stderr);
    assert!(out.elapsed < Duration::from_secs(3), "{:?}", out.elapsed);
    assert!(!alive(cmd_pid));
}

#[test]
fn sigterm_to_redguard_reaches_cmd_and_the_lock_is_free_afterwards() {
    let server = RedisServer::start();
    let name = unique_name("sigterm");
    let dir = scratch();
    let ready = dir.path().join("ready");
    let got = dir.path().join("got");
    let body = format!(
        "trap 'echo term > {got}; exit 0' TERM; echo $$ > {ready}; \
         i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 1",
        got = path_str(&got),
        ready = path_str(&ready)
    );
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    assert!(exists(&server, &name), "held while CMD runs");
    p.signal(libc::SIGTERM);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(
        out.code,
        Some(0),
        "CMD's status after its TERM trap: {out:?}"
    );
    assert_eq!(fs::read_to_string(&got).unwrap().trim(), "term");
    assert!(!exists(&server, &name), "released after CMD ended");
}

#[test]
fn sigint_while_waiting_exits_130_without_running_cmd() {
    let ctx = TestContext::new();
    let name = unique_name("sigint-wait");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let mut p = Proc::spawn(cmd);
    assert!(wait_until(Duration::from_secs(5), || waiters(
        &ctx.server,
        &name
    ) >= 1));
    p.signal(libc::SIGINT);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(130), "{out:?}");
    assert!(out.stderr.contains("SIGINT"), "{}", out.stderr);
    assert!(!marker.exists());
    // The test still holds its lock: redguard took nothing.
    guard.check().unwrap();
    let holders = lock.holders().unwrap();
    assert_eq!(holders.len(), 1);
}

/// B1: `kill -9` of redguard. Nobody renews the lease any more: the key
/// frees itself within the (600 ms) lease, a waiter acquires only then, and
/// CMD is stopped by its parent-death signal.
#[test]
fn b1_sigkill_of_redguard_stops_renewal_and_the_lock_frees_within_the_lease() {
    let server = RedisServer::start();
    let name = unique_name("b1");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&pidfile));
    // The watchdog timeout through the environment this time.
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", server.url())
        .env("REDGUARD_WATCHDOG_TIMEOUT", "600ms")
        .args(["exec", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    // Renewed while redguard lives: the ttl stays up across 3 renewals.
    let watch_until = Instant::now() + ms(700);
    while Instant::now() < watch_until {
        let t = pttl(&server, &name);
        assert!(t > 200, "renewed lease fell to {t} ms");
        crate::support::sleep(ms(20));
    }

    let ttl_at_kill = pttl(&server, &name);
    p.signal(libc::SIGKILL);
    let killed = Instant::now();
    let _ = p.wait(RUN_TIMEOUT);

    let waiter = test_builder(&server.url()).build().unwrap();
    let lock = waiter.lock(&name);
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the lock frees itself");
    let took = killed.elapsed();
    let ttl_at_kill = ms(u64::try_from(ttl_at_kill).unwrap());
    assert!(
        took + ms(100) >= ttl_at_kill,
        "acquired after {took:?}, before the lease ({ttl_at_kill:?}) ran out"
    );
    assert!(
        took <= ttl_at_kill + ms(750),
        "acquired only after {took:?} (lease left at kill: {ttl_at_kill:?})"
    );
    drop(guard);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(cmd_pid)),
        "CMD outlived redguard"
    );
}

/// B4: Redis restarts empty under a running exec: the renewal answers 0,
/// CMD gets SIGTERM and redguard exits 70.
#[test]
fn b4_redis_restarted_empty_stops_cmd_and_exits_70() {
    let mut server = RedisServer::start();
    let name = unique_name("b4");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&pidfile));
    let mut cmd = redguard_short(&server.url());
    cmd.args(["exec", "--kill-grace", "2s", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    assert!(exists(&server, &name));

    server.restart();
    let restarted = Instant::now();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
    // One renewal period (200 ms) plus reconnect, with a x3 margin; SIGTERM
    // ends `sleep` at once, so the 2 s grace is not used.
    assert!(
        restarted.elapsed() < ms(1_500),
        "noticed after {:?}",
        restarted.elapsed()
    );
    assert!(!alive(cmd_pid), "CMD stopped");
    assert!(
        !exists(&server, &name),
        "nothing written back after the loss"
    );
}

/// B4 with a CMD that ignores SIGTERM: SIGKILL follows after --kill-grace.
#[test]
fn b4_cmd_ignoring_sigterm_is_killed_after_the_grace() {
    let mut server = RedisServer::start();
    let name = unique_name("b4-grace");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!(
        "trap '' TERM; echo $$ > {}; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        path_str(&pidfile)
    );
    let mut cmd = redguard_short(&server.url());
    cmd.args([
        "exec",
        "--kill-grace",
        "700ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    server.restart();
    let restarted = Instant::now();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    let took = restarted.elapsed();
    assert!(took >= ms(700), "SIGKILL before the grace: {took:?}");
    assert!(took < ms(3_000), "took {took:?}");
    assert!(!alive(cmd_pid));
}

#[test]
fn on_lost_warn_lets_cmd_finish_with_its_own_status() {
    let mut server = RedisServer::start();
    let name = unique_name("warn");
    let dir = scratch();
    let ready = dir.path().join("ready");
    let body = format!("echo $$ > {}; sleep 1.2; exit 3", path_str(&ready));
    let mut cmd = redguard_short(&server.url());
    cmd.args(["exec", "--on-lost", "warn", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    server.restart();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(out.stderr.contains("warning"), "{}", out.stderr);
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
}

/// C4: a Redis pause shorter than half the lease is ridden out by the
/// watchdog (no loss, CMD's own status); a freeze longer than the lease is
/// reported (exit 70) even while Redis stays silent.
#[test]
fn c4_slow_redis_keeps_the_lock_and_a_freeze_past_the_lease_is_reported() {
    let server = RedisServer::start();
    let name = unique_name("c4");
    let dir = scratch();
    let ready = dir.path().join("ready");
    // Catalogue timings: 1.5 s lease, 250 ms response timeout.
    let body = format!("echo $$ > {}; sleep 1.5; exit 4", path_str(&ready));
    let mut cmd = redguard_timed(&server.url(), "1500ms", "250ms");
    cmd.args(["exec", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    server.client_pause(500);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(
        out.code,
        Some(4),
        "a 500 ms pause must not lose the lock: {out:?}"
    );
    assert_eq!(out.stderr, "");

    let ready2 = dir.path().join("ready2");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&ready2));
    let mut cmd = redguard_short(&server.url());
    cmd.args(["exec", "--kill-grace", "1s", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&ready2);
    let _cmd = KillOnDrop(cmd_pid);
    server.sigstop();
    let frozen = Instant::now();
    let out_or_none = {
        let mut exited = false;
        let ok = wait_until(Duration::from_secs(4), || {
            exited = p.has_exited();
            exited
        });
        ok.then(|| p.wait(RUN_TIMEOUT))
    };
    let took = frozen.elapsed();
    server.sigcont();
    let out = out_or_none.expect("a freeze past the lease must be reported");
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
    // Validity runs out on redguard's own clock: at most one lease after the
    // last renewal, without waiting for Redis.
    assert!(took < ms(2_000), "reported after {took:?}");
    assert!(!alive(cmd_pid));
}

#[test]
fn status_and_unlock_on_held_free_and_wrong_type_keys() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("status");
    let status = |json: bool| {
        let mut cmd = redguard(&url);
        cmd.args(["status", &name]);
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout
    };
    let unlock = || {
        let mut cmd = redguard(&url);
        cmd.args(["unlock", "--force", &name]);
        run(cmd)
    };

    // Free.
    assert!(status(false).contains("free"));
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["kind"], "free");
    assert!(v["ttl_ms"].is_null());
    let out = unlock();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("was free"), "{}", out.stdout);

    // Held (twice, reentrant) by a library client.
    let lock = ctx.client.lock(&name);
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    let holder = g1.holder_id().as_str().to_owned();
    let text = status(false);
    assert!(text.contains("held (reentrant lock)"), "{text}");
    assert!(text.contains(&format!("{holder} (hold count 2)")), "{text}");
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["kind"], "reentrant");
    assert_eq!(v["holders"][0]["id"], holder.as_str());
    assert_eq!(v["holders"][0]["count"], 2);
    let ttl = v["ttl_ms"].as_u64().unwrap();
    assert!(
        ttl > 0 && ttl <= crate::support::TEST_WATCHDOG.as_millis() as u64,
        "ttl {ttl}"
    );

    drop(g2);
    drop(g1);
    assert!(status(false).contains("free"));

    // unlock --force removes a lock and wakes its waiters at once. The
    // holder's fixed 30 s lease and the waiter's 5 s poll interval mean a
    // prompt wake-up can only come from the unlock message.
    let long = lock.with_lease(Duration::from_secs(30));
    let g = long.lock().unwrap();
    let slow_poller = test_builder(&url)
        .poll_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter_name = name.clone();
    let waiter = std::thread::spawn(move || {
        let lock = slow_poller.lock(&waiter_name);
        let got = lock.try_lock_for(Duration::from_secs(8)).unwrap();
        let _ = tx.send(Instant::now());
        got.is_some()
    });
    assert!(wait_until(Duration::from_secs(5), || waiters(
        &ctx.server,
        &name
    ) >= 1));
    let out = unlock();
    let unlocked = Instant::now();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("removed lock"), "{}", out.stdout);
    assert!(out.stdout.contains(&holder), "{}", out.stdout);
    let woke = rx.recv_timeout(Duration::from_secs(8)).unwrap();
    assert!(waiter.join().unwrap(), "the waiter acquired");
    assert!(
        woke.saturating_duration_since(unlocked) < Duration::from_secs(2),
        "waiter woke {:?} after the unlock",
        woke.saturating_duration_since(unlocked)
    );
    // The old guard's release cannot touch the waiter's lock (it already
    // let go when the waiter's thread ended; the key is gone).
    assert!(g.unlock().unwrap_err().is_not_held());
    let _: i64 = ctx.server.cmd("DEL", &[name.as_bytes()]);

    // Wrong type: reported, never touched.
    let () = ctx.server.cmd("SET", &[name.as_bytes(), b"not a lock"]);
    let text = status(false);
    assert!(
        text.contains("not a lock") && text.contains("string"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["kind"], "other");
    assert_eq!(v["redis_type"], "string");
    assert_eq!(v["held"], true);
    let out = unlock();
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("left untouched"), "{}", out.stderr);
    let value: String = ctx.server.cmd("GET", &[name.as_bytes()]);
    assert_eq!(value, "not a lock");

    // exec on a wrong-type key: a clear error, CMD not run.
    let mut cmd = redguard(&url);
    cmd.args(["exec", "-n", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
}

#[test]
fn status_shows_fair_queues_and_read_write_modes() {
    let server = RedisServer::start();
    let url = server.url();
    let name = unique_name("kinds");
    let status_json = || {
        let mut cmd = redguard(&url);
        cmd.args(["status", "--json", &name]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    // Redisson's fair-lock layout, written by hand.
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let () = server.cmd("HSET", &[name.as_bytes(), b"a:1", b"1"]);
    let () = server.cmd("PEXPIRE", &[name.as_bytes(), b"30000"]);
    let _: i64 = server.cmd("RPUSH", &[queue.as_bytes(), b"b:2", b"c:3"]);
    let _: i64 = server.cmd("ZADD", &[timeouts.as_bytes(), b"4102444800000", b"b:2"]);
    let v = status_json();
    assert_eq!(v["kind"], "fair", "{v}");
    assert_eq!(v["queue"][0]["id"], "b:2");
    assert_eq!(v["queue"][0]["deadline_ms"], 4_102_444_800_000_u64);
    assert_eq!(v["queue"][1]["id"], "c:3");
    assert!(v["queue"][1]["deadline_ms"].is_null());
    let _: i64 = server.cmd(
        "DEL",
        &[name.as_bytes(), queue.as_bytes(), timeouts.as_bytes()],
    );

    // Redisson's read-write layout: mode field plus reader counts.
    let () = server.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"mode",
            b"read",
            b"r:1",
            b"2",
            b"r:2",
            b"1",
        ],
    );
    let v = status_json();
    assert_eq!(v["kind"], "read_write", "{v}");
    assert_eq!(v["mode"], "read");
    assert_eq!(v["holders"].as_array().unwrap().len(), 2);
    let mut cmd = redguard(&url);
    cmd.args(["status", &name]);
    let out = run(cmd);
    assert!(
        out.stdout.contains("read-write lock, read mode"),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_arguments_and_failures_are_one_line_with_distinct_codes() {
    let server = RedisServer::start();
    let url = server.url();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["exec", "j", "--bogus", "--", "true"], 64, "--bogus"),
        (
            vec!["exec", "j", "--wait", "10", "--", "true"],
            64,
            "--wait",
        ),
        (
            vec!["exec", "j", "--wait", "soon", "--", "true"],
            64,
            "soon",
        ),
        (vec!["exec", "j"], 64, "CMD"),
        (vec!["unlock", "j"], 64, "--force"),
        (
            vec!["exec", "j", "--", "no-such-command-redguard"],
            127,
            "not found",
        ),
        (vec!["exec", "j", "--", "/"], 126, "/"),
    ];
    for (args, code, needle) in cases {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.code, Some(code), "{args:?}: {out:?}");
        assert_one_line_error(&out);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    // CMD not found: no lock was taken for it.
    assert!(!exists(&server, "j"));

    let mut cmd = redguard_bare();
    cmd.args(["--url", "not a url", "status", "j"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(64), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("bad Redis URL"), "{}", out.stderr);

    // Nothing listens on a port of a stopped server.
    let mut gone = RedisServer::start();
    let gone_url = gone.url();
    let gone_port = gone.port();
    gone.kill();
    let mut cmd = redguard(&gone_url);
    cmd.args(["exec", "j", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_one_line_error(&out);
    assert!(
        out.stderr.contains(&format!("127.0.0.1:{gone_port}")),
        "{}",
        out.stderr
    );
}

/// An ACL user with a password that needs percent-encoding in a URL.
const USER: &str = "rguser";
const PASSWORD: &str = "s3cr%t@pw:x";
const PASSWORD_ENCODED: &str = "s3cr%25t%40pw%3Ax";

fn server_with_user() -> RedisServer {
    let server = RedisServer::start();
    let pw = format!(">{PASSWORD}");
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            USER.as_bytes(),
            b"on",
            pw.as_bytes(),
            b"~*",
            b"&*",
            b"+@all",
        ],
    );
    server
}

fn url_with(server: &RedisServer, password: &str) -> String {
    format!("redis://{USER}:{password}@127.0.0.1:{}/", server.port())
}

fn assert_no_password(out: &Outcome, what: &str) {
    for secret in [PASSWORD, PASSWORD_ENCODED, "s3cr"] {
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "{what}: the password leaked: {out:?}"
        );
    }
}

/// J3: a wrong password fails closed: exit 77, CMD not run, nothing written.
#[test]
fn j3_wrong_password_fails_closed() {
    let server = server_with_user();
    let name = unique_name("j3");
    let dir = scratch();
    let marker = dir.path().join("ran");
    let mut cmd = redguard(&url_with(&server, "wrong%40pw"));
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("authentication"), "{}", out.stderr);
    assert!(!out.stderr.contains("wrong"), "{}", out.stderr);
    assert!(!marker.exists());
    assert!(!exists(&server, &name));

    // The right password works.
    let mut cmd = redguard(&url_with(&server, PASSWORD_ENCODED));
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
}

/// J7: the password never appears in any output: success, busy, errors,
/// status, unlock, help, usage errors; from --url and from $REDIS_URL.
#[test]
fn j7_no_password_in_any_output() {
    let server = server_with_user();
    let url = url_with(&server, PASSWORD_ENCODED);
    let name = unique_name("j7");
    let holder_client = test_builder(&url).build().unwrap();
    let lock = holder_client.lock(&name);

    let mut runs: Vec<(String, Outcome)> = Vec::new();
    let mut go = |what: &str, cmd: Command| runs.push((what.to_owned(), run(cmd)));

    let mut cmd = redguard(&url);
    cmd.args(["exec", &name, "--", "sh", "-c", "echo $REDGUARD_LOCK"]);
    go("exec ok", cmd);
    let mut cmd = redguard(&url);
    cmd.args(["status", &name]);
    go("status", cmd);

    let guard = lock.lock().unwrap();
    let mut cmd = redguard(&url);
    cmd.args(["exec", "-n", &name, "--", "true"]);
    go("busy", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url).args(["status", "--json", &name]);
    go("status json via env", cmd);
    let mut cmd = redguard(&url);
    cmd.args(["unlock", "--force", &name]);
    go("unlock", cmd);
    drop(guard);

    let mut cmd = redguard(&url_with(&server, "wrong-s3cr-pw"));
    cmd.args(["status", &name]);
    go("wrong password", cmd);
    let dead = format!("redis://{USER}:{PASSWORD_ENCODED}@127.0.0.1:1/");
    let mut cmd = redguard(&dead);
    cmd.args(["exec", &name, "--", "true"]);
    go("unreachable", cmd);
    let bad = format!("redis://{USER}:{PASSWORD_ENCODED}@127.0.0.1:notaport/");
    let mut cmd = redguard(&bad);
    cmd.args(["status", &name]);
    go("bad url", cmd);
    let tls = format!("rediss://{USER}:{PASSWORD_ENCODED}@127.0.0.1:1/");
    let mut cmd = redguard(&tls);
    cmd.args(["status", &name]);
    go("tls url", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url).args(["exec", "--help"]);
    go("help with env", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url)
        .args(["exec", "--wait", &url, &name, "true"]);
    go("url as a bad duration", cmd);
    let mut cmd = redguard_bare();
    cmd.args(["--url", &url, "exec", &name, "--bogus", "--", "true"]);
    go("usage error", cmd);

    assert_eq!(runs.len(), 12);
    for (what, out) in &runs {
        assert_no_password(out, what);
    }
    // The runs did what they should (so the check covered real output).
    let code = |what: &str| runs.iter().find(|(w, _)| w == what).unwrap().1.code;
    assert_eq!(code("exec ok"), Some(0));
    assert_eq!(code("busy"), Some(75));
    assert_eq!(code("unlock"), Some(0));
    assert_eq!(code("wrong password"), Some(77));
    assert_eq!(code("unreachable"), Some(69));
    assert_eq!(code("bad url"), Some(64));
    assert_eq!(code("help with env"), Some(0));
    assert_eq!(code("url as a bad duration"), Some(64));
}

#[test]
fn fenced_exec_exports_increasing_fencing_tokens() {
    let server = RedisServer::start();
    let name = unique_name("exec-fenced");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut cmd = redguard(&server.url());
        cmd.args(["exec", "--fenced", &name, "--"]).args([
            "sh",
            "-c",
            "echo \"$REDGUARD_FENCING_TOKEN\"",
        ]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        tokens.push(out.stdout.trim().parse::<u64>().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(tokens[0] > 0);
    // Without --fenced there is no token.
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--"]).args([
        "sh",
        "-c",
        "echo \"[${REDGUARD_FENCING_TOKEN-unset}]\"",
    ]);
    assert_eq!(run(cmd).stdout.trim(), "[unset]");
}

#[test]
fn fair_exec_takes_the_fair_lock_and_status_names_it() {
    let server = RedisServer::start();
    let name = unique_name("exec-fair");
    let dir = scratch();
    let marker = dir.path().join("running");
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--fair", &name, "--"]).args([
        "sh",
        "-c",
        &format!("touch {}; sleep 1", path_str(&marker)),
    ]);
    let mut holder = Proc::spawn(cmd);
    assert!(wait_until(Duration::from_secs(5), || marker.exists()));
    // A fair waiter queues; --no-wait gives up at once.
    let mut busy = redguard(&server.url());
    busy.args(["exec", "--fair", "--no-wait", &name, "--", "true"]);
    assert_eq!(run(busy).code, Some(75));
    let out = holder.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!exists(&server, &name));
    // --fair and --fenced do not go together.
    let mut both = redguard(&server.url());
    both.args(["exec", "--fair", "--fenced", &name, "--", "true"]);
    assert_eq!(run(both).code, Some(64));
}

#[test]
fn unlock_force_on_a_fair_lock_wakes_the_queue_head() {
    let server = RedisServer::start();
    let name = unique_name("unlock-fair");
    let slow = || {
        crate::support::test_builder(&server.url())
            .watchdog_timeout(Duration::from_secs(30))
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let holder = slow();
    let held = holder.fair_lock(&name);
    let guard = held.lock().unwrap();
    let waiter_client = slow();
    let waiter = std::thread::spawn(move || {
        let lock = waiter_client.fair_lock(&name);
        let t0 = std::time::Instant::now();
        let got = lock
            .try_lock_for(Duration::from_secs(10))
            .unwrap()
            .is_some();
        (got, t0)
    });
    assert!(wait_until(Duration::from_secs(5), || matches!(
        held.inspect().unwrap().kind,
        redguard::LockKind::Fair { queue } if queue.len() == 1
    )));
    let mut cmd = redguard(&server.url());
    cmd.args([
        "unlock",
        "--force",
        std::str::from_utf8(held.name()).unwrap(),
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let released = std::time::Instant::now();
    let (got, _) = waiter.join().unwrap();
    assert!(got);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{:?}",
        released.elapsed()
    );
    // The old holder's release finds its hold gone.
    assert!(guard.unlock().unwrap_err().is_not_held());
}
