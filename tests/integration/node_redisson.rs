//! node-redisson (npm `node-redisson@1.0.4`, on `ioredis`) beside redguard
//! on one lock: each excludes the other, `status` shows node-redisson's
//! holder, and node-redisson's release wakes a waiting `redguard exec` over
//! pub/sub. node-redisson's holder ids are `<uuid>:<uuid>` (its client's id
//! and a per-lock-handle UUID, not a thread id): a shape rule that knew only
//! Redisson's `<uuid>:<thread id>` called its locks "not a lock".
//!
//! The node side is `tests/peers/node/peer.js`, driven line by line over
//! stdin and stdout. `scripts/test` installs the pinned packages of
//! `tests/peers/node/package-lock.json` into a cache and names their
//! `node_modules` in [`NODE_ENV`]; it is run on the reference server only.
//! Without the variable (a run outside `scripts/test`) each test prints
//! `SKIP`; with it, a node or package that does not work fails the test.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use redguard::LockKind;

use crate::cli::{Proc, redguard, run};
use crate::support::{
    RedisServer, TestContext, ms, skip_test, test_builder, unique_name, wait_until,
};

/// The `node_modules` directory holding `node-redisson` and `ioredis`
/// (set by `scripts/test`).
const NODE_ENV: &str = "REDGUARD_NODE_REDISSON";

/// The answer to one command, node and its packages loaded: generous for
/// a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(20);

/// A wake-up by an unlock message: well under both redguard's poll
/// interval (1 s for the CLI) and node-redisson's lease (30 s), the other
/// two ways a waiter tries again.
const PROMPT: Duration = Duration::from_millis(700);

/// The node-redisson client of one lock on `server`; killed and reaped on
/// drop.
struct NodePeer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Receiver<String>,
}

impl NodePeer {
    /// Starts `peer.js` on `name`, or `None` (the test prints `SKIP`)
    /// when the suite was not given node-redisson.
    ///
    /// # Panics
    ///
    /// When node cannot be started or the client does not connect.
    fn start(server: &RedisServer, name: &str) -> Option<NodePeer> {
        let Some(modules) = std::env::var_os(NODE_ENV).filter(|v| !v.is_empty()) else {
            skip_test(&format!(
                "{NODE_ENV} is not set (scripts/test installs node-redisson and sets it)"
            ));
            return None;
        };
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/node/peer.js");
        let mut child = Command::new("node")
            .arg(script)
            .arg(server.port().to_string())
            .arg(name)
            .env("NODE_PATH", &modules)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{NODE_ENV} is set but node does not start: {e}"));
        let stdin = child.stdin.take().unwrap();
        let lines = reader(child.stdout.take().unwrap());
        let stderr = reader(child.stderr.take().unwrap());
        let mut peer = NodePeer {
            child,
            stdin,
            lines,
            stderr,
        };
        peer.expect("READY");
        Some(peer)
    }

    /// The next line node prints, within [`ANSWER`].
    fn line(&mut self) -> String {
        match self.lines.recv_timeout(ANSWER) {
            Ok(line) if !line.starts_with("ERROR") => line,
            other => {
                let _ = self.child.kill();
                let stderr: Vec<String> = self.stderr.try_iter().collect();
                panic!(
                    "node-redisson peer ({NODE_ENV}={:?}): {other:?}; stderr:\n{}",
                    std::env::var(NODE_ENV).unwrap_or_default(),
                    stderr.join("\n")
                );
            }
        }
    }

    fn expect(&mut self, want: &str) {
        let line = self.line();
        assert_eq!(line, want, "node-redisson peer");
    }

    /// Sends one command and returns its answer.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    /// The hash field node-redisson holds the lock under.
    fn holder_id(&mut self) -> String {
        let line = self.ask("id");
        line.strip_prefix("ID ")
            .unwrap_or_else(|| panic!("{line}"))
            .to_owned()
    }
}

