//! Versions, names and JSON (issue 33, part 6): the version agrees
//! everywhere, every `--json` output carries its schema, kinds are named as
//! the user chose them, permits name their client, the watchdog's lease is
//! shown in `--help`.
use super::*;

fn json(out: &Outcome) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The subcommands whose `--help` offers `--json`, read from the binary's
/// own help, so that a new JSON printer cannot be left out below.
fn commands_with_json() -> Vec<String> {
    let mut top = redguard_bare();
    top.arg("--help");
    let help = run(top).stdout;
    let commands: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists the commands")
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect();
    assert!(commands.len() >= 6, "{commands:?}");
    commands
        .into_iter()
        .filter(|c| {
            let mut cmd = redguard_bare();
            cmd.args([c.as_str(), "--help"]);
            run(cmd).stdout.contains("--json")
        })
        .collect()
}

/// Runs every command that prints JSON, on something to report, and finds
/// `"schema": 1` in each object printed (in each element of `list`'s
/// array).
#[test]
fn every_json_output_carries_schema_1() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("schema");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    let holder = guard.holder_id().as_str().to_owned();
    let client = holder.split(':').next().unwrap().to_owned();
    let key = unique_name("schema-once");
    let mut done = redguard(&url);
    done.args(["once", &key, "--", "true"]);
    assert_eq!(run(done).code, Some(0));

    let runs: Vec<(&str, Vec<String>)> = vec![
        (
            "status",
            vec!["status".into(), name.clone(), "--json".into()],
        ),
        (
            "list",
            vec!["list".into(), format!("{name}*"), "--json".into()],
        ),
        ("who", vec!["who".into(), client, "--json".into()]),
        (
            "once",
            vec![
                "once".into(),
                "--status".into(),
                key.clone(),
                "--json".into(),
            ],
        ),
    ];
    let mut wanted = commands_with_json();
    wanted.sort();
    let mut covered: Vec<String> = runs.iter().map(|(c, _)| (*c).to_owned()).collect();
    covered.sort();
    assert_eq!(
        wanted, covered,
        "a command prints JSON that this test does not run"
    );
    for (command, args) in runs {
        let mut cmd = redguard(&url);
        cmd.args(&args);
        let out = run(cmd);
        assert!(matches!(out.code, Some(0 | 1)), "{command}: {out:?}");
        let v = json(&out);
        match v.as_array() {
            Some(items) => {
                assert!(!items.is_empty(), "{command}: {v}");
                for item in items {
                    assert_eq!(item["schema"], 1, "{command}: {item}");
                }
            }
            None => assert_eq!(v["schema"], 1, "{command}: {v}"),
        }
    }
    drop(guard);
}

/// `redguard --version`, Cargo.toml, the README's dependency line and the
/// CHANGELOG's newest release name the same version.
#[test]
fn the_version_agrees_everywhere() {
    let version = env!("CARGO_PKG_VERSION");
    let mut cmd = redguard_bare();
    cmd.arg("--version");
    let out = run(cmd);
    assert_eq!(out.stdout.trim(), format!("redguard {version}"), "{out:?}");
    let minor = version.rsplit_once('.').unwrap().0;
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(&format!("redguard = \"{minor}\"")),
        "the README's dependency line is not {minor}"
    );
    let changelog = include_str!("../../../CHANGELOG.md");
    let released = changelog
        .lines()
        .find(|l| l.starts_with("## [") && !l.starts_with("## [Unreleased]"))
        .unwrap();
    assert!(
        released.starts_with(&format!("## [{version}] - 20")),
        "the CHANGELOG's newest release is {released:?}, not {version} with a date"
    );
}

/// A fenced lock shows as `fenced` (Java's and redguard's alike: by its
/// token counter), a run of `once` as `once` in `status`, `list` and
/// `unlock --force`, even from a client that keeps no holder record (by
/// its running last attempt).
#[test]
fn fenced_locks_and_once_runs_are_named_so() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let fenced = unique_name("kind-fenced");
    let guard = ctx.client.fenced_lock(&fenced).lock().unwrap();
    let status = |name: &str| {
        let mut cmd = redguard(&url);
        cmd.args(["status", name, "--json"]);
        json(&run(cmd))
    };
    assert_eq!(status(&fenced)["kind"], "fenced");
    let mut text = redguard(&url);
    text.args(["status", &fenced]);
    let out = run(text);
    assert!(out.stdout.contains("held (fenced lock)"), "{out:?}");
    let mut list = redguard(&url);
    list.args(["list", &fenced, "--json"]);
    assert_eq!(json(&run(list))[0]["kind"], "fenced");
    drop(guard);

    // A once run of a client without records: its last attempt names it.
    let quiet = test_builder(&url).holder_record(false).build().unwrap();
    let key = unique_name("kind-once");
    let redguard::Once::Run(run_guard) = quiet.once(&key, Duration::from_secs(60)).unwrap() else {
        panic!("the first caller runs");
    };
    let v = status(&key);
    assert_eq!(v["kind"], "once", "{v}");
    assert_eq!(v["state"], "running", "{v}");
    let mut unlock = redguard(&url);
    unlock.args(["unlock", "--force", &key]);
    let out = run(unlock);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains(": once;"), "{out:?}");
    assert!(!out.stdout.contains("reentrant"), "{out:?}");
    drop(run_guard);
}

/// A held expiring permit names its client in `status`, and `who` answers
/// for that client id and for a holder id alike.
#[test]
fn permits_name_their_client_and_who_takes_either_id() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("permit-client");
    let mut hold = redguard(&url);
    hold.args(["exec", "--permits", "2", &name, "--", "sleep", "30"]);
    let _holder = Proc::spawn(hold);
    let mut permit = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let mut cmd = redguard(&url);
            cmd.args(["status", &name, "--json"]);
            permit = json(&run(cmd))["permits"][0].clone();
            permit["client"].is_string()
        }),
        "no permit with its client: {permit}"
    );
    let client = permit["client"].as_str().unwrap().to_owned();
    let mut text = redguard(&url);
    text.args(["status", &name]);
    let out = run(text);
    assert!(out.stdout.contains(&format!("client {client}")), "{out:?}");
    let mut who = redguard(&url);
    who.args(["who", &client, "--json"]);
    let v = json(&run(who));
    assert_eq!(v["records"][0]["holds"][0]["kind"], "permit", "{v}");

    let lock = ctx.client.lock(unique_name("who-holder"));
    let guard = lock.lock().unwrap();
    let holder = guard.holder_id().as_str().to_owned();
    // The watchdog writes the record just after the acquire: awaited, as
    // `who` found none once when asked at once.
    let mut out = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            let mut who = redguard(&url);
            who.args(["who", &holder]);
            let o = run(who);
            let found = o.code == Some(0);
            out = Some(o);
            found
        }),
        "{out:?}"
    );
    let out = out.unwrap();
    assert!(out.stdout.contains(&format!("as {holder}")), "{out:?}");
}

/// The watchdog's lease is an option shown in the help, beside its
/// variable, and `exec --lease` says it is the fixed one.
#[test]
fn the_watchdog_lease_is_shown_in_help() {
    let mut top = redguard_bare();
    top.arg("--help");
    let help = run(top).stdout;
    assert!(help.contains("--watchdog-timeout"), "{help}");
    assert!(help.contains("REDGUARD_WATCHDOG_TIMEOUT"), "{help}");
    let mut exec = redguard_bare();
    exec.args(["exec", "--help"]);
    let help = run(exec).stdout;
    assert!(
        help.contains("--watchdog-timeout") && help.contains("never renewed"),
        "{help}"
    );
}
