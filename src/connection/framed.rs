//! The one `ConnectionLike` wrapper of the library, [`Framed`], and the one
//! reading of a pipeline's replies, [`keep_after`], that the connections
//! (`wire`'s links, `shared`'s lanes) and the wrapper share.
//!
//! A framed connection sends the library's own commands in the same write
//! as a caller's command: ahead of it (a waiting thread's record entry,
//! `prelude`), their replies read and dropped; or after each command (a
//! `WAIT` for replicas, `replicas`), its reply kept aside. Replies the
//! caller did not ask for are never its errors: an ACL user that may not
//! write records still takes its lock.

use redis::{ConnectionLike, RedisResult, Value};

/// Reads `offset + count` replies from `replies`, drops the first `offset`
/// (error replies included) and returns the rest; with `extract`, an error
/// reply among them is the call's error, else it stays in place (as
/// `redis::Connection`'s pipelines keep them for `ignore_errors`). A reply
/// that could not be read ends the call: its connection is not reused.
pub(crate) fn keep_after(
    replies: impl Iterator<Item = RedisResult<Value>>,
    offset: usize,
    count: usize,
    extract: bool,
) -> RedisResult<Vec<Value>> {
    let mut out = Vec::with_capacity(count);
    for (i, reply) in replies.take(offset + count).enumerate() {
        let reply = reply?;
        if i >= offset {
            out.push(if extract {
                reply.extract_error()?
            } else {
                reply
            });
        }
    }
    Ok(out)
}

/// The connection a [`Framed`] writes to.
enum Inner<'a> {
    /// A connection whose pipelines skip the replies before their offset,
    /// errors or not (a shared connection's lane, or a framed one).
    Skipping(&'a mut dyn ConnectionLike),
    /// A `redis::Connection`, whose pipelines fail on an error reply
    /// before their offset: its replies are read one by one instead.
    Plain(&'a mut redis::Connection),
}

/// A connection whose commands go out framed by commands of the library's
/// own, in the same write (see the module docs).
pub(crate) struct Framed<'a> {
    conn: Inner<'a>,
    /// Packed commands that ride ahead of the next command, and their
    /// count; sent once.
    before: Option<(Vec<u8>, usize)>,
    /// A packed command sent after every single command (not after
    /// pipelines); its last reply is kept in `after_reply`.
    after: Option<Vec<u8>>,
    after_reply: Option<Value>,
}

impl<'a> Framed<'a> {
    /// Frames a connection whose pipelines skip the replies before their
    /// offset, errors or not (a shared connection).
    pub(crate) fn skipping(conn: &'a mut dyn ConnectionLike) -> Framed<'a> {
        Framed {
            conn: Inner::Skipping(conn),
            before: None,
            after: None,
            after_reply: None,
        }
    }

    /// Frames a `redis::Connection`: its pipelines then skip the replies
    /// before their offset, errors or not, as a shared connection's do.
    pub(crate) fn plain(conn: &'a mut redis::Connection) -> Framed<'a> {
        Framed {
            conn: Inner::Plain(conn),
            before: None,
            after: None,
            after_reply: None,
        }
    }

    /// Sends `before` (packed commands, and their count) ahead of the next
    /// command or pipeline; their replies are dropped.
    pub(crate) fn with_before(mut self, before: Option<(Vec<u8>, usize)>) -> Framed<'a> {
        self.before = before;
        self
    }

    /// Sends `after` (one packed command) after every single command.
    pub(crate) fn with_after(mut self, after: Vec<u8>) -> Framed<'a> {
        self.after = Some(after);
        self
    }

    /// The reply to the last command sent after a command
    /// ([`Framed::with_after`]), if one was read.
    pub(crate) fn after_reply(&self) -> Option<&Value> {
        self.after_reply.as_ref()
    }

    /// Writes `cmd` and returns `count` replies after the first `offset`
    /// (error replies before it dropped, the others in place).
    fn exchange(&mut self, cmd: &[u8], offset: usize, count: usize) -> RedisResult<Vec<Value>> {
        match &mut self.conn {
            Inner::Skipping(conn) => conn.req_packed_commands(cmd, offset, count),
            Inner::Plain(conn) if offset == 0 => conn.req_packed_commands(cmd, 0, count),
            Inner::Plain(conn) => {
                conn.send_packed_command(cmd)?;
                // Out-of-band data between replies is no reply.
                let replies = std::iter::from_fn(|| {
                    loop {
                        match conn.recv_response() {
                            Ok(Value::Push { .. }) => {}
                            reply => return Some(reply),
                        }
                    }
                });
                keep_after(replies, offset, count, false)
            }
        }
    }
}

