//! The run-once scripts (`lua/once_*.lua`): claim, complete, forget. The
//! abandon of a claim is the lock's own release script.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::{evalsha, unexpected};
use crate::error::{Error, Result};
use crate::keys::READ_UNLOCK_MESSAGE;
use crate::lease::Pttl;
use crate::scripts::record_read::{Named, read_named};

static CLAIM: LazyLock<Script> = LazyLock::new(|| shaped!("once_claim"));
static COMPLETE: LazyLock<super::Notifying> = LazyLock::new(|| notifying!("once_complete"));
static ATTEMPT_END: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/once_attempt_end.lua")));
static FORGET: LazyLock<Script> = LazyLock::new(|| shaped!("once_forget"));

/// What the claim script found (and, for [`Claim::Run`], did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Claimed: the caller holds the key as a lock; `token` was drawn.
    Run { token: u64 },
    /// Another runner (or the caller itself) holds the key.
    Running { pttl: Pttl, holder: String },
    /// The key holds a record. A field too long to read (`outcome` past
    /// the claim's bound, `at` or `by` past [`MAX_FIELD_LEN`]) is empty
    /// (`at`: 0) and named in `too_long`.
    Done {
        outcome: Vec<u8>,
        at_ms: u64,
        by: String,
        pttl: Pttl,
        too_long: Vec<String>,
    },
    /// Nothing is stored (look-only claims).
    Free,
}

/// Who runs an attempt, for its last-attempt record, and how long the
/// record of a claim is kept (ms).
pub(crate) struct Runner<'a> {
    pub(crate) host: &'a str,
    pub(crate) pid: u32,
    pub(crate) program: &'a str,
    pub(crate) ttl_ms: u64,
}

