//! Holder records that one tenant cannot reach from another
//! (`Builder::record_prefix`, `--record-prefix`), and record reads bounded
//! on the server: a record field written huge by someone else is never
//! sent whole, only said to be too long.

use std::time::Duration;

use crate::records::keys;
use crate::support::{RedisServer, test_builder, unique_name, wait_until};

const TENANT: &str = "tenantA:redguard:client:";

/// A client with a record prefix writes its record there and nowhere
/// else; readers with that prefix find it (inspect, holder and waiting
/// records), readers with the default one do not.
#[test]
fn a_record_prefix_keeps_records_under_it_and_readers_look_only_there() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).record_prefix(TENANT).build().unwrap();
    assert_eq!(client.record_prefix(), TENANT);
    let name = unique_name("tenantA:scope");
    let guard = client.lock(&name).lock().unwrap();
    let key = format!("{TENANT}{{{}}}", client.id());
    assert!(
        wait_until(Duration::from_secs(5), || server.exists(&key)),
        "no record under the tenant's prefix"
    );
    assert_eq!(keys(&server, "redguard:client:*"), Vec::<String>::new());

    let same = test_builder(&url).record_prefix(TENANT).build().unwrap();
    let info = same.lock(&name).inspect().unwrap();
    let record = info.record_of(guard.holder_id()).expect("its record");
    assert_eq!(record.pid, Some(std::process::id()));
    let records = same.holder_records(&client.id().to_string()).unwrap();
    assert_eq!(records.len(), 1);

    let default = test_builder(&url).build().unwrap();
    let info = default.lock(&name).inspect().unwrap();
    assert!(info.record_of(guard.holder_id()).is_none());
    assert!(
        default
            .holder_records(&client.id().to_string())
            .unwrap()
            .is_empty()
    );

    // A waiter's entry goes under the prefix too, and only a reader with
    // it finds the wait. The waiter holds another lock meanwhile: a
    // waiting record comes without its holds.
    let other = same.lock(unique_name("tenantA:other")).lock().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || {
            same.holder_records(&same.id().to_string())
                .unwrap()
                .iter()
                .any(|r| !r.holds.is_empty())
        }),
        "the waiter's hold never reached its record"
    );
    let waiter = std::thread::spawn({
        let lock = same.lock(&name);
        move || {
            lock.try_lock_for(Duration::from_secs(10))
                .unwrap()
                .is_some()
        }
    });
    let mut waiting = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            waiting = same.waiting_records().unwrap();
            waiting
                .iter()
                .any(|r| r.waits.iter().any(|w| w.name == name.as_bytes()))
        }),
        "the wait was never found under the prefix"
    );
    assert!(
        waiting.iter().all(|r| r.holds.is_empty()),
        "holds read with the waits: {waiting:?}"
    );
    assert!(default.waiting_records().unwrap().is_empty());
    assert_eq!(keys(&server, "redguard:client:*"), Vec::<String>::new());
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap());
    drop(other);
}

/// A hash at a record's key with more fields than a record ever has is
/// read in part: its fixed fields, and `partial` says the rest was left.
#[test]
fn a_record_with_too_many_fields_is_read_in_part() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).build().unwrap();
    let guard = client.lock(unique_name("many")).lock().unwrap();
    let key = format!("redguard:client:{{{}}}", client.id());
    assert!(
        wait_until(Duration::from_secs(5), || server.exists(&key)),
        "no record"
    );
    let fields: Vec<Vec<u8>> = (0..3000)
        .flat_map(|i| {
            [
                format!("hold:x:{i}|n{i}").into_bytes(),
                b"1 reentrant".to_vec(),
            ]
        })
        .collect();
    let mut args: Vec<&[u8]> = vec![key.as_bytes()];
    args.extend(fields.iter().map(Vec::as_slice));
    let _: i64 = server.cmd("HSET", &args);
    let records = client.holder_records(&client.id().to_string()).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert!(r.partial, "{r:?}");
    assert_eq!(r.pid, Some(std::process::id()));
    assert!(r.holds.is_empty(), "{} holds read", r.holds.len());
    drop(guard);
}

