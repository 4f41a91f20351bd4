//! `redguard list [PATTERN]`: the locks whose names match, with their
//! holders (host, pid, held for), lease left and waiters (a fair lock's
//! queue with each waiter's deadline), found with SCAN on
//! every master (`Client::list_locks`).

use std::process::ExitCode;
use std::time::Duration;

use redguard::{LockInfo, LockKind};
use serde_json::{Value, json};

use crate::cli::{ListArgs, SortBy};
use crate::connect::Connection;
use crate::fail::Failure;
use crate::show;
use crate::show::expiry_fields;
use crate::status::{holder_line, holders_json, listed_kind, queue_json, queue_text};

/// `redguard list`.
pub(crate) fn list(args: &ListArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let mut locks = conn
        .client
        .list_locks(&args.pattern, args.all)
        .map_err(|e| Failure::from_lib(&e, &conn.server))?;
    if let Some(min) = args.older_than {
        locks.retain(|info| longest_hold(info).is_some_and(|held| held >= min));
    }
    sort(&mut locks, args.sort);
    if args.json {
        let all: Vec<Value> = locks.iter().map(to_json).collect();
        crate::out::print_json(Value::Array(all));
    } else {
        for info in &locks {
            print!("{}", to_text(info));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long the longest-holding holder with a record has held the lock.
fn longest_hold(info: &LockInfo) -> Option<Duration> {
    info.holders
        .iter()
        .filter_map(|(h, _)| info.held_for(h))
        .max()
}

fn sort(locks: &mut [LockInfo], by: SortBy) {
    match by {
        SortBy::Name => locks.sort_by(|a, b| a.name.cmp(&b.name)),
        SortBy::Held => locks.sort_by(|a, b| {
            // Longest first; locks without a known start last.
            longest_hold(b)
                .cmp(&longest_hold(a))
                .then_with(|| a.name.cmp(&b.name))
        }),
        SortBy::Ttl => locks.sort_by_key(|info| {
            let left = info.ttl.and_then(redguard::Ttl::expires_in);
            (left.is_none(), left, info.name.clone())
        }),
    }
}

fn to_text(info: &LockInfo) -> String {
    use std::fmt::Write;
    let name = show::name(&info.name);
    let mut s = String::new();
    if let LockKind::Other { redis_type } = &info.kind {
        let _ = writeln!(
            s,
            "{name}: not a lock ({redis_type}{}, ttl {})",
            if redis_type == "hash" {
                " of other fields than a lock's"
            } else {
                ""
            },
            show::ttl(info.ttl)
        );
        return s;
    }
    let queued = match &info.kind {
        LockKind::Fair { queue } => format!("{} queued, ", info.queue_len.max(queue.len() as u64)),
        _ => String::new(),
    };
    let subscribed = info
        .subscribers
        .map_or_else(|| "?".to_owned(), |n| n.to_string());
    let _ = writeln!(
        s,
        "{name}: {}, ttl {}, waiters {queued}{subscribed} subscribed",
        listed_kind(info),
        show::ttl(info.ttl)
    );
    for (holder, count) in &info.holders {
        let _ = writeln!(
            s,
            "  {holder} (hold count {count}): {}",
            holder_line(info, holder)
        );
    }
    if let LockKind::Fair { queue } = &info.kind {
        s.push_str(&queue_text(queue, info.queue_len, "  "));
    }
    s
}

fn to_json(info: &LockInfo) -> Value {
    let mut v = json!({
        "name": show::json_name(&info.name),
        "kind": listed_kind(info),
        "held": info.is_held(),
    });
    expiry_fields(info.ttl, &mut v);
    match &info.kind {
        LockKind::Other { redis_type } => {
            v["redis_type"] = json!(redis_type);
            return v;
        }
        LockKind::Fair { queue } => {
            v["queue"] = queue_json(queue);
            v["queue_len"] = json!(info.queue_len.max(queue.len() as u64));
        }
        LockKind::ReadWrite { mode } => v["mode"] = json!(mode),
        _ => {}
    }
    v["holders"] = holders_json(info);
    v["subscribers"] = json!(info.subscribers);
    v
}
