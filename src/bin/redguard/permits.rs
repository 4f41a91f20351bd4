//! `redguard exec --permits N`: run CMD while holding one of N expiring
//! permits of a semaphore (Redisson's `RPermitExpirableSemaphore`), so that
//! at most N commands run at once across every host.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use redguard::{ExpiringSemaphore, PermitGuard};

use crate::child::{CmdEnd, OnLoss, lost_reason, run_cmd, signal_exit, signal_name};
use crate::cli::{ExecArgs, OnLost};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::out;
use crate::show;
use crate::signals::Relay;
use crate::waitlog::WaitLog;

/// Runs `redguard exec --permits N NAME -- CMD`.
pub(crate) fn exec_with_permit(
    args: &ExecArgs,
    conn: &Connection,
    name: &[u8],
    permits: u32,
    kill_grace: Duration,
) -> Result<ExitCode, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let (program, cmd_args) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(code::USAGE, "CMD is missing"))?;
    let semaphore = conn.client.expiring_semaphore(name);
    let semaphore = match args.lease {
        Some(lease) => semaphore.with_lease(lease),
        None => semaphore,
    };
    let wait = if args.no_wait {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    // The wait counts from here: the count check rides out an outage
    // within it, as the wait itself does.
    let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
    ensure_count(&semaphore, name, permits, deadline).map_err(|e| match e {
        Mismatch::Lib(e) => fail(e),
        Mismatch::Count(failure) => failure,
    })?;
    let relay = Relay::start(conn.client.clone())
        .map_err(|e| Failure::new(code::OSERR, format!("cannot install signal handlers: {e}")))?;
    let waitlog = WaitLog::start(format!("a permit of semaphore {}", show::name(name)), {
        let semaphore = semaphore.clone();
        move || match (semaphore.available_permits(), semaphore.permits()) {
            (Ok(free), Ok(all)) => format!("{free} of {all} permits free"),
            _ => "permits unknown (Redis did not answer)".to_owned(),
        }
    });
    let acquired = match deadline {
        Some(deadline) => semaphore.try_acquire_until(deadline),
        None => semaphore.acquire().map(Some),
    };
    let waited = waitlog.stop();
    if let Some(signal) = relay.interrupted() {
        drop(acquired);
        out::error(&format!(
            "{} while waiting for a permit of semaphore {}; CMD not run",
            signal_name(signal),
            show::name(name)
        ));
        return Ok(signal_exit(signal));
    }
    let permit = match acquired {
        Ok(Some(permit)) => permit,
        Ok(None) => {
            let busy = format!(
                "all {permits} permits of semaphore {} are held; not acquired in time, CMD not \
                 run",
                show::name(name)
            );
            if args.quiet {
                log::info!("redguard: {busy}");
            } else {
                out::error(&busy);
            }
            return Ok(ExitCode::from(args.conflict_exit_code));
        }
        Err(e) => return Err(fail(e)),
    };
    let id = permit.id().to_string();
    log::info!(
        "redguard: acquired permit {id} of semaphore {} after {}",
        show::name(name),
        show::left(waited)
    );
    let mut cmd = Command::new(program);
    crate::connect::scrub_env(&mut cmd);
    cmd.args(cmd_args)
        .env("REDGUARD_LOCK", OsStr::from_bytes(name))
        .env("REDGUARD_HOLDER", &id)
        .env("REDGUARD_PERMIT", &id);
    let why = lost_reason(args);
    let loss = OnLoss {
        action: args.on_lost,
        kill_grace,
        why: &why,
        subject: format!("permit {id} of semaphore {}", show::name(name)),
        fixed: args.lease.is_some(),
    };
    let (cmd_code, lost) = match run_cmd(
        cmd,
        program,
        &relay,
        &|| permit.valid_for(),
        &loss,
        args.limit(),
    )? {
        CmdEnd::NotStarted(exit) => return Ok(exit),
        CmdEnd::Ended { code, lost, .. } => (code, lost),
    };
    finish(args, name, &conn.client, permit, cmd_code, lost)
}

