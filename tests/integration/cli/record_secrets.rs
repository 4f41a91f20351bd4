//! What a holder record keeps of CMD's command line (`--record-command`):
//! by default no password or token reaches Redis, so none shows in
//! `status`, `list`, `who` or the record itself.
use super::*;

const PASSWORD: &str = "DbPa55word";
const TOKEN: &str = "abc123TOKEN";

/// Runs `exec NAME [--record-command HOW] -- sh -c 'sleep 5' <a URL with a
/// password> --token=<token>` until it holds with a record, and returns
/// what `status`, `list`, `who` (text and JSON) and `HGETALL` of the
/// record show, all in one text.
fn shown(server: &RedisServer, how: Option<&str>) -> String {
    let url = server.url();
    let name = unique_name("sec");
    let mut cmd = redguard(&url);
    cmd.args(["exec", &name]);
    if let Some(how) = how {
        cmd.args(["--record-command", how]);
    }
    cmd.args(["--", "sh", "-c", "sleep 5"]).args([
        format!("postgres://app:{PASSWORD}@db/x"),
        format!("--token={TOKEN}"),
    ]);
    let mut holder = Proc::spawn(cmd);
    let status = |as_json: bool| {
        let mut cmd = redguard(&url);
        cmd.args(["status", &name]);
        if as_json {
            cmd.arg("--json");
        }
        run(cmd)
    };
    let mut id = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let out = status(true);
            let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
            if v["holders"][0]["record"] != true {
                return false;
            }
            id = v["holders"][0]["id"].as_str().unwrap_or_default()[..36].to_owned();
            true
        }),
        "{name} not held with a record"
    );
    let mut text = String::new();
    for args in [
        vec!["status", &name],
        vec!["status", &name, "--json"],
        vec!["list", "sec-*"],
        vec!["list", "sec-*", "--json"],
        vec!["who", &id],
        vec!["who", &id, "--json"],
    ] {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        text.push_str(&out.stdout);
        text.push_str(&out.stderr);
    }
    let record: Vec<String> =
        server.cmd("HGETALL", &[format!("redguard:client:{{{id}}}").as_bytes()]);
    assert!(record.iter().any(|f| f == "program"), "{record:?}");
    text.push_str(&record.join("\n"));
    holder.signal(libc::SIGTERM);
    let out = holder.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(143), "{out:?}");
    text
}

/// The issue's command line: by default the URL's password and the token
/// are masked everywhere; `--record-command full` keeps them (so the
/// check above looks where they would be); `name` and `none` keep less.
#[test]
fn a_holder_record_keeps_no_password_or_token_by_default() {
    let server = RedisServer::start();
    let masked = shown(&server, None);
    for secret in [PASSWORD, TOKEN] {
        assert!(!masked.contains(secret), "{secret} shown:\n{masked}");
    }
    assert!(
        masked.contains("-- sh -c 'sleep 5' postgres://app:***@db/x --token=***"),
        "{masked}"
    );

    let full = shown(&server, Some("full"));
    for secret in [PASSWORD, TOKEN] {
        assert!(full.contains(secret), "{secret} not kept by full:\n{full}");
    }

    let name = shown(&server, Some("name"));
    assert!(
        !name.contains("postgres") && !name.contains("--token"),
        "{name}"
    );
    assert!(name.contains(" -- sh"), "{name}");

    let none = shown(&server, Some("none"));
    assert!(!none.contains(" -- "), "{none}");
    assert!(!none.contains("sleep"), "{none}");
}

/// A record's `host` and `version` are what their writer claims, and any
/// client that can write the key can claim anything: text output prints
/// them escaped, so that a newline cannot forge a line (`lock "prod:db":
/// free`) and an escape sequence cannot clear the screen.
#[test]
fn forged_record_fields_print_escaped() {
    let server = RedisServer::start();
    let url = server.url();
    let name = unique_name("forged");
    let client = test_builder(&url).program("forged-host").build().unwrap();
    let guard = client.lock(&name).lock().unwrap();
    let key = format!("redguard:client:{{{}}}", client.id());
    assert!(
        wait_until(Duration::from_secs(5), || server.exists(&key)),
        "no record"
    );
    let forged_host = "web-1\nlock \"prod:db\": free";
    let _: i64 = server.cmd(
        "HSET",
        &[
            key.as_bytes(),
            b"host",
            forged_host.as_bytes(),
            b"version",
            b"1.0\x1b[2J",
        ],
    );
    for args in [
        vec!["status", name.as_str()],
        vec!["who", &client.id().to_string()],
    ] {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        assert!(
            !out.stdout
                .lines()
                .any(|l| l.starts_with("lock \"prod:db\"")),
            "{args:?}: a forged line: {}",
            out.stdout
        );
        assert!(!out.stdout.contains('\x1b'), "{args:?}: {:?}", out.stdout);
        assert!(
            out.stdout.contains(r"web-1\x0alock"),
            "{args:?}: {}",
            out.stdout
        );
    }
    guard.unlock().unwrap();
}
