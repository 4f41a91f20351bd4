//! The CLI meets an application's hashes: `status`, `exec`, `once` and
//! `unlock --force` refuse them with 65 and touch nothing, `list` skips
//! them, and a hash of a million fields costs `list` and `status` no more
//! than a lock does.
use super::*;

use crate::app_keys::{
    JAVA, app_hashes, assert_intact, fill_big_hash, long_fair_queue, snapshot, while_pinging,
};

/// The three hashes: refused with 65 by `status` (plain and
/// JSON), `exec` (waiting, `--wait`, `--no-wait`), `once` (and `once
/// --wait`), and `unlock --force` (as a lock and `--kind once`), each at
/// once, with CMD never run and the hash byte for byte as it was.
#[test]
fn app_hashes_are_refused_with_65_and_left_intact() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for key in app_hashes(&server) {
        let before = snapshot(&server, &key);
        let runs: Vec<Vec<&str>> = vec![
            vec!["status", &key],
            vec!["status", "--json", &key],
            vec!["exec", &key, "--", "sh", "-c", &touch],
            vec!["exec", "--wait", "30s", &key, "--", "sh", "-c", &touch],
            vec!["exec", "--no-wait", &key, "--", "sh", "-c", &touch],
            vec![
                "exec", "--fair", "--wait", "30s", &key, "--", "sh", "-c", &touch,
            ],
            vec![
                "exec", "--fenced", "--wait", "30s", &key, "--", "sh", "-c", &touch,
            ],
            vec![
                "exec", "--read", "--wait", "30s", &key, "--", "sh", "-c", &touch,
            ],
            vec![
                "exec", "--write", "--wait", "30s", &key, "--", "sh", "-c", &touch,
            ],
            vec!["once", &key, "--", "sh", "-c", &touch],
            vec!["once", "--wait", "30s", &key, "--", "sh", "-c", &touch],
            vec!["unlock", "--force", &key],
            vec!["unlock", "--force", "--kind", "once", &key],
        ];
        for args in runs {
            let mut cmd = redguard(&url);
            cmd.args(&args);
            let out = run(cmd);
            assert_eq!(out.code, Some(65), "{args:?}: {out:?}");
            assert!(out.elapsed < Duration::from_secs(5), "{args:?}: {out:?}");
            if args[1] == "--json" {
                assert!(
                    out.stdout.contains("\"kind\":\"other\""),
                    "{args:?}: {out:?}"
                );
                assert!(out.stdout.contains("\"holders\":[]"), "{args:?}: {out:?}");
            } else if args[0] == "status" {
                assert!(out.stdout.contains("not a lock"), "{args:?}: {out:?}");
            } else {
                assert_one_line_error(&out);
                assert!(
                    out.stderr.contains("not a") && out.stderr.contains("left untouched"),
                    "{args:?}: {out:?}"
                );
            }
            assert!(!marker.exists(), "{args:?} ran CMD");
            assert_intact(&server, &key, &before);
        }
        let mut cmd = redguard(&url);
        cmd.args(["status", "--json", &key]);
        let v: serde_json::Value = serde_json::from_str(&run(cmd).stdout).unwrap();
        assert_eq!(
            (&v["kind"], &v["redis_type"]),
            (&"other".into(), &"hash".into())
        );
        let fields: Vec<String> = server.cmd("HGETALL", &[key.as_bytes()]);
        assert_eq!(fields.len(), 4, "{key}: {fields:?}");
    }
}

/// A fair queue longer than the bound: `status` says how many wait in all
/// and how many it did not read.
#[test]
fn status_says_how_many_more_wait_in_a_long_fair_queue() {
    let server = RedisServer::start();
    let fair = long_fair_queue(&server, 2_500);
    let mut cmd = redguard(&server.url());
    cmd.args(["status", &fair]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("2500 queued") && out.stdout.contains("and 1500 more queued"),
        "{out:?}"
    );
    let mut cmd = redguard(&server.url());
    cmd.args(["status", "--json", &fair]);
    let v: serde_json::Value = serde_json::from_str(&run(cmd).stdout).unwrap();
    assert_eq!(v["queue_len"], 2_500);
    assert_eq!(v["queue"].as_array().unwrap().len(), 1_000);
}

