//! Redis Cluster: seeds, the slot map, one pool per node, and redirections.
//!
//! The topology comes from `CLUSTER SLOTS`, asked of any reachable node;
//! the slot of a key is computed as Redis and redis-rs do
//! ([`keys::slot`]). Each node gets the crate's own pool, so that connect
//! and authentication errors stay typed. A call for a key goes to the
//! master of its slot; `MOVED` records the new owner (and refreshes the
//! whole map), `ASK` is followed once with `ASKING` on the target,
//! `CLUSTERDOWN` is retried with backoff within the connect plus response
//! timeout. A slot that moves (`TRYAGAIN`: the call's keys are split
//! between the two nodes of a migration, which a script declaring a lock
//! and its fair queue, or a `MULTI` read of both, meets for as long as the
//! migration lasts) is waited for longer: up to
//! [`ConnectOptions::slot_move_wait`], or the waiting call's deadline
//! (`budget::moving_budget`). None of these reaches the caller while the
//! cluster is healthy or a migration ends within that.
//!
//! A master that cannot be reached is marked so: the slot map is asked
//! again at once of the other nodes (reachable ones first, the seeds among
//! them), and the call goes to the promoted replica as soon as a node
//! names it, within the call's own deadline (outside a waiting call and
//! for one that waits for nothing, the failover wait: a third of the
//! watchdog timeout).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use super::pool::Pool;
use super::server::Server;
use super::{ConnectOptions, NodeId};
use crate::error::{Error, Redirect, Result};
use crate::keys;
use crate::retry::{Backoff, pause_until};

/// Attempts of one call since its last pause for a slot that moves: a
/// bound beside the time budget, against a redirection loop between two
/// nodes that disagree.
const MAX_ATTEMPTS: usize = 100;
/// Pauses of one call waiting for a slot that moves or a cluster that is
/// down: a bound beside the time budget (each pause is at least 2.5 ms;
/// a 30 s budget takes about 130 of them).
const MAX_PAUSES: usize = 2_000;
/// Least time between two slot-map refreshes: many callers meeting the same
/// `MOVED` refresh once.
const REFRESH_EVERY: Duration = Duration::from_millis(50);
/// Least time a call keeps following redirections and retrying.
const MIN_BUDGET: Duration = Duration::from_secs(2);
/// No node owns the slot (yet).
const UNOWNED: u32 = u32::MAX;

/// The schemes of a cluster URL and the scheme of its nodes' URLs.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// Parses `redis+cluster://[[user]:password@]H:P[,H:P...]/` (or
/// `rediss+cluster://`) into its seeds; `None` for another scheme.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a malformed URL, no host, or a database
/// other than 0 (a cluster has only database 0). The message never repeats
/// the URL.
pub(crate) fn parse_url(url: &str) -> Result<Option<Vec<ConnectionInfo>>> {
    let Some((rest, node_scheme)) = SCHEMES
        .iter()
        .find_map(|(scheme, node)| url.strip_prefix(scheme).map(|rest| (rest, *node)))
    else {
        return Ok(None);
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let urls: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| format!("{node_scheme}{userinfo}{host}{tail}"))
        .collect();
    if urls.is_empty() {
        return Err(Error::invalid("bad Redis Cluster URL: no host"));
    }
    seeds(&urls).map(Some)
}

/// The seeds of a cluster from node URLs (`redis://` or `rediss://`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for no URL, a bad URL, a Unix socket, mixed
/// TLS and plain seeds, or a database other than 0.
pub(crate) fn seeds<S: AsRef<str>>(urls: &[S]) -> Result<Vec<ConnectionInfo>> {
    if urls.is_empty() {
        return Err(Error::invalid(
            "a Redis Cluster needs at least one seed URL",
        ));
    }
    let mut out = Vec::with_capacity(urls.len());
    for url in urls {
        let info = url
            .as_ref()
            .into_connection_info()
            .map_err(|e| Error::invalid(format!("bad Redis Cluster seed URL: {}", e.category())))?;
        if !matches!(
            info.addr(),
            ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
        ) {
            return Err(Error::invalid("Redis Cluster seeds must be TCP addresses"));
        }
        if info.redis_settings().db() != 0 {
            return Err(Error::invalid(
                "a Redis Cluster has only database 0; remove the /<db> from the URL",
            ));
        }
        out.push(info);
    }
    let tls = |i: &ConnectionInfo| matches!(i.addr(), ConnectionAddr::TcpTls { .. });
    if out.iter().any(tls) && !out.iter().all(tls) {
        return Err(Error::invalid(
            "Redis Cluster seeds must all use TLS (rediss://) or none",
        ));
    }
    Ok(out)
}

