//! Usage errors and failures: one line on stderr, distinct exit codes.
use super::*;

#[test]
fn bad_arguments_and_failures_are_one_line_with_distinct_codes() {
    let server = RedisServer::start();
    let url = server.url();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["exec", "j", "--bogus", "--", "true"], 64, "--bogus"),
        (
            vec!["exec", "j", "--wait", "10", "--", "true"],
            64,
            "--wait",
        ),
        (
            vec!["exec", "j", "--wait", "soon", "--", "true"],
            64,
            "soon",
        ),
        (vec!["exec", "j"], 64, "CMD"),
        (vec!["unlock", "j"], 64, "--force"),
        (
            vec!["exec", "j", "--", "no-such-command-redguard"],
            127,
            "not found",
        ),
        (vec!["exec", "j", "--", "/"], 126, "/"),
    ];
    for (args, code, needle) in cases {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = run(cmd);
        assert_eq!(out.code, Some(code), "{args:?}: {out:?}");
        assert_one_line_error(&out);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    // CMD not found: no lock was taken for it.
    assert!(!server.exists("j"));

    let mut cmd = redguard_bare();
    cmd.args(["--url", "not a url", "status", "j"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(64), "{out:?}");
    assert_one_line_error(&out);
    assert!(out.stderr.contains("bad Redis URL"), "{}", out.stderr);

    // Nothing listens on a port of a stopped server.
    let mut gone = RedisServer::start();
    let gone_url = gone.url();
    let gone_port = gone.port();
    gone.kill();
    let mut cmd = redguard(&gone_url);
    // `--no-wait`: one attempt (a wait rides out an outage until its
    // deadline, see `exec_outage`).
    cmd.args(["exec", "--no-wait", "j", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_one_line_error(&out);
    assert!(
        out.stderr.contains(&format!("127.0.0.1:{gone_port}")),
        "{}",
        out.stderr
    );
}
