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
use crate::signals::Relay;
use crate::stop_margin::{STOP_MARGIN, monotonic_ns, ns};

/// How often CMD's state and the lease are checked while CMD runs. The
/// lease check is local (no round trip), so this only bounds how late a
/// lost lease or CMD's end is noticed, and how late a renewal's new
/// deadline reaches the supervisor; near the time CMD would be stopped,
/// [`SUPERVISE_CLOSE`] is used instead.
const SUPERVISE_EVERY: Duration = Duration::from_millis(50);

/// The check period when SIGTERM is less than [`CLOSE_TO_STOP`] away: a
/// renewal that lands then reaches the supervisor within it.
const SUPERVISE_CLOSE: Duration = Duration::from_millis(5);
const CLOSE_TO_STOP: Duration = Duration::from_millis(100);

/// How a CMD run under a lease ended.
pub(crate) enum CmdEnd {
    /// A signal reached redguard before CMD could start: CMD was not run
    /// (the message is printed); exit with this status.
    NotStarted(ExitCode),
    /// CMD ended with `code` (its exit status as a shell reports it;
    /// [`code::TIMED_OUT`] when it ran past its time limit and was
    /// stopped); `lost`: the lease was lost, or ran so low that CMD was
    /// stopped, while it ran, and CMD was dealt with as the [`OnLoss`]
    /// said; `timed_out`: CMD ran past the limit.
    Ended {
        code: u8,
        lost: bool,
        timed_out: bool,
    },
}

/// What to do about CMD when the lease is lost while it runs, and how to
/// say so.
pub(crate) struct OnLoss<'a> {
    pub(crate) action: OnLost,
    /// Between SIGTERM and SIGKILL; fits the lease ([`crate::margins`]).
    pub(crate) kill_grace: Duration,
    /// What happened, e.g. "lost the lease".
    pub(crate) why: &'a str,
    /// Of what, e.g. `lock "nightly"`.
    pub(crate) subject: String,
    /// The lease is a fixed one (`--lease`), never renewed.
    pub(crate) fixed: bool,
}

impl OnLoss<'_> {
    /// The message when CMD is stopped because the lease is about to end
    /// (`left` from now) with no renewal in sight.
    fn running_out(&self, left: Duration) -> String {
        let (why, subject) = (self.why, &self.subject);
        let left = humantime::format_duration(Duration::from_millis(left.as_millis() as u64));
        let grace = humantime::format_duration(self.kill_grace);
        if self.fixed {
            format!(
                "{why} of {subject}: it ends in {left}; stopping CMD before it does \
                 (SIGTERM now, SIGKILL in {grace})"
            )
        } else {
            // Most often a failover slower than the lease allows: say
            // where the sizing rule is.
            format!(
                "{why} of {subject}: no renewal came through, and it ends in {left}; \
                 stopping CMD before it does (SIGTERM now, SIGKILL in {grace}). A \
                 failover must end within a third of --watchdog-timeout: see \
                 \"Failover sizing\" in docs/DEPLOYMENTS.md"
            )
        }
    }
}

/// How CMD ended, for the log line: its status as a shell reports it
/// (`code`), and why redguard stopped it, if it did.
fn ended_text(code: u8, timed_out: bool, lost: bool) -> String {
    if timed_out {
        return format!("stopped by --timeout, status {code}");
    }
    let signal = code
        .checked_sub(code::SIGNAL_BASE)
        .filter(|s| *s > 0)
        .map(|s| format!(" ({})", signal_name(i32::from(s))))
        .unwrap_or_default();
    let why = if lost { ", stopped: lease lost" } else { "" };
    format!("status {code}{signal}{why}")
}

