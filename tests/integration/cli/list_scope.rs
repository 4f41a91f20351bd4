//! What `list` lists: for an ACL user confined to its own prefix on a
//! shared server, its keys, with the others skipped and counted instead of
//! a failure at the first; and a run-once key only when its own name
//! matches the pattern, not its last-attempt record's.
use super::*;

const PW: &str = "tenant-a-pw-5e1";

/// docs/SECURITY.md's ACL user for `rg:*`, confined to `tenantA:*`
/// instead, named `tenant-a`; `extra` comes after its rules (`-scan`).
fn tenant_acl(server: &RedisServer, extra: &[&str]) {
    let line = crate::support::readme_acl_line()
        .replace("rg:", "tenantA:")
        .replace(">CHANGE-ME", &format!(">{PW}"))
        .replace("SETUSER redguard ", "SETUSER tenant-a ");
    let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
    args.extend(extra);
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let () = server.cmd("ACL", &args);
}

fn tenant_url(server: &RedisServer) -> String {
    format!("redis://tenant-a:{PW}@127.0.0.1:{}/", server.port())
}

/// The `(N keys skipped: …)` count of a text listing; 0 without one.
fn skipped_in(text: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix('(')?
                .strip_suffix(" skipped: this user may not read them)")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Item 5 of issue 44: a tenant confined to `~tenantA:*` runs a plain
/// `list` on a server shared with another tenant's lock and an
/// application's strings, hashes and list: exit 0, its own lock listed
/// with its holder, nothing foreign shown, and the foreign keys it would
/// have read counted (a last-attempt record of a foreign run-once key
/// among them): 5 hashes and strings, 6 with `--all` (the list too), 2 for
/// `list 'tenantB:*'` (the lock, and the attempt record of a matching
/// key). JSON ends with the count. A refused `SCAN` is still exit 77.
#[test]
fn a_confined_tenant_lists_its_keys_and_counts_the_others() {
    let server = RedisServer::start();
    tenant_acl(&server, &[]);
    let url = tenant_url(&server);
    let admin = crate::support::test_client(&server.url());
    let tenant = crate::support::test_client(&url);
    let _theirs = admin.lock("tenantB:lock").lock().unwrap();
    let ours = tenant.lock("tenantA:lock").lock().unwrap();
    let () = server.cmd("SET", &[b"app:s", b"hello"]);
    let () = server.cmd("SET", &[b"app:n", b"7"]);
    let _: i64 = server.cmd("HSET", &[b"app:h", b"f", b"v"]);
    let _: i64 = server.cmd("RPUSH", &[b"app:l", b"x"]);
    let _: i64 = server.cmd(
        "HSET",
        &[b"redguard_once_attempt:{tenantB:job}", b"state", b"failed"],
    );
    let list = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.arg("list").args(args);
        run(cmd)
    };

    let out = list(&[]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = "\"tenantA:lock\": reentrant";
    assert!(out.stdout.contains(line), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("{} (hold count 1)", ours.holder_id())),
        "{out:?}"
    );
    assert!(
        !out.stdout.contains("tenantB") && !out.stdout.contains("app:"),
        "{out:?}"
    );
    assert_eq!(skipped_in(&out.stdout), 5, "{out:?}");

    let out = list(&["--json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), 2, "{v}");
    assert_eq!(entries[0]["name"], "tenantA:lock");
    assert_eq!(entries[0]["kind"], "reentrant");
    assert_eq!(entries[1]["kind"], "skipped");
    assert_eq!(entries[1]["skipped"], 5);
    assert_eq!(entries[1]["schema"], 1);

    let out = list(&["--all"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(line), "{out:?}");
    assert_eq!(skipped_in(&out.stdout), 6, "{out:?}");

    let out = list(&["tenantB:*"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("tenantB:lock\":"), "{out:?}");
    assert_eq!(skipped_in(&out.stdout), 2, "{out:?}");

    // Within its own keys nothing is skipped, and nothing is said.
    let out = list(&["tenantA:*"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(line), "{out:?}");
    assert!(!out.stdout.contains("skipped"), "{out:?}");
    let out = list(&["tenantA:*", "--json"]);
    assert!(!out.stdout.contains("\"skipped\""), "{out:?}");

    // Without SCAN there is no listing: the refusal, as before.
    tenant_acl(&server, &["-scan"]);
    let out = list(&[]);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert!(out.stderr.contains("permission denied"), "{out:?}");
    drop(ours);
}

/// Item 13b of issue 44: a failed run of `once NAMEn` leaves its
/// last-attempt record, `redguard_once_attempt:{NAMEn}`, whose name ends
/// in `n}`; the name is then a plain lock's. `list '*n}'` (`--all` too)
/// matches the record, not `NAMEn`: the key is not listed, before the
/// lock is taken nor while it is held. A pattern that matches
/// `NAMEn` itself lists its failed attempt, and so does a plain `list`.
#[test]
fn a_run_once_key_is_listed_only_when_its_own_name_matches() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = format!("{}-jobn", unique_name("once-own-name"));
    let record = format!("redguard_once_attempt:{{{name}}}");
    let mut once = redguard(&url);
    once.args(["once", &name, "--", "false"]);
    let out = run(once);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        ctx.server.exists(&record),
        "no last-attempt record: {out:?}"
    );
    let list = |args: &[&str]| {
        let mut cmd = redguard(&url);
        cmd.arg("list").args(args);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "list {args:?}: {out:?}");
        out.stdout
    };
    let listed = format!("\"{name}\":");
    let as_once = format!("\"{name}\": once, failed");
    let own_name_only = |held: bool| {
        for args in [&["*n}"][..], &["--all", "*n}"], &["--kind", "once", "*n}"]] {
            let text = list(args);
            assert!(
                !text.contains(&listed),
                "held {held}, list {args:?}:\n{text}"
            );
        }
        let json = list(&["--json", "--all", "*n}"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(
            v.as_array()
                .unwrap()
                .iter()
                .all(|e| e["name"] != name.as_str()),
            "held {held}: {v}"
        );
    };

    own_name_only(false);
    for args in [&["*jobn"][..], &[], &["--all"], &["--kind", "once"]] {
        let text = list(args);
        assert!(text.contains(&as_once), "list {args:?}:\n{text}");
    }
    let _lock = ctx.client.lock(&name).lock().unwrap();
    own_name_only(true);
    // Its own name matches: listed, as the lock it now is.
    let text = list(&["*jobn"]);
    assert!(text.contains(&listed), "{text}");
}
