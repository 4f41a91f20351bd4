//! `lua/record_read.lua`: a holder record read whose every name and value
//! is bounded on the server before it is sent (see `record::read` for the
//! bounds and the reply's reading).

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::error::{Error, Result};

static RECORD_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/record_read.lua")));

/// The bounds of one record read, all in bytes but `fields`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadBounds {
    /// Longest field name sent.
    pub(crate) name: usize,
    /// Longest value sent.
    pub(crate) value: usize,
    /// Most fields a record may have to be read past its fixed ones.
    pub(crate) fields: usize,
    /// Most bytes of names and values sent for one record.
    pub(crate) total: usize,
}

/// Which fields a record read sends, besides the fixed ones.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadFields<'a> {
    /// Every field.
    All,
    /// Those whose name starts with this.
    Matching(&'a [u8]),
    /// These.
    Named(&'a [Vec<u8>]),
}

/// Adds the bounded read of the record at `key` to `pipe`.
pub(crate) fn record_read(
    pipe: &mut redis::Pipeline,
    key: &[u8],
    bounds: ReadBounds,
    which: ReadFields<'_>,
) {
    let cmd = pipe
        .cmd("EVALSHA")
        .arg(RECORD_READ.get_hash())
        .arg(1)
        .arg(key)
        .arg(bounds.name)
        .arg(bounds.value)
        .arg(bounds.fields)
        .arg(bounds.total);
    match which {
        ReadFields::All => {
            cmd.arg("all");
        }
        ReadFields::Matching(prefix) => {
            cmd.arg("match").arg(prefix);
        }
        ReadFields::Named(names) => {
            cmd.arg("named");
            for name in names {
                cmd.arg(&name[..]);
            }
        }
    }
}

/// Sends `pipe` (built with `ignore_errors`, so each reply comes back as it
/// is) and returns its replies; when one is `NOSCRIPT` (a restarted or
/// flushed server), loads the record read script and sends the whole
/// pipeline once more, which is safe as long as it only reads.
///
/// # Errors
///
/// Connection and timeout errors; a refused `SCRIPT LOAD` (an ACL user
/// without it, the script not cached).
pub(crate) fn query_reads(
    conn: &mut redis::Connection,
    pipe: &redis::Pipeline,
) -> Result<Vec<Value>> {
    let replies: Vec<Value> = pipe.query(conn).map_err(Error::redis)?;
    if !replies.iter().any(super::is_noscript) {
        return Ok(replies);
    }
    RECORD_READ.load(conn).map_err(Error::redis)?;
    pipe.query(conn).map_err(Error::redis)
}

/// The fields `names` of the hash at `key` (and the holder-record fixed
/// fields, which the script always adds), each value sent only when it is
/// at most `max_value` bytes long: one `EVALSHA` of the record read script
/// (a second round trip only to load it after a restart). A hash's field
/// read this way costs at most `names.len() + 5` times `max_value` bytes,
/// whatever someone else wrote there.
///
/// # Errors
///
/// Connection, timeout and server errors (`WRONGTYPE` when `key` holds
/// another type).
pub(crate) fn read_named(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    max_value: usize,
    names: &[&str],
) -> redis::RedisResult<Named> {
    let reply = super::evalsha(conn, &RECORD_READ, &[key], |cmd| {
        // Field names are the caller's own, short: the name bound is moot.
        cmd.arg(256)
            .arg(max_value)
            .arg(names.len() + 16)
            .arg(1usize << 20)
            .arg("named");
        for name in names {
            cmd.arg(*name);
        }
    })?;
    Ok(Named::from_reply(reply))
}

/// What [`read_named`] read: the fields sent, and those left unsent for
/// their length.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Named {
    /// Field name -> value, for the fields present and short enough.
    pub(crate) fields: Vec<(String, Vec<u8>)>,
    /// The names of the fields whose value was too long to send.
    pub(crate) too_long: Vec<String>,
}

/// A record read's reply, as `lua/record_read.lua` sends it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadReply {
    /// The key's `PTTL`.
    pub(crate) pttl: i64,
    /// Whether fields were left out (too many, or the byte budget spent).
    pub(crate) partial: bool,
    /// The fields sent: name, value.
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The names of the fields whose value was too long to send.
    pub(crate) too_long: Vec<Vec<u8>>,
    /// The first bytes of the field names too long to send.
    pub(crate) long_names: Vec<Vec<u8>>,
}

impl ReadReply {
    /// The reply `reply`: `{pttl, partial, name, value, ...}`, where a
    /// value too long comes as its length and a name too long as its
    /// length before its first bytes; `None` for an error or another
    /// shape.
    pub(crate) fn parse(reply: Value) -> Option<ReadReply> {
        let Value::Array(items) = reply else {
            return None;
        };
        let mut items = items.into_iter();
        let mut out = ReadReply {
            pttl: redis::from_redis_value(items.next()?).ok()?,
            partial: matches!(items.next()?, Value::Int(1)),
            ..ReadReply::default()
        };
        while let (Some(name), Some(value)) = (items.next(), items.next()) {
            match (name, value) {
                (Value::BulkString(name), Value::BulkString(value)) => {
                    out.fields.push((name, value));
                }
                (Value::BulkString(name), Value::Int(_)) => out.too_long.push(name),
                (Value::Int(_), Value::BulkString(start)) => out.long_names.push(start),
                _ => {}
            }
        }
        Some(out)
    }
}

impl Named {
    fn from_reply(reply: Value) -> Named {
        let Some(read) = ReadReply::parse(reply) else {
            return Named::default();
        };
        let text = |name: Vec<u8>| String::from_utf8_lossy(&name).into_owned();
        Named {
            fields: read
                .fields
                .into_iter()
                .map(|(name, value)| (text(name), value))
                .collect(),
            too_long: read.too_long.into_iter().map(text).collect(),
        }
    }

    /// The value of `name`, when it was sent.
    pub(crate) fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_read_tells_values_sent_from_values_too_long() {
        let bulk = |s: &[u8]| Value::BulkString(s.to_vec());
        let reply = Value::Array(vec![
            Value::Int(-1),
            Value::Int(0),
            bulk(b"state"),
            bulk(b"failed"),
            bulk(b"program"),
            Value::Int(20_000_000),
        ]);
        let named = Named::from_reply(reply);
        assert_eq!(named.get("state"), Some(&b"failed"[..]));
        assert_eq!(named.get("program"), None);
        assert_eq!(named.too_long, vec!["program".to_owned()]);
        assert_eq!(Named::from_reply(Value::Nil), Named::default());
    }
}
