//! Pub/sub on a Redis Cluster: one connection per master, each listening
//! to the channels whose hash slot that master serves, on both kinds of
//! pub/sub at once.
//!
//! * Redisson since 3.2x publishes its unlock messages with `SPUBLISH` on a
//!   Redis 7 Cluster and waits with `SSUBSCRIBE`; older Redisson (and its
//!   ports) use classic `PUBLISH`/`SUBSCRIBE`, which a cluster broadcasts
//!   to every node. redguard's scripts publish on both, and its waiters
//!   listen to both: `SUBSCRIBE` and `SSUBSCRIBE` of a channel go on the one
//!   connection to the channel's master, and the channel counts as
//!   subscribed once both are confirmed. So a client has at most one
//!   pub/sub connection per master.
//! * redguard's own unlock arrives twice, as `message` then `smessage`,
//!   back to back on the same connection (one script sends both): the
//!   second of such a pair is dropped, so an unlock wakes one waiter, as on
//!   a single server.
//! * A router thread ("redguard-subscriber") takes the subscriber's control
//!   messages and hands each channel to its master's thread
//!   ("redguard-subscriber-node"), started on first use. When a slot moves
//!   (the node ends the shard subscription with an unasked `sunsubscribe`,
//!   or refuses it with `MOVED`) or a node's connection breaks, the slot map
//!   is asked for again and the channels follow their slots to their new
//!   masters; their waiters are woken to retry meanwhile, as messages may
//!   have been missed. A broken connection to one node leaves the others
//!   alone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use redis::Value;

use super::{Control, Event, MAX_BACKOFF, Shared, TICK};
use crate::connection::{NodeId, Source};

/// Work for one node's thread.
enum NodeControl {
    Subscribe(Vec<u8>),
    Unsubscribe(Vec<u8>),
    Stop,
}

/// What a node's thread tells the router: these channels are no longer
/// served there (their slot moved, or the node is unreachable).
struct Moved {
    node: NodeId,
    channels: Vec<Vec<u8>>,
}

struct NodeThread {
    tx: Sender<NodeControl>,
}

/// The router: runs until the subscriber shuts down or is dropped.
pub(super) fn route(
    shared: Arc<Shared>,
    source: Arc<Source>,
    control: Receiver<Control>,
    response_timeout: Duration,
) {
    let (moved_tx, moved_rx) = crossbeam_channel::unbounded::<Moved>();
    let mut nodes: HashMap<NodeId, NodeThread> = HashMap::new();
    let mut routes: HashMap<Vec<u8>, NodeId> = HashMap::new();
    let Some(cluster) = source.cluster() else {
        return;
    };
    let send = |nodes: &mut HashMap<NodeId, NodeThread>, node: NodeId, msg: NodeControl| {
        let thread = nodes.entry(node).or_insert_with(|| {
            let (tx, rx) = crossbeam_channel::unbounded();
            let worker = NodeWorker {
                node,
                shared: shared.clone(),
                source: source.clone(),
                control: rx,
                moved: moved_tx.clone(),
                response_timeout,
            };
            let spawned = std::thread::Builder::new()
                .name("redguard-subscriber-node".into())
                .spawn(move || worker.run());
            if let Err(e) = spawned {
                log::error!("redguard subscriber: cannot start a node thread: {e}");
            }
            NodeThread { tx }
        });
        let _ = thread.tx.send(msg);
    };
    let node_for = |channel: &[u8]| {
        if cluster.masters().is_empty() {
            cluster.reroute();
        }
        cluster.node_of(channel)
    };
    loop {
        crossbeam_channel::select! {
            recv(control) -> msg => match msg {
                Ok(Control::Subscribe(channel)) => {
                    if !shared.registry().is_wanted(&channel) || routes.contains_key(&channel) {
                        // Already routed: its node confirms it (or did).
                        if routes.contains_key(&channel) {
                            let node = routes[&channel];
                            send(&mut nodes, node, NodeControl::Subscribe(channel));
                        }
                        continue;
                    }
                    let node = node_for(&channel);
                    routes.insert(channel.clone(), node);
                    send(&mut nodes, node, NodeControl::Subscribe(channel));
                }
                Ok(Control::Unsubscribe(channel)) => {
                    if shared.registry().is_wanted(&channel) {
                        continue;
                    }
                    if let Some(node) = routes.remove(&channel) {
                        send(&mut nodes, node, NodeControl::Unsubscribe(channel));
                    }
                }
                Ok(Control::Shutdown) | Err(_) => break,
            },
            recv(moved_rx) -> msg => {
                let Ok(Moved { node: from, channels }) = msg else { continue };
                cluster.reroute();
                for channel in channels {
                    if routes.get(&channel) != Some(&from) {
                        continue;
                    }
                    if !shared.registry().is_wanted(&channel) {
                        routes.remove(&channel);
                        continue;
                    }
                    let node = cluster.node_of(&channel);
                    routes.insert(channel.clone(), node);
                    if node != from {
                        send(&mut nodes, from, NodeControl::Unsubscribe(channel.clone()));
                    }
                    send(&mut nodes, node, NodeControl::Subscribe(channel));
                }
            },
        }
    }
    for thread in nodes.values() {
        let _ = thread.tx.send(NodeControl::Stop);
    }
}