/// `host:port` of an address.
fn host_port(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => other.to_string(),
    }
}

/// One node: its address, its pool, and how its sharded pub/sub
/// connections are made.
struct Node {
    addr: String,
    pool: Pool,
    /// RESP3 (pub/sub frames arrive as pushes). redis-rs takes any RESP2
    /// reply read after a read that timed out for the late reply to that
    /// read and drops it; a reader polling with short timeouts would so
    /// lose `smessage`s after every quiet spell. Pushes are never dropped.
    sharded: Pool,
    /// The last call or slot-map read sent to this node could not reach
    /// it: slot-map reads ask it last.
    unreachable: AtomicBool,
}

impl Node {
    /// Notes whether `result`, got from this node, reached it.
    fn note<T>(&self, result: &Result<T>) {
        let unreachable = result
            .as_ref()
            .err()
            .is_some_and(|e| matches!(e.redirect(), Some(Redirect::Unreachable)));
        if self.unreachable.load(Ordering::Relaxed) != unreachable {
            self.unreachable.store(unreachable, Ordering::Relaxed);
        }
    }
}

/// The connections of one Redis Cluster.
pub(crate) struct Cluster {
    seeds: Vec<ConnectionInfo>,
    options: ConnectOptions,
    /// Every node ever seen, in the order first seen: a [`NodeId`] indexes
    /// it and stays valid for the life of the client.
    nodes: RwLock<Vec<Arc<Node>>>,
    /// Slot -> index in `nodes` of its master, or [`UNOWNED`].
    slots: RwLock<Vec<u32>>,
    /// When the slot map may be asked for again.
    refreshed: Mutex<Refresh>,
}

/// The pace of slot-map refreshes.
struct Refresh {
    /// No refresh (unless forced) before this.
    not_before: Option<Instant>,
    /// Pauses after refreshes that reached no node.
    failures: Backoff,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.nodes().iter().map(|n| n.addr.clone()).collect();
        f.debug_struct("Cluster")
            .field("nodes", &nodes)
            .finish_non_exhaustive()
    }
}

/// A node that answers `CLUSTER SLOTS` with "cluster support disabled" is
/// a single server behind a `redis+cluster://` URL: said so, as a bad
/// URL. Other errors are unchanged.
fn not_a_cluster(e: Error, addr: &str) -> Error {
    let disabled = e
        .redis_error()
        .and_then(redis::RedisError::detail)
        .is_some_and(|d| d.contains("cluster support disabled"));
    if disabled {
        return Error::invalid(format!(
            "{addr} is not a Redis Cluster node (its cluster support is disabled): use a \
             redis:// URL for a single server"
        ));
    }
    e
}

impl Cluster {
    /// Asks the cluster for its slot map now (at most once per 50 ms), for
    /// callers outside [`Cluster::with_conn`] that met a gone node.
    pub(crate) fn refresh_map(&self) {
        if let Err(e) = self.refresh(false) {
            log::debug!(
                "redguard cluster: slot map refresh failed: {e}",
                e = e.chain()
            );
        }
    }

    pub(crate) fn new(seeds: &[ConnectionInfo], options: &ConnectOptions) -> Result<Cluster> {
        let cluster = Cluster {
            seeds: seeds.to_vec(),
            options: options.clone(),
            nodes: RwLock::new(Vec::new()),
            slots: RwLock::new(vec![UNOWNED; usize::from(keys::SLOTS)]),
            refreshed: Mutex::new(Refresh {
                not_before: None,
                failures: Backoff::slot_map_refresh(REFRESH_EVERY),
            }),
        };
        // Seeds are nodes too: their pools exist before the first map, and
        // bad TLS material is reported now.
        for seed in seeds {
            cluster.intern(&host_port(seed.addr()))?;
        }
        Ok(cluster)
    }