/// A `program` of 20 MB written into a live record is read as its length
/// only: the library gets an empty program and `too_long` naming it.
#[test]
fn a_huge_record_field_is_never_read_whole() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).build().unwrap();
    let name = unique_name("huge");
    let guard = client.lock(&name).lock().unwrap();
    let key = format!("redguard:client:{{{}}}", client.id());
    assert!(
        wait_until(Duration::from_secs(5), || server.exists(&key)),
        "no record"
    );
    let big = vec![b'p'; 20 << 20];
    let _: i64 = server.cmd("HSET", &[key.as_bytes(), b"program", &big]);
    let info = client.lock(&name).inspect().unwrap();
    let r = info.record_of(guard.holder_id()).expect("its record");
    assert!(r.field_too_long("program"), "{:?}", r.too_long);
    assert!(r.program.is_empty());
    assert_eq!(r.pid, Some(std::process::id()));
    let r = &client.holder_records(&client.id().to_string()).unwrap()[0];
    assert!(r.field_too_long("program"));
    assert!(!r.holds.is_empty(), "the holds are still read");
    drop(guard);
}

/// The bounds are exact: a value of 4 KiB, a field name of 64 KiB + 256
/// bytes and 2,032 fields are read; a byte or a field more is not.
#[test]
fn the_read_bounds_are_exact() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).build().unwrap();
    let guard = client.lock(unique_name("edge")).lock().unwrap();
    let id = client.id().to_string();
    let key = format!("redguard:client:{{{id}}}");
    assert!(
        wait_until(Duration::from_secs(5), || {
            client
                .holder_records(&id)
                .unwrap()
                .iter()
                .any(|r| !r.holds.is_empty())
        }),
        "no record with its hold"
    );
    let read = || client.holder_records(&id).unwrap().remove(0);
    let r = read();
    assert!(
        matches!(r.ttl, Some(redguard::Ttl::Expires(_))),
        "{:?}",
        r.ttl
    );
    let hset = |field: &[u8], value: &[u8]| {
        let _: i64 = server.cmd("HSET", &[key.as_bytes(), field, value]);
    };
    let hdel = |field: &[u8]| {
        let _: i64 = server.cmd("HDEL", &[key.as_bytes(), field]);
    };

    hset(b"program", &[b'p'; 4096]);
    assert_eq!(read().program.len(), 4096);
    hset(b"program", &[b'p'; 4097]);
    assert!(read().field_too_long("program"));

    let mut name = b"hold:".to_vec();
    name.resize(64 * 1024 + 256, b'n');
    hset(&name, b"1");
    let r = read();
    assert!(
        r.long_names.is_empty() && !r.too_long.contains(&name),
        "{:?}",
        r.too_long
    );
    hdel(&name);
    name.push(b'n');
    hset(&name, b"1");
    assert_eq!(read().long_names, vec![name[..64].to_vec()]);
    hdel(&name);

    let len: usize = server.cmd("HLEN", &[key.as_bytes()]);
    let fields: Vec<Vec<u8>> = (len..2032)
        .flat_map(|i| [format!("x{i}").into_bytes(), b"1".to_vec()])
        .collect();
    let mut args: Vec<&[u8]> = vec![key.as_bytes()];
    args.extend(fields.iter().map(Vec::as_slice));
    let _: i64 = server.cmd("HSET", &args);
    let r = read();
    assert!(
        !r.partial && !r.holds.is_empty(),
        "2,032 fields: read whole"
    );
    hset(b"x-one-more", b"1");
    let r = read();
    assert!(r.partial && r.holds.is_empty(), "2,033 fields: in part");
    drop(guard);
}

