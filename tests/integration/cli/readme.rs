//! The README's shell examples, run: the cron line keeps its promise of
//! one run per night, and the set-up notes say what the scripts install.
use super::*;

const README: &str = include_str!("../../../README.md");

/// The README's crontab line: the `redguard` command and its arguments,
/// with CMD (after `--`) left out.
fn cron_line() -> Vec<String> {
    let line = README
        .lines()
        .find(|l| l.trim_start().starts_with("0 2 *") && l.contains("redguard"))
        .expect("README has a crontab line running redguard");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "redguard").unwrap();
    let rest = &words[at + 1..];
    let end = rest.iter().position(|w| *w == "--").unwrap_or(rest.len());
    rest[..end].iter().map(|w| (*w).to_owned()).collect()
}

/// Two hosts whose cron fires 1.5 s apart, each running the README's
/// line, and a third once both ended: the job runs once. The second finds
/// the run recorded (0) or, when the first started late on a loaded
/// machine, still running (75, quietly: the README's "recorded, or
/// running"); the third finds it recorded and exits with its status.
#[test]
fn the_readme_cron_line_runs_the_job_once_per_night() {
    let server = RedisServer::start();
    let args = cron_line();
    let dir = scratch();
    let runs = dir.path().join("runs");
    let host = || {
        let mut cmd = redguard_bare();
        cmd.env("REDIS_URL", server.url()).args(&args).args([
            "--",
            "sh",
            "-c",
            "echo run >> \"$0\"; sleep 1",
            path_str(&runs),
        ]);
        Proc::spawn(cmd)
    };
    let mut first = host();
    crate::support::sleep(Duration::from_millis(1500));
    let mut second = host();
    let a = first.wait(RUN_TIMEOUT);
    let b = second.wait(RUN_TIMEOUT);
    assert_eq!(a.code, Some(0), "{a:?}");
    assert!(matches!(b.code, Some(0 | 75)), "{b:?}");
    assert!(
        b.stdout.is_empty() && b.stderr.is_empty(),
        "-q is quiet: {b:?}"
    );
    let c = host().wait(RUN_TIMEOUT);
    assert_eq!(
        c.code,
        Some(0),
        "the third host finds the run recorded: {c:?}"
    );
    assert!(
        c.stdout.is_empty() && c.stderr.is_empty(),
        "-q is quiet: {c:?}"
    );
    let ran = fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the job ran {} times",
        ran.lines().count()
    );
}

#[test]
fn the_readme_says_what_exec_and_once_guarantee_and_what_set_up_installs() {
    for words in [
        "**`exec`: no overlap.**",
        "**`once`: one run per key and ttl.**",
        "`openssl`",
        "`faketime`",
        "port 6379",
    ] {
        assert!(README.contains(words), "README does not say {words}");
    }
}
