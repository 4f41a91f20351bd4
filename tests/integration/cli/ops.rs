//! `redguard status`, `list` and `who` with two redguard processes holding
//! locks and a foreign (Redisson-layout) holder: host, pid and program for
//! the redguard holders, "no record" for the foreign one.
use super::*;

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

fn json(out: &Outcome) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn status_list_and_who_name_each_holders_process() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let prefix = unique_name("ops");
    let (a, b, java) = (
        format!("{prefix}-a"),
        format!("{prefix}-b"),
        format!("{prefix}-java"),
    );
    let hold = |name: &str| {
        let mut cmd = redguard(&url);
        cmd.args(["exec", name, "--", "sleep", "30"]);
        Proc::spawn(cmd)
    };
    let (pa, pb) = (hold(&a), hold(&b));
    // A Redisson holder: its client id is a UUID too, but it keeps no record.
    let foreign = "1c4f7e8a-0000-4000-8000-00000000beef:42";
    let _: () = ctx
        .server
        .cmd("HSET", &[java.as_bytes(), foreign.as_bytes(), b"1"]);
    let _: () = ctx.server.cmd("PEXPIRE", &[java.as_bytes(), b"30000"]);
    let status = |name: &str, as_json: bool| {
        let mut cmd = redguard(&url);
        cmd.args(["status", name]);
        if as_json {
            cmd.arg("--json");
        }
        run(cmd)
    };
    // Both held, with a hold start recorded.
    for name in [&a, &b] {
        assert!(
            wait_until(Duration::from_secs(10), || {
                let v = json(&status(name, true));
                v["held"] == true && !v["holders"][0]["held_for_ms"].is_null()
            }),
            "{name} not held with a record"
        );
    }
    crate::support::sleep(ms(200));

    for (name, proc) in [(&a, &pa), (&b, &pb)] {
        let out = status(name, false);
        assert_eq!(out.code, Some(0), "{out:?}");
        let program = format!("\"redguard exec {name} -- sleep 30\"");
        let want = format!(
            "host {}, pid {}, program {program}; held for ",
            host(),
            proc.pid()
        );
        assert!(out.stdout.contains(&want), "{want}\n{}", out.stdout);
        assert!(
            out.stdout.contains("waiters: 0 subscribed"),
            "{}",
            out.stdout
        );
        let v = json(&status(name, true));
        let h = &v["holders"][0];
        assert_eq!(h["record"], true);
        assert_eq!(h["hold_kind"], "reentrant", "{v}");
        assert_eq!(h["pid"], proc.pid());
        assert_eq!(h["host"], host());
        assert_eq!(h["program"], format!("redguard exec {name} -- sleep 30"));
        assert!(h["held_for_ms"].as_u64().unwrap() >= 200, "{h}");
        assert_eq!(v["subscribers"], 0);
    }
    let out = status(&java, false);
    assert!(
        out.stdout
            .contains(&format!("holder: {foreign} (hold count 1)")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("no record"), "{}", out.stdout);
    let v = json(&status(&java, true));
    assert_eq!(v["holders"][0]["record"], false);
    assert!(v["holders"][0]["pid"].is_null());

    // list: the three locks, nothing else of this test.
    let list = |extra: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.args(["list", &format!("{prefix}-*")]).args(extra);
        run(cmd)
    };
    let out = list(&["--json", "--sort", "name"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v = json(&out);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [a.as_str(), b.as_str(), java.as_str()]);
    assert_eq!(v[0]["holders"][0]["pid"], pa.pid());
    assert_eq!(v[1]["holders"][0]["pid"], pb.pid());
    assert_eq!(v[2]["holders"][0]["record"], false);
    let text = list(&[]).stdout;
    assert!(text.contains(&format!("pid {}", pa.pid())), "{text}");
    assert!(text.contains(&format!("pid {}", pb.pid())), "{text}");
    assert!(
        text.contains(&format!("{foreign} (hold count 1): no record")),
        "{text}"
    );
    // Stuck holders: held at least 100 ms (the foreign one has no start).
    let v = json(&list(&[
        "--json",
        "--older-than",
        "100ms",
        "--sort",
        "held",
    ]));
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    let v = json(&list(&["--json", "--older-than", "1h"]));
    assert!(v.as_array().unwrap().is_empty(), "{v}");

    // who: everything the first process holds.
    let id = json(&status(&a, true))["holders"][0]["id"]
        .as_str()
        .unwrap()[..36]
        .to_owned();
    let mut cmd = redguard(&url);
    cmd.args(["who", &id]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains(&format!("pid {}", pa.pid())),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("holds \"{a}\"")),
        "{}",
        out.stdout
    );
    let mut cmd = redguard(&url);
    cmd.args(["who", &foreign[..36]]);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stdout.contains("no record"), "{}", out.stdout);
    let mut cmd = redguard(&url);
    cmd.args(["who", "not-a-uuid"]);
    assert_eq!(run(cmd).code, Some(64));
}

