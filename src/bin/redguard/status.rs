//! `redguard status NAME [--json]`: what is stored at a name, for people
//! and for scripts. Exits 0 when something is held, 1 when nothing is, 65
//! when the name holds a value that is no lock or synchronizer (the
//! fields and codes are listed in `redguard status --help`).

use std::process::ExitCode;

use redguard::{LockInfo, LockKind, OnceInfo, OnceStatus};
use serde_json::{Value, json};

use crate::cli::{StatusArgs, name_bytes};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::record_view::{record_json, record_line};
use crate::show;
use crate::sync_status::Counter;
use crate::waiters::Waiters;

/// Exit status of `status` when nothing is held.
const FREE: u8 = 1;

/// What a name holds.
enum Found {
    /// A lock of a known layout, free, or a value of another kind.
    Lock(LockInfo),
    /// A semaphore's or latch's counter, or expiring permits.
    Counter(Counter),
    /// A run of a run-once key, finished or (as its runner's record
    /// says) in progress, with its runner's record.
    Once(Box<OnceInfo>),
}

/// `redguard status`.
pub(crate) fn status(args: &StatusArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let name = name_bytes(&args.name)?;
    let found = read(conn, &name)?;
    let waiters = match &found {
        Found::Lock(info) if matches!(info.kind, LockKind::Other { .. }) => Waiters::default(),
        _ => Waiters::read(conn),
    };
    if args.json {
        crate::out::print_json(to_json(&name, &found, &waiters));
    } else {
        print!("{}", to_text(&name, &found, &waiters));
    }
    Ok(ExitCode::from(exit_code(&found)))
}

/// Reads what `name` holds: the lock layouts first, then, for a value
/// that is not a lock, the counters and run-once records it may be.
fn read(conn: &Connection, name: &[u8]) -> Result<Found, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let info = conn.client.lock(name).inspect().map_err(fail)?;
    let found = match &info.kind {
        // A run in progress is a fenced lock in layout: its runner's
        // holder record, or its last-attempt record naming the one holder
        // as a running attempt's runner, tells it apart.
        LockKind::Reentrant | LockKind::Fenced
            if is_once_run(&info) || matches!(info.kind, LockKind::Fenced) =>
        {
            match conn.client.once_inspect(name) {
                Ok(once)
                    if matches!(once.status, OnceStatus::Running { .. })
                        && (is_once_run(&info) || runs_its_attempt(&info, &once)) =>
                {
                    Some(Found::Once(Box::new(once)))
                }
                Ok(_) | Err(redguard::Error::WrongType { .. }) => None,
                Err(e) => return Err(fail(e)),
            }
        }
        LockKind::Free => match crate::sync_status::read(conn, name)? {
            Some(counter) => Some(Found::Counter(counter)),
            // A run-once key whose last attempt failed or was abandoned:
            // nothing is held, but its attempt is kept beside it.
            None => match conn.client.once_inspect(name) {
                Ok(once) if once.last_attempt.is_some() => Some(Found::Once(Box::new(once))),
                Ok(_) | Err(redguard::Error::WrongType { .. }) => None,
                Err(e) => return Err(fail(e)),
            },
        },
        LockKind::Other { redis_type } if redis_type == "string" => {
            crate::sync_status::read(conn, name)?.map(Found::Counter)
        }
        LockKind::Other { redis_type } if redis_type == "hash" => {
            match conn.client.once_inspect(name) {
                Ok(once) if matches!(once.status, OnceStatus::Done(_)) => {
                    Some(Found::Once(Box::new(once)))
                }
                Ok(_) | Err(redguard::Error::WrongType { .. }) => None,
                Err(e) => return Err(fail(e)),
            }
        }
        _ => None,
    };
    Ok(found.unwrap_or(Found::Lock(info)))
}

