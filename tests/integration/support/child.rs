//! A test that runs part of itself in another OS process: the test binary
//! re-runs itself with `--exact <child test> --ignored`, so the child half is
//! an `#[ignore]`d test that does nothing unless its environment says so.
//!
//! The child talks to the parent in lines on stdout (test-harness chatter is
//! skipped by prefix) and reads lines from stdin; the parent can freeze,
//! resume or kill it with signals. Dropping a [`ChildTest`] kills the
//! process and waits for it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

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
