//! What `-v` writes while a command waits, runs and ends, and what the
//! busy (75) message says, compared with golden files under `golden/`
//! after masking what changes from run to run: times, pids, holder ids,
//! the host, the holder's program and durations. `REDGUARD_BLESS=1`
//! rewrites the golden files from the run.
use super::*;

/// The lock every case waits for (each test has a private server).
const NAME: &str = "nightly-export";

/// Compares `text` with the golden file `file` (under `golden/`), or
/// writes it there with `REDGUARD_BLESS=1`.
fn golden(file: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/integration/cli/golden")
        .join(file);
    if std::env::var_os("REDGUARD_BLESS").is_some() {
        fs::write(&path, text).unwrap();
        return;
    }
    let want = fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        text, want,
        "{file} differs (REDGUARD_BLESS=1 rewrites it); got:\n{text}"
    );
}

/// `text` with what differs between runs masked, line by line; a line
/// equal to the one before it is dropped (how many progress lines a wait
/// writes depends on the machine's speed).
fn masked(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = mask_line(line);
        if out.last() != Some(&line) {
            out.push(line);
        }
    }
    out.iter().map(|l| format!("{l}\n")).collect()
}

fn mask_line(line: &str) -> String {
    let line = mask_quoted_after(line, "program ");
    let mut words: Vec<String> = Vec::new();
    let mut after_host = false;
    for (i, word) in line.split(' ').enumerate() {
        let (head, rest) = word.split_at(word.len() - word.trim_start_matches('(').len());
        let core = rest.trim_end_matches([',', ';', ')', ':']);
        let tail = &rest[core.len()..];
        let masked = if i == 0 && humantime::parse_rfc3339(core).is_ok() {
            Some("<TIME>".to_owned())
        } else if let Some(pid) = core.strip_prefix("pid=") {
            pid.parse::<u32>().is_ok().then(|| "pid=<PID>".to_owned())
        } else if after_host {
            Some("<HOST>".to_owned())
        } else if core.parse::<u32>().is_ok() && words.last().is_some_and(|w| w == "pid") {
            Some("<PID>".to_owned())
        } else if core.parse::<u64>().is_ok() && words.last().is_some_and(|w| w == "token") {
            // A run-once key's counter starts at the server's clock.
            Some("<TOKEN>".to_owned())
        } else if is_holder_id(core) {
            Some("<HOLDER>".to_owned())
        } else if core.len() == 32 && core.chars().all(|c| c.is_ascii_hexdigit()) {
            Some("<PERMIT>".to_owned())
        } else if is_duration_part(core) {
            Some("<DUR>".to_owned())
        } else {
            None
        };
        after_host = core == "host";
        let word = match masked {
            Some(m) => format!("{head}{m}{tail}"),
            None => word.to_owned(),
        };
        // "1s 250ms" is one duration.
        if word.starts_with("<DUR>")
            && head.is_empty()
            && words.last().is_some_and(|w| w == "<DUR>")
        {
            words.pop();
        }
        words.push(word);
    }
    words.join(" ")
}

/// `line` with the quoted text after each `prefix` replaced by `<PROG>`.
fn mask_quoted_after(line: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(&format!("{prefix}\"")) {
        out.push_str(&rest[..at + prefix.len()]);
        let quoted = &rest[at + prefix.len() + 1..];
        let mut end = quoted.len();
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i;
                    break;
                }
                _ => escaped = false,
            }
        }
        out.push_str("<PROG>");
        rest = quoted.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// `<uuid>:<thread>`: a holder id.
fn is_holder_id(word: &str) -> bool {
    word.split_once(':').is_some_and(|(client, thread)| {
        client.len() == 36
            && client.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            && thread.parse::<u64>().is_ok()
    })
}

/// One part of a duration as redguard prints it (`2s`, `350ms`, `1m`).
fn is_duration_part(word: &str) -> bool {
    let unit = word.trim_start_matches(|c: char| c.is_ascii_digit());
    unit.len() < word.len()
        && ["ns", "us", "µs", "ms", "s", "m", "h", "days", "day"].contains(&unit)
}

#[test]
fn the_masks_hide_what_changes_between_runs() {
    assert_eq!(
        mask_line(
            "2026-11-28T01:20:00.123Z pid=42 lock=\"x\" [INFO] redguard: waiting: held by host \
             web-1, pid 7, program \"a \\\"b\\\"\", for 1m 2s 5ms (holder \
             0d5e7b8e-2f0a-4c39-9c55-1c1a1f7e2b10:1, ttl 850ms)"
        ),
        "<TIME> pid=<PID> lock=\"x\" [INFO] redguard: waiting: held by host <HOST>, pid <PID>, \
         program <PROG>, for <DUR> (holder <HOLDER>, ttl <DUR>)"
    );
    assert_eq!(mask_line("status 0 after 3s"), "status 0 after <DUR>");
    assert_eq!(masked("a 1s\na 2s 3ms\nb\n"), "a <DUR>\nb\n");
}