/// Whether the lock's one holder is the runner of the `once` key's
/// running last attempt (a run whose client keeps no holder record).
fn runs_its_attempt(info: &LockInfo, once: &OnceInfo) -> bool {
    match (info.holders.as_slice(), &once.last_attempt) {
        ([(holder, _)], Some(attempt)) => {
            attempt.state == redguard::AttemptState::Running && attempt.holder == holder.as_str()
        }
        _ => false,
    }
}

/// The kind of a lock as `unlock --force` names it: as [`listed_kind`],
/// and `once` also for a fenced lock whose one holder runs the key's
/// running last attempt (a runner without a holder record). A failed look
/// at the attempt leaves the kind as listed.
pub(crate) fn named_kind(conn: &Connection, info: &LockInfo) -> &'static str {
    if matches!(info.kind, LockKind::Fenced)
        && !is_once_run(info)
        && conn
            .client
            .once_inspect(&info.name)
            .is_ok_and(|once| runs_its_attempt(info, &once))
    {
        return "once";
    }
    listed_kind(info)
}

/// The kind of a lock as `list` and `unlock --force` name it: `once` for
/// a run in progress (as its runner's record says), else as [`kind_word`].
pub(crate) fn listed_kind(info: &LockInfo) -> &'static str {
    if matches!(info.kind, LockKind::Reentrant | LockKind::Fenced) && is_once_run(info) {
        "once"
    } else {
        kind_word(&info.kind)
    }
}

/// Whether the lock's one holder runs a run-once key, as its record says
/// (the run is a lock in layout).
fn is_once_run(info: &LockInfo) -> bool {
    match info.holders.as_slice() {
        [(holder, _)] => info.hold_kind(holder) == Some(redguard::HoldKind::Once),
        _ => false,
    }
}

fn exit_code(found: &Found) -> u8 {
    match found {
        Found::Lock(info) if matches!(info.kind, LockKind::Other { .. }) => code::DATAERR,
        Found::Lock(info) if info.is_held() => 0,
        Found::Counter(counter) if counter.is_held() => 0,
        Found::Once(once) if matches!(once.status, OnceStatus::Running { .. }) => 0,
        Found::Lock(_) | Found::Counter(_) | Found::Once(_) => FREE,
    }
}

/// The kind as `--json` names it.
pub(crate) fn kind_word(kind: &LockKind) -> &'static str {
    match kind {
        LockKind::Free => "free",
        LockKind::Reentrant => "reentrant",
        LockKind::Fenced => "fenced",
        LockKind::Fair { .. } => "fair",
        LockKind::ReadWrite { .. } => "read_write",
        LockKind::Other { .. } => "other",
        _ => "unknown",
    }
}

fn to_text(name: &[u8], found: &Found, waiters: &Waiters) -> String {
    match found {
        Found::Lock(info) => lock_text(name, info, waiters),
        Found::Counter(counter) => counter.text(name, waiters),
        Found::Once(once) => {
            let mut s = crate::once::info_text(once);
            s.push_str(&waiters.text(name, "  "));
            s
        }
    }
}

fn to_json(name: &[u8], found: &Found, waiters: &Waiters) -> Value {
    match found {
        Found::Lock(info) => lock_json(name, info, waiters),
        Found::Counter(counter) => counter.json(name, waiters),
        Found::Once(once) => {
            let running = matches!(once.status, OnceStatus::Running { .. });
            let mut v = json!({
                "name": show::json_name(name),
                "kind": "once",
                "held": running,
                "state": crate::once::state_word(once),
            });
            crate::once::info_fields(once, &mut v);
            v["waiters"] = waiters.json(name);
            v
        }
    }
}

