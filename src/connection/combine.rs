//! Combining: concurrent threads share a few connections, and the commands
//! they send at the same moment go out as one pipeline.
//!
//! Leader/follower, with no I/O thread of its own: a thread enqueues its
//! packed command on its lane (one shared connection). If no thread is
//! flushing that lane, it becomes the flusher: it writes every queued
//! command in one write, reads the replies in order with redis-rs's parser
//! (`Connection::recv_response`), and hands each to its thread. Followers
//! park until their reply is there, or until their deadline; each is
//! unparked alone, by whoever has its reply, after letting go of every
//! lock (a woken thread never blocks again on a lock its waker holds).
//! When the flusher is done and commands queued up meanwhile, it writes
//! them at once, in one write, and hands the reading of their replies to
//! the oldest of them: the server works on the next batch while that
//! thread wakes up, and a thread woken to read finds its reply there.
//!
//! Timeouts are per command: each thread waits at most the response timeout
//! from the moment it enqueued. A command still queued by then is taken
//! back and was never sent ([`not_sent`]); one already sent fails with a
//! timeout whose outcome is unknown, exactly as on a connection of its own.
//! A connection that breaks mid-pipeline fails every command whose reply
//! had not been read, each with the error the connection gave.
//!
//! Only single commands and plain pipelines go through a lane. Anything
//! that changes a connection's state for later commands (`MULTI`/`EXEC`,
//! pub/sub, a longer read timeout for `WAIT`) keeps a connection of its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use super::lane_conn::{self, Requests};
use crate::duration_text::Human;
use crate::error::{Error, Result};

/// The shared connections of one server.
pub(crate) struct Combiner {
    lanes: Box<[Lane]>,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// What the slots' deadlines count from.
    base: Instant,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

/// One shared connection and the commands waiting for it.
#[derive(Default)]
pub(crate) struct Lane {
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// Commands not sent yet, oldest first. Not empty only while `busy`.
    queue: VecDeque<Arc<Slot>>,
    /// A thread is flushing this lane (or was handed it and is waking up).
    busy: bool,
    /// The connection, while no flusher holds it.
    conn: Option<redis::Connection>,
    /// Commands written on `conn` whose replies are not read yet: the
    /// thread of the first of them still waiting (set to
    /// [`SlotState::Lead`]) reads them.
    written: Vec<Arc<Slot>>,
}

/// One thread's command and, later, its replies.
struct Slot {
    bytes: Vec<u8>,
    /// How many replies the command brings back (a pipeline: several).
    replies: usize,
    /// Nanoseconds after [`Combiner::base`]: the response timeout after
    /// enqueueing, moved on while the flusher makes a new connection (as
    /// on a pooled connection, connecting has its own timeout).
    deadline: AtomicU64,
    state: Mutex<SlotState>,
    /// The thread waiting for this slot, unparked when its state changes.
    thread: Thread,
}

impl Slot {
    /// Sets the state to `to` (unless the thread gave up) and wakes the
    /// thread, once the state's lock is let go.
    fn set(&self, to: SlotState) {
        {
            let mut s = lock(&self.state);
            if matches!(*s, SlotState::Abandoned) {
                return;
            }
            *s = to;
        }
        self.thread.unpark();
    }
}

enum SlotState {
    Queued,
    /// The lane was handed to this slot's thread: it reads the replies of
    /// the commands written for it, or flushes the queue.
    Lead,
    Sent,
    Done(RedisResult<Vec<Value>>),
    /// Its thread gave up waiting; the reply is read and dropped.
    Abandoned,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Each thread keeps to one lane (threads are spread over the lanes in the
/// order they first send), so that a thread's commands stay in order.
pub(super) fn lane_of_thread(lanes: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i) % lanes
}

/// The error of a command that waited for its lane past its deadline and
/// was taken back unsent: nothing ran.
pub(super) fn not_sent(waited: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the command was still queued for its shared connection after {} and was not sent",
            Human(waited)
        ),
    ))
}

/// The error of a command sent, whose reply did not come by its deadline:
/// its outcome is unknown.
pub(super) fn no_reply(waited: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "sent on a shared connection, unanswered after {}",
            Human(waited)
        ),
    ))
}

