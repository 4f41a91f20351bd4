//! Sharded pub/sub on a Redis Cluster, beside the classic connection.
//!
//! Redisson since 3.2x publishes its unlock messages with `SPUBLISH` on a
//! Redis 7 Cluster and its waiters `SSUBSCRIBE`; a sharded message reaches
//! only the node that owns the channel's slot (and its replicas). So that
//! such an unlock wakes redguard's waiters too, every channel with waiters
//! is also `SSUBSCRIBE`d on the master of its slot: one connection per
//! node, each read by a thread of its own ("redguard-sharded"), so that a
//! quiet or slow node never delays the classic connection. A channel whose
//! slot moved (the server then sends `sunsubscribe` itself) or whose node's
//! connection broke is subscribed again where the slot lives now.
//!
//! redguard's unlocks on a Cluster always `SPUBLISH`, and `PUBLISH` too
//! only when the slot's node counts a classic listener of the channel
//! (`lua/notify.lua`): these sharded subscriptions are what wakes
//! redguard's waiters there, so a channel subscribed again after a slot
//! move or a broken connection wakes its waiters to try again. When one
//! unlock arrives on both kinds, [`Pairing`] turns the pair into one
//! wake-up: a message wakes only when its kind has now seen more messages
//! on the channel than the other kind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use redis::Value;

use super::{Shared, TICK};
use crate::connection::{NodeId, Source};
use crate::retry::Backoff;

/// What one reply on a sharded connection was.
enum Reply {
    Message(Vec<u8>, Vec<u8>),
    Subscribed(Vec<u8>),
    Unsubscribed(Vec<u8>),
    Other,
}

fn parse(value: Value) -> Reply {
    let items = match value {
        Value::Array(items) => items,
        Value::Push { data, kind } => {
            let mut items = vec![Value::BulkString(kind.to_string().into_bytes())];
            items.extend(data);
            items
        }
        _ => return Reply::Other,
    };
    let bytes = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => Some(b.clone()),
        Some(Value::SimpleString(s)) => Some(s.clone().into_bytes()),
        _ => None,
    };
    let (Some(kind), Some(channel)) = (bytes(items.first()), bytes(items.get(1))) else {
        return Reply::Other;
    };
    match &kind[..] {
        b"smessage" => match bytes(items.get(2)) {
            Some(payload) => Reply::Message(channel, payload),
            None => Reply::Other,
        },
        b"ssubscribe" => Reply::Subscribed(channel),
        b"sunsubscribe" => Reply::Unsubscribed(channel),
        _ => Reply::Other,
    }
}

/// Work for a node's thread.
enum NodeCtl {
    /// Subscribe; `true` goes back once the server confirmed.
    Subscribe(Vec<u8>, Sender<bool>),
    Unsubscribe(Vec<u8>),
}

/// The sharded subscriptions of one classic connection's life: which node
/// thread listens to which channel. Owned by the subscriber thread;
/// dropping it stops the node threads.
pub(super) struct Router {
    source: Arc<Source>,
    shared: Arc<Shared>,
    pairing: Arc<Mutex<Pairing>>,
    timeout: Duration,
    nodes: HashMap<NodeId, Sender<NodeCtl>>,
    /// Channel -> the node it is subscribed on.
    routes: HashMap<Vec<u8>, NodeId>,
    /// Channels wanted but not subscribed (a failure, a slot move).
    pending: HashSet<Vec<u8>>,
    next_retry: Option<Instant>,
    backoff: Backoff,
    lost_tx: Sender<(NodeId, Vec<u8>)>,
    lost_rx: Receiver<(NodeId, Vec<u8>)>,
}

impl Router {
    pub(super) fn new(
        source: Arc<Source>,
        shared: Arc<Shared>,
        pairing: Arc<Mutex<Pairing>>,
        timeout: Duration,
    ) -> Router {
        let (lost_tx, lost_rx) = crossbeam_channel::unbounded();
        Router {
            source,
            shared,
            pairing,
            timeout,
            nodes: HashMap::new(),
            routes: HashMap::new(),
            pending: HashSet::new(),
            next_retry: None,
            backoff: Backoff::sharded_subscribe(),
            lost_tx,
            lost_rx,
        }
    }

