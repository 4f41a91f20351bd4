//! `redguard unlock --force NAME [--kind KIND]`: deletes what NAME holds
//! whoever holds it, and wakes its waiters. A lock is found by its layout;
//! a semaphore, latch or `once` record only when `--kind` names it, since
//! their plain counters and hashes cannot be told apart safely.

use std::process::ExitCode;

use redguard::{LockInfo, LockKind, OnceStatus};

use crate::cli::{Kind, UnlockArgs, name_bytes};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::out;
use crate::show;

/// `redguard unlock --force`.
pub(crate) fn unlock(args: &UnlockArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    debug_assert!(args.force, "clap requires --force");
    let name = name_bytes(&args.name)?;
    match args.kind {
        None | Some(Kind::Lock) => lock(&name, conn),
        Some(Kind::Semaphore) => semaphore(&name, conn),
        Some(Kind::Latch) => latch(&name, conn),
        Some(Kind::Once) => once(&name, conn),
    }
}

/// A library error on NAME as `--kind` `what`.
fn fail(err: &redguard::Error, name: &[u8], what: &str, conn: &Connection) -> Failure {
    Failure::from_lib_on(err, &conn.server, name, what)
}

fn lock(name: &[u8], conn: &Connection) -> Result<ExitCode, Failure> {
    let handle = conn.client.lock(name);
    let lib = |e: redguard::Error| fail(&e, name, "lock", conn);
    let info = handle.inspect().map_err(lib)?;
    if let LockKind::Other { redis_type } = &info.kind {
        return Err(not_a_lock(name, redis_type, conn));
    }
    // Named before the removal: a run's attempt reads as abandoned after.
    let kind = crate::status::named_kind(conn, &info);
    // A fair lock's force unlock also wakes the head of its queue.
    let removed = match &info.kind {
        LockKind::Fair { .. } => conn.client.fair_lock(name).force_unlock(),
        // Its waiters listen on the read-write channel.
        LockKind::ReadWrite { .. } => conn.client.read_write_lock(name).force_unlock(),
        _ => handle.force_unlock(),
    }
    .map_err(lib)?;
    if removed {
        println!(
            "removed lock {}: {}",
            show::name(name),
            summary(&info, kind)
        );
        removed_holders(&info);
    } else if let LockKind::Fair { queue } = &info.kind {
        println!(
            "lock {} was not held; {} waiter(s) left in its fair queue",
            show::name(name),
            queue.len()
        );
    } else {
        println!("lock {} was free; nothing removed", show::name(name));
    }
    Ok(ExitCode::SUCCESS)
}

/// Names the holders a force unlock removed, with the host, pid and
/// program their records give, and warns that their commands are being
/// stopped: a redguard holder hears the unlock message and stops its
/// command at once; a holder without a record (Redisson, records off) may
/// notice only at its next renewal.
fn removed_holders(info: &LockInfo) {
    if info.holders.is_empty() {
        return;
    }
    for (holder, _) in &info.holders {
        println!(
            "  removed holder {holder}: {}",
            crate::status::holder_line(info, holder)
        );
    }
    let unrecorded = info
        .holders
        .iter()
        .filter(|(h, _)| info.record_of(h).is_none())
        .count();
    let mut warning = format!(
        "{} holder(s) of {} may still be running: a redguard holder hears of the force unlock \
         at once and stops its command (`exec`: SIGTERM now, SIGKILL after its --kill-grace)",
        info.holders.len(),
        show::name(&info.name)
    );
    if unrecorded > 0 {
        warning.push_str(&format!(
            "; {unrecorded} without a record (not redguard, or records off) may notice only at \
             its next renewal"
        ));
    }
    out::warn(&warning);
}

/// The refusal for a name that holds no lock, naming the `--kind` that
/// would delete it.
fn not_a_lock(name: &[u8], redis_type: &str, conn: &Connection) -> Failure {
    let hint = match redis_type {
        "string" => {
            "; if it is a semaphore or a latch, --kind semaphore or --kind latch deletes it"
        }
        "hash" if matches!(conn.client.once_status(name), Ok(OnceStatus::Done(_))) => {
            "; it is a `redguard once` record: --kind once deletes it"
        }
        _ => "",
    };
    Failure::new(
        code::DATAERR,
        format!(
            "key {} is not a lock: {}; left untouched{hint}",
            show::name(name),
            show::not_a_lock(redis_type)
        ),
    )
}

fn semaphore(name: &[u8], conn: &Connection) -> Result<ExitCode, Failure> {
    let removed = conn
        .client
        .expiring_semaphore(name)
        .delete()
        .map_err(|e| fail(&e, name, "semaphore", conn))?;
    if removed {
        println!(
            "removed semaphore {}: its permit count and the leases of its held permits; the \
             next `exec --permits N` sets a count again",
            show::name(name)
        );
    } else {
        println!(
            "semaphore {} did not exist; nothing removed",
            show::name(name)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn latch(name: &[u8], conn: &Connection) -> Result<ExitCode, Failure> {
    let removed = conn
        .client
        .count_down_latch(name)
        .delete()
        .map_err(|e| fail(&e, name, "latch", conn))?;
    if removed {
        println!(
            "removed latch {}: its waiters were woken and find it open",
            show::name(name)
        );
    } else {
        println!("latch {} did not exist; nothing removed", show::name(name));
    }
    Ok(ExitCode::SUCCESS)
}

fn once(name: &[u8], conn: &Connection) -> Result<ExitCode, Failure> {
    let lib = |e: redguard::Error| fail(&e, name, "run-once record", conn);
    if conn.client.forget_once(name).map_err(lib)? {
        println!(
            "removed the record of {}; the next caller runs CMD",
            show::name(name)
        );
        return Ok(ExitCode::SUCCESS);
    }
    // A run in progress holds the key as a lock: taking it away ends the
    // claim (its runner records nothing).
    if let OnceStatus::Running { holder, .. } = conn.client.once_status(name).map_err(lib)? {
        let removed = conn.client.lock(name).force_unlock().map_err(lib)?;
        if removed {
            println!(
                "removed the running claim of {} (holder {holder}); nothing will be recorded, \
                 the next caller runs CMD",
                show::name(name)
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    println!("{}: no record; nothing removed", show::name(name));
    Ok(ExitCode::SUCCESS)
}

/// What a force unlock removed: `kind` (as `status` names it), the
/// holders with their hold counts, the lease left.
fn summary(info: &LockInfo, kind: &str) -> String {
    let holders: Vec<String> = info
        .holders
        .iter()
        .map(|(h, n)| format!("{h} x{n}"))
        .collect();
    let holders = if holders.is_empty() {
        "no holder".to_owned()
    } else {
        holders.join(", ")
    };
    let kind = match &info.kind {
        LockKind::ReadWrite { mode } => format!("read-write, {mode} mode"),
        LockKind::Fair { queue } => format!("fair, {} queued", queue.len()),
        _ => kind.to_owned(),
    };
    format!("{kind}; {holders}; ttl {}", show::ttl(info.ttl))
}