/// A library client holding the lock, with a holder record (3 s lease, so
/// that a loaded machine does not lose it), and its guard; returns once
/// the record can be read, so that the waiter's first line names it.
fn hold(url: &str) -> (redguard::Client, redguard::LockGuard) {
    let client = test_builder(url)
        .watchdog_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let guard = client.lock(NAME).lock().unwrap();
    let holder = guard.holder_id().clone();
    assert!(
        wait_until(Duration::from_secs(5), || {
            client
                .lock(NAME)
                .inspect()
                .is_ok_and(|info| info.record_of(&holder).is_some())
        }),
        "the holder's record was not written"
    );
    (client, guard)
}

/// `-v` on an `exec` that waits: the wait's start names the holder's
/// host, pid, program and age; progress lines come every period
/// (`REDGUARD_LOG_PROGRESS=2s` here, a minute by default); then the
/// grant after how long, CMD's start and end with its status and
/// duration, and the release.
#[test]
fn verbose_exec_tells_the_wait_the_run_and_the_end() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let (_holder, guard) = hold(&url);
    let mut cmd = redguard(&url);
    cmd.env("REDGUARD_LOG_PROGRESS", "2s")
        .args(["-v", "exec", NAME, "--", "sh", "-c", "exit 3"]);
    let mut waiter = Proc::spawn(cmd);
    // Released only once a progress line came: the wait is then known to
    // have lasted past one period.
    assert!(
        wait_until(Duration::from_secs(15), || waiter
            .stderr_so_far()
            .contains("still waiting")),
        "no progress line:\n{}",
        waiter.stderr_so_far()
    );
    guard.unlock().unwrap();
    let out = waiter.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(3), "{out:?}");
    golden("exec_wait_v.txt", &masked(&out.stderr));
}

/// `-v` on a `once` run: the runner's claim (holder id, fencing token),
/// CMD's start and end, and the record; then on `exec --permits`: the
/// permit and how long it took.
#[test]
fn verbose_once_and_permit_runs_tell_the_claim_and_the_permit() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let mut cmd = redguard(&url);
    cmd.args(["-v", "once", "--ttl", "1h", NAME, "--", "true"]);
    let once = run(cmd);
    assert_eq!(once.code, Some(0), "{once:?}");
    let mut cmd = redguard(&url);
    cmd.args(["-v", "exec", "--permits", "2", "renders", "--", "true"]);
    let permit = run(cmd);
    assert_eq!(permit.code, Some(0), "{permit:?}");
    golden(
        "once_permit_v.txt",
        &format!(
            "{}--- exec --permits 2\n{}",
            masked(&once.stderr),
            masked(&permit.stderr)
        ),
    );
}

/// The busy (75) message names the holder by host, pid, program and age,
/// not only by its id; with `-q` it is a `-v` line instead.
#[test]
fn the_busy_message_names_the_holders_process() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let (_holder, _guard) = hold(&url);
    let mut cmd = redguard(&url);
    cmd.args(["exec", "--no-wait", NAME, "--", "true"]);
    let busy = run(cmd);
    assert_eq!(busy.code, Some(75), "{busy:?}");
    let mut cmd = redguard(&url);
    cmd.args(["-v", "exec", "-q", "--no-wait", NAME, "--", "true"]);
    let quiet = run(cmd);
    assert_eq!(quiet.code, Some(75), "{quiet:?}");
    golden(
        "exec_busy.txt",
        &format!(
            "{}--- -q -v\n{}",
            masked(&busy.stderr),
            masked(&quiet.stderr)
        ),
    );
}

/// `-vvv` adds trace lines (one per acquire attempt) that `-vv` lacks.
#[test]
fn three_vs_are_trace() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let exec = |v: &str| {
        let mut cmd = redguard(&url);
        cmd.args([v, "exec", NAME, "--", "true"]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stderr
    };
    let debug = exec("-vv");
    assert!(debug.contains("[DEBUG]"), "{debug}");
    assert!(!debug.contains("[TRACE]"), "{debug}");
    let trace = exec("-vvv");
    assert!(
        trace.contains("[TRACE] redguard: attempt on reentrant lock \"nightly-export\" as "),
        "{trace}"
    );
}

/// `latch --wait -v` tells its wait as `exec` does: its start with the
/// count left, a progress line each period, and how it ended.
#[test]
fn verbose_latch_wait_tells_the_count_and_the_opening() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let latch = ctx.client.count_down_latch("v-batch");
    assert!(latch.try_set_count(1).unwrap());
    let mut cmd = redguard(&url);
    cmd.env("REDGUARD_LOG_PROGRESS", "300ms")
        .args(["-v", "latch", "v-batch", "--wait", "20s"]);
    let mut p = Proc::spawn(cmd);
    assert!(
        wait_until(Duration::from_secs(10), || p
            .stderr_so_far()
            .contains("still waiting for latch \"v-batch\"")),
        "no progress line: {}",
        p.stderr_so_far()
    );
    latch.count_down().unwrap();
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("waiting for latch \"v-batch\": count 1 left"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("latch \"v-batch\" opened after"),
        "{}",
        out.stderr
    );
}
