//! `redguard status` (and `unlock` on what it shows) on every kind of key.
use super::*;

#[test]
fn status_and_unlock_on_held_free_and_wrong_type_keys() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("status");
    let status = |json: bool| {
        let mut cmd = redguard(&url);
        cmd.args(["status", &name]);
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout
    };
    let unlock = || {
        let mut cmd = redguard(&url);
        cmd.args(["unlock", "--force", &name]);
        run(cmd)
    };

    // Free.
    assert!(status(false).contains("free"));
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["kind"], "free");
    assert!(v["ttl_ms"].is_null());
    let out = unlock();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("was free"), "{}", out.stdout);

    // Held (twice, reentrant) by a library client.
    let lock = ctx.client.lock(&name);
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    let holder = g1.holder_id().as_str().to_owned();
    let text = status(false);
    assert!(text.contains("held (reentrant lock)"), "{text}");
    assert!(text.contains(&format!("{holder} (hold count 2)")), "{text}");
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["kind"], "reentrant");
    assert_eq!(v["holders"][0]["id"], holder.as_str());
    assert_eq!(v["holders"][0]["count"], 2);
    let ttl = v["ttl_ms"].as_u64().unwrap();
    assert!(
        ttl > 0 && ttl <= crate::support::TEST_WATCHDOG.as_millis() as u64,
        "ttl {ttl}"
    );

    drop(g2);
    drop(g1);
    assert!(status(false).contains("free"));

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
    let () = ctx.server.cmd("SET", &[name.as_bytes(), b"not a lock"]);
    let text = status(false);
    assert!(
        text.contains("not a lock") && text.contains("string"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(v["kind"], "other");
    assert_eq!(v["redis_type"], "string");
    assert_eq!(v["held"], true);
    let out = unlock();
    assert_eq!(out.code, Some(65), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("left untouched"), "{}", out.stderr);
    let value: String = ctx.server.cmd("GET", &[name.as_bytes()]);
    assert_eq!(value, "not a lock");

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
        assert_eq!(out.code, Some(0), "{out:?}");
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    // Redisson's fair-lock layout, written by hand.
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let () = server.cmd("HSET", &[name.as_bytes(), b"a:1", b"1"]);
    let () = server.cmd("PEXPIRE", &[name.as_bytes(), b"30000"]);
    let _: i64 = server.cmd("RPUSH", &[queue.as_bytes(), b"b:2", b"c:3"]);
    let _: i64 = server.cmd("ZADD", &[timeouts.as_bytes(), b"4102444800000", b"b:2"]);
    let v = status_json();
    assert_eq!(v["kind"], "fair", "{v}");
    assert_eq!(v["queue"][0]["id"], "b:2");
    assert_eq!(v["queue"][0]["deadline_ms"], 4_102_444_800_000_u64);
    assert_eq!(v["queue"][1]["id"], "c:3");
    assert!(v["queue"][1]["deadline_ms"].is_null());
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
            b"r:1",
            b"2",
            b"r:2",
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
