//! The `redguard` binary with the synchronizers: `exec --read/--write`,
//! `exec --permits N` (the CLI case: four commands, two permits), `latch`,
//! and `status` on each kind. One server for the whole area; the cases run
//! in sequence on it.

use std::fs;
use std::time::{Duration, Instant};

use crate::cli::{Proc, redguard, run};
use crate::support::{TestContext, ms, unique_name, wait_until};

#[test]
fn cli_synchronizers_bed() {
    let ctx = TestContext::new();
    cli_four_execs_with_two_permits_take_two_rounds(&ctx);
    permit_count_mismatch_fair_and_busy_are_reported(&ctx);
    read_commands_share_and_write_commands_exclude(&ctx);
    latch_counts_waits_and_refuses_a_second_count(&ctx);
    latch_missing_is_refused_unless_allowed(&ctx);
    status_shows_each_kind(&ctx);
}

/// Four `exec --permits 2` running `sleep 1`: two rounds (about 2 s), and
/// the log they write never shows more than two at once.
fn cli_four_execs_with_two_permits_take_two_rounds(ctx: &TestContext) {
    let url = ctx.server.url();
    let name = unique_name("cli-permits");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $(date +%s%N)\" >> {0}; sleep 1; echo \"end $(date +%s%N)\" >> {0}",
        log.display()
    );
    let started = Instant::now();
    let mut procs: Vec<Proc> = (0..4)
        .map(|_| {
            let mut cmd = redguard(&url);
            cmd.args(["exec", "--permits", "2", &name, "--", "sh", "-c", &script]);
            Proc::spawn(cmd)
        })
        .collect();
    for p in &mut procs {
        let out = p.wait(Duration::from_secs(15));
        assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    }
    let elapsed = started.elapsed();
    let text = fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .map(|line| {
            let (what, at) = line.split_once(' ').unwrap();
            (at.parse().unwrap(), if what == "start" { 1 } else { -1 })
        })
        .collect();
    // At equal times an end counts before a start.
    events.sort();
    let (mut running, mut most) = (0, 0);
    for (_, step) in &events {
        running += step;
        most = most.max(running);
    }
    eprintln!(
        "CLI: four `exec --permits 2 -- sleep 1` done in {elapsed:?}; at most {most} at once"
    );
    assert_eq!(events.len(), 8);
    assert_eq!(most, 2, "never more than 2 running, and 2 did run together");
    assert!(
        elapsed >= ms(1900) && elapsed < Duration::from_secs(5),
        "two rounds of 1 s: {elapsed:?}"
    );
    let available = ctx
        .client
        .expiring_semaphore(&name)
        .available_permits()
        .unwrap();
    assert_eq!(available, 2, "every permit given back");
}

