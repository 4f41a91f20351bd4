//! Shared connections: threads' lock calls share one connection per
//! server, and a thread's command is written while the replies of earlier
//! ones are still being read. With many threads at once (a read hands
//! replies to [`GROW_AT`] or more), the threads are spread over two, then
//! four connections (lanes), which are kept for the client's life.
//!
//! Each shared connection has two roles, each held by at most one thread,
//! and no thread of its own:
//!
//! * The writer. A thread with a command takes the writing role if it is
//!   free and writes at once; commands that come while it writes queue, and
//!   the writer writes them all in one more write before it lets go. A
//!   command goes on the list of commands awaiting replies, in wire order,
//!   before its bytes are written. One exception: while a reader hands out
//!   a burst of replies and the server still has several commands to
//!   answer, a command queues even with nobody writing, and the last of
//!   the threads handed replies writes the queue once it is back (see
//!   [`LaneState::handed_out`]): the threads of a burst send their next
//!   commands in one write, not one each.
//! * The reader. It reads replies in order with redis-rs's parser, hands
//!   each to its thread (unparked alone, after every lock is let go), and
//!   reads its own. It then hands out the replies the parser already holds
//!   (without another read), and passes the role to the thread of the
//!   oldest command still waiting, which finds its reply read soon after it
//!   wakes. A thread that writes while nobody reads reads itself.
//!
//! So the server gets a new command as soon as a thread has one, not once
//! every reply of the last batch was read: several batches are in flight on
//! one connection, as with an asynchronous client's multiplexed connection.
//! A thread alone writes and reads itself: one write and one read per
//! command, as on a connection of its own.
//!
//! Guarantees. Each thread waits at most the response timeout from when it
//! sent or queued (plus the connect timeout while the connection is being
//! made). A command still queued at its deadline is taken back and was
//! never sent ([`not_sent`]); a command written whose reply is late fails
//! with an unknown outcome ([`no_reply`]; its reply is read and dropped
//! later, and the connection stays). A connection that breaks fails
//! exactly the commands written on it whose replies were not read, each
//! with the connection's error; one that breaks before any reply to a
//! command written on it when it was already in use is tried once more on
//! a fresh connection, as a pooled connection is.
//!
//! The socket is read and written from two threads, which redis-rs's
//! blocking connection cannot do: see [`super::wire`], for TCP, Unix
//! sockets and TLS, RESP2 and RESP3.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use super::framed::keep_after;
use super::wire::{Link, Wire};
use crate::duration_text::Human;
use crate::error::{Error, Result};

/// The reading end of a shared link.
struct Reader {
    stream: Arc<Wire>,
    /// Bumped at every read that got bytes (see [`Live::heard`]).
    heard: Arc<AtomicU64>,
    parser: redis::Parser,
    /// The replies already read of the oldest command awaiting replies,
    /// when it brings several and the reading stopped between them.
    partial: Vec<Value>,
    /// The socket's read timeout now.
    timeout: Duration,
}

/// The socket as the parser reads it. With `buffered_only`, it refuses to
/// read (and says so in `starved`): the parser then gives only a reply it
/// holds whole already, and keeps a partial one for the next call.
struct Feed<'a> {
    stream: &'a Wire,
    heard: &'a AtomicU64,
    buffered_only: bool,
    starved: bool,
}

impl Read for Feed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.buffered_only {
            return match self.stream.read_buffered(buf)? {
                Some(n) if n > 0 => Ok(n),
                _ => {
                    self.starved = true;
                    Err(io::ErrorKind::WouldBlock.into())
                }
            };
        }
        let n = self.stream.read(buf)?;
        if n > 0 {
            self.heard.fetch_add(1, Ordering::Relaxed);
        }
        Ok(n)
    }
}

