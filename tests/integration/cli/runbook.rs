//! docs/OPERATIONS.md's runbook, replayed: each recipe's incident is set
//! up against a private redis-server, then the recipe's shell block runs as
//! written, one line at a time (`sh -c LINE`, `redguard` on the `PATH`,
//! `REDIS_URL` set), and each line's exit status and output are checked.
//! Also: the README stays a landing page, at most 20,000 characters.
use super::*;

const OPERATIONS: &str = include_str!("../../../docs/OPERATIONS.md");
const README: &str = include_str!("../../../README.md");

/// The runbook's recipes: each `### ` title under `## Runbook` with the
/// lines of its first `sh` block (comments and blank lines left out).
fn recipes() -> Vec<(String, Vec<String>)> {
    let runbook = OPERATIONS
        .split("\n## Runbook\n")
        .nth(1)
        .expect("docs/OPERATIONS.md has a Runbook")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    runbook
        .split("\n### ")
        .skip(1)
        .map(|recipe| {
            let title = recipe.lines().next().unwrap_or_default().trim().to_owned();
            let block = recipe
                .split("```sh\n")
                .nth(1)
                .and_then(|b| b.split("```").next())
                .unwrap_or_else(|| panic!("recipe {title:?} has no sh block"));
            let lines = block
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .collect();
            (title, lines)
        })
        .collect()
}

/// The lines of recipe `title`.
fn recipe(title: &str) -> Vec<String> {
    recipes()
        .into_iter()
        .find(|(t, _)| t == title)
        .unwrap_or_else(|| panic!("no recipe {title:?}"))
        .1
}

/// Runs one recipe line in `dir`, as an operator's shell would.
fn run_line(line: &str, url: &str, dir: &Path) -> Outcome {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .env("REDIS_URL", url)
        .env_remove("RUST_LOG")
        .env_remove("REDGUARD_LOG")
        .env_remove("REDGUARD_WATCHDOG_TIMEOUT");
    run(cmd)
}

/// Writes an executable `name` in `dir` that appends a line to `runs`.
fn job(dir: &Path, name: &str) {
    let script = dir.join(name);
    fs::write(&script, "#!/bin/sh\necho ran >> runs\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
}

fn runs(dir: &Path) -> usize {
    fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn the_runbook_has_the_five_recipes() {
    let titles: Vec<String> = recipes().into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        titles,
        [
            "A stuck lock",
            "A job that did not run",
            "Leaked permits",
            "A latch that never opens",
            "Redis restarted",
        ]
    );
}

#[test]
fn the_readme_is_a_landing_page_of_at_most_20000_characters() {
    let chars = README.chars().count();
    assert!(chars <= 20_000, "README.md has {chars} characters");
    for doc in [
        "docs/CLI.md",
        "docs/OPERATIONS.md",
        "docs/DEPLOYMENTS.md",
        "docs/REDISSON.md",
        "docs/RELIABILITY.md",
        "docs/SECURITY.md",
    ] {
        assert!(README.contains(&format!("({doc}")), "README links no {doc}");
    }
}

/// A holder that runs on: `list` and `status` name it, `unlock --force`
/// frees the lock, and the holder hears it and ends (70).
#[test]
fn recipe_a_stuck_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    let mut holder = {
        let mut cmd = redguard(&url);
        cmd.args(["exec", "nightly-export", "--", "sleep", "60"]);
        Proc::spawn(cmd)
    };
    let pid = format!("pid {}", holder.pid());
    assert!(
        wait_until(Duration::from_secs(10), || {
            run_line("redguard status nightly-export", &url, dir.path())
                .stdout
                .contains(&pid)
        }),
        "the holder never showed with its record"
    );
    let out: Vec<Outcome> = recipe("A stuck lock")
        .iter()
        .map(|l| run_line(l, &url, dir.path()))
        .collect();
    let [list, status, unlock, after] = out.as_slice() else {
        panic!("the recipe has 4 lines: {out:?}");
    };
    assert_eq!(list.code, Some(0), "{list:?}");
    assert!(
        list.stdout.contains("nightly-export") && list.stdout.contains(&pid),
        "{list:?}"
    );
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains(&pid), "{status:?}");
    assert_eq!(unlock.code, Some(0), "{unlock:?}");
    assert!(unlock.stdout.contains("removed lock"), "{unlock:?}");
    assert!(unlock.stdout.contains(&pid), "{unlock:?}");
    assert_eq!(after.code, Some(1), "{after:?}");
    assert!(after.stdout.contains("free"), "{after:?}");
    let ended = holder.wait(RUN_TIMEOUT);
    assert_eq!(
        ended.code,
        Some(70),
        "the holder heard the force unlock: {ended:?}"
    );
}

