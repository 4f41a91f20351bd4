//! Wrappers of the semaphore scripts: Redisson's `RSemaphore`
//! (`lua/semaphore_*.lua`) and `RPermitExpirableSemaphore`
//! (`lua/permit_*.lua`).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::{evalsha, ttl_from, unexpected};
use crate::error::{Error, Result};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/semaphore_acquire.lua")));
static RELEASE: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("semaphore_release"));
static SET: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("semaphore_set"));
static PERMIT_ACQUIRE: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("permit_acquire"));
static PERMIT_RELEASE: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("permit_release"));
pub(super) static PERMIT_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/permit_renew.lua")));
static PERMIT_COUNT: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("permit_count"));
static PERMIT_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/permit_delete.lua")));

/// The keys of an expiring-permit semaphore.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitKeys<'a> {
    /// The permit counter (the semaphore's name).
    pub(crate) counter: &'a [u8],
    /// `{name}:timeout`.
    pub(crate) timeouts: &'a [u8],
    /// `redisson_sc:{name}`.
    pub(crate) channel: &'a [u8],
}

fn int(what: &str, reply: &Value) -> Result<i64> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

/// Takes `permits` permits if all are available: `true` when taken.
pub(crate) fn acquire(
    conn: &mut dyn redis::ConnectionLike,
    counter: &[u8],
    permits: u32,
) -> Result<bool> {
    let reply = evalsha(conn, &ACQUIRE, &[counter], |cmd| {
        cmd.arg(permits);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    Ok(int("semaphore acquire", &reply)? == 1)
}

/// Adds `permits` to the counter (negative: takes them away), publishing
/// the new count when it grew. Returns the new count.
pub(crate) fn release(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    counter: &[u8],
    channel: &[u8],
    permits: i64,
) -> Result<i64> {
    let reply = evalsha(conn, RELEASE.get(publish), &[counter], |cmd| {
        cmd.arg(permits).arg(channel);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    int("semaphore release", &reply)
}

/// Sets the counter to `permits` unless it exists: `true` when set.
pub(crate) fn try_set(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    counter: &[u8],
    channel: &[u8],
    permits: u32,
) -> Result<bool> {
    let reply = evalsha(conn, SET.get(publish), &[counter], |cmd| {
        cmd.arg(permits).arg(channel);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    Ok(int("semaphore set", &reply)? == 1)
}

/// Outcome of taking expiring permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitAcquire {
    /// Taken under the ids given.
    Acquired,
    /// Not enough permits; worth trying again after this long at the
    /// latest (the earliest lease end), `None` when unknown.
    Busy(Option<Duration>),
}

/// Takes one permit per id in `ids`, all or none, each with a lease of
/// `lease_ms`; lease ends are stamped `skew_ms` later, and taken back only
/// `skew_ms` after they passed (the tolerated clock skew).
pub(crate) fn permit_acquire(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    keys: PermitKeys<'_>,
    lease_ms: u64,
    skew_ms: u64,
    ids: &[[u8; 16]],
) -> Result<PermitAcquire> {
    let reply = evalsha(
        conn,
        PERMIT_ACQUIRE.get(publish),
        &[keys.counter, keys.timeouts],
        |cmd| {
            cmd.arg(lease_ms).arg(skew_ms).arg(keys.channel);
            for id in ids {
                cmd.arg(&id[..]);
            }
        },
    )
    .map_err(|e| Error::from_redis(e, keys.counter))?;
    permit_acquire_reply(&reply)
}

fn permit_acquire_reply(reply: &Value) -> Result<PermitAcquire> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1)] => Ok(PermitAcquire::Acquired),
            [Value::Int(0), Value::Int(ms)] => Ok(PermitAcquire::Busy(ttl_from(*ms))),
            _ => Err(unexpected("permit acquire", reply)),
        },
        other => Err(unexpected("permit acquire", other)),
    }
}

/// Gives back the permit `id`: `true` when it was held.
pub(crate) fn permit_release(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    keys: PermitKeys<'_>,
    id: &[u8; 16],
) -> Result<bool> {
    let reply = evalsha(
        conn,
        PERMIT_RELEASE.get(publish),
        &[keys.counter, keys.timeouts],
        |cmd| {
            cmd.arg(&id[..]).arg(keys.channel);
        },
    )
    .map_err(|e| Error::from_redis(e, keys.counter))?;
    Ok(int("permit release", &reply)? == 1)
}

/// Takes back permits whose lease ended more than `skew_ms` ago, then
/// counts: (available, held).
pub(crate) fn permit_count(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    keys: PermitKeys<'_>,
    skew_ms: u64,
) -> Result<(i64, u64)> {
    let reply = evalsha(
        conn,
        PERMIT_COUNT.get(publish),
        &[keys.counter, keys.timeouts],
        |cmd| {
            cmd.arg(skew_ms).arg(keys.channel);
        },
    )
    .map_err(|e| Error::from_redis(e, keys.counter))?;
    match &reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(available), Value::Int(held)] if *held >= 0 => {
                Ok((*available, *held as u64))
            }
            _ => Err(unexpected("permit count", &reply)),
        },
        other => Err(unexpected("permit count", other)),
    }
}

/// Deletes an expiring-permit semaphore's counter and leases: `true` when
/// either existed.
pub(crate) fn permit_delete(
    conn: &mut dyn redis::ConnectionLike,
    keys: PermitKeys<'_>,
) -> Result<bool> {
    let reply = evalsha(conn, &PERMIT_DELETE, &[keys.counter, keys.timeouts], |_| {})
        .map_err(|e| Error::from_redis(e, keys.counter))?;
    Ok(int("permit delete", &reply)? == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_replies_parse() {
        let arr = |v: Vec<Value>| Value::Array(v);
        assert_eq!(
            permit_acquire_reply(&arr(vec![Value::Int(1)])).unwrap(),
            PermitAcquire::Acquired
        );
        assert_eq!(
            permit_acquire_reply(&arr(vec![Value::Int(0), Value::Int(-1)])).unwrap(),
            PermitAcquire::Busy(None)
        );
        assert_eq!(
            permit_acquire_reply(&arr(vec![Value::Int(0), Value::Int(40)])).unwrap(),
            PermitAcquire::Busy(Some(Duration::from_millis(40)))
        );
        assert!(permit_acquire_reply(&Value::Nil).is_err());
    }
}
