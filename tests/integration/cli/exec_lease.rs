//! Leases under a running `redguard exec`: a fixed lease run past, a
//! killed redguard (B1), Redis restarted empty (B4), slow Redis (C4),
//! `--on-lost warn`.
use super::*;

#[test]
fn a_fixed_lease_is_not_renewed_and_running_past_it_counts_as_lost() {
    let server = RedisServer::start();
    let name = unique_name("lease");
    let dir = scratch();
    let ready = dir.path().join("ready");
    // Within the lease: CMD's status, and the ttl only ever goes down.
    let body = format!("echo $$ > {}; sleep 0.6; exit 5", path_str(&ready));
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--lease", "5s", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    let first = server.pttl(&name);
    assert!(first > 0 && first <= 5_000, "pttl {first}");
    crate::support::sleep(ms(400));
    let later = server.pttl(&name);
    assert!(
        later > 0 && later <= first - 300,
        "renewed? {first} -> {later}"
    );
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(5), "{out:?}");
    assert!(!server.exists(&name));

    // Running past the lease: CMD is stopped before the lease ends (SIGTERM
    // a kill grace and a 250 ms margin before it), and redguard exits 70.
    let ready2 = dir.path().join("ready2");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&ready2));
    // A CMD that ends on SIGTERM ends the run then, not a grace later.
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", "--lease", "3s", "--kill-grace", "1s", &name])
        .args(["--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&ready2);
    let _cmd = KillOnDrop(cmd_pid);
    // The lease ends no earlier than `before_pttl + pttl`; CMD must be seen
    // gone before that instant. Seeing it is later than its end, so this
    // errs towards failing. (Checking that the key still exists instead
    // raced with redguard's own release once CMD had ended.)
    let before_pttl = Instant::now();
    let pttl = server.pttl(&name);
    assert!(pttl > 0 && pttl <= 3_000, "pttl {pttl}");
    let lease_ends_no_earlier_than = before_pttl + ms(pttl as u64);
    assert!(
        wait_until(Duration::from_secs(5), || !alive(cmd_pid)),
        "CMD outlived its fixed lease"
    );
    // SIGTERM went the kill grace and 250 ms (1.25 s) before the lease's
    // end, and CMD ends on it: seen gone at least half the kill grace
    // before, with 750 ms left for seeing it on a loaded machine.
    let seen_gone = Instant::now() + ms(500);
    assert!(
        seen_gone < lease_ends_no_earlier_than,
        "CMD was seen gone less than 500 ms before the lease's end ({:?} late)",
        seen_gone - lease_ends_no_earlier_than
    );
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("--lease 3s"), "{}", out.stderr);
    assert!(out.stderr.contains("before"), "{}", out.stderr);
    assert!(
        out.elapsed < ms(600),
        "redguard ended {:?} after CMD, not at once",
        out.elapsed
    );
}

/// The kill grace and a 250 ms margin must fit in half the lease, whether
/// it is fixed or the watchdog's: a usage error (64) before anything is
/// taken, naming the shortest lease that fits.
#[test]
fn a_lease_too_short_for_the_kill_grace_is_a_usage_error() {
    let server = RedisServer::start();
    let name = unique_name("short");
    for (args, shortest) in [
        (
            &["exec", "--lease", "500ms", "--kill-grace", "1s"][..],
            "2s 500ms",
        ),
        (&["exec", "--lease", "300ms"][..], "500ms"),
        (&["exec", "--kill-grace", "2s"][..], "4s 500ms"),
    ] {
        let mut cmd = redguard(&server.url());
        cmd.args(args).args([&name, "--", "true"]);
        let out = run(cmd);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
        assert!(out.stderr.contains("too short"), "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!("at least {shortest}")),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!server.exists(&name));
    }
    // At the bound it is accepted.
    let mut cmd = redguard(&server.url());
    cmd.args([
        "exec",
        "--lease",
        "1s",
        "--kill-grace",
        "250ms",
        &name,
        "--",
        "true",
    ]);
    assert_eq!(run(cmd).code, Some(0));
}

/// B1: `kill -9` of redguard. Nobody renews the lease any more: the key
/// frees itself within the (600 ms) lease, a waiter acquires only then, and
/// CMD is killed by its supervisor (see `exec_tree`).
#[test]
fn b1_sigkill_of_redguard_stops_renewal_and_the_lock_frees_within_the_lease() {
    let server = RedisServer::start();
    let name = unique_name("b1");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&pidfile));
    // The watchdog timeout through the environment this time.
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", server.url())
        .env("REDGUARD_WATCHDOG_TIMEOUT", "600ms")
        .args(["exec", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    // Renewed while redguard lives: the ttl stays up across 3 renewals.
    let watch_until = Instant::now() + ms(700);
    while Instant::now() < watch_until {
        let t = server.pttl(&name);
        assert!(t > 200, "renewed lease fell to {t} ms");
        crate::support::sleep(ms(20));
    }

    let ttl_at_kill = server.pttl(&name);
    p.signal(libc::SIGKILL);
    let killed = Instant::now();
    let _ = p.wait(RUN_TIMEOUT);

    let waiter = test_builder(&server.url()).build().unwrap();
    let lock = waiter.lock(&name);
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the lock frees itself");
    let took = killed.elapsed();
    let ttl_at_kill = ms(u64::try_from(ttl_at_kill).unwrap());
    assert!(
        took + ms(100) >= ttl_at_kill,
        "acquired after {took:?}, before the lease ({ttl_at_kill:?}) ran out"
    );
    assert!(
        took <= ttl_at_kill + ms(750),
        "acquired only after {took:?} (lease left at kill: {ttl_at_kill:?})"
    );
    drop(guard);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(cmd_pid)),
        "CMD outlived redguard"
    );
}

