//! `redguard unlock --force` wakes whoever waits.
use super::*;

#[test]
fn unlock_force_on_a_fair_lock_wakes_the_queue_head() {
    let server = RedisServer::start();
    let name = unique_name("unlock-fair");
    let slow = || {
        crate::support::test_builder(&server.url())
            .watchdog_timeout(Duration::from_secs(30))
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let holder = slow();
    let held = holder.fair_lock(&name);
    let guard = held.lock().unwrap();
    let waiter_client = slow();
    let waiter = std::thread::spawn(move || {
        let lock = waiter_client.fair_lock(&name);
        let t0 = std::time::Instant::now();
        let got = lock
            .try_lock_for(Duration::from_secs(10))
            .unwrap()
            .is_some();
        (got, t0)
    });
    assert!(wait_until(Duration::from_secs(5), || matches!(
        held.inspect().unwrap().kind,
        redguard::LockKind::Fair { queue } if queue.len() == 1
    )));
    let mut cmd = redguard(&server.url());
    cmd.args([
        "unlock",
        "--force",
        std::str::from_utf8(held.name()).unwrap(),
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let released = std::time::Instant::now();
    let (got, _) = waiter.join().unwrap();
    assert!(got);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{:?}",
        released.elapsed()
    );
    // The old holder's release finds its hold gone.
    assert!(guard.unlock().unwrap_err().is_not_held());
}

/// `unlock --force` for every kind. A name that is no lock hash needs
/// `--kind` (65 names the kind, nothing is touched); `--kind semaphore`
/// resets a semaphore whose count is wrong (its holder loses the permit,
/// the next `exec --permits` sets a new count); `--kind latch` wakes the
/// latch's waiters; `--kind once` lets the next caller run; a kind that
/// does not match what is stored is refused.
#[test]
fn unlock_force_deletes_every_kind_when_named() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let unlock = |name: &str, kind: Option<&str>| {
        let mut cmd = redguard(&url);
        cmd.args(["unlock", "--force", name]);
        if let Some(kind) = kind {
            cmd.args(["--kind", kind]);
        }
        run(cmd)
    };

    // Semaphore: set to 2 with a permit held; `--permits 3` is refused.
    let sem = unique_name("unlock-sem");
    let semaphore = ctx.client.expiring_semaphore(&sem);
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.acquire().unwrap();
    let exec3 = || {
        let mut cmd = redguard(&url);
        cmd.args(["exec", "--permits", "3", "-n", &sem, "--", "true"]);
        run(cmd)
    };
    assert_eq!(exec3().code, Some(65));
    let out = unlock(&sem, None);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("--kind semaphore"), "{}", out.stderr);
    assert!(ctx.server.exists(&sem), "left untouched");
    let out = unlock(&sem, Some("semaphore"));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("removed semaphore"), "{}", out.stdout);
    assert!(!ctx.server.exists(&sem));
    assert!(!ctx.server.exists(format!("{{{sem}}}:timeout")));
    assert!(wait_until(crate::support::TEST_WATCHDOG * 2, || permit.is_lost()));
    let out = exec3();
    assert_eq!(out.code, Some(0), "a new count after the reset: {out:?}");
    assert_eq!(semaphore.permits().unwrap(), 3);
    drop(permit);

    // Latch: a waiter is woken at once and finds it open.
    let latch = unique_name("unlock-latch");
    assert!(
        ctx.client
            .count_down_latch(&latch)
            .try_set_count(2)
            .unwrap()
    );
    let waiter_client = test_builder(&url)
        .poll_interval(Duration::from_secs(30))
        .build()
        .unwrap();
    let waiter_name = latch.clone();
    let waiter = std::thread::spawn(move || {
        let opened = waiter_client
            .count_down_latch(&waiter_name)
            .wait_for(Duration::from_secs(20))
            .unwrap();
        (opened, Instant::now())
    });
    let channel = format!("redisson_countdownlatch__channel__{{{latch}}}");
    assert!(wait_until(Duration::from_secs(5), || {
        let reply: Vec<(String, i64)> = ctx
            .server
            .cmd("PUBSUB", &[b"NUMSUB".as_slice(), channel.as_bytes()]);
        reply.first().is_some_and(|(_, n)| *n >= 1)
    }));
    assert_eq!(unlock(&latch, None).code, Some(65));
    let out = unlock(&latch, Some("latch"));
    let removed = Instant::now();
    assert_eq!(out.code, Some(0), "{out:?}");
    let (opened, at) = waiter.join().unwrap();
    assert!(opened);
    assert!(
        at.saturating_duration_since(removed) < Duration::from_secs(2),
        "the waiter woke {:?} after the reset",
        at.saturating_duration_since(removed)
    );

    // A `once` record: the next caller runs CMD again.
    let key = unique_name("unlock-once");
    let dir = scratch();
    let marker = dir.path().join("ran");
    let once = || {
        let mut cmd = redguard(&url);
        cmd.args(["once", &key, "--", "touch", path_str(&marker)]);
        run(cmd)
    };
    assert_eq!(once().code, Some(0));
    fs::remove_file(&marker).unwrap();
    assert_eq!(once().code, Some(0));
    assert!(!marker.exists(), "recorded: not run again");
    let out = unlock(&key, None);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(out.stderr.contains("--kind once"), "{}", out.stderr);
    let out = unlock(&key, Some("once"));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(once().code, Some(0));
    assert!(marker.exists(), "run again after the reset");

    // A kind that does not match what is stored: refused, untouched.
    let lock = unique_name("unlock-lock");
    let guard = ctx.client.lock(&lock).lock().unwrap();
    for kind in ["semaphore", "latch"] {
        let out = unlock(&lock, Some(kind));
        assert_eq!(out.code, Some(65), "{kind}: {out:?}");
        assert_one_line_error(&out);
    }
    guard.check().unwrap();
}