impl ConnectionLike for Framed<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let (mut bytes, skip) = self.before.take().unwrap_or_default();
        if skip == 0 && self.after.is_none() {
            return match &mut self.conn {
                Inner::Skipping(conn) => conn.req_packed_command(cmd),
                Inner::Plain(conn) => conn.req_packed_command(cmd),
            };
        }
        bytes.extend_from_slice(cmd);
        if let Some(after) = &self.after {
            bytes.extend_from_slice(after);
        }
        let count = 1 + usize::from(self.after.is_some());
        let mut replies = self.exchange(&bytes, skip, count)?;
        if self.after.is_some() {
            self.after_reply = replies.pop();
        }
        replies.pop().map_or(Ok(Value::Nil), Value::extract_error)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let Some((mut bytes, skip)) = self.before.take() else {
            return self.exchange(cmd, offset, count);
        };
        bytes.extend_from_slice(cmd);
        self.exchange(&bytes, offset + skip, count)
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            Inner::Skipping(conn) => conn.get_db(),
            Inner::Plain(conn) => conn.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match &mut self.conn {
            Inner::Skipping(conn) => conn.check_connection(),
            Inner::Plain(conn) => conn.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match &self.conn {
            Inner::Skipping(conn) => conn.is_open(),
            Inner::Plain(conn) => conn.is_open(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> Value {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(value @ Value::ServerError(_)) => value,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    /// A connection whose pipelines skip the replies before their offset,
    /// as a shared connection's do; it records what was written.
    struct Canned {
        written: Vec<u8>,
        asked: Vec<(usize, usize)>,
        replies: Vec<Value>,
    }

    impl ConnectionLike for Canned {
        fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
            self.written.extend_from_slice(cmd);
            self.asked.push((0, 1));
            self.replies.remove(0).extract_error()
        }

        fn req_packed_commands(
            &mut self,
            cmd: &[u8],
            offset: usize,
            count: usize,
        ) -> RedisResult<Vec<Value>> {
            self.written.extend_from_slice(cmd);
            self.asked.push((offset, count));
            let replies: Vec<Value> = self.replies.drain(..offset + count).collect();
            keep_after(replies.into_iter().map(Ok), offset, count, true)
        }

        fn get_db(&self) -> i64 {
            0
        }

        fn check_connection(&mut self) -> bool {
            true
        }

        fn is_open(&self) -> bool {
            true
        }
    }

    fn canned(replies: Vec<Value>) -> Canned {
        Canned {
            written: Vec::new(),
            asked: Vec::new(),
            replies,
        }
    }

    #[test]
    fn replies_before_the_offset_are_dropped_errors_included() {
        let replies = || {
            vec![
                Ok(error("NOPERM no")),
                Ok(Value::Okay),
                Ok(Value::Int(7)),
                Ok(error("WRONGTYPE no")),
                Ok(Value::Int(9)),
            ]
        };
        let kept = keep_after(replies().into_iter(), 2, 2, false).unwrap();
        assert_eq!(kept, vec![Value::Int(7), error("WRONGTYPE no")]);
        let err = keep_after(replies().into_iter(), 2, 2, true).unwrap_err();
        assert_eq!(err.code(), Some("WRONGTYPE"));
        assert_eq!(
            keep_after(replies().into_iter(), 1, 2, true).unwrap(),
            vec![Value::Okay, Value::Int(7)]
        );
        // Never more than offset + count replies are read.
        let mut read = 0;
        let endless = std::iter::from_fn(|| {
            read += 1;
            Some(Ok(Value::Nil))
        });
        assert_eq!(keep_after(endless, 3, 1, true).unwrap(), vec![Value::Nil]);
        assert_eq!(read, 4);
    }

    #[test]
    fn commands_ahead_ride_once_and_their_replies_are_not_the_callers() {
        let mut conn = canned(vec![
            error("NOPERM no"),
            Value::Okay,
            Value::Int(1),
            Value::Int(2),
        ]);
        let before = (b"AHEAD".to_vec(), 2);
        {
            let mut framed = Framed::skipping(&mut conn).with_before(Some(before));
            assert_eq!(framed.req_packed_command(b"CMD").unwrap(), Value::Int(1));
            // Sent once: the next command goes alone.
            assert_eq!(framed.req_packed_command(b"NEXT").unwrap(), Value::Int(2));
        }
        assert_eq!(conn.written, b"AHEADCMDNEXT");
        assert_eq!(conn.asked, vec![(2, 1), (0, 1)]);

        let mut conn = canned(vec![Value::Okay, Value::Int(5), Value::Int(6)]);
        let mut framed = Framed::skipping(&mut conn).with_before(Some((b"A".to_vec(), 1)));
        let replies = framed.req_packed_commands(b"P1P2", 0, 2).unwrap();
        assert_eq!(replies, vec![Value::Int(5), Value::Int(6)]);
        assert_eq!(conn.asked, vec![(1, 2)]);
    }

    #[test]
    fn a_command_after_each_keeps_its_reply_aside() {
        let mut conn = canned(vec![
            Value::Okay,
            Value::Int(1),
            Value::Int(3),
            error("BUSY no"),
            Value::Int(0),
        ]);
        {
            let mut framed = Framed::skipping(&mut conn)
                .with_before(Some((b"A".to_vec(), 1)))
                .with_after(b"WAIT".to_vec());
            assert_eq!(framed.req_packed_command(b"CMD").unwrap(), Value::Int(1));
            assert_eq!(framed.after_reply(), Some(&Value::Int(3)));
            // The command's own error is the caller's; the reply after it
            // is still read, so that the connection stays in step.
            let err = framed.req_packed_command(b"CMD2").unwrap_err();
            assert_eq!(err.code(), Some("BUSY"));
        }
        assert_eq!(conn.written, b"ACMDWAITCMD2WAIT");
        assert_eq!(conn.asked, vec![(1, 2), (0, 2)]);
        assert!(conn.replies.is_empty());
    }
}
