//! `redguard status` (and `unlock` on what it shows) on every kind of key.
use super::*;

#[test]
fn status_and_unlock_on_held_free_and_wrong_type_keys() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("status");
    // Exit 0 held, 1 free, 65 not a lock.
    let status = |json: bool, want: i32| {
        let mut cmd = redguard(&url);
        cmd.args(["status", &name]);
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(want), "{out:?}");
        out.stdout
    };
    let unlock = || {
        let mut cmd = redguard(&url);
        cmd.args(["unlock", "--force", &name]);
        run(cmd)
    };

    // Free.
    assert!(status(false, 1).contains("free"));
    let v: serde_json::Value = serde_json::from_str(&status(true, 1)).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["kind"], "free");
    assert!(v["expires_in_ms"].is_null());
    assert!(v["expires_at_unix_ms"].is_null());
    let out = unlock();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("was free"), "{}", out.stdout);

    // Held (twice, reentrant) by a library client.
    let lock = ctx.client.lock(&name);
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    let holder = g1.holder_id().as_str().to_owned();
    let text = status(false, 0);
    assert!(text.contains("held (reentrant lock)"), "{text}");
    assert!(text.contains(&format!("{holder} (hold count 2)")), "{text}");
    let before = unix_ms_now();
    let v: serde_json::Value = serde_json::from_str(&status(true, 0)).unwrap();
    let after = unix_ms_now();
    assert_eq!(v["held"], true);
    assert_eq!(v["kind"], "reentrant");
    assert_eq!(v["holders"][0]["id"], holder.as_str());
    assert_eq!(v["holders"][0]["count"], 2);
    let lease = crate::support::TEST_WATCHDOG.as_millis() as u64;
    let ttl = v["expires_in_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= lease, "ttl {ttl}");
    // The absolute time is now + ttl, by this host's clock.
    let at = v["expires_at_unix_ms"].as_u64().unwrap();
    assert!(
        at > before && at <= after + lease,
        "expires at {at}, read between {before} and {after}"
    );

    drop(g2);
    drop(g1);
    assert!(status(false, 1).contains("free"));

    // unlock --force removes a lock and wakes its waiters at once. The
    // holder's fixed 30 s lease and the waiter's 5 s poll interval mean a
    // prompt wake-up can only come from the unlock message.
    let long = lock.with_lease(Duration::from_secs(30));
    let g = long.lock().unwrap();
    let slow_poller = test_builder(&url)
        .poll_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter_name = name.clone();
    let waiter = std::thread::spawn(move || {
        let lock = slow_poller.lock(&waiter_name);
        let got = lock.try_lock_for(Duration::from_secs(8)).unwrap();
        let _ = tx.send(Instant::now());
        got.is_some()
    });
    assert!(wait_until(Duration::from_secs(5), || waiters(
        &ctx.server,
        &name
    ) >= 1));
    let out = unlock();
    let unlocked = Instant::now();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("removed lock"), "{}", out.stdout);
    assert!(out.stdout.contains(&holder), "{}", out.stdout);
    let woke = rx.recv_timeout(Duration::from_secs(8)).unwrap();
    assert!(waiter.join().unwrap(), "the waiter acquired");
    assert!(
        woke.saturating_duration_since(unlocked) < Duration::from_secs(2),
        "waiter woke {:?} after the unlock",
        woke.saturating_duration_since(unlocked)
    );
    // The old guard's release cannot touch the waiter's lock (it already
    // let go when the waiter's thread ended; the key is gone).
    assert!(g.unlock().unwrap_err().is_not_held());
    let _: i64 = ctx.server.cmd("DEL", &[name.as_bytes()]);

    // Wrong type: reported, never touched.
    let () = ctx.server.cmd("RPUSH", &[name.as_bytes(), b"not a lock"]);
    let text = status(false, 65);
    assert!(
        text.contains("not a lock") && text.contains("list"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&status(true, 65)).unwrap();
    assert_eq!(v["kind"], "other");
    assert_eq!(v["redis_type"], "list");
    assert_eq!(v["held"], true);
    let out = unlock();
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("left untouched"), "{}", out.stderr);
    let value: Vec<String> = ctx.server.cmd("LRANGE", &[name.as_bytes(), b"0", b"-1"]);
    assert_eq!(value, ["not a lock"]);

    // exec on a wrong-type key: a clear error, CMD not run.
    let mut cmd = redguard(&url);
    cmd.args(["exec", "-n", &name, "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
}

#[test]
fn status_shows_fair_queues_and_read_write_modes() {
    let server = RedisServer::start();
    let url = server.url();
    let name = unique_name("kinds");
    let status_json = || {
        let mut cmd = redguard(&url);
        cmd.args(["status", "--json", &name]);
        let out = run(cmd);
        assert!(matches!(out.code, Some(0 | 1)), "{out:?}");
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    // Redisson's fair-lock layout, written by hand.
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let () = server.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa:1",
            b"1",
        ],
    );
    let () = server.cmd("PEXPIRE", &[name.as_bytes(), b"30000"]);
    let _: i64 = server.cmd(
        "RPUSH",
        &[
            queue.as_bytes(),
            b"bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb:2",
            b"cccccccc-cccc-4ccc-8ccc-cccccccccccc:3",
        ],
    );
    let _: i64 = server.cmd(
        "ZADD",
        &[
            timeouts.as_bytes(),
            b"4102444800000",
            b"bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb:2",
        ],
    );
    let v = status_json();
    assert_eq!(v["kind"], "fair", "{v}");
    assert_eq!(
        v["queue"][0]["id"],
        "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb:2"
    );
    assert_eq!(v["queue"][0]["deadline_unix_ms"], 4_102_444_800_000_u64);
    assert_eq!(
        v["queue"][1]["id"],
        "cccccccc-cccc-4ccc-8ccc-cccccccccccc:3"
    );
    assert!(v["queue"][1]["deadline_unix_ms"].is_null());
    let _: i64 = server.cmd(
        "DEL",
        &[name.as_bytes(), queue.as_bytes(), timeouts.as_bytes()],
    );

    // Redisson's read-write layout: mode field plus reader counts.
    let () = server.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"mode",
            b"read",
            b"eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee:1",
            b"2",
            b"eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee:2",
            b"1",
        ],
    );
    let v = status_json();
    assert_eq!(v["kind"], "read_write", "{v}");
    assert_eq!(v["mode"], "read");
    assert_eq!(v["holders"].as_array().unwrap().len(), 2);
    let mut cmd = redguard(&url);
    cmd.args(["status", &name]);
    let out = run(cmd);
    assert!(
        out.stdout.contains("read-write lock, read mode"),
        "{}",
        out.stdout
    );
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A finished `redguard once` run is shown as what it is (kind `once`,
/// nothing held, exit 1) with its record, and `once --status --json`
/// gives the same fields.
#[test]
fn status_shows_a_finished_once_run_as_a_record() {
    let server = RedisServer::start();
    let url = server.url();
    let key = unique_name("status-once");
    let mut cmd = redguard(&url);
    cmd.args(["once", "--ttl", "1h", &key, "--", "true"]);
    let before = unix_ms_now();
    assert_eq!(run(cmd).code, Some(0));

    let mut cmd = redguard(&url);
    cmd.args(["status", "--json", &key]);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "nothing is held: {out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["kind"], "once", "{v}");
    assert_eq!(v["held"], false, "{v}");
    assert_eq!(v["exit_status"], 0, "{v}");
    assert!(v["pid"].as_u64().is_some(), "{v}");
    assert!(v["host"].is_string(), "{v}");
    let ran = v["ran_at_unix_ms"].as_u64().unwrap();
    assert!(ran + 1000 >= before && ran <= unix_ms_now() + 1000, "{v}");
    let kept = v["expires_in_ms"].as_u64().unwrap();
    assert!(kept > 3_500_000 && kept <= 3_600_000, "{v}");

    let mut cmd = redguard(&url);
    cmd.args(["status", &key]);
    let out = run(cmd);
    assert!(
        out.stdout.starts_with(&format!("once \"{key}\": ran ")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("exit status 0"), "{}", out.stdout);

    let mut cmd = redguard(&url);
    cmd.args(["once", "--status", "--json", &key]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let o: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(o["key"], key.as_str(), "{o}");
    assert_eq!(o["state"], "done", "{o}");
    for field in ["ran_at_unix_ms", "by", "exit_status", "host", "pid"] {
        assert_eq!(o[field], v[field], "{field}: {o} vs {v}");
    }
    let mut cmd = redguard(&url);
    cmd.args(["once", "--status", "--json", "never-ran-here"]);
    let o: serde_json::Value = serde_json::from_str(&run(cmd).stdout).unwrap();
    assert_eq!(o["state"], "not_run", "{o}");
}

/// Names that are not UTF-8 are escaped reversibly in text and JSON: two
/// names that differ only where UTF-8 breaks print differently.
#[test]
fn binary_names_are_escaped_reversibly() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let server = RedisServer::start();
    let url = server.url();
    let raw: &[u8] = b"bin\xff\\x";
    let () = server.cmd(
        "HSET",
        &[raw, b"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa:1", b"1"],
    );
    let lossy: &[u8] = "bin\u{fffd}\\x".as_bytes();
    let () = server.cmd(
        "HSET",
        &[lossy, b"bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb:2", b"1"],
    );
    let status = |name: &[u8], json: bool| {
        let mut cmd = redguard(&url);
        cmd.arg("status").arg(OsStr::from_bytes(name));
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout
    };
    let v: serde_json::Value = serde_json::from_str(&status(raw, true)).unwrap();
    assert_eq!(v["name"], "bin\\xff\\\\x", "{v}");
    assert_eq!(
        v["holders"][0]["id"], "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa:1",
        "{v}"
    );
    let w: serde_json::Value = serde_json::from_str(&status(lossy, true)).unwrap();
    assert_ne!(v["name"], w["name"]);
    let text = status(raw, false);
    assert!(text.starts_with("lock \"bin\\xff\\\\x\": held"), "{text}");
}

/// Item 13a of issue 44: a hold count past the bound (10,000) makes a
/// hash no lock's, whether it was a live `exec`'s hold overwritten by hand
/// (`HSET NAME <its holder id> 99999999999999999999`) or a hash redguard
/// never wrote. `status` says "not a lock" with exit 65 (never "not
/// held"), `list --all` lists it as "not a lock" (plain `list` leaves it
/// out as an application's hash, never as a free or held lock),
/// `unlock --force` refuses it with 65 and leaves it as it was; the
/// `exec` whose hold it was exits 74 after CMD, saying the key is no lock
/// (not "held by another holder").
#[test]
fn a_hold_count_past_the_bound_is_not_a_lock_to_status_list_and_unlock() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let live = unique_name("count-past-bound-live");
    let never = unique_name("count-past-bound-never");
    const COUNT: &[u8] = b"99999999999999999999";
    let dir = scratch();
    let stop = dir.path().join("stop");
    let mut exec = redguard(&url);
    exec.args(["exec", &live, "--", "sh", "-c"]).arg(format!(
        "while [ ! -e {} ]; do sleep 0.05; done",
        stop.display()
    ));
    let mut holder = Proc::spawn(exec);
    let mut field = Vec::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let fields: Vec<Vec<u8>> = ctx.server.cmd("HKEYS", &[live.as_bytes()]);
            fields.into_iter().next().map(|f| field = f).is_some()
        }),
        "exec never took the lock: {}",
        holder.stderr_so_far()
    );
    let _: i64 = ctx.server.cmd("HSET", &[live.as_bytes(), &field, COUNT]);
    let _: i64 = ctx.server.cmd(
        "HSET",
        &[
            never.as_bytes(),
            b"0b8f8a1c-1111-4222-8333-444455556666:1",
            COUNT,
        ],
    );
    let cli = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.args(args);
        let out = run(cmd);
        let said = format!("{}{}", out.stdout, out.stderr);
        for wrong in [
            "not held",
            "no holder",
            "free",
            "reentrant",
            "another holder",
        ] {
            assert!(!said.contains(wrong), "{args:?} says {wrong:?}: {out:?}");
        }
        out
    };
    for name in [live.as_str(), never.as_str()] {
        let out = cli(&["status", name]);
        assert_eq!(out.code, Some(65), "{out:?}");
        assert!(
            out.stdout
                .contains("not a lock: the key holds a hash whose fields are not a lock's"),
            "{out:?}"
        );
        let out = cli(&["status", "--json", name]);
        assert_eq!(out.code, Some(65), "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(
            (&v["kind"], &v["redis_type"]),
            (&"other".into(), &"hash".into())
        );

        let out = cli(&["list", name]);
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(!out.stdout.contains(name), "{out:?}");
        let out = cli(&["list", "--all", name]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let line = format!("\"{name}\": not a lock (hash of other fields than a lock's");
        assert!(out.stdout.contains(&line), "{out:?}");
        let out = cli(&["list", "--all", "--json", name]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v[0]["kind"], "other", "{v}");

        let out = cli(&["unlock", "--force", name]);
        assert_eq!(out.code, Some(65), "{out:?}");
        assert!(
            out.stderr.contains("is not a lock") && out.stderr.contains("left untouched"),
            "{out:?}"
        );
        let count: Vec<Vec<u8>> = ctx.server.cmd("HVALS", &[name.as_bytes()]);
        assert_eq!(count, [COUNT.to_vec()], "{name} was changed");
    }

    fs::write(&stop, "").unwrap();
    let out = holder.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(74), "{out:?}");
    assert!(
        out.stderr.contains("its key is there but is not a lock")
            && !out.stderr.contains("another holder"),
        "{out:?}"
    );
}
