//! The process tree below the calling process, on Linux: becoming a child
//! subreaper, finding one's children, reaping them, and killing every
//! descendant.
//!
//! Descendants are killed one generation at a time, and only ever as
//! children of the caller: a child's pid cannot be reused before the caller
//! reaps it, so no signal can hit an unrelated process that took over a pid.
//! The caller is a subreaper, so when a killed child dies its own children
//! (and any orphans of the tree, daemons that left CMD's process group or
//! session included) become the caller's children, and the next round
//! kills them. A tree of depth D goes in D rounds of one /proc scan each.
//!
//! When the lease is about to end that is too slow on a loaded machine (a
//! shell's `sleep` child outlived the key by being killed a round after
//! the shell), so [`kill_group`] first kills every member of the caller's
//! process group in one scan. It signals through a pidfd opened before the
//! member's group is checked, so a pid reused by an unrelated process
//! between the scan and the signal is never hit either.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How often [`stop_children`] looks again while the children it asked to
/// stop are still running.
const STOP_POLL: Duration = Duration::from_millis(10);

/// Makes the calling process a child subreaper: orphans among its
/// descendants are reparented to it instead of to init.
///
/// # Errors
///
/// When the kernel refuses `prctl(PR_SET_CHILD_SUBREAPER)`.
pub(crate) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to send `signal` to the calling process when the thread
/// that created it ends (for redguard: its main thread, that is, redguard).
///
/// # Errors
///
/// When the kernel refuses `prctl(PR_SET_PDEATHSIG)`.
pub(crate) fn set_parent_death_signal(signal: i32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's name, which for the main thread is the
/// process name that `ps -e` and `top` show (at most 15 bytes kept).
pub(crate) fn set_name(name: &std::ffi::CStr) {
    // SAFETY: prctl reads the NUL-terminated name; failure is harmless.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

/// The parent's pid as the kernel sees it now.
pub(crate) fn parent() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

/// The calling process's children, zombies included, from a scan of
/// `/proc/<pid>/stat` (every process; `/proc/self/task/*/children` may miss
/// children that change parent during the read). Empty when /proc cannot be
/// read.
pub(crate) fn children() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    processes()
        .filter(|&pid| stat_field(pid, PARENT) == Some(me))
        .collect()
}

/// Every pid in /proc now (none when /proc cannot be read).
fn processes() -> impl Iterator<Item = libc::pid_t> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
}

/// Fields of `/proc/<pid>/stat`, counted after the command name.
const PARENT: usize = 1;
const GROUP: usize = 2;

/// Field `n` of `/proc/<pid>/stat` (see [`in_stat`]).
fn stat_field(pid: libc::pid_t, n: usize) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    in_stat(&stat, n)
}

/// Field `n` of a `/proc/<pid>/stat` line, counted from 0 after the
/// command name, which is in parentheses and may itself hold `)`: the
/// parent pid is [`PARENT`], the process group [`GROUP`].
fn in_stat(stat: &str, n: usize) -> Option<libc::pid_t> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n)?.parse().ok()
}

/// Reaps every child that has ended, without blocking; returns the status of
/// `watched` if it was among them.
pub(crate) fn reap(watched: libc::pid_t) -> Option<ExitStatus> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
        if pid <= 0 {
            return found;
        }
        if pid == watched {
            found = Some(ExitStatus::from_raw(status));
        }
    }
}

/// Kills every descendant with SIGKILL and reaps them; returns when the
/// calling process has no child left. The caller must be a subreaper
/// ([`become_subreaper`]) and must not need the status of any child (every
/// child is reaped here).
pub(crate) fn kill_all_children() {
    loop {
        let children = children();
        if children.is_empty() {
            return;
        }
        for &pid in &children {
            send(pid, libc::SIGKILL);
        }
        // At least one of them ends now; once reaped, its children are ours.
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        unsafe {
            libc::waitpid(-1, &mut status, libc::__WALL);
        }
        reap(0);
    }
}

/// Kills, with SIGKILL, every process of the caller's process group but the
/// caller, in one /proc scan: CMD's tree when the caller leads CMD's group,
/// whatever its depth. Processes that left the group (daemons) are left to
/// [`kill_all_children`], which the caller runs next.
pub(crate) fn kill_group() {
    // SAFETY: getpgrp and getpid have no preconditions.
    let (group, me) = unsafe { (libc::getpgrp(), libc::getpid()) };
    for pid in processes() {
        if pid == me || stat_field(pid, GROUP) != Some(group) {
            continue;
        }
        // SAFETY: pidfd_open takes a pid and flags, and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let Ok(fd) = libc::c_int::try_from(fd) else {
            continue;
        };
        if fd < 0 {
            continue;
        }
        // The fd names one process: checked again now, so that a pid that
        // ended and was reused since the scan is not signalled.
        if stat_field(pid, GROUP) == Some(group) {
            // SAFETY: pidfd_send_signal on the fd opened above, no info.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd,
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
        }
        // SAFETY: closes the fd opened above, once.
        unsafe {
            libc::close(fd);
        }
    }
}

/// Stops the descendants gently: SIGTERM to each child (and to each
/// descendant once it becomes a child), then [`kill_all_children`] after
/// `grace`, or at once when `hurry` says so (it is asked every poll).
pub(crate) fn stop_children(grace: Duration, hurry: &dyn Fn() -> bool) {
    let deadline = Instant::now() + grace;
    let mut asked: Vec<libc::pid_t> = Vec::new();
    loop {
        reap(0);
        let children = children();
        if children.is_empty() {
            return;
        }
        if hurry() || Instant::now() >= deadline {
            kill_all_children();
            return;
        }
        // A pid is asked once while it is this child (it stays ours until
        // reaped); a pid reaped and reused by a later child is asked anew.
        asked.retain(|pid| children.contains(pid));
        for pid in children {
            if !asked.contains(&pid) {
                send(pid, libc::SIGTERM);
                asked.push(pid);
            }
        }
        #[allow(
            clippy::disallowed_methods,
            reason = "an orphan adopted by the subreaper raises no event to wait on: the tree is polled"
        )]
        std::thread::sleep(STOP_POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
}

fn send(pid: libc::pid_t, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a child
    // of the caller, not reaped yet, so it names the process we mean.
    unsafe {
        libc::kill(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pid_is_read_past_odd_command_names() {
        assert_eq!(in_stat("42 (sh) S 7 42 42 0", PARENT), Some(7));
        assert_eq!(in_stat("42 (a) b) (c) R 9 1 1", PARENT), Some(9));
        assert_eq!(in_stat("garbage", PARENT), None);
        assert_eq!(in_stat("42 (a) b) (c) R 9 5 1", GROUP), Some(5));
        assert_eq!(in_stat("42 (sh) S", GROUP), None);
    }
}
