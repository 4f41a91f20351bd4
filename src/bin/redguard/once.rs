//! `redguard once KEY -- CMD`: run CMD once per KEY across every host for
//! the ttl; `--status KEY` and `--forget KEY`.
//!
//! The record a run leaves is a small JSON object, `{"status": N, "host":
//! "...", "pid": N}`, stored as the run-once outcome; later callers print
//! it and exit with its status.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime};

use redguard::{AttemptState, Once, OnceAttempt, OnceGuard, OnceInfo, OnceStatus, Outcome};
use serde_json::{Value, json};

use crate::child::{CmdEnd, OnLoss, preflight, run_cmd, signal_exit, signal_name};
use crate::cli::{OnLost, OnceArgs, name_bytes};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::out;
use crate::show;
use crate::signals::Relay;
use crate::spinner::Spinner;
use crate::waitlog::WaitLog;

/// Runs `redguard once`.
pub(crate) fn once(args: &OnceArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let key = name_bytes(&args.key)?;
    if args.status {
        return status(&key, args.json, conn);
    }
    if args.forget {
        return forget(&key, conn);
    }
    let (program, cmd_args) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(code::USAGE, "CMD is missing"))?;
    // A typo in CMD is reported at once, not after waiting for a runner;
    // so is a lease too short to stop CMD within (`exec`'s default kill
    // grace, a quarter of the lease).
    preflight(program)?;
    kill_grace(conn)?;

    let relay = Relay::start(conn.client.clone())
        .map_err(|e| Failure::new(code::OSERR, format!("cannot install signal handlers: {e}")))?;
    let spinner = Spinner::start(&conn.client.lock(&key), args.quiet || args.wait.is_none());
    let waitlog = args.wait.map(|_| {
        let lock = conn.client.lock(&key);
        WaitLog::start(format!("the run of {}", show::name(&key)), move || {
            show::look_holder(&lock)
        })
    });
    let started = std::time::Instant::now();
    let found = match args.wait {
        Some(wait) => conn.client.once_wait(&key, args.ttl, wait),
        None => conn.client.once(&key, args.ttl),
    };
    let waited = waitlog.map_or_else(|| started.elapsed(), WaitLog::stop);
    spinner.stop();
    if let Some(signal) = relay.interrupted() {
        // The shutdown that woke the wait also gave back a claim made in
        // the meantime.
        drop(found);
        out::error(&format!(
            "{} while waiting for the run of {}; CMD not run",
            signal_name(signal),
            show::name(&key)
        ));
        return Ok(signal_exit(signal));
    }
    match found.map_err(|e| lib_failure(&e, &key, conn))? {
        Once::Run(run) => {
            log::info!(
                "redguard: claimed run-once key {} after {} as {} (fencing token {}); this \
                 process runs CMD",
                show::name(&key),
                show::left(waited),
                run.holder_id(),
                run.fencing_token()
            );
            run_once(args, &key, run, program, cmd_args, &relay, conn)
        }
        Once::Done(outcome) => {
            let done = format!(
                "{} already ran: {}; CMD not run",
                show::name(&key),
                describe(&outcome)
            );
            if args.quiet {
                log::info!("redguard: {done}");
            } else {
                out::error(&done);
            }
            Ok(ExitCode::from(recorded_status(&outcome)))
        }
        Once::Running {
            holder, expires_in, ..
        } => {
            if !args.quiet {
                let waited = match args.wait {
                    Some(wait) => format!(
                        " (still, after waiting {})",
                        humantime::format_duration(wait)
                    ),
                    None => String::new(),
                };
                out::error(&format!(
                    "{} is running{waited}: {}; CMD not run",
                    show::name(&key),
                    runner_text(conn, &key, &holder, expires_in)
                ));
            } else {
                log::info!(
                    "redguard: {} is running: holder {holder}; CMD not run",
                    show::name(&key)
                );
            }
            Ok(ExitCode::from(code::TEMPFAIL))
        }
    }
}

