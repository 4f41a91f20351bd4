//! A waiting thread's entry in its client's holder record: `wait:<holder
//! id>|<name>` → `<since ms> <kind>`, so that `redguard status` can say who
//! waits, on which host, since when.
//!
//! The entry costs no round trip of its own while the wait lasts: its
//! commands (`HSET` of the record's fixed fields and the entry, `HSETNX
//! started`, `PEXPIRE`) are packed ahead of the wait's next attempt and go
//! out in the same write (see [`Riding`]); they go again every third of the
//! record's lifetime, which keeps the record alive through a long wait.
//! When the wait ends, the entry is deleted: for a wait that ends in a
//! recorded hold, by the very watchdog write that records the hold
//! ([`hand_over`]); otherwise (a timeout, an error, a panic, a latch that
//! opened, a permit of a plain semaphore) by one `HDEL` as the wait
//! returns, or, when that fails, by the watchdog's next record write on
//! that server.
//!
//! One wait per thread at a time: the state lives in a thread local, and
//! only the commands of this thread's next call to the wait's server carry
//! the entry.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Value};

use super::RecordSpec;
use crate::client::Client;
use crate::connection::{NodeId, Source};

/// This thread's wait, while one is recorded.
struct Current {
    /// The source's address: rides only on calls to the same deployment.
    source: usize,
    /// The node of the name waited for (the record key there).
    node: NodeId,
    /// The wait's field.
    field: Vec<u8>,
    /// Packed commands waiting for the next call to the node, and their
    /// count.
    rider: Option<(Vec<u8>, usize)>,
    /// Some entry went out (its deletion is due when the wait ends).
    sent: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The commands that ride on this thread's call to node `node` of `source`,
/// if any are armed: packed, and how many.
pub(crate) fn take_rider(source: &Source, node: NodeId) -> Option<(Vec<u8>, usize)> {
    let at = std::ptr::from_ref(source) as usize;
    CURRENT
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let current = c.as_mut().filter(|c| c.source == at && c.node == node)?;
            let rider = current.rider.take()?;
            current.sent = true;
            Some(rider)
        })
        .ok()
        .flatten()
}

/// This thread's wait ends in a hold on node `node` of `source`, being
/// handed to the watchdog: the wait's field, when an entry went out, to be
/// deleted by the write that records the hold (and not again when the wait
/// ends).
pub(crate) fn hand_over(source: &Source, node: NodeId) -> Option<Vec<u8>> {
    let at = std::ptr::from_ref(source) as usize;
    CURRENT
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let current = c.as_mut().filter(|c| c.source == at && c.node == node)?;
            current.rider = None;
            std::mem::take(&mut current.sent).then(|| current.field.clone())
        })
        .ok()
        .flatten()
}

/// A wait of the calling thread, recorded in its client's record from its
/// first busy attempt until it is dropped (whatever ends the wait: a grant,
/// a timeout, an error or a panic). Inert for a client without records.
pub(crate) struct WaitEntry<'c> {
    client: &'c Client,
    spec: Option<Arc<RecordSpec>>,
    name: &'c [u8],
    kind: &'static str,
    /// When the wait began (its first busy attempt), by this clock.
    since: Option<SystemTime>,
    /// The record key on the name's node (`None`: not found, nothing sent).
    key: Option<Vec<u8>>,
    node: NodeId,
    /// When the entry's commands were last armed.
    armed_at: Option<Instant>,
    /// This value owns the thread's [`Current`].
    owns: bool,
}

