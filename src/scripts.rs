//! The Lua scripts of `lua/` and typed wrappers around them. The only module
//! that knows each script's `KEYS`/`ARGV` order and reply shape.
//!
//! Every script is a compiled-in constant: names and holder ids travel only
//! as `KEYS`/`ARGV`, never spliced into script text.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{Error, Result};
use crate::keys::UNLOCK_MESSAGE;

static LOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock.lua")));
static UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
static RENEW_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew_many.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_unlock.lua")));
static RELEASE_HOLDER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release_holder.lua")));

/// Outcome of the acquire script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired, or re-entered by the same holder.
    Acquired,
    /// Held by someone else; `pttl` is its remaining ttl, `None` when the
    /// key has no expiry.
    Busy { pttl: Option<Duration> },
}

/// Outcome of the release script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The holder did not hold the lock; nothing changed.
    NotHeld,
    /// One hold released; the holder still holds the lock.
    StillHeld,
    /// The last hold released: key deleted, unlock message published.
    Released,
}

/// Sends `EVALSHA <script's hash> <numkeys> <keys> <args>` in one command;
/// on NOSCRIPT (a restarted or flushed server) loads the script and sends it
/// again. The same as `Script::key(..).arg(..).invoke(..)`, without building
/// every argument twice: the hot path of every lock call.
fn evalsha(
    conn: &mut dyn redis::ConnectionLike,
    script: &Script,
    keys: &[&[u8]],
    args: impl FnOnce(&mut redis::Cmd),
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    args(&mut cmd);
    match cmd.query(conn) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            cmd.query(conn)
        }
        other => other,
    }
}

fn ttl_from(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Runs the acquire script for `holder` with a lease of `lease_ms`.
pub(crate) fn acquire(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let reply = evalsha(conn, &LOCK, &[key], |cmd| {
        cmd.arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Nil => Ok(Acquire::Acquired),
        Value::Int(ms) => Ok(Acquire::Busy { pttl: ttl_from(ms) }),
        other => Err(unexpected("acquire", &other)),
    }
}

/// Runs the release script: releases one hold of `holder`, re-applying
/// `lease_ms` while holds remain.
pub(crate) fn release(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    channel: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<Release> {
    let reply = evalsha(conn, &UNLOCK, &[key, channel], |cmd| {
        cmd.arg(UNLOCK_MESSAGE).arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Nil => Ok(Release::NotHeld),
        Value::Int(0) => Ok(Release::StillHeld),
        Value::Int(1) => Ok(Release::Released),
        other => Err(unexpected("release", &other)),
    }
}

/// Runs the renew script once: `true` when `holder` still held the lock and
/// its lease is now `lease_ms` from now.
pub(crate) fn renew(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<bool> {
    let reply = evalsha(conn, &RENEW, &[key], |cmd| {
        cmd.arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    renew_reply(&reply)
}

fn renew_reply(reply: &Value) -> Result<bool> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("renew", other)),
    }
}

/// One renewal of a batch: the lock key, the holder, the lease.
pub(crate) struct Renewal<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) holder: &'a str,
    pub(crate) lease_ms: u64,
}

/// Renews many leases in one round trip: one pipeline of script calls, each
/// renewing at most `per_call` leases. The outer `Err` is a failure of the
/// whole round trip; each inner result is one renewal's, in `batch` order.
///
/// Multi-key script calls instead of one call per lock: the server pays the
/// script call overhead (several microseconds, most of a renewal's cost)
/// once per call, not once per lock; and several calls per round trip, so
/// that the watchdog thread and the server do not hand the CPU back and
/// forth once per call. Both are what lets one server keep 100 000 leases of
/// a few seconds renewed. Every key must live on the connection's server
/// (for a cluster: the keys of one call in one slot).
pub(crate) fn renew_batch(
    conn: &mut dyn redis::ConnectionLike,
    batch: &[Renewal<'_>],
    per_call: usize,
) -> Result<Vec<Result<bool>>> {
    let per_call = per_call.max(1);
    let build = || {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in batch.chunks(per_call) {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(RENEW_MANY.get_hash())
                .arg(call.len());
            for r in call {
                cmd.arg(r.key);
            }
            for r in call {
                cmd.arg(r.lease_ms).arg(r.holder);
            }
        }
        pipe
    };
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let mut replies: Vec<Value> = build().query(conn)?;
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
    if replies.iter().any(noscript) {
        // The server lost its script cache (restart, SCRIPT FLUSH): load it
        // and send the batch once more.
        RENEW_MANY.load(conn)?;
        replies = build().query(conn)?;
    }
    let calls = batch.len().div_ceil(per_call);
    if replies.len() != calls {
        return Err(Error::Protocol(format!(
            "renew pipeline answered {} replies for {calls} calls",
            replies.len()
        )));
    }
    let mut out = Vec::with_capacity(batch.len());
    for (reply, call) in replies.into_iter().zip(batch.chunks(per_call)) {
        match reply {
            Value::Array(items) if items.len() == call.len() => {
                for (item, r) in items.iter().zip(call) {
                    out.push(match item {
                        Value::Int(1) => Ok(true),
                        Value::Int(0) => Ok(false),
                        Value::Int(-1) => Err(Error::WrongType {
                            key: String::from_utf8_lossy(r.key).into_owned(),
                        }),
                        other => return Err(unexpected("renew", other)),
                    });
                }
            }
            Value::ServerError(e) => {
                let err = redis::RedisError::from(e);
                for r in call {
                    out.push(Err(Error::from_redis(err.clone(), r.key)));
                }
            }
            other => return Err(unexpected("renew", &other)),
        }
    }
    Ok(out)
}

/// Runs the force-unlock script: `true` when a lock was deleted.
pub(crate) fn force_unlock(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    channel: &[u8],
) -> Result<bool> {
    let reply: Value = FORCE_UNLOCK
        .key(key)
        .key(channel)
        .arg(UNLOCK_MESSAGE)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("force unlock", &other)),
    }
}

/// Drops every hold of `holder` at once: `true` when it held the lock.
pub(crate) fn release_holder(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    channel: &[u8],
    holder: &str,
) -> Result<bool> {
    let reply: Value = RELEASE_HOLDER
        .key(key)
        .key(channel)
        .arg(UNLOCK_MESSAGE)
        .arg(holder)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Nil => Ok(false),
        Value::Int(1) => Ok(true),
        other => Err(unexpected("release holder", &other)),
    }
}

fn unexpected(what: &str, reply: &Value) -> Error {
    Error::Protocol(format!("unexpected {what} reply {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_constants_with_headers() {
        for text in [
            include_str!("../lua/lock.lua"),
            include_str!("../lua/unlock.lua"),
            include_str!("../lua/renew.lua"),
            include_str!("../lua/renew_many.lua"),
            include_str!("../lua/force_unlock.lua"),
            include_str!("../lua/release_holder.lua"),
        ] {
            assert!(text.starts_with("-- "));
            assert!(text.contains("KEYS[1]"));
            assert!(text.contains("Returns"));
        }
    }

    #[test]
    fn negative_pttl_means_no_expiry() {
        assert_eq!(ttl_from(-1), None);
        assert_eq!(ttl_from(-2), None);
        assert_eq!(ttl_from(1500), Some(Duration::from_millis(1500)));
    }
}
