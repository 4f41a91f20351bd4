//! `redguard exec`: take the lock, run CMD under it, release it, pass on
//! CMD's exit status.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use redguard::{Lock, LockGuard};

use crate::child::{
    CmdEnd, OnLoss, exec_kill_grace, lost_reason, preflight, run_cmd, signal_exit, signal_name,
};
use crate::cli::{ExecArgs, OnLost, name_bytes};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::out;
use crate::show;
use crate::signals::Relay;
use crate::spinner::Spinner;
use crate::waitlog::WaitLog;

/// Runs `redguard exec`.
pub(crate) fn exec(args: &ExecArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let name = name_bytes(&args.name)?;
    let (program, cmd_args) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(code::USAGE, "CMD is missing"))?;
    // A typo in CMD is reported at once, not after waiting for the lock;
    // so is a lease too short to stop CMD within.
    preflight(program)?;
    let kill_grace = exec_kill_grace(args, conn.client.watchdog_timeout())?;
    if let Some(permits) = args.permits {
        return crate::permits::exec_with_permit(args, conn, &name, permits, kill_grace);
    }

    let lock = if args.fair {
        conn.client.fair_lock(&name)
    } else if args.fenced {
        conn.client.fenced_lock(&name)
    } else if args.read {
        conn.client.read_write_lock(&name).read()
    } else if args.write {
        conn.client.read_write_lock(&name).write()
    } else {
        conn.client.lock(&name)
    };
    let lock = match args.lease {
        Some(lease) => lock.with_lease(lease),
        None => lock,
    };
    let relay = Relay::start(conn.client.clone())
        .map_err(|e| Failure::new(code::OSERR, format!("cannot install signal handlers: {e}")))?;

    let spinner = Spinner::start(&lock, args.quiet);
    let waitlog = WaitLog::start(format!("lock {}", show::name(&name)), {
        let lock = lock.clone();
        move || show::look_holder(&lock)
    });
    // `--no-wait` is a wait of zero: one attempt, no waiting.
    let wait = if args.no_wait {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    let acquired = match wait {
        Some(wait) => lock.try_lock_for(wait),
        None => lock.lock().map(Some),
    };
    let waited = waitlog.stop();
    spinner.stop();

    if let Some(signal) = relay.interrupted() {
        // The shutdown that woke the wait also gave back a lock granted in
        // the meantime.
        drop(acquired);
        out::error(&format!(
            "{} while waiting for lock {}; CMD not run",
            signal_name(signal),
            show::name(&name)
        ));
        return Ok(signal_exit(signal));
    }
    let guard = match acquired {
        Ok(Some(granted)) => granted,
        Ok(None) => {
            let busy = busy_message(&lock, &name);
            if args.quiet {
                log::info!("redguard: {busy}");
            } else {
                out::error(&busy);
            }
            return Ok(ExitCode::from(args.conflict_exit_code));
        }
        Err(e) => return Err(Failure::from_lib(&e, &conn.server)),
    };

    log::info!(
        "redguard: acquired {} lock {} after {} as {}",
        lock_kind(args),
        show::name(&name),
        show::left(waited),
        guard.holder_id()
    );
    let mut cmd = Command::new(program);
    crate::connect::scrub_env(&mut cmd);
    cmd.args(cmd_args)
        .env("REDGUARD_LOCK", OsStr::from_bytes(&name))
        .env("REDGUARD_HOLDER", guard.holder_id().as_str());
    if let Some(token) = guard.fencing_token() {
        cmd.env("REDGUARD_FENCING_TOKEN", token.to_string());
    }
    let why = lost_reason(args);
    let loss = OnLoss {
        action: args.on_lost,
        kill_grace,
        why: &why,
        subject: format!("lock {}", show::name(&name)),
        fixed: args.lease.is_some(),
    };
    let (code, lost) = match run_cmd(
        cmd,
        program,
        &relay,
        &|| guard.valid_for(),
        &loss,
        args.limit(),
    )? {
        CmdEnd::NotStarted(exit) => return Ok(exit),
        CmdEnd::Ended { code, lost, .. } => (code, lost),
    };
    crate::record_view::warn_if_unrecorded(guard.lock().client(), args.quiet);
    finish(args, &name, guard, code, lost)
}