/// Starts CMD (unless a signal already arrived) and waits for it while
/// watching the lease with `valid_for` (how much longer it is known valid
/// on this host's clock; zero once lost). Signals to redguard go to CMD
/// meanwhile (the relay). With `--on-lost kill`, CMD's tree is gone before
/// the lease's local deadline whatever stops the renewals, redguard
/// stopped included: see [`crate::margins`] and [`crate::supervisor`].
/// With a `limit` (`--timeout`), CMD is stopped once it has run that long
/// (SIGTERM, then SIGKILL after the kill grace), as `timeout(1)` does.
pub(crate) fn run_cmd(
    cmd: Command,
    program: &OsStr,
    relay: &Relay,
    valid_for: &dyn Fn() -> Duration,
    loss: &OnLoss<'_>,
    limit: Option<Duration>,
) -> Result<CmdEnd, Failure> {
    // Interactive use (redguard in the terminal's foreground group): CMD
    // stays in that group, so job control and terminal input work and the
    // terminal's own signals reach it directly. Batch use: CMD leads a
    // group of its own (on Linux, its supervisor leads it), so that
    // forwarded signals and a kill on a lost lease reach everything CMD
    // started.
    let own_group = !in_terminal_foreground();
    let enforce = matches!(loss.action, OnLost::Kill);
    // Read before the lease: a deadline only ever errs early.
    let deadline_now = || {
        let now = monotonic_ns();
        now.saturating_add(ns(valid_for()))
    };
    let (mut cmd, mut link, theirs) =
        supervised(cmd, own_group, loss.kill_grace, enforce.then(deadline_now))?;
    if own_group {
        cmd.process_group(0);
    }

    // Spawned from this (the main) thread: the supervisor's parent-death
    // signal fires when the spawning thread ends.
    let spawned = relay.start_child(own_group, || cmd.spawn());
    // The supervisor has its end of the link now (or never will).
    drop(theirs);
    match spawned {
        Ok(Some(pid)) => {
            let whose = if cfg!(target_os = "linux") {
                "its supervisor's pid"
            } else {
                "pid"
            };
            log::info!(
                "redguard: started CMD {} ({whose} {pid})",
                crate::show::name(program.as_bytes())
            );
        }
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

    let stop_before = loss.kill_grace + STOP_MARGIN;
    let started = Instant::now();
    let mut lost_at: Option<Instant> = None;
    let mut timed_out_at: Option<Instant> = None;
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
        if let (Some(limit), None, None) = (limit, timed_out_at, lost_at)
            && started.elapsed() >= limit
        {
            timed_out_at = Some(Instant::now());
            out::error(&format!(
                "CMD ran past --timeout {}; stopping it (SIGTERM now, SIGKILL in {})",
                humantime::format_duration(limit),
                humantime::format_duration(loss.kill_grace)
            ));
            if let Some(link) = link.as_mut() {
                link.stopping_cmd();
            }
            relay.signal_child(libc::SIGTERM);
        }
        if let (Some(at), false) = (timed_out_at, killed)
            && at.elapsed() >= loss.kill_grace
        {
            relay.signal_child(libc::SIGKILL);
            killed = true;
        }
        let left = valid_for();
        let mut pause = SUPERVISE_EVERY;
        if lost_at.is_none() {
            let supervisor_stopping = link.as_mut().is_some_and(|l| l.supervisor_stopping());
            // Without a supervisor (not Linux), redguard keeps the
            // deadline itself.
            let running_out = enforce && link.is_none() && left <= stop_before;
            if supervisor_stopping || (running_out && !left.is_zero()) {
                lost_at = Some(Instant::now());
                out::error(&loss.running_out(left));
                if !supervisor_stopping {
                    relay.signal_child(libc::SIGTERM);
                }
            } else if left.is_zero() {
                lost_at = Some(Instant::now());
                let (why, subject) = (loss.why, &loss.subject);
                match loss.action {
                    OnLost::Kill => {
                        out::error(&format!(
                            "{why} of {subject} while CMD ran; stopping CMD (SIGTERM now, SIGKILL in {})",
                            humantime::format_duration(loss.kill_grace)
                        ));
                        if let Some(link) = link.as_mut() {
                            link.stopping_cmd();
                        }
                        relay.signal_child(libc::SIGTERM);
                    }
                    OnLost::Warn => out::warn(&format!(
                        "{why} of {subject} while CMD runs; CMD goes on (--on-lost warn)"
                    )),
                }
            } else if enforce {
                if let Some(link) = link.as_mut() {
                    link.deadline(deadline_now());
                }
                if left.saturating_sub(stop_before) < CLOSE_TO_STOP {
                    pause = SUPERVISE_CLOSE;
                }
            }
        }
        if let (Some(at), OnLost::Kill, false) = (lost_at, loss.action, killed)
            && (at.elapsed() >= loss.kill_grace || (link.is_none() && left <= STOP_MARGIN))
        {
            relay.signal_child(libc::SIGKILL);
            killed = true;
        }
        thread::park_timeout(pause);
    };
    // The lock is released only after this: nothing of CMD's is left.
    kill_leftovers();
    if lost_at.is_none() && link.as_mut().is_some_and(|l| l.supervisor_stopping()) {
        // The supervisor stopped CMD at the lease's end before redguard
        // saw it do so: redguard was stopped or starved, or CMD ended at
        // once on SIGTERM.
        lost_at = Some(Instant::now());
        let cause = if loss.fixed {
            ""
        } else {
            ": no renewal came through in time (Redis unreachable, or redguard stopped or starved)"
        };
        out::error(&format!(
            "{} of {}{cause}; CMD was stopped before the lease ended",
            loss.why, loss.subject
        ));
    } else if let (true, false, Some(signal)) = (cfg!(target_os = "linux"), killed, status.signal())
        && lost_at.is_none()
    {
        out::warn(&format!(
            "CMD's supervisor was killed by {}; CMD and all it started were killed",
            signal_name(signal)
        ));
    }
    let code = if timed_out_at.is_some() {
        code::TIMED_OUT
    } else {
        exit_status_code(status)
    };
    log::info!(
        "redguard: CMD ended after {}: {}",
        crate::show::left(started.elapsed()),
        ended_text(code, timed_out_at.is_some(), lost_at.is_some())
    );
    Ok(CmdEnd::Ended {
        code,
        lost: lost_at.is_some(),
        timed_out: timed_out_at.is_some(),
    })
}

