//! What `list` and `status` show of every kind and every waiter: the
//! render incident (`exec --permits 4`, two holders killed, two waiting),
//! waiters on three hosts and a fair queue in order, and `list` naming
//! each kind with its columns.
use super::*;

use serde_json::Value;

/// `redguard list --json PATTERN`, parsed.
fn list_json(url: &str, pattern: &str) -> Vec<Value> {
    let mut cmd = redguard(url);
    cmd.args(["list", "--json", pattern]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// `redguard list PATTERN` (text).
fn list_text(url: &str, pattern: &str) -> String {
    let mut cmd = redguard(url);
    cmd.args(["list", pattern]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    out.stdout
}

/// `redguard status [--json] NAME`'s output, whatever its exit status.
fn status(url: &str, name: &str, json: bool) -> String {
    let mut cmd = redguard(url);
    cmd.args(["status", name]);
    if json {
        cmd.arg("--json");
    }
    let out = run(cmd);
    assert!(matches!(out.code, Some(0 | 1)), "{out:?}");
    out.stdout
}

/// The entry of `name` in a `list --json` answer.
fn entry<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|e| e["name"] == name)
}

/// The render incident: `exec --permits 4 render`, four permits taken, two
/// holders killed (their permits keep their lease), two more callers
/// waiting. `list` shows the semaphore with its 4 permits, 2 of them with
/// a dead holder and time left, and its 2 waiters with their pids; `list
/// --json` says the same.
#[test]
fn list_shows_the_render_incident() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("render");
    let dir = scratch();
    // Records and permit leases of 20 s: the killed holders' permits and
    // records outlive the test's looks.
    let exec = |cmd_args: &[&str]| {
        let mut cmd = redguard_timed(&url, "20s", "1s");
        cmd.args(["exec", "--permits", "4", &name, "--"])
            .args(cmd_args);
        Proc::spawn(cmd)
    };
    let mut holders = Vec::new();
    let mut cmds = Vec::new();
    for i in 0..4 {
        let pid_file = dir.path().join(format!("cmd{i}"));
        let script = format!("echo $$ > {}; exec sleep 60", path_str(&pid_file));
        holders.push(exec(&["sh", "-c", &script]));
        cmds.push(KillOnDrop(read_pid(&pid_file)));
    }
    let waiting: Vec<Proc> = (0..2).map(|_| exec(&["true"])).collect();
    let waiter_pids: Vec<i32> = waiting.iter().map(Proc::pid).collect();
    // Both waiters recorded.
    assert!(
        wait_until(Duration::from_secs(8), || {
            entry(&list_json(&url, &name), &name)
                .is_some_and(|e| e["waiters"].as_array().is_some_and(|w| w.len() == 2))
        }),
        "the waiters were not recorded: {:?}",
        list_json(&url, &name)
    );
    // Two holders die: their redguard processes are killed, one reaped,
    // the other left a zombie (its parent, this test, has not reaped it
    // yet: dead all the same).
    let dead: Vec<i32> = holders[..2].iter().map(Proc::pid).collect();
    for h in &holders[..2] {
        h.signal(libc::SIGKILL);
    }
    let _ = holders[0].wait(RUN_TIMEOUT);
    assert!(wait_until(Duration::from_secs(5), || !alive(dead[1])));

    let list = list_json(&url, &name);
    let e = entry(&list, &name).unwrap_or_else(|| panic!("no entry: {list:?}"));
    assert_eq!(e["kind"], "expiring_semaphore", "{e}");
    assert_eq!(e["available"], 0, "{e}");
    let permits = e["permits"].as_array().unwrap();
    assert_eq!(permits.len(), 4, "{e}");
    for p in permits {
        assert!(p["expires_in_ms"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["record"], true, "{p}");
    }
    let mut dead_seen: Vec<i64> = permits
        .iter()
        .filter(|p| p["alive"] == false)
        .map(|p| p["pid"].as_i64().unwrap())
        .collect();
    dead_seen.sort_unstable();
    let mut dead_want: Vec<i64> = dead.iter().map(|&p| i64::from(p)).collect();
    dead_want.sort_unstable();
    assert_eq!(dead_seen, dead_want, "{e}");
    assert_eq!(
        permits.iter().filter(|p| p["alive"] == true).count(),
        2,
        "{e}"
    );
    let mut waiting_seen: Vec<i64> = e["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            assert_eq!(w["kind"], "permit", "{w}");
            assert!(w["waiting_for_ms"].as_u64().is_some(), "{w}");
            w["pid"].as_i64().unwrap()
        })
        .collect();
    waiting_seen.sort_unstable();
    let mut waiting_want: Vec<i64> = waiter_pids.iter().map(|&p| i64::from(p)).collect();
    waiting_want.sort_unstable();
    assert_eq!(waiting_seen, waiting_want, "{e}");

    // The same for people.
    let text = list_text(&url, &name);
    let head = text.lines().next().unwrap_or_default();
    assert!(
        head.contains("expiring_semaphore, 0 available, 4 held") && head.contains("2 recorded"),
        "{text}"
    );
    assert_eq!(text.matches("  permit ").count(), 4, "{text}");
    assert_eq!(
        text.matches("DEAD: pid not running on this host").count(),
        2,
        "{text}"
    );
    for pid in &dead {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("pid {pid},")) && l.contains("DEAD")),
            "{text}"
        );
    }
    for pid in &waiter_pids {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with("waiter ")
                && l.contains(&format!("pid {pid},"))
                && l.contains("waiting for")),
            "{text}"
        );
    }
    drop(waiting);
    drop(holders);
}