    /// `SSUBSCRIBE`s `channel` on the master of its slot and waits for the
    /// confirmation (at most the response timeout). On failure the channel
    /// is tried again later; the classic subscription still stands.
    pub(super) fn subscribe(&mut self, channel: &[u8]) {
        if self.routes.contains_key(channel) {
            return;
        }
        let node = self.source.node_of(channel);
        if !self.source.sharded_pubsub(node) {
            // Redis 6.2: no sharded pub/sub on this node; unlocks there
            // publish the classic kind, which the classic connection hears.
            self.pending.remove(channel);
            return;
        }
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        let sent = self.node(node).is_some_and(|tx| {
            tx.send(NodeCtl::Subscribe(channel.to_vec(), ack_tx))
                .is_ok()
        });
        if sent && ack_rx.recv_timeout(self.timeout) == Ok(true) {
            self.routes.insert(channel.to_vec(), node);
            self.pending.remove(channel);
        } else {
            if !sent {
                self.nodes.remove(&node);
            }
            self.pending.insert(channel.to_vec());
            let backoff = &mut self.backoff;
            self.next_retry
                .get_or_insert_with(|| Instant::now() + backoff.next_pause());
        }
    }

    /// `SUNSUBSCRIBE`s `channel`.
    pub(super) fn unsubscribe(&mut self, channel: &[u8]) {
        self.pending.remove(channel);
        if let Some(node) = self.routes.remove(channel)
            && let Some(tx) = self.nodes.get(&node)
        {
            let _ = tx.send(NodeCtl::Unsubscribe(channel.to_vec()));
        }
        crate::capacity::trim(&mut self.routes, crate::capacity::KEEP);
        crate::capacity::trim(&mut self.pending, crate::capacity::KEEP);
    }

    /// Subscribes again the channels whose subscription was lost, after a
    /// pause that grows while the attempts fail (see [`Backoff::sharded_subscribe`]);
    /// cheap when there are none. `wanted` says which channels still have
    /// waiters.
    pub(super) fn tick(&mut self, wanted: impl Fn(&[u8]) -> bool) {
        while let Ok((node, channel)) = self.lost_rx.try_recv() {
            if self.routes.get(&channel) == Some(&node) {
                self.routes.remove(&channel);
                self.pending.insert(channel);
                let backoff = &mut self.backoff;
                self.next_retry
                    .get_or_insert_with(|| Instant::now() + backoff.next_pause());
            }
        }
        if self.pending.is_empty() || self.next_retry.is_some_and(|at| at > Instant::now()) {
            return;
        }
        self.next_retry = None;
        // Their slots may have moved (the reason most were lost): ask the
        // cluster where they live now, or they would be subscribed again
        // on the node that just dropped them.
        self.source.refresh_topology();
        let pending: Vec<Vec<u8>> = self.pending.drain().collect();
        let mut failed = false;
        for channel in pending {
            if failed {
                // One failure per round: the rest wait for the next one
                // instead of each costing a connection attempt now.
                self.pending.insert(channel);
                continue;
            }
            if wanted(&channel) {
                self.subscribe(&channel);
                failed = !self.routes.contains_key(&channel);
                if !failed {
                    // Unlocks on this channel went unheard while it was not
                    // subscribed (on a Cluster an unlock publishes the
                    // classic kind only when the slot's node counts a
                    // classic listener): its waiters try again now.
                    self.shared
                        .registry()
                        .wake_all(&channel, super::Event::Reconnected);
                }
            }
        }
        if self.pending.is_empty() {
            self.backoff.reset();
        }
    }

    /// The thread of `node`, started when needed.
    fn node(&mut self, node: NodeId) -> Option<&Sender<NodeCtl>> {
        if !self.nodes.contains_key(&node) {
            let (tx, rx) = crossbeam_channel::unbounded();
            let mut thread = NodeThread {
                node,
                source: self.source.clone(),
                shared: self.shared.clone(),
                pairing: self.pairing.clone(),
                timeout: self.timeout,
                control: rx,
                lost: self.lost_tx.clone(),
                conn: None,
                subscribed: HashSet::new(),
            };
            std::thread::Builder::new()
                .name("redguard-sharded".into())
                .spawn(move || {
                    // Its calls are retried on its own schedule.
                    crate::connection::budget::set_call(
                        crate::connection::budget::Call::Background,
                    );
                    thread.run();
                })
                .ok()?;
            self.nodes.insert(node, tx);
        }
        self.nodes.get(&node)
    }
}