fn lock_text(raw_name: &[u8], info: &LockInfo, waiters: &Waiters) -> String {
    use std::fmt::Write;
    let name = show::name(raw_name);
    let mut s = String::new();
    match &info.kind {
        LockKind::Free => {
            let _ = writeln!(s, "lock {name}: free");
            // Waiters of a name that holds nothing yet (a semaphore
            // without permits, a latch not yet set) still show.
            s.push_str(&waiters.text(raw_name, "  "));
            return s;
        }
        LockKind::Other { redis_type } => {
            let _ = writeln!(
                s,
                "lock {name}: not a lock: {} (ttl {}); left untouched",
                show::not_a_lock(redis_type),
                show::ttl(info.ttl)
            );
            return s;
        }
        kind => {
            let state = if info.is_held() { "held" } else { "not held" };
            let what = match kind {
                LockKind::ReadWrite { mode } => format!("read-write lock, {mode} mode"),
                LockKind::Fair { .. } => "fair lock".to_owned(),
                LockKind::Fenced => "fenced lock".to_owned(),
                _ => "reentrant lock".to_owned(),
            };
            let _ = writeln!(s, "lock {name}: {state} ({what})");
        }
    }
    let _ = writeln!(s, "  ttl: {}", show::ttl(info.ttl));
    for (holder, count) in &info.holders {
        let _ = writeln!(s, "  holder: {holder} (hold count {count})");
        let _ = writeln!(s, "    {}", holder_line(info, holder));
    }
    let queued = match &info.kind {
        LockKind::Fair { queue } => format!("{} queued, ", info.queue_len.max(queue.len() as u64)),
        _ => String::new(),
    };
    let subscribed = info
        .subscribers
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    let recorded = waiters.of(raw_name).len();
    let _ = writeln!(
        s,
        "  waiters: {queued}{subscribed} subscribed, {recorded} recorded"
    );
    match &info.kind {
        LockKind::Fair { queue } => {
            s.push_str(&waiters.queue_text(raw_name, queue, info.queue_len, "  "));
        }
        _ => s.push_str(&waiters.text(raw_name, "  ")),
    }
    s
}

/// What `holder`'s record says, on one line: host, pid, program and how
/// long it has held the lock; or that it has no record.
pub(crate) fn holder_line(info: &LockInfo, holder: &redguard::HolderId) -> String {
    record_line(info.record_of(holder), info.held_for(holder))
}

/// The record fields of one holder for `--json`: `record` (whether there
/// is one), `host`, `pid`, `program`, `version`, `held_for_ms`,
/// `held_since_unix_ms` (null when unknown).
pub(crate) fn holder_json(info: &LockInfo, holder: &redguard::HolderId, v: &mut Value) {
    record_json(
        info.record_of(holder),
        info.held_for(holder),
        info.held_since(holder),
        v,
    );
}

/// Every holder of `info` with its hold count and, where a record says
/// so, its host, pid and program: the `holders` array of `status` and
/// `list`.
pub(crate) fn holders_json(info: &LockInfo) -> Value {
    info.holders
        .iter()
        .map(|(h, n)| {
            let mut holder = json!({"id": h.as_str(), "count": n});
            holder_json(info, h, &mut holder);
            holder["hold_kind"] = json!(info.hold_kind(h).map(redguard::HoldKind::as_str));
            holder
        })
        .collect()
}

fn lock_json(name: &[u8], info: &LockInfo, waiters: &Waiters) -> Value {
    let mut v = json!({
        "name": show::json_name(name),
        "kind": kind_word(&info.kind),
        "held": info.is_held(),
    });
    show::expiry_fields(info.ttl, &mut v);
    v["holders"] = holders_json(info);
    v["subscribers"] = json!(info.subscribers);
    v["waiters"] = waiters.json(name);
    match &info.kind {
        LockKind::Fair { queue } => {
            v["queue"] = waiters.queue_json(name, queue);
            v["queue_len"] = json!(info.queue_len.max(queue.len() as u64));
            v["foreign_waiters"] = if waiters.unknown {
                Value::Null
            } else {
                json!(waiters.foreign(name, queue))
            };
        }
        LockKind::ReadWrite { mode } => v["mode"] = json!(mode),
        LockKind::Other { redis_type } => v["redis_type"] = json!(redis_type),
        _ => {}
    }
    v
}