/// `list` skips keys that are not locks unless `--all`, which shows them
/// as "not a lock".
#[test]
fn list_skips_other_keys_unless_all() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let prefix = unique_name("ops-all");
    let lock = format!("{prefix}-lock");
    let other = format!("{prefix}-string");
    let _g = ctx.client.lock(&lock).lock().unwrap();
    let _: () = ctx.server.cmd("SET", &[other.as_bytes(), b"x"]);
    let mut cmd = redguard(&url);
    cmd.args(["list", &format!("{prefix}-*")]);
    let out = run(cmd);
    assert!(
        out.stdout.contains(&lock) && !out.stdout.contains(&other),
        "{}",
        out.stdout
    );
    let mut cmd = redguard(&url);
    cmd.args(["list", &format!("{prefix}-*"), "--all"]);
    let out = run(cmd);
    assert!(
        out.stdout
            .contains(&format!("\"{other}\": not a lock (string")),
        "{}",
        out.stdout
    );
}

/// `list` over 100,000 keys of which 10,000 are locks (one holder client
/// with a record of 1,000 hold starts): every lock listed once, and the
/// 90,000 strings that are no counter are sorted out by the scan's
/// pipelined reads, not read one by one (a few script or transaction
/// calls at most, not one per key), with fewer than two commands per key
/// in all (a `TYPE` and a `PTTL` of each key were two already). The
/// figures to watch are the commands: the time is printed, and its bound
/// is only that of a run that hangs, as a fresh machine's debug build
/// under a loaded suite takes several times a quiet one's second.
#[test]
fn list_reads_100k_keys_with_10k_locks() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let uuid = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60";
    let record = format!("redguard:client:{{{uuid}}}");
    let mut conn = ctx.server.conn();
    for chunk in 0..10 {
        let mut pipe = redis::pipe();
        for i in chunk * 9_000..(chunk + 1) * 9_000 {
            pipe.cmd("SET").arg(format!("filler:{i}")).arg("x").ignore();
        }
        for i in chunk * 1_000..(chunk + 1) * 1_000 {
            let (name, holder) = (format!("job:{i}"), format!("{uuid}:{}", i % 8 + 1));
            pipe.cmd("HSET").arg(&name).arg(&holder).arg(1).ignore();
            pipe.cmd("PEXPIRE").arg(&name).arg(600_000).ignore();
            if i < 1_000 {
                pipe.cmd("HSET")
                    .arg(&record)
                    .arg(format!("hold:{holder}|{name}"))
                    .arg(1_700_000_000_000u64)
                    .ignore();
            }
        }
        let () = pipe.query(&mut conn).unwrap();
    }
    let () = redis::cmd("HSET")
        .arg(&record)
        .arg(&[
            "host", "bench", "pid", "1", "program", "bench", "version", "0",
        ])
        .query(&mut conn)
        .unwrap();
    let mut cmd = redguard(&url);
    cmd.args(["list"]);
    // Per-key reads (a counter's snapshot is a MULTI/EXEC, a run-once
    // key's look a script call) would be one round trip per filler key.
    // Each hash (10,000 locks and a record) has one script call of its
    // own, pipelined with its page's: its bounded first look.
    let hashes = 10_001;
    let per_key = || ctx.server.command_calls(&["exec", "evalsha", "eval"]);
    let all = || -> u64 { ctx.server.commandstats().values().map(|c| c.calls).sum() };
    let (before, before_all) = (per_key(), all());
    let start = Instant::now();
    let out = Proc::spawn(cmd).wait(Duration::from_secs(180));
    let took = start.elapsed();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let reads = (per_key() - before).saturating_sub(hashes);
    assert!(reads < 100, "{reads} reads of single keys (took {took:?})");
    let commands = all() - before_all;
    assert!(
        commands < 200_000,
        "{commands} commands for 100,000 keys: {:?}",
        ctx.server.commandstats()
    );
    let locks = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("\"job:"))
        .count();
    let recorded = out.stdout.matches("program \"bench\"; held for ").count();
    let unknown = out.stdout.matches("held for unknown").count();
    eprintln!(
        "list: 100,000 keys, {locks} locks ({} with a hold start) in {took:?}, {commands} commands",
        recorded - unknown
    );
    assert_eq!(locks, 10_000);
    assert_eq!((recorded, unknown), (10_000, 9_000));
}