/// One node's sharded connection and its reader.
struct NodeThread {
    node: NodeId,
    source: Arc<Source>,
    shared: Arc<Shared>,
    pairing: Arc<Mutex<Pairing>>,
    timeout: Duration,
    control: Receiver<NodeCtl>,
    lost: Sender<(NodeId, Vec<u8>)>,
    conn: Option<redis::Connection>,
    subscribed: HashSet<Vec<u8>>,
}

impl NodeThread {
    fn run(&mut self) {
        loop {
            loop {
                match self.control.try_recv() {
                    Ok(ctl) => self.handle(ctl),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            if self.subscribed.is_empty() {
                match self.control.recv() {
                    Ok(ctl) => self.handle(ctl),
                    Err(_) => return,
                }
                continue;
            }
            let Some(conn) = self.conn.as_mut() else {
                self.lose_all();
                continue;
            };
            let _ = conn.set_read_timeout(Some(TICK));
            match conn.recv_response() {
                Ok(value) => self.reply(value),
                Err(e) if e.is_timeout() => {}
                Err(e) => {
                    log::debug!("redguard subscriber: sharded connection lost: {e}");
                    self.lose_all();
                }
            }
        }
    }

    fn handle(&mut self, ctl: NodeCtl) {
        match ctl {
            NodeCtl::Subscribe(channel, ack) => {
                let ok = match self.subscribe(&channel) {
                    Ok(()) => true,
                    Err(e) => {
                        log::debug!(
                            "redguard subscriber: SSUBSCRIBE {:?} failed ({e}); trying again later",
                            String::from_utf8_lossy(&channel),
                            e = e.chain()
                        );
                        // A refusal (`MOVED`: the slot lives elsewhere)
                        // leaves the connection and its other channels be.
                        if e.breaks_connection() || e.redis_error().is_none() {
                            self.lose_all();
                        }
                        false
                    }
                };
                let _ = ack.send(ok);
            }
            NodeCtl::Unsubscribe(channel) => {
                let removed = self.subscribed.remove(&channel);
                crate::capacity::trim(&mut self.subscribed, crate::capacity::KEEP);
                if removed && let Some(conn) = self.conn.as_mut() {
                    let cmd = redis::cmd("SUNSUBSCRIBE")
                        .arg(&channel[..])
                        .get_packed_command();
                    if conn.send_packed_command(&cmd).is_err() {
                        self.lose_all();
                    }
                }
                lock(&self.pairing).reset(&channel);
            }
        }
    }

    fn subscribe(&mut self, channel: &[u8]) -> crate::error::Result<()> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.source.sharded_connection(self.node)?,
        };
        let conn = self.conn.insert(conn);
        conn.set_read_timeout(Some(self.timeout))
            .map_err(crate::error::Error::redis)?;
        let cmd = redis::cmd("SSUBSCRIBE").arg(channel).get_packed_command();
        conn.send_packed_command(&cmd)
            .map_err(crate::error::Error::redis)?;
        // Bounded: each read waits at most the response timeout, and a
        // healthy server confirms after the messages queued before.
        for _ in 0..10_000 {
            // `reply` below never drops the connection; the `else` only
            // keeps this loop honest if that ever changes.
            let Some(conn) = self.conn.as_mut() else {
                return Err(crate::error::Error::Protocol(
                    "the sharded pub/sub connection went away".into(),
                ));
            };
            let value = conn.recv_response().map_err(crate::error::Error::redis)?;
            if matches!(parse(value.clone()), Reply::Subscribed(ref ch) if ch == channel) {
                log::trace!(
                    "redguard subscriber: SSUBSCRIBE {:?} confirmed by node {}",
                    String::from_utf8_lossy(channel),
                    self.node
                );
                self.subscribed.insert(channel.to_vec());
                lock(&self.pairing).reset(channel);
                return Ok(());
            }
            if let Value::ServerError(e) = value {
                return Err(crate::error::Error::redis(e.into()));
            }
            self.reply(value);
        }
        Err(crate::error::Error::Protocol(
            "no SSUBSCRIBE confirmation".into(),
        ))
    }

