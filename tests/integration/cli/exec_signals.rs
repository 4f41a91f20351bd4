//! Issue 32, part 5: every way `redguard exec` can end gives back what it
//! holds. Each catchable signal whose default action ends a process, sent
//! to redguard while CMD runs or while it waits for the lock, and each
//! exit path (CMD's own status, 70, 75, an error), is followed by `status`
//! (the lock is free) and `who` (no holder record of redguard's client is
//! left; no `redguard:client:*` key at all).
use super::*;

/// The signals redguard catches and forwards, with their names (for the
/// messages). SIGTERM is the control case.
fn signals() -> Vec<(i32, &'static str)> {
    vec![
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
        (libc::SIGRTMIN(), "SIGRTMIN"),
        (libc::SIGRTMAX(), "SIGRTMAX"),
    ]
}

/// Every client holder record on the server (the tests' own clients keep
/// none).
fn client_records(server: &RedisServer) -> Vec<String> {
    server.cmd("KEYS", &[b"redguard:client:*"])
}

/// `status NAME` says free (exit 1), `who CLIENT` finds no record (exit 1)
/// when the client is known, and no holder record is left on the server.
fn assert_nothing_held(server: &RedisServer, name: &str, client: Option<&str>, case: &str) {
    let mut cmd = redguard(&server.url());
    cmd.args(["status", name]);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{case}: status: {out:?}");
    assert!(out.stdout.contains("free"), "{case}: {}", out.stdout);
    if let Some(client) = client {
        let mut cmd = redguard(&server.url());
        cmd.args(["who", client]);
        let out = run(cmd);
        assert_eq!(out.code, Some(1), "{case}: who {client}: {out:?}");
        assert!(out.stdout.contains("no record"), "{case}: {}", out.stdout);
    }
    let left = client_records(server);
    assert!(left.is_empty(), "{case}: holder records left: {left:?}");
}

/// The client id in a holder id (`<client uuid>:<thread id>`) CMD wrote.
fn client_of(file: &Path) -> String {
    let holder = fs::read_to_string(file).unwrap();
    let holder = holder.trim();
    holder
        .rsplit_once(':')
        .map_or(holder, |(c, _)| c)
        .to_owned()
}

/// A CMD that writes its holder id to `file`, then runs `tail`.
fn cmd_writing_holder(file: &Path, tail: &str) -> String {
    format!(
        "ulimit -c 0; echo \"$REDGUARD_HOLDER\" > {}.tmp && mv {0}.tmp {0}; {tail}",
        path_str(file)
    )
}

fn wait_for_file(file: &Path) {
    assert!(
        wait_until(Duration::from_secs(5), || file.exists()),
        "CMD did not start"
    );
}

#[test]
fn every_terminating_signal_while_cmd_runs_reaches_cmd_and_nothing_stays_held() {
    let server = RedisServer::start();
    let dir = scratch();
    for (signal, shown) in signals() {
        let name = unique_name(&format!("run-{shown}"));
        let file = dir.path().join(&name);
        let mut cmd = redguard(&server.url());
        cmd.args(["exec", &name, "--", "sh", "-c"])
            .arg(cmd_writing_holder(&file, "exec sleep 30"));
        let mut p = Proc::spawn(cmd);
        wait_for_file(&file);
        p.signal(signal);
        let out = p.wait(RUN_TIMEOUT);
        assert_eq!(out.code, Some(128 + signal), "{shown}: {out:?}");
        assert_nothing_held(&server, &name, Some(&client_of(&file)), shown);
    }

    // SIGPIPE is left ignored: redguard and CMD carry on.
    let name = unique_name("run-SIGPIPE");
    let file = dir.path().join(&name);
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "sh", "-c"])
        .arg(cmd_writing_holder(&file, "sleep 0.5; exit 4"));
    let mut p = Proc::spawn(cmd);
    wait_for_file(&file);
    p.signal(libc::SIGPIPE);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(4), "SIGPIPE: {out:?}");
    assert_nothing_held(&server, &name, Some(&client_of(&file)), "SIGPIPE");
}