/// The README's cron line failed (exit 3): `once --status` names the failed
/// attempt, and the recipe's run runs the job once.
#[test]
fn recipe_a_job_that_did_not_run() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    job(dir.path(), "export.sh");
    let failed = run_line(
        "redguard once -q --ttl 20h nightly-export -- sh -c 'exit 3'",
        &url,
        dir.path(),
    );
    assert_eq!(failed.code, Some(3), "{failed:?}");
    let out: Vec<Outcome> = recipe("A job that did not run")
        .iter()
        .map(|l| run_line(l, &url, dir.path()))
        .collect();
    let [status, as_json, forget, again, after] = out.as_slice() else {
        panic!("the recipe has 5 lines: {out:?}");
    };
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(
        status.stdout.contains("failed") && status.stdout.contains("exit status 3"),
        "{status:?}"
    );
    let v: serde_json::Value = serde_json::from_str(&as_json.stdout).unwrap();
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["last_attempt"]["exit_status"], 3, "{v}");
    assert!(v["last_attempt"]["duration_ms"].is_u64(), "{v}");
    assert_eq!(forget.code, Some(0), "{forget:?}");
    assert_eq!(again.code, Some(0), "{again:?}");
    assert_eq!(runs(dir.path()), 1);
    assert_eq!(after.code, Some(0), "{after:?}");
    assert!(
        after.stdout.contains(" ran on ") && after.stdout.contains("exit status 0"),
        "{after:?}"
    );
}

/// Two `exec --permits 4` holders killed with SIGKILL: `status` shows
/// their 2 permits with their pids, the recipe frees them, and the next
/// `exec --permits 4` runs.
#[test]
fn recipe_leaked_permits() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    job(dir.path(), "render.sh");
    // A lease long enough that the permits outlive their holders while
    // the recipe runs.
    let hold = || {
        let mut cmd = redguard_timed(&url, "30s", "1s");
        cmd.args(["exec", "--permits", "4", "render", "--", "sleep", "60"]);
        Proc::spawn(cmd)
    };
    let mut holders = [hold(), hold()];
    let pids: Vec<String> = holders.iter().map(|h| format!("pid {}", h.pid())).collect();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let out = run_line("redguard status render", &url, dir.path()).stdout;
            pids.iter().all(|p| out.contains(p.as_str()))
        }),
        "the holders' permits never showed"
    );
    for holder in &mut holders {
        holder.signal(libc::SIGKILL);
        let _ = holder.wait(RUN_TIMEOUT);
    }
    let out: Vec<Outcome> = recipe("Leaked permits")
        .iter()
        .map(|l| run_line(l, &url, dir.path()))
        .collect();
    let [status, unlock, again] = out.as_slice() else {
        panic!("the recipe has 3 lines: {out:?}");
    };
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains("2 held"), "{status:?}");
    for pid in &pids {
        assert!(status.stdout.contains(pid.as_str()), "{pid}: {status:?}");
    }
    assert!(status.stdout.contains(", client "), "{status:?}");
    assert_eq!(unlock.code, Some(0), "{unlock:?}");
    assert!(unlock.stdout.contains("removed semaphore"), "{unlock:?}");
    assert_eq!(again.code, Some(0), "{again:?}");
    assert_eq!(runs(dir.path()), 1);
}

