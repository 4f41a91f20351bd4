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
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
    if !replies.iter().any(noscript) {
        return Ok(replies);
    }
    RECORD_READ.load(conn).map_err(Error::redis)?;
    pipe.query(conn).map_err(Error::redis)
}
