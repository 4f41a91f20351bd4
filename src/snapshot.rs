//! Read snapshots in one `MULTI`/`EXEC`, sent as a plain pipeline.
//!
//! redis-rs's own transaction path (`pipe().atomic()`) assumes that `MULTI`
//! succeeds: when the server refuses it (`NOAUTH` on a connection that has
//! not authenticated) the driver's reply bookkeeping underflows and panics.
//! Here every reply is read as a value and the first error reply, wherever
//! it sits, is classified by its own code: `NOAUTH` becomes
//! [`Error::Auth`], a `NOPERM` met while queueing becomes
//! [`Error::Permission`] naming the key, not an aborted transaction.

use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};

/// Runs the commands `build` adds as one `MULTI`/`EXEC` on `conn` and
/// converts `EXEC`'s reply (one value per command) into `T`. Errors name
/// `key`, the key the caller reads.
pub(crate) fn snapshot<T: FromRedisValue>(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    build: impl FnOnce(&mut redis::Pipeline),
) -> Result<T> {
    run(conn, key, None, build)
}

/// [`snapshot`] of reads that run `script` (`EVALSHA`): when the server
/// does not have it (`NOSCRIPT`, a restarted or flushed server), loads it
/// and sends the whole snapshot once more, which is safe as it only reads.
///
/// # Errors
///
/// As [`snapshot`]; a refused `SCRIPT LOAD`.
pub(crate) fn snapshot_running<T: FromRedisValue>(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    script: &redis::Script,
    build: impl FnOnce(&mut redis::Pipeline),
) -> Result<T> {
    run(conn, key, Some(script), build)
}

fn run<T: FromRedisValue>(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    script: Option<&redis::Script>,
    build: impl FnOnce(&mut redis::Pipeline),
) -> Result<T> {
    let mut pipe = redis::pipe();
    pipe.cmd("MULTI");
    build(&mut pipe);
    pipe.cmd("EXEC");
    // Error replies stay values: they are looked at below, in order.
    pipe.ignore_errors();
    let fail = |e| Error::from_redis(e, key);
    let mut replies: Vec<Value> = pipe.query(conn).map_err(fail)?;
    if let Some(script) = script
        && replies.last().is_some_and(crate::scripts::is_noscript)
    {
        script.load(conn).map_err(fail)?;
        replies = pipe.query(conn).map_err(fail)?;
    }
    exec_reply(replies, key)
}

/// Bytes of a counter's value read (a semaphore's permits, a latch's
/// count): an integer takes at most 20, so this is the whole value of any
/// counter, and never more of another tenant's 20 MB string.
pub(crate) const COUNTER_PEEK: usize = 64;

/// Adds the bounded read of the counter at `key` to a snapshot: `EXISTS`
/// and the first [`COUNTER_PEEK`] bytes (`GETRANGE`, which answers an
/// empty string for a missing key); two replies, for [`counter_bytes`].
pub(crate) fn add_counter_read(pipe: &mut redis::Pipeline, key: &[u8]) {
    pipe.cmd("EXISTS")
        .arg(key)
        .cmd("GETRANGE")
        .arg(key)
        .arg(0)
        .arg(COUNTER_PEEK - 1);
}

/// The counter's stored bytes from [`add_counter_read`]'s replies, `None`
/// when the key does not exist. A value cut at [`COUNTER_PEEK`] bytes is
/// no integer (it parses as none).
pub(crate) fn counter_bytes(exists: i64, peek: Vec<u8>) -> Option<Vec<u8>> {
    (exists > 0).then_some(peek)
}

/// Reads the counter at `key` on `conn` in one snapshot, bounded
/// ([`add_counter_read`]): its bytes, `None` when it does not exist.
///
/// # Errors
///
/// As [`snapshot`]: `WRONGTYPE` for a key of another type.
pub(crate) fn counter(conn: &mut dyn redis::ConnectionLike, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let (exists, peek): (i64, Vec<u8>) = snapshot(conn, key, |pipe| add_counter_read(pipe, key))?;
    Ok(counter_bytes(exists, peek))
}

/// The `EXEC` reply of a `MULTI`, commands, `EXEC` pipeline, or the first
/// error among the replies (the refused `MULTI`, a command refused while
/// queueing, or a command failing inside the transaction).
fn exec_reply<T: FromRedisValue>(replies: Vec<Value>, key: &[u8]) -> Result<T> {
    let fail = |e: redis::RedisError| Error::from_redis(e, key);
    for reply in &replies {
        if let Value::ServerError(e) = reply {
            return Err(fail(e.clone().into()));
        }
    }
    match replies.into_iter().last() {
        Some(Value::Array(items)) => {
            let items = Value::Array(items).extract_error().map_err(fail)?;
            redis::from_redis_value(items).map_err(|e| fail(e.into()))
        }
        // A transaction aborted by a WATCH (not used here) or a reply that
        // is no EXEC reply.
        other => Err(Error::Protocol(format!(
            "unexpected reply to EXEC: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(resp: &[u8]) -> Value {
        redis::parse_redis_value(resp).unwrap()
    }

    #[test]
    fn a_refused_multi_is_an_auth_error() {
        let noauth = parse(b"-NOAUTH Authentication required.\r\n");
        let replies = vec![noauth.clone(), noauth.clone(), noauth];
        let err = exec_reply::<(i64,)>(replies, b"k").unwrap_err();
        assert!(matches!(err, Error::Auth(_)), "{err:?}");
    }

    #[test]
    fn a_command_refused_while_queueing_is_a_permission_error_naming_the_key() {
        let replies = vec![
            parse(b"+OK\r\n"),
            parse(b"-NOPERM this user has no permissions to access one of the keys\r\n"),
            parse(b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
        ];
        let err = exec_reply::<(i64,)>(replies, b"job").unwrap_err();
        assert!(matches!(err, Error::Permission(_)), "{err:?}");
        assert!(err.to_string().contains("\"job\""), "{err}");
    }

    #[test]
    fn an_error_inside_exec_is_classified() {
        let replies = vec![
            parse(b"+OK\r\n"),
            parse(b"+QUEUED\r\n"),
            parse(b"*1\r\n-WRONGTYPE Operation against a key holding the wrong kind\r\n"),
        ];
        let err = exec_reply::<(Vec<String>,)>(replies, b"q").unwrap_err();
        assert!(
            matches!(err, Error::WrongType { ref key } if key == "q"),
            "{err:?}"
        );
    }

    #[test]
    fn the_exec_reply_is_converted() {
        let replies = vec![
            parse(b"+OK\r\n"),
            parse(b"+QUEUED\r\n"),
            parse(b"+QUEUED\r\n"),
            parse(b"*2\r\n+hash\r\n:1500\r\n"),
        ];
        let got: (String, i64) = exec_reply(replies, b"k").unwrap();
        assert_eq!(got, ("hash".to_owned(), 1500));
    }
}
