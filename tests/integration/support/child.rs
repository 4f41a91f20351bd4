//! Running part of a test in another OS process: the test binary re-runs
//! itself with `--exact <name> --ignored`, so the child's body is an
//! `#[ignore]`d test that only runs when a parent asks for it.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
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