/// A record whose fields come to more than 1 MiB (each under the bounds)
/// is read in part, the fixed fields first.
#[test]
fn a_record_past_one_mib_is_read_in_part() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).build().unwrap();
    let guard = client.lock(unique_name("mib")).lock().unwrap();
    let id = client.id().to_string();
    let key = format!("redguard:client:{{{id}}}");
    assert!(
        wait_until(Duration::from_secs(5), || server.exists(&key)),
        "no record"
    );
    let value = vec![b'v'; 4000];
    for i in 0..300 {
        let field = format!("wait:x:{i}|n{i}");
        let _: i64 = server.cmd("HSET", &[key.as_bytes(), field.as_bytes(), &value]);
    }
    let r = client.holder_records(&id).unwrap().remove(0);
    assert!(r.partial, "300 x 4,000 bytes read whole");
    assert_eq!(r.pid, Some(std::process::id()));
    drop(guard);
}

/// A permit's holder record, as a semaphore's inspection finds it, has
/// that permit's hold only, not the client's other holds.
#[test]
fn a_permit_holders_record_comes_with_that_hold_only() {
    let server = RedisServer::start();
    let url = server.url();
    let client = test_builder(&url).build().unwrap();
    let other = test_builder(&url).build().unwrap();
    let name = unique_name("sem");
    let sem = client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(3).unwrap());
    let lock = client.lock(unique_name("beside")).lock().unwrap();
    let permit = sem.acquire().unwrap();
    let theirs = other.expiring_semaphore(&name).acquire().unwrap();
    let mut info = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            let i = sem.inspect().unwrap();
            let both = [permit.id(), theirs.id()]
                .iter()
                .all(|id| i.record_of(id).is_some_and(|r| !r.holds.is_empty()));
            info = Some(i);
            both
        }),
        "the permits' records were never found: {info:?}"
    );
    let info = info.unwrap();
    let r = info.record_of(permit.id()).unwrap();
    assert_eq!(r.holds.len(), 1, "{:?}", r.holds);
    assert_eq!(r.holds[0].name, name.as_bytes());
    drop((lock, permit, theirs));
}

#[cfg(feature = "cli")]
mod cli {
    use std::time::{Duration, Instant};

    use super::{TENANT, keys};
    use crate::cli::{redguard, run};
    use crate::support::{RedisServer, test_builder, unique_name, wait_until};

    const PW: &str = "tenant-acl-pw-3b1d";

    /// docs/SECURITY.md's user for tenant A, as its tenant recipe says:
    /// the least-privilege line with `rg:` made `tenantA:` and without
    /// `~redguard:client:*`.
    fn tenant_acl_args() -> Vec<String> {
        let line = crate::support::readme_acl_line();
        assert!(line.contains(" ~redguard:client:* "), "{line}");
        line.replace(" ~redguard:client:* ", " ")
            .replace("rg:", "tenantA:")
            .split_whitespace()
            .skip(1)
            .map(|w| w.replace(">CHANGE-ME", &format!(">{PW}")))
            .collect()
    }