/// The kill grace `exec` uses with `args`' lease (`--lease`, else the
/// watchdog's, `watchdog`): see [`crate::stop_margin::kill_grace`]. Unchecked
/// with `--on-lost warn`, which never kills.
///
/// # Errors
///
/// A usage error when the lease is too short for the grace.
pub(crate) fn exec_kill_grace(args: &ExecArgs, watchdog: Duration) -> Result<Duration, Failure> {
    let (lease, option) = match args.lease {
        Some(lease) => (
            lease,
            format!("--lease {}", humantime::format_duration(lease)),
        ),
        None => (
            watchdog,
            format!(
                "the watchdog lease (--watchdog-timeout {})",
                humantime::format_duration(watchdog)
            ),
        ),
    };
    match args.on_lost {
        OnLost::Kill => crate::stop_margin::kill_grace(args.kill_grace, lease, &option),
        OnLost::Warn => Ok(args
            .kill_grace
            .unwrap_or(crate::stop_margin::DEFAULT_KILL_GRACE)),
    }
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
    let known = [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGPIPE, "SIGPIPE"),
        #[cfg(any(target_os = "linux", target_os = "android"))]
        (libc::SIGPWR, "SIGPWR"),
        #[cfg(any(target_os = "linux", target_os = "android"))]
        (libc::SIGSTKFLT, "SIGSTKFLT"),
    ];
    match known.iter().find(|(n, _)| *n == signal) {
        Some((_, name)) => (*name).to_owned(),
        None => format!("signal {signal}"),
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

/// Redguard's end of the link to CMD's supervisor.
#[cfg(target_os = "linux")]
type Link = crate::supervisor::Link;

/// No supervisor elsewhere: nothing to link to.
#[cfg(not(target_os = "linux"))]
struct Link;

#[cfg(not(target_os = "linux"))]
impl Link {
    fn deadline(&mut self, _at: u64) {}
    fn stopping_cmd(&mut self) {}
    fn supervisor_stopping(&mut self) -> bool {
        false
    }
}

/// On Linux, `cmd` run by a supervisor (see [`crate::supervisor`]), with
/// redguard a child subreaper so that it inherits the tree if the
/// supervisor dies, and the link that keeps the supervisor told of the
/// lease's deadline (`None`: CMD may outlive the lease), and the
/// supervisor's end of it, to be closed here once the supervisor is
/// spawned.
#[cfg(target_os = "linux")]
fn supervised(
    cmd: Command,
    own_group: bool,
    grace: Duration,
    deadline: Option<u64>,
) -> Result<(Command, Option<Link>, Option<std::os::fd::OwnedFd>), Failure> {
    let failure = |what: &str, e: io::Error| {
        Failure::new(code::OSERR, format!("cannot supervise CMD: {what}: {e}"))
    };
    crate::tree::become_subreaper().map_err(|e| failure("child subreaper", e))?;
    let (supervisor, link, theirs) = crate::supervisor::command(&cmd, own_group, grace, deadline)
        .map_err(|e| failure("socket pair", e))?;
    Ok((supervisor, Some(link), Some(theirs)))
}

/// Elsewhere CMD runs as redguard's child: if redguard is killed, CMD and
/// what it started go on running, and redguard keeps the deadline itself.
#[cfg(not(target_os = "linux"))]
fn supervised(
    cmd: Command,
    _own_group: bool,
    _grace: Duration,
    _deadline: Option<u64>,
) -> Result<(Command, Option<Link>, Option<std::os::fd::OwnedFd>), Failure> {
    Ok((cmd, None, None))
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
/// warning names no failover: on a single server there is none. `true`
/// when no release is left pending and none was given up since `failed`
/// ([`redguard::Stats::failed_releases`] read before the release).
pub(crate) fn await_release(
    client: &redguard::Client,
    what: &str,
    lease: Duration,
    quiet: bool,
    failed: u64,
) -> bool {
    if client.stats().pending_releases == 0 {
        return client.stats().failed_releases == failed;
    }
    if !quiet {
        out::warn(&format!(
            "the release of {what} did not go through at once; retrying it \
             (for at most {})",
            humantime::format_duration(lease)
        ));
    }
    let through = client.await_releases(lease) && client.stats().failed_releases == failed;
    if !through && !quiet {
        out::warn(&format!(
            "could not release {what}; it frees itself when its lease runs out"
        ));
    }
    through
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
