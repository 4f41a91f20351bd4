//! The supervisor (Linux): redguard re-executed as a small process that
//! sits between redguard and CMD, so that CMD's whole process tree goes
//! when redguard goes, however redguard ends (`kill -9` and the OOM killer
//! included), and the lock is never given back while any of the tree runs.
//!
//! ```text
//! redguard (holds the lock; child subreaper)
//!  └─ redguard-supervisor (child subreaper; parent-death signal SIGTERM)
//!      └─ CMD ─ … every descendant, daemons that called setsid(2) included
//! ```
//!
//! * **redguard dies**: the kernel sends the supervisor SIGTERM (its
//!   parent-death signal); the supervisor sees that its parent changed and
//!   kills every descendant with SIGKILL, one generation at a time
//!   ([`tree::kill_all_children`]). Being a subreaper, it inherits every
//!   orphan of the tree, so a process that left CMD's process group or
//!   session is still found. Redguard's lease then runs out on its own.
//! * **the supervisor dies** (even by SIGKILL): its children are
//!   reparented to redguard, a subreaper too; redguard reaps the supervisor
//!   and kills what is left the same way before it releases the lock.
//! * **CMD ends**: the supervisor stops what CMD left running (SIGTERM,
//!   SIGKILL after `--kill-grace`), then exits with CMD's status as a shell
//!   reports it (the code, or 128 + N for signal N), which redguard passes
//!   on; redguard releases the lock only after that.
//!
//! Signals: in batch use the supervisor leads the process group that CMD
//! runs in, so redguard's forwarded signals reach CMD directly and the
//! supervisor ignores its copy. In interactive use (everything in the
//! terminal's foreground group) redguard sends forwarded signals to the
//! supervisor, which passes on those not sent by the kernel (the terminal's
//! reached CMD already).
//!
//! The parent-death signal fires when the *thread* that started the
//! supervisor ends: redguard starts it from its main thread, whose end is
//! redguard's end.
//!
//! What is not covered: redguard and the supervisor killed at the same
//! moment (e.g. `kill -9` of a process group holding both, which only an
//! interactive run has), or redguard killed while it kills what a dead
//! supervisor left. Descendants that left CMD's process group then outlive
//! both. Processes handed to a service manager (`systemd-run`, `docker
//! run`) are not CMD's descendants and are not covered either.
//!
//! The supervisor is started as `/proc/self/exe` (the running redguard,
//! even if its file was replaced since) with `argv[0]` `redguard-supervisor`,
//! CMD as the other arguments, and [`ENV`] set; [`main`] runs instead of the
//! CLI when [`ENV`] is present. CMD does not inherit [`ENV`].

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

use crate::fail::{Failure, code};
use crate::fail::{exit_status_code, spawn_failure};
use crate::out;
use crate::tree;

/// Set in the supervisor's environment (only there): `<redguard's pid>
/// <1 if it leads CMD's process group, else 0> <kill grace in ms>`.
pub(crate) const ENV: &str = "REDGUARD_SUPERVISOR";

/// Signals the supervisor catches so that they do not end it: the ones
/// redguard forwards, SIGTERM also being its parent-death signal.
const CAUGHT: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// What redguard tells its supervisor.
#[derive(Debug, PartialEq)]
struct Spec {
    /// Redguard's pid: the supervisor's parent until redguard dies.
    parent: libc::pid_t,
    /// The supervisor leads the process group CMD runs in, and redguard
    /// signals that group; otherwise redguard signals the supervisor.
    own_group: bool,
    /// How long what CMD left running gets between SIGTERM and SIGKILL.
    grace: Duration,
}

impl Spec {
    fn encode(&self) -> String {
        format!(
            "{} {} {}",
            self.parent,
            u8::from(self.own_group),
            self.grace.as_millis()
        )
    }

    fn decode(text: &OsStr) -> Option<Spec> {
        let text = text.to_str()?;
        let mut fields = text.split(' ');
        let parent = fields.next()?.parse().ok()?;
        let own_group = match fields.next()? {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        let grace = Duration::from_millis(fields.next()?.parse().ok()?);
        fields.next().is_none().then_some(Spec {
            parent,
            own_group,
            grace,
        })
    }
}

/// The command that runs `cmd` under a supervisor: same arguments,
/// environment changes and directory. `own_group`: the caller puts the
/// supervisor in a new process group (CMD joins it). `grace`: see
/// [`Spec::grace`].
pub(crate) fn command(cmd: &Command, own_group: bool, grace: Duration) -> Command {
    let mut supervisor = Command::new("/proc/self/exe");
    supervisor
        .arg0("redguard-supervisor")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => supervisor.env(key, value),
            None => supervisor.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        supervisor.current_dir(dir);
    }
    let spec = Spec {
        parent: std::process::id() as libc::pid_t,
        own_group,
        grace,
    };
    supervisor.env(ENV, spec.encode());
    supervisor
}