#[test]
fn every_terminating_signal_while_waiting_ends_the_wait_and_nothing_stays_held() {
    let server = RedisServer::start();
    let holder = test_builder(&server.url())
        .holder_record(false)
        .build()
        .unwrap();
    let dir = scratch();
    for (signal, shown) in signals() {
        let name = unique_name(&format!("wait-{shown}"));
        let marker = dir.path().join(&name);
        let guard = holder.lock(&name).lock().unwrap();
        let mut cmd = redguard(&server.url());
        cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
        let mut p = Proc::spawn(cmd);
        assert!(
            wait_until(Duration::from_secs(5), || waiters(&server, &name) >= 1),
            "{shown}: redguard did not wait"
        );
        p.signal(signal);
        let out = p.wait(RUN_TIMEOUT);
        assert_eq!(out.code, Some(128 + signal), "{shown}: {out:?}");
        assert!(
            out.stderr.contains("while waiting"),
            "{shown}: {}",
            out.stderr
        );
        drop(guard);
        assert!(!marker.exists(), "{shown}: CMD ran");
        assert_nothing_held(&server, &name, None, shown);
    }

    // SIGPIPE: still waiting; CMD runs once the lock is free.
    let name = unique_name("wait-SIGPIPE");
    let marker = dir.path().join(&name);
    let guard = holder.lock(&name).lock().unwrap();
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let mut p = Proc::spawn(cmd);
    assert!(wait_until(Duration::from_secs(5), || waiters(
        &server, &name
    ) >= 1));
    p.signal(libc::SIGPIPE);
    crate::support::sleep(ms(100));
    drop(guard);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(0), "SIGPIPE: {out:?}");
    assert!(marker.exists());
    assert_nothing_held(&server, &name, None, "SIGPIPE");
}

#[test]
fn every_exit_path_releases_the_lock_and_deletes_the_holder_record() {
    let server = RedisServer::start();
    let dir = scratch();

    // CMD's own status, 0 and not.
    for status in [0, 3] {
        let name = unique_name(&format!("exit-{status}"));
        let file = dir.path().join(&name);
        let mut cmd = redguard(&server.url());
        cmd.args(["exec", &name, "--", "sh", "-c"])
            .arg(cmd_writing_holder(&file, &format!("exit {status}")));
        let out = run(cmd);
        assert_eq!(out.code, Some(status), "{out:?}");
        assert_nothing_held(&server, &name, Some(&client_of(&file)), "CMD's status");
    }

    // 70: the key deleted under a running CMD (the next renewal finds it
    // gone).
    let name = unique_name("exit-70");
    let file = dir.path().join(&name);
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "sh", "-c"])
        .arg(cmd_writing_holder(&file, "exec sleep 30"));
    let mut p = Proc::spawn(cmd);
    wait_for_file(&file);
    let _: i64 = server.cmd("DEL", &[name.as_bytes()]);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_nothing_held(&server, &name, Some(&client_of(&file)), "70");

    // 70 after CMD ended: the key deleted just before CMD exits, so the
    // release finds it gone; the message says CMD ran within the lease. A
    // 30 s lease puts the next renewal 10 s away: with a 3 s lease, one
    // came between the delete and CMD's exit on a loaded machine, and
    // found the lease lost while CMD ran.
    let name = unique_name("exit-70-after");
    let file = dir.path().join(&name);
    let go = dir.path().join(format!("{name}.go"));
    let tail = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; exit 6",
        path_str(&go)
    );
    let mut cmd = redguard_timed(&server.url(), "30s", "1s");
    cmd.args(["exec", &name, "--", "sh", "-c"])
        .arg(cmd_writing_holder(&file, &tail));
    let mut p = Proc::spawn(cmd);
    wait_for_file(&file);
    let _: i64 = server.cmd("DEL", &[name.as_bytes()]);
    fs::write(&go, "").unwrap();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr
            .contains("after CMD ended: CMD exited with 6 while the lease was valid"),
        "{}",
        out.stderr
    );
    assert_nothing_held(&server, &name, Some(&client_of(&file)), "70 after");

    // 75: held by another; --no-wait.
    let holder = test_builder(&server.url())
        .holder_record(false)
        .build()
        .unwrap();
    let name = unique_name("exit-75");
    let guard = holder.lock(&name).lock().unwrap();
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--no-wait", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(75), "{out:?}");
    drop(guard);
    assert_nothing_held(&server, &name, None, "75");

    // An error after connecting: NAME holds a string (not a lock).
    let name = unique_name("exit-error");
    let _: String = server.cmd("SET", &[name.as_bytes(), b"x"]);
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(65), "{out:?}");
    let _: i64 = server.cmd("DEL", &[name.as_bytes()]);
    assert_nothing_held(&server, &name, None, "error");
}
