//! Runs CMD under a held lease, for `exec` and its permit form: starts it
//! (signals to redguard go to CMD meanwhile), watches the lease while it
//! runs, deals with CMD when the lease is lost, and maps its end to an exit
//! status as a shell would.
//!
//! On Linux CMD runs under a supervisor ([`crate::supervisor`]), so that
//! its whole process tree is killed when redguard dies, and nothing of it
//! is left running when `run_cmd` returns and the lock is released.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{ExecArgs, OnLost};
use crate::fail::{Failure, code, exit_status_code};
use crate::out;
use crate::relay::Relay;

/// How often CMD's state and the lease are checked while CMD runs. The
/// lease check is local (no round trip), so this only bounds how late a
/// lost lease or CMD's end is noticed.
const SUPERVISE_EVERY: Duration = Duration::from_millis(50);

/// How a CMD run under a lease ended.
pub(crate) enum CmdEnd {
    /// A signal reached redguard before CMD could start: CMD was not run
    /// (the message is printed); exit with this status.
    NotStarted(ExitCode),
    /// CMD ended with `code` (its exit status as a shell reports it);
    /// `lost`: the lease was lost while it ran, and CMD was dealt with as
    /// the [`OnLoss`] said.
    Ended { code: u8, lost: bool },
}

/// What to do about CMD when the lease is lost while it runs, and how to
/// say so.
pub(crate) struct OnLoss<'a> {
    pub(crate) action: OnLost,
    pub(crate) kill_grace: Duration,
    /// What happened, e.g. "lost the lease".
    pub(crate) why: &'a str,
    /// Of what, e.g. `lock "nightly"`.
    pub(crate) subject: String,
}

/// Starts CMD (unless a signal already arrived) and waits for it while
/// watching the lease with `is_lost`. Signals to redguard go to CMD
/// meanwhile (the relay).
pub(crate) fn run_cmd(
    cmd: Command,
    program: &OsStr,
    relay: &Relay,
    is_lost: &dyn Fn() -> bool,
    loss: &OnLoss<'_>,
) -> Result<CmdEnd, Failure> {
    // Interactive use (redguard in the terminal's foreground group): CMD
    // stays in that group, so job control and terminal input work and the
    // terminal's own signals reach it directly. Batch use: CMD leads a
    // group of its own (on Linux, its supervisor leads it), so that
    // forwarded signals and a kill on a lost lease reach everything CMD
    // started.
    let own_group = !in_terminal_foreground();
    let mut cmd = supervised(cmd, own_group, loss.kill_grace)?;
    if own_group {
        cmd.process_group(0);
    }

    // Spawned from this (the main) thread: the supervisor's parent-death
    // signal fires when the spawning thread ends.
    match relay.start_child(own_group, || cmd.spawn()) {
        Ok(Some(_pid)) => {}
        Ok(None) => {
            let signal = relay.interrupted().unwrap_or(libc::SIGTERM);
            out::error(&format!(
                "{} before CMD started; CMD not run",
                signal_name(signal)
            ));
            return Ok(CmdEnd::NotStarted(signal_exit(signal)));
        }
        Err(e) => return Err(start_failure(program, &e)),
    }

    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status: ExitStatus = loop {
        match relay.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                // Cannot happen for a child we own.
                kill_leftovers();
                return Err(Failure::new(
                    code::OSERR,
                    format!("cannot wait for CMD: {e}"),
                ));
            }
        }
        if lost_at.is_none() && is_lost() {
            lost_at = Some(Instant::now());
            let (why, subject) = (loss.why, &loss.subject);
            match loss.action {
                OnLost::Kill => {
                    out::error(&format!(
                        "{why} of {subject} while CMD ran; stopping CMD (SIGTERM now, SIGKILL in {})",
                        humantime::format_duration(loss.kill_grace)
                    ));
                    relay.signal_child(libc::SIGTERM);
                }
                OnLost::Warn => out::warn(&format!(
                    "{why} of {subject} while CMD runs; CMD goes on (--on-lost warn)"
                )),
            }
        }
        if let (Some(at), OnLost::Kill, false) = (lost_at, loss.action, killed)
            && at.elapsed() >= loss.kill_grace
        {
            relay.signal_child(libc::SIGKILL);
            killed = true;
        }
        thread::park_timeout(SUPERVISE_EVERY);
    };
    // The lock is released only after this: nothing of CMD's is left.
    kill_leftovers();
    if let (true, false, Some(signal)) = (cfg!(target_os = "linux"), killed, status.signal()) {
        out::warn(&format!(
            "CMD's supervisor was killed by {}; CMD and all it started were killed",
            signal_name(signal)
        ));
    }
    Ok(CmdEnd::Ended {
        code: exit_status_code(status),
        lost: lost_at.is_some(),
    })
}

pub(crate) fn lost_reason(args: &ExecArgs) -> String {
    match args.lease {
        Some(lease) => format!(
            "the fixed lease (--lease {}) ran out or was lost",
            humantime::format_duration(lease)
        ),
        None => "lost the lease".to_owned(),
    }
}