/// The first caller: runs CMD, then records its outcome (on success, or
/// with `--record-failure`) or gives the run up.
fn run_once(
    args: &OnceArgs,
    key: &[u8],
    run: OnceGuard,
    program: &OsStr,
    cmd_args: &[std::ffi::OsString],
    relay: &Relay,
    conn: &Connection,
) -> Result<ExitCode, Failure> {
    let mut cmd = Command::new(program);
    crate::connect::scrub_env(&mut cmd);
    cmd.args(cmd_args)
        .env("REDGUARD_ONCE_KEY", OsStr::from_bytes(key))
        .env("REDGUARD_HOLDER", run.holder_id().as_str())
        .env("REDGUARD_FENCING_TOKEN", run.fencing_token().to_string());
    let loss = OnLoss {
        action: OnLost::Kill,
        kill_grace: kill_grace(conn)?,
        why: "lost the lease",
        subject: format!("run-once key {}", show::name(key)),
        fixed: false,
    };
    let limit = args.limit();
    let (status, lost, timed_out) =
        match run_cmd(cmd, program, relay, &|| run.valid_for(), &loss, limit)? {
            CmdEnd::NotStarted(exit) => return Ok(exit),
            CmdEnd::Ended {
                code,
                lost,
                timed_out,
            } => (code, lost, timed_out),
        };
    // How the attempt ended, for its record (kept whatever is recorded).
    let end_attempt = |state: AttemptState| {
        let signal = (status > code::SIGNAL_BASE && !timed_out)
            .then(|| i32::from(status - code::SIGNAL_BASE));
        let exit = (state != AttemptState::Abandoned).then_some(i32::from(status));
        if let Err(e) = run.end_attempt(state, exit, signal) {
            out::warn(&format!(
                "could not record how the attempt at {} ended ({e})",
                show::name(key)
            ));
        }
    };
    let failed_state = if timed_out {
        AttemptState::TimedOut
    } else {
        AttemptState::Failed
    };
    if lost {
        end_attempt(AttemptState::Abandoned);
        if run.is_lost() {
            // Nothing of ours is left to release or record; see `exec`.
            std::mem::forget(run);
        } else {
            // Still ours (CMD was stopped while its lease ran low): the run
            // is given up, so that the next caller runs CMD at once.
            let failed = conn.client.stats().failed_releases;
            let _ = run.abandon();
            crate::child::await_release(
                &conn.client,
                &format!("run-once key {}", show::name(key)),
                conn.client.watchdog_timeout(),
                true,
                failed,
            );
        }
        out::error(&format!(
            "nothing recorded for {}: the next caller runs CMD again",
            show::name(key)
        ));
        return Ok(ExitCode::from(code::SOFTWARE));
    }
    if status != 0 && !args.record_failure {
        end_attempt(failed_state);
        let failed = conn.client.stats().failed_releases;
        let abandoned = run.abandon();
        crate::child::await_release(
            &conn.client,
            &format!("run-once key {}", show::name(key)),
            conn.client.watchdog_timeout(),
            args.quiet,
            failed,
        );
        if let Err(e) = abandoned {
            out::warn(&format!(
                "could not give up the run of {} ({}); it frees itself when its lease runs out",
                show::name(key),
                crate::fail::chain(&e),
            ));
        }
        if !args.quiet {
            let ended = if timed_out {
                format!("CMD was stopped by --timeout ({status})")
            } else {
                format!("CMD exited with {status}")
            };
            out::warn(&format!(
                "{ended}; not recorded, so the next caller runs it again \
                 (--record-failure to record failures)"
            ));
        }
        return Ok(ExitCode::from(status));
    }
    let record = json!({ "status": status, "host": hostname(), "pid": std::process::id() });
    if status != 0 {
        // Recorded (--record-failure), but the attempt still says how it
        // ended; written first, while the claim is certainly this run's.
        end_attempt(failed_state);
    }
    match run.complete(record.to_string()) {
        Ok(_) => {
            log::info!(
                "redguard: recorded the run of {} (status {status})",
                show::name(key)
            );
            Ok(ExitCode::from(status))
        }
        Err(e) if e.is_lock_lost() => {
            out::error(&format!(
                "lost the lease of run-once key {} before recording (CMD exited with {status}); \
                 nothing recorded: the next caller runs CMD again",
                show::name(key)
            ));
            Ok(ExitCode::from(code::SOFTWARE))
        }
        Err(e) => {
            let failure = lib_failure(&e, key, conn);
            Err(Failure::new(
                failure.code,
                format!(
                    "CMD exited with {status} but its run could not be recorded ({}); \
                     the next caller may run it again",
                    failure.message
                ),
            ))
        }
    }
}