enum Mismatch {
    Lib(redguard::Error),
    Count(Failure),
}

impl From<redguard::Error> for Mismatch {
    fn from(e: redguard::Error) -> Mismatch {
        Mismatch::Lib(e)
    }
}

/// The first caller sets the count; later callers must ask for the same.
/// Reads that fail with an error retrying can fix are retried until
/// `deadline` (`None`: for as long as it takes).
fn ensure_count(
    semaphore: &ExpiringSemaphore,
    name: &[u8],
    permits: u32,
    deadline: Option<Instant>,
) -> Result<(), Mismatch> {
    if redguard::retry_until(deadline, || semaphore.try_set_permits(permits))? {
        return Ok(());
    }
    let stored = redguard::retry_until(deadline, || semaphore.permits())?;
    if stored == i64::from(permits) {
        return Ok(());
    }
    Err(Mismatch::Count(Failure::new(
        code::DATAERR,
        format!(
            "semaphore {} has {stored} permits, not {permits} (--permits {permits}); give \
             every caller the same count, or delete the key to start over",
            show::name(name)
        ),
    )))
}

/// After CMD: gives the permit back and decides the exit status.
fn finish(
    args: &ExecArgs,
    name: &[u8],
    client: &redguard::Client,
    permit: PermitGuard,
    cmd_code: u8,
    lost: bool,
) -> Result<ExitCode, Failure> {
    if lost {
        if permit.is_lost() {
            // Nothing of ours to give back (see `exec::finish`).
            std::mem::forget(permit);
        } else {
            // Still ours (CMD was stopped while its lease ran low): given
            // back.
            let failed = client.stats().failed_releases;
            let _ = permit.release();
            let lease = args.lease.unwrap_or_else(|| client.watchdog_timeout());
            crate::child::await_release(client, "a permit", lease, true, failed);
        }
        return Ok(match args.on_lost {
            OnLost::Kill => ExitCode::from(code::SOFTWARE),
            OnLost::Warn => ExitCode::from(cmd_code),
        });
    }
    let id = permit.id().to_string();
    let failed = client.stats().failed_releases;
    let released = permit.release();
    let lease = args.lease.unwrap_or_else(|| client.watchdog_timeout());
    let through = crate::child::await_release(
        client,
        &format!("permit {id} of semaphore {}", show::name(name)),
        lease,
        args.quiet,
        failed,
    );
    match released {
        Ok(()) if !through => {
            out::error(&format!(
                "the release of permit {id} of semaphore {} after CMD (exit status {cmd_code})                  did not go through before its lease ended; the permit came back with its lease",
                show::name(name)
            ));
            Ok(ExitCode::from(code::RELEASE_FAILED))
        }
        Ok(()) => {
            log::info!(
                "redguard: released permit {id} of semaphore {}",
                show::name(name)
            );
            Ok(ExitCode::from(cmd_code))
        }
        Err(e) if e.is_lock_lost() || e.is_not_held() => {
            let why = lost_reason(args);
            let what = format!("{why} of permit {id} of semaphore {}", show::name(name));
            match args.on_lost {
                OnLost::Kill => {
                    out::error(&format!(
                        "{what} after CMD ended: CMD exited with {cmd_code} while the lease was \
                         valid on this host's clock, but the release found the permit no longer held"
                    ));
                    Ok(ExitCode::from(code::SOFTWARE))
                }
                OnLost::Warn => {
                    out::warn(&format!(
                        "{what} after CMD ended (CMD ran within the lease; the release found \
                         the permit no longer held)"
                    ));
                    Ok(ExitCode::from(cmd_code))
                }
            }
        }
        Err(e) => {
            out::error(&format!(
                "could not give back permit {id} of semaphore {} after CMD (exit status \
                 {cmd_code}): {}; it comes back when its lease runs out",
                show::name(name),
                crate::fail::chain(&e),
            ));
            Ok(ExitCode::from(code::RELEASE_FAILED))
        }
    }
}
