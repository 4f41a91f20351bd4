//! `redguard status NAME [--json]` and `redguard unlock --force NAME`.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use redguard::{LockInfo, LockKind, Ttl};
use serde_json::{Value, json};

use crate::cli::{StatusArgs, UnlockArgs, name_bytes, show_name, show_ttl};
use crate::connect::Connection;
use crate::fail::{Failure, code};

/// `redguard status`: prints what is stored at the name. Exit 0 whether
/// the lock is held or free; errors as usual.
pub(crate) fn status(args: &StatusArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let name = name_bytes(&args.name)?;
    let lock = conn.client.lock(&name);
    let info = lock
        .inspect()
        .map_err(|e| Failure::from_lib(&e, &conn.server))?;
    let counter = match &info.kind {
        LockKind::Free => crate::sync_status::describe(conn, &name)?,
        LockKind::Other { redis_type } if redis_type == "string" => {
            crate::sync_status::describe(conn, &name)?
        }
        _ => None,
    };
    if let Some((text, json)) = counter {
        if args.json {
            println!("{json}");
        } else {
            print!("{text}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        println!("{}", to_json(&name, &info));
    } else {
        print!("{}", to_text(&name, &info));
    }
    Ok(ExitCode::SUCCESS)
}

/// `redguard unlock --force`: deletes the lock whoever holds it (waiters
/// are woken by the unlock message) and prints what it removed.
pub(crate) fn unlock(args: &UnlockArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    debug_assert!(args.force, "clap requires --force");
    let name = name_bytes(&args.name)?;
    let lock = conn.client.lock(&name);
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let info = lock.inspect().map_err(fail)?;
    if let LockKind::Other { redis_type } = &info.kind {
        return Err(Failure::new(
            code::DATAERR,
            format!(
                "key {} holds a {redis_type}, not a lock; left untouched",
                show_name(&name)
            ),
        ));
    }
    // A fair lock's force unlock also wakes the head of its queue.
    let removed = match &info.kind {
        LockKind::Fair { .. } => conn.client.fair_lock(&name).force_unlock(),
        // Its waiters listen on the read-write channel.
        LockKind::ReadWrite { .. } => conn.client.read_write_lock(&name).force_unlock(),
        _ => lock.force_unlock(),
    }
    .map_err(fail)?;
    if removed {
        println!("removed lock {}: {}", show_name(&name), summary(&info));
    } else if let LockKind::Fair { queue } = &info.kind {
        println!(
            "lock {} was not held; {} waiter(s) left in its fair queue",
            show_name(&name),
            queue.len()
        );
    } else {
        println!("lock {} was free; nothing removed", show_name(&name));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line naming the current holder(s) and the remaining ttl, for the
/// spinner and the "busy" message.
pub(crate) fn describe_holder(info: &LockInfo) -> String {
    let ttl = show_ttl(info.ttl);
    match (&info.kind, info.holders.as_slice()) {
        (LockKind::Other { redis_type }, _) => {
            format!("the key holds a {redis_type}, not a lock (ttl {ttl})")
        }
        (_, []) => format!("no holder recorded (ttl {ttl})"),
        (_, [(holder, _)]) => format!("held by {holder} (ttl {ttl})"),
        (_, [(holder, _), rest @ ..]) => {
            format!("held by {holder} and {} more (ttl {ttl})", rest.len())
        }
    }
}

fn kind_word(kind: &LockKind) -> &'static str {
    match kind {
        LockKind::Free => "free",
        LockKind::Reentrant => "reentrant",
        LockKind::Fair { .. } => "fair",
        LockKind::ReadWrite { .. } => "read_write",
        LockKind::Other { .. } => "other",
        _ => "unknown",
    }
}

fn summary(info: &LockInfo) -> String {
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
        other => kind_word(other).to_owned(),
    };
    format!("{kind}; {holders}; ttl {}", show_ttl(info.ttl))
}

fn to_text(name: &[u8], info: &LockInfo) -> String {
    use std::fmt::Write;
    let name = show_name(name);
    let mut s = String::new();
    match &info.kind {
        LockKind::Free => {
            let _ = writeln!(s, "lock {name}: free");
            return s;
        }
        LockKind::Other { redis_type } => {
            let _ = writeln!(
                s,
                "lock {name}: not a lock: the key holds a {redis_type} (ttl {})",
                show_ttl(info.ttl)
            );
            return s;
        }
        kind => {
            let state = if info.is_held() { "held" } else { "not held" };
            let what = match kind {
                LockKind::ReadWrite { mode } => format!("read-write lock, {mode} mode"),
                LockKind::Fair { .. } => "fair lock".to_owned(),
                _ => "reentrant lock".to_owned(),
            };
            let _ = writeln!(s, "lock {name}: {state} ({what})");
        }
    }
    let _ = writeln!(s, "  ttl: {}", show_ttl(info.ttl));
    for (holder, count) in &info.holders {
        let _ = writeln!(s, "  holder: {holder} (hold count {count})");
    }
    if let LockKind::Fair { queue } = &info.kind {
        let now = SystemTime::now();
        for (i, waiter) in queue.iter().enumerate() {
            let deadline = match waiter.deadline {
                Some(at) => match at.duration_since(now) {
                    Ok(left) => format!("deadline in {}", show_ttl(Some(Ttl::Expires(left)))),
                    Err(_) => "deadline passed".to_owned(),
                },
                None => "no deadline".to_owned(),
            };
            let _ = writeln!(s, "  queued #{}: {} ({deadline})", i + 1, waiter.holder);
        }
    }
    s
}

fn to_json(name: &[u8], info: &LockInfo) -> Value {
    let ttl_ms = match info.ttl {
        None => Value::Null,
        Some(Ttl::Persistent) => json!(-1),
        Some(Ttl::Expires(d)) => json!(d.as_millis() as u64),
    };
    let mut v = json!({
        "name": String::from_utf8_lossy(name),
        "held": info.is_held(),
        "kind": kind_word(&info.kind),
        "ttl_ms": ttl_ms,
        "holders": info.holders.iter().map(|(h, n)| json!({"id": h.as_str(), "count": n})).collect::<Vec<_>>(),
    });
    match &info.kind {
        LockKind::Fair { queue } => {
            v["queue"] = queue
                .iter()
                .map(|w| {
                    let deadline = w
                        .deadline
                        .and_then(|d| d.duration_since(UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as u64);
                    json!({"id": w.holder.as_str(), "deadline_ms": deadline})
                })
                .collect();
        }
        LockKind::ReadWrite { mode } => v["mode"] = json!(mode),
        LockKind::Other { redis_type } => v["redis_type"] = json!(redis_type),
        _ => {}
    }
    v
}