    fn reply(&mut self, value: Value) {
        match parse(value) {
            Reply::Message(channel, payload) => {
                let admit = self.subscribed.contains(&channel)
                    && lock(&self.pairing).admit(&channel, Kind::Sharded);
                log::trace!(
                    "redguard subscriber: sharded message on {:?} (node {}): admitted {admit}",
                    String::from_utf8_lossy(&channel),
                    self.node
                );
                if admit {
                    super::dispatch(&self.shared, &channel, &payload);
                }
            }
            // The slot moved away: the server dropped the subscription.
            Reply::Unsubscribed(channel) if self.subscribed.remove(&channel) => {
                let _ = self.lost.send((self.node, channel));
            }
            _ => {}
        }
    }

    /// The connection is gone (or unusable): every channel is subscribed
    /// again through the router, maybe on another node.
    fn lose_all(&mut self) {
        self.conn = None;
        for channel in self.subscribed.drain() {
            let _ = self.lost.send((self.node, channel));
        }
    }
}

pub(super) fn lock(pairing: &Mutex<Pairing>) -> std::sync::MutexGuard<'_, Pairing> {
    pairing.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which connection a message came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Classic,
    Sharded,
}

/// Turns the classic + sharded pair of one redguard unlock into one
/// wake-up, while a publisher of one kind only (older Redisson: classic;
/// Redisson 3.2x on a cluster: sharded) wakes once per message.
#[derive(Default)]
pub(super) struct Pairing {
    /// Channel -> messages seen (classic, sharded) since it was subscribed.
    counts: HashMap<Vec<u8>, (u64, u64)>,
}

impl Pairing {
    /// `true` when the message should wake waiters.
    pub(super) fn admit(&mut self, channel: &[u8], kind: Kind) -> bool {
        let (classic, sharded) = self.counts.entry(channel.to_vec()).or_default();
        let admit = match kind {
            Kind::Classic => {
                *classic += 1;
                *classic > *sharded
            }
            Kind::Sharded => {
                *sharded += 1;
                *sharded > *classic
            }
        };
        // Only the difference counts: an even channel needs no entry, so
        // a channel whose pairs all arrived keeps none after its last
        // unlock (nor does one a stray message reached after its reset).
        if classic == sharded {
            self.counts.remove(channel);
            crate::capacity::trim(&mut self.counts, crate::capacity::KEEP);
        }
        admit
    }

    /// The channel was (re)subscribed or dropped: start even.
    pub(super) fn reset(&mut self, channel: &[u8]) {
        self.counts.remove(channel);
        crate::capacity::trim(&mut self.counts, crate::capacity::KEEP);
    }

    /// Channels with an unpaired message.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_wakes_once_and_single_kinds_wake_each_time() {
        let mut p = Pairing::default();
        let ch = b"c";
        // redguard unlocks: both kinds, either order.
        assert!(p.admit(ch, Kind::Classic));
        assert!(!p.admit(ch, Kind::Sharded));
        assert!(p.admit(ch, Kind::Sharded));
        assert!(!p.admit(ch, Kind::Classic));
        // Redisson 3.2x: sharded only.
        assert!(p.admit(ch, Kind::Sharded));
        assert!(p.admit(ch, Kind::Sharded));
        // Then a redguard unlock again: one wake-up.
        let woke = [p.admit(ch, Kind::Classic), p.admit(ch, Kind::Sharded)];
        assert_eq!(woke.iter().filter(|w| **w).count(), 1);
        p.reset(ch);
        assert!(p.admit(ch, Kind::Classic));
        // A pair that completes leaves no entry.
        assert!(!p.admit(ch, Kind::Sharded));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn replies_parse() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert!(matches!(
            parse(Value::Array(vec![bulk("smessage"), bulk("ch"), bulk("0")])),
            Reply::Message(c, p) if c == b"ch" && p == b"0"
        ));
        assert!(matches!(
            parse(Value::Array(vec![bulk("ssubscribe"), bulk("ch"), Value::Int(1)])),
            Reply::Subscribed(c) if c == b"ch"
        ));
        assert!(matches!(
            parse(Value::Array(vec![bulk("sunsubscribe"), bulk("ch"), Value::Int(0)])),
            Reply::Unsubscribed(c) if c == b"ch"
        ));
        assert!(matches!(parse(Value::Int(1)), Reply::Other));
    }
}