    /// Tenant A's user, confined to its own keys, holds with `exec` and
    /// reads its record back with `status`, `who` and a competing `exec
    /// -n`, all with `--record-prefix`, and the server refuses nothing
    /// (`ACL LOG` empty). No record goes under the default prefix.
    #[test]
    fn a_confined_tenant_keeps_and_reads_its_records_under_its_prefix() {
        let server = RedisServer::start();
        let args = tenant_acl_args();
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let () = server.cmd("ACL", &args);
        let url = format!("redis://redguard:{PW}@127.0.0.1:{}/", server.port());
        let tenant = |cmd: &mut std::process::Command| {
            cmd.args(["--record-prefix", TENANT]);
        };
        let name = unique_name("tenantA:job");
        let dir = tempfile::tempdir().unwrap();
        let started = dir.path().join("started");
        let mut cmd = redguard(&url);
        tenant(&mut cmd);
        cmd.args(["exec", &name, "--", "sh", "-c"])
            .arg(format!("touch {} && sleep 10", started.display()));
        let mut holder = crate::cli::Proc::spawn(cmd);
        let status = || {
            let mut cmd = redguard(&url);
            tenant(&mut cmd);
            cmd.args(["status", &name, "--json"]);
            run(cmd)
        };
        let mut id = String::new();
        assert!(
            wait_until(Duration::from_secs(10), || {
                let v: serde_json::Value =
                    serde_json::from_str(&status().stdout).unwrap_or_default();
                if v["holders"][0]["record"] != true {
                    return false;
                }
                id = v["holders"][0]["id"].as_str().unwrap_or_default()[..36].to_owned();
                v["holders"][0]["pid"].as_u64() == Some(u64::from(holder.pid() as u32))
            }),
            "status never showed the holder's record: {:?}\n{}",
            status(),
            holder.stderr_so_far()
        );
        let mut cmd = redguard(&url);
        tenant(&mut cmd);
        cmd.args(["status", &name]);
        let out = run(cmd);
        assert!(
            out.stdout.contains(&format!("pid {}", holder.pid())),
            "{out:?}"
        );
        let mut cmd = redguard(&url);
        tenant(&mut cmd);
        cmd.args(["exec", "-n", &name, "--", "true"]);
        let out = run(cmd);
        assert_ne!(out.code, Some(0), "{out:?}");
        assert!(
            out.stderr.contains(&format!("pid {}", holder.pid())),
            "exec -n did not name the holder: {out:?}"
        );
        let mut cmd = redguard(&url);
        tenant(&mut cmd);
        cmd.args(["who", &id]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(
            out.stdout.contains(&format!("pid {}", holder.pid())),
            "{out:?}"
        );
        // `list` shows the lock with its holder's record, and not the
        // record's own key.
        let mut cmd = redguard(&url);
        tenant(&mut cmd);
        cmd.args(["list", "tenantA:*"]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(
            out.stdout.contains(&format!("pid {}", holder.pid())),
            "{out:?}"
        );
        assert!(!out.stdout.contains(TENANT), "{out:?}");
        assert!(server.exists(format!("{TENANT}{{{id}}}")));
        assert_eq!(keys(&server, "redguard:client:*"), Vec::<String>::new());
        let log: Vec<redis::Value> = server.cmd("ACL", &[b"LOG"]);
        assert!(log.is_empty(), "ACL LOG: {log:#?}");
        holder.signal(libc::SIGTERM);
        let out = holder.wait(Duration::from_secs(10));
        assert_eq!(out.code, Some(143), "{out:?}");
        // What the flag refuses: a glob in the prefix, in one line.
        let mut cmd = redguard(&url);
        cmd.args(["--record-prefix", "tenantA:*", "status", &name]);
        let out = run(cmd);
        assert_eq!(out.code, Some(64), "{out:?}");
        assert!(out.stderr.contains("record prefix"), "{out:?}");
    }

    /// Most output a view of a record with one huge field may print.
    const SMALL: usize = 16 * 1024;

    /// Runs `redguard ARGS` and returns what it printed, both streams,
    /// checking it is small, says `(too long)` and came back promptly.
    fn small_and_too_long(url: &str, args: &[&str], code: Option<i32>) -> String {
        let mut cmd = redguard(url);
        cmd.args(args);
        let at = Instant::now();
        let out = run(cmd);
        let took = at.elapsed();
        let len = out.stdout.len() + out.stderr.len();
        assert!(
            len < SMALL,
            "{args:?} printed {len} bytes: {}...",
            &out.stderr.chars().take(300).collect::<String>()
        );
        assert!(
            out.stdout.contains("(too long)") || out.stderr.contains("(too long)"),
            "{args:?}: {out:?}"
        );
        if code.is_some() {
            assert_eq!(out.code, code, "{args:?}: {out:?}");
        }
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        format!("{}{}", out.stdout, out.stderr)
    }

    /// The case: a 20 MB `program`, then a 20 MB wait entry, then
    /// 20 MB field names, written by hand into a live holder's record.
    /// `status`, a competing `exec -n`, `list` and `who` each print a few
    /// lines saying `(too long)`, never the field.
    #[test]
    fn huge_record_fields_print_as_too_long_and_output_stays_small() {
        let server = RedisServer::start();
        let url = server.url();
        let client = test_builder(&url).build().unwrap();
        let name = unique_name("hugerec");
        let guard = client.lock(&name).lock().unwrap();
        let id = client.id().to_string();
        let key = format!("redguard:client:{{{id}}}");
        assert!(
            wait_until(Duration::from_secs(5), || server.exists(&key)),
            "no record"
        );
        let big = vec![b'x'; 20 << 20];
        let pattern = format!("{}*", &name[..name.len() - 4]);

        let _: i64 = server.cmd("HSET", &[key.as_bytes(), b"program", &big]);
        let status = small_and_too_long(&url, &["status", &name], Some(0));
        assert!(
            status.contains(&format!("pid {}", std::process::id())),
            "{status}"
        );
        let mut cmd = redguard(&url);
        cmd.args(["status", &name, "--json"]);
        let out = run(cmd);
        assert!(out.stdout.len() < SMALL, "{} bytes", out.stdout.len());
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let holder = &v["holders"][0];
        assert!(holder["program"].is_null(), "{holder}");
        assert_eq!(
            holder["too_long"],
            serde_json::json!(["program"]),
            "{holder}"
        );
        small_and_too_long(&url, &["exec", "-n", &name, "--", "true"], None);
        small_and_too_long(&url, &["list", &pattern], Some(0));
        small_and_too_long(&url, &["who", &id], Some(0));
        let _: i64 = server.cmd("HDEL", &[key.as_bytes(), b"program"]);

        // A wait entry of 20 MB: its waiter shows, its start does not.
        let wait = format!("wait:{}|{name}", guard.holder_id());
        let _: i64 = server.cmd("HSET", &[key.as_bytes(), wait.as_bytes(), &big]);
        small_and_too_long(&url, &["status", &name], Some(0));
        small_and_too_long(&url, &["list", &pattern], Some(0));
        small_and_too_long(&url, &["who", &id], Some(0));
        let _: i64 = server.cmd("HDEL", &[key.as_bytes(), wait.as_bytes()]);

        // Field names of 20 MB, a hold's and a wait's.
        let mut hold = b"hold:".to_vec();
        hold.extend_from_slice(&big);
        let mut wait = b"wait:".to_vec();
        wait.extend_from_slice(&big);
        let _: i64 = server.cmd("HSET", &[key.as_bytes(), &hold, b"1", &wait, b"1"]);
        small_and_too_long(&url, &["status", &name], Some(0));
        small_and_too_long(&url, &["list", &pattern], Some(0));
        small_and_too_long(&url, &["who", &id], Some(0));
        drop(guard);
    }

    /// Runs `redguard ARGS` and returns what it printed on stdout,
    /// checking it is small and came back promptly.
    fn small(url: &str, args: &[&str]) -> String {
        let mut cmd = redguard(url);
        cmd.args(args);
        let at = Instant::now();
        let out = run(cmd);
        let took = at.elapsed();
        let len = out.stdout.len() + out.stderr.len();
        assert!(len < SMALL, "{args:?} printed {len} bytes");
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        out.stdout
    }

    /// `once --status --json KEY`, small and prompt, parsed.
    fn once_json(url: &str, key: &str) -> serde_json::Value {
        let out = small(url, &["once", "--status", "--json", key]);
        serde_json::from_str(&out).unwrap()
    }

    /// The run-once data written huge by hand: after a failed `once`, a
    /// 20 MB `program`, then `holder`, then `state` in its last-attempt
    /// record, and a run-once record at the key with a 20 MB outcome and
    /// `by`. `once --status` (text and JSON), `status`, `list` and `list
    /// --kind once` each print a few lines, saying `(too long)` where the
    /// field is shown, never the field; a claim refuses the record.
    #[test]
    fn huge_run_once_fields_print_as_too_long_and_output_stays_small() {
        let server = RedisServer::start();
        let url = server.url();
        let key = unique_name("hugeonce");
        let attempt = format!("redguard_once_attempt:{{{key}}}");
        let pattern = format!("{}*", &key[..key.len() - 4]);
        let mut cmd = redguard(&url);
        cmd.args([
            "once", "-q", "--ttl", "1h", &key, "--", "sh", "-c", "exit 3",
        ]);
        let out = run(cmd);
        assert_eq!(out.code, Some(3), "{out:?}");
        assert!(server.exists(&attempt), "no last attempt");
        let big = vec![b'x'; 20 << 20];
        let hset = |k: &str, field: &str, value: &[u8]| {
            let _: i64 = server.cmd("HSET", &[k.as_bytes(), field.as_bytes(), value]);
        };

        // A 20 MB program: shown by every view of the attempt.
        hset(&attempt, "program", &big);
        let text = small_and_too_long(&url, &["once", "--status", &key], Some(0));
        assert!(text.contains("failed"), "{text}");
        small_and_too_long(&url, &["status", &key], Some(1));
        small_and_too_long(&url, &["list", &pattern], Some(0));
        small_and_too_long(&url, &["list", "--kind", "once", &pattern], Some(0));
        let v = once_json(&url, &key);
        let a = &v["last_attempt"];
        assert_eq!(v["state"], "failed", "{v}");
        assert!(a["program"].is_null(), "{a}");
        assert_eq!(a["too_long"], serde_json::json!(["program"]), "{a}");
        assert_eq!(a["exit_status"], 3, "{a}");
        hset(&attempt, "program", b"sh");

        // A 20 MB holder: the attempt still says how it ended.
        hset(&attempt, "holder", &big);
        small_and_too_long(&url, &["once", "--status", &key], Some(0));
        small_and_too_long(&url, &["status", &key], Some(1));
        // `list` names no holder: it only has to stay small.
        let listed = small(&url, &["list", "--kind", "once", &pattern]);
        assert!(listed.contains("failed"), "{listed}");
        small(&url, &["list", &pattern]);
        let a = once_json(&url, &key)["last_attempt"].clone();
        assert!(a["holder"].is_null(), "{a}");
        assert_eq!(a["too_long"], serde_json::json!(["holder"]), "{a}");
        assert_eq!(a["program"], "sh", "{a}");

        // A 20 MB state is no state: no attempt is shown, quickly.
        hset(&attempt, "state", &big);
        small(&url, &["once", "--status", &key]);
        small(&url, &["status", &key]);
        small(&url, &["list", &pattern]);
        assert!(once_json(&url, &key)["last_attempt"].is_null());
        let _: i64 = server.cmd("DEL", &[attempt.as_bytes()]);

        // A run-once record with a 20 MB outcome and runner.
        let at = b"1700000000000";
        let _: i64 = server.cmd(
            "HSET",
            &[key.as_bytes(), b"outcome", &big, b"at", at, b"by", &big],
        );
        let text = small_and_too_long(&url, &["once", "--status", &key], Some(0));
        assert!(text.contains("ran "), "{text}");
        small_and_too_long(&url, &["status", &key], Some(1));
        small_and_too_long(&url, &["list", &pattern], Some(0));
        small_and_too_long(&url, &["list", "--kind", "once", &pattern], Some(0));
        let v = once_json(&url, &key);
        assert_eq!(v["state"], "done", "{v}");
        assert!(v["by"].is_null(), "{v}");
        assert_eq!(v["too_long"], serde_json::json!(["outcome", "by"]), "{v}");
        assert_eq!(v["ran_at_unix_ms"], 1_700_000_000_000u64, "{v}");
        // A claim hands no such record on as an outcome, and runs nothing.
        let mut cmd = redguard(&url);
        cmd.args(["once", "--ttl", "1h", &key, "--", "sh", "-c", "echo ran"]);
        let at = Instant::now();
        let out = run(cmd);
        assert!(at.elapsed() < Duration::from_secs(5), "{out:?}");
        assert!(out.stdout.len() + out.stderr.len() < SMALL, "{out:?}");
        assert_ne!(out.code, Some(0), "{out:?}");
        assert!(!out.stdout.contains("ran"), "{out:?}");
        assert_eq!(
            server.cmd::<i64>("HSTRLEN", &[key.as_bytes(), b"outcome"]),
            20 << 20
        );
    }
}
