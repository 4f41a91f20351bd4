//! A Redis Cluster: one pool per node, a slot map, and the redirections
//! that locks need followed.
//!
//! redis-rs provides the slot hashing (its `Slot::for_key` checks ours in
//! the tests), the connections and the classification of the cluster's
//! replies (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`). Its blocking
//! `ClusterConnection` does not fit a lock client: it is single-threaded
//! (one connection per node per handle, no pooling across threads), its
//! retries know no deadline, and it cannot hand out the node connection a
//! lock call pipelines its scripts on. So the routing here is small and
//! hand-written:
//!
//! * a key goes to the master of its slot, from a map made with
//!   `CLUSTER SLOTS` (asked of the known masters first, then of the seeds);
//! * `MOVED` refreshes the map (one refresh for every thread that saw the
//!   same old map) and sends the call where the server said;
//! * `ASK` sends that one call to the importing node after `ASKING`,
//!   without touching the map;
//! * `TRYAGAIN`, `CLUSTERDOWN`, `READONLY` and a refused connection are
//!   retried with backoff (10 ms doubling to 200 ms, with a refresh when
//!   the topology may have changed) for at most the retry budget,
//!   connect timeout + response timeout (at least 1 s).
//!
//! Every retried reply means the server did not run the command, so a
//! retry never runs a script twice. Timeouts are not retried: the script
//! may have run.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::Value;

use super::pool::Pool;
use super::{ConnectOptions, NodeId};
use crate::error::{ClusterHint, Error, Result};
use crate::keys;

/// Slots of a Redis Cluster.
const SLOTS: usize = keys::SLOT_COUNT as usize;
/// A slot whose master is not known yet.
const UNKNOWN: NodeId = NodeId::MAX;
/// First and longest pause between retries of a transient cluster state.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_millis(200);
/// Shortest retry budget, whatever the timeouts.
const MIN_BUDGET: Duration = Duration::from_secs(1);

/// One node: its address, its pool, and how its pub/sub connections are
/// made.
struct Node {
    host: String,
    port: u16,
    pool: Pool,
    /// RESP3, for pub/sub: every pub/sub frame is then a push, which
    /// redis-rs never mistakes for the late reply to a read that timed out
    /// (a RESP2 frame read after a timed-out read is dropped as that
    /// reply).
    pubsub: Pool,
}

/// Which node serves each slot; `epoch` counts the refreshes.
struct SlotMap {
    owners: Vec<NodeId>,
    epoch: u64,
}

/// The connections of one Redis Cluster.
pub(crate) struct Cluster {
    /// Connection settings of the seeds: the template of every node's
    /// (credentials, TLS, protocol), with its own address.
    template: redis::ConnectionInfo,
    options: ConnectOptions,
    /// Every node ever seen, seeds first; a [`NodeId`] indexes it. Only
    /// grows: a node that left keeps its (then failing) pool.
    nodes: RwLock<Vec<Arc<Node>>>,
    map: RwLock<SlotMap>,
    /// Held by the thread refreshing the map.
    refreshing: Mutex<()>,
    budget: Duration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.read_nodes().len())
            .field("epoch", &self.read_map().epoch)
            .finish_non_exhaustive()
    }
}

fn pause(d: Duration) {
    let until = Instant::now() + d;
    // Bounded: each turn parks until `until` or returns.
    loop {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::park_timeout(until - now);
    }
}

