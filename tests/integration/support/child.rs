//! Running part of a test in another OS process: the test binary re-runs
//! itself with `--exact <name> --ignored`, so the child's body is an
//! `#[ignore]`d test that only runs when a parent asks for it.
//!
//! The parent holds a [`ChildTest`]: it reads the child's lines with a
//! deadline (a reader thread), writes lines to the child's stdin, signals,
//! kills and reaps it. The parent sets [`CHILD_ENV`] to a role; the child
//! side reads it with [`child_role`], which is `None` when the test runs on
//! its own (`cargo test -- --include-ignored`): the child test then returns
//! at once and passes. The child talks with [`say`] and [`hear`].

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Environment variable that switches an `#[ignore]`d child test on; its
/// value (the role) is free for the test's own use.
pub const CHILD_ENV: &str = "REDGUARD_TEST_CHILD";

/// A running child half of a test; killed and reaped on drop.
#[derive(Debug)]
pub struct ChildTest {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line the child printed so far, for failure messages and for
    /// checking that the child test really ran.
    transcript: Arc<Mutex<Vec<String>>>,
    name: String,
}

impl ChildTest {
    /// [`spawn`](Self::spawn) with the child's wall clock moved by
    /// `offset` (libfaketime's `FAKETIME`: "+1h", "-2s") and its monotonic
    /// clock left alone. libfaketime is preloaded directly: the `faketime`
    /// wrapper keeps a named semaphore and a shared-memory segment per its
    /// own pid in /dev/shm, left behind when a test kills it, and a later
    /// wrapper that is given the same pid refuses to start ("sem_open: File
    /// exists", seen once in five suite runs with 324 such files left).
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn), and when libfaketime is not installed
    /// (Debian's `faketime` package; `scripts/ensure-redis` installs it).
    pub fn spawn_faked(offset: &str, test: &str, role: &str, env: &[(&str, &str)]) -> ChildTest {
        let lib = libfaketime();
        let mut all = vec![
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ];
        all.extend_from_slice(env);
        ChildTest::spawn(test, role, &all)
    }

    /// Runs the `#[ignore]`d test `test` (its full path, e.g.
    /// `"fair_lock::a8_child_waiter"`) of this test binary in a new process,
    /// with `CHILD_ENV` set to `role` and the extra variables `env`.
    ///
    /// # Panics
    ///
    /// If `role` is empty or the process cannot be started.
    pub fn spawn(test: &str, role: &str, env: &[(&str, &str)]) -> ChildTest {
        assert!(!role.is_empty(), "a child test needs a non-empty role");
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
        let transcript = Arc::new(Mutex::new(Vec::new()));
        {
            let transcript = Arc::clone(&transcript);
            // Ends when the child's stdout closes (exit or kill).
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    transcript
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line.clone());
                    // The parent may have stopped listening; keep draining
                    // so the child never blocks on a full pipe.
                    let _ = tx.send(line);
                }
            });
        }
        ChildTest {
            child,
            stdin,
            lines,
            transcript,
            name: test.to_owned(),
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Every line the child printed so far.
    pub fn transcript(&self) -> Vec<String> {
        self.transcript
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits at most `timeout` for a line starting with `prefix` and
    /// returns the rest of it, trimmed (other lines are skipped).
    ///
    /// # Panics
    ///
    /// When no such line arrives in time or the child's stdout closes.
    pub fn expect_line(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "child {} printed no {prefix:?} line within {timeout:?}; it printed {:?}",
                    self.name,
                    self.transcript()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "child {} exited before printing {prefix:?}; it printed {:?}",
                    self.name,
                    self.transcript()
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
    /// successfully **and** its test really ran (the harness reported one
    /// test passed: a misspelt test path runs nothing and exits 0).
    pub fn wait_success(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => super::sleep(super::ms(10)),
                _ => return false,
            }
        };
        if !status.success() {
            return false;
        }
        // The reader thread may still be reading the last lines.
        super::wait_until(Duration::from_secs(2), || {
            self.transcript().iter().any(|l| l.contains(" 1 passed"))
        })
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

/// In a child test: a variable the parent set.
///
/// # Panics
///
/// If it is missing: call this only after [`child_role`] returned a role.
pub fn child_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("the parent test did not set ${name}"))
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

/// The path of libfaketime (`libfaketime.so.1`, the library the `faketime`
/// wrapper preloads), under the multiarch directories of /usr/lib.
fn libfaketime() -> String {
    let mut dirs = vec![std::path::PathBuf::from("/usr/lib")];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    dirs.iter()
        .map(|d| d.join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
        .expect(
            "libfaketime.so.1 is not installed under /usr/lib: install the Debian package \
             `faketime` (scripts/ensure-redis does). (Not skipping: a missing tool is a failure.)",
        )
}
