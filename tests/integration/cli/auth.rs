//! Passwords: a wrong one fails closed (J3), none is ever printed (J7).
use super::*;

/// An ACL user with a password that needs percent-encoding in a URL.
const USER: &str = "rguser";
const PASSWORD: &str = "s3cr%t@pw:x";
const PASSWORD_ENCODED: &str = "s3cr%25t%40pw%3Ax";

fn server_with_user() -> RedisServer {
    let server = RedisServer::start();
    let pw = format!(">{PASSWORD}");
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            USER.as_bytes(),
            b"on",
            pw.as_bytes(),
            b"~*",
            b"&*",
            b"+@all",
        ],
    );
    server
}

fn url_with(server: &RedisServer, password: &str) -> String {
    format!("redis://{USER}:{password}@127.0.0.1:{}/", server.port())
}

fn assert_no_password(out: &Outcome, what: &str) {
    for secret in [PASSWORD, PASSWORD_ENCODED, "s3cr"] {
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "{what}: the password leaked: {out:?}"
        );
    }
}

/// J3: a wrong password fails closed: exit 77, CMD not run, nothing written.
#[test]
fn j3_wrong_password_fails_closed() {
    let server = server_with_user();
    let name = unique_name("j3");
    let dir = scratch();
    let marker = dir.path().join("ran");
    let mut cmd = redguard(&url_with(&server, "wrong%40pw"));
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("authentication"), "{}", out.stderr);
    assert!(!out.stderr.contains("wrong"), "{}", out.stderr);
    assert!(!marker.exists());
    assert!(!server.exists(&name));

    // The right password works.
    let mut cmd = redguard(&url_with(&server, PASSWORD_ENCODED));
    cmd.args(["exec", &name, "--", "touch", path_str(&marker)]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(marker.exists());
}

/// J7: the password never appears in any output: success, busy, errors,
/// status, unlock, help, usage errors; from --url and from $REDIS_URL.
#[test]
fn j7_no_password_in_any_output() {
    let server = server_with_user();
    let url = url_with(&server, PASSWORD_ENCODED);
    let name = unique_name("j7");
    let holder_client = test_builder(&url).build().unwrap();
    let lock = holder_client.lock(&name);

    let mut runs: Vec<(String, Outcome)> = Vec::new();
    let mut go = |what: &str, cmd: Command| runs.push((what.to_owned(), run(cmd)));

    let mut cmd = redguard(&url);
    cmd.args(["exec", &name, "--", "sh", "-c", "echo $REDGUARD_LOCK"]);
    go("exec ok", cmd);
    let mut cmd = redguard(&url);
    cmd.args(["status", &name]);
    go("status", cmd);

    let guard = lock.lock().unwrap();
    let mut cmd = redguard(&url);
    cmd.args(["exec", "-n", &name, "--", "true"]);
    go("busy", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url).args(["status", "--json", &name]);
    go("status json via env", cmd);
    let mut cmd = redguard(&url);
    cmd.args(["unlock", "--force", &name]);
    go("unlock", cmd);
    drop(guard);

    let mut cmd = redguard(&url_with(&server, "wrong-s3cr-pw"));
    cmd.args(["status", &name]);
    go("wrong password", cmd);
    let dead = format!("redis://{USER}:{PASSWORD_ENCODED}@127.0.0.1:1/");
    let mut cmd = redguard(&dead);
    // One attempt: a wait would ride the outage out until its deadline.
    cmd.args(["exec", "--no-wait", &name, "--", "true"]);
    go("unreachable", cmd);
    let bad = format!("redis://{USER}:{PASSWORD_ENCODED}@127.0.0.1:notaport/");
    let mut cmd = redguard(&bad);
    cmd.args(["status", &name]);
    go("bad url", cmd);
    let tls = format!("rediss://{USER}:{PASSWORD_ENCODED}@127.0.0.1:1/");
    let mut cmd = redguard(&tls);
    cmd.args(["status", &name]);
    go("tls url", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url).args(["exec", "--help"]);
    go("help with env", cmd);
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", &url)
        .args(["exec", "--wait", &url, &name, "true"]);
    go("url as a bad duration", cmd);
    let mut cmd = redguard_bare();
    cmd.args(["--url", &url, "exec", &name, "--bogus", "--", "true"]);
    go("usage error", cmd);

    assert_eq!(runs.len(), 12);
    for (what, out) in &runs {
        assert_no_password(out, what);
    }
    // The runs did what they should (so the check covered real output).
    let code = |what: &str| runs.iter().find(|(w, _)| w == what).unwrap().1.code;
    assert_eq!(code("exec ok"), Some(0));
    assert_eq!(code("busy"), Some(75));
    assert_eq!(code("unlock"), Some(0));
    assert_eq!(code("wrong password"), Some(77));
    assert_eq!(code("unreachable"), Some(69));
    assert_eq!(code("bad url"), Some(64));
    assert_eq!(code("help with env"), Some(0));
    assert_eq!(code("url as a bad duration"), Some(64));
}