/// The kill grace for the runner's (watchdog) lease: `exec`'s default, a
/// quarter of the lease, at most 10 s.
///
/// # Errors
///
/// A usage error when the lease is too short (see [`crate::margins`]).
fn kill_grace(conn: &Connection) -> Result<Duration, Failure> {
    let lease = conn.client.watchdog_timeout();
    crate::stop_margin::kill_grace(
        None,
        lease,
        &format!(
            "the watchdog lease (--watchdog-timeout {})",
            humantime::format_duration(lease)
        ),
    )
}

/// `redguard once --status KEY [--json]`: one line (or one JSON object)
/// on stdout; exit 0 whatever it says.
fn status(key: &[u8], json: bool, conn: &Connection) -> Result<ExitCode, Failure> {
    let info = conn
        .client
        .once_inspect(key)
        .map_err(|e| lib_failure(&e, key, conn))?;
    if json {
        crate::out::print_json(status_json(&info));
        return Ok(ExitCode::SUCCESS);
    }
    let line = match &info.status {
        OnceStatus::NotRun => not_run_line(&info),
        OnceStatus::Running {
            holder, expires_in, ..
        } => format!("running: holder {holder}{}", lease_left(*expires_in)),
        OnceStatus::Done(outcome) => format!("ran {}", describe(outcome)),
        _ => "in an unknown state".to_owned(),
    };
    print!("{} {line}\n{}", show::name(key), details_text(&info));
    Ok(ExitCode::SUCCESS)
}

/// `--status --json`: the fields `redguard once --help` lists.
fn status_json(info: &OnceInfo) -> Value {
    let mut v = json!({ "key": show::json_name(&info.key) });
    v["state"] = json!(state_word(info));
    info_fields(info, &mut v);
    v
}

/// The state `--json` gives: `running` or `done` from the key; when
/// nothing is recorded, how the last attempt ended (`failed`,
/// `abandoned`, `timed_out`), else `not_run`.
pub(crate) fn state_word(info: &OnceInfo) -> &'static str {
    match (&info.status, &info.last_attempt) {
        (OnceStatus::Running { .. }, _) => "running",
        (OnceStatus::Done(_), _) => "done",
        (OnceStatus::NotRun, Some(a)) if a.state != AttemptState::Done => a.state.as_str(),
        (OnceStatus::NotRun, None) => "not_run",
        _ => "unknown",
    }
}

/// The state line of a key with nothing recorded: "not run (no
/// record)", or how its last attempt ended.
fn not_run_line(info: &OnceInfo) -> String {
    match &info.last_attempt {
        Some(a) if a.state != AttemptState::Done => format!(
            "not recorded: last attempt {}; the next caller runs CMD",
            attempt_text(a)
        ),
        _ => "not run (no record)".to_owned(),
    }
}

