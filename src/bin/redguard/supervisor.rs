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
//! * **the lease runs out** (renewals stopped: partition, refused renewal,
//!   redguard stopped with SIGSTOP, hung or starved): redguard tells the
//!   supervisor its local deadline at the start and after every renewal,
//!   over a socket pair (a line `D <CLOCK_MONOTONIC ns>`). The supervisor
//!   keeps it on its own: at `deadline − kill grace − STOP_MARGIN` it sends
//!   SIGTERM to the tree (CMD's process group and every child) and tells
//!   redguard (`S`), at `deadline − STOP_MARGIN` it kills the tree with
//!   SIGKILL and exits, all before the key can expire on the server
//!   ([`crate::margins`]). Redguard reports the loss (exit 70) when it runs
//!   again. When redguard itself starts stopping CMD (a renewal refused) it
//!   says so (`T`), and the supervisor then only keeps the SIGKILL time.
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
//! CLI when [`ENV`] is present. CMD inherits neither [`ENV`] nor the socket.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use signal_hook::consts::{SIGCHLD, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

use crate::fail::{Failure, code};
use crate::fail::{exit_status_code, spawn_failure};
use crate::out;
use crate::signals::caught;
use crate::stop_margin::{STOP_MARGIN, monotonic_ns, ns};
use crate::tree;

/// Set in the supervisor's environment (only there): `<redguard's pid>
/// <1 if it leads CMD's process group, else 0> <kill grace in ms> <the
/// socket's descriptor, or -1> <the local deadline in CLOCK_MONOTONIC ns,
/// or 0 for none>`.
pub(crate) const ENV: &str = "REDGUARD_SUPERVISOR";

/// How often the tree is looked at again while it is being stopped: an
/// orphan adopted by the subreaper raises no event to wait on. Each look
/// is a /proc scan, so not too often on a loaded host.
const STOP_POLL: Duration = Duration::from_millis(50);

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
    /// The supervisor's end of the socket pair to redguard, if any.
    link: Option<RawFd>,
    /// The lease's local deadline (CLOCK_MONOTONIC ns) when CMD starts;
    /// `None`: CMD is not stopped at the lease's end (`--on-lost warn`).
    deadline: Option<u64>,
}

impl Spec {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.parent,
            u8::from(self.own_group),
            self.grace.as_millis(),
            self.link.unwrap_or(-1),
            self.deadline.unwrap_or(0)
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
        let link: RawFd = fields.next()?.parse().ok()?;
        let deadline: u64 = fields.next()?.parse().ok()?;
        fields.next().is_none().then_some(Spec {
            parent,
            own_group,
            grace,
            link: (link >= 0).then_some(link),
            deadline: (deadline > 0).then_some(deadline),
        })
    }
}

/// Redguard's end of the link to its supervisor: passes on each new
/// deadline, says when redguard stops CMD itself, and hears when the
/// supervisor stopped it because the lease was running out.
pub(crate) struct Link {
    stream: UnixStream,
    /// The last deadline sent (CLOCK_MONOTONIC ns).
    sent: u64,
    /// The supervisor said it is stopping CMD at the lease's end.
    stopping: bool,
}

impl Link {
    /// Tells the supervisor the lease's local deadline, when it moved by
    /// more than a millisecond (the two clock reads behind `at` differ by
    /// a little every time; a deadline kept a little early is safe).
    pub(crate) fn deadline(&mut self, at: u64) {
        if at.abs_diff(self.sent) > 1_000_000 {
            self.sent = at;
            let _ = writeln!(self.stream, "D {at}");
        }
    }

    /// Tells the supervisor that redguard sent SIGTERM to CMD itself.
    pub(crate) fn stopping_cmd(&mut self) {
        let _ = self.stream.write_all(b"T\n");
    }

    /// `true` once the supervisor said it began stopping CMD because the
    /// lease was running out.
    pub(crate) fn supervisor_stopping(&mut self) -> bool {
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = self.stream.read(&mut buf) {
            self.stopping |= buf[..n].contains(&b'S');
        }
        self.stopping
    }
}

