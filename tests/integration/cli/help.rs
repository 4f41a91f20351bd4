//! What the binary says about itself (read from its help output), how its
//! logging is switched on, and how it reports durations.
use super::*;

/// `redguard [ARGS] --help`'s output (exit 0).
fn help(args: &[&str]) -> String {
    let mut cmd = redguard_bare();
    cmd.args(args).arg("--help");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
    out.stdout
}

/// The lines of the help section that starts with `heading`, up to the
/// next unindented line.
fn section<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

#[test]
fn connection_options_sit_under_their_own_heading() {
    for args in [&[][..], &["exec"], &["status"], &["latch"]] {
        let text = help(args);
        let connection = section(&text, "Connection:").join("\n");
        for option in [
            "--url",
            "--sentinel-password",
            "--response-timeout",
            "--tls-ca",
        ] {
            assert!(
                connection.contains(option),
                "{args:?}: {option} is not under Connection:\n{text}"
            );
        }
        let options = section(&text, "Options:").join("\n");
        assert!(!options.contains("--url"), "{args:?}:\n{text}");
    }
}

#[test]
fn url_help_lists_every_scheme() {
    let text = help(&[]);
    for scheme in [
        "redis://",
        "rediss://",
        "redis+unix://",
        "redis+sentinel://",
        "rediss+sentinel://",
        "redis+cluster://",
        "rediss+cluster://",
    ] {
        assert!(text.contains(scheme), "--url help lacks {scheme}");
    }
}

#[test]
fn exec_help_lists_every_exit_status() {
    let text = help(&["exec"]);
    let exits = section(&text, "Exit status:");
    assert!(!exits.is_empty(), "no Exit status section:\n{text}");
    for code in [
        "0", "N", "64", "65", "69", "70", "71", "75", "77", "126", "127", "128+N",
    ] {
        assert!(
            exits
                .iter()
                .any(|l| l.split_whitespace().next() == Some(code)),
            "exec --help does not list exit status {code}:\n{}",
            exits.join("\n")
        );
    }
}

#[test]
fn status_help_documents_exit_codes_and_json_fields() {
    let text = help(&["status"]);
    let exits = section(&text, "Exit status:").join("\n");
    for (code, meaning) in [
        ("0", "held"),
        ("1", "nothing is held"),
        ("65", "not a lock"),
    ] {
        assert!(
            exits
                .lines()
                .any(|l| l.trim_start().starts_with(code) && l.contains(meaning)),
            "status --help: exit {code} ({meaning}) missing:\n{exits}"
        );
    }
    let json = text.split("JSON (--json)").nth(1).expect("a JSON section");
    for field in [
        "name",
        "kind",
        "held",
        "expires_in_ms",
        "expires_at_unix_ms",
        "holders",
        "mode",
        "queue",
        "deadline_unix_ms",
        "value",
        "available",
        "permits",
        "ran_at_unix_ms",
        "exit_status",
        "redis_type",
    ] {
        assert!(json.contains(field), "status --help: no JSON field {field}");
    }
    assert!(text.contains("\\xHH"), "status --help: name escaping");
    let once = help(&["once"]);
    assert!(once.contains("--json"), "once --help: no --json");
}

#[test]
fn logging_is_documented_in_help() {
    let text = help(&[]);
    let logging = section(&text, "Logging:").join(" ");
    for word in ["-v", "-vv", "RUST_LOG", "REDGUARD_LOG"] {
        assert!(logging.contains(word), "Logging: lacks {word}:\n{text}");
    }
    assert!(help(&["exec"]).contains("--verbose"));
}

/// `-v`, `-vv`, `RUST_LOG` and `REDGUARD_LOG` turn diagnostics on;
/// without them stderr stays empty.
#[test]
fn verbosity_flags_and_log_variables_turn_logging_on() {
    let server = RedisServer::start();
    let url = server.url();
    let name = unique_name("logging");
    let exec = |flags: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = redguard_bare();
        cmd.args(["--url", &url]).args(flags);
        cmd.args(["exec", &name, "--", "true"]);
        if let Some((key, value)) = env {
            cmd.env(key, value);
        }
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stderr
    };
    assert_eq!(exec(&[], None), "", "quiet by default");
    let info = exec(&["-v"], None);
    assert!(
        info.contains("[INFO] redguard: acquired reentrant lock"),
        "{info}"
    );
    // Each line: UTC time with milliseconds, the pid, the lock.
    for line in info.lines() {
        let (time, rest) = line.split_once(' ').unwrap_or_default();
        let parsed = humantime::parse_rfc3339(time);
        assert!(
            parsed.is_ok() && time.ends_with('Z') && time.len() == "2026-01-01T00:00:00.000Z".len(),
            "no UTC millisecond time first: {line}"
        );
        let pid = rest
            .strip_prefix("pid=")
            .and_then(|r| r.split_once(' '))
            .map(|(pid, r)| (pid.parse::<u32>().is_ok(), r));
        assert!(
            matches!(pid, Some((true, r)) if r.starts_with(&format!("lock=\"{name}\" ["))),
            "no pid and lock: {line}"
        );
    }
    assert!(!info.contains("[DEBUG]"), "{info}");
    let debug = exec(&["-vv"], None);
    assert!(
        debug.contains("[DEBUG]") && debug.contains("[INFO]"),
        "{debug}"
    );
    for var in ["RUST_LOG", "REDGUARD_LOG"] {
        let logged = exec(&[], Some((var, "debug")));
        assert!(logged.contains("[DEBUG]"), "{var}: {logged}");
    }
    // env_logger's filter syntax: a level per module.
    let filtered = exec(&[], Some(("RUST_LOG", "redguard=info")));
    assert!(filtered.contains("[INFO]"), "{filtered}");
    assert!(!filtered.contains("[DEBUG]"), "{filtered}");
}

/// Durations are shown as typed, and a negative one is named as such.
#[test]
fn durations_are_reported_as_typed() {
    let usage = |args: &[&str]| {
        let mut cmd = redguard_bare();
        cmd.args(["--url", "redis://127.0.0.1:1/"]).args(args);
        let out = run(cmd);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
        assert_one_line_error(&out);
        out.stderr
    };
    for args in [
        &["exec", "--wait", "-1s", "j", "--", "true"][..],
        &["once", "--wait", "-1s", "k", "--", "true"],
        &["latch", "j", "--wait", "-1s"],
    ] {
        let err = usage(args);
        assert!(
            err.contains("durations cannot be negative") && err.contains("'-1s'"),
            "{args:?}: {err}"
        );
    }
    for (args, typed) in [
        (&["once", "--ttl", "0s", "k", "--", "true"][..], "'0s'"),
        (
            &["once", "--ttl", "1000years", "k", "--", "true"],
            "'1000years'",
        ),
        (&["exec", "--lease", "0s", "j", "--", "true"], "'0s'"),
        (&["--response-timeout", "0s", "status", "j"], "'0s'"),
        (
            &["--replica-ack-timeout", "2days", "status", "j"],
            "'2days'",
        ),
    ] {
        let err = usage(args);
        assert!(err.contains(typed), "{args:?}: {err}");
        assert!(
            !err.contains("0ns") && !err.contains("31557600000"),
            "{err}"
        );
    }
}