/// "failed: on HOST (pid P, program X), started at T (AGO ago), ran D,
/// exit status S (SIGNAL)".
fn attempt_text(a: &OnceAttempt) -> String {
    let started = humantime::format_rfc3339_seconds(a.started_at);
    let ago = match SystemTime::now().duration_since(a.started_at) {
        Ok(ago) => format!(" ({} ago)", whole_seconds(ago)),
        Err(_) => String::new(),
    };
    let pid = a.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
    let program = if a.program.is_empty() && !a.field_too_long("program") {
        String::new()
    } else {
        format!(", program {}", attempt_program(a))
    };
    let ran = match a.duration() {
        Some(d) => format!(
            ", ran {}",
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64))
        ),
        None => String::new(),
    };
    let exit = match (a.exit_status, a.signal) {
        (Some(s), Some(sig)) => format!(", exit status {s} ({})", signal_name(sig)),
        (Some(s), None) => format!(", exit status {s}"),
        (None, Some(sig)) => format!(", {}", signal_name(sig)),
        (None, None) => String::new(),
    };
    let note = match a.state {
        AttemptState::Abandoned => " (its runner died, gave up or lost its lease)",
        AttemptState::TimedOut => " (stopped by --timeout)",
        _ => "",
    };
    format!(
        "{}{note}: on {} (pid {pid}{program}), holder {}, started at {started}{ago}{ran}{exit}",
        a.state.as_str(),
        attempt_field(a, "host", &a.host),
        attempt_field(a, "holder", &a.holder)
    )
}

/// A last attempt's text field (`host`, `holder`) for text output, as
/// [`show::text`] writes it, or [`show::TOO_LONG`] when it was too long to
/// read.
pub(crate) fn attempt_field(a: &OnceAttempt, field: &str, value: &str) -> String {
    if a.field_too_long(field) {
        show::TOO_LONG.to_owned()
    } else {
        show::text(value)
    }
}

/// A last attempt's program for text output, quoted as [`show::name`]
/// writes it, or [`show::TOO_LONG`] when it was too long to read.
pub(crate) fn attempt_program(a: &OnceAttempt) -> String {
    if a.field_too_long("program") {
        show::TOO_LONG.to_owned()
    } else {
        show::name(a.program.as_bytes())
    }
}

/// The runner's holder id of `info` for text output, as [`show::text`]
/// writes it, or [`show::TOO_LONG`] when the record's `by` was too long to
/// read.
pub(crate) fn runner_id_text(info: &OnceInfo, id: &str) -> String {
    match &info.status {
        OnceStatus::Done(o) if o.too_long.iter().any(|f| f == "by") => show::TOO_LONG.to_owned(),
        _ => show::text(id),
    }
}

/// `value` for JSON, or null when the field `field` was too long to read
/// (`too_long` then names it).
fn unless_too_long(too_long: &[String], field: &str, value: &str) -> Value {
    if too_long.iter().any(|f| f == field) {
        Value::Null
    } else {
        json!(value)
    }
}

/// A last attempt's fields for JSON.
fn attempt_json(a: &OnceAttempt) -> Value {
    json!({
        "state": a.state.as_str(),
        "holder": unless_too_long(&a.too_long, "holder", &a.holder),
        "host": unless_too_long(&a.too_long, "host", &a.host),
        "pid": a.pid,
        "program": unless_too_long(&a.too_long, "program", &a.program),
        "too_long": a.too_long,
        "started_at_unix_ms": show::unix_ms(a.started_at),
        "ended_at_unix_ms": a.ended_at.map(show::unix_ms),
        "duration_ms": a.duration().map(show::ms),
        "exit_status": a.exit_status,
        "signal": a.signal,
    })
}

/// A run-once key for `redguard status`: its state on the first line,
/// then the runner's record and the waiters.
pub(crate) fn info_text(info: &OnceInfo) -> String {
    let name = show::name(&info.key);
    let first = match &info.status {
        OnceStatus::NotRun => format!("once {name}: {}", not_run_line(info)),
        OnceStatus::Running {
            holder, expires_in, ..
        } => format!(
            "once {name}: running: holder {holder}{}",
            lease_left(*expires_in)
        ),
        OnceStatus::Done(outcome) => format!("once {name}: ran {}", describe(outcome)),
        _ => format!("once {name}: in an unknown state"),
    };
    format!("{first}\n{}", details_text(info))
}

