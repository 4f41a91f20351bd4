//! [`Failure`]: an error of the tool with its exit status, and the table of
//! exit statuses (sysexits.h values where one fits).

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Exit statuses of redguard itself. CMD's own status passes through
/// unchanged, so these are chosen where shells and sysexits.h put tool
/// errors.
pub(crate) mod code {
    /// Bad arguments: unknown flag, bad duration, bad URL, empty name.
    pub(crate) const USAGE: u8 = 64;
    /// The name holds a value that is not a lock.
    pub(crate) const DATAERR: u8 = 65;
    /// Redis unreachable, too slow, or answering with an error.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// The lease was lost while CMD ran (or another internal failure).
    pub(crate) const SOFTWARE: u8 = 70;
    /// The operating system refused something (signal handlers).
    pub(crate) const OSERR: u8 = 71;
    /// CMD ran, but the release after it was refused or failed: it did not
    /// go through before the lease ended (sysexits' EX_IOERR: what was
    /// to be written was not). Never 0: the next holder may have waited for
    /// the lease, and a caller that chains jobs on success must know.
    pub(crate) const RELEASE_FAILED: u8 = 74;
    /// Default status when the lock cannot be had in time (`flock -E`).
    pub(crate) const TEMPFAIL: u8 = 75;
    /// Redis refused the credentials or the ACL denies a command.
    pub(crate) const NOPERM: u8 = 77;
    /// CMD ran past `--timeout` and was stopped (as `timeout(1)`).
    pub(crate) const TIMED_OUT: u8 = 124;
    /// CMD exists but cannot be run.
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// CMD not found.
    pub(crate) const NOT_FOUND: u8 = 127;
    /// Added to a signal number: CMD (or redguard while waiting) was ended
    /// by that signal.
    pub(crate) const SIGNAL_BASE: u8 = 128;
}

/// A failure of the tool: one line for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A library error met while talking to the server shown as `server`
    /// (`host:port`, never a URL).
    pub(crate) fn from_lib(err: &redguard::Error, server: &str) -> Failure {
        use redguard::Error as E;
        let text = chain(err);
        // The library's message names the server it talked to; said once.
        let at = if text.contains(server) {
            String::new()
        } else {
            format!(" at {server}")
        };
        match err {
            E::InvalidArgument(msg) => Failure::new(code::USAGE, msg.clone()),
            E::Connection(_) | E::Timeout { .. } => {
                Failure::new(code::UNAVAILABLE, format!("cannot reach Redis{at}: {text}"))
            }
            E::Auth(_) | E::Permission(_) => {
                Failure::new(code::NOPERM, format!("Redis{at}: {text}"))
            }
            E::WrongType { key } => Failure::new(
                code::DATAERR,
                format!(
                    "key {key:?} holds a value that is not a lock (another type, or a hash \
                     whose fields are not holder ids with hold counts); left untouched"
                ),
            ),
            E::LockLost { .. } | E::NotHeld { .. } | E::Shutdown => {
                Failure::new(code::SOFTWARE, err.to_string())
            }
            _ => Failure::new(code::UNAVAILABLE, format!("Redis{at}: {text}")),
        }
    }

    /// As [`Failure::from_lib`], for an operation on `name` as a `what`
    /// (`latch`, `semaphore`, ...): a value of another type there is
    /// refused with 65, named as not being one.
    pub(crate) fn from_lib_on(
        err: &redguard::Error,
        server: &str,
        name: &[u8],
        what: &str,
    ) -> Failure {
        match err {
            redguard::Error::WrongType { .. } => Failure::new(
                code::DATAERR,
                format!(
                    "key {} holds a value that is not a {what}; left untouched",
                    crate::show::name(name)
                ),
            ),
            _ => Failure::from_lib(err, server),
        }
    }
}

/// An error's message and every source's, joined with `": "`: a library
/// error's message says only its own part, its cause is its source.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// CMD's status as a shell reports it: its exit code, or 128 + the signal
/// that killed it.
pub(crate) fn exit_status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => code::SIGNAL_BASE.saturating_add((signal & 0x7f) as u8),
        (None, None) => code::SOFTWARE,
    }
}

/// The failure of starting CMD, with the exit code a shell gives it: 127
/// when it is not found, 126 when it cannot run.
pub(crate) fn spawn_failure(program: &OsStr, err: &io::Error) -> Failure {
    let shown = program.to_string_lossy();
    match err.kind() {
        io::ErrorKind::NotFound => {
            Failure::new(code::NOT_FOUND, format!("{shown}: command not found"))
        }
        _ => Failure::new(code::CANNOT_EXECUTE, format!("{shown}: cannot run: {err}")),
    }
}
