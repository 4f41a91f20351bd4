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
/// with a record of 1,000 hold starts): under 5 s, every lock listed once.
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
    let start = Instant::now();
    let out = Proc::spawn(cmd).wait(Duration::from_secs(30));
    let took = start.elapsed();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let locks = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("\"job:"))
        .count();
    let recorded = out.stdout.matches("program \"bench\"; held for ").count();
    let unknown = out.stdout.matches("held for unknown").count();
    eprintln!(
        "list: 100,000 keys, {locks} locks ({} with a hold start) in {took:?}",
        recorded - unknown
    );
    assert_eq!(locks, 10_000);
    assert_eq!((recorded, unknown), (10_000, 9_000));
    // The 5 s goal is a speed figure (BENCHMARKS.md, `list`); a loaded
    // 2-core machine misses it now and then, so it is printed, not asserted.
}
