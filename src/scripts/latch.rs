//! Wrappers of the count-down latch scripts (`lua/latch_*.lua`), Redisson's
//! `RCountDownLatch`.

use std::sync::LazyLock;

use redis::Value;

use super::{evalsha, unexpected};
use crate::error::{Error, Result};
use crate::keys::{NEW_COUNT_MESSAGE, ZERO_COUNT_MESSAGE};

static SET: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("latch_set"));
static COUNT_DOWN: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("latch_count_down"));
static DELETE: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("latch_delete"));

fn int(what: &str, reply: &Value) -> Result<i64> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

/// Sets the count unless the latch is set: `true` when set.
pub(crate) fn try_set(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    counter: &[u8],
    channel: &[u8],
    count: u64,
) -> Result<bool> {
    let reply = evalsha(conn, SET.get(publish), &[counter], |cmd| {
        cmd.arg(NEW_COUNT_MESSAGE).arg(count).arg(channel);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    Ok(int("latch set", &reply)? == 1)
}

/// Counts down by one; returns the count left (0 once open).
pub(crate) fn count_down(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    counter: &[u8],
    channel: &[u8],
) -> Result<u64> {
    let reply = evalsha(conn, COUNT_DOWN.get(publish), &[counter], |cmd| {
        cmd.arg(ZERO_COUNT_MESSAGE).arg(channel);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    let left = int("latch count down", &reply)?;
    u64::try_from(left).map_err(|_| unexpected("latch count down", &reply))
}

/// Deletes the latch: `true` when there was one. Its waiters get the zero
/// message: a deleted latch is open.
pub(crate) fn delete(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    counter: &[u8],
    channel: &[u8],
) -> Result<bool> {
    let reply = evalsha(conn, DELETE.get(publish), &[counter], |cmd| {
        cmd.arg(ZERO_COUNT_MESSAGE).arg(channel);
    })
    .map_err(|e| Error::from_redis(e, counter))?;
    Ok(int("latch delete", &reply)? == 1)
}