/// `status` on the synchronizers that are no lock hash: an expiring
/// permit names its holder's host, pid and program and how long it has
/// been held; a counter says how many wait on it as a semaphore and as a
/// latch; a run-once key names its runner's process (a run in progress
/// with how long it has run, a finished one while its client lives).
#[test]
fn status_names_permit_holders_latch_waiters_and_once_runners() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let holder = test_builder(&url).program("permit-holder").build().unwrap();
    let status = |name: &str| {
        let mut cmd = redguard(&url);
        cmd.args(["status", "--json", name]);
        json(&run(cmd))
    };
    let text = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.args(args);
        run(cmd).stdout
    };

    // An expiring permit and its holder.
    let sem = unique_name("ops-sem");
    let permits = holder.expiring_semaphore(&sem);
    permits.try_set_permits(2).unwrap();
    let permit = permits.acquire().unwrap();
    let id = permit.id().to_string();
    assert!(
        wait_until(Duration::from_secs(5), || {
            !status(&sem)["permits"][0]["held_for_ms"].is_null()
        }),
        "no hold start for the permit: {}",
        status(&sem)
    );
    crate::support::sleep(ms(200));
    let v = status(&sem);
    assert_eq!(v["kind"], "expiring_semaphore", "{v}");
    assert_eq!(
        (v["available"].as_i64(), v["held_permits"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let p = &v["permits"][0];
    assert_eq!(p["id"], id.as_str());
    assert_eq!(p["record"], true, "{v}");
    assert_eq!(p["pid"], std::process::id(), "{v}");
    assert_eq!(p["program"], "permit-holder", "{v}");
    assert_eq!(p["host"], host(), "{v}");
    assert!(p["held_for_ms"].as_u64().unwrap() >= 200, "{v}");
    assert!(p["expires_in_ms"].as_u64().unwrap() <= 900, "{v}");
    let out = text(&["status", &sem]);
    let want = format!(
        "host {}, pid {}, program \"permit-holder\"; held for ",
        host(),
        std::process::id()
    );
    assert!(out.contains(&format!("permit {id}: lease ")), "{out}");
    assert!(out.contains(&want), "{want}\n{out}");
    // A Redisson permit (no record): its holder is unknown.
    let foreign = [0xabu8; 16];
    let _: i64 = ctx.server.cmd(
        "ZADD",
        &[
            format!("{{{sem}}}:timeout").as_bytes(),
            b"99999999999999",
            &foreign[..],
        ],
    );
    let v = status(&sem);
    let foreign_permit = v["permits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "ab".repeat(16))
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(foreign_permit["record"], false, "{v}");
    assert_eq!(v["held_permits"], 2, "{v}");
    drop(permit);

    // A counter with a waiter on it as a latch: the waiter's record names
    // the kind, which the counter alone cannot tell.
    let latch = unique_name("ops-latch");
    holder.count_down_latch(&latch).try_set_count(2).unwrap();
    let waiter = {
        let latch = ctx.client.count_down_latch(&latch);
        std::thread::spawn(move || latch.wait_for(Duration::from_secs(10)).unwrap())
    };
    assert!(
        wait_until(Duration::from_secs(5), || {
            let v = status(&latch);
            v["subscribers"] == 1 && v["waiters"].as_array().is_some_and(|w| w.len() == 1)
        }),
        "{}",
        status(&latch)
    );
    let v = status(&latch);
    assert_eq!(
        (v["kind"].as_str(), v["value"].as_i64(), v["count"].as_i64()),
        (Some("latch"), Some(2), Some(2)),
        "{v}"
    );
    assert_eq!(v["waiters"][0]["kind"], "latch", "{v}");
    assert_eq!(v["waiters"][0]["pid"], std::process::id(), "{v}");
    let out = text(&["status", &latch]);
    assert!(
        out.contains(": count 2 (its waiters say it is a latch)")
            && out.contains("waiters: 1 subscribed, 1 recorded"),
        "{out}"
    );
    // Without a recorded waiter the layout cannot tell: a counter.
    let bare = unique_name("ops-counter");
    holder.count_down_latch(&bare).try_set_count(2).unwrap();
    let v = status(&bare);
    assert_eq!(
        (v["kind"].as_str(), v["value"].as_i64()),
        (Some("counter"), Some(2)),
        "{v}"
    );
    assert_eq!(v["semaphore_subscribers"], 0, "{v}");
    assert!(
        text(&["status", &bare]).contains("the layout cannot tell them apart"),
        "{}",
        text(&["status", &bare])
    );
    let l = holder.count_down_latch(&latch);
    l.count_down().unwrap();
    l.count_down().unwrap();
    assert!(waiter.join().unwrap());

    // A run in progress, then finished: its runner's process.
    let key = unique_name("ops-once");
    let redguard::Once::Run(run_guard) = holder.once(&key, Duration::from_secs(60)).unwrap() else {
        panic!("a fresh key runs");
    };
    let once_status = || {
        let mut cmd = redguard(&url);
        cmd.args(["once", "--status", "--json", &key]);
        json(&run(cmd))
    };
    assert!(
        wait_until(Duration::from_secs(5), || {
            !once_status()["runner"]["held_for_ms"].is_null()
        }),
        "{}",
        once_status()
    );
    let v = once_status();
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(v["runner"]["id"], run_guard.holder_id().as_str(), "{v}");
    assert_eq!(v["runner"]["pid"], std::process::id(), "{v}");
    assert_eq!(v["runner"]["program"], "permit-holder", "{v}");
    let out = text(&["once", "--status", &key]);
    assert!(
        out.contains(&format!("  runner: its record says: {want}")),
        "{out}"
    );
    // `status` too names it a run (its runner's record says so), not a lock.
    let mut cmd = redguard(&url);
    cmd.args(["status", "--json", &key]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "held: {out:?}");
    let v = json(&out);
    assert_eq!(
        (v["kind"].as_str(), v["state"].as_str()),
        (Some("once"), Some("running")),
        "{v}"
    );
    assert_eq!(v["holder"], run_guard.holder_id().as_str(), "{v}");
    assert_eq!(v["runner"]["pid"], std::process::id(), "{v}");
    assert!(v["expires_in_ms"].as_u64().is_some(), "{v}");
    let out = text(&["status", &key]);
    assert!(
        out.starts_with(&format!("once \"{key}\": running: holder ")),
        "{out}"
    );
    assert!(
        out.contains(&format!("  runner: its record says: {want}")),
        "{out}"
    );
    let mut cmd = redguard(&url);
    cmd.args(["list", "--json", &key]);
    let v = json(&run(cmd));
    assert_eq!(v[0]["kind"], "once", "{v}");
    assert_eq!(v[0]["holders"][0]["hold_kind"], "once", "{v}");
    let mut cmd = redguard(&url);
    cmd.args(["who", "--json", &holder.id().to_string()]);
    let v = json(&run(cmd));
    let holds = v["records"][0]["holds"].as_array().unwrap().clone();
    assert!(
        holds
            .iter()
            .any(|h| h["name"] == key.as_str() && h["kind"] == "once"),
        "{v}"
    );
    drop(run_guard.complete("ok").unwrap());
    let v = status(&key);
    assert_eq!(
        (v["kind"].as_str(), v["held"].as_bool()),
        (Some("once"), Some(false)),
        "{v}"
    );
    assert_eq!(v["runner"]["record"], true, "{v}");
    assert_eq!(v["runner"]["pid"], std::process::id(), "{v}");
    assert!(
        text(&["status", &key]).contains("its client is still up: host "),
        "{}",
        text(&["status", &key])
    );
    holder.shutdown();
    assert!(
        wait_until(Duration::from_secs(3), || status(&key)["runner"]["record"]
            == false),
        "{}",
        status(&key)
    );
}

/// `list` shows a fair lock's queued waiters with their deadlines (the
/// scores of Redisson's timeout set), as `status` does.
#[test]
fn list_shows_fair_waiters_deadlines() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("ops-fair");
    let held = ctx.client.fair_lock(&name).lock().unwrap();
    let other = ctx.other_client();
    let waiter = {
        let name = name.clone();
        std::thread::spawn(move || {
            other
                .fair_lock(&name)
                .try_lock_for(Duration::from_secs(10))
                .unwrap()
                .map(|g| g.unlock().unwrap())
                .is_some()
        })
    };
    let list = |as_json: bool| {
        let mut cmd = redguard(&url);
        cmd.args(["list", &name]);
        if as_json {
            cmd.arg("--json");
        }
        run(cmd)
    };
    assert!(
        wait_until(Duration::from_secs(5), || json(&list(true))[0]["queue"]
            .as_array()
            .is_some_and(|q| q.len() == 1)),
        "{}",
        list(true).stdout
    );
    let v = json(&list(true));
    let deadline = v[0]["queue"][0]["deadline_unix_ms"].as_u64();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let deadline = deadline.unwrap_or_else(|| panic!("no deadline: {v}"));
    // Redisson's score: the waiter's last try plus the fair wait timeout
    // (the lock holder's remaining lease added for the first in line).
    let wait = ctx.client.fair_lock(&name).fair_wait_timeout().unwrap();
    let bound = now + wait.as_millis() as u64 + 10_000;
    assert!(
        deadline > now && deadline < bound,
        "{deadline} vs {now}: {v}"
    );
    let status = {
        let mut cmd = redguard(&url);
        cmd.args(["status", "--json", &name]);
        json(&run(cmd))
    };
    assert_eq!(status["queue"][0]["id"], v[0]["queue"][0]["id"], "{status}");
    let text = list(false).stdout;
    assert!(
        text.contains("  queued #1: ") && text.contains("(deadline in "),
        "{text}"
    );
    held.unlock().unwrap();
    assert!(waiter.join().unwrap());
}

/// `who` takes a holder id as `status` prints it, not only a client id:
/// it shows that holder's holds, and not another thread's of its client.
#[test]
fn who_takes_a_holder_id_as_status_prints_it() {
    let server = RedisServer::start();
    let url = server.url();
    // A short lease: later holds reach the record within a renewal period.
    let client = crate::support::test_client(&url);
    let (mine, other) = (unique_name("who-mine"), unique_name("who-other"));
    let _guard = client.lock(&mine).lock().unwrap();
    let other_thread = {
        let lock = client.lock(&other);
        let (held, hold) = std::sync::mpsc::channel();
        let (_release, released) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            held.send(()).unwrap();
            let _ = released.recv_timeout(std::time::Duration::from_secs(30));
            drop(guard);
        });
        hold.recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        (thread, _release)
    };
    // The records are written shortly after the grant.
    let holder = client.lock(&mine).holders().unwrap()[0].0.to_string();
    let shown = |id: &str| {
        let mut cmd = redguard(&url);
        cmd.args(["who", "--json", id]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["records"][0]["holds"]
            .as_array()
            .map(|holds| {
                holds
                    .iter()
                    .map(|h| h["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let both = crate::support::wait_until(std::time::Duration::from_secs(5), || {
        names(&shown(&client.id().to_string())).len() == 2
    });
    assert!(both, "the client's record never listed both holds");
    let v = shown(&holder);
    assert_eq!(names(&v), [mine], "{v}");
    assert_eq!(v["holder"], holder.as_str(), "{v}");
    assert_eq!(v["client"], client.id().to_string().as_str(), "{v}");
    drop(other_thread);
}