impl Reader {
    /// The `count` replies of the oldest command awaiting replies; `None`
    /// when `buffered_only` and they are not all in the parser's buffer.
    fn replies(&mut self, count: usize, buffered_only: bool) -> RedisResult<Option<Vec<Value>>> {
        let mut feed = Feed {
            stream: &self.stream,
            heard: &self.heard,
            buffered_only,
            starved: false,
        };
        while self.partial.len() < count {
            match self.parser.parse_value(&mut feed) {
                // Not a reply (RESP3): nothing waits for it.
                Ok(Value::Push { .. }) => {}
                Ok(value) => self.partial.push(value),
                Err(_) if feed.starved => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(std::mem::take(&mut self.partial)))
    }

    /// Bounds the next reads to `left` when that is well under the
    /// response timeout `full`; else reads get the whole of `full`.
    fn bound(&mut self, left: Duration, full: Duration) {
        let want = if left + full / 8 >= full {
            full
        } else {
            left.max(Duration::from_millis(1))
        };
        if want != self.timeout && self.stream.set_read_timeout(want).is_ok() {
            self.timeout = want;
        }
    }
}

/// The shared connections of one server: one at first, more (up to the
/// number of lanes) as the demand is seen (see [`Shared::grow`]).
pub(crate) struct Shared {
    lanes: Box<[Lane]>,
    /// Lanes in use: threads spread over the first `active`.
    active: AtomicUsize,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// What the slots' deadlines count from.
    base: Instant,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
pub(crate) struct Lane {
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// Commands waiting for the writer, oldest first. Not empty only while
    /// `writing`.
    queue: VecDeque<Arc<Slot>>,
    /// A thread writes (or connects).
    writing: bool,
    /// The command of the thread writing: the reading is not handed to a
    /// thread busy writing.
    writer: Option<Arc<Slot>>,
    /// The connection, unless none was made yet or the last one broke.
    live: Option<Live>,
    /// Connections made so far: each is known by its number.
    made: u64,
    /// Threads handed their replies by a reader and not yet back from
    /// their wait. While any is, and the server has at least
    /// [`BURST_IN_FLIGHT`] commands of the connection still to answer, a
    /// command that finds nobody writing queues instead of being written at
    /// once: those threads are about to send their next commands, and the
    /// last one back writes them all in one write
    /// ([`Shared::back_from_hand_out`]).
    handed_out: usize,
}

/// Commands awaiting replies from which a command that comes while
/// replies are being handed out waits for the threads handed them (see
/// [`LaneState::handed_out`]). Below it the server may run out of work
/// before they are back, and a command goes out at once; from it on, the
/// server is busy for a while, and one write for a burst of commands
/// saves the client and the server a system call and a segment per
/// command (with 256 threads on one client, about 18 % more cycles per
/// second in S3 and a lower p99 wait, BENCHMARKS.md).
const BURST_IN_FLIGHT: usize = 4;

/// Threads at once on one shared connection (handed replies by one read
/// and still to come back, or awaiting replies) from which another lane
/// is put in use: one connection's reader hands every reply out alone,
/// and from some dozens of threads on it two or four connections carry
/// more (64 and 256 threads: BENCHMARKS.md). Only replies count: a frozen
/// server, whose callers pile up unanswered, opens nothing.
const GROW_AT: usize = 24;

/// A connection in use.
struct Live {
    id: u64,
    stream: Arc<Wire>,
    /// The reading end, while no thread reads.
    reader: Option<Reader>,
    /// A thread reads, or was handed the reading and is waking up.
    reading: bool,
    /// Commands written (or being written) whose replies are not read, in
    /// the order they went out.
    pending: VecDeque<Arc<Slot>>,
    /// Replies read on this connection.
    replies: u64,
    /// Reads that got bytes on this connection: a command that waited its
    /// whole response timeout while this stayed as it was when the command
    /// went out heard nothing at all (see [`Shared::drop_if_silent`]).
    heard: Arc<AtomicU64>,
}

/// One thread's command and, later, its replies.
struct Slot {
    /// The command, when it queued for another thread to write it.
    bytes: Vec<u8>,
    /// How many replies it brings back (a pipeline: several).
    replies: usize,
    /// Nanoseconds after [`Shared::base`]: the response timeout after it
    /// was sent or queued, moved on while a connection is being made.
    deadline: AtomicU64,
    state: Mutex<SlotState>,
    thread: Thread,
    /// Set when it goes out (under the lane's lock): its connection's
    /// number, whether that connection was in use before, and how many
    /// replies had been read on it.
    link: AtomicU64,
    reused: AtomicBool,
    mark: AtomicU64,
    /// Set when it goes out: the connection's [`Live::heard`] then.
    heard: AtomicU64,
    /// Its replies were handed to it by a reader, which counted it in
    /// [`LaneState::handed_out`].
    handed: AtomicBool,
}

enum SlotState {
    Queued,
    Sent,
    /// The reading was handed to this slot's thread.
    Lead,
    /// The writing was handed to this slot's thread (its command is still
    /// queued): it writes the queue.
    Write,
    /// The result, and whether the command may be sent once more on a
    /// fresh connection (its reused connection broke before any reply after
    /// it was written).
    Done(RedisResult<Vec<Value>>, bool),
    /// Its thread gave up waiting; the reply is read and dropped.
    Abandoned,
}

impl Slot {
    /// Ends the slot with `result` (unless it ended or its thread gave up)
    /// and wakes its thread, once the state's lock is let go.
    fn finish(&self, result: RedisResult<Vec<Value>>, retry: bool) {
        {
            let mut s = lock(&self.state);
            if matches!(*s, SlotState::Abandoned | SlotState::Done(..)) {
                return;
            }
            *s = SlotState::Done(result, retry);
        }
        self.thread.unpark();
    }
}

/// A result, and whether the command may be sent once more.
type Outcome = (RedisResult<Vec<Value>>, bool);

impl Shared {
    /// `connections` shared connections (made when first needed), each
    /// command waiting at most `response_timeout` for its reply; new
    /// connections are made within `connect_timeout`.
    pub(crate) fn new(
        connections: usize,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Shared {
        Shared {
            lanes: (0..connections.max(1)).map(|_| Lane::default()).collect(),
            active: AtomicUsize::new(1),
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

    fn slot(&self, bytes: Vec<u8>, replies: usize, from: Instant) -> Arc<Slot> {
        Arc::new(Slot {
            bytes,
            replies,
            deadline: AtomicU64::new(self.ns(from + self.response_timeout)),
            state: Mutex::new(SlotState::Queued),
            thread: std::thread::current(),
            link: AtomicU64::new(0),
            reused: AtomicBool::new(false),
            mark: AtomicU64::new(0),
            heard: AtomicU64::new(0),
            handed: AtomicBool::new(false),
        })
    }

    /// Shared connections open now.
    pub(crate) fn open_connections(&self) -> usize {
        self.lanes
            .iter()
            .filter(|lane| {
                let st = lock(&lane.state);
                st.live.is_some() || st.writing
            })
            .count()
    }

    /// Closes the idle shared connections (the server restarted). One with
    /// commands in flight stays with the threads that read and write it,
    /// which drop it if it broke.
    pub(crate) fn flush(&self) {
        for lane in self.lanes.iter() {
            let mut st = lock(&lane.state);
            let idle = !st.writing
                && st
                    .live
                    .as_ref()
                    .is_some_and(|live| !live.reading && live.pending.is_empty());
            if idle {
                drop(st.live.take());
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
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        op: impl FnOnce(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        let active = self
            .active
            .load(Ordering::Relaxed)
            .clamp(1, self.lanes.len());
        let lane = &self.lanes[lane_of_thread(active)];
        let mut conn = Through {
            shared: self,
            lane,
            connect,
            connect_error: None,
        };
        let result = op(&mut conn);
        // A failure to connect is kept typed for the caller: redis-rs's
        // interface carries only its own error type.
        match (result, conn.connect_error.take()) {
            (Err(_), Some(e)) => Err(e),
            (result, _) => result,
        }
    }

    /// Sends `bytes` (`replies` commands) on `lane` and waits for the
    /// replies; once more on a fresh connection when a reused one broke
    /// before any reply after the write.
    fn request(
        &self,
        lane: &Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
        bytes: &[u8],
        replies: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut lost: Option<RedisError> = None;
        loop {
            match self.exchange(lane, connect, connect_error, bytes, replies) {
                (Err(e), true) if lost.is_none() => lost = Some(e),
                // The command may have run on the lost connection: its
                // error, not "refused", which a Sentinel or Cluster source
                // reads as never sent and sends again elsewhere.
                (Err(e), _) if e.is_connection_refusal() && lost.is_some() => {
                    *connect_error = None;
                    return Err(lost.unwrap_or(e));
                }
                (result, _) => return result,
            }
        }
    }

    /// One try: writes the command (or queues it for the thread writing),
    /// then reads or waits for its replies.
    fn exchange(
        &self,
        lane: &Lane,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
        bytes: &[u8],
        replies: usize,
    ) -> Outcome {
        let sent = Instant::now();
        let mut st = lock(&lane.state);
        if st.writing || burst_coming(&st) {
            let slot = self.slot(bytes.to_vec(), replies, sent);
            st.queue.push_back(slot.clone());
            drop(st);
            return self.wait(lane, &slot, sent, connect, connect_error);
        }
        st.writing = true;
        let slot = self.slot(Vec::new(), replies, sent);
        match self.write_turn(lane, st, &slot, Some(bytes), connect, connect_error) {
            Some(reader) => self.read(lane, &slot, reader, sent, connect, connect_error),
            None => self.wait(lane, &slot, sent, connect, connect_error),
        }
    }

    /// The writing role, taken by this thread: writes `own` (the command
    /// of `slot`, unless it is queued) and everything queued meanwhile,
    /// making a connection first when the lane has none, then lets go of
    /// it, or hands it to the oldest queued command once this thread's
    /// reply is there. The reading end when this thread is to read (nobody
    /// else reads).
    fn write_turn<'a>(
        &self,
        lane: &'a Lane,
        mut st: MutexGuard<'a, LaneState>,
        slot: &Arc<Slot>,
        own: Option<&[u8]>,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
    ) -> Option<Reader> {
        let mut own = own;
        st.writer = Some(slot.clone());
        // The connection this turn made: commands written on it are not
        // retried when it breaks.
        let mut fresh = None;
        let mut bytes = Vec::new();
        loop {
            if st.live.is_none() {
                if own.is_none() && st.queue.is_empty() {
                    break;
                }
                let waiting: Vec<Arc<Slot>> = st
                    .queue
                    .iter()
                    .cloned()
                    .chain(own.map(|_| slot.clone()))
                    .collect();
                drop(st);
                let made = self.connect_for(&waiting, connect);
                st = lock(&lane.state);
                match made {
                    Ok(link) => {
                        st.made += 1;
                        fresh = Some(st.made);
                        let heard = Arc::new(AtomicU64::new(0));
                        st.live = Some(Live {
                            id: st.made,
                            reader: Some(Reader {
                                stream: link.wire.clone(),
                                heard: heard.clone(),
                                parser: link.parser,
                                partial: Vec::new(),
                                timeout: self.response_timeout,
                            }),
                            stream: link.wire,
                            reading: false,
                            pending: VecDeque::new(),
                            replies: 0,
                            heard,
                        });
                    }
                    Err(e) => {
                        let cause = connect_cause(&e);
                        let queued: Vec<Arc<Slot>> = st.queue.drain(..).collect();
                        st.writing = false;
                        st.writer = None;
                        drop(st);
                        if own.is_some() {
                            *connect_error = Some(e);
                            slot.finish(Err(cause.clone()), false);
                        }
                        for queued in queued {
                            queued.finish(Err(cause.clone()), false);
                        }
                        return None;
                    }
                }
            }
            let state = &mut *st;
            let Some(live) = state.live.as_mut() else {
                continue;
            };
            let (id, replies) = (live.id, live.replies);
            let heard = live.heard.load(Ordering::Relaxed);
            let reused = fresh != Some(id);
            let mut out = |s: &Arc<Slot>| {
                s.link.store(id, Ordering::Relaxed);
                s.reused.store(reused, Ordering::Relaxed);
                s.mark.store(replies, Ordering::Relaxed);
                s.heard.store(heard, Ordering::Relaxed);
                live.pending.push_back(s.clone());
            };
            bytes.clear();
            let mine = own.take();
            if mine.is_some() {
                *lock(&slot.state) = SlotState::Sent;
                out(slot);
            }
            // The clock is read only when there are queued commands to
            // check against their deadlines.
            let now = if state.queue.is_empty() {
                None
            } else {
                Some(Instant::now())
            };
            let mut expired = Vec::new();
            if !state.queue.is_empty() {
                bytes.extend_from_slice(mine.unwrap_or_default());
            }
            for q in state.queue.drain(..) {
                let mut s = lock(&q.state);
                if !matches!(*s, SlotState::Queued) {
                    continue;
                }
                if now.is_some_and(|now| now >= self.deadline(&q)) {
                    drop(s);
                    expired.push(q);
                    continue;
                }
                *s = SlotState::Sent;
                drop(s);
                bytes.extend_from_slice(&q.bytes);
                out(&q);
            }
            let data: &[u8] = match mine {
                Some(mine) if bytes.is_empty() => mine,
                _ => &bytes,
            };
            if data.is_empty() {
                if !expired.is_empty() {
                    drop(st);
                    for q in expired {
                        q.finish(Err(not_sent(self.response_timeout)), false);
                    }
                    st = lock(&lane.state);
                }
                break;
            }
            let stream = live.stream.clone();
            drop(st);
            for q in expired {
                q.finish(Err(not_sent(self.response_timeout)), false);
            }
            let written = stream.write_all(data);
            st = lock(&lane.state);
            if let Err(e) = written {
                drop(st);
                self.break_link(lane, id, &RedisError::from(e));
                st = lock(&lane.state);
            }
            // This thread's reply is there while others queued meanwhile:
            // the oldest of them writes them, and this one returns.
            if !st.queue.is_empty() && matches!(*lock(&slot.state), SlotState::Done(..)) {
                let next = st
                    .queue
                    .iter()
                    .find(|q| {
                        let mut s = lock(&q.state);
                        let queued = matches!(*s, SlotState::Queued);
                        if queued {
                            *s = SlotState::Write;
                        }
                        queued
                    })
                    .cloned();
                if let Some(next) = next {
                    st.writer = None;
                    drop(st);
                    next.thread.unpark();
                    return None;
                }
            }
        }
        st.writing = false;
        st.writer = None;
        let live = st.live.as_mut()?;
        if live.reading {
            return None;
        }
        let mine = slot.link.load(Ordering::Relaxed) == live.id
            && matches!(*lock(&slot.state), SlotState::Sent);
        if mine {
            live.reading = true;
            return live.reader.take();
        }
        // Written for others only (this thread's own command failed with a
        // connection that broke): the oldest of them reads.
        let next = hand_reading(live, None);
        drop(st);
        if let Some(next) = next {
            next.thread.unpark();
        }
        None
    }

    /// Waits for `slot`'s replies, or to be handed the reading, or its
    /// deadline.
    fn wait(
        &self,
        lane: &Lane,
        slot: &Arc<Slot>,
        sent: Instant,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
    ) -> Outcome {
        loop {
            let mut s = lock(&slot.state);
            match std::mem::replace(&mut *s, SlotState::Abandoned) {
                SlotState::Done(result, retry) => {
                    drop(s);
                    if slot.handed.load(Ordering::Relaxed) {
                        self.back_from_hand_out(lane, slot, connect, connect_error);
                    }
                    return (result, retry);
                }
                SlotState::Lead => {
                    *s = SlotState::Sent;
                    drop(s);
                    if let Some(reader) = take_reader(lane, slot) {
                        return self.read(lane, slot, reader, sent, connect, connect_error);
                    }
                    continue;
                }
                SlotState::Write => {
                    // Still queued: the writing turn takes it with the rest
                    // (or finds it expired).
                    *s = SlotState::Queued;
                    drop(s);
                    let st = lock(&lane.state);
                    if let Some(reader) =
                        self.write_turn(lane, st, slot, None, connect, connect_error)
                    {
                        return self.read(lane, slot, reader, sent, connect, connect_error);
                    }
                    continue;
                }
                other => *s = other,
            }
            let now = Instant::now();
            let deadline = self.deadline(slot);
            if now >= deadline {
                if matches!(*s, SlotState::Sent) {
                    *s = SlotState::Abandoned;
                    drop(s);
                    self.drop_if_silent(lane, slot, now - sent);
                    return (Err(no_reply(now - sent)), false);
                }
                // Queued: take it back under the lane's lock (lane before
                // slot, as the writer takes them), unless the writer took
                // it meanwhile.
                drop(s);
                let mut st = lock(&lane.state);
                let mut s = lock(&slot.state);
                if matches!(*s, SlotState::Queued) {
                    st.queue.retain(|q| !Arc::ptr_eq(q, slot));
                    *s = SlotState::Abandoned;
                    return (Err(not_sent(now - sent)), false);
                }
                continue;
            }
            drop(s);
            // Returns early when unparked (also by a wake-up meant for an
            // earlier wait of this thread): the state is looked at again.
            std::thread::park_timeout(deadline - now);
        }
    }

    /// The reading role, held by this thread: reads replies in order,
    /// handing each to its thread, until its own; then hands out those the
    /// parser holds already, and passes the role on.
    fn read(
        &self,
        lane: &Lane,
        slot: &Arc<Slot>,
        mut reader: Reader,
        sent: Instant,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
    ) -> Outcome {
        let id = slot.link.load(Ordering::Relaxed);
        let mut own = None;
        loop {
            let front = {
                let st = lock(&lane.state);
                match st.live.as_ref() {
                    Some(live) if live.id == id => live.pending.front().cloned(),
                    // It broke: every command awaiting a reply on it failed.
                    _ => None,
                }
            };
            let Some(front) = front else {
                break;
            };
            let buffered_only = own.is_some();
            if !buffered_only {
                let now = Instant::now();
                let deadline = self.deadline(slot);
                if now >= deadline {
                    let outcome = give_up(slot, sent);
                    self.drop_if_silent(lane, slot, now - sent);
                    self.pass_reading(lane, id, reader);
                    return outcome;
                }
                reader.bound(deadline - now, self.response_timeout);
            }
            match reader.replies(front.replies, buffered_only) {
                Ok(Some(values)) => {
                    let mut st = lock(&lane.state);
                    if let Some(live) = st.live.as_mut()
                        && live.id == id
                    {
                        live.pending.pop_front();
                        live.replies += 1;
                    }
                    if Arc::ptr_eq(&front, slot) {
                        own = Some(values);
                    } else if hand_out(&mut st, &front, values) {
                        let demand =
                            st.handed_out + st.live.as_ref().map_or(0, |l| l.pending.len());
                        drop(st);
                        front.thread.unpark();
                        if demand >= GROW_AT {
                            self.grow();
                        }
                    }
                }
                Ok(None) => break,
                // This thread's deadline came while it read: its outcome
                // is unknown; the next thread reads on.
                Err(e) if e.is_timeout() => {
                    let outcome = give_up(slot, sent);
                    self.drop_if_silent(lane, slot, sent.elapsed());
                    self.pass_reading(lane, id, reader);
                    return outcome;
                }
                Err(e) => {
                    self.break_link(lane, id, &e);
                    return match own {
                        Some(values) => (Ok(values), false),
                        None => self.wait(lane, slot, sent, connect, connect_error),
                    };
                }
            }
        }
        self.pass_reading(lane, id, reader);
        match own {
            Some(values) => (Ok(values), false),
            None => self.wait(lane, slot, sent, connect, connect_error),
        }
    }

    /// Puts one more lane in use, up to all of them (each twice as many as
    /// before): one connection's answered commands showed [`GROW_AT`]
    /// threads at once on it. Lanes are never put out of use; a lane's
    /// connection is made by the first call that goes through it.
    fn grow(&self) {
        let active = self.active.load(Ordering::Relaxed);
        let more = (active * 2).min(self.lanes.len());
        if more > active
            && self
                .active
                .compare_exchange(active, more, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            log::debug!(
                "redguard: {more} shared connections to one server (threads waiting on one: {GROW_AT} or more)"
            );
        }
    }

    /// `slot`'s thread, handed its replies, is back from its wait: the last
    /// one back writes what queued meanwhile (see
    /// [`LaneState::handed_out`]), unless a thread writes.
    fn back_from_hand_out(
        &self,
        lane: &Lane,
        slot: &Arc<Slot>,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        connect_error: &mut Option<Error>,
    ) {
        let mut st = lock(&lane.state);
        st.handed_out = st.handed_out.saturating_sub(1);
        if st.handed_out > 0 || st.writing || st.queue.is_empty() {
            return;
        }
        st.writing = true;
        // Its own reply was taken: the turn writes the queue only, and
        // hands the reading on if nobody reads.
        let reader = self.write_turn(lane, st, slot, None, connect, connect_error);
        debug_assert!(reader.is_none(), "no command of this thread is out");
    }

    /// Lets go of the reading of connection `id`: to the thread of the
    /// oldest command still waiting on it, or to nobody.
    fn pass_reading(&self, lane: &Lane, id: u64, reader: Reader) {
        let next = {
            let mut st = lock(&lane.state);
            let st = &mut *st;
            match st.live.as_mut() {
                Some(live) if live.id == id => {
                    live.reader = Some(reader);
                    live.reading = false;
                    hand_reading(live, st.writer.as_ref())
                }
                _ => None,
            }
        };
        if let Some(next) = next {
            next.thread.unpark();
        }
    }

    /// Drops connection `id` (unless it was dropped already) and fails
    /// every command awaiting a reply on it with `err`.
    fn break_link(&self, lane: &Lane, id: u64, err: &RedisError) {
        self.drop_live(lane, |live| live.id == id, err);
    }

    /// Drops `slot`'s connection when nothing at all was read on it since
    /// `slot` went out, `waited` ago (its whole response timeout): the
    /// server is frozen, or the connection dead without a word (a middlebox
    /// that forgot it, a path that lost bytes), and every later command
    /// would wait as long. A pooled connection is dropped after one timeout
    /// too. The commands in flight on it fail at once, their outcome
    /// unknown, and the next command makes a fresh connection. One that
    /// still hears replies, however late, stays.
    fn drop_if_silent(&self, lane: &Lane, slot: &Slot, waited: Duration) {
        let (id, heard) = (
            slot.link.load(Ordering::Relaxed),
            slot.heard.load(Ordering::Relaxed),
        );
        self.drop_live(
            lane,
            |live| live.id == id && live.heard.load(Ordering::Relaxed) == heard,
            &no_reply(waited),
        );
    }

    /// Drops the lane's connection when `doomed` says so, and fails every
    /// command awaiting a reply on it with `err`.
    fn drop_live(&self, lane: &Lane, doomed: impl FnOnce(&Live) -> bool, err: &RedisError) {
        let broken = {
            let mut st = lock(&lane.state);
            if st.live.as_ref().is_some_and(doomed) {
                st.live.take()
            } else {
                None
            }
        };
        let Some(live) = broken else { return };
        // The thread reading or writing it stops at once.
        live.stream.shutdown();
        let dropped = err.is_connection_dropped();
        for slot in live.pending {
            let retry = dropped
                && slot.reused.load(Ordering::Relaxed)
                && slot.mark.load(Ordering::Relaxed) == live.replies;
            slot.finish(Err(err.clone()), retry);
        }
    }

    /// A new connection for `waiting`. Connecting has its own timeout, as
    /// for a pooled connection: their deadlines move on meanwhile, and
    /// count the response timeout from when the connection is there.
    fn connect_for(
        &self,
        waiting: &[Arc<Slot>],
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
    ) -> Result<Link> {
        let limit = self.ns(Instant::now() + self.connect_timeout + self.response_timeout);
        for slot in waiting {
            slot.deadline.fetch_max(limit, Ordering::AcqRel);
        }
        let made = connect(None);
        let after = self.ns(Instant::now() + self.response_timeout);
        for slot in waiting {
            slot.deadline.store(after, Ordering::Release);
        }
        made
    }
}

/// Whether a command that finds nobody writing is to queue for the threads
/// being handed their replies (see [`LaneState::handed_out`]). Bounded:
/// more are handed replies only for commands already written, so the
/// count falls to 0 soon, and the last thread back writes the queue.
fn burst_coming(st: &LaneState) -> bool {
    st.handed_out > 0
        && st
            .live
            .as_ref()
            .is_some_and(|live| live.pending.len() >= BURST_IN_FLIGHT)
}

/// Ends `slot` with `values`, read by this thread, unless it ended or its
/// thread gave up, and counts it in [`LaneState::handed_out`] until its
/// thread is back from its wait; true when that thread is to be unparked
/// (once the lane's lock is let go).
fn hand_out(st: &mut LaneState, slot: &Slot, values: Vec<Value>) -> bool {
    let mut s = lock(&slot.state);
    if matches!(*s, SlotState::Abandoned | SlotState::Done(..)) {
        return false;
    }
    st.handed_out += 1;
    // Set before `Done` shows, under the slot's lock: a thread that sees
    // its reply also sees that it is to report back (`Slot::finish` would
    // let it see `Done` first).
    slot.handed.store(true, Ordering::Relaxed);
    *s = SlotState::Done(Ok(values), false);
    true
}

/// Hands the reading of `live` to the oldest command still waiting on it
/// (its thread is to be unparked once the lane's lock is let go), but not
/// to `writer`'s thread, busy writing: it reads when it is done, if nobody
/// does by then.
fn hand_reading(live: &mut Live, writer: Option<&Arc<Slot>>) -> Option<Arc<Slot>> {
    let next = live
        .pending
        .iter()
        .filter(|slot| writer.is_none_or(|w| !Arc::ptr_eq(w, slot)))
        .find(|slot| {
            let mut s = lock(&slot.state);
            let waiting = matches!(*s, SlotState::Sent);
            if waiting {
                *s = SlotState::Lead;
            }
            waiting
        })
        .cloned();
    live.reading = next.is_some();
    next
}

/// The reading end of `slot`'s connection, handed to its thread; `None`
/// when that connection broke meanwhile.
fn take_reader(lane: &Lane, slot: &Slot) -> Option<Reader> {
    let mut st = lock(&lane.state);
    let live = st.live.as_mut()?;
    if live.id != slot.link.load(Ordering::Relaxed) || !live.reading {
        return None;
    }
    live.reader.take()
}

/// `slot`'s thread stops waiting at its deadline: its reply, if it comes,
/// is dropped. A result that came meanwhile is returned instead. Before
/// the reading is passed on, so that it does not go to this thread.
fn give_up(slot: &Slot, sent: Instant) -> Outcome {
    let mut s = lock(&slot.state);
    match std::mem::replace(&mut *s, SlotState::Abandoned) {
        SlotState::Done(result, retry) => (result, retry),
        _ => (Err(no_reply(sent.elapsed())), false),
    }
}

/// A connection whose commands go through a lane: what a caller's
/// operation sees, each of its calls one request.
struct Through<'a> {
    shared: &'a Shared,
    lane: &'a Lane,
    connect: &'a dyn Fn(Option<Duration>) -> Result<Link>,
    connect_error: Option<Error>,
}

impl Through<'_> {
    fn request(&mut self, cmd: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        let result = self.shared.request(
            self.lane,
            self.connect,
            &mut self.connect_error,
            cmd,
            replies,
        );
        UNSENT.set(result.as_ref().is_err_and(is_unsent));
        result
    }
}

thread_local! {
    /// Whether this thread's last request on a shared connection failed
    /// without being written (see [`unsent`]).
    static UNSENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread's last request on a shared connection since
/// [`forget_unsent`] failed without a byte of it written: it was still
/// queued at its deadline, or its connection could not be made. Nothing of
/// it ran, so nothing is to be undone.
pub(crate) fn unsent() -> bool {
    UNSENT.get()
}

/// Clears what [`unsent`] says, before a call that may not go through a
/// shared connection at all (a Cluster call sent on after `ASK`).
pub(crate) fn forget_unsent() {
    UNSENT.set(false);
}

/// What the errors of commands never written carry (see [`not_sent`],
/// [`connect_cause`]).
#[derive(Debug)]
struct Unsent(String);

impl std::fmt::Display for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsent {}

fn is_unsent(e: &RedisError) -> bool {
    type Cause = Arc<dyn std::error::Error + Send + Sync>;
    let Some(source) = std::error::Error::source(e) else {
        return false;
    };
    let io = match source.downcast_ref::<Cause>() {
        Some(cause) => cause.downcast_ref::<io::Error>(),
        None => source.downcast_ref::<io::Error>(),
    };
    io.and_then(io::Error::get_ref)
        .is_some_and(|inner| inner.is::<Unsent>())
}

impl redis::ConnectionLike for Through<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut replies = self.request(cmd, 1)?;
        replies.pop().unwrap_or(Value::Nil).extract_error()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let replies = self.request(cmd, offset + count)?;
        keep_after(replies.into_iter().map(Ok), offset, count, true)
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Each thread keeps to one lane (threads are spread over the lanes in the
/// order they first send), so that a thread's commands stay in order.
fn lane_of_thread(lanes: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i) % lanes
}

/// The error of a command that waited for its lane past its deadline and
/// was taken back unsent: nothing ran.
fn not_sent(waited: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        Unsent(format!(
            "the command was still queued for its shared connection after {} and was not sent",
            Human(waited)
        )),
    ))
}

/// The error of a command sent, whose reply did not come by its deadline:
/// its outcome is unknown.
fn no_reply(waited: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "sent on a shared connection, unanswered after {}",
            Human(waited)
        ),
    ))
}

/// A failure to connect in redis-rs's terms, for the commands that were to
/// use the connection (their callers get the typed error).
fn connect_cause(e: &Error) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        Unsent(e.chain()),
    ))
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "the pauses are the scenario: threads sending one after another while a reply is late"
)]
mod tests {
    //! Shared lanes against loopback servers that answer late, in halves,
    //! or cut the connection in the middle of the commands in flight.
    //! Every caller gets its own reply or an error, never another's; each
    //! returns by its own deadline.

