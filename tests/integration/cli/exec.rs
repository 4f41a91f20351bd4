//! `redguard exec`: runs CMD under the lock, passes its status through,
//! waits or gives up, takes fenced and fair locks.
use super::*;

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
    assert!(!server.exists(&name), "released after CMD ended");
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
    assert!(!server.exists(&name));
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
    assert!(!server.exists(&name));
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
    assert!(server.exists(&name), "held while CMD runs");
    p.signal(libc::SIGTERM);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(
        out.code,
        Some(0),
        "CMD's status after its TERM trap: {out:?}"
    );
    assert_eq!(fs::read_to_string(&got).unwrap().trim(), "term");
    assert!(!server.exists(&name), "released after CMD ended");
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
    assert!(!server.exists(&name));
    // --fair and --fenced do not go together.
    let mut both = redguard(&server.url());
    both.args(["exec", "--fair", "--fenced", &name, "--", "true"]);
    assert_eq!(run(both).code, Some(64));
}