impl Combiner {
    /// `connections` shared connections (made when first needed), each
    /// command waiting at most `response_timeout` for its reply.
    /// New connections are made within `connect_timeout`.
    pub(crate) fn new(
        connections: usize,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Combiner {
        Combiner {
            lanes: (0..connections.max(1)).map(|_| Lane::default()).collect(),
            response_timeout,
            connect_timeout,
            base: Instant::now(),
        }
    }

    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn deadline(&self, slot: &Slot) -> Instant {
        self.base + Duration::from_nanos(slot.deadline.load(Ordering::Acquire))
    }

    /// A new connection for `batch`. Connecting has its own timeout, as for
    /// a pooled connection: the batch's deadlines move on meanwhile, and
    /// count the response timeout from when the connection is there.
    fn connect_for(
        &self,
        batch: &[Arc<Slot>],
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
    ) -> Result<redis::Connection> {
        let limit = self.ns(Instant::now() + self.connect_timeout + self.response_timeout);
        for slot in batch {
            slot.deadline.fetch_max(limit, Ordering::AcqRel);
        }
        let made = connect(None);
        let after = self.ns(Instant::now() + self.response_timeout);
        for slot in batch {
            slot.deadline.store(after, Ordering::Release);
        }
        made
    }

    /// Shared connections open now.
    pub(crate) fn open_connections(&self) -> usize {
        self.lanes
            .iter()
            .filter(|lane| {
                let st = lock(&lane.state);
                st.conn.is_some() || st.busy
            })
            .count()
    }

    /// Closes the idle shared connections (the server restarted). One
    /// with commands written on it stays with the thread to read their
    /// replies, which drops it if it broke.
    pub(crate) fn flush(&self) {
        for lane in self.lanes.iter() {
            let mut st = lock(&lane.state);
            if st.written.is_empty() {
                drop(st.conn.take());
            }
        }
    }

    /// Runs `op` with a connection whose commands go through this thread's
    /// lane. `connect` makes a new connection when the lane has none.
    ///
    /// # Errors
    ///
    /// `op`'s, or the failure to connect.
    pub(crate) fn with_conn<T>(
        &self,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        op: impl FnOnce(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        let lane = &self.lanes[lane_of_thread(self.lanes.len())];
        lane_conn::with_conn(self, lane, connect, op)
    }

    /// Sends `bytes` (`replies` commands) on `lane` and waits for the
    /// replies.
    fn request(
        &self,
        lane: &Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
        bytes: &[u8],
        replies: usize,
    ) -> RedisResult<Vec<Value>> {
        {
            let mut st = lock(&lane.state);
            if !st.busy {
                // The lane is idle: send at once, without queueing (what a
                // single thread always finds).
                st.busy = true;
                let conn = st.conn.take();
                drop(st);
                let (result, conn) = self.alone(conn, bytes, replies, connect, connect_error);
                self.hand_over(lane, conn);
                return result;
            }
        }
        let enqueued = Instant::now();
        let slot = Arc::new(Slot {
            bytes: bytes.to_vec(),
            replies,
            deadline: AtomicU64::new(self.ns(enqueued + self.response_timeout)),
            state: Mutex::new(SlotState::Queued),
            thread: std::thread::current(),
        });
        let lead = {
            let mut st = lock(&lane.state);
            st.queue.push_back(slot.clone());
            // Idle again since the look above: this thread flushes.
            !std::mem::replace(&mut st.busy, true)
        };
        if lead {
            self.flush_lane(lane, connect, connect_error);
        }
        loop {
            let mut st = lock(&slot.state);
            match std::mem::replace(&mut *st, SlotState::Abandoned) {
                SlotState::Done(result) => return result,
                SlotState::Lead => {
                    *st = SlotState::Sent;
                    drop(st);
                    self.flush_lane(lane, connect, connect_error);
                    continue;
                }
                other => *st = other,
            }
            let now = Instant::now();
            let deadline = self.deadline(&slot);
            if now >= deadline {
                if matches!(*st, SlotState::Sent) {
                    *st = SlotState::Abandoned;
                    return Err(no_reply(now - enqueued));
                }
                // Queued: take it back under the lane's lock (lane before
                // slot, as the flusher takes them), unless the flusher took
                // it meanwhile.
                drop(st);
                let mut lane_st = lock(&lane.state);
                let mut st = lock(&slot.state);
                if matches!(*st, SlotState::Queued) {
                    lane_st.queue.retain(|s| !Arc::ptr_eq(s, &slot));
                    *st = SlotState::Abandoned;
                    return Err(not_sent(now - enqueued));
                }
                continue;
            }
            drop(st);
            // Returns early when unparked (also by a wake-up meant for an
            // earlier wait of this thread): the state is looked at again.
            std::thread::park_timeout(deadline - now);
        }
    }

    /// Runs `lane` once, for the thread it was handed to: reads the replies
    /// of the commands written for it, or else sends every queued command
    /// in one write and reads their replies; then hands the lane on.
    fn flush_lane(
        &self,
        lane: &Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
    ) {
        let (written, conn) = {
            let mut st = lock(&lane.state);
            (std::mem::take(&mut st.written), st.conn.take())
        };
        let conn = if written.is_empty() {
            let batch = self.take_queue(lane);
            if batch.is_empty() {
                conn
            } else {
                self.send(batch, conn, None, connect, connect_error)
            }
        } else {
            self.read_written(written, conn, connect, connect_error)
        };
        self.hand_over(lane, conn);
    }

    /// Takes every queued command of `lane` to be sent: those whose
    /// deadline passed fail as not sent, the others are marked sent.
    fn take_queue(&self, lane: &Lane) -> Vec<Arc<Slot>> {
        let now = Instant::now();
        let mut expired = Vec::new();
        let batch = {
            let mut st = lock(&lane.state);
            let mut batch = Vec::with_capacity(st.queue.len());
            for slot in st.queue.drain(..) {
                let mut s = lock(&slot.state);
                if now >= self.deadline(&slot) {
                    // Expired before it could be sent: nothing ran.
                    if matches!(*s, SlotState::Queued | SlotState::Sent) {
                        drop(s);
                        expired.push(slot);
                    }
                    continue;
                }
                *s = SlotState::Sent;
                drop(s);
                batch.push(slot);
            }
            batch
        };
        for slot in expired {
            slot.set(SlotState::Done(Err(not_sent(self.response_timeout))));
        }
        batch
    }

    /// Reads the replies of `written`, sent on `conn` by the thread that
    /// handed the lane over, within the earliest of their deadlines; the
    /// connection back when it is still good. A connection found dead
    /// before any reply gets the batch once more on a fresh connection, as
    /// in [`Combiner::send`].
    fn read_written(
        &self,
        written: Vec<Arc<Slot>>,
        conn: Option<redis::Connection>,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
    ) -> Option<redis::Connection> {
        let Some(mut c) = conn else {
            // Taken away meanwhile: nothing can be read.
            deliver_err(&written, &dropped());
            return None;
        };
        let earliest = written.iter().map(|s| self.deadline(s)).min();
        let shortened = self.bound_reads(&c, earliest);
        match read_replies(&mut c, &written) {
            Ok(()) => {
                if shortened && c.set_read_timeout(Some(self.response_timeout)).is_err() {
                    return None;
                }
                Some(c)
            }
            Err((0, e)) if e.is_connection_dropped() => {
                drop(c);
                self.send(written, None, Some(e), connect, connect_error)
            }
            Err((read, e)) => {
                deliver_err(&written[read..], &e);
                None
            }
        }
    }

    /// Ends a turn on `lane`: when commands queued up meanwhile and `conn`
    /// is good, writes them on it at once and hands the reading of their
    /// replies to the oldest one still waiting; else puts `conn` back and
    /// hands the lane to the oldest queued command (which connects), or
    /// leaves it idle.
    fn hand_over(&self, lane: &Lane, conn: Option<redis::Connection>) {
        let mut conn = conn;
        if let Some(mut c) = conn.take() {
            let queued = !lock(&lane.state).queue.is_empty();
            let batch = if queued {
                self.take_queue(lane)
            } else {
                Vec::new()
            };
            if batch.is_empty() {
                conn = Some(c);
            } else {
                let mut bytes = Vec::with_capacity(batch.iter().map(|s| s.bytes.len()).sum());
                for slot in &batch {
                    bytes.extend_from_slice(&slot.bytes);
                }
                match c.send_packed_command(&bytes) {
                    Ok(()) => {
                        if self.hand_reading(lane, c, batch) {
                            return;
                        }
                    }
                    // The server hung up: the batch goes back to the front
                    // of the queue, for one try on a fresh connection, as
                    // a reused connection found dead gets.
                    Err(e) if e.is_connection_dropped() => requeue(lane, batch),
                    // Anything else (a write timeout): part of the batch
                    // may have gone out; its outcome is unknown.
                    Err(e) => deliver_err(&batch, &e),
                }
            }
        }
        let next = {
            let mut st = lock(&lane.state);
            if st.conn.is_none() {
                st.conn = conn;
            }
            match st.queue.front() {
                Some(next) => {
                    *lock(&next.state) = SlotState::Lead;
                    Some(next.clone())
                }
                None => {
                    st.busy = false;
                    None
                }
            }
        };
        if let Some(next) = next {
            next.thread.unpark();
        }
    }

    /// Hands the reading of `batch`, just written on `conn`, to the oldest
    /// of its commands still waiting. `false` when every one of them gave
    /// up: the connection, with replies nobody reads, is dropped.
    fn hand_reading(&self, lane: &Lane, conn: redis::Connection, batch: Vec<Arc<Slot>>) -> bool {
        let reader = {
            let mut st = lock(&lane.state);
            let reader = batch.iter().find(|slot| {
                let mut s = lock(&slot.state);
                let waiting = matches!(*s, SlotState::Sent);
                if waiting {
                    *s = SlotState::Lead;
                }
                waiting
            });
            let Some(reader) = reader.cloned() else {
                return false;
            };
            st.conn = Some(conn);
            st.written = batch;
            reader
        };
        reader.thread.unpark();
        true
    }

    /// Sends `bytes` (`replies` commands) alone on `conn` (or a new
    /// connection) and reads the replies: the idle lane's path. The
    /// connection back when it is still good.
    fn alone(
        &self,
        conn: Option<redis::Connection>,
        bytes: &[u8],
        replies: usize,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
    ) -> (RedisResult<Vec<Value>>, Option<redis::Connection>) {
        let mut reused = conn.is_some();
        let mut conn = conn;
        // The failure of a reused connection the command was written on.
        let mut lost = None;
        loop {
            let mut c = match conn.take() {
                Some(c) => c,
                // With the connect timeout, as a pooled connection: the
                // response timeout counts from the write.
                None => match (connect(None), lost.take()) {
                    (Ok(c), _) => c,
                    // The command may have run on the lost connection: its
                    // error, not "refused" (read as never sent).
                    (Err(_), Some(lost)) => return (Err(lost), None),
                    (Err(e), None) => {
                        let cause = connect_cause(&e);
                        *connect_error = Some(e);
                        return (Err(cause), None);
                    }
                },
            };
            let shortened = self.bound_reads(&c, Some(Instant::now() + self.response_timeout));
            let result = c.send_packed_command(bytes).and_then(|()| {
                (0..replies)
                    .map(|_| c.recv_response())
                    .collect::<RedisResult<Vec<Value>>>()
            });
            match result {
                Ok(values) => {
                    if shortened && c.set_read_timeout(Some(self.response_timeout)).is_err() {
                        return (Ok(values), None);
                    }
                    return (Ok(values), Some(c));
                }
                Err(e) if reused && e.is_connection_dropped() => {
                    reused = false;
                    lost = Some(e);
                }
                Err(e) => return (Err(e), None),
            }
        }
    }

    /// Writes `batch` on `conn` (or a new connection) and hands out the
    /// replies; the connection back when it is still good. A reused
    /// connection that turns out dead before any reply (the server
    /// restarted) gets one fresh connection, as a pooled one does. `lost`
    /// is the failure of a connection `batch` was already written on (and
    /// so may have run), when this is that fresh try.
    fn send(
        &self,
        batch: Vec<Arc<Slot>>,
        conn: Option<redis::Connection>,
        lost: Option<RedisError>,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
    ) -> Option<redis::Connection> {
        let mut bytes = Vec::with_capacity(batch.iter().map(|s| s.bytes.len()).sum());
        for slot in &batch {
            bytes.extend_from_slice(&slot.bytes);
        }
        // The flusher is the oldest command of the batch: the batch is
        // bounded by its deadline, the earliest, when that is sooner than
        // the connection's own timeout (the batch waited for an earlier
        // one). The flusher returns by its deadline; a later command whose
        // reply would have come in time fails early instead, with an
        // unknown outcome (as any timeout), handled by its caller.
        let mut conn = conn;
        let mut reused = conn.is_some();
        // The failure of a reused connection the batch was written on.
        let mut lost = lost;
        loop {
            let mut c = match conn.take() {
                Some(c) => c,
                None => match (self.connect_for(&batch, connect), lost.take()) {
                    (Ok(c), _) => c,
                    // The batch may have run on the lost connection: its
                    // error, not "refused", which a Sentinel or Cluster
                    // source reads as never sent and sends again elsewhere.
                    (Err(_), Some(lost)) => {
                        deliver_err(&batch, &lost);
                        return None;
                    }
                    (Err(e), None) => {
                        let cause = connect_cause(&e);
                        *connect_error = Some(e);
                        deliver_err(&batch, &cause);
                        return None;
                    }
                },
            };
            let earliest = batch.iter().map(|s| self.deadline(s)).min();
            let shortened = self.bound_reads(&c, earliest);
            match exchange(&mut c, &bytes, &batch) {
                Ok(()) => {
                    if shortened && c.set_read_timeout(Some(self.response_timeout)).is_err() {
                        return None;
                    }
                    return Some(c);
                }
                Err((0, e)) if reused && e.is_connection_dropped() => {
                    reused = false;
                    lost = Some(e);
                }
                Err((read, e)) => {
                    deliver_err(&batch[read..], &e);
                    return None;
                }
            }
        }
    }
}

impl Combiner {
    /// Shortens `conn`'s read timeout to what is left until `deadline` when
    /// that is well under the response timeout (a command that waited, or
    /// a connection just made); `true` when it did, and the timeout must
    /// be put back after.
    fn bound_reads(&self, conn: &redis::Connection, deadline: Option<Instant>) -> bool {
        let Some(left) = deadline.map(|t| t.saturating_duration_since(Instant::now())) else {
            return false;
        };
        if left + self.response_timeout / 8 >= self.response_timeout {
            return false;
        }
        let _ = conn.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        true
    }
}

/// Puts `batch`, whose write failed, back at the front of `lane`'s queue.
fn requeue(lane: &Lane, batch: Vec<Arc<Slot>>) {
    let mut st = lock(&lane.state);
    for slot in batch.into_iter().rev() {
        let mut s = lock(&slot.state);
        if matches!(*s, SlotState::Sent) {
            *s = SlotState::Queued;
            drop(s);
            st.queue.push_front(slot);
        }
    }
}

/// The error of commands written on a connection taken away before their
/// replies were read.
fn dropped() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the shared connection was closed before the reply was read",
    ))
}