/// Three waiters on three hosts (`Builder::host`) show in `status` with
/// their hosts, pids and how long they have waited, longest first; a fair
/// lock's queue shows them in queue order with the same fields, and a
/// queued waiter without a record (Redisson's) is counted as foreign.
#[test]
fn status_shows_waiters_on_three_hosts_and_the_fair_queue_in_order() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let hosts = ["host-a", "host-b", "host-c"];
    // Records that live 10 s (the watchdog timeout): a wait's entry must go
    // with the wait, not with its record's expiry.
    let clients: Vec<redguard::Client> = hosts
        .iter()
        .map(|h| {
            test_builder(&url)
                .watchdog_timeout(Duration::from_secs(10))
                .host(*h)
                .program(format!("job on {h}"))
                .build()
                .unwrap()
        })
        .collect();

    // A reentrant lock.
    let name = unique_name("who-waits");
    let held = ctx.client.lock(&name).lock().unwrap();
    std::thread::scope(|s| {
        let mut threads = Vec::new();
        for (i, client) in clients.iter().enumerate() {
            let mine = name.clone();
            threads.push(s.spawn(move || {
                client
                    .lock(&mine)
                    .try_lock_for(ms(6_000))
                    .map(|g| g.is_some())
            }));
            // One after the other: their ages differ.
            let (url, n) = (&url, &name);
            assert!(wait_until(Duration::from_secs(3), || {
                let v: Value = serde_json::from_str(&status(url, n, true)).unwrap();
                v["waiters"].as_array().is_some_and(|w| w.len() == i + 1)
            }));
            crate::support::sleep(ms(150));
        }
        let v: Value = serde_json::from_str(&status(&url, &name, true)).unwrap();
        let waiters = v["waiters"].as_array().unwrap();
        let got: Vec<&str> = waiters
            .iter()
            .map(|w| w["host"].as_str().unwrap())
            .collect();
        assert_eq!(got, hosts, "{v}");
        let ages: Vec<u64> = waiters
            .iter()
            .map(|w| w["waiting_for_ms"].as_u64().unwrap())
            .collect();
        assert!(ages[0] > ages[1] && ages[1] > ages[2], "{ages:?}");
        for w in waiters {
            assert_eq!(w["pid"], std::process::id(), "{w}");
            assert_eq!(w["kind"], "reentrant", "{w}");
            assert!(
                w["program"].as_str().unwrap().starts_with("job on host-"),
                "{w}"
            );
            assert!(w["waiting_since_unix_ms"].as_u64().is_some(), "{w}");
        }
        let text = status(&url, &name, false);
        assert!(text.contains("3 recorded"), "{text}");
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("  waiter ")).collect();
        assert_eq!(lines.len(), 3, "{text}");
        for (line, host) in lines.iter().zip(hosts) {
            assert!(
                line.contains(&format!("host {host},")) && line.contains("waiting for"),
                "{text}"
            );
        }
        drop(held);
        for t in threads {
            assert!(t.join().unwrap().unwrap());
        }
    });
    // Each wait's entry went with it: a wait that ended in a hold hands its
    // entry to the watchdog, whose next record write on the server (the
    // one recording the hold, or within a second for a hold already gone)
    // deletes it, long before the records expire.
    let mut last = Value::Null;
    let gone = wait_until(Duration::from_secs(5), || {
        last = serde_json::from_str(&status(&url, &name, true)).unwrap();
        last["waiters"].as_array().map(Vec::len) == Some(0)
    });
    assert!(gone, "the waits' entries stayed: {last}");

    // A fair lock: its queue in order, with the same fields.
    let fair = unique_name("who-queues");
    let queue_key = format!("redisson_lock_queue:{{{fair}}}");
    let queued = |n: i64| -> bool {
        let len: i64 = ctx.server.cmd("LLEN", &[queue_key.as_bytes()]);
        len == n
    };
    let held = ctx.client.fair_lock(&fair).lock().unwrap();
    std::thread::scope(|s| {
        let mut threads = Vec::new();
        for (i, client) in clients.iter().enumerate() {
            let fair = fair.clone();
            threads.push(s.spawn(move || {
                client
                    .fair_lock(&fair)
                    .try_lock_for(ms(8_000))
                    .map(|g| g.is_some())
            }));
            assert!(wait_until(Duration::from_secs(3), || queued(i as i64 + 1)));
        }
        // A Redisson waiter, queued last (its deadline far off).
        let java = "1c4f7e8a-0000-4000-8000-00000000beef:42";
        let _: i64 = ctx
            .server
            .cmd("RPUSH", &[queue_key.as_bytes(), java.as_bytes()]);
        let far = (unix_ms_now() + 600_000).to_string();
        let timeouts = format!("redisson_lock_timeout:{{{fair}}}");
        let _: i64 = ctx.server.cmd(
            "ZADD",
            &[timeouts.as_bytes(), far.as_bytes(), java.as_bytes()],
        );
        // Every queued redguard waiter recorded.
        assert!(wait_until(Duration::from_secs(3), || {
            let v: Value = serde_json::from_str(&status(&url, &fair, true)).unwrap();
            v["queue"]
                .as_array()
                .is_some_and(|q| q.iter().filter(|w| w["record"] == true).count() == 3)
        }));
        let v: Value = serde_json::from_str(&status(&url, &fair, true)).unwrap();
        let queue = v["queue"].as_array().unwrap();
        assert_eq!(queue.len(), 4, "{v}");
        let got: Vec<Value> = queue.iter().map(|w| w["host"].clone()).collect();
        assert_eq!(
            got,
            vec![
                Value::from("host-a"),
                "host-b".into(),
                "host-c".into(),
                Value::Null
            ],
            "{v}"
        );
        for (i, w) in queue.iter().enumerate() {
            assert_eq!(w["position"], i + 1, "{w}");
        }
        assert_eq!(queue[3]["id"], java, "{v}");
        assert_eq!(queue[0]["kind"], "fair", "{v}");
        assert_eq!(queue[0]["pid"], std::process::id(), "{v}");
        assert!(queue[0]["waiting_for_ms"].as_u64().is_some(), "{v}");
        assert_eq!(v["foreign_waiters"], 1, "{v}");
        let text = status(&url, &fair, false);
        for (i, host) in hosts.iter().enumerate() {
            let line = text
                .lines()
                .find(|l| l.contains(&format!("queued #{}:", i + 1)))
                .unwrap_or_else(|| panic!("{text}"));
            assert!(
                line.contains(&format!("host {host},")) && line.contains("waiting for"),
                "{text}"
            );
        }
        assert!(
            text.contains("queued #4: 1c4f7e8a-0000-4000-8000-00000000beef:42"),
            "{text}"
        );
        assert!(
            text.contains("foreign waiters (queued, no record): 1"),
            "{text}"
        );
        drop(held);
        for t in threads {
            assert!(t.join().unwrap().unwrap());
        }
    });
}

