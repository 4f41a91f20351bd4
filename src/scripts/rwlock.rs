//! Wrappers of the read-write lock scripts (`lua/rw_*.lua`): the read and
//! write sides of Redisson's `RReadWriteLock`.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::{Acquire, Release, evalsha, release_reply, ttl_from, unexpected};
use crate::error::{Error, Result};
use crate::keys::{READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE};

pub(super) static READ_LOCK: LazyLock<Script> = LazyLock::new(|| shaped!("rw_read_lock"));
static WRITE_LOCK: LazyLock<Script> = LazyLock::new(|| shaped!("rw_write_lock"));
static READ_UNLOCK: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("rw_read_unlock"));
static WRITE_UNLOCK: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("rw_write_unlock"));
pub(super) static READ_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rw_read_renew.lua")));
static FORCE_UNLOCK: LazyLock<super::Notifying> =
    LazyLock::new(|| notifying!("rw_force_unlock", shaped));
static READ_KEEP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rw_read_keep.lua")));

/// The keys a read hold's scripts name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadKeys<'a> {
    /// The lock hash.
    pub(crate) key: &'a [u8],
    /// `redisson_rwlock:{name}`.
    pub(crate) channel: &'a [u8],
    /// The holder's `{name}:<holder id>:rwlock_timeout`.
    pub(crate) timeout_prefix: &'a [u8],
    /// `{name}` (or the name, when it has a `{`).
    pub(crate) key_prefix: &'a [u8],
}

fn acquire_reply(reply: Value) -> Result<Acquire> {
    match reply {
        Value::Nil => Ok(Acquire::Acquired { token: None }),
        Value::Int(ms) => Ok(Acquire::Busy { pttl: ttl_from(ms) }),
        other => Err(unexpected("read-write acquire", &other)),
    }
}

/// Takes (or re-enters) the read side for `holder`, whose write field is
/// `write_field` (a write holder may read).
pub(crate) fn read_acquire(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    timeout_prefix: &[u8],
    holder: &str,
    write_field: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let reply = evalsha(conn, &READ_LOCK, &[key, timeout_prefix], |cmd| {
        cmd.arg(lease_ms).arg(holder).arg(write_field);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    acquire_reply(reply)
}

/// Takes (or re-enters) the write side under `write_field`.
pub(crate) fn write_acquire(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    write_field: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let reply = evalsha(conn, &WRITE_LOCK, &[key], |cmd| {
        cmd.arg(lease_ms).arg(write_field);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    acquire_reply(reply)
}

/// Releases one read hold of `holder` (every one with `all`).
/// [`Release::StillHeld`] means the holder still has read holds;
/// [`Release::Released`] that its last one went (others may still read).
pub(crate) fn read_release(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    keys: ReadKeys<'_>,
    holder: &str,
    all: bool,
) -> Result<Release> {
    let reply = evalsha(
        conn,
        READ_UNLOCK.get(publish),
        &[keys.key, keys.timeout_prefix, keys.key_prefix],
        |cmd| {
            cmd.arg(UNLOCK_MESSAGE)
                .arg(holder)
                .arg(if all { "1" } else { "0" })
                .arg(keys.channel);
        },
    )
    .map_err(|e| Error::from_redis(e, keys.key))?;
    release_reply(reply)
}

/// Releases one write hold under `write_field` (every one with `all`),
/// re-applying `lease_ms` while holds remain.
pub(crate) fn write_release(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    key: &[u8],
    channel: &[u8],
    write_field: &str,
    lease_ms: u64,
    all: bool,
) -> Result<Release> {
    let reply = evalsha(conn, WRITE_UNLOCK.get(publish), &[key], |cmd| {
        cmd.arg(READ_UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(write_field)
            .arg(if all { "1" } else { "0" })
            .arg(channel);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    release_reply(reply)
}

/// Sets the lease of every read hold of `holder` to `lease_ms` from now:
/// `false` when it holds none.
pub(crate) fn read_renew(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    timeout_prefix: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<bool> {
    let reply = evalsha(conn, &READ_RENEW, &[key, timeout_prefix], |cmd| {
        cmd.arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match &reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1)] => Ok(true),
            [Value::Int(0)] => Ok(false),
            [Value::Int(-1)] => Err(Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
            }),
            _ => Err(unexpected("read renew", &reply)),
        },
        other => Err(unexpected("read renew", other)),
    }
}

/// Deletes the read-write lock at `key` whoever holds it, when it is in
/// `mode` (`None`: either mode), and wakes every waiter: `true` when
/// something was deleted.
pub(crate) fn force_unlock(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    key: &[u8],
    channel: &[u8],
    mode: Option<&str>,
) -> Result<bool> {
    let reply = evalsha(conn, FORCE_UNLOCK.get(publish), &[key], |cmd| {
        cmd.arg(READ_UNLOCK_MESSAGE)
            .arg(mode.unwrap_or(""))
            .arg(channel);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("read-write force unlock", &other)),
    }
}

/// The look-up of a fixed-lease read hold of `holder`, for a pipeline
/// (`lua/rw_read_keep.lua`): its timeout keys and the lock key that another
/// client made expire within `left` (the holder's remaining lease) get
/// `left` back. Replies 1 (held) or 0 (lost); `NOSCRIPT` until
/// [`load_read_keep`] ran on the server.
pub(crate) fn read_keep_cmd(
    key: &[u8],
    timeout_prefix: &[u8],
    left: std::time::Duration,
    holder: &str,
) -> redis::Cmd {
    let ms = left.as_millis().clamp(1, u64::MAX as u128) as u64;
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(READ_KEEP.get_hash())
        .arg(2)
        .arg(key)
        .arg(timeout_prefix)
        .arg(ms)
        .arg(holder);
    cmd
}

/// Loads the script of [`read_keep_cmd`] (after a `NOSCRIPT` reply).
pub(crate) fn load_read_keep(conn: &mut dyn redis::ConnectionLike) -> Result<()> {
    READ_KEEP.load(conn).map(drop).map_err(Error::redis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        assert_eq!(
            acquire_reply(Value::Nil).unwrap(),
            Acquire::Acquired { token: None }
        );
        assert_eq!(
            acquire_reply(Value::Int(-1)).unwrap(),
            Acquire::Busy { pttl: None }
        );
        assert!(acquire_reply(Value::Okay).is_err());
    }
}