/// The command that runs `cmd` under a supervisor: same arguments,
/// environment changes and directory. `own_group`: the caller puts the
/// supervisor in a new process group (CMD joins it). `grace`: see
/// [`Spec::grace`]. `deadline`: the lease's local deadline (CLOCK_MONOTONIC
/// ns), or `None` for CMD to outlive the lease (`--on-lost warn`). With
/// the command, redguard's end of the link; the supervisor's end must be
/// dropped once the command is spawned.
pub(crate) fn command(
    cmd: &Command,
    own_group: bool,
    grace: Duration,
    deadline: Option<u64>,
) -> std::io::Result<(Command, Link, OwnedFd)> {
    let (ours, theirs) = UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let theirs: OwnedFd = theirs.into();
    let fd = theirs.as_raw_fd();
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
        link: Some(fd),
        deadline,
    };
    supervisor.env(ENV, spec.encode());
    // SAFETY: between fork and exec only fcntl(2) runs, which is
    // async-signal-safe; it lets the supervisor inherit its end.
    unsafe {
        supervisor.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let link = Link {
        stream: ours,
        sent: deadline.unwrap_or(0),
        stopping: false,
    };
    Ok((supervisor, link, theirs))
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

/// The supervisor's view of the lease.
struct Lease {
    link: Option<UnixStream>,
    /// Bytes of an unfinished line from redguard.
    partial: Vec<u8>,
    deadline: Option<u64>,
    grace: u64,
    /// SIGTERM went to the tree (by redguard or by us).
    stopping: bool,
    /// Children already sent SIGTERM, while they stay our children.
    asked: Vec<libc::pid_t>,
}

impl Lease {
    /// Reads what redguard sent: new deadlines, and whether it stops CMD.
    fn read(&mut self) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let mut buf = [0u8; 512];
        loop {
            match link.read(&mut buf) {
                Ok(0) => {
                    // Redguard is gone (its parent-death signal follows)
                    // or closed the link: keep the last deadline.
                    self.link = None;
                    return;
                }
                Ok(n) => self.partial.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            match line.as_slice() {
                [b'T', ..] => {
                    // Redguard sent SIGTERM to CMD (to its group, or to us
                    // to pass on): not sent again to those it reached.
                    self.stopping = true;
                    self.asked = tree::children();
                }
                [b'D', b' ', rest @ ..] => {
                    if let Some(at) = std::str::from_utf8(rest)
                        .ok()
                        .and_then(|t| t.trim().parse::<u64>().ok())
                        && self.deadline.is_some()
                    {
                        self.deadline = Some(at);
                    }
                }
                _ => {}
            }
        }
    }

    /// When the tree must be gone: the deadline less the margin.
    fn kill_at(&self) -> Option<u64> {
        Some(self.deadline?.saturating_sub(ns(STOP_MARGIN)))
    }

    /// When SIGTERM goes: a kill grace before [`Lease::kill_at`].
    fn stop_at(&self) -> Option<u64> {
        Some(self.kill_at()?.saturating_sub(self.grace))
    }

    fn tell(&mut self, what: &[u8]) {
        if let Some(link) = self.link.as_mut() {
            let _ = link.write_all(what);
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
    let caught = caught();
    let mut signals =
        SignalsInfo::<WithOrigin>::new(&caught).map_err(|e| os_failure("signal handlers", e))?;
    signals
        .add_signal(SIGCHLD)
        .map_err(|e| os_failure("signal handlers", e))?;
    // Every signal also wakes the poll below, through this pair.
    let (wake_rx, wake_tx) = UnixStream::pair().map_err(|e| os_failure("wake-up pipe", e))?;
    for stream in [&wake_rx, &wake_tx] {
        stream
            .set_nonblocking(true)
            .map_err(|e| os_failure("wake-up pipe", e))?;
    }
    for &signal in caught.iter().chain([SIGCHLD].iter()) {
        signal_hook::low_level::pipe::register_raw(signal, wake_tx.as_raw_fd())
            .map_err(|e| os_failure("signal handlers", e))?;
    }
    let link = match spec.link {
        Some(fd) => {
            // SAFETY: the descriptor was passed down by redguard for us
            // alone (see `command`); nothing else here owns it.
            let stream = unsafe { UnixStream::from_raw_fd(fd) };
            // CMD must not inherit it.
            // SAFETY: fcntl on a descriptor we own.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            stream
                .set_nonblocking(true)
                .map_err(|e| os_failure("link to redguard", e))?;
            Some(stream)
        }
        None => None,
    };
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

    let mut lease = Lease {
        link,
        partial: Vec::new(),
        deadline: spec.deadline,
        grace: ns(spec.grace),
        stopping: false,
        asked: Vec::new(),
    };
    let mut pending: Vec<(i32, bool)> = Vec::new();
    let status = loop {
        if parent_gone() {
            if spec.own_group {
                tree::kill_group();
            }
            tree::kill_all_children();
            return Ok(code::SIGNAL_BASE + libc::SIGKILL as u8);
        }
        if let Some(status) = tree::reap(cmd_pid) {
            break status;
        }
        // CMD is not reaped yet, so its pid is still CMD's.
        for (signal, from_kernel) in pending.drain(..) {
            if !spec.own_group && !from_kernel && signal != SIGCHLD {
                // SAFETY: kill(2) on our unreaped child.
                unsafe {
                    libc::kill(cmd_pid, signal);
                }
            }
        }
        lease.read();
        let now = monotonic_ns();
        if lease.kill_at().is_some_and(|at| now >= at) {
            // The lease is about to end: nothing of the tree may be left.
            // CMD first, without waiting for a /proc scan.
            // SAFETY: kill(2) on our child, not reaped yet.
            unsafe {
                libc::kill(cmd_pid, libc::SIGKILL);
            }
            lease.tell(b"S\n");
            if spec.own_group {
                tree::kill_group();
            }
            tree::kill_all_children();
            return Ok(code::SIGNAL_BASE + libc::SIGKILL as u8);
        }
        if lease.stop_at().is_some_and(|at| now >= at) {
            if !lease.stopping {
                lease.stopping = true;
                lease.tell(b"S\n");
                if spec.own_group {
                    // CMD's group, ourselves included (our copy is ignored).
                    // SAFETY: kill(2) on our own process group.
                    unsafe {
                        libc::kill(0, libc::SIGTERM);
                    }
                }
            }
            if let Some(status) = terminate_new_children(&mut lease.asked, cmd_pid) {
                break status;
            }
        }
        let wake_in = match (lease.stopping, lease.stop_at(), lease.kill_at()) {
            (_, None, _) | (_, _, None) => None,
            (true, _, Some(kill)) => Some(kill.saturating_sub(now).min(ns(STOP_POLL))),
            (false, Some(stop), Some(_)) => Some(stop.saturating_sub(now)),
        };
        wait_for_event(&wake_rx, lease.link.as_ref(), wake_in);
        pending.extend(
            signals
                .pending()
                .map(|origin| (origin.signal, origin.cause == Cause::Kernel)),
        );
    };
    let kill_at = lease.kill_at();
    tree::stop_children(spec.grace, &|| {
        parent_gone() || kill_at.is_some_and(|at| monotonic_ns() >= at)
    });
    Ok(exit_status_code(status))
}

/// Sends SIGTERM to each child not asked yet (CMD, and orphans of its tree
/// as they are adopted). Reaps what ended first: CMD's status when CMD was
/// among them (then nothing is sent: its pid is free for reuse).
fn terminate_new_children(
    asked: &mut Vec<libc::pid_t>,
    cmd_pid: libc::pid_t,
) -> Option<std::process::ExitStatus> {
    if let Some(status) = tree::reap(cmd_pid) {
        return Some(status);
    }
    let children = tree::children();
    asked.retain(|pid| children.contains(pid));
    for pid in children {
        if !asked.contains(&pid) {
            // SAFETY: kill(2) on our child, not reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
            asked.push(pid);
        }
    }
    None
}

/// Waits until a signal arrives (through `wake`), redguard writes on
/// `link`, or `timeout_ns` passes (`None`: no timeout). Drains `wake`.
fn wait_for_event(wake: &UnixStream, link: Option<&UnixStream>, timeout_ns: Option<u64>) {
    let mut fds = vec![libc::pollfd {
        fd: wake.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(link) = link {
        fds.push(libc::pollfd {
            fd: link.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    // Rounded up: waking a little late is covered by the margin, waking
    // early only costs a turn of the loop.
    let timeout_ms: libc::c_int = match timeout_ns {
        None => -1,
        Some(t) => libc::c_int::try_from(t.div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX),
    };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
    let mut buf = [0u8; 64];
    while let Ok(1..) = (&*wake).read(&mut buf) {}
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
            link: Some(7),
            deadline: Some(123_456_789),
        };
        assert_eq!(Spec::decode(OsStr::new(&spec.encode())), Some(spec));
        let none = Spec {
            parent: 1,
            own_group: false,
            grace: Duration::ZERO,
            link: None,
            deadline: None,
        };
        assert_eq!(Spec::decode(OsStr::new(&none.encode())), Some(none));
        for bad in [
            "",
            "1 1",
            "1 2 3",
            "x 1 3",
            "1 0 3 4",
            "1 0 3 4 x",
            "1 0 3 4 5 6",
        ] {
            assert_eq!(Spec::decode(OsStr::new(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn deadlines_and_stops_are_read_across_partial_lines() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let mut lease = Lease {
            link: Some(theirs),
            partial: Vec::new(),
            deadline: Some(5_000_000_000),
            grace: 1_000_000_000,
            stopping: false,
            asked: Vec::new(),
        };
        assert_eq!(lease.kill_at(), Some(5_000_000_000 - ns(STOP_MARGIN)));
        assert_eq!(lease.stop_at(), Some(4_000_000_000 - ns(STOP_MARGIN)));
        ours.write_all(b"D 7000000000\nD 80").unwrap();
        lease.read();
        assert_eq!(lease.deadline, Some(7_000_000_000));
        ours.write_all(b"00000000\nx\n").unwrap();
        lease.read();
        assert_eq!(lease.deadline, Some(8_000_000_000));
        assert!(!lease.stopping);
        ours.write_all(b"T\n").unwrap();
        lease.read();
        assert!(lease.stopping);
        // Redguard gone: the last deadline stays.
        drop(ours);
        lease.read();
        assert!(lease.link.is_none());
        assert_eq!(lease.deadline, Some(8_000_000_000));

        // No deadline (--on-lost warn): none is taken later either.
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let mut warn = Lease {
            link: Some(theirs),
            partial: Vec::new(),
            deadline: None,
            grace: 0,
            stopping: false,
            asked: Vec::new(),
        };
        ours.write_all(b"D 1\n").unwrap();
        warn.read();
        assert_eq!(
            (warn.deadline, warn.kill_at(), warn.stop_at()),
            (None, None, None)
        );
    }

    #[test]
    fn redguard_sends_a_deadline_only_when_it_moved() {
        let cmd = Command::new("true");
        let (_supervisor, mut link, theirs) =
            command(&cmd, true, Duration::ZERO, Some(1_000_000_000)).unwrap();
        let mut theirs = UnixStream::from(theirs);
        theirs.set_nonblocking(true).unwrap();
        link.deadline(1_000_500_000);
        link.deadline(3_000_000_000);
        link.deadline(3_000_000_001);
        let mut got = String::new();
        let _ = theirs.read_to_string(&mut got);
        assert_eq!(got, "D 3000000000\n");
        theirs.write_all(b"S\n").unwrap();
        assert!(link.supervisor_stopping());
        assert!(link.supervisor_stopping());
    }

    #[test]
    fn the_supervisor_command_carries_cmd_and_its_environment() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "true"]).env("REDGUARD_LOCK", "x");
        let (supervisor, _link, _theirs) =
            command(&cmd, false, Duration::from_secs(1), None).unwrap();
        let args: Vec<&OsStr> = supervisor.get_args().collect();
        assert_eq!(args, ["sh", "-c", "true"]);
        let envs: Vec<_> = supervisor.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("REDGUARD_LOCK"), Some(OsStr::new("x")))));
        assert!(envs.iter().any(|(k, _)| *k == ENV));
    }
}
