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
    let reply: Value = LOCK
        .key(key)
        .arg(lease_ms)
        .arg(holder)
        .invoke(conn)
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
    let reply: Value = UNLOCK
        .key(key)
        .key(channel)
        .arg(UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(holder)
        .invoke(conn)
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
    let reply: Value = RENEW
        .key(key)
        .arg(lease_ms)
        .arg(holder)
        .invoke(conn)
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

/// Sends `pipe` and reads its `n` replies, giving up at the first I/O error
/// or timeout: redis-rs's own pipeline reading would wait one more timeout
/// for every remaining reply from a frozen server.
fn query_pipeline(
    conn: &mut redis::Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> Result<Vec<Value>> {
    conn.send_packed_command(&pipe.get_packed_pipeline())?;
    let mut replies = Vec::with_capacity(n);
    for _ in 0..n {
        replies.push(conn.recv_response()?);
    }
    Ok(replies)
}

/// Renews many leases in one pipeline (one round trip). The outer `Err` is
/// a failure of the whole round trip; each inner result is one renewal's.
pub(crate) fn renew_batch(
    conn: &mut redis::Connection,
    batch: &[Renewal<'_>],
) -> Result<Vec<Result<bool>>> {
    let build = || {
        let mut pipe = redis::pipe();
        for r in batch {
            pipe.cmd("EVALSHA")
                .arg(RENEW.get_hash())
                .arg(1)
                .arg(r.key)
                .arg(r.lease_ms)
                .arg(r.holder);
        }
        pipe
    };
    let mut replies = query_pipeline(conn, &build(), batch.len())?;
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
    if replies.iter().any(noscript) {
        // The server lost its script cache (restart, SCRIPT FLUSH): load it
        // and send the batch once more.
        RENEW.load(conn)?;
        replies = query_pipeline(conn, &build(), batch.len())?;
    }
    if replies.len() != batch.len() {
        return Err(Error::Protocol(format!(
            "renew pipeline answered {} replies for {} renewals",
            replies.len(),
            batch.len()
        )));
    }
    Ok(replies
        .iter()
        .zip(batch)
        .map(|(reply, r)| match reply {
            Value::ServerError(e) => {
                Err(Error::from_redis(redis::RedisError::from(e.clone()), r.key))
            }
            other => renew_reply(other),
        })
        .collect())
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
