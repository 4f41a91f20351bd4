//! Waiting `exec`, `once`, `latch` and `exec --permits` through a Redis
//! outage (issue 32, section 4): waiters ride out what the holder rides
//! out (a restart of about 2 s, a 6 s freeze), give up only at their
//! deadline when Redis stays down (exit 69, naming the last failure), and
//! fail at once on what retrying cannot fix.
use super::*;

/// `sh -c` body of a critical section: appends `S <pid>`, holds 300 ms,
/// appends `E <pid>`.
fn section(log: &Path) -> String {
    format!(
        "echo \"S $$\" >> {log}; sleep 0.3; echo \"E $$\" >> {log}",
        log = path_str(log)
    )
}

/// Asserts that `log` holds `n` critical sections, none overlapping.
fn assert_no_overlap(log: &Path, n: usize) {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * n, "{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("S ").expect(&text);
        let end = pair[1].strip_prefix("E ").expect(&text);
        assert_eq!(start, end, "critical sections overlap:\n{text}");
    }
}

/// A restart of about 2 s (AOF: the lock survives) and a 6 s freeze
/// (`SIGSTOP`/`SIGCONT`) while a holder holds and two `exec --wait 1m`
/// wait: both still wait after the outage, and once the holder releases,
/// both run their command (exit 0), one after the other.
#[test]
fn two_waiting_execs_ride_out_a_restart_and_a_freeze() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let holder = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for outage in ["restart", "freeze"] {
        let name = unique_name(&format!("cli-ride-{outage}"));
        let guard = holder.lock(&name).lock().unwrap();
        let dir = scratch();
        let log = dir.path().join("log");
        let mut procs: Vec<Proc> = (0..2)
            .map(|_| {
                let mut cmd = redguard(&server.url());
                cmd.args([
                    "exec",
                    "--wait",
                    "1m",
                    &name,
                    "--",
                    "sh",
                    "-c",
                    &section(&log),
                ]);
                Proc::spawn(cmd)
            })
            .collect();
        assert!(
            wait_until(Duration::from_secs(10), || waiters(&server, &name) >= 2),
            "{outage}: the execs are not waiting"
        );
        let started = Instant::now();
        match outage {
            "restart" => {
                server.stop_keeping_data();
                crate::support::sleep(Duration::from_secs(2));
                server.start_keeping_data();
            }
            _ => {
                server.sigstop();
                crate::support::sleep(Duration::from_secs(6));
                server.sigcont();
            }
        }
        let down = started.elapsed();
        // Some time after the outage, both still wait: none gave up.
        assert!(
            !wait_until(ms(1_500), || procs.iter_mut().any(Proc::has_exited)),
            "{outage}: a waiting exec ended while the lock was held"
        );
        assert!(!log.exists(), "{outage}: CMD ran while the lock was held");
        guard
            .check()
            .unwrap_or_else(|e| panic!("{outage}: the holder lost the lock: {e:?}"));
        guard.unlock().unwrap();
        for p in &mut procs {
            let out = p.wait(Duration::from_secs(20));
            assert_eq!(out.code, Some(0), "{outage}: {out:?}");
        }
        eprintln!("{outage}: Redis away {down:?}; both waiters ran after it");
        assert_no_overlap(&log, 2);
        assert!(!server.exists(&name));
    }
}

/// With Redis down for the whole wait, `exec --wait 3s` keeps trying
/// until its deadline, not less, then exits 69 with one line naming the
/// last failure; CMD never runs. `exec --permits`, `once --wait` and
/// `latch --wait` the same, at 1 s.
#[test]
fn a_wait_with_redis_down_exits_69_at_its_deadline_naming_the_last_failure() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let name = unique_name("cli-down");
    let runs: Vec<(&str, Duration, Vec<&str>)> = vec![
        (
            "exec",
            Duration::from_secs(3),
            vec![
                "exec",
                "--wait",
                "3s",
                &name,
                "--",
                "touch",
                path_str(&marker),
            ],
        ),
        (
            "exec --permits",
            Duration::from_secs(1),
            vec![
                "exec",
                "--permits",
                "2",
                "--wait",
                "1s",
                &name,
                "--",
                "touch",
                path_str(&marker),
            ],
        ),
        (
            "once",
            Duration::from_secs(1),
            vec![
                "once",
                "--wait",
                "1s",
                &name,
                "--",
                "touch",
                path_str(&marker),
            ],
        ),
        (
            "latch",
            Duration::from_secs(1),
            vec!["latch", &name, "--wait", "1s"],
        ),
    ];
    for (what, wait, args) in runs {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = Proc::spawn(cmd).wait(RUN_TIMEOUT);
        eprintln!("{what}: {:?}: {}", out.elapsed, out.stderr.trim());
        assert_eq!(out.code, Some(69), "{what}: {out:?}");
        assert_one_line_error(&out);
        assert!(
            out.stderr.contains("refused") && out.stderr.contains("attempts"),
            "{what}: {}",
            out.stderr
        );
        assert!(
            out.elapsed >= wait,
            "{what}: gave up after {:?}",
            out.elapsed
        );
        assert!(
            out.elapsed < wait + Duration::from_secs(3),
            "{what}: ended after {:?}",
            out.elapsed
        );
        assert!(!marker.exists(), "{what}: CMD ran");
    }
}

/// What retrying cannot fix ends a long wait at once: a value of another
/// type at the name (65), an ACL user without `EVALSHA` (77).
#[test]
fn a_wait_ends_at_once_on_what_retrying_cannot_fix() {
    let server = RedisServer::start();
    let name = unique_name("cli-fail-fast");
    let () = server.cmd("SET", &[name.as_bytes(), b"a string"]);
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--wait", "1m", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(2), "{:?}", out.elapsed);
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"noeval",
            b"on",
            b">noeval-pw",
            b"~*",
            b"&*",
            b"+@all",
            b"-evalsha",
            b"-eval",
        ],
    );
    let free = unique_name("cli-fail-fast-acl");
    let url = format!("redis://noeval:noeval-pw@127.0.0.1:{}/", server.port());
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--wait", "1m", &free, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert!(out.stderr.contains("NOPERM"), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(2), "{:?}", out.elapsed);
}

/// `exec` without `--wait` waits as long as it takes, an outage included:
/// started while Redis is down, it is still trying 2 s later, and runs
/// CMD (exit 0) once Redis is back.
#[test]
fn exec_without_wait_started_during_an_outage_runs_once_redis_is_back() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let name = unique_name("cli-no-wait-given");
    let mut cmd = redguard(&url);
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let mut p = Proc::spawn(cmd);
    assert!(
        !wait_until(Duration::from_secs(2), || p.has_exited()),
        "exec gave up while Redis was down"
    );
    server.start_again();
    let back = Instant::now();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists(), "CMD did not run");
    // The backoff's longest pause (500 ms) plus a connect and a round trip.
    assert!(
        back.elapsed() < Duration::from_secs(3),
        "{:?}",
        back.elapsed()
    );
}