impl Drop for NodePeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A thread that hands over `from`'s lines; it ends with the stream.
fn reader(from: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Subscribers of the lock's unlock channel (a waiting redguard is one).
fn subscribers(server: &RedisServer, name: &str) -> i64 {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let reply: Vec<(String, i64)> = server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
    reply.first().map_or(0, |(_, n)| *n)
}

/// node-redisson holds: redguard's `lock`/`try_lock` and `exec -n` wait
/// or are refused as busy (exit 75, not 65 "not a lock"), `status --json`
/// shows a lock with node's holder, and node's `unlock()` wakes a waiting
/// `exec --wait` and a waiting library call at once, through its unlock
/// message (the library waiter polls only every 60 s here).
#[test]
fn a_node_redisson_hold_excludes_redguard_and_its_release_wakes_waiters() {
    let ctx = TestContext::new();
    let name = unique_name("node-held");
    let Some(mut node) = NodePeer::start(&ctx.server, &name) else {
        return;
    };
    let holder = node.holder_id();
    assert_eq!(node.ask("lock"), "LOCKED");
    let stored: Vec<String> = ctx.server.cmd("HKEYS", &[name.as_bytes()]);
    assert_eq!(
        stored,
        std::slice::from_ref(&holder),
        "node-redisson's hash field"
    );

    let lock = ctx.client.lock(&name);
    assert!(lock.try_lock().unwrap().is_none(), "try_lock got in");
    assert!(
        lock.try_lock_for(ms(300)).unwrap().is_none(),
        "try_lock_for got in"
    );
    let info = lock.inspect().unwrap();
    assert_eq!(info.kind, LockKind::Reentrant);
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].0, holder.as_str());

    let url = ctx.server.url();
    let mut cmd = redguard(&url);
    cmd.args(["exec", "-n", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(75), "exec -n on node's hold: {out:?}");

    let mut cmd = redguard(&url);
    cmd.args(["status", "--json", &name]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["kind"], "reentrant", "{v}");
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["holders"][0]["id"], holder.as_str(), "{v}");
    assert_eq!(v["holders"][0]["count"], 1, "{v}");

    // Two waiters: the CLI, and a library call that polls only every 60 s
    // (node's lease is 30 s): only the unlock message wakes it promptly.
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--wait", "20s", &name, "--", "true"]);
    let mut exec = Proc::spawn(cmd);
    let slow = test_builder(&url)
        .poll_interval(Duration::from_secs(60))
        .build()
        .unwrap();
    let (woken_tx, woken) = mpsc::channel();
    let waiter = {
        let lock = slow.lock(&name);
        std::thread::spawn(move || {
            let guard = lock.try_lock_for(Duration::from_secs(25)).unwrap();
            let _ = woken_tx.send(Instant::now());
            guard.is_some()
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || subscribers(&ctx.server, &name)
            >= 2),
        "both waiters subscribe to the unlock channel: {}; exec's stderr:\n{}",
        subscribers(&ctx.server, &name),
        exec.stderr_so_far()
    );
    let unlocked = Instant::now();
    assert_eq!(node.ask("unlock"), "UNLOCKED");
    let out = exec.wait(Duration::from_secs(10));
    let exec_after = unlocked.elapsed();
    assert_eq!(out.code, Some(0), "{out:?}");
    let woken_at = woken
        .recv_timeout(Duration::from_secs(30))
        .expect("the library waiter got nothing");
    assert!(waiter.join().unwrap(), "the library waiter got no lock");
    let lib_after = woken_at.saturating_duration_since(unlocked);
    eprintln!(
        "node-redisson's unlock woke exec --wait: ran and exited {exec_after:?} after it; \
         the library waiter {lib_after:?} after it"
    );
    assert!(exec_after < PROMPT, "exec --wait: {exec_after:?}");
    assert!(lib_after < PROMPT, "library waiter: {lib_after:?}");
    assert!(!ctx.server.exists(&name));
}

/// redguard holds (library and CLI): node-redisson's `tryLock` fails, and
/// succeeds once redguard released.
#[test]
fn a_redguard_hold_excludes_node_redisson_until_released() {
    let ctx = TestContext::new();
    let name = unique_name("rust-held");
    let Some(mut node) = NodePeer::start(&ctx.server, &name) else {
        return;
    };
    let guard = ctx.client.lock(&name).lock().unwrap();
    assert_eq!(node.ask("try"), "TRY false", "node got in beside redguard");
    guard.unlock().unwrap();
    assert_eq!(node.ask("try"), "TRY true", "node after redguard's release");
    assert_eq!(node.ask("unlock"), "UNLOCKED");

    // The CLI's hold, until CMD ends.
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let go = dir.path().join("go");
    let script = format!(
        "touch {s}; for i in $(seq 1 200); do [ -e {g} ] && exit 0; sleep 0.05; done; exit 3",
        s = started.display(),
        g = go.display()
    );
    let mut cmd = redguard(&ctx.server.url());
    cmd.args(["exec", &name, "--", "sh", "-c", &script]);
    let mut exec = Proc::spawn(cmd);
    assert!(
        wait_until(Duration::from_secs(10), || started.exists()),
        "CMD did not start: {}",
        exec.stderr_so_far()
    );
    assert_eq!(node.ask("try"), "TRY false", "node got in beside exec");
    std::fs::write(&go, b"").unwrap();
    let out = exec.wait(Duration::from_secs(15));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(node.ask("try"), "TRY true", "node after exec ended");
    assert_eq!(node.ask("unlock"), "UNLOCKED");
}