/// The supervisor process: runs CMD (the arguments after `argv[0]`) as
/// [the module](self) says and exits with CMD's status.
pub(crate) fn main(spec: &OsStr) -> ExitCode {
    match run(spec) {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            out::error(&failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(spec: &OsStr) -> Result<u8, Failure> {
    let spec = Spec::decode(spec).ok_or_else(|| {
        Failure::new(
            code::USAGE,
            format!("{ENV} is set to {spec:?}; it is redguard's own, not to be set by hand"),
        )
    })?;
    let mut args = std::env::args_os().skip(1);
    let program: OsString = args
        .next()
        .ok_or_else(|| Failure::new(code::USAGE, "the supervisor got no CMD"))?;
    let os_failure = |what: &str, e: std::io::Error| {
        Failure::new(code::OSERR, format!("cannot supervise CMD: {what}: {e}"))
    };

    // Named like its binary, not "exe" (it was started as /proc/self/exe).
    tree::set_name(c"redguard");
    // Handlers first, so that the parent-death signal cannot end the
    // supervisor, and before CMD starts, so that no SIGCHLD is missed.
    let mut signals =
        SignalsInfo::<WithOrigin>::new(CAUGHT).map_err(|e| os_failure("signal handlers", e))?;
    signals
        .add_signal(SIGCHLD)
        .map_err(|e| os_failure("signal handlers", e))?;
    tree::set_parent_death_signal(SIGTERM).map_err(|e| os_failure("parent-death signal", e))?;
    let parent_gone = || tree::parent() != spec.parent;
    if parent_gone() {
        // Redguard died before the signal was armed: nothing to run for.
        return Ok(code::SOFTWARE);
    }
    tree::become_subreaper().map_err(|e| os_failure("child subreaper", e))?;

    let mut cmd = Command::new(&program);
    cmd.args(args).env_remove(ENV);
    // The handle is not kept: children are reaped here with waitpid(-1),
    // CMD among them (dropping a Child neither waits nor kills).
    let cmd_pid = cmd.spawn().map_err(|e| spawn_failure(&program, &e))?.id() as libc::pid_t;

    let mut pending: Vec<(i32, bool)> = Vec::new();
    let status = loop {
        if parent_gone() {
            tree::kill_all_children();
            return Ok(code::SIGNAL_BASE + libc::SIGKILL as u8);
        }
        if let Some(status) = tree::reap(cmd_pid) {
            break status;
        }
        // CMD is not reaped yet, so its pid is still CMD's.
        for (signal, from_kernel) in pending.drain(..) {
            if !spec.own_group && !from_kernel && CAUGHT.contains(&signal) {
                // SAFETY: kill(2) on our unreaped child.
                unsafe {
                    libc::kill(cmd_pid, signal);
                }
            }
        }
        pending.extend(
            signals
                .wait()
                .map(|origin| (origin.signal, origin.cause == Cause::Kernel)),
        );
    };
    tree::stop_children(spec.grace, &parent_gone);
    Ok(exit_status_code(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_and_bad_ones_are_refused() {
        let spec = Spec {
            parent: 4242,
            own_group: true,
            grace: Duration::from_millis(1500),
        };
        assert_eq!(Spec::decode(OsStr::new(&spec.encode())), Some(spec));
        for bad in ["", "1 1", "1 2 3", "x 1 3", "1 0 3 4"] {
            assert_eq!(Spec::decode(OsStr::new(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn the_supervisor_command_carries_cmd_and_its_environment() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "true"]).env("REDGUARD_LOCK", "x");
        let supervisor = command(&cmd, false, Duration::from_secs(1));
        let args: Vec<&OsStr> = supervisor.get_args().collect();
        assert_eq!(args, ["sh", "-c", "true"]);
        let envs: Vec<_> = supervisor.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("REDGUARD_LOCK"), Some(OsStr::new("x")))));
        assert!(envs.iter().any(|(k, _)| *k == ENV));
    }
}