/// B4: Redis restarts empty under a running exec: the renewal answers 0,
/// CMD gets SIGTERM and redguard exits 70.
#[test]
fn b4_redis_restarted_empty_stops_cmd_and_exits_70() {
    let mut server = RedisServer::start();
    let name = unique_name("b4");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&pidfile));
    let mut cmd = redguard_short(&server.url());
    cmd.args([
        "exec",
        "--kill-grace",
        "50ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    assert!(server.exists(&name));

    server.restart();
    let restarted = Instant::now();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
    // One renewal period (200 ms) plus reconnect, with a x3 margin; SIGTERM
    // ends `sleep` at once, so the grace is not used.
    assert!(
        restarted.elapsed() < ms(1_500),
        "noticed after {:?}",
        restarted.elapsed()
    );
    assert!(!alive(cmd_pid), "CMD stopped");
    assert!(!server.exists(&name), "nothing written back after the loss");
}

/// B4 with a CMD that ignores SIGTERM: SIGKILL follows after --kill-grace
/// (a 3 s lease, so that the grace fits in it).
#[test]
fn b4_cmd_ignoring_sigterm_is_killed_after_the_grace() {
    let mut server = RedisServer::start();
    let name = unique_name("b4-grace");
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!(
        "trap '' TERM; echo $$ > {}; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        path_str(&pidfile)
    );
    let mut cmd = redguard(&server.url());
    cmd.args([
        "exec",
        "--kill-grace",
        "700ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    let _cmd = KillOnDrop(cmd_pid);
    server.restart();
    let restarted = Instant::now();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    let took = restarted.elapsed();
    assert!(took >= ms(700), "SIGKILL before the grace: {took:?}");
    // A renewal period (1 s), the grace, with room for a loaded host.
    assert!(took < ms(3_500), "took {took:?}");
    assert!(!alive(cmd_pid));
}

#[test]
fn on_lost_warn_lets_cmd_finish_with_its_own_status() {
    let mut server = RedisServer::start();
    let name = unique_name("warn");
    let dir = scratch();
    let ready = dir.path().join("ready");
    let body = format!("echo $$ > {}; sleep 1.2; exit 3", path_str(&ready));
    let mut cmd = redguard_short(&server.url());
    cmd.args(["exec", "--on-lost", "warn", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    server.restart();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(out.stderr.contains("warning"), "{}", out.stderr);
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
}

/// C4: a Redis pause shorter than half the lease is ridden out by the
/// watchdog (no loss, CMD's own status); a freeze longer than the lease is
/// reported (exit 70) even while Redis stays silent.
#[test]
fn c4_slow_redis_keeps_the_lock_and_a_freeze_past_the_lease_is_reported() {
    let server = RedisServer::start();
    let name = unique_name("c4");
    let dir = scratch();
    let ready = dir.path().join("ready");
    // Catalogue timings: 1.5 s lease, 250 ms response timeout.
    let body = format!("echo $$ > {}; sleep 1.5; exit 4", path_str(&ready));
    let mut cmd = redguard_timed(&server.url(), "1500ms", "250ms");
    cmd.args(["exec", &name, "--", "sh", "-c", &body]);
    let mut p = Proc::spawn(cmd);
    let _cmd = KillOnDrop(read_pid(&ready));
    server.client_pause(500);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(
        out.code,
        Some(4),
        "a 500 ms pause must not lose the lock: {out:?}"
    );
    assert_eq!(out.stderr, "");

    let ready2 = dir.path().join("ready2");
    let body = format!("echo $$ > {}; exec sleep 30", path_str(&ready2));
    let mut cmd = redguard_short(&server.url());
    cmd.args([
        "exec",
        "--kill-grace",
        "50ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&ready2);
    let _cmd = KillOnDrop(cmd_pid);
    server.sigstop();
    let frozen = Instant::now();
    let out_or_none = {
        let mut exited = false;
        let ok = wait_until(Duration::from_secs(4), || {
            exited = p.has_exited();
            exited
        });
        ok.then(|| p.wait(RUN_TIMEOUT))
    };
    let took = frozen.elapsed();
    server.sigcont();
    let out = out_or_none.expect("a freeze past the lease must be reported");
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost the lease"), "{}", out.stderr);
    // Validity runs out on redguard's own clock: at most one lease after the
    // last renewal, without waiting for Redis.
    assert!(took < ms(2_000), "reported after {took:?}");
    assert!(!alive(cmd_pid));
}
