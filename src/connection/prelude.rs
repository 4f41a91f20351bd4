//! Commands that ride ahead of this thread's next call to one server: packed
//! by a layer above (a waiting thread's holder-record entry), sent in the
//! same write as the call, their replies read and dropped. The transport
//! knows only bytes, a count of replies, and the node they are for.
//!
//! One armed prelude per thread at a time: the state lives in a thread
//! local, and only this thread's next call to the same node of the same
//! [`Source`] carries it.

use std::cell::RefCell;

use redis::{ConnectionLike, RedisResult, Value};

use super::{NodeId, Source};

/// This thread's prelude, while one is claimed.
struct Armed {
    /// The source's address: rides only on calls to the same deployment.
    source: usize,
    /// The node the commands are for.
    node: NodeId,
    /// Packed commands waiting for the next call to the node, and their
    /// count.
    packed: Option<(Vec<u8>, usize)>,
    /// Some commands went out since the claim (or the last hand-over).
    sent: bool,
}

thread_local! {
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

fn address(source: &Source) -> usize {
    std::ptr::from_ref(source) as usize
}

/// Claims this thread's prelude for node `node` of `source`; `false` when
/// another claim holds it (a wait inside a wait: only the outer one rides).
pub(crate) fn claim(source: &Source, node: NodeId) -> bool {
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            if a.is_some() {
                return false;
            }
            *a = Some(Armed {
                source: address(source),
                node,
                packed: None,
                sent: false,
            });
            true
        })
        .unwrap_or(false)
}

/// Arms the claimed prelude with `count` packed commands, replacing any not
/// yet sent. Nothing happens without a claim.
pub(crate) fn arm(packed: Vec<u8>, count: usize) {
    let _ = ARMED.try_with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            armed.packed = Some((packed, count));
        }
    });
}

/// The commands that ride on this thread's call to node `node` of
/// `source`, if any are armed: packed, and how many.
pub(crate) fn take(source: &Source, node: NodeId) -> Option<(Vec<u8>, usize)> {
    let at = address(source);
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            let armed = a.as_mut().filter(|a| a.source == at && a.node == node)?;
            let packed = armed.packed.take()?;
            armed.sent = true;
            Some(packed)
        })
        .ok()
        .flatten()
}

/// Disarms a claim for node `node` of `source` without ending it: `true`
/// when commands of it went out (and clears that, so that the claim's end
/// does not report them again).
pub(crate) fn hand_over(source: &Source, node: NodeId) -> bool {
    let at = address(source);
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            a.as_mut()
                .filter(|a| a.source == at && a.node == node)
                .is_some_and(|armed| {
                    armed.packed = None;
                    std::mem::take(&mut armed.sent)
                })
        })
        .unwrap_or(false)
}

/// Ends this thread's claim: `true` when commands of it went out.
pub(crate) fn release() -> bool {
    ARMED
        .try_with(|a| a.borrow_mut().take())
        .ok()
        .flatten()
        .is_some_and(|armed| armed.sent)
}

/// Runs `f` on `conn`, a plain connection (`redis::Connection`) to the
/// server of `key`, with this thread's armed prelude riding on its first
/// command (see [`Riding`]).
pub(crate) fn ride_plain<T>(
    conn: &mut dyn ConnectionLike,
    source: &Source,
    key: &[u8],
    f: impl FnOnce(&mut dyn ConnectionLike) -> T,
) -> T {
    match take(source, source.node_of(key)) {
        None => f(conn),
        prefix => f(&mut Riding {
            conn,
            prefix,
            plain: true,
        }),
    }
}
/// A connection whose next command carries packed commands ahead of it, in
/// the same write: their replies are read and dropped (an error among them,
/// such as an ACL user that may not write records, is no error of the
/// command's), the command's own reply is returned as without them.
pub(crate) struct Riding<'a> {
    pub(crate) conn: &'a mut dyn ConnectionLike,
    pub(crate) prefix: Option<(Vec<u8>, usize)>,
    /// `conn` is a `redis::Connection`, whose pipelines return error
    /// replies in place from offset 0 (and fail on one before the offset);
    /// the shared connections (and [`Plain`]) skip the replies before the
    /// offset, errors or not.
    pub(crate) plain: bool,
}

impl ConnectionLike for Riding<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let Some((mut bytes, n)) = self.prefix.take() else {
            return self.conn.req_packed_command(cmd);
        };
        bytes.extend_from_slice(cmd);
        let mut replies = if self.plain {
            self.conn.req_packed_commands(&bytes, 0, n + 1)?
        } else {
            self.conn.req_packed_commands(&bytes, n, 1)?
        };
        replies.pop().map_or(Ok(Value::Nil), Value::extract_error)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let Some((mut bytes, n)) = self.prefix.take() else {
            return self.conn.req_packed_commands(cmd, offset, count);
        };
        bytes.extend_from_slice(cmd);
        if self.plain {
            let mut replies = self
                .conn
                .req_packed_commands(&bytes, 0, n + offset + count)?;
            Ok(replies.split_off((n + offset).min(replies.len())))
        } else {
            self.conn.req_packed_commands(&bytes, offset + n, count)
        }
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// A plain connection whose pipelines skip the error replies before
/// `offset` (as the shared connections' do) instead of failing the call:
/// what [`Riding`] needs to drop the replies of its commands.
pub(crate) struct Plain<'a>(pub(crate) &'a mut redis::Connection);

impl ConnectionLike for Plain<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        if offset == 0 {
            return self.0.req_packed_commands(cmd, offset, count);
        }
        self.0.send_packed_command(cmd)?;
        let mut out = Vec::with_capacity(count);
        let mut idx = 0;
        let mut total = offset + count;
        while idx < total {
            match self.0.recv_response() {
                // Out-of-band data between replies is no reply.
                Ok(Value::Push { .. }) => total += 1,
                Ok(value) if idx >= offset => out.push(value),
                Ok(_) => {}
                // A reply that could not be read ends the pipeline: the
                // connection is dropped by its pool.
                Err(e) => return Err(e),
            }
            idx += 1;
        }
        Ok(out)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}
