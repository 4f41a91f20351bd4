//! `redguard once` keeps its last attempt whatever its end (failed,
//! stopped by a signal, abandoned by a runner killed with -9, timed out),
//! and `--timeout` ends a hung CMD (`once` and `exec`) with 124.

use super::*;

fn status_json(url: &str, key: &str) -> serde_json::Value {
    let mut cmd = redguard(url);
    cmd.args(["once", "--status", "--json", key]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn host() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The nightly-export incident: three hosts run the cron line and the
/// export fails with 3. Each runs it (a failure does not block the next),
/// and `once --status` names the last run's host, pid, exit status, start
/// and duration, as state `failed`; so does `status KEY`.
#[test]
fn a_failed_run_is_kept_with_its_host_pid_exit_start_and_duration() {
    let server = RedisServer::start();
    let url = server.url();
    let key = unique_name("nightly-export");
    let mut last_pid = 0;
    let before = unix_ms_now();
    for _ in 0..3 {
        let mut cmd = redguard(&url);
        cmd.args([
            "once",
            "-q",
            "--ttl",
            "20h",
            &key,
            "--",
            "sh",
            "-c",
            "sleep 0.3; exit 3",
        ]);
        let mut proc = Proc::spawn(cmd);
        last_pid = proc.pid();
        let out = proc.wait(RUN_TIMEOUT);
        assert_eq!(out.code, Some(3), "each host runs it again: {out:?}");
    }
    let after = unix_ms_now();

    let v = status_json(&url, &key);
    assert_eq!(v["state"], "failed", "{v}");
    let a = &v["last_attempt"];
    assert_eq!(a["state"], "failed", "{v}");
    assert_eq!(a["exit_status"], 3, "{v}");
    assert_eq!(a["signal"], serde_json::Value::Null, "{v}");
    assert_eq!(a["pid"], last_pid, "the last runner's pid: {v}");
    assert_eq!(a["host"], host().as_str(), "{v}");
    let started = a["started_at_unix_ms"].as_u64().unwrap();
    let ended = a["ended_at_unix_ms"].as_u64().unwrap();
    assert!(started + 1000 >= before && ended <= after + 1000, "{v}");
    let took = a["duration_ms"].as_u64().unwrap();
    assert_eq!(took, ended - started, "{v}");
    assert!((300..5_000).contains(&took), "CMD slept 300 ms: {v}");

    let mut cmd = redguard(&url);
    cmd.args(["once", "--status", &key]);
    let out = run(cmd);
    for part in [
        "last attempt failed".to_owned(),
        format!("pid {last_pid}"),
        format!("on {} ", host()),
        "exit status 3".to_owned(),
        "started at ".to_owned(),
        ", ran ".to_owned(),
    ] {
        assert!(out.stdout.contains(&part), "{part:?} in {}", out.stdout);
    }

    let mut cmd = redguard(&url);
    cmd.args(["status", "--json", &key]);
    let out = run(cmd);
    let s: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(s["kind"], "once", "{s}");
    assert_eq!(s["state"], "failed", "{s}");
    assert_eq!(s["last_attempt"]["pid"], last_pid, "{s}");

    // With --record-failure the failure is the record (state done, the
    // next caller exits 3 without running), and the attempt stays failed.
    let key = unique_name("nightly-recorded");
    let mut cmd = redguard(&url);
    cmd.args([
        "once",
        "-q",
        "--record-failure",
        "--ttl",
        "30d",
        &key,
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(run(cmd).code, Some(3));
    let v = status_json(&url, &key);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["last_attempt"]["state"], "failed", "{v}");
    assert_eq!(v["last_attempt"]["exit_status"], 3, "{v}");
    // The record is kept 30 days; the failed attempt at most 7.
    let week_ms: i64 = 7 * 86_400_000;
    let attempt_key = format!("redguard_once_attempt:{{{key}}}");
    let kept: i64 = server.cmd("PTTL", &[attempt_key.as_bytes()]);
    assert!(
        (week_ms - 60_000..=week_ms).contains(&kept),
        "attempt pttl {kept}"
    );
    let record: i64 = server.cmd("PTTL", &[key.as_bytes()]);
    assert!(record > 29 * 86_400_000, "record pttl {record}");
}

/// A run ended by SIGTERM (143) is kept as failed with the signal; a
/// runner killed with -9 leaves a `running` attempt whose claim runs out,
/// shown as `abandoned`; and the next caller runs.
#[test]
fn a_signalled_run_is_failed_and_a_killed_runner_is_abandoned() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();

    let key = unique_name("once-term");
    let pid_file = dir.path().join("term.pid");
    let mut cmd = redguard(&url);
    cmd.args(["once", &key, "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 30", path_str(&pid_file)));
    let mut proc = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&pid_file));
    proc.signal(libc::SIGTERM);
    let out = proc.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(143), "{out:?}");
    let v = status_json(&url, &key);
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["last_attempt"]["exit_status"], 143, "{v}");
    assert_eq!(v["last_attempt"]["signal"], libc::SIGTERM, "{v}");

    let key = unique_name("once-kill9");
    let pid_file = dir.path().join("kill9.pid");
    let mut cmd = redguard_short(&url);
    cmd.args(["once", &key, "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 30", path_str(&pid_file)));
    let mut proc = Proc::spawn(cmd);
    let runner = proc.pid();
    let _cmd = KillOnDrop(read_pid(&pid_file));
    let v = status_json(&url, &key);
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(v["last_attempt"]["state"], "running", "{v}");
    proc.signal(libc::SIGKILL);
    assert_eq!(proc.wait(RUN_TIMEOUT).code, None, "killed");
    let mut v = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(5), || {
            v = status_json(&url, &key);
            v["state"] == "abandoned"
        }),
        "the claim of a killed runner runs out within its 600 ms lease: {v}"
    );
    assert_eq!(v["last_attempt"]["state"], "abandoned", "{v}");
    assert_eq!(v["last_attempt"]["pid"], runner, "{v}");
    assert_eq!(
        v["last_attempt"]["ended_at_unix_ms"],
        serde_json::Value::Null,
        "{v}"
    );
    let mut cmd = redguard(&url);
    cmd.args(["once", "--status", &key]);
    let out = run(cmd);
    assert!(
        out.stdout.contains("last attempt abandoned"),
        "{}",
        out.stdout
    );

    let mut cmd = redguard(&url);
    cmd.args(["once", &key, "--", "true"]);
    assert_eq!(run(cmd).code, Some(0), "the next caller runs");
    assert_eq!(status_json(&url, &key)["last_attempt"]["state"], "done");
}