/// A failure to connect in redis-rs's terms, for the commands that were to
/// use the connection (their callers get the typed error).
pub(super) fn connect_cause(e: &Error) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        e.chain(),
    ))
}

/// One write of `bytes`, then the replies of every slot of `batch` in
/// order, each handed to its thread as soon as read. On failure, how many
/// slots got their replies, and the error.
fn exchange(
    conn: &mut redis::Connection,
    bytes: &[u8],
    batch: &[Arc<Slot>],
) -> std::result::Result<(), (usize, RedisError)> {
    conn.send_packed_command(bytes).map_err(|e| (0, e))?;
    read_replies(conn, batch)
}

/// The replies of every slot of `batch`, written on `conn`, in order, each
/// handed to its thread as soon as read. On failure, how many slots got
/// their replies, and the error.
fn read_replies(
    conn: &mut redis::Connection,
    batch: &[Arc<Slot>],
) -> std::result::Result<(), (usize, RedisError)> {
    for (i, slot) in batch.iter().enumerate() {
        let mut replies = Vec::with_capacity(slot.replies);
        for _ in 0..slot.replies {
            replies.push(conn.recv_response().map_err(|e| (i, e))?);
        }
        deliver(slot, Ok(replies));
    }
    Ok(())
}

impl Requests for Combiner {
    type Lane = Lane;
    type Link = redis::Connection;