    use super::*;
    use crate::mock_server::Act;
    use std::net::{SocketAddr, TcpListener, TcpStream};

    /// The response timeout of the lanes in these scenarios.
    const RESPONSE: Duration = Duration::from_millis(150);

    /// [`crate::mock_server::echo_server`], which a test cannot run without.
    fn echo_server(
        connections: usize,
        plan: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
    ) -> SocketAddr {
        crate::mock_server::echo_server(connections, plan).expect("a loopback port")
    }

    /// Connects to `addr` with `response` as read and write timeout.
    fn connector(
        addr: SocketAddr,
        response: Duration,
    ) -> impl Fn(Option<Duration>) -> Result<Link> {
        move |_| {
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                .map_err(|e| Error::redis(RedisError::from(e)))?;
            stream
                .set_nodelay(true)
                .map_err(|e| Error::redis(RedisError::from(e)))?;
            Link::new(Wire::Tcp(stream), response).map_err(|e| Error::redis(RedisError::from(e)))
        }
    }

    /// `ECHO token` through `shared`: the reply or the error.
    fn echo(
        shared: &Shared,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        token: &str,
    ) -> Result<String> {
        shared.with_conn(connect, |conn| {
            redis::cmd("ECHO")
                .arg(token)
                .query::<String>(conn)
                .map_err(Error::redis)
        })
    }

