//! Signals received by redguard: every catchable signal whose default
//! action ends the process ([`caught`]), so that no signal ends redguard
//! while it holds a lock (the lock would stay held until its lease ran
//! out, and its holder record with it).
//!
//! Caught and forwarded: SIGINT, SIGTERM, SIGHUP, SIGQUIT (the terminal's
//! and the service managers'), SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
//! SIGPROF, SIGIO (SIGPOLL), SIGPWR, SIGXCPU, SIGXFSZ, SIGSTKFLT and the
//! real-time signals. Of the last eleven, only those sent by a process
//! (`kill`, `sigqueue`) are forwarded: the kernel sends them about
//! redguard itself (its own timers, CPU or file-size limit), not about CMD.
//!
//! Not caught: SIGPIPE, which Rust's runtime ignores (a closed stdout or
//! stderr of redguard's must not end the job: its writes fail with EPIPE
//! instead); SIGKILL and SIGSTOP, which cannot be; and SIGSEGV, SIGBUS,
//! SIGILL, SIGFPE, SIGSYS, SIGTRAP and SIGABRT, which report a fault of
//! redguard itself (or a debugger's trap) that it cannot carry on after.
//! When one of those ends redguard, the supervisor kills CMD's tree (its
//! parent-death signal) and the lock frees itself when its lease ends.
//!
//! One thread ("redguard-signals") reads them (signal-hook's self-pipe
//! iterator, so nothing runs inside a signal handler) and acts according to
//! the phase:
//!
//! * **waiting for the lock**: the signal is recorded and the client shut
//!   down, which wakes the waiting thread with `Error::Shutdown` and gives
//!   back a lock granted in the meantime; CMD is then never started and
//!   redguard exits 128 + N, as a shell would;
//! * **CMD running**: the signal is forwarded to CMD (to its process group
//!   when CMD has one of its own). A signal the kernel sent because of the
//!   terminal (Ctrl-C, Ctrl-\, hang-up) already reached CMD when it shares
//!   redguard's foreground process group, so it is not sent twice;
//! * **done**: ignored; redguard is releasing the lock and exiting.
//!
//! SIGCHLD is caught too, only to wake the supervising thread at once when
//! CMD ends (it otherwise polls every 50 ms), so that the lock is released
//! and the next waiter runs without that delay.
//!
//! On Linux the child started here is CMD's supervisor (`supervisor`): in
//! batch use it leads the process group CMD runs in, so "CMD's group" below
//! is that group; in interactive use the signal sent to the child reaches
//! CMD through the supervisor.
//!
//! CMD is reaped only under the phase mutex, and the phase leaves "running"
//! in the same critical section, so a signal is never sent to a pid that
//! may have been reused.

use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::{io, thread};

use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

/// The signals the terminal and service managers send to stop a job.
pub(crate) const TERMINAL: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// Every signal redguard (and its supervisor) catches: see [the
/// module](self).
pub(crate) fn caught() -> Vec<i32> {
    let mut signals = TERMINAL.to_vec();
    signals.extend([
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGXCPU,
        libc::SIGXFSZ,
    ]);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    signals.extend([libc::SIGPWR, libc::SIGSTKFLT]);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    signals.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    signals
}

/// Whether a caught signal is passed on to CMD: the terminal's always
/// (but see [`Relay`] for those that reached CMD already), the others only
/// when a process sent them.
pub(crate) fn is_for_cmd(signal: i32, from_kernel: bool) -> bool {
    TERMINAL.contains(&signal) || !from_kernel
}

enum Phase {
    Waiting(redguard::Client),
    Running {
        child: Child,
        /// CMD leads its own process group: signal the whole group.
        own_group: bool,
    },
    Done,
}

struct State {
    phase: Phase,
    /// The thread that supervises CMD, woken on SIGCHLD.
    supervisor: thread::Thread,
    /// The signal that interrupted the wait, if any.
    interrupted: Option<i32>,
}

/// The signal relay: a handle shared by the main thread and the signal
/// thread.
#[derive(Clone)]
pub(crate) struct Relay {
    state: Arc<Mutex<State>>,
}

impl Relay {
    /// Installs the handlers and starts the signal thread, in the waiting
    /// phase for `client`. The calling thread is the one that supervises
    /// CMD (it is unparked when a child ends).
    pub(crate) fn start(client: redguard::Client) -> io::Result<Relay> {
        let relay = Relay {
            state: Arc::new(Mutex::new(State {
                phase: Phase::Waiting(client),
                supervisor: thread::current(),
                interrupted: None,
            })),
        };
        let mut signals = SignalsInfo::<WithOrigin>::new(caught())?;
        signals.add_signal(SIGCHLD)?;
        let worker = relay.clone();
        thread::Builder::new()
            .name("redguard-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    worker.on_signal(origin.signal, origin.cause == Cause::Kernel);
                }
            })?;
        Ok(relay)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn on_signal(&self, signal: i32, from_kernel: bool) {
        let mut state = self.state();
        if signal == SIGCHLD {
            state.supervisor.unpark();
            return;
        }
        match &state.phase {
            Phase::Waiting(client) => {
                let client = client.clone();
                state.interrupted.get_or_insert(signal);
                drop(state);
                // Wakes the waiter; releases a lock granted meanwhile.
                client.shutdown();
            }
            Phase::Running { child, own_group } => {
                if !is_for_cmd(signal, from_kernel) {
                    // About redguard itself; it carries on.
                } else if *own_group {
                    send(-pid_of(child), signal);
                } else if !from_kernel {
                    send(pid_of(child), signal);
                }
            }
            Phase::Done => {}
        }
    }

    /// The signal that interrupted the wait for the lock, if one did.
    pub(crate) fn interrupted(&self) -> Option<i32> {
        self.state().interrupted
    }

    /// Starts CMD with `spawn` unless a signal interrupted the wait; from
    /// then on signals go to CMD. `Ok(None)` when interrupted.
    pub(crate) fn start_child(
        &self,
        own_group: bool,
        spawn: impl FnOnce() -> io::Result<Child>,
    ) -> io::Result<Option<i32>> {
        let mut state = self.state();
        if state.interrupted.is_some() {
            return Ok(None);
        }
        let child = spawn()?;
        let pid = pid_of(&child);
        state.phase = Phase::Running { child, own_group };
        Ok(Some(pid))
    }

    /// Reaps CMD if it has ended. After `Some`, signals are ignored.
    pub(crate) fn try_wait(&self) -> io::Result<Option<ExitStatus>> {
        let mut state = self.state();
        let Phase::Running { child, .. } = &mut state.phase else {
            return Ok(None);
        };
        let status = child.try_wait()?;
        if status.is_some() {
            state.phase = Phase::Done;
        }
        Ok(status)
    }

    /// Sends `signal` to CMD (its group when it has its own) while it runs.
    pub(crate) fn signal_child(&self, signal: i32) {
        let state = self.state();
        if let Phase::Running { child, own_group } = &state.phase {
            let pid = pid_of(child);
            send(if *own_group { -pid } else { pid }, signal);
        }
    }
}

fn pid_of(child: &Child) -> i32 {
    // Linux pids fit in 31 bits (pid_max ≤ 2^22).
    child.id() as i32
}

fn send(target: i32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions. The target is
    // CMD (or its process group), which is not reaped while the phase mutex
    // is held by the caller.
    unsafe {
        libc::kill(target, signal);
    }
}