    fn request(
        &self,
        lane: &Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        connect_error: &mut Option<Error>,
        bytes: &[u8],
        replies: usize,
    ) -> RedisResult<Vec<Value>> {
        Combiner::request(self, lane, connect, connect_error, bytes, replies)
    }
}

fn deliver(slot: &Slot, result: RedisResult<Vec<Value>>) {
    slot.set(SlotState::Done(result));
}

fn deliver_err(batch: &[Arc<Slot>], err: &RedisError) {
    for slot in batch {
        deliver(slot, Err(err.clone()));
    }
}

/// The test servers' connector: connects to `addr` with `response` as
/// read and write timeout; with `setup`, a `CLIENT SETNAME` round trip
/// first, as a named client's pool does.
#[cfg(test)]
fn test_connector(
    addr: std::net::SocketAddr,
    response: Duration,
    setup: bool,
) -> impl Fn(Option<Duration>) -> Result<redis::Connection> {
    use redis::IntoConnectionInfo;
    move |_| {
        let info = format!("redis://{addr}/").into_connection_info().unwrap();
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let client = redis::Client::open(info.set_redis_settings(settings)).unwrap();
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .map_err(Error::redis)?;
        conn.set_read_timeout(Some(response))
            .map_err(Error::redis)?;
        conn.set_write_timeout(Some(response))
            .map_err(Error::redis)?;
        if setup {
            redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg("t")
                .query::<()>(&mut conn)
                .map_err(Error::redis)?;
        }
        Ok(conn)
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "the pauses are the scenario: a server's slow reply, threads queueing one after another"
)]
mod tests {
    //! Deadlines on a frozen server. The server here is a loopback socket
    //! that answers one command after a delay and nothing after it: the
    //! kernel still accepts and buffers what is sent, as for a `SIGSTOP`ped
    //! Redis. Each thread's call must return by its own deadline (the
    //! response timeout after it queued) plus a small slack, not when the
    //! calls ahead of it let go of the connection.

    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::sync::Barrier;

