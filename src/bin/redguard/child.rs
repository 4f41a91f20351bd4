//! Runs CMD under a held lease, for `exec` and its permit form: starts it
//! (signals to redguard go to CMD meanwhile), watches the lease while it
//! runs, deals with CMD when the lease is lost, and maps its end to an exit
//! status as a shell would.

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
use crate::fail::{Failure, code};
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
    mut cmd: Command,
    program: &OsStr,
    relay: &Relay,
    is_lost: &dyn Fn() -> bool,
    loss: &OnLoss<'_>,
) -> Result<CmdEnd, Failure> {
    // Interactive use (redguard in the terminal's foreground group): CMD
    // stays in that group, so job control and terminal input work and the
    // terminal's own signals reach it directly. Batch use: CMD leads a
    // group of its own, so that forwarded signals and a kill on a lost
    // lease reach everything CMD started.
    let own_group = !in_terminal_foreground();
    if own_group {
        cmd.process_group(0);
    }
    stop_with_parent(&mut cmd);

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
        Err(e) => return Err(spawn_failure(program, &e)),
    }

    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status: ExitStatus = loop {
        match relay.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                // Cannot happen for a child we own; leaving stops CMD
                // through its parent-death signal.
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

/// CMD's status as a shell reports it: its exit code, or 128 + the signal
/// that killed it.
fn exit_status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => code::SIGNAL_BASE.saturating_add((signal & 0x7f) as u8),
        (None, None) => code::SOFTWARE,
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

/// Makes the kernel send CMD SIGTERM when redguard dies (even by SIGKILL),
/// so that CMD does not go on after the lock stopped being renewed.
#[cfg(target_os = "linux")]
fn stop_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid); it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // redguard died between fork and prctl: do not start CMD.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn stop_with_parent(_cmd: &mut Command) {}

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

fn spawn_failure(program: &OsStr, err: &io::Error) -> Failure {
    let shown = program.to_string_lossy();
    match err.kind() {
        io::ErrorKind::NotFound => {
            Failure::new(code::NOT_FOUND, format!("{shown}: command not found"))
        }
        _ => Failure::new(code::CANNOT_EXECUTE, format!("{shown}: cannot run: {err}")),
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