/// Runs the claim script: with `take`, claims a free key for `holder` with
/// a lease of `lease_ms`, draws a token from `token_key` and starts a
/// `running` attempt for `runner` in the key's last-attempt record; without, only reports.
/// A recorded outcome longer than `max_outcome` bytes is not sent (see
/// [`Claim::Done`]).
pub(crate) fn claim(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    token_key: &[u8],
    holder: &str,
    lease_ms: u64,
    take: Option<&Runner<'_>>,
    max_outcome: usize,
) -> Result<Claim> {
    let attempt_key = crate::keys::once_attempt(key);
    let reply = evalsha(conn, &CLAIM, &[key, token_key, &attempt_key], |cmd| {
        cmd.arg(lease_ms).arg(holder);
        match take {
            Some(r) => cmd
                .arg("1")
                .arg(r.ttl_ms)
                .arg(r.host)
                .arg(r.pid)
                .arg(r.program),
            None => cmd.arg("0").arg(1).arg("").arg(0).arg(""),
        };
        cmd.arg(max_outcome).arg(MAX_FIELD_LEN);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    claim_reply(&reply)
}

fn claim_reply(reply: &Value) -> Result<Claim> {
    let bad = || unexpected("once claim", reply);
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(token)] => match u64::try_from(*token) {
            Ok(token) if token > 0 => Ok(Claim::Run { token }),
            _ => Err(bad()),
        },
        [Value::Int(0), Value::Int(pttl), holder] => Ok(Claim::Running {
            pttl: Pttl::from_ms(*pttl),
            holder: text(holder).ok_or_else(bad)?,
        }),
        [Value::Int(2), outcome, at, by, Value::Int(pttl)] => {
            // A value too long to send comes as its length.
            let mut too_long = Vec::new();
            for (name, value) in [("outcome", outcome), ("at", at), ("by", by)] {
                if matches!(value, Value::Int(_)) {
                    too_long.push(name.to_owned());
                }
            }
            let or_empty = |v: &Value| match v {
                Value::Int(_) => Some(String::new()),
                v => text(v),
            };
            Ok(Claim::Done {
                outcome: match outcome {
                    Value::Int(_) => Vec::new(),
                    v => bytes(v).ok_or_else(bad)?.to_vec(),
                },
                at_ms: match at {
                    Value::Int(_) => 0,
                    at => text(at).and_then(|t| t.parse().ok()).ok_or_else(bad)?,
                },
                by: or_empty(by).ok_or_else(bad)?,
                pttl: Pttl::from_ms(*pttl),
                too_long,
            })
        }
        [Value::Int(3)] => Ok(Claim::Free),
        _ => Err(bad()),
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    bytes(v).map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Runs the complete script: records `outcome` for `ttl_ms` and ends the
/// hold of `holder`, publishing on `channel` the message that wakes every
/// waiter (a recorded outcome is news for all of them, not a turn for one).
/// `Some(at)` (ms since the epoch, server clock) when recorded, `None` when
/// refused because `holder` no longer holds the key.
pub(crate) fn complete(
    conn: &mut dyn redis::ConnectionLike,
    publish: super::Publish,
    key: &[u8],
    channel: &[u8],
    holder: &str,
    outcome: &[u8],
    ttl_ms: u64,
) -> Result<Option<u64>> {
    let attempt_key = crate::keys::once_attempt(key);
    let attempt_key = attempt_key.as_slice();
    let reply = evalsha(conn, COMPLETE.get(publish), &[key, attempt_key], |cmd| {
        cmd.arg(holder)
            .arg(outcome)
            .arg(ttl_ms)
            .arg(READ_UNLOCK_MESSAGE)
            .arg(channel);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Int(0) => Ok(None),
        Value::Int(at) if at > 0 => Ok(Some(at.unsigned_abs())),
        other => Err(unexpected("once complete", &other)),
    }
}

/// The time (ms since the epoch) of the record at `key` when `holder`
/// wrote it; `None` when there is no record, or another runner's. A
/// completion whose reply was lost looks here before it counts as refused.
pub(crate) fn recorded_by(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    holder: &str,
) -> Result<Option<u64>> {
    // Bounded as every read of a key others may write: a huge `by` or
    // `at` is no runner's record, and is not sent.
    let record = read_named(conn, key, MAX_FIELD_LEN, &["by", "at"])
        .map_err(|e| Error::from_redis(e, key))?;
    Ok(match (record.get("by"), record.get("at")) {
        (Some(by), Some(at)) if by == holder.as_bytes() => {
            std::str::from_utf8(at).ok().and_then(|at| at.parse().ok())
        }
        _ => None,
    })
}

/// Runs the attempt-end script: ends `holder`'s attempt in `attempt_key`
/// as `state` ("failed", "abandoned", "timed_out") with its exit status
/// and signal, kept `ttl_ms`. `Some(at)` (ms since the epoch, server
/// clock) when written, `None` when the record is another runner's or
/// gone.
pub(crate) fn end_attempt(
    conn: &mut dyn redis::ConnectionLike,
    attempt_key: &[u8],
    holder: &str,
    state: &str,
    exit_status: Option<i32>,
    signal: Option<i32>,
    ttl_ms: u64,
) -> Result<Option<u64>> {
    let text = |n: Option<i32>| n.map(|n| n.to_string()).unwrap_or_default();
    let reply = evalsha(conn, &ATTEMPT_END, &[attempt_key], |cmd| {
        cmd.arg(holder)
            .arg(state)
            .arg(text(exit_status))
            .arg(text(signal))
            .arg(ttl_ms);
    })
    .map_err(|e| Error::from_redis(e, attempt_key))?;
    match reply {
        Value::Int(0) => Ok(None),
        Value::Int(at) if at > 0 => Ok(Some(at.unsigned_abs())),
        other => Err(unexpected("once attempt end", &other)),
    }
}

/// The fields of a last-attempt record (`lua/once_claim.lua`,
/// `lua/once_attempt_end.lua`).
pub(crate) const ATTEMPT_FIELDS: [&str; 9] = [
    "state",
    "holder",
    "host",
    "pid",
    "program",
    "started_at",
    "ended_at",
    "exit_status",
    "signal",
];

/// Longest value of a last-attempt record, or of a run-once record's `at`
/// and `by`, that is read (bytes): redguard writes at most 256 bytes of
/// host and program there, and a few dozen elsewhere; a longer value was
/// written by someone else, and only its length is read.
pub(crate) const MAX_FIELD_LEN: usize = 4096;

/// The last-attempt record at `attempt_key`: its known fields (none when
/// there is no record), each read only when at most [`MAX_FIELD_LEN`]
/// bytes long, on the server, in one round trip; the key may hold
/// anything, and a longer value is named in
/// [`Named::too_long`](crate::scripts::record_read::Named) unsent.
pub(crate) fn read_attempt(
    conn: &mut dyn redis::ConnectionLike,
    attempt_key: &[u8],
) -> Result<Named> {
    read_named(conn, attempt_key, MAX_FIELD_LEN, &ATTEMPT_FIELDS)
        .map_err(|e| Error::from_redis(e, attempt_key))
}

/// What the forget script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forget {
    /// The record was deleted.
    Deleted,
    /// Nothing was stored.
    Nothing,
    /// A runner holds the key; left alone.
    Running,
}

/// Runs the forget script: deletes the record at `key`, never a running
/// claim.
pub(crate) fn forget(conn: &mut dyn redis::ConnectionLike, key: &[u8]) -> Result<Forget> {
    let reply = evalsha(conn, &FORGET, &[key], |_| {}).map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Int(1) => Ok(Forget::Deleted),
        Value::Int(0) => Ok(Forget::Nothing),
        Value::Int(-1) => Ok(Forget::Running),
        other => Err(unexpected("once forget", &other)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn arr(v: Vec<Value>) -> Value {
        Value::Array(v)
    }

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    #[test]
    fn scripts_have_headers() {
        for text in [
            include_str!("../../lua/once_claim.lua"),
            include_str!("../../lua/once_complete.lua"),
            include_str!("../../lua/once_forget.lua"),
            include_str!("../../lua/once_attempt_end.lua"),
        ] {
            assert!(text.starts_with("-- "));
            assert!(text.contains("KEYS[1]"));
            assert!(text.contains("Returns"));
            assert!(text.contains("Errors"));
        }
    }

    #[test]
    fn claim_replies_parse() {
        assert_eq!(
            claim_reply(&arr(vec![Value::Int(1), Value::Int(7)])).unwrap(),
            Claim::Run { token: 7 }
        );
        assert!(claim_reply(&arr(vec![Value::Int(1), Value::Int(0)])).is_err());
        assert_eq!(
            claim_reply(&arr(vec![Value::Int(0), Value::Int(250), bulk(b"c:1")])).unwrap(),
            Claim::Running {
                pttl: Pttl::Expires(Duration::from_millis(250)),
                holder: "c:1".into()
            }
        );
        assert_eq!(
            claim_reply(&arr(vec![
                Value::Int(2),
                bulk(&[0, 0xff]),
                bulk(b"1700000000000"),
                bulk(b"c:2"),
                Value::Int(-1)
            ]))
            .unwrap(),
            Claim::Done {
                outcome: vec![0, 0xff],
                at_ms: 1_700_000_000_000,
                by: "c:2".into(),
                pttl: Pttl::NoExpiry,
                too_long: Vec::new(),
            }
        );
        // Values too long to send come as their lengths.
        assert_eq!(
            claim_reply(&arr(vec![
                Value::Int(2),
                Value::Int(20_000_000),
                bulk(b"1700000000000"),
                Value::Int(9_000),
                Value::Int(5)
            ]))
            .unwrap(),
            Claim::Done {
                outcome: Vec::new(),
                at_ms: 1_700_000_000_000,
                by: String::new(),
                pttl: Pttl::Expires(Duration::from_millis(5)),
                too_long: vec!["outcome".into(), "by".into()],
            }
        );
        assert_eq!(claim_reply(&arr(vec![Value::Int(3)])).unwrap(), Claim::Free);
        let bad_at = arr(vec![
            Value::Int(2),
            bulk(b""),
            bulk(b"soon"),
            bulk(b"c"),
            Value::Int(5),
        ]);
        assert!(claim_reply(&bad_at).is_err());
        assert!(claim_reply(&Value::Nil).is_err());
        assert!(claim_reply(&arr(vec![Value::Int(9)])).is_err());
    }
}