    const RESPONSE: Duration = Duration::from_millis(800);
    /// When the server answers its first command.
    const FIRST_REPLY: Duration = Duration::from_millis(700);
    /// Followers queue every 25 ms from 25 ms on, while the first command
    /// waits for its reply.
    const FOLLOWERS: u32 = 8;
    const STAGGER: Duration = Duration::from_millis(25);
    /// Scheduling on a loaded 2-core machine. The broken behaviours return
    /// the first follower 675 ms late (when the connection is free again,
    /// 700 + 800 ms, instead of at its own deadline, 25 + 800 ms).
    const SLACK: Duration = Duration::from_millis(300);

    /// A server that answers the first command it reads with `+OK` after
    /// [`FIRST_REPLY`], then freezes: it reads everything and answers
    /// nothing. Its threads end when the clients hang up, or after 10 s.
    fn server_that_freezes() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut first = true;
            for conn in listener.incoming().take(16) {
                let Ok(mut conn) = conn else { return };
                let answer = std::mem::take(&mut first);
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut buf = [0u8; 4096];
                    if answer && matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                        std::thread::sleep(FIRST_REPLY);
                        let _ = conn.write_all(b"+OK\r\n");
                    }
                    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        addr
    }

    /// Thread 0 sends a `PING` at once; thread `t` sends one `t` × 25 ms
    /// later, queued behind it. For each thread: how long its call took
    /// from its start, and its result (redis-rs's error, unclassified).
    fn ping_from_staggered_threads(setup: bool) -> Vec<(Duration, RedisResult<String>)> {
        let addr = server_that_freezes();
        let combiner = Arc::new(Combiner::new(1, RESPONSE, Duration::from_secs(1)));
        let start = Arc::new(Barrier::new(FOLLOWERS as usize + 1));
        let handles: Vec<_> = (0..=FOLLOWERS)
            .map(|t| {
                let (combiner, start) = (combiner.clone(), start.clone());
                std::thread::spawn(move || {
                    let connect = test_connector(addr, RESPONSE, setup);
                    start.wait();
                    std::thread::sleep(STAGGER * t);
                    let began = Instant::now();
                    let result = combiner
                        .with_conn(
                            &connect,
                            |conn| Ok(redis::cmd("PING").query::<String>(conn)),
                        )
                        .unwrap_or_else(|e| Err(connect_cause(&e)));
                    (began.elapsed(), result)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// The first command's reply comes late but in time; the followers,
    /// queued meanwhile, go out as one pipeline on the same connection,
    /// and the server freezes. The pipeline's reads are bounded by its
    /// oldest command's deadline: every follower returns by its own
    /// deadline, none waits a whole response timeout from the write.
    #[test]
    fn a_pipeline_that_waited_is_read_only_until_its_oldest_deadline() {
        let results = ping_from_staggered_threads(false);
        let (took, first) = &results[0];
        assert_eq!(first.as_deref().ok(), Some("OK"), "{first:?}");
        assert!(*took <= FIRST_REPLY + SLACK, "thread 0 took {took:?}");
        for (t, (took, result)) in results.iter().enumerate().skip(1) {
            let e = result
                .as_ref()
                .expect_err("a frozen server answers nothing");
            assert!(e.is_timeout(), "thread {t}: {e:?}");
            assert!(
                *took <= RESPONSE + SLACK,
                "thread {t} took {took:?}, past its own deadline ({RESPONSE:?} + {SLACK:?})"
            );
        }
    }

    /// The server answers the connection's setup, then freezes: the first
    /// command holds the connection for a whole response timeout, and the
    /// followers' deadlines pass while they are queued. Each is taken back
    /// unsent at its own deadline, without waiting for the connection.
    #[test]
    fn queued_commands_are_taken_back_at_their_own_deadlines() {
        let results = ping_from_staggered_threads(true);
        let (took, first) = &results[0];
        let e = first.as_ref().expect_err("a frozen server answers nothing");
        assert!(e.is_timeout(), "thread 0: {e:?}");
        assert!(
            *took <= FIRST_REPLY + RESPONSE + SLACK,
            "thread 0 took {took:?}"
        );
        for (t, (took, result)) in results.iter().enumerate().skip(1) {
            let e = result.as_ref().expect_err("nothing was answered");
            assert!(e.to_string().contains("was not sent"), "thread {t}: {e}");
            assert!(
                *took <= RESPONSE + SLACK,
                "thread {t} took {took:?}, past its own deadline ({RESPONSE:?} + {SLACK:?})"
            );
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "a late reply is the scenario: the server sleeps before it answers"
)]
pub(super) mod delivery_tests {
    //! Every caller gets its own reply or an error, never another's: a
    //! loopback server that echoes each command's last argument answers
    //! some commands late (past the callers' deadlines) and cuts some
    //! connections in the middle of a pipeline.

    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};

    /// The response timeout of the lanes in these scenarios.
    pub(in crate::connection) const RESPONSE: Duration = Duration::from_millis(150);

    /// What the server does with one command.
    #[derive(Clone, Copy)]
    pub(in crate::connection) enum Act {
        Answer,
        /// Answers after this pause (the commands after it wait too, as
        /// on a slow server).
        Late(Duration),
        /// Answers in two writes, this pause between them (the caller
        /// reads half a reply).
        Split(Duration),
        /// Closes the connection without answering this command or any
        /// after it.
        Cut,
    }

    /// One complete command at the start of `buf` (a RESP array of bulk
    /// strings) and its length in bytes.
    fn parse(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
        fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
            let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
            let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
            Some((n, end + 2))
        }
        let (count, mut at) = line(buf, 0)?;
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            let (len, start) = line(buf, at)?;
            if buf.len() < start + len + 2 {
                return None;
            }
            args.push(buf[start..start + len].to_vec());
            at = start + len + 2;
        }
        Some((args, at))
    }

    /// Serves one connection: `plan(command index)` says what to do.
    fn serve(mut conn: TcpStream, plan: &dyn Fn(usize) -> Act) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut index = 0;
        loop {
            while let Some((args, used)) = parse(&buf) {
                buf.drain(..used);
                let reply = match args.last() {
                    Some(arg) if args.len() > 1 => {
                        let mut r = format!("${}\r\n", arg.len()).into_bytes();
                        r.extend_from_slice(arg);
                        r.extend_from_slice(b"\r\n");
                        r
                    }
                    _ => b"+PONG\r\n".to_vec(),
                };
                match plan(index) {
                    Act::Answer => {}
                    Act::Late(pause) => std::thread::sleep(pause),
                    Act::Split(pause) => {
                        let half = reply.len() / 2;
                        if conn.write_all(&reply[..half]).is_err() {
                            return;
                        }
                        std::thread::sleep(pause);
                        index += 1;
                        if conn.write_all(&reply[half..]).is_err() {
                            return;
                        }
                        continue;
                    }
                    Act::Cut => {
                        let _ = conn.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                }
                index += 1;
                if conn.write_all(&reply).is_err() {
                    return;
                }
            }
            match conn.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
    }

    /// An echo server; `plan(connection index, command index)`. It accepts
    /// `connections` connections, then closes its port (a reconnect is
    /// refused).
    pub(in crate::connection) fn echo_server(
        connections: usize,
        plan: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
    ) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let plan = Arc::new(plan);
        std::thread::spawn(move || {
            for (c, conn) in listener.incoming().take(connections).enumerate() {
                let Ok(conn) = conn else { return };
                let plan = plan.clone();
                std::thread::spawn(move || serve(conn, &|i| plan(c, i)));
            }
        });
        addr
    }

    /// `ECHO token` through `combiner`: the reply or the error.
    fn echo(
        combiner: &Combiner,
        connect: &dyn Fn(Option<Duration>) -> Result<redis::Connection>,
        token: &str,
    ) -> Result<String> {
        combiner.with_conn(connect, |conn| {
            redis::cmd("ECHO")
                .arg(token)
                .query::<String>(conn)
                .map_err(Error::redis)
        })
    }

    /// `ECHO token` through a shared lane of some kind, to the echo server
    /// at the address, with the response timeout given; a fresh
    /// connection is made when the lane needs one.
    pub(in crate::connection) type EchoThrough<L> =
        fn(&L, SocketAddr, Duration, &str) -> Result<String>;

    /// Eight threads send 40 `ECHO`s each, one unique token per call, on
    /// one connection of `lane` (response timeout [`RESPONSE`]). The server
    /// answers one command in 9 late (past the deadline of every command
    /// queued behind it), sends half of another reply and the rest too
    /// late, and cuts one connection in 3 at its fifth command. No call
    /// ever gets another call's token; some get their own, some fail.
    pub(in crate::connection) fn every_caller_gets_its_own_reply_or_an_error<L>(
        lane: L,
        echo: EchoThrough<L>,
    ) where
        L: Send + Sync + 'static,
    {
        let addr = echo_server(1000, |c, i| match (c % 3, i % 9) {
            (0, _) if i == 5 => Act::Cut,
            (_, 4) => Act::Late(RESPONSE * 2),
            (_, 7) => Act::Split(RESPONSE * 2),
            _ => Act::Answer,
        });
        let lane = Arc::new(lane);
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let lane = lane.clone();
                std::thread::spawn(move || {
                    let (mut own, mut failed, mut foreign) = (0, 0, Vec::new());
                    for i in 0..40 {
                        let token = format!("t{t}-{i}");
                        match echo(&lane, addr, RESPONSE, &token) {
                            Ok(reply) if reply == token => own += 1,
                            Ok(reply) => foreign.push((token, reply)),
                            Err(_) => failed += 1,
                        }
                    }
                    (own, failed, foreign)
                })
            })
            .collect();
        let (mut own, mut failed) = (0, 0);
        for h in handles {
            let (o, f, foreign) = h.join().unwrap();
            assert!(foreign.is_empty(), "replies of other calls: {foreign:?}");
            own += o;
            failed += f;
        }
        assert!(own > 0 && failed > 0, "own {own}, failed {failed}");
    }

    /// A command written on a reused shared connection of `lane` whose
    /// server then drops it unanswered may have run: its caller is not told
    /// "refused" (which a Sentinel or Cluster source reads as never sent,
    /// and sends again elsewhere) when the reconnect is refused.
    pub(in crate::connection) fn a_command_lost_with_a_reused_connection_is_not_refused<L>(
        lane: L,
        echo: EchoThrough<L>,
    ) {
        // One connection: the first command is answered, the second cut;
        // then the port is closed.
        let addr = echo_server(1, |_, i| if i == 0 { Act::Answer } else { Act::Cut });
        assert_eq!(echo(&lane, addr, RESPONSE, "warm").unwrap(), "warm");
        let err = echo(&lane, addr, RESPONSE, "lost").unwrap_err();
        let refused = err
            .redis_error()
            .is_some_and(RedisError::is_connection_refusal);
        assert!(!refused, "reported as refused: {err}");
        assert!(err.is_connection(), "{err}");
    }

    fn echo_in_turns(
        combiner: &Combiner,
        addr: SocketAddr,
        response: Duration,
        token: &str,
    ) -> Result<String> {
        echo(combiner, &test_connector(addr, response, false), token)
    }

    #[test]
    fn each_caller_gets_its_own_reply_or_an_error() {
        every_caller_gets_its_own_reply_or_an_error(
            Combiner::new(1, RESPONSE, Duration::from_secs(1)),
            echo_in_turns,
        );
    }

    #[test]
    fn a_command_lost_with_a_reused_connection_is_not_reported_refused() {
        a_command_lost_with_a_reused_connection_is_not_refused(
            Combiner::new(1, RESPONSE, Duration::from_secs(1)),
            echo_in_turns,
        );
    }

    /// The same for a pipeline of several threads' commands: the first
    /// command is answered late, the three queued meanwhile go out
    /// together on the reused connection, which the server cuts.
    #[test]
    fn a_pipeline_lost_with_a_reused_connection_is_not_reported_refused() {
        let addr = echo_server(1, |_, i| match i {
            0 => Act::Late(RESPONSE / 2),
            _ => Act::Cut,
        });
        let combiner = Arc::new(Combiner::new(1, RESPONSE, Duration::from_secs(1)));
        let started = Instant::now();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let combiner = combiner.clone();
                std::thread::spawn(move || {
                    let connect = test_connector(addr, RESPONSE, false);
                    std::thread::sleep(Duration::from_millis(15) * t);
                    echo(&combiner, &connect, &format!("t{t}"))
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(started.elapsed() < RESPONSE * 3, "{:?}", started.elapsed());
        assert_eq!(results[0].as_deref().ok(), Some("t0"), "{:?}", results[0]);
        for (t, result) in results.iter().enumerate().skip(1) {
            let err = result.as_ref().expect_err("the connection was cut");
            let refused = err
                .redis_error()
                .is_some_and(RedisError::is_connection_refusal);
            assert!(!refused, "thread {t}: reported as refused: {err}");
        }
    }
}