impl<'c> WaitEntry<'c> {
    /// The wait of the calling thread for `name`, of `kind` (see
    /// [`RecordedWait::kind`](super::RecordedWait::kind)). Nothing is
    /// recorded before [`WaitEntry::busy`].
    pub(crate) fn new(client: &'c Client, name: &'c [u8], kind: &'static str) -> WaitEntry<'c> {
        WaitEntry {
            client,
            spec: client.hooks().record.clone(),
            name,
            kind,
            since: None,
            key: None,
            node: 0,
            armed_at: None,
            owns: false,
        }
    }

    /// An attempt found the name busy: the wait is recorded, its entry
    /// riding on the next attempt (and again every third of the record's
    /// lifetime).
    pub(crate) fn busy(&mut self) {
        let Some(spec) = self.spec.clone() else {
            return;
        };
        let now = Instant::now();
        if self.since.is_none() {
            self.since = Some(SystemTime::now());
            let source: &Source = self.client.source();
            self.node = source.node_of(self.name);
            let node = self.node;
            self.key = super::key_for(&spec.client, |k| source.node_of(k) == node);
            let field = super::wait_field(self.client.holder_id().as_str(), self.name);
            self.owns = CURRENT
                .try_with(|c| {
                    let mut c = c.borrow_mut();
                    if c.is_some() {
                        // A wait inside a wait (none exists today): only
                        // the outer one is recorded.
                        return false;
                    }
                    *c = Some(Current {
                        source: std::ptr::from_ref(source) as usize,
                        node,
                        field,
                        rider: None,
                        sent: false,
                    });
                    true
                })
                .unwrap_or(false);
        }
        if !self.owns || self.armed_at.is_some_and(|at| now < at + spec.ttl / 3) {
            return;
        }
        let (Some(key), Some(since)) = (&self.key, self.since) else {
            return;
        };
        spec.note_wait_record(self.node, key);
        let since_ms = since
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let ttl_ms = spec.ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
        let mut set = redis::cmd("HSET");
        set.arg(&key[..])
            .arg("host")
            .arg(spec.host())
            .arg("pid")
            .arg(spec.pid())
            .arg("program")
            .arg(spec.program())
            .arg("version")
            .arg(env!("CARGO_PKG_VERSION"));
        let mut bytes = Vec::new();
        let _ = CURRENT.try_with(|c| {
            if let Some(current) = c.borrow_mut().as_mut() {
                set.arg(&current.field[..])
                    .arg(format!("{since_ms} {}", self.kind));
                bytes.extend(set.get_packed_command());
                bytes.extend(
                    redis::cmd("HSETNX")
                        .arg(&key[..])
                        .arg("started")
                        .arg(since_ms as u64)
                        .get_packed_command(),
                );
                bytes.extend(
                    redis::cmd("PEXPIRE")
                        .arg(&key[..])
                        .arg(ttl_ms)
                        .get_packed_command(),
                );
                current.rider = Some((std::mem::take(&mut bytes), 3));
            }
        });
        self.armed_at = Some(now);
    }
}

impl Drop for WaitEntry<'_> {
    fn drop(&mut self) {
        if !self.owns {
            return;
        }
        let current = CURRENT.try_with(|c| c.borrow_mut().take()).ok().flatten();
        let Some(current) = current.filter(|c| c.sent) else {
            return;
        };
        // One round trip on the caller's connection (the watchdog, which
        // may have no connection to this server, would need one); the
        // watchdog's next record write when that fails.
        // After a shutdown that released the client's locks, the whole
        // record goes: this wait's last attempt may have written it again
        // after the shutdown deleted it.
        let whole = self.client.is_shut_down() && self.client.config().release_on_shutdown;
        let deleted = self.key.as_ref().is_some_and(|key| {
            self.client
                .with_shared_conn(self.name, |conn| {
                    let mut cmd = if whole {
                        redis::cmd("DEL")
                    } else {
                        redis::cmd("HDEL")
                    };
                    cmd.arg(&key[..]);
                    if !whole {
                        cmd.arg(&current.field[..]);
                    }
                    cmd.query::<i64>(conn).map_err(crate::Error::redis)
                })
                .is_ok()
        });
        if !deleted && let Some(spec) = self.spec.clone() {
            crate::watchdog::wait_ended(
                self.client.source().clone(),
                self.node,
                spec,
                self.client.counters().clone(),
                current.field,
            );
        }
    }
}

/// Runs `f` on `conn`, a plain connection (`redis::Connection`) to the
/// server of `key`, with this thread's armed wait entry riding on its
/// first command (see [`Riding`]).
pub(crate) fn ride_plain<T>(
    conn: &mut dyn ConnectionLike,
    source: &Source,
    key: &[u8],
    f: impl FnOnce(&mut dyn ConnectionLike) -> T,
) -> T {
    match take_rider(source, source.node_of(key)) {
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