/// One master's pub/sub connection and the channels it listens to.
struct NodeWorker {
    node: NodeId,
    shared: Arc<Shared>,
    source: Arc<Source>,
    control: Receiver<NodeControl>,
    moved: Sender<Moved>,
    response_timeout: Duration,
}

/// How a node's connection ended.
enum Exit {
    Stop,
    Reconnect,
}

/// The channels of one connection: wanted, and awaiting confirmations.
#[derive(Default)]
struct Channels {
    wanted: HashSet<Vec<u8>>,
    /// Confirmations still due per channel (2: `subscribe` and
    /// `ssubscribe`), and since when.
    pending: HashMap<Vec<u8>, (u8, Instant)>,
    /// `SUNSUBSCRIBE`s sent and not yet answered, per channel: any other
    /// `sunsubscribe` is the node's own (the slot moved).
    leaving: HashMap<Vec<u8>, u32>,
}

impl NodeWorker {
    fn run(self) {
        let mut channels = Channels::default();
        let mut backoff = Duration::from_millis(10);
        let mut failures = 0u32;
        loop {
            if channels.wanted.is_empty() {
                match self.control.recv() {
                    Ok(NodeControl::Subscribe(c)) => {
                        channels.wanted.insert(c);
                    }
                    Ok(NodeControl::Unsubscribe(_)) => {}
                    Ok(NodeControl::Stop) | Err(_) => return,
                }
                continue;
            }
            let opened = match self.source.cluster() {
                Some(cluster) => cluster.pubsub_connection(self.node),
                None => self.source.node_connection(self.node),
            };
            let mut conn = match opened {
                Ok(conn) => conn,
                Err(e) => {
                    failures += 1;
                    log::debug!(
                        "redguard subscriber: node {} unreachable: {e}; retrying in {backoff:?}",
                        self.node
                    );
                    // The node may be gone for good (failed over): let the
                    // router ask where its channels live now.
                    if failures >= 2 {
                        self.hand_back(&mut channels);
                    }
                    if self.pause_or_stop(backoff, &mut channels) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            failures = 0;
            self.shared.connections.fetch_add(1, Ordering::Relaxed);
            let exit = self.serve(&mut conn, &mut channels, &mut backoff);
            self.shared.connections.fetch_sub(1, Ordering::Relaxed);
            drop(conn);
            match exit {
                Exit::Stop => return,
                Exit::Reconnect => {
                    crate::watchdog::suspect(&self.source);
                    let mut registry = self.shared.registry();
                    for c in &channels.wanted {
                        registry.unconfirm(c);
                        registry.wake_all(c, Event::Reconnected);
                    }
                    drop(registry);
                    if self.pause_or_stop(backoff, &mut channels) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Gives every channel back to the router (the node is unreachable).
    fn hand_back(&self, channels: &mut Channels) {
        let handed: Vec<Vec<u8>> = channels.wanted.drain().collect();
        channels.pending.clear();
        if !handed.is_empty() {
            let mut registry = self.shared.registry();
            for c in &handed {
                registry.wake_all(c, Event::Reconnected);
            }
            drop(registry);
            let _ = self.moved.send(Moved {
                node: self.node,
                channels: handed,
            });
        }
    }

    /// Waits `pause`, taking control messages meanwhile; `true` to stop.
    fn pause_or_stop(&self, pause: Duration, channels: &mut Channels) -> bool {
        let deadline = Instant::now() + pause;
        loop {
            match self.control.recv_deadline(deadline) {
                Ok(NodeControl::Stop) | Err(RecvTimeoutError::Disconnected) => return true,
                Ok(NodeControl::Subscribe(c)) => {
                    channels.wanted.insert(c);
                }
                Ok(NodeControl::Unsubscribe(c)) => {
                    channels.wanted.remove(&c);
                }
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    fn serve(
        &self,
        conn: &mut redis::Connection,
        channels: &mut Channels,
        backoff: &mut Duration,
    ) -> Exit {
        channels.pending.clear();
        channels.leaving.clear();
        let all: Vec<Vec<u8>> = channels.wanted.iter().cloned().collect();
        for channel in all {
            if subscribe(conn, &channel, self.response_timeout).is_err() {
                return Exit::Reconnect;
            }
            channels.pending.insert(channel, (2, Instant::now()));
        }
        // The previous message, to drop the `smessage` twin of a `message`.
        let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut healthy_since = None;
        loop {
            loop {
                // Nothing to listen to: wait for work, keeping the
                // connection (its replies are read once there is work).
                let msg = if channels.wanted.is_empty() {
                    match self.control.recv() {
                        Ok(msg) => msg,
                        Err(_) => return Exit::Stop,
                    }
                } else {
                    match self.control.try_recv() {
                        Ok(msg) => msg,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => return Exit::Stop,
                    }
                };
                match msg {
                    NodeControl::Stop => return Exit::Stop,
                    NodeControl::Subscribe(channel) => {
                        if channels.wanted.contains(&channel) {
                            if !channels.pending.contains_key(&channel) {
                                self.shared.registry().confirm(&channel);
                            }
                            continue;
                        }
                        if subscribe(conn, &channel, self.response_timeout).is_err() {
                            return Exit::Reconnect;
                        }
                        channels.wanted.insert(channel.clone());
                        channels.pending.insert(channel, (2, Instant::now()));
                    }
                    NodeControl::Unsubscribe(channel) => {
                        if channels.wanted.remove(&channel) {
                            channels.pending.remove(&channel);
                            if unsubscribe(conn, &channel, self.response_timeout).is_err() {
                                return Exit::Reconnect;
                            }
                            *channels.leaving.entry(channel).or_default() += 1;
                        }
                    }
                }
            }
            // A subscription never confirmed was refused (`MOVED`: error
            // replies are not pushes, and may be lost to an earlier read
            // that timed out): its slot lives elsewhere now.
            let refused: Vec<Vec<u8>> = channels
                .pending
                .iter()
                .filter(|(_, (_, since))| since.elapsed() > self.response_timeout)
                .map(|(c, _)| c.clone())
                .collect();
            if !refused.is_empty() && self.refused(conn, channels, refused).is_err() {
                return Exit::Reconnect;
            }
            let _ = conn.set_read_timeout(Some(TICK));
            let frame = match conn.recv_response() {
                Ok(frame) => frame,
                Err(e) if e.is_timeout() => continue,
                Err(e) => {
                    log::debug!(
                        "redguard subscriber: connection to node {} lost: {e}",
                        self.node
                    );
                    return Exit::Reconnect;
                }
            };
            if healthy_since.is_none() {
                healthy_since = Some(Instant::now());
                *backoff = Duration::from_millis(10);
            }
            match parse(&frame) {
                Frame::Message {
                    sharded,
                    channel,
                    payload,
                } => {
                    let twin = sharded
                        && last
                            .as_ref()
                            .is_some_and(|(c, p)| c == &channel && p == &payload);
                    last = (!sharded).then(|| (channel.clone(), payload.clone()));
                    if twin {
                        continue;
                    }
                    let mut registry = self.shared.registry();
                    if payload == crate::keys::UNLOCK_MESSAGE && !registry.wakes_all(&channel) {
                        registry.wake_one(&channel);
                    } else {
                        registry.wake_all(&channel, Event::Unlocked);
                    }
                }
                Frame::Subscribed(channel) => {
                    last = None;
                    if let Some((due, _)) = channels.pending.get_mut(&channel) {
                        *due -= 1;
                        if *due == 0 {
                            channels.pending.remove(&channel);
                            self.shared.registry().confirm(&channel);
                        }
                    }
                }
                Frame::ShardUnsubscribed(channel) => {
                    last = None;
                    if let Some(asked) = channels.leaving.get_mut(&channel) {
                        *asked -= 1;
                        if *asked == 0 {
                            channels.leaving.remove(&channel);
                        }
                        continue;
                    }
                    // Unasked (we asked only for channels no longer
                    // wanted): the slot moved away from this node.
                    if channels.wanted.remove(&channel) {
                        channels.pending.remove(&channel);
                        if unsubscribe_classic(conn, &channel, self.response_timeout).is_err() {
                            return Exit::Reconnect;
                        }
                        self.shared
                            .registry()
                            .wake_all(&channel, Event::Reconnected);
                        let _ = self.moved.send(Moved {
                            node: self.node,
                            channels: vec![channel],
                        });
                    }
                }
                Frame::Moved => {
                    last = None;
                    // A shard subscription refused: some slot is not
                    // served here any more. Hand back what is unconfirmed.
                    let refused: Vec<Vec<u8>> = channels.pending.keys().cloned().collect();
                    if self.refused(conn, channels, refused).is_err() {
                        return Exit::Reconnect;
                    }
                }
                Frame::Other => last = None,
            }
        }
    }
}

impl NodeWorker {
    /// Hands `refused` channels back to the router, leaving their classic
    /// subscriptions here.
    fn refused(
        &self,
        conn: &mut redis::Connection,
        channels: &mut Channels,
        refused: Vec<Vec<u8>>,
    ) -> redis::RedisResult<()> {
        for channel in &refused {
            channels.wanted.remove(channel);
            channels.pending.remove(channel);
            unsubscribe_classic(conn, channel, self.response_timeout)?;
        }
        let _ = self.moved.send(Moved {
            node: self.node,
            channels: refused,
        });
        Ok(())
    }
}

fn send(
    conn: &mut redis::Connection,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> redis::RedisResult<()> {
    conn.set_write_timeout(Some(timeout))?;
    conn.send_packed_command(&cmd.get_packed_command())
}

/// `SUBSCRIBE` and `SSUBSCRIBE` of `channel`; their confirmations arrive
/// as frames.
fn subscribe(
    conn: &mut redis::Connection,
    channel: &[u8],
    timeout: Duration,
) -> redis::RedisResult<()> {
    send(conn, redis::cmd("SUBSCRIBE").arg(channel), timeout)?;
    send(conn, redis::cmd("SSUBSCRIBE").arg(channel), timeout)
}

fn unsubscribe(
    conn: &mut redis::Connection,
    channel: &[u8],
    timeout: Duration,
) -> redis::RedisResult<()> {
    send(conn, redis::cmd("SUNSUBSCRIBE").arg(channel), timeout)?;
    unsubscribe_classic(conn, channel, timeout)
}

fn unsubscribe_classic(
    conn: &mut redis::Connection,
    channel: &[u8],
    timeout: Duration,
) -> redis::RedisResult<()> {
    send(conn, redis::cmd("UNSUBSCRIBE").arg(channel), timeout)
}

/// One frame read from a pub/sub connection.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    Message {
        sharded: bool,
        channel: Vec<u8>,
        payload: Vec<u8>,
    },
    /// `subscribe` or `ssubscribe` confirmed.
    Subscribed(Vec<u8>),
    /// `sunsubscribe`: asked for, or the slot moved.
    ShardUnsubscribed(Vec<u8>),
    /// An error reply `MOVED` (to an `SSUBSCRIBE`).
    Moved,
    Other,
}

fn parse(frame: &Value) -> Frame {
    use redis::PushKind as K;
    let bytes = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => Some(b.clone()),
        Some(Value::SimpleString(s)) => Some(s.clone().into_bytes()),
        _ => None,
    };
    match frame {
        Value::Push { kind, data } => {
            let Some(channel) = bytes(data.first()) else {
                return Frame::Other;
            };
            match kind {
                K::Message | K::SMessage => Frame::Message {
                    sharded: *kind == K::SMessage,
                    channel,
                    payload: bytes(data.get(1)).unwrap_or_default(),
                },
                K::Subscribe | K::SSubscribe => Frame::Subscribed(channel),
                K::SUnsubscribe => Frame::ShardUnsubscribed(channel),
                _ => Frame::Other,
            }
        }
        Value::ServerError(e) if e.code() == "MOVED" => Frame::Moved,
        _ => Frame::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: redis::PushKind, parts: &[&[u8]]) -> Value {
        Value::Push {
            kind,
            data: parts
                .iter()
                .map(|p| Value::BulkString(p.to_vec()))
                .collect(),
        }
    }

    #[test]
    fn frames_parse() {
        use redis::PushKind as K;
        assert_eq!(
            parse(&push(K::SMessage, &[b"ch", b"0"])),
            Frame::Message {
                sharded: true,
                channel: b"ch".to_vec(),
                payload: b"0".to_vec()
            }
        );
        assert_eq!(
            parse(&push(K::Message, &[b"ch", b"1"])),
            Frame::Message {
                sharded: false,
                channel: b"ch".to_vec(),
                payload: b"1".to_vec()
            }
        );
        assert_eq!(
            parse(&push(K::SSubscribe, &[b"ch"])),
            Frame::Subscribed(b"ch".to_vec())
        );
        assert_eq!(
            parse(&push(K::SUnsubscribe, &[b"ch"])),
            Frame::ShardUnsubscribed(b"ch".to_vec())
        );
        assert_eq!(parse(&Value::Nil), Frame::Other);
    }
}
