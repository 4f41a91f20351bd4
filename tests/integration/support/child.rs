//! Running part of a test in another OS process: the test binary re-runs
//! itself with `--exact <name> --ignored`, so the child's body is an
//! `#[ignore]`d test that only runs when a parent asks for it.
//!
//! [`ChildProcess`] reads marker lines from the child. [`ChildTest`] also
//! talks back (lines on the child's stdin), bounds every read by a deadline
//! (a reader thread), and selects the child test by an environment
//! variable ([`child_role`]); the child side uses [`say`] and [`hear`].

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A child test process, killed and reaped on drop.
#[derive(Debug)]
pub struct ChildProcess {
    child: Option<Child>,
    stdout: Option<BufReader<ChildStdout>>,
}

impl ChildProcess {
    /// Runs the `#[ignore]`d test `name` (its full path, e.g.
    /// `mutual_exclusion::child_worker`) in a new process with `envs` set.
    pub fn spawn(name: &str, envs: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().map(BufReader::new);
        ChildProcess {
            child: Some(child),
            stdout,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Reads the child's stdout until a line equal to `marker` appears, for
    /// at most `timeout`. `true` when it appeared.
    pub fn wait_for_line(&mut self, marker: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Some(out) = self.stdout.as_mut() else {
            return false;
        };
        // Reads block; the child prints its marker promptly or dies, and the
        // deadline is checked between lines.
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => return false,
                Ok(_) if line.trim_end() == marker => return true,
                Ok(_) => {}
            }
        }
        false
    }

    /// Sends `signal` (e.g. `libc::SIGKILL`) to the child.
    pub fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a pid we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
        }
    }

    /// Waits for the child to exit, at most `timeout`; `Some(success)`.
    pub fn wait(&mut self, timeout: Duration) -> Option<bool> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status.success());
            }
            super::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Environment variable that switches an `#[ignore]`d child test on; its
/// value is free for the test's own use.
pub const CHILD_ENV: &str = "REDGUARD_TEST_CHILD";

/// A running child half of a test.
#[derive(Debug)]
pub struct ChildTest {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    name: String,
}

impl ChildTest {
    /// Runs the `#[ignore]`d test `test` (its full path, e.g.
    /// `"fair_lock::a8_child_waiter"`) of this test binary in a new process,
    /// with `CHILD_ENV` set to `role` and the extra variables `env`.
    ///
    /// # Panics
    ///
    /// If the process cannot be started.
    pub fn spawn(test: &str, role: &str, env: &[(&str, &str)]) -> ChildTest {
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn the child test process");
        let stdout = child.stdout.take().expect("child stdout is piped");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildTest {
            child,
            stdin,
            lines,
            name: test.to_owned(),
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Waits at most `timeout` for a line starting with `prefix` and
    /// returns the rest of it (other lines are skipped).
    ///
    /// # Panics
    ///
    /// When no such line arrives in time or the child's stdout closes.
    pub fn expect_line(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                    skipped.push(line);
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "child {} printed no {prefix:?} line within {timeout:?}; it printed {skipped:?}",
                    self.name
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "child {} exited before printing {prefix:?}; it printed {skipped:?}",
                    self.name
                ),
            }
        }
    }

    /// Writes one line to the child's stdin.
    ///
    /// # Panics
    ///
    /// If the write fails.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin is open");
        writeln!(stdin, "{line}").expect("write to the child's stdin");
        stdin.flush().expect("flush the child's stdin");
    }

    /// Sends `sig` (e.g. `libc::SIGSTOP`) to the child.
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) with a pid this test spawned and has not reaped.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid());
    }

    /// Kills the child with `SIGKILL` and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: as in `signal`; the child has not been reaped yet.
            unsafe {
                libc::kill(self.pid(), libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }

    /// Waits at most `timeout` for the child to exit; `true` when it exited
    /// successfully.
    pub fn wait_success(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => super::sleep(super::ms(10)),
                _ => return false,
            }
        }
    }
}

impl Drop for ChildTest {
    fn drop(&mut self) {
        self.kill();
    }
}

/// In a child test: the role given by the parent, or `None` when the test
/// runs on its own (then it should return at once).
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok().filter(|s| !s.is_empty())
}

/// In a child test: prints one line for the parent, flushed. It starts on a
/// line of its own: the harness may have left its "test name ..." line open.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{line}");
    let _ = out.flush();
}

/// In a child test: blocks until the parent writes a line; returns it
/// (empty when stdin closed).
pub fn hear() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    line.trim().to_owned()
}