/// `unlock --force` while `exec` runs CMD (a 30 s lease: its renewals,
/// every 10 s, are not what tells it): the holder hears the unlock message
/// and CMD gets SIGTERM within 100 ms of the unlock's end; CMD, which ends
/// on SIGTERM, is gone within the kill grace, and `exec` exits 70. The
/// unlock names the removed holder's host, pid and program, and warns that
/// its command is being stopped.
#[test]
fn unlock_force_stops_the_running_holders_command_at_once() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("unlock-stops");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let dir = scratch();
    let (term, ready) = (dir.path().join("term"), dir.path().join("ready"));
    // `wait` on a background sleep returns at once on a trapped signal.
    let script = format!(
        "trap 'date +%s%N > {}; exit 0' TERM; : > {}; sleep 30 & wait $!",
        term.display(),
        ready.display()
    );
    let mut exec = redguard_timed(&url, "30s", "1s");
    exec.args([
        "exec",
        &name,
        "--kill-grace",
        "3s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let mut holder = Proc::spawn(exec);
    let listening = || {
        let (_, n): (String, i64) = ctx.server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
        n >= 1
    };
    assert!(
        wait_until(Duration::from_secs(10), || ready.exists() && listening()),
        "CMD never ran under a listening holder"
    );
    let before = std::time::SystemTime::now();
    let mut unlock = redguard(&url);
    unlock.args(["unlock", "--force", &name]);
    let out = run(unlock);
    let after = std::time::SystemTime::now();
    assert_eq!(out.code, Some(0), "{out:?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let want = format!("host {host}, pid {}, program \"redguard exec", holder.pid());
    assert!(out.stdout.contains("removed holder "), "{out:?}");
    assert!(out.stdout.contains(&want), "{want}\n{out:?}");
    assert!(
        out.stderr.contains("may still be running") && out.stderr.contains("stops its command"),
        "{out:?}"
    );
    let termed = || {
        std::fs::read_to_string(&term)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    assert!(
        wait_until(Duration::from_secs(5), || termed().is_some()),
        "CMD got no SIGTERM within 5 s"
    );
    let at = std::time::UNIX_EPOCH + Duration::from_nanos(termed().unwrap());
    assert!(
        at >= before,
        "SIGTERM before the unlock: {at:?} < {before:?}"
    );
    let late = at.duration_since(after).unwrap_or_default();
    assert!(
        late <= Duration::from_millis(100),
        "SIGTERM came {late:?} after the unlock ended"
    );
    let end = holder.wait(Duration::from_secs(3));
    assert_eq!(end.code, Some(70), "{end:?}");
}