/// `status` and `unlock` read the lock in a `MULTI`: a server that wants a
/// password none was given for refuses the `MULTI` itself (`NOAUTH`), and
/// an ACL user barred from the key has each read refused while queueing
/// (`NOPERM`). Both exit 77 with one line, like every other command, and
/// the lock is left alone.
#[test]
fn status_and_unlock_report_noauth_and_noperm_inside_their_transaction() {
    let server = RedisServer::start_with(&["--requirepass", "adminpw"]);
    let name = unique_name("tx-auth");
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"fenced-in",
            b"on",
            b">fencepw",
            b"~elsewhere:*",
            b"&*",
            b"+@all",
        ],
    );
    let () = server.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa:1",
            b"1",
        ],
    );
    let port = server.port();
    let cases = [
        (format!("redis://127.0.0.1:{port}/"), "authentication"),
        (
            format!("redis://fenced-in:fencepw@127.0.0.1:{port}/"),
            "permission",
        ),
    ];
    for (url, needle) in &cases {
        for args in [&["status", &name][..], &["unlock", "--force", &name][..]] {
            let mut cmd = redguard(url);
            cmd.args(args);
            let out = run(cmd);
            assert_eq!(out.code, Some(77), "{args:?} as {needle}: {out:?}");
            assert_one_line_error(&out);
            assert!(
                out.stderr.to_lowercase().contains(needle),
                "{args:?}: {}",
                out.stderr
            );
        }
    }
    assert!(server.exists(&name), "the lock was left alone");
}

/// CMD's environment carries no Redis password: `REDIS_URL` reaches it
/// without its password, `REDISCLI_AUTH` and `REDIS_SENTINEL_PASSWORD` not
/// at all. The password can come from `--password-file` or
/// `$REDISCLI_AUTH` (as redis-cli reads it), so that it is in no URL.
#[test]
fn cmd_gets_no_password_and_one_can_be_given_outside_the_url() {
    let server = server_with_user();
    let name = unique_name("cmd-env");
    let env_of_cmd = |cmd: &mut Command| {
        cmd.args(["exec", &name, "--", "env"]);
    };
    // From $REDIS_URL, with $REDISCLI_AUTH and a sentinel password set too.
    let mut cmd = redguard_bare();
    cmd.env("REDIS_URL", url_with(&server, PASSWORD_ENCODED))
        .env("REDISCLI_AUTH", PASSWORD)
        .env("REDIS_SENTINEL_PASSWORD", "sentinel-s3cr");
    env_of_cmd(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_no_password(&out, "CMD's environment");
    assert!(
        out.stdout
            .lines()
            .any(|l| l == format!("REDIS_URL=redis://{USER}@127.0.0.1:{}/", server.port())),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("REDISCLI_AUTH"), "{}", out.stdout);
    assert!(!out.stdout.contains("sentinel-s3cr"), "{}", out.stdout);

    // The password from a file, the URL without one.
    let dir = scratch();
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let bare_url = format!("redis://{USER}@127.0.0.1:{}/", server.port());
    let mut cmd = redguard(&bare_url);
    cmd.args(["--password-file", path_str(&file)]);
    env_of_cmd(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "--password-file: {out:?}");
    assert_no_password(&out, "--password-file");
    // From $REDISCLI_AUTH.
    let mut cmd = redguard(&bare_url);
    cmd.env("REDISCLI_AUTH", PASSWORD);
    env_of_cmd(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "$REDISCLI_AUTH: {out:?}");
    assert_no_password(&out, "$REDISCLI_AUTH");
    // Neither: refused, once the default user is off (it would otherwise
    // take a connection that sends no AUTH).
    let () = server.cmd("ACL", &[b"SETUSER", b"default", b"off"]);
    let mut cmd = redguard(&bare_url);
    env_of_cmd(&mut cmd);
    let out = run(cmd);
    assert_eq!(out.code, Some(77), "no password: {out:?}");
}

/// An ACL user without the record keys (`~redguard:client:*`): `exec`
/// runs CMD and exits with its status, but says on stderr that the
/// holder record was refused, rather than leaving `status` to show a hold
/// with no host, pid or program and nobody the wiser.
#[test]
fn exec_says_when_its_holder_record_is_refused() {
    let server = RedisServer::start();
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"norecord",
            b"on",
            b">norecord-pw",
            b"~app:*",
            b"~redisson_lock__channel:{app:*",
            b"&*",
            b"+@all",
        ],
    );
    let url = format!("redis://norecord:norecord-pw@127.0.0.1:{}/", server.port());
    let dir = scratch();
    let go = dir.path().join("go");
    let name = unique_name("app:job");
    let mut cmd = redguard(&url);
    cmd.args(["exec", &name, "--", "sh", "-c"]).arg(format!(
        "i=0; while [ ! -e {} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
        path_str(&go)
    ));
    let mut proc = Proc::spawn(cmd);
    // CMD runs until the server has refused a record write.
    let refused = wait_until(Duration::from_secs(10), || {
        let log: Vec<redis::Value> = server.cmd("ACL", &[b"LOG"]);
        format!("{log:?}").contains("redguard:client:")
    });
    std::fs::write(&go, b"").unwrap();
    let out = proc.wait(Duration::from_secs(20));
    assert!(refused, "no record write was refused: {out:?}");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("holder record") && out.stderr.contains("~redguard:client:*"),
        "{out:?}"
    );
}