/// `list` over 25,000 session hashes and 1,000 locks shows exactly the
/// 1,000 locks (`--all`: the sessions too, as not locks).
#[test]
fn list_shows_exactly_the_locks_among_25000_session_hashes() {
    let _heavy = crate::support::cpu_heavy();
    let server = RedisServer::start();
    let client = crate::support::test_client(&server.url());
    let mut conn = server.conn();
    for batch in 0..25 {
        let mut pipe = redis::pipe();
        for i in 0..1_000 {
            pipe.cmd("HSET")
                .arg(format!("session:{}", batch * 1_000 + i))
                .arg("a")
                .arg(1)
                .arg("b")
                .arg(2)
                .ignore();
        }
        let () = pipe.query(&mut conn).unwrap();
    }
    let mut pipe = redis::pipe();
    for n in 0..1_000 {
        let name = format!("lock:{n}");
        pipe.cmd("HSET")
            .arg(&name)
            .arg(format!("{JAVA}:{n}"))
            .arg(1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&name)
            .arg(600_000)
            .ignore();
    }
    let () = pipe.query(&mut conn).unwrap();

    let mut cmd = redguard(&server.url());
    cmd.args(["list", "--json"]);
    // A session hash is sorted out by the scan's reads of its fields, not
    // looked at as a run-once key (a script call and more each). Each hash
    // has one script call of its own, pipelined with its page's: its
    // bounded first look (lua/bounded_read.lua).
    let hashes = 26_000;
    let per_key = || server.command_calls(&["exec", "evalsha", "eval"]);
    let before = per_key();
    // 26,000 keys on a loaded machine: a roomier bound than `run`'s.
    let out = Proc::spawn(cmd).wait(Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:?}");
    let reads = (per_key() - before).saturating_sub(hashes);
    assert!(reads < 100, "{reads} reads of single keys");
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1_000, "took {:?}", out.elapsed);
    assert!(listed.iter().all(|v| v["kind"] == "reentrant"
        && v["name"].as_str().unwrap().starts_with("lock:")
        && v["holders"].as_array().unwrap().len() == 1));
    let mut cmd = redguard(&server.url());
    cmd.args(["list", "session:*"]);
    let out = run(cmd);
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{out:?}");
    let mut cmd = redguard(&server.url());
    cmd.args(["list", "--all", "session:1"]);
    let out = run(cmd);
    assert!(
        out.stdout.contains("\"session:1\": not a lock (hash"),
        "{out:?}"
    );

    let all = client.list_locks("*", true).unwrap();
    let others = all
        .iter()
        .filter(
            |l| matches!(&l.kind, redguard::LockKind::Other { redis_type } if redis_type == "hash"),
        )
        .count();
    assert_eq!((all.len(), others), (26_000, 25_000));
}

/// With a hash of 1,000,000 fields present, `list` and `status` on it end
/// in under a second each, and another client's `PING`s meanwhile never
/// wait more than 50 ms: nothing reads it whole (no `HGETALL`).
#[test]
fn list_and_status_beside_a_million_field_hash_are_fast_and_harmless() {
    let _heavy = crate::support::cpu_heavy();
    let server = RedisServer::start();
    let big = unique_name("big");
    fill_big_hash(&server, &big, 1_000_000);
    let url = server.url();
    let (max_ping, (list, status)) = while_pinging(&server, || {
        let mut cmd = redguard(&url);
        cmd.args(["list", "big*"]);
        let list = run(cmd);
        let mut cmd = redguard(&url);
        cmd.args(["status", &big]);
        (list, run(cmd))
    });
    assert_eq!((list.code, list.stdout.as_str()), (Some(0), ""), "{list:?}");
    assert!(list.elapsed < Duration::from_secs(1), "{list:?}");
    assert_eq!(status.code, Some(65), "{status:?}");
    assert!(status.stdout.contains("not a lock"), "{status:?}");
    assert!(status.elapsed < Duration::from_secs(1), "{status:?}");
    assert!(max_ping < ms(50), "a PING waited {max_ping:?}");
    assert_eq!(server.command_calls(&["hgetall", "hkeys", "hvals"]), 0);
    let len: u64 = server.cmd("HLEN", &[big.as_bytes()]);
    assert_eq!(len, 1_000_000);
}
