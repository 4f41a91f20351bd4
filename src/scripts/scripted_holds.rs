//! Holds of the synchronizers that the watchdog renews and releases with
//! scripts of their own: read and write holds of a read-write lock, and
//! expiring permits. (Locks whose hold is one hash field go through the
//! multi-key batches of `renew_many.lua` instead.)

use std::sync::Arc;

use redis::Value;

use super::rwlock::{self, READ_RENEW, ReadKeys};
use super::semaphore::{self, PERMIT_RENEW, PermitKeys};
use super::{RENEW_MANY, query_pipeline, unexpected};
use crate::error::{Error, Result};

/// What a watchdog entry holds, when it is not a plain lock-hash field.
#[derive(Debug, Clone)]
pub(crate) enum SyncHold {
    /// Every read hold of one holder on one read-write lock (the entry's
    /// holder is the holder id).
    Read {
        /// The holder's `{name}:<holder id>:rwlock_timeout`.
        timeout_prefix: Arc<[u8]>,
        /// `{name}`.
        key_prefix: Arc<[u8]>,
    },
    /// The write side of a read-write lock (the entry's holder is the write
    /// field `<holder id>:write`).
    Write,
    /// One permit of an expiring-permit semaphore (the entry's key is the
    /// permit counter, its holder the permit id in hex).
    Permit {
        /// `{name}:timeout`.
        timeouts: Arc<[u8]>,
        /// The permit id as stored.
        id: [u8; 16],
        /// The tolerated clock skew in ms, added to each stamped lease end
        /// ([`Builder::permit_clock_skew`](crate::Builder::permit_clock_skew)).
        skew_ms: u64,
    },
}

/// One renewal of a [`SyncHold`].
pub(crate) struct SyncRenewal<'a> {
    pub(crate) hold: &'a SyncHold,
    /// The entry's key (lock hash or permit counter).
    pub(crate) key: &'a [u8],
    pub(crate) holder: &'a str,
    pub(crate) lease_ms: u64,
}

/// Renews many synchronizer holds in one round trip: one script call per
/// hold, pipelined. The outer `Err` is a failure of the whole round trip;
/// each inner result is one renewal's (`false`: no longer held), in order.
pub(crate) fn renew_batch(
    conn: &mut redis::Connection,
    batch: &[SyncRenewal<'_>],
) -> Result<Vec<Result<bool>>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let build = || {
        let mut pipe = redis::pipe();
        for r in batch {
            match r.hold {
                SyncHold::Read { timeout_prefix, .. } => {
                    pipe.cmd("EVALSHA")
                        .arg(READ_RENEW.get_hash())
                        .arg(2)
                        .arg(r.key)
                        .arg(&timeout_prefix[..])
                        .arg(r.lease_ms)
                        .arg(r.holder);
                }
                SyncHold::Write => {
                    pipe.cmd("EVALSHA")
                        .arg(RENEW_MANY.get_hash())
                        .arg(1)
                        .arg(r.key)
                        .arg(r.lease_ms)
                        .arg(r.holder);
                }
                SyncHold::Permit {
                    timeouts,
                    id,
                    skew_ms,
                } => {
                    pipe.cmd("EVALSHA")
                        .arg(PERMIT_RENEW.get_hash())
                        .arg(1)
                        .arg(&timeouts[..])
                        .arg(r.lease_ms.saturating_add(*skew_ms))
                        .arg(&id[..]);
                }
            }
        }
        pipe
    };
    let mut replies = query_pipeline(conn, &build(), batch.len())?;
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
    if replies.iter().any(noscript) {
        // The server lost its script cache: load the scripts, send again.
        for script in [&*READ_RENEW, &*RENEW_MANY, &*PERMIT_RENEW] {
            script.load(conn).map_err(Error::redis)?;
        }
        replies = query_pipeline(conn, &build(), batch.len())?;
    }
    Ok(replies
        .into_iter()
        .zip(batch)
        .map(|(reply, r)| match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1)] => Ok(true),
                [Value::Int(0)] => Ok(false),
                [Value::Int(-1)] => Err(Error::WrongType {
                    key: String::from_utf8_lossy(r.key).into_owned(),
                }),
                _ => Err(unexpected("renew", &reply)),
            },
            Value::ServerError(e) => {
                Err(Error::from_redis(redis::RedisError::from(e.clone()), r.key))
            }
            other => Err(unexpected("renew", other)),
        })
        .collect())
}

/// Drops the whole hold (client shutdown, or a grant whose reply was
/// lost): `true` when something was held.
pub(crate) fn release_all(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    hold: &SyncHold,
    key: &[u8],
    channel: &[u8],
    holder: &str,
) -> Result<bool> {
    let released = match hold {
        SyncHold::Read {
            timeout_prefix,
            key_prefix,
        } => rwlock::read_release(
            conn,
            publish,
            ReadKeys {
                key,
                channel,
                timeout_prefix,
                key_prefix,
            },
            holder,
            true,
        )?,
        SyncHold::Write => rwlock::write_release(conn, publish, key, channel, holder, 1, true)?,
        SyncHold::Permit { timeouts, id, .. } => {
            let keys = PermitKeys {
                counter: key,
                timeouts,
                channel,
            };
            return semaphore::permit_release(conn, publish, keys, id);
        }
    };
    Ok(released != super::Release::NotHeld)
}

#[cfg(test)]
mod tests {
    #[test]
    fn synchronizer_scripts_are_constants_with_headers() {
        for text in [
            include_str!("../../lua/rw_read_lock.lua"),
            include_str!("../../lua/rw_write_lock.lua"),
            include_str!("../../lua/rw_read_unlock.lua"),
            include_str!("../../lua/rw_write_unlock.lua"),
            include_str!("../../lua/rw_read_renew.lua"),
            include_str!("../../lua/rw_read_keep.lua"),
            include_str!("../../lua/rw_force_unlock.lua"),
            include_str!("../../lua/semaphore_acquire.lua"),
            include_str!("../../lua/semaphore_release.lua"),
            include_str!("../../lua/semaphore_set.lua"),
            include_str!("../../lua/permit_acquire.lua"),
            include_str!("../../lua/permit_release.lua"),
            include_str!("../../lua/permit_renew.lua"),
            include_str!("../../lua/permit_count.lua"),
            include_str!("../../lua/latch_set.lua"),
            include_str!("../../lua/latch_count_down.lua"),
            include_str!("../../lua/latch_delete.lua"),
        ] {
            assert!(text.starts_with("-- "));
            assert!(text.contains("KEYS["));
            assert!(text.contains("Returns"));
        }
    }
}
