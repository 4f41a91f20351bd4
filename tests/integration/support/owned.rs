//! Servers that die with the test process: every `redis-server` and
//! `redis-sentinel` the support module starts goes through [`spawn_owned`].
//!
//! A killed test binary (Ctrl-C, a CI time-out, `kill -9`) runs no `Drop`,
//! so without this its servers ran on: 30 were found after a few killed
//! runs. Each owned process gets `PR_SET_PDEATHSIG` = `SIGKILL`. The kernel
//! sends that signal when the *thread* that forked the process ends, not
//! the process, and tests start servers from short-lived threads (a
//! restart from a helper thread, a bed built in a scope), so every owned
//! process is forked by one spawner thread that lives as long as the test
//! binary.
//!
//! Each owned process runs in a directory of its own (its `--dir`), where
//! [`OWNER_FILE`] names the test process that started it. The first spawn
//! of a run looks for server processes whose owner is gone (left by a run
//! killed before this existed, or on a kernel without `PR_SET_PDEATHSIG`)
//! or whose directory was removed, kills them, and says how many it found.
//! (A marker in the environment would not do: `redis-server` writes its
//! process title over its environment.)

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The file, in an owned process's working directory, that holds the pid
/// of the test process that started it.
pub const OWNER_FILE: &str = ".redguard-test-owner";

/// Prefix of the temporary directories the support module makes; the
/// sweep looks only at processes working in one of them.
const DIR_PREFIX: &str = "redguard-";

type Request = (Command, Sender<io::Result<Child>>);

/// Starts `command` in `dir` (a directory of its own, made by the support
/// module under a `redguard-` prefix) so that it dies with this process
/// (see the module).
///
/// # Errors
///
/// As [`Command::spawn`]; also when the owner file cannot be written or
/// the spawner thread cannot be started.
pub fn spawn_owned(mut command: Command, dir: &Path) -> io::Result<Child> {
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())?;
    command.current_dir(dir);
    let spawner = spawner()?;
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((command, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}

/// The spawner thread's inbox, started (and the leftovers swept) once.
fn spawner() -> io::Result<&'static Mutex<Sender<Request>>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    if let Some(spawner) = SPAWNER.get() {
        return Ok(spawner);
    }
    let swept = sweep_leftovers();
    if swept > 0 {
        eprintln!(
            "support: killed {swept} redis process(es) left running by an earlier test run \
             whose process is gone"
        );
    }
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("test-server-spawner".into())
        .spawn(move || {
            // Lives until the process ends: the parent-death signal of
            // every process forked here fires only then.
            for (mut command, reply) in rx {
                let parent = std::process::id() as libc::pid_t;
                // SAFETY: the closure runs between fork and exec and calls
                // only async-signal-safe functions (prctl, getppid, _exit).
                unsafe {
                    use std::os::unix::process::CommandExt;
                    command.pre_exec(move || {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        // The parent died between fork and prctl: the
                        // signal will never come.
                        if libc::getppid() != parent {
                            libc::_exit(1);
                        }
                        Ok(())
                    });
                }
                let _ = reply.send(command.spawn());
            }
        })?;
    Ok(SPAWNER.get_or_init(|| Mutex::new(tx)))
}

/// Kills every Redis or Sentinel process working in a support directory
/// whose owner (see [`OWNER_FILE`]) is gone, or whose directory was
/// removed; returns how many it killed. Reads `/proc` (Linux only;
/// elsewhere finds nothing).
pub fn sweep_leftovers() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if !is_left_over(pid) {
            continue;
        }
        // SAFETY: kill(2) on a pid read from /proc just now; at worst it
        // is gone already (ESRCH).
        if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            killed += 1;
        }
    }
    killed
}

/// Whether `pid` is a server of the support module's whose owner is gone.
fn is_left_over(pid: libc::pid_t) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    let exe = exe.to_string_lossy();
    if !["redis", "valkey", "sentinel"]
        .iter()
        .any(|n| exe.contains(n))
    {
        return false;
    }
    let Some((dir, removed)) = work_dir(pid) else {
        return false;
    };
    let ours = dir.parent() == Some(std::env::temp_dir().as_path())
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX));
    if !ours {
        return false;
    }
    if removed {
        return true;
    }
    owner_of(pid).is_some_and(|owner| !Path::new(&format!("/proc/{owner}")).exists())
}

/// `pid`'s working directory, and whether it was removed.
fn work_dir(pid: libc::pid_t) -> Option<(PathBuf, bool)> {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let text = cwd.to_string_lossy();
    match text.strip_suffix(" (deleted)") {
        Some(path) => Some((PathBuf::from(path), true)),
        None => Some((cwd, false)),
    }
}

/// The test process that started `pid`, as its directory's
/// [`OWNER_FILE`] says.
pub fn owner_of(pid: libc::pid_t) -> Option<u32> {
    let (dir, _) = work_dir(pid)?;
    std::fs::read_to_string(dir.join(OWNER_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}