    fn nodes(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Node>>> {
        self.nodes.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn node(&self, id: NodeId) -> Result<Arc<Node>> {
        self.nodes()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::Protocol(format!("no cluster node {id}")))
    }

    /// The id of the node at `addr` (`host:port`), adding it when new.
    fn intern(&self, addr: &str) -> Result<NodeId> {
        if let Some(id) = self.nodes().iter().position(|n| n.addr == addr) {
            return Ok(id);
        }
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::Protocol(format!("bad cluster node address {addr:?}")))?;
        // Credentials and TLS settings are the first seed's.
        let mut node_addr = self.seeds[0].addr().clone();
        match &mut node_addr {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                *h = host;
                *p = port;
            }
            _ => return Err(Error::invalid("Redis Cluster seeds must be TCP addresses")),
        }
        let info = self.seeds[0].clone().set_addr(node_addr);
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let sharded = Pool::new(
            info.clone().set_redis_settings(resp3),
            &self.options.tls,
            1,
            self.options.connect_timeout,
            self.options.response_timeout,
        )?
        .named(self.options.name.clone());
        let pool = Pool::new(
            info,
            &self.options.tls,
            self.options.pool_size,
            self.options.connect_timeout,
            self.options.response_timeout,
        )?
        .named(self.options.name.clone());
        let mut nodes = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = nodes.iter().position(|n| n.addr == addr) {
            return Ok(id);
        }
        nodes.push(Arc::new(Node {
            addr: addr.to_owned(),
            pool,
            sharded,
            unreachable: AtomicBool::new(false),
        }));
        Ok(nodes.len() - 1)
    }

    fn owner(&self, slot: u16) -> Option<NodeId> {
        let id = self.slots.read().unwrap_or_else(PoisonError::into_inner)[usize::from(slot)];
        (id != UNOWNED).then_some(id as NodeId)
    }

    fn set_owner(&self, slot: u16, id: NodeId) {
        self.slots.write().unwrap_or_else(PoisonError::into_inner)[usize::from(slot)] = id as u32;
    }

    /// Reloads the slot map from the first node that answers `CLUSTER
    /// SLOTS`: every known node (the seeds and each master ever seen),
    /// those last found unreachable after the others. At most once per
    /// [`REFRESH_EVERY`] unless `force`, and less often while refreshes
    /// reach no node (see [`Backoff::slot_map_refresh`]).
    fn refresh(&self, force: bool) -> Result<()> {
        let mut refreshed = self
            .refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !force && refreshed.not_before.is_some_and(|at| Instant::now() < at) {
            return Ok(());
        }
        let mut candidates: Vec<Arc<Node>> = self.nodes().clone();
        // A dead node costs a connect timeout on a real network: ask the
        // others first. The sort is stable: seeds keep their lead.
        candidates.sort_by_key(|n| n.unreachable.load(Ordering::Relaxed));
        let mut last = None;
        for node in candidates {
            let reply = node.pool.with_conn(|conn| {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Value>(conn)
                    .map_err(|e| not_a_cluster(Error::redis(e), &node.addr))
            });
            node.note(&reply);
            match reply.and_then(|r| self.apply(&node.addr, &r)) {
                Ok(()) => {
                    refreshed.failures.reset();
                    refreshed.not_before = Some(Instant::now() + REFRESH_EVERY);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        refreshed.not_before = Some(Instant::now() + refreshed.failures.next_pause());
        Err(last.unwrap_or_else(|| Error::invalid("a Redis Cluster needs at least one seed URL")))
    }

    /// Applies a `CLUSTER SLOTS` reply got from the node at `from`.
    fn apply(&self, from: &str, reply: &Value) -> Result<()> {
        let bad = || Error::Protocol("unexpected CLUSTER SLOTS reply".into());
        let Value::Array(ranges) = reply else {
            return Err(bad());
        };
        let mut table = vec![UNOWNED; usize::from(keys::SLOTS)];
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(bad());
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad());
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::SimpleString(h)) => h.clone(),
                _ => return Err(bad()),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return Err(bad());
            };
            // An empty host means "the node you asked".
            let addr = if host.is_empty() || host == "?" {
                let from_host = from.rsplit_once(':').map_or(from, |(h, _)| h);
                format!("{from_host}:{port}")
            } else {
                format!("{host}:{port}")
            };
            let id = self.intern(&addr)? as u32;
            let (start, end) = (*start as usize, *end as usize);
            if start > end || end >= table.len() {
                return Err(bad());
            }
            table[start..=end].fill(id);
        }
        *self.slots.write().unwrap_or_else(PoisonError::into_inner) = table;
        Ok(())
    }

    /// The master of `slot`, loading the map when the slot has no owner yet.
    fn route(&self, slot: u16) -> Result<NodeId> {
        if let Some(id) = self.owner(slot) {
            return Ok(id);
        }
        self.refresh(false)?;
        self.owner(slot).ok_or_else(|| {
            let reply = format!("-CLUSTERDOWN no node serves hash slot {slot}\r\n");
            match redis::parse_redis_value(reply.as_bytes()) {
                Ok(Value::ServerError(e)) => Error::redis(e.into()),
                _ => Error::Protocol(format!("no node serves hash slot {slot}")),
            }
        })
    }

    /// Runs `op` on a connection to the master of `key`'s slot, following
    /// redirections (see the module docs).
    pub(crate) fn with_conn<T>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        self.routed(key, |node, asking| {
            node.pool.with_conn(|conn| {
                if asking {
                    redis::cmd("ASKING")
                        .query::<()>(conn)
                        .map_err(Error::redis)?;
                }
                op(conn)
            })
        })
    }

    /// [`Cluster::with_conn`] for an `op` that sends several commands: it
    /// is told whether the node must hear `ASKING` (which holds for one
    /// command) and sends it before each of its commands itself.
    pub(crate) fn with_conn_asking<T>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&mut redis::Connection, bool) -> Result<T>,
    ) -> Result<T> {
        self.routed(key, |node, asking| {
            node.pool.with_conn(|conn| op(conn, asking))
        })
    }

    /// [`Cluster::with_conn`] on the node's shared connection. A call sent
    /// on after `ASK` takes a connection of its own: `ASKING` holds only
    /// for the next command on its connection, which on a shared one may
    /// be another thread's.
    pub(crate) fn with_shared_conn<T>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        self.routed(key, |node, asking| {
            if asking {
                node.pool.with_conn(|conn| {
                    redis::cmd("ASKING")
                        .query::<()>(conn)
                        .map_err(Error::redis)?;
                    op(&mut super::framed::Framed::plain(conn))
                })
            } else {
                node.pool.with_shared_conn(&mut op)
            }
        })
    }

    /// Runs `call` on the node that serves `key`'s slot (with `true` when
    /// it must send `ASKING` first), following redirections.
    fn routed<T>(&self, key: &[u8], mut call: impl FnMut(&Node, bool) -> Result<T>) -> Result<T> {
        if let Some(why) = keys::cluster_conflict(key) {
            return Err(Error::InvalidArgument(why));
        }
        let slot = keys::slot(key);
        let started = Instant::now();
        // A slot move or a failover takes about a second: wait for it within
        // the time a call may take anyway (connect + response).
        let budget = (self.options.connect_timeout + self.options.response_timeout).max(MIN_BUDGET);
        // A slot that moves is waited for longer than a down cluster: a
        // migration holds a slot's keys split for as long as it takes to
        // move them (seconds or minutes for a large slot, or a stuck one).
        let moving = super::budget::moving_budget(self.options.slot_move_wait.max(budget), budget);
        // A master that died is waited for until its replica is promoted:
        // longer than a down cluster too, by the same rule.
        let failover = super::budget::moving_budget(self.options.failover_wait.max(budget), budget);
        let mut backoff = Backoff::cluster_call();
        let mut moving_backoff = Backoff::slot_moving();
        let mut failover_backoff = Backoff::cluster_failover();
        let mut ask: Option<NodeId> = None;
        let (mut attempt, mut pauses) = (0, 0);
        loop {
            attempt += 1;
            let asking = ask.is_some();
            let node = match ask.take() {
                Some(id) => id,
                None => self.route(slot)?,
            };
            let target = self.node(node)?;
            let result = call(&target, asking);
            target.note(&result);
            let Err(e) = &result else {
                return result;
            };
            let Some(redirect) = e.redirect() else {
                return result;
            };
            if matches!(redirect, Redirect::Unreachable) {
                // Before anything else, even when this call retries no
                // more by itself: the next attempt (this call's, or its
                // waiting caller's) must not go to the dead node again
                // once a live node names the promoted replica.
                let _ = self.refresh(false);
                if self.owner(slot).is_some_and(|owner| owner != node)
                    && attempt < MAX_ATTEMPTS
                    && started.elapsed() < failover
                {
                    continue;
                }
                if attempt >= MAX_ATTEMPTS || pauses >= MAX_PAUSES {
                    return result;
                }
                // No promotion comes while no node answers at all: then
                // this is an outage, given no more than any other retry.
                let limit = if self
                    .nodes()
                    .iter()
                    .all(|n| n.unreachable.load(Ordering::Relaxed))
                {
                    super::budget::inner_budget(budget)
                } else {
                    failover
                };
                let pause = failover_backoff.next_pause();
                if started.elapsed() + pause > limit {
                    return result;
                }
                pause_until(Instant::now() + pause);
                pauses += 1;
                continue;
            }
            let limit = if redirect.slot_moving() {
                budget.max(moving)
            } else {
                budget
            };
            if attempt >= MAX_ATTEMPTS || pauses >= MAX_PAUSES || started.elapsed() > limit {
                return result;
            }
            match redirect {
                Redirect::Moved(moved, addr) => {
                    let id = self.intern(&addr)?;
                    self.set_owner(moved, id);
                    // Other slots have likely moved with it.
                    let _ = self.refresh(false);
                    self.set_owner(moved, id);
                }
                Redirect::Ask(addr) => ask = Some(self.intern(&addr)?),
                Redirect::TryAgain => {
                    let pause = moving_backoff.next_pause();
                    if started.elapsed() + pause > moving {
                        return result;
                    }
                    pause_until(Instant::now() + pause);
                    pauses += 1;
                    // The pause ends a run of redirections: a migration
                    // sends each attempt to the source, then (`ASK`) to
                    // the target, which answers `TRYAGAIN` again.
                    attempt = 0;
                    // The migration may have ended meanwhile: its new
                    // owner answers `MOVED` to what the map says.
                }
                Redirect::Retry => {
                    let pause = backoff.next_pause();
                    // A waiting call retries by itself, with its own
                    // deadline (see `crate::outage`).
                    if started.elapsed() + pause > super::budget::inner_budget(budget) {
                        return result;
                    }
                    pause_until(Instant::now() + pause);
                    pauses += 1;
                    if attempt % 4 == 0 {
                        let _ = self.refresh(false);
                    }
                }
                // Taken above, before the budget of any other retry.
                Redirect::Unreachable => {}
            }
        }
    }

    /// The node that serves `key` now (as far as this client knows).
    pub(crate) fn node_of(&self, key: &[u8]) -> NodeId {
        self.owner(keys::slot(key)).unwrap_or(0)
    }

    /// Whether node `node` serves at least one slot, as far as this client
    /// knows. A node left with none (a master demoted by a failover) can
    /// host no key, and a search for one landing there would never end.
    pub(crate) fn serves_slots(&self, node: NodeId) -> bool {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        // `node_of` sends every key of an unowned slot to node 0.
        slots
            .iter()
            .any(|&id| id as NodeId == node || (id == UNOWNED && node == 0))
    }

    /// Runs `op` on a pooled connection to node `node`.
    pub(crate) fn with_node_conn<T>(
        &self,
        node: NodeId,
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        self.node(node)?.pool.with_conn(op)
    }

    /// A new connection to node `node`, outside its pool.
    pub(crate) fn node_connection(&self, node: NodeId) -> Result<redis::Connection> {
        self.node(node)?.pool.connect()
    }

    /// Whether node `node` has sharded pub/sub: what its pool learned from
    /// the node's version, `true` while unknown.
    pub(crate) fn sharded_pubsub(&self, node: NodeId) -> bool {
        self.node(node).ok().is_none_or(|n| {
            n.pool
                .server()
                .or_else(|| n.sharded.server())
                .is_none_or(Server::sharded_pubsub)
        })
    }

    /// A new RESP3 connection to node `node` for sharded pub/sub (see
    /// `Node::sharded`).
    pub(crate) fn sharded_connection(&self, node: NodeId) -> Result<redis::Connection> {
        self.node(node)?.sharded.connect()
    }

    /// A new connection to any reachable node, for classic pub/sub: a
    /// cluster forwards every `PUBLISH` to all of its nodes.
    pub(crate) fn pubsub_connection(&self) -> Result<redis::Connection> {
        let _ = self.refresh(false);
        let masters = self.masters_in_slot_order();
        let all: Vec<NodeId> = masters.into_iter().chain(0..self.nodes().len()).collect();
        let mut last = None;
        for id in all {
            match self.node(id).and_then(|n| n.pool.connect()) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("a Redis Cluster needs at least one seed URL")))
    }

    /// The masters serving slots, in the order of their first slot: the
    /// first is where [`Cluster::pubsub_connection`] connects when it can.
    fn masters_in_slot_order(&self) -> Vec<NodeId> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let mut ids: Vec<NodeId> = Vec::new();
        for &id in slots.iter().filter(|&&id| id != UNOWNED) {
            if !ids.contains(&(id as NodeId)) {
                ids.push(id as NodeId);
            }
        }
        ids
    }

    /// The node where the classic pub/sub connections of this client (and
    /// of every redguard client with the same slot map) connect when it
    /// answers: the master of the first served slot.
    pub(crate) fn classic_pubsub_node(&self) -> Option<NodeId> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        slots
            .iter()
            .find(|&&id| id != UNOWNED)
            .map(|&id| id as NodeId)
    }

    /// Every master serving slots, as the slot map (refreshed when due)
    /// says.
    ///
    /// # Errors
    ///
    /// When no node could be asked for the slot map and none is known.
    pub(crate) fn masters(&self) -> Result<Vec<NodeId>> {
        let refreshed = self.refresh(false);
        let mut ids: Vec<NodeId> = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|&&id| id != UNOWNED)
            .map(|&id| id as NodeId)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        match (ids.is_empty(), refreshed) {
            (true, Err(e)) => Err(e),
            _ => Ok(ids),
        }
    }

    /// Open pooled connections over every node.
    pub(crate) fn open_connections(&self) -> usize {
        self.nodes().iter().map(|n| n.pool.open_connections()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_parse_into_seeds() {
        let seeds = parse_url("redis+cluster://u:p%40ss@127.0.0.1:7000,127.0.0.1:7001/")
            .unwrap()
            .unwrap();
        assert_eq!(seeds.len(), 2);
        assert_eq!(host_port(seeds[1].addr()), "127.0.0.1:7001");
        assert_eq!(seeds[1].redis_settings().username(), Some("u"));
        assert_eq!(seeds[1].redis_settings().password(), Some("p@ss"));
        let seeds = parse_url("redis+cluster://127.0.0.1:7000")
            .unwrap()
            .unwrap();
        assert_eq!(seeds[0].redis_settings().password(), None);
        assert!(parse_url("redis://127.0.0.1:7000/").unwrap().is_none());
    }

    fn options() -> ConnectOptions {
        ConnectOptions {
            name: None,
            tls: super::super::Tls::default(),
            pool_size: 2,
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            failover_wait: Duration::from_secs(1),
            slot_move_wait: Duration::from_secs(30),
        }
    }

    fn server_error(resp: &str) -> Error {
        match redis::parse_redis_value(resp.as_bytes()).unwrap() {
            Value::ServerError(e) => Error::redis(e.into()),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn slot_map_comes_from_cluster_slots() {
        let seeds = parse_url("redis+cluster://127.0.0.1:7000/")
            .unwrap()
            .unwrap();
        let cluster = Cluster::new(&seeds, &options()).unwrap();
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a: i64, b: i64, master: Value| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                master,
                node("127.0.0.1", 9),
            ])
        };
        let reply = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7000)),
            // An empty host is the node that answered.
            range(5461, 10922, node("", 7001)),
            range(10923, 16383, node("127.0.0.1", 7002)),
        ]);
        cluster.apply("127.0.0.1:7000", &reply).unwrap();
        let addr = |slot: u16| {
            cluster
                .node(cluster.owner(slot).unwrap())
                .unwrap()
                .addr
                .clone()
        };
        assert_eq!(addr(0), "127.0.0.1:7000");
        assert_eq!(addr(5461), "127.0.0.1:7001");
        assert_eq!(addr(16383), "127.0.0.1:7002");
        // Node ids stay put when the map changes.
        let before = cluster.owner(16383);
        cluster
            .apply(
                "127.0.0.1:7000",
                &Value::Array(vec![range(0, 16383, node("127.0.0.1", 7002))]),
            )
            .unwrap();
        assert_eq!(cluster.owner(0), before);
        assert_eq!(cluster.node_of(b"anything"), before.unwrap());
        // The other two masters lost every slot.
        let demoted: Vec<NodeId> = (0..cluster.nodes().len())
            .filter(|&id| Some(id) != before)
            .collect();
        assert!(!demoted.is_empty());
        assert!(demoted.iter().all(|&id| !cluster.serves_slots(id)));
        assert!(cluster.serves_slots(before.unwrap()));
        assert!(cluster.apply("x:1", &Value::Int(3)).is_err());
        assert!(
            cluster
                .apply("x:1", &Value::Array(vec![range(9, 16384, node("h", 1))]))
                .is_err()
        );
    }

    #[test]
    fn redirections_are_classified() {
        let moved = server_error("-MOVED 3999 127.0.0.1:7001\r\n");
        assert!(
            matches!(moved.redirect(), Some(Redirect::Moved(3999, a)) if a == "127.0.0.1:7001")
        );
        let ask = server_error("-ASK 3999 127.0.0.1:7002\r\n");
        assert!(matches!(ask.redirect(), Some(Redirect::Ask(a)) if a == "127.0.0.1:7002"));
        for (retry, expected) in [
            ("-TRYAGAIN Multiple keys\r\n", Redirect::TryAgain),
            ("-CLUSTERDOWN The cluster is down\r\n", Redirect::Retry),
        ] {
            assert_eq!(server_error(retry).redirect(), Some(expected));
            assert!(server_error(retry).is_redirect());
        }
        assert!(Redirect::TryAgain.slot_moving());
        assert!(Redirect::Ask("a:1".into()).slot_moving());
        assert!(Redirect::Moved(1, "a:1".into()).slot_moving());
        assert!(!Redirect::Retry.slot_moving());
        assert!(!Redirect::Unreachable.slot_moving());
        let refused = Error::io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "no",
        ));
        assert!(matches!(refused.redirect(), Some(Redirect::Unreachable)));
        assert!(!refused.is_redirect());
        assert!(refused.is_refusal());
        assert!(server_error("-WRONGTYPE no\r\n").redirect().is_none());
        assert!(Error::invalid("x").redirect().is_none());
    }

    #[test]
    fn bad_cluster_urls_are_rejected_without_echo() {
        for url in [
            "redis+cluster:///",
            "redis+cluster://u:secret@127.0.0.1:7000/3",
            "redis+cluster://u:secret@:notaport/",
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{url}: {e:?}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert!(seeds::<&str>(&[]).is_err());
    }
}