/// A latch of 3 counted down twice, with a waiter: `status` shows the
/// count left and the waiter, the recipe's count-down opens it and the
/// waiter goes on (0).
#[test]
fn recipe_a_latch_that_never_opens() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    for line in [
        "redguard latch batch-7 --count 3",
        "redguard latch batch-7 --count-down",
        "redguard latch batch-7 --count-down",
    ] {
        let out = run_line(line, &url, dir.path());
        assert_eq!(out.code, Some(0), "{line}: {out:?}");
    }
    let mut waiter = {
        let mut cmd = redguard(&url);
        cmd.args(["latch", "batch-7", "--wait", "1m"]);
        Proc::spawn(cmd)
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            run_line("redguard status batch-7", &url, dir.path())
                .stdout
                .contains("1 subscribed, 1 recorded")
        }),
        "the waiter never subscribed"
    );
    let out: Vec<Outcome> = recipe("A latch that never opens")
        .iter()
        .map(|l| run_line(l, &url, dir.path()))
        .collect();
    let [status, count_down, after] = out.as_slice() else {
        panic!("the recipe has 3 lines: {out:?}");
    };
    assert!(
        status.stdout.contains("latch \"batch-7\": count 1 ")
            && status.stdout.contains("1 subscribed, 1 recorded")
            && status.stdout.contains("waiting for"),
        "{status:?}"
    );
    assert_eq!(count_down.code, Some(0), "{count_down:?}");
    assert_eq!(after.code, Some(1), "{after:?}");
    assert!(after.stdout.contains("free"), "{after:?}");
    let ended = waiter.wait(RUN_TIMEOUT);
    assert_eq!(ended.code, Some(0), "the waiter went on: {ended:?}");
}

/// A Redis restarted without persistence under a running `exec` and a
/// recorded `once`: the holder exits 70, the recipe finds nothing held and
/// no record, and runs the job again.
#[test]
fn recipe_redis_restarted() {
    let mut server = RedisServer::start();
    let url = server.url();
    let dir = scratch();
    job(dir.path(), "reindex.sh");
    let done = run_line(
        "redguard once --ttl 20h nightly-export -- true",
        &url,
        dir.path(),
    );
    assert_eq!(done.code, Some(0), "{done:?}");
    let mut holder = {
        let mut cmd = redguard(&url);
        cmd.args(["exec", "reindex", "--", "sleep", "60"]);
        Proc::spawn(cmd)
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            run_line("redguard status reindex", &url, dir.path()).code == Some(0)
        }),
        "the holder never held"
    );
    server.restart();
    let ended = holder.wait(RUN_TIMEOUT);
    assert_eq!(ended.code, Some(70), "the holder was told: {ended:?}");
    let out: Vec<Outcome> = recipe("Redis restarted")
        .iter()
        .map(|l| run_line(l, &url, dir.path()))
        .collect();
    let [list, status, again] = out.as_slice() else {
        panic!("the recipe has 3 lines: {out:?}");
    };
    assert_eq!(list.code, Some(0), "{list:?}");
    assert!(list.stdout.trim().is_empty(), "{list:?}");
    assert!(status.stdout.contains("not run"), "{status:?}");
    assert_eq!(again.code, Some(0), "{again:?}");
    assert_eq!(runs(dir.path()), 1);
}

/// Every relative link of the README and the docs it links points at a
/// file that exists and, with an anchor, at a heading of that file (the
/// split moved sections between files; a stale `#anchor` fails here).
#[test]
fn the_docs_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = [
        "README.md",
        "docs/CLI.md",
        "docs/OPERATIONS.md",
        "docs/DEPLOYMENTS.md",
        "docs/REDISSON.md",
        "docs/LIBRARY.md",
        "docs/SECURITY.md",
    ];
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // GitHub's heading anchors: lowercase, punctuation dropped, spaces as
    // '-'; headings inside code blocks are none.
    let anchors = |text: &str| -> Vec<String> {
        let mut in_code = false;
        let mut out = Vec::new();
        for line in text.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            } else if !in_code && line.starts_with('#') {
                let heading = line.trim_start_matches('#').trim().to_lowercase();
                out.push(
                    heading
                        .chars()
                        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                        .map(|c| if c == ' ' { '-' } else { c })
                        .collect(),
                );
            }
        }
        out
    };
    let mut broken = Vec::new();
    for doc in docs {
        let path = root.join(doc);
        let text = read(&path);
        for link in text.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            if target.starts_with("http") || target.contains(char::is_whitespace) {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            let resolves = file.exists()
                && (anchor.is_empty()
                    || file.extension().is_none_or(|e| e != "md")
                    || anchors(&read(&file)).iter().any(|a| a == anchor));
            if !resolves {
                broken.push(format!("{doc}: {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}