/// After CMD: releases the lock and decides the exit status.
fn finish(
    args: &ExecArgs,
    name: &[u8],
    guard: LockGuard,
    cmd_code: u8,
    lost: bool,
) -> Result<ExitCode, Failure> {
    if lost {
        if guard.is_lost() {
            // The lease is gone: there is nothing of ours to release, and
            // the key may be someone else's by now. A release attempt would
            // only be a refused round trip, and against an unresponsive
            // Redis (the usual cause of a loss) it would hold up the exit by
            // a connect and a response timeout.
            std::mem::forget(guard);
        } else {
            // CMD was stopped while the lease was running low, and a
            // renewal came through after all (or the lease is still
            // running out): the lock is still ours, so it is given back
            // rather than left to block the next holder until it expires.
            let client = guard.lock().client().clone();
            let failed = client.stats().failed_releases;
            let _ = guard.unlock();
            let lease = args.lease.unwrap_or_else(|| client.watchdog_timeout());
            crate::child::await_release(
                &client,
                &format!("lock {}", show::name(name)),
                lease,
                true,
                failed,
            );
        }
        return Ok(match args.on_lost {
            OnLost::Kill => ExitCode::from(code::SOFTWARE),
            OnLost::Warn => ExitCode::from(cmd_code),
        });
    }
    let lock = guard.lock().clone();
    let client = lock.client().clone();
    let lease = args.lease.unwrap_or_else(|| client.watchdog_timeout());
    let holder = guard.holder_id().clone();
    let failed = client.stats().failed_releases;
    let released = guard.unlock();
    if released.is_ok() {
        log::info!("redguard: released lock {} as {holder}", show::name(name));
    }
    let through = crate::child::await_release(
        &client,
        &format!("lock {}", show::name(name)),
        lease,
        args.quiet,
        failed,
    );
    match released {
        Ok(()) => Ok(ExitCode::from(cmd_code)),
        // Not confirmed at once, and waited for just above.
        Err(redguard::Error::ReleasePending { .. }) if through => Ok(ExitCode::from(cmd_code)),
        Err(redguard::Error::ReleasePending { cause, .. }) => {
            Ok(release_failed(&lock, &holder, cmd_code, &cause))
        }
        Err(e) if e.is_lock_lost() || e.is_not_held() => {
            let why = lost_reason(args);
            match args.on_lost {
                OnLost::Kill => {
                    out::error(&format!(
                        "{why} of lock {} after CMD ended: CMD exited with {cmd_code} while the \
                         lease was valid on this host's clock, but the release found the lock no \
                         longer held ({e})",
                        show::name(name)
                    ));
                    Ok(ExitCode::from(code::SOFTWARE))
                }
                OnLost::Warn => {
                    out::warn(&format!(
                        "{why} of lock {} after CMD ended (CMD ran within the lease; the \
                         release found the lock no longer held)",
                        show::name(name)
                    ));
                    Ok(ExitCode::from(cmd_code))
                }
            }
        }
        Err(e) => Ok(release_failed(
            &lock,
            &holder,
            cmd_code,
            &crate::fail::chain(&e),
        )),
    }
}

/// How long a look at the key that only words a message (who holds a busy
/// lock, what is left after a failed release) may take.
const LOOK_BOUND: Duration = Duration::from_secs(2);

/// A release after CMD that was refused or did not go through before the
/// lease ended (`cause`): said, with what is at the key now, and exit 74,
/// never CMD's status (a caller chaining jobs on success must not take the
/// lock for given back).
fn release_failed(lock: &Lock, holder: &redguard::HolderId, cmd_code: u8, why: &str) -> ExitCode {
    let deadline = std::time::Instant::now() + LOOK_BOUND;
    let key = match redguard::retry_until(Some(deadline), || lock.inspect()) {
        Ok(info) => match info.holders.iter().find(|(id, _)| id == holder) {
            Some(_) => format!(
                "its key is still there, held by this process's holder {holder} until its \
                 lease ends ({} left)",
                show::ttl(info.ttl)
            ),
            // Checked before "another holder": a value of no lock's shape
            // (a hold count overwritten past the bound) holds no one.
            None if matches!(info.kind, redguard::LockKind::Other { .. }) => {
                let redis_type = match &info.kind {
                    redguard::LockKind::Other { redis_type } => redis_type.as_str(),
                    _ => "hash",
                };
                format!(
                    "its key is there but is not a lock: {}; left untouched",
                    show::not_a_lock(redis_type)
                )
            }
            None if info.is_held() => {
                "its key is there, held by another holder: ours ran out first".to_owned()
            }
            // A key with no holder of ours, or none at all: what a release
            // stopped half-way by a refused command leaves until it expires.
            None if info.ttl.is_some() => format!(
                "its key is still there without this process's hold ({} left)",
                show::ttl(info.ttl)
            ),
            None => "its key is gone: the lease ran out".to_owned(),
        },
        Err(e) => format!(
            "whether its key is still there is unknown ({})",
            crate::fail::chain(&e)
        ),
    };
    out::error(&format!(
        "the release of lock {} after CMD (exit status {cmd_code}) was refused or did not go \
         through ({why}); {key}",
        show::name(lock.name())
    ));
    ExitCode::from(code::RELEASE_FAILED)
}

/// The kind of lock `exec` takes, as the log lines name it.
fn lock_kind(args: &ExecArgs) -> &'static str {
    if args.fair {
        "fair"
    } else if args.fenced {
        "fenced"
    } else if args.read {
        "read"
    } else if args.write {
        "write"
    } else {
        "reentrant"
    }
}

/// The one-line message when the lock could not be had in time: the lock,
/// its holder and the holder's remaining ttl.
fn busy_message(lock: &Lock, name: &[u8]) -> String {
    // Bounded: the lock is busy, which is the answer; who holds it only
    // words the message (a read of a slot that moves waits for it).
    let deadline = std::time::Instant::now() + LOOK_BOUND;
    let holder = match redguard::retry_until(Some(deadline), || lock.inspect()) {
        Ok(info) if info.is_held() => show::describe_holder(&info),
        Ok(_) => "was busy, now free".to_owned(),
        Err(e) => format!("is busy (holder unknown: {})", crate::fail::chain(&e)),
    };
    let holder = if holder.starts_with("held") || holder.starts_with("the key") {
        format!("is {holder}")
    } else {
        holder
    };
    format!(
        "lock {} {holder}; not acquired in time, CMD not run",
        show::name(name)
    )
}