pub(crate) fn signal_exit(signal: i32) -> ExitCode {
    ExitCode::from(code::SIGNAL_BASE.saturating_add((signal & 0x7f) as u8))
}

pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        n => format!("signal {n}"),
    }
}

/// `true` when a terminal on stdin, stdout or stderr has redguard's process
/// group in the foreground: redguard was started interactively.
fn in_terminal_foreground() -> bool {
    // SAFETY: getpgrp and tcgetpgrp only read process state; tcgetpgrp on a
    // descriptor that is not a terminal fails with -1.
    let own = unsafe { libc::getpgrp() };
    [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO]
        .into_iter()
        .any(|fd| unsafe { libc::tcgetpgrp(fd) } == own)
}

/// On Linux, `cmd` run by a supervisor (see [`crate::supervisor`]), with
/// redguard a child subreaper so that it inherits the tree if the
/// supervisor dies.
#[cfg(target_os = "linux")]
fn supervised(cmd: Command, own_group: bool, grace: Duration) -> Result<Command, Failure> {
    crate::tree::become_subreaper().map_err(|e| {
        Failure::new(
            code::OSERR,
            format!("cannot supervise CMD: child subreaper: {e}"),
        )
    })?;
    Ok(crate::supervisor::command(&cmd, own_group, grace))
}

/// Elsewhere CMD runs as redguard's child: if redguard is killed, CMD and
/// what it started go on running.
#[cfg(not(target_os = "linux"))]
fn supervised(cmd: Command, _own_group: bool, _grace: Duration) -> Result<Command, Failure> {
    Ok(cmd)
}

/// Kills whatever is left of CMD's tree once the supervisor has ended
/// (normally nothing: a supervisor stops CMD's leftovers before it exits;
/// after it was killed, CMD and its descendants, reparented to redguard).
#[cfg(target_os = "linux")]
fn kill_leftovers() {
    crate::tree::kill_all_children();
}

#[cfg(not(target_os = "linux"))]
fn kill_leftovers() {}

/// CMD could not be started: on Linux this is the supervisor (redguard's
/// own binary, CMD was checked by [`preflight`]; CMD's own start failure
/// is reported by the supervisor, with the same statuses).
#[cfg(target_os = "linux")]
fn start_failure(_program: &OsStr, err: &io::Error) -> Failure {
    Failure::new(
        code::OSERR,
        format!("cannot start CMD's supervisor (/proc/self/exe): {err}"),
    )
}

#[cfg(not(target_os = "linux"))]
fn start_failure(program: &OsStr, err: &io::Error) -> Failure {
    crate::fail::spawn_failure(program, err)
}

/// Checks that CMD can be found and run, as a shell would before running
/// it: 127 when it is not found, 126 when it is not executable.
pub(crate) fn preflight(program: &OsStr) -> Result<(), Failure> {
    let shown = program.to_string_lossy();
    let check = |path: &Path| -> Option<Result<(), Failure>> {
        let meta = std::fs::metadata(path).ok()?;
        if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
            return Some(Err(Failure::new(
                code::CANNOT_EXECUTE,
                format!("{shown}: permission denied (not an executable file)"),
            )));
        }
        Some(Ok(()))
    };
    let not_found = || Failure::new(code::NOT_FOUND, format!("{shown}: command not found"));
    if program.as_bytes().contains(&b'/') {
        return check(Path::new(program)).unwrap_or_else(|| Err(not_found()));
    }
    let Some(path) = std::env::var_os("PATH") else {
        // No PATH: leave the search to spawn (and its error).
        return Ok(());
    };
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        match check(&dir.join(program)) {
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) => denied = denied.or(Some(e)),
            None => {}
        }
    }
    Err(denied.unwrap_or_else(not_found))
}

/// Before the process exits (and takes the watchdog with it): waits for a
/// release that failed on a connection error or a failover and is being
/// retried (against the new master, after a failover), at most `lease`
/// (the retry ends by then anyway). Without this, a lock replicated to a
/// new master would block every waiter until its lease ran out. The
/// warning names no failover: on a single server there is none.
pub(crate) fn await_release(client: &redguard::Client, what: &str, lease: Duration, quiet: bool) {
    if client.stats().pending_releases == 0 {
        return;
    }
    if !quiet {
        out::warn(&format!(
            "the release of {what} did not go through at once; retrying it \
             (for at most {})",
            humantime::format_duration(lease)
        ));
    }
    if !client.await_releases(lease) && !quiet {
        out::warn(&format!(
            "could not release {what}; it frees itself when its lease runs out"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_finds_commands_like_a_shell() {
        assert!(preflight(OsStr::new("sh")).is_ok());
        assert_eq!(
            preflight(OsStr::new("no-such-command-redguard"))
                .unwrap_err()
                .code,
            code::NOT_FOUND
        );
        assert_eq!(
            preflight(OsStr::new("/no/such/file")).unwrap_err().code,
            code::NOT_FOUND
        );
        assert_eq!(
            preflight(OsStr::new("/")).unwrap_err().code,
            code::CANNOT_EXECUTE
        );
    }

    #[test]
    fn statuses_map_like_a_shell() {
        assert_eq!(exit_status_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_status_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