/// `(host, port)` of a TCP address.
fn host_port(addr: &redis::ConnectionAddr) -> Option<(String, u16)> {
    match addr {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

/// Splits `host:port` (IPv6 hosts may be bracketed).
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

impl Cluster {
    /// A cluster reached through `seeds`. No I/O: the topology is asked
    /// for on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] without seeds, with a Unix socket seed, or
    /// when the TLS material cannot be used.
    pub(crate) fn new(
        seeds: &[redis::ConnectionInfo],
        options: &ConnectOptions,
    ) -> Result<Cluster> {
        let template = seeds
            .first()
            .cloned()
            .ok_or_else(|| Error::invalid("a cluster needs at least one seed node"))?;
        let cluster = Cluster {
            template,
            options: options.clone(),
            nodes: RwLock::new(Vec::new()),
            map: RwLock::new(SlotMap {
                owners: vec![UNKNOWN; SLOTS],
                epoch: 0,
            }),
            refreshing: Mutex::new(()),
            budget: (options.connect_timeout + options.response_timeout).max(MIN_BUDGET),
        };
        for seed in seeds {
            let (host, port) = host_port(seed.addr())
                .ok_or_else(|| Error::invalid("cluster seeds must be TCP addresses"))?;
            cluster.node_at(&host, port)?;
        }
        Ok(cluster)
    }

    fn read_nodes(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Node>>> {
        self.nodes.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, SlotMap> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The id of the node at `host:port`, adding it when new.
    fn node_at(&self, host: &str, port: u16) -> Result<NodeId> {
        if let Some(id) = self
            .read_nodes()
            .iter()
            .position(|n| n.port == port && n.host == host)
        {
            return Ok(id);
        }
        let addr = match self.template.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let info = self.template.clone().set_addr(addr);
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let pubsub = Pool::new(
            info.clone().set_redis_settings(resp3),
            &self.options.tls,
            1,
            self.options.connect_timeout,
            self.options.response_timeout,
        )?;
        let pool = Pool::new(
            info,
            &self.options.tls,
            self.options.pool_size,
            self.options.connect_timeout,
            self.options.response_timeout,
        )?;
        let mut nodes = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have added it meanwhile.
        if let Some(id) = nodes.iter().position(|n| n.port == port && n.host == host) {
            return Ok(id);
        }
        nodes.push(Arc::new(Node {
            host: host.to_owned(),
            port,
            pool,
            pubsub,
        }));
        Ok(nodes.len() - 1)
    }

    fn node(&self, id: NodeId) -> Option<Arc<Node>> {
        self.read_nodes().get(id).cloned()
    }

    /// The master of `slot` and the map's epoch; `None` when unknown.
    fn owner(&self, slot: u16) -> (Option<NodeId>, u64) {
        let map = self.read_map();
        let owner = map.owners[usize::from(slot)];
        ((owner != UNKNOWN).then_some(owner), map.epoch)
    }

    /// The node that serves `key` now, without I/O: node 0 (the first
    /// seed) while the map is unknown. A wrong guess costs one `MOVED`.
    pub(crate) fn node_of(&self, key: &[u8]) -> NodeId {
        self.owner(keys::slot(key)).0.unwrap_or(0)
    }

    /// The masters that serve slots, each once.
    pub(crate) fn masters(&self) -> Vec<NodeId> {
        let map = self.read_map();
        let mut masters: Vec<NodeId> = map
            .owners
            .iter()
            .copied()
            .filter(|&o| o != UNKNOWN)
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// Asks the cluster for its slot map, unless the map changed since the
    /// caller saw `seen_epoch` (another thread refreshed it meanwhile).
    fn refresh(&self, seen_epoch: u64) -> Result<()> {
        let _refreshing = self
            .refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.read_map().epoch != seen_epoch {
            return Ok(());
        }
        // The masters known, then every other node (seeds first).
        let mut candidates = self.masters();
        for id in 0..self.read_nodes().len() {
            if !candidates.contains(&id) {
                candidates.push(id);
            }
        }
        let mut last = Error::invalid("the cluster has no nodes");
        for id in candidates {
            let Some(node) = self.node(id) else { continue };
            let reply = node.pool.with_conn(|conn| {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Value>(conn)
                    .map_err(Error::redis)
            });
            let ranges = match reply.and_then(|v| parse_slots(&v, &node.host)) {
                Ok(ranges) if !ranges.is_empty() => ranges,
                Ok(_) => {
                    last = Error::Protocol(format!(
                        "node {}:{} serves no slots (is it in cluster mode?)",
                        node.host, node.port
                    ));
                    continue;
                }
                Err(e) => {
                    log::debug!(
                        "redguard cluster: CLUSTER SLOTS on {}:{} failed: {e}",
                        node.host,
                        node.port
                    );
                    last = e;
                    continue;
                }
            };
            let mut owners = vec![UNKNOWN; SLOTS];
            for (start, end, host, port) in ranges {
                let id = self.node_at(&host, port)?;
                for slot in start..=end.min(keys::SLOT_COUNT - 1) {
                    owners[usize::from(slot)] = id;
                }
            }
            let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
            map.owners = owners;
            map.epoch += 1;
            return Ok(());
        }
        Err(last)
    }

    /// Runs `op` on a connection to the master of `key`'s slot, following
    /// the cluster's redirections (see the module docs).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a key whose derived keys would cross
    /// slots ([`keys::check_cluster_name`]); `op`'s own errors; the last
    /// redirection or transient error once the retry budget is spent.
    pub(crate) fn with_conn<T>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        keys::check_cluster_name(key).map_err(Error::InvalidArgument)?;
        let slot = keys::slot(key);
        let mut deadline = None;
        let mut backoff = FIRST_BACKOFF;
        let mut asking: Option<NodeId> = None;
        let mut moved: Option<NodeId> = None;
        // Bounded by the deadline; the count is a second, independent bound.
        for _ in 0..1000 {
            let (owner, epoch) = self.owner(slot);
            let target = match asking.or(moved).or(owner) {
                Some(id) => id,
                None => {
                    self.refresh(epoch)?;
                    match self.owner(slot).0 {
                        Some(id) => id,
                        None => {
                            let now = Instant::now();
                            if now + backoff > *deadline.get_or_insert(now + self.budget) {
                                return Err(Error::Timeout(format!(
                                    "no node of the cluster serves hash slot {slot}"
                                )));
                            }
                            pause(backoff);
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                            continue;
                        }
                    }
                }
            };
            let node = self
                .node(target)
                .ok_or_else(|| Error::Protocol(format!("unknown cluster node {target}")))?;
            let asked = asking.take().is_some();
            moved = None;
            let result = node.pool.with_conn(|conn| {
                if asked {
                    redis::cmd("ASKING").exec(conn).map_err(Error::redis)?;
                }
                op(conn)
            });
            let err = match result {
                Ok(value) => return Ok(value),
                Err(e) if e.redis_code() == Some("CROSSSLOT") => {
                    return Err(Error::InvalidArgument(format!(
                        "the keys {:?} derives cannot be used on a Redis Cluster: they hash \
                         to different slots (CROSSSLOT), and one script may not touch them \
                         all. Use a name without braces",
                        String::from_utf8_lossy(key)
                    )));
                }
                Err(e) => e,
            };
            let hint = err.cluster_hint();
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + self.budget);
            match hint {
                ClusterHint::None => return Err(err),
                ClusterHint::Moved(addr) => {
                    log::debug!("redguard cluster: slot {slot} moved to {addr}");
                    if let Some((host, port)) = split_addr(&addr) {
                        moved = Some(self.node_at(&host, port)?);
                    }
                    self.refresh(epoch)?;
                    if moved.is_some() && self.owner(slot).0 == moved {
                        moved = None;
                    }
                }
                ClusterHint::Ask(addr) => {
                    let Some((host, port)) = split_addr(&addr) else {
                        return Err(err);
                    };
                    asking = Some(self.node_at(&host, port)?);
                }
                ClusterHint::TryAgain | ClusterHint::Down | ClusterHint::Refused => {
                    if now + backoff > deadline {
                        return Err(err);
                    }
                    log::debug!("redguard cluster: slot {slot}: {err}; retrying in {backoff:?}");
                    pause(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if hint != ClusterHint::TryAgain {
                        // The node may be gone or demoted: ask again who
                        // serves the slot (at most one refresh per backoff).
                        let _ = self.refresh(self.owner(slot).1);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(err);
            }
        }
        Err(Error::Timeout(format!(
            "hash slot {slot}: too many cluster redirections"
        )))
    }

    /// Runs `op` on a connection to node `node`, as it is (no redirection
    /// is followed: the caller re-routes what came back redirected).
    pub(crate) fn with_node_conn<T>(
        &self,
        node: NodeId,
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        let node = self
            .node(node)
            .ok_or_else(|| Error::Protocol(format!("unknown cluster node {node}")))?;
        node.pool.with_conn(op)
    }

    /// A new connection to `node`, outside its pool.
    pub(crate) fn node_connection(&self, node: NodeId) -> Result<redis::Connection> {
        let node = self
            .node(node)
            .ok_or_else(|| Error::Protocol(format!("unknown cluster node {node}")))?;
        node.pool.connect()
    }

    /// A new RESP3 connection to `node` for pub/sub: its messages arrive
    /// as pushes.
    pub(crate) fn pubsub_connection(&self, node: NodeId) -> Result<redis::Connection> {
        let node = self
            .node(node)
            .ok_or_else(|| Error::Protocol(format!("unknown cluster node {node}")))?;
        node.pubsub.connect()
    }

    /// A new connection to some node that answers (the masters first), for
    /// classic pub/sub: a cluster delivers `PUBLISH` to every node.
    pub(crate) fn any_connection(&self) -> Result<redis::Connection> {
        if self.masters().is_empty() {
            let _ = self.refresh(self.read_map().epoch);
        }
        let mut candidates = self.masters();
        for id in 0..self.read_nodes().len() {
            if !candidates.contains(&id) {
                candidates.push(id);
            }
        }
        let mut last = Error::invalid("the cluster has no nodes");
        for id in candidates {
            match self.node_connection(id) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Open pooled connections over every node.
    pub(crate) fn open_connections(&self) -> usize {
        self.read_nodes()
            .iter()
            .map(|n| n.pool.open_connections())
            .sum()
    }

    /// Refreshes the slot map now (after renewals came back redirected).
    pub(crate) fn reroute(&self) {
        let epoch = self.read_map().epoch;
        if let Err(e) = self.refresh(epoch) {
            log::debug!("redguard cluster: slot map refresh failed: {e}");
        }
    }
}

/// Parses `redis+cluster://[[user]:password@]HOST:PORT[,HOST:PORT...]/[?query]`
/// (`rediss+cluster://` for TLS) into one seed per host, each with the
/// URL's credentials and query; `None` for any other scheme.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a cluster URL without hosts, with a
/// database other than 0 (a cluster has only database 0), or with a host
/// redis-rs cannot parse. The message never repeats the URL.
pub(crate) fn parse_url(url: &str) -> Result<Option<Vec<redis::ConnectionInfo>>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        ("rediss", rest)
    } else {
        return Ok(None);
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    if !matches!(path, "" | "/" | "/0") {
        return Err(Error::invalid(
            "bad Redis Cluster URL: a cluster has only database 0 (the path must be `/`)",
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let mut seeds = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(Error::invalid("bad Redis Cluster URL: an empty host"));
        }
        let mut one = format!("{scheme}://");
        if let Some(user) = userinfo {
            one.push_str(user);
            one.push('@');
        }
        one.push_str(host);
        one.push('/');
        if let Some(query) = query {
            one.push('?');
            one.push_str(query);
        }
        seeds.push(seed(&one)?);
    }
    Ok(Some(seeds))
}

/// One seed node from a `redis://` or `rediss://` URL.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when it does not parse, is not TCP, or names
/// a database other than 0.
pub(crate) fn seed(url: &str) -> Result<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let info = url
        .into_connection_info()
        .map_err(|e| Error::invalid(format!("bad Redis Cluster seed URL: {}", e.category())))?;
    if host_port(info.addr()).is_none() {
        return Err(Error::invalid(
            "bad Redis Cluster seed URL: cluster nodes are reached over TCP",
        ));
    }
    if info.redis_settings().db() != 0 {
        return Err(Error::invalid(
            "bad Redis Cluster seed URL: a cluster has only database 0",
        ));
    }
    Ok(info)
}

/// Parses `CLUSTER SLOTS`: `(start, end, master host, master port)` per
/// range. An empty or `?` host means the node that answered.
fn parse_slots(reply: &Value, asked: &str) -> Result<Vec<(u16, u16, String, u16)>> {
    let bad = || Error::Protocol("unexpected CLUSTER SLOTS reply".into());
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else {
            return Err(bad());
        };
        let (Some(start), Some(end), Some(Value::Array(master))) = (
            items.first().and_then(int),
            items.get(1).and_then(int),
            items.get(2),
        ) else {
            return Err(bad());
        };
        let host = master.first().and_then(text).ok_or_else(bad)?;
        let port = master.get(1).and_then(int).ok_or_else(bad)?;
        let host = if host.is_empty() || host == "?" {
            asked.to_owned()
        } else {
            host
        };
        out.push((start, end, host, port));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split() {
        assert_eq!(
            split_addr("127.0.0.1:7000"),
            Some(("127.0.0.1".into(), 7000))
        );
        assert_eq!(split_addr("[::1]:7000"), Some(("::1".into(), 7000)));
        assert_eq!(split_addr(":7000"), None);
        assert_eq!(split_addr("h:x"), None);
    }

    #[test]
    fn cluster_urls_parse() {
        let seeds = parse_url("redis+cluster://u:p%40ss@127.0.0.1:7000,[::1]:7001/")
            .unwrap()
            .unwrap();
        assert_eq!(seeds.len(), 2);
        assert_eq!(host_port(seeds[1].addr()), Some(("::1".to_owned(), 7001)));
        assert_eq!(seeds[0].redis_settings().password(), Some("p@ss"));
        assert_eq!(seeds[1].redis_settings().username(), Some("u"));
        assert!(parse_url("redis://127.0.0.1/").unwrap().is_none());
        let one = parse_url("redis+cluster://h:1").unwrap().unwrap();
        assert_eq!(host_port(one[0].addr()), Some(("h".to_owned(), 1)));
        for bad in [
            "redis+cluster://h:1/2",
            "redis+cluster://h:1,,h:2/",
            "redis+cluster:///",
            "redis+cluster://sec:ret@h:notaport/",
        ] {
            let err = parse_url(bad).unwrap_err().to_string();
            assert!(!err.contains("ret@"), "{err}");
        }
        #[cfg(feature = "tls")]
        {
            let tls = parse_url("rediss+cluster://h:1/").unwrap().unwrap();
            assert!(matches!(
                tls[0].addr(),
                redis::ConnectionAddr::TcpTls { .. }
            ));
        }
    }

    #[test]
    fn slots_parse() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.3", 7003),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "seed").unwrap(),
            vec![
                (0, 5460, "10.0.0.1".to_owned(), 7000),
                (5461, 16383, "seed".to_owned(), 7001)
            ]
        );
        assert!(parse_slots(&Value::Nil, "x").is_err());
    }
}