/// `once --timeout 2s` ends a hung CMD with 124, soon after 2 s, kept as
/// `timed_out`, and the next caller runs; `exec --timeout` ends a CMD that
/// ignores SIGTERM with SIGKILL after the kill grace, and releases the lock.
#[test]
fn timeout_ends_a_hung_run_with_124_and_the_next_caller_runs() {
    let server = RedisServer::start();
    let url = server.url();
    let key = unique_name("once-hung");
    let dir = scratch();
    let marker = dir.path().join("term");
    let mut cmd = redguard(&url);
    cmd.args(["once", "-q", "--timeout", "2s", &key, "--", "sh", "-c"])
        .arg(format!(
            "trap 'echo term > {}; exit 9' TERM; sleep 60 & wait",
            path_str(&marker)
        ));
    let out = run(cmd);
    assert_eq!(out.code, Some(124), "{out:?}");
    assert_eq!(
        fs::read_to_string(&marker).unwrap_or_default().trim(),
        "term",
        "SIGTERM first"
    );
    assert!(
        out.elapsed >= Duration::from_secs(2) && out.elapsed < Duration::from_secs(6),
        "stopped at its timeout: {:?}",
        out.elapsed
    );
    let v = status_json(&url, &key);
    assert_eq!(v["state"], "timed_out", "{v}");
    assert_eq!(v["last_attempt"]["exit_status"], 124, "{v}");
    let took = v["last_attempt"]["duration_ms"].as_u64().unwrap();
    assert!((2_000..6_000).contains(&took), "{v}");

    let mut cmd = redguard(&url);
    cmd.args(["once", "-q", "--timeout", "2s", &key, "--", "true"]);
    assert_eq!(run(cmd).code, Some(0), "the next caller runs");
    let v = status_json(&url, &key);
    assert_eq!(v["state"], "done", "{v}");
    assert!(v["started_at_unix_ms"].as_u64().unwrap() <= v["ran_at_unix_ms"].as_u64().unwrap());
    assert!(v["duration_ms"].as_u64().is_some(), "{v}");

    let lock = unique_name("exec-hung");
    let mut cmd = redguard(&url);
    cmd.args([
        "exec",
        "--timeout",
        "1s",
        "--kill-grace",
        "500ms",
        &lock,
        "--",
        "sh",
        "-c",
    ])
    .arg("trap '' TERM; sleep 60 & wait; sleep 60");
    let out = run(cmd);
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(
        out.elapsed >= Duration::from_millis(1_400) && out.elapsed < Duration::from_secs(5),
        "SIGKILL after the grace: {:?}",
        out.elapsed
    );
    assert!(out.stderr.contains("--timeout"), "{}", out.stderr);
    let mut cmd = redguard(&url);
    cmd.args(["status", &lock]);
    assert_eq!(run(cmd).code, Some(1), "released");
}