    /// `calls` calls of `ECHO <tag>-<i>` through `shared`, one after the
    /// other: those that did not get their own token back.
    fn echo_calls(
        shared: &Shared,
        connect: &dyn Fn(Option<Duration>) -> Result<Link>,
        tag: &str,
        calls: usize,
    ) -> Vec<Result<(String, String)>> {
        (0..calls)
            .map(|i| {
                let token = format!("{tag}-{i}");
                echo(shared, connect, &token).map(|reply| (token, reply))
            })
            .filter(|r| !matches!(r, Ok((token, reply)) if token == reply))
            .collect()
    }

    /// `threads` threads that start together and make `calls` calls each
    /// through `shared` (tokens `<tag>-t<t>-<i>`); fails the test naming
    /// every call that did not get its own reply.
    fn each_gets_its_own(
        shared: &Arc<Shared>,
        addr: SocketAddr,
        response: Duration,
        threads: u32,
        calls: usize,
        tag: &str,
    ) {
        let start = Arc::new(std::sync::Barrier::new(threads as usize));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (shared, start, tag) = (shared.clone(), start.clone(), format!("{tag}-t{t}"));
                std::thread::spawn(move || {
                    let connect = connector(addr, response);
                    start.wait();
                    echo_calls(&shared, &connect, &tag, calls)
                })
            })
            .collect();
        for h in handles {
            let wrong = h.join().unwrap();
            assert!(wrong.is_empty(), "{tag}: {wrong:?}");
        }
    }

    /// Thread `t` of `threads` sends `ECHO t<t>` `t` × `stagger` after the
    /// start, on one shared connection; each thread's result and how long
    /// its call took.
    fn staggered(
        addr: SocketAddr,
        response: Duration,
        threads: u32,
        stagger: Duration,
    ) -> Vec<(Duration, Result<String>)> {
        let shared = Arc::new(Shared::new(1, response, Duration::from_secs(1)));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let connect = connector(addr, response);
                    std::thread::sleep(stagger * t);
                    let began = Instant::now();
                    let result = echo(&shared, &connect, &format!("t{t}"));
                    (began.elapsed(), result)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    fn echo_shared(
        shared: &Shared,
        addr: SocketAddr,
        response: Duration,
        token: &str,
    ) -> Result<String> {
        echo(shared, &connector(addr, response), token)
    }

    /// 32 threads, 300 calls each, on one connection of a server that
    /// answers everything: the writing and reading change hands all the
    /// time, and every call gets its own reply; a hand-over that left
    /// replies unread would fail calls with a timeout.
    #[test]
    fn under_load_every_call_gets_its_own_reply() {
        const RESPONSE: Duration = Duration::from_secs(3);
        let addr = echo_server(1, |_, _| Act::Answer);
        let shared = Arc::new(Shared::new(1, RESPONSE, Duration::from_secs(1)));
        each_gets_its_own(&shared, addr, RESPONSE, 32, 300, "load");
    }

    /// Rounds of 8 threads that each make two calls together and stop: a
    /// second call made while the others are being handed their first
    /// replies queues for them (the server has commands in hand), and the
    /// last thread back writes it, even when that thread has no call of
    /// its own left to make. A queue left for whoever writes next would
    /// wait, in some round, for a thread that never comes, and its call
    /// would fail with "not sent".
    #[test]
    fn calls_queued_for_a_burst_go_out_when_the_last_thread_is_back() {
        const RESPONSE: Duration = Duration::from_secs(2);
        let addr = echo_server(1, |_, _| Act::Answer);
        let shared = Arc::new(Shared::new(1, RESPONSE, Duration::from_secs(1)));
        for round in 0..150 {
            each_gets_its_own(&shared, addr, RESPONSE, 8, 2, &format!("round {round}"));
        }
    }

    /// 64 threads calling at once on a server that answers put more
    /// lanes in use, each with a connection of its own; 8 threads stay on
    /// one. Every call gets its own reply either way.
    #[test]
    fn many_threads_open_more_shared_connections_and_a_few_do_not() {
        const RESPONSE: Duration = Duration::from_secs(3);
        let run = |threads: u32| {
            let addr = echo_server(4, |_, _| Act::Answer);
            let shared = Arc::new(Shared::new(4, RESPONSE, Duration::from_secs(1)));
            each_gets_its_own(&shared, addr, RESPONSE, threads, 200, "many");
            shared.open_connections()
        };
        assert!(run(64) >= 2, "64 threads stayed on one connection");
        assert_eq!(run(8), 1, "8 threads opened more than one connection");
    }

    /// A writer whose reply was read (by another thread) while its write
    /// was blocked on a full socket, with a command queued meanwhile,
    /// hands the writing to that command's thread and returns, instead of
    /// writing on for others.
    #[test]
    fn a_writer_whose_reply_came_hands_the_writing_to_the_oldest_queued() {
        use std::io::Read;
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let _ = gate.recv();
            let mut buf = vec![0u8; 1 << 16];
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
        });
        let shared = Arc::new(Shared::new(
            1,
            Duration::from_secs(5),
            Duration::from_secs(1),
        ));
        let mine = shared.slot(Vec::new(), 1, Instant::now());
        let writer = {
            let (shared, mine) = (shared.clone(), mine.clone());
            std::thread::spawn(move || {
                let connect = connector(addr, Duration::from_secs(5));
                let lane = &shared.lanes[0];
                let mut st = lock(&lane.state);
                st.writing = true;
                // Far more than the socket buffers hold: the write blocks
                // until the server reads.
                let big = vec![b'x'; 64 << 20];
                shared.write_turn(lane, st, &mine, Some(&big), &connect, &mut None)
            })
        };
        let lane = &shared.lanes[0];
        let until = Instant::now() + Duration::from_secs(5);
        while lock(&lane.state).live.is_none() {
            assert!(Instant::now() < until, "the writer did not connect");
            std::thread::park_timeout(Duration::from_millis(5));
        }
        let queued = shared.slot(b"*1\r\n$4\r\nPING\r\n".to_vec(), 1, Instant::now());
        lock(&lane.state).queue.push_back(queued.clone());
        mine.finish(Ok(vec![Value::Okay]), false);
        go.send(()).unwrap();
        assert!(writer.join().unwrap().is_none());
        assert!(matches!(*lock(&queued.state), SlotState::Write));
        let st = lock(&lane.state);
        assert!(st.writing && st.writer.is_none() && st.queue.len() == 1);
    }

    /// The reading goes to the oldest command still waiting, skipping the
    /// writer's own (its thread is busy writing) and those given up.
    #[test]
    fn the_reading_is_handed_to_the_oldest_waiting_command_but_not_the_writer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let shared = Shared::new(1, Duration::from_secs(1), Duration::from_secs(1));
        let slots: Vec<_> = (0..4)
            .map(|_| shared.slot(Vec::new(), 1, Instant::now()))
            .collect();
        *lock(&slots[0].state) = SlotState::Abandoned;
        for slot in &slots[1..] {
            *lock(&slot.state) = SlotState::Sent;
        }
        let mut live = Live {
            id: 1,
            stream: Arc::new(Wire::Tcp(stream)),
            reader: None,
            reading: false,
            pending: slots.iter().cloned().collect(),
            replies: 0,
            heard: Arc::default(),
        };
        let next = hand_reading(&mut live, Some(&slots[1])).unwrap();
        assert!(Arc::ptr_eq(&next, &slots[2]));
        assert!(live.reading);
        assert!(matches!(*lock(&slots[1].state), SlotState::Sent));
        assert!(matches!(*lock(&slots[2].state), SlotState::Lead));
        assert!(matches!(*lock(&slots[3].state), SlotState::Sent));
        // Nobody else waits: nobody reads until the writer is done.
        *lock(&slots[2].state) = SlotState::Abandoned;
        *lock(&slots[3].state) = SlotState::Abandoned;
        assert!(hand_reading(&mut live, Some(&slots[1])).is_none());
        assert!(!live.reading);
    }

    /// Eight commands in flight on one connection (the first one's reply
    /// is late, the seven others are written meanwhile); the server
    /// answers four and cuts the connection at the fifth. Exactly the four
    /// answered calls succeed, each with its own reply; the four in flight
    /// when it broke fail (replies came after they were written: they are
    /// not sent again, though a second connection would answer them), and
    /// none waits for its deadline.
    #[test]
    fn a_connection_cut_in_the_middle_of_eight_fails_exactly_the_four_in_flight() {
        const RESPONSE: Duration = Duration::from_secs(2);
        let addr = echo_server(2, |c, i| match (c, i) {
            (0, 0) => Act::Late(Duration::from_millis(300)),
            (0, 4) => Act::Cut,
            _ => Act::Answer,
        });
        let started = Instant::now();
        let results = staggered(addr, RESPONSE, 8, Duration::from_millis(20));
        assert!(started.elapsed() < RESPONSE, "{:?}", started.elapsed());
        let ok: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
        assert_eq!(ok.len(), 4, "{results:?}");
        assert_eq!(results[0].1.as_deref().ok(), Some("t0"), "{results:?}");
        for (t, (_, result)) in results.iter().enumerate() {
            match result {
                Ok(reply) => assert_eq!(reply, &format!("t{t}")),
                Err(e) => {
                    let refused = e
                        .redis_error()
                        .is_some_and(RedisError::is_connection_refusal);
                    assert!(!refused, "thread {t}: reported as refused: {e}");
                    assert!(e.is_connection(), "thread {t}: {e}");
                }
            }
        }
    }

    /// Eight commands in flight; the server answers seven and the last
    /// one too late. Only its caller fails, with a timeout (outcome
    /// unknown: it was written), at its own deadline; the late reply is
    /// read and dropped when it comes, and the next call on the same
    /// connection gets its own reply.
    #[test]
    fn one_late_reply_fails_only_its_caller_and_is_dropped_when_it_comes() {
        const RESPONSE: Duration = Duration::from_millis(400);
        const SLACK: Duration = Duration::from_millis(300);
        let addr = echo_server(1, |_, i| match i {
            0 => Act::Late(Duration::from_millis(200)),
            7 => Act::Late(RESPONSE + RESPONSE / 4),
            _ => Act::Answer,
        });
        let shared = Arc::new(Shared::new(1, RESPONSE, Duration::from_secs(1)));
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let connect = connector(addr, RESPONSE);
                    std::thread::sleep(Duration::from_millis(15) * t);
                    let began = Instant::now();
                    let result = echo(&shared, &connect, &format!("t{t}"));
                    (began.elapsed(), result)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for (t, (took, result)) in results.iter().enumerate().take(7) {
            assert_eq!(
                result.as_deref().ok(),
                Some(&*format!("t{t}")),
                "thread {t}"
            );
            assert!(*took < RESPONSE, "thread {t} took {took:?}");
        }
        let (took, last) = &results[7];
        let e = last.as_ref().expect_err("its reply came too late");
        assert!(
            matches!(e, Error::Timeout { .. }) && !e.to_string().contains("was not sent"),
            "{e}"
        );
        assert!(*took >= RESPONSE && *took <= RESPONSE + SLACK, "{took:?}");
        // The same connection: the late reply comes first, then this one.
        let connect = connector(addr, RESPONSE);
        assert_eq!(echo(&shared, &connect, "after").unwrap(), "after");
    }

    /// A frozen server (it answers the first command late, then nothing):
    /// the followers' commands are written while the first waits, and
    /// each follower returns by its own deadline with a timeout, not when
    /// the calls ahead of it give up.
    #[test]
    fn on_a_frozen_server_each_caller_returns_by_its_own_deadline() {
        const RESPONSE: Duration = Duration::from_millis(800);
        const SLACK: Duration = Duration::from_millis(300);
        let addr = echo_server(16, |_, i| match i {
            0 => Act::Late(Duration::from_millis(700)),
            _ => Act::Late(Duration::from_secs(10)),
        });
        let results = staggered(addr, RESPONSE, 9, Duration::from_millis(25));
        let (took, first) = &results[0];
        assert_eq!(first.as_deref().ok(), Some("t0"), "{first:?}");
        assert!(*took <= Duration::from_millis(700) + SLACK, "{took:?}");
        for (t, (took, result)) in results.iter().enumerate().skip(1) {
            let e = result
                .as_ref()
                .expect_err("a frozen server answers nothing");
            assert!(matches!(e, Error::Timeout { .. }), "thread {t}: {e}");
            assert!(
                *took <= RESPONSE + SLACK,
                "thread {t} took {took:?}, past its own deadline"
            );
        }
    }

    /// Eight threads send 40 `ECHO`s each, one unique token per call, on
    /// one connection (response timeout [`RESPONSE`]). The server
    /// answers one command in 9 late (past the deadline of every command
    /// queued behind it), sends half of another reply and the rest too
    /// late, and cuts one connection in 3 at its fifth command. No call
    /// ever gets another call's token; some get their own, some fail.
    #[test]
    fn each_caller_gets_its_own_reply_or_an_error() {
        let lane = Shared::new(1, RESPONSE, Duration::from_secs(1));
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
                        match echo_shared(&lane, addr, RESPONSE, &token) {
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

    /// A command written on a reused shared connection whose
    /// server then drops it unanswered may have run: its caller is not told
    /// "refused" (which a Sentinel or Cluster source reads as never sent,
    /// and sends again elsewhere) when the reconnect is refused.
    #[test]
    fn a_command_lost_with_a_reused_connection_is_not_reported_refused() {
        let lane = Shared::new(1, RESPONSE, Duration::from_secs(1));
        // One connection: the first command is answered, the second cut;
        // then the port is closed.
        let addr = echo_server(1, |_, i| if i == 0 { Act::Answer } else { Act::Cut });
        assert_eq!(echo_shared(&lane, addr, RESPONSE, "warm").unwrap(), "warm");
        let err = echo_shared(&lane, addr, RESPONSE, "lost").unwrap_err();
        let refused = err
            .redis_error()
            .is_some_and(RedisError::is_connection_refusal);
        assert!(!refused, "reported as refused: {err}");
        assert!(err.is_connection(), "{err}");
    }

    /// A reused connection that the server dropped (it restarted) before
    /// any reply to the command written on it: the command goes once more
    /// on a fresh connection, and succeeds there.
    #[test]
    fn a_reused_connection_found_dead_is_tried_once_more_on_a_fresh_one() {
        const RESPONSE: Duration = Duration::from_millis(300);
        let addr = echo_server(2, |c, i| match (c, i) {
            (0, 1) => Act::Cut,
            _ => Act::Answer,
        });
        let shared = Shared::new(1, RESPONSE, Duration::from_secs(1));
        let connect = connector(addr, RESPONSE);
        assert_eq!(echo(&shared, &connect, "warm").unwrap(), "warm");
        assert_eq!(echo(&shared, &connect, "again").unwrap(), "again");
    }

    /// A connection on which nothing at all came back for a whole response
    /// timeout is dropped, as a pooled one is: the next call makes a fresh
    /// connection and gets its reply there, instead of waiting behind the
    /// silence (a frozen server, or a connection a middlebox forgot).
    #[test]
    fn a_connection_silent_for_a_whole_timeout_is_dropped() {
        const RESPONSE: Duration = Duration::from_millis(300);
        let addr = echo_server(2, |c, _| {
            if c == 0 {
                Act::Late(Duration::from_secs(3))
            } else {
                Act::Answer
            }
        });
        let shared = Shared::new(1, RESPONSE, Duration::from_secs(1));
        let connect = connector(addr, RESPONSE);
        let e = echo(&shared, &connect, "unheard").unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert_eq!(echo(&shared, &connect, "next").unwrap(), "next");
    }

    /// A command whose connection could not be made says it was never
    /// written ([`unsent`]: nothing to undo); one written whose reply is
    /// late does not (its outcome is unknown).
    #[test]
    fn unsent_tells_commands_never_written_from_those_written() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let shared = Shared::new(1, RESPONSE, Duration::from_secs(1));
        assert!(echo(&shared, &connector(closed, RESPONSE), "refused").is_err());
        assert!(unsent());
        let addr = echo_server(1, |_, _| Act::Late(RESPONSE * 2));
        let shared = Shared::new(1, RESPONSE, Duration::from_secs(1));
        assert!(echo(&shared, &connector(addr, RESPONSE), "late").is_err());
        assert!(!unsent());
    }

    /// The parser keeps a reply that came in halves across a read timeout
    /// and across readers: a thread that stops reading at its deadline
    /// leaves the half it read to the next reader.
    #[test]
    fn a_reply_split_across_readers_is_read_whole() {
        const RESPONSE: Duration = Duration::from_millis(300);
        let addr = echo_server(1, |_, i| match i {
            0 => Act::Split(Duration::from_millis(400)),
            _ => Act::Answer,
        });
        let results = staggered(addr, RESPONSE, 2, Duration::from_millis(200));
        let e = results[0]
            .1
            .as_ref()
            .expect_err("half a reply by its deadline");
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert_eq!(results[1].1.as_deref().ok(), Some("t1"), "{results:?}");
    }
}