fn permit_count_mismatch_fair_and_busy_are_reported(ctx: &TestContext) {
    let url = ctx.server.url();
    let name = unique_name("cli-mismatch");
    let sem = ctx.client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(2).unwrap());
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--permits", "3", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(65), "{}", out.stderr);
    assert!(
        out.stderr.contains("has 2 permits, not 3"),
        "{}",
        out.stderr
    );

    let mut cmd = redguard(&url);
    cmd.args(["exec", "--permits", "2", "--fair", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("--fair"), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);

    let a = sem.acquire().unwrap();
    let b = sem.acquire().unwrap();
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--permits", "2", "--no-wait", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    assert!(out.stderr.contains("all 2 permits"), "{}", out.stderr);
    drop((a, b));
    let mut cmd = redguard(&url);
    cmd.args([
        "exec",
        "--permits",
        "2",
        &name,
        "--",
        "sh",
        "-c",
        "test -n \"$REDGUARD_PERMIT\"",
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

fn read_commands_share_and_write_commands_exclude(ctx: &TestContext) {
    let url = ctx.server.url();
    let name = unique_name("cli-rw");
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let wait_for_go = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let mut reader = {
        let mut cmd = redguard(&url);
        cmd.args(["exec", "--read", &name, "--", "sh", "-c", &wait_for_go]);
        Proc::spawn(cmd)
    };
    let rw = ctx.client.read_write_lock(&name);
    assert!(wait_until(Duration::from_secs(10), || {
        rw.read().holders().map(|h| h.len()).unwrap_or(0) == 1
    }));
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--read", "--no-wait", &name, "--", "true"]);
    assert_eq!(run(cmd).code, Some(0), "a second reader runs");
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--write", "--no-wait", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(75), "the writer waits for the reader");
    let mut writer = {
        let mut cmd = redguard(&url);
        cmd.args(["exec", "--write", "--wait", "10s", &name, "--", "true"]);
        Proc::spawn(cmd)
    };
    fs::write(&go, b"").unwrap();
    assert_eq!(reader.wait(Duration::from_secs(10)).code, Some(0));
    assert_eq!(writer.wait(Duration::from_secs(10)).code, Some(0));
}

fn latch_counts_waits_and_refuses_a_second_count(ctx: &TestContext) {
    let url = ctx.server.url();
    let name = unique_name("cli-latch");
    let latch = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.arg("latch").arg(&name).args(args);
        cmd
    };
    let out = run(latch(&["--count", "2"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Set already: busy (75), like a lock that is held.
    let out = run(latch(&["--count", "3"]));
    assert_eq!(out.code, Some(75));
    assert!(
        out.stderr.contains("set already (count 2)"),
        "{}",
        out.stderr
    );
    let out = run(latch(&["--wait", "200ms"]));
    assert_eq!(out.code, Some(75));
    assert!(out.stderr.contains("still at 2"), "{}", out.stderr);
    let mut waiter = Proc::spawn(latch(&["--wait", "20s"]));
    // The waiter must be waiting (subscribed to the latch's channel) before
    // the latch opens: one that starts after the opening finds it deleted,
    // as missing as one never set (65), which is the documented behaviour.
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let numsub: (String, i64) = ctx.server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
            numsub.1 >= 1
        }),
        "the waiter never subscribed"
    );
    let out = run(latch(&["--count-down"]));
    assert_eq!(
        (out.code, out.stdout.trim()),
        (Some(0), format!("latch {name:?}: 1 left").as_str())
    );
    let opened = Instant::now();
    assert_eq!(run(latch(&["--count-down"])).code, Some(0));
    let out = waiter.wait(Duration::from_secs(10));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(opened.elapsed() < Duration::from_secs(5));
    // Open, so deleted: as missing as one never set.
    let out = run(latch(&["--wait"]));
    assert_eq!(out.code, Some(65), "open latch: {out:?}");
    let out = run(latch(&["--wait", "--allow-missing"]));
    assert_eq!(out.code, Some(0), "{out:?}");
}

/// A latch that does not exist: `--wait` fails at once (a waiter that
/// starts before the setter must not pass through), `--count-down` fails
/// and changes nothing; `--allow-missing` takes it as open.
fn latch_missing_is_refused_unless_allowed(ctx: &TestContext) {
    let url = ctx.server.url();
    let name = unique_name("cli-latch-missing");
    let latch = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.arg("latch").arg(&name).args(args);
        run(cmd)
    };
    let started = Instant::now();
    let out = latch(&["--wait", "20s"]);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "--wait on a missing latch took {:?}",
        started.elapsed()
    );
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    assert!(out.stderr.contains("--allow-missing"), "{}", out.stderr);
    let out = latch(&["--wait"]);
    assert_eq!(out.code, Some(65), "{out:?}");
    let out = latch(&["--count-down"]);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(!ctx.server.exists(&name), "nothing written");
    let out = latch(&["--count-down", "--allow-missing"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = latch(&["--wait", "1s", "--allow-missing"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!ctx.server.exists(&name), "nothing written");
}

fn status_shows_each_kind(ctx: &TestContext) {
    let url = ctx.server.url();
    // Exit 0 while something is held, 1 when nothing is.
    let status_code = |name: &str, json: bool, want: i32| {
        let mut cmd = redguard(&url);
        cmd.args(["status", name]);
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(want), "{name}: {out:?}");
        out.stdout
    };
    let status = |name: &str, json: bool| status_code(name, json, 0);
    let rw = unique_name("cli-status-rw");
    let lock = ctx.client.read_write_lock(&rw);
    let r = lock.read().lock().unwrap();
    let text = status(&rw, false);
    assert!(text.contains("read-write lock, read mode"), "{text}");
    assert!(text.contains(ctx.client.holder_id().as_str()), "{text}");
    drop(r);
    let w = lock.write().lock().unwrap();
    let text = status(&rw, false);
    assert!(
        text.contains("write mode") && text.contains(":write"),
        "{text}"
    );
    let mut cmd = redguard(&url);
    cmd.args(["unlock", "--force", &rw]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("read-write, write mode"),
        "{}",
        out.stdout
    );
    assert!(!lock.read().is_locked().unwrap());
    drop(w);

    let sem = unique_name("cli-status-sem");
    let s = ctx.client.expiring_semaphore(&sem);
    s.try_set_permits(3).unwrap();
    let p = s.acquire().unwrap();
    let text = status(&sem, false);
    assert!(text.contains("2 permit(s) available, 1 held"), "{text}");
    assert!(text.contains(&p.id().to_string()), "{text}");
    let json: serde_json::Value = serde_json::from_str(&status(&sem, true)).unwrap();
    assert_eq!(json["kind"], "expiring_semaphore");
    assert_eq!(json["held"], true);
    assert_eq!(json["available"], 2);
    assert_eq!(json["permits"][0]["id"], p.id().to_string());
    let left = json["permits"][0]["expires_in_ms"].as_u64().unwrap();
    assert!(
        left <= crate::support::TEST_WATCHDOG.as_millis() as u64,
        "{json}"
    );
    assert!(json["permits"][0]["expires_at_unix_ms"].as_u64().unwrap() > left);
    drop(p);

    let latch = unique_name("cli-status-latch");
    ctx.client
        .count_down_latch(&latch)
        .try_set_count(4)
        .unwrap();
    let text = status_code(&latch, false, 1);
    assert!(
        text.contains(": 4 (a semaphore's available permits, or a latch's count)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&status_code(&latch, true, 1)).unwrap();
    assert_eq!(
        (json["kind"].as_str(), json["value"].as_i64()),
        (Some("counter"), Some(4))
    );
}