/// The lines under a run-once key's state: what the runner's record says
/// (for a finished run: whether its client is still up), and the waiters.
fn details_text(info: &OnceInfo) -> String {
    let mut s = String::new();
    match &info.status {
        OnceStatus::Running { .. } => {
            let line = crate::record_view::record_line(info.record.as_ref(), info.held_for());
            s.push_str(&format!("  runner: {line}\n"));
        }
        OnceStatus::Done(_) => {
            let line = match &info.record {
                Some(r) => format!(
                    "its client is still up: host {}, pid {}, program {}{}",
                    show::record_text(r, "host", &r.host),
                    r.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
                    show::record_program(r),
                    show::unread_note(r)
                ),
                None => "no record of its client (gone, records off, or not redguard)".to_owned(),
            };
            s.push_str(&format!("  runner: {line}\n"));
        }
        _ => {}
    }
    if let (Some(a), false) = (
        &info.last_attempt,
        matches!(info.status, OnceStatus::NotRun),
    ) {
        s.push_str(&format!("  last attempt: {}\n", attempt_text(a)));
    }
    let subscribed = info
        .subscribers
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    s.push_str(&format!("  waiters: {subscribed} subscribed\n"));
    s
}

/// A run-once key's fields for JSON: a finished run's
/// ([`outcome_fields`]), or a run in progress's `holder`,
/// `expires_in_ms`, `expires_at_unix_ms`; then `runner` (null when there
/// is none), the runner's holder id with what its client's record says
/// (`id`, and the fields of a lock holder's record: `record`, `host`,
/// `pid`, `program`, `version`, `held_for_ms`, `held_since_unix_ms`),
/// and `subscribers`.
pub(crate) fn info_fields(info: &OnceInfo, v: &mut Value) {
    match &info.status {
        OnceStatus::Running {
            holder, expires_in, ..
        } => {
            v["holder"] = json!(holder);
            v["expires_in_ms"] = json!(expires_in.map(show::ms));
            v["expires_at_unix_ms"] = json!(expires_in.map(show::unix_ms_in));
        }
        OnceStatus::Done(outcome) => outcome_fields(outcome, v),
        _ => {}
    }
    v["runner"] = match info.runner() {
        Some(id) => {
            let id = match &info.status {
                OnceStatus::Done(o) => unless_too_long(&o.too_long, "by", id),
                _ => json!(id),
            };
            let mut runner = json!({ "id": id });
            crate::record_view::record_json(
                info.record.as_ref(),
                info.held_for(),
                info.held_since(),
                &mut runner,
            );
            runner
        }
        None => Value::Null,
    };
    v["subscribers"] = json!(info.subscribers);
    // The recorded run's start and length, when its attempt is the one
    // kept (`ran_at_unix_ms` stays its end).
    if let (OnceStatus::Done(outcome), Some(a)) = (&info.status, &info.last_attempt)
        && a.holder == outcome.by
        && !a.holder.is_empty()
    {
        v["started_at_unix_ms"] = json!(show::unix_ms(a.started_at));
        v["duration_ms"] = json!(outcome.at.duration_since(a.started_at).ok().map(show::ms));
    }
    v["last_attempt"] = info.last_attempt.as_ref().map_or(Value::Null, attempt_json);
}

/// A recorded run's fields for JSON: `ran_at_unix_ms`, `by`,
/// `exit_status`, `host`, `pid` (null when the record was not written by
/// redguard), and how long the record is kept (`expires_in_ms`,
/// `expires_at_unix_ms`).
pub(crate) fn outcome_fields(outcome: &Outcome, v: &mut Value) {
    let record = serde_json::from_slice::<Value>(&outcome.value).ok();
    let field = |name: &str| {
        record
            .as_ref()
            .and_then(|r| r.get(name).cloned())
            .unwrap_or(Value::Null)
    };
    v["ran_at_unix_ms"] = json!(show::unix_ms(outcome.at));
    v["by"] = unless_too_long(&outcome.too_long, "by", &outcome.by);
    v["too_long"] = json!(outcome.too_long);
    v["exit_status"] = field("status");
    v["host"] = field("host");
    v["pid"] = field("pid");
    v["expires_in_ms"] = json!(outcome.expires_in.map(show::ms));
    v["expires_at_unix_ms"] = json!(outcome.expires_in.map(show::unix_ms_in));
}