/// `list` names each kind with its columns: a lock, a plain semaphore and
/// a latch (named by their waiters), a finished `once` run and a failed
/// one (state, runner, age); a counter nothing names only with `--kind
/// counter` (said once), which also lists the semaphore and the latch,
/// and without it only counted; with `--all` only, an application's
/// string.
#[test]
fn list_shows_every_kind() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let prefix = unique_name("kinds");
    let n = |s: &str| format!("{prefix}-{s}");
    let waiter = test_builder(&url).host("host-w").build().unwrap();
    let _lock = ctx.client.lock(n("lock")).lock().unwrap();
    let sem = ctx.client.semaphore(n("sem"));
    assert!(sem.try_set_permits(2).unwrap());
    let latch = ctx.client.count_down_latch(n("latch"));
    assert!(latch.try_set_count(2).unwrap());
    let _: () = ctx.server.cmd("SET", &[n("counter").as_bytes(), b"5"]);
    let _: () = ctx.server.cmd("SET", &[n("app").as_bytes(), b"hello"]);
    let mut cmd = redguard(&url);
    cmd.args(["once", &n("once"), "--", "true"]);
    assert_eq!(run(cmd).code, Some(0));
    // A failed run keeps only its last attempt's record.
    let mut cmd = redguard(&url);
    cmd.args(["once", &n("failed"), "--", "sh", "-c", "exit 3"]);
    assert_eq!(run(cmd).code, Some(3));
    let pattern = format!("{prefix}-*");
    std::thread::scope(|s| {
        let w1 = s.spawn(|| {
            waiter
                .semaphore(n("sem"))
                .try_acquire_for(3, ms(6_000))
                .map(|g| g.is_some())
        });
        let w2 = s.spawn(|| waiter.count_down_latch(n("latch")).wait_for(ms(6_000)));
        assert!(wait_until(Duration::from_secs(4), || {
            let list = list_json(&url, &pattern);
            ["sem", "latch"].iter().all(|k| {
                entry(&list, &n(k))
                    .is_some_and(|e| e["waiters"].as_array().is_some_and(|w| w.len() == 1))
            })
        }));
        let list = list_json(&url, &pattern);
        let kind = |k: &str| entry(&list, &n(k)).map(|e| e["kind"].clone());
        assert_eq!(kind("lock"), Some("reentrant".into()), "{list:?}");
        assert_eq!(kind("sem"), Some("semaphore".into()), "{list:?}");
        assert_eq!(kind("latch"), Some("latch".into()), "{list:?}");
        assert_eq!(kind("counter"), None, "{list:?}");
        assert_eq!(kind("once"), Some("once".into()), "{list:?}");
        assert_eq!(kind("failed"), Some("once".into()), "{list:?}");
        assert_eq!(kind("app"), None, "{list:?}");
        let e = |k: &str| entry(&list, &n(k)).unwrap().clone();
        assert_eq!(e("sem")["available"], 2);
        assert_eq!(e("sem")["waiters"][0]["host"], "host-w");
        assert_eq!(e("sem")["waiters"][0]["kind"], "semaphore");
        assert_eq!(e("latch")["count"], 2);
        assert_eq!(e("latch")["waiters"][0]["kind"], "latch");
        assert_eq!(e("once")["state"], "done");
        assert_eq!(e("failed")["state"], "failed");
        assert!(e("once")["age_ms"].as_u64().is_some(), "{}", e("once"));
        assert_eq!(e("lock")["waiters"].as_array().map(Vec::len), Some(0));

        let text = list_text(&url, &pattern);
        let line = |k: &str| {
            let start = format!("\"{}\": ", n(k));
            text.lines()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("no {k} in {text}"))
                .to_owned()
        };
        assert!(line("sem").contains("semaphore, 2 available"), "{text}");
        assert!(line("sem").contains("1 recorded"), "{text}");
        assert!(line("latch").contains("latch, count 2"), "{text}");
        assert!(text.contains("(1 integer key not listed"), "{text}");
        assert!(line("once").contains("once, done, runner host "), "{text}");
        assert!(line("once").contains(", age "), "{text}");
        assert!(
            line("failed").contains("once, failed, runner host "),
            "{text}"
        );
        assert!(line("lock").contains("reentrant"), "{text}");
        assert!(!text.contains(&n("counter")), "{text}");
        assert!(!text.contains(&n("app")), "{text}");
        // Every integer with --kind counter, named or not.
        let mut cmd = redguard(&url);
        cmd.args(["list", "--kind", "counter", &pattern]);
        let counters = run(cmd).stdout;
        let named: Vec<&str> = counters
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("\"{prefix}-")))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert_eq!(named, ["counter", "latch", "sem"], "{counters}");
        assert!(counters.contains("counter 5"), "{counters}");
        assert_eq!(
            counters.matches("cannot tell apart").count(),
            1,
            "{counters}"
        );
        let mut cmd = redguard(&url);
        cmd.args(["list", "--kind", "lock,latch", "--json", &pattern]);
        let v: Value = serde_json::from_str(&run(cmd).stdout).unwrap();
        let kinds: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["latch", "reentrant"], "{v}");
        let mut cmd = redguard(&url);
        cmd.args(["list", "--all", &pattern]);
        let all = run(cmd).stdout;
        assert!(
            all.contains(&format!("\"{}\": not a lock", n("app"))),
            "{all}"
        );

        latch.count_down().unwrap();
        latch.count_down().unwrap();
        sem.add_permits(1).unwrap();
        assert!(w1.join().unwrap().unwrap());
        assert!(w2.join().unwrap().unwrap());
    });
}

/// Now, in ms since the epoch.
fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
