//! The `redis::ConnectionLike` face of a shared connection, combining or
//! duplex: what a caller's operation sees, each of its calls one request on
//! the thread's lane. A failure to connect is kept typed for the caller
//! (redis-rs's interface carries only its own error type).

use std::time::Duration;

use redis::{RedisResult, Value};

use crate::error::{Error, Result};

/// Shared connections that carry requests: `bytes` holding `replies`
/// commands, sent on a lane, answered with the replies in order.
pub(crate) trait Requests {
    /// One shared connection and the commands waiting for it.
    type Lane;
    /// What `connect` opens when the lane has no connection.
    type Link;

    /// Sends `bytes` (`replies` commands) on `lane` and waits for the
    /// replies; a failure to connect goes to `connect_error` too.
    fn request(
        &self,
        lane: &Self::Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<Self::Link>,
        connect_error: &mut Option<Error>,
        bytes: &[u8],
        replies: usize,
    ) -> RedisResult<Vec<Value>>;
}

/// Runs `op` with a connection whose commands go through `lane` of
/// `shared`. `connect` makes a new connection when the lane has none.
///
/// # Errors
///
/// `op`'s, or the failure to connect when `op` failed for it.
pub(crate) fn with_conn<S: Requests, T>(
    shared: &S,
    lane: &S::Lane,
    connect: &dyn Fn(Option<Duration>) -> Result<S::Link>,
    op: impl FnOnce(&mut dyn redis::ConnectionLike) -> Result<T>,
) -> Result<T> {
    let mut conn = Through {
        shared,
        lane,
        connect,
        connect_error: None,
    };
    let result = op(&mut conn);
    match (result, conn.connect_error.take()) {
        (Err(_), Some(e)) => Err(e),
        (result, _) => result,
    }
}

/// A connection whose commands go through a lane.
struct Through<'a, S: Requests> {
    shared: &'a S,
    lane: &'a S::Lane,
    connect: &'a dyn Fn(Option<Duration>) -> Result<S::Link>,
    connect_error: Option<Error>,
}

impl<S: Requests> redis::ConnectionLike for Through<'_, S> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut replies =
            self.shared
                .request(self.lane, self.connect, &mut self.connect_error, cmd, 1)?;
        replies.pop().unwrap_or(Value::Nil).extract_error()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let replies = self.shared.request(
            self.lane,
            self.connect,
            &mut self.connect_error,
            cmd,
            offset + count,
        )?;
        let mut out = Vec::with_capacity(count);
        for value in replies.into_iter().skip(offset) {
            out.push(value.extract_error()?);
        }
        Ok(out)
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.req_packed_command(&redis::cmd("PING").get_packed_command())
            .is_ok()
    }

    fn is_open(&self) -> bool {
        true
    }
}