/// `redguard once --forget KEY`: exit 0 when the record is gone (or there
/// was none), 75 when a run is in progress (left alone).
fn forget(key: &[u8], conn: &Connection) -> Result<ExitCode, Failure> {
    let fail = |e: redguard::Error| lib_failure(&e, key, conn);
    if conn.client.forget_once(key).map_err(fail)? {
        println!(
            "{}: record deleted; the next caller runs CMD",
            show::name(key)
        );
        return Ok(ExitCode::SUCCESS);
    }
    match conn.client.once_status(key).map_err(fail)? {
        OnceStatus::Running { holder, .. } => {
            out::error(&format!(
                "{} is running (holder {holder}); nothing forgotten",
                show::name(key)
            ));
            Ok(ExitCode::from(code::TEMPFAIL))
        }
        _ => {
            println!("{}: no record; nothing forgotten", show::name(key));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A library error for KEY, with the run-once reading of a wrong type.
fn lib_failure(err: &redguard::Error, key: &[u8], conn: &Connection) -> Failure {
    Failure::from_lib_on(err, &conn.server, key, "run-once record")
}

/// The status a later caller exits with: the recorded one, 0 for records
/// not written by this tool.
fn recorded_status(outcome: &Outcome) -> u8 {
    serde_json::from_slice::<Value>(&outcome.value)
        .ok()
        .and_then(|v| v.get("status")?.as_u64())
        .and_then(|s| u8::try_from(s).ok())
        .unwrap_or(0)
}

/// "on HOST (pid P) at TIME (AGO ago), exit status S, holder H; record
/// kept for T".
pub(crate) fn describe(outcome: &Outcome) -> String {
    let record = serde_json::from_slice::<Value>(&outcome.value).ok();
    let field = |name: &str| record.as_ref().and_then(|r| r.get(name).cloned());
    let at = humantime::format_rfc3339_seconds(outcome.at);
    let ago = match SystemTime::now().duration_since(outcome.at) {
        Ok(ago) => format!(" ({} ago)", whole_seconds(ago)),
        Err(_) => String::new(),
    };
    // The outcome is anyone's bytes (up to 1 MiB): its host is escaped,
    // and its pid only shown as a number.
    let place = match (field("host"), field("pid").and_then(|p| p.as_u64())) {
        (Some(Value::String(host)), Some(pid)) => {
            format!("on {} (pid {pid}) ", show::text(&host))
        }
        _ => String::new(),
    };
    let status = match field("status").and_then(|s| s.as_u64()) {
        Some(status) => format!(", exit status {status}"),
        None => String::new(),
    };
    let kept = match outcome.expires_in {
        Some(left) => format!("; record kept for {}", whole_seconds(left)),
        None => String::new(),
    };
    let by = if outcome.too_long.iter().any(|f| f == "by") {
        show::TOO_LONG.to_owned()
    } else {
        show::text(&outcome.by)
    };
    let unread = if outcome.too_long.is_empty() {
        String::new()
    } else {
        format!(
            "; fields too long to read: {} {}",
            outcome.too_long.join(", "),
            show::TOO_LONG
        )
    };
    format!("{place}at {at}{ago}{status}, holder {by}{kept}{unread}")
}

/// "; its lease runs out in 2s unless renewed", or nothing.
/// The runner of `key` that a caller found running, for its message: its
/// host, pid, program and age when its record says (one more round trip),
/// else its holder id and the lease left.
fn runner_text(
    conn: &Connection,
    key: &[u8],
    holder: &str,
    expires_in: Option<Duration>,
) -> String {
    match conn.client.lock(key).inspect() {
        Ok(info)
            if info
                .holders
                .iter()
                .any(|(h, _)| h.as_str() == holder && info.record_of(h).is_some()) =>
        {
            show::describe_holder(&info)
        }
        _ => format!("holder {holder}{}", lease_left(expires_in)),
    }
}

fn lease_left(expires_in: Option<Duration>) -> String {
    match expires_in {
        Some(left) => format!(
            "; its lease runs out in {} unless renewed",
            humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
        ),
        None => String::new(),
    }
}

fn whole_seconds(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// This host's name, for the record ("unknown" when the OS will not say).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".to_owned();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
