//! Where connections come from: "a connection for this key". Lock code never
//! sees the deployment: a single server, a Sentinel master and each Cluster
//! node are reached through a [`pool::Pool`] of their own; Sentinel and
//! Cluster are further cases of [`Source`].
//!
//! # One connection model
//!
//! Each server's pool has two kinds of connections, and no setting chooses
//! between them: the kind is the call's.
//!
//! * **One shared connection** ([`shared`]) carries the calls that acquire
//!   and release locks and permits, from every thread of the client: a
//!   thread's command is written at once, while the replies of earlier
//!   ones are still being read (pipelined, as a multiplexed connection of
//!   an asynchronous client). Commands that come while another thread
//!   writes go out in its next write, and one read brings back the replies
//!   of many: Redis pays one pair of system calls for the lot. When a read
//!   hands replies to several threads while the server still has
//!   commands to answer, their next commands go out together in one write
//!   (the last of them back writes it), which is what keeps one connection
//!   ahead of several as threads are added. When one read hands replies
//!   to dozens of threads at once, the client spreads its threads over
//!   two, then four shared connections to that server (its reader hands
//!   each reply out alone, and is then the bottleneck; 64 and 256
//!   threads: BENCHMARKS.md); a frozen server, which answers nothing,
//!   opens none. No thread
//!   is started; a thread alone writes and reads itself, one write and one
//!   read per command as on a connection of its own. It works on every
//!   transport redguard speaks, TCP, Unix sockets and TLS, with RESP2 or
//!   RESP3 ([`wire`]).
//! * **Exclusive pooled connections** ([`pool`]) carry every call that
//!   needs a connection's state to itself: `MULTI`/`EXEC`, `WAIT` (for
//!   `min_replica_acks`: Redis answers nothing else on a connection until
//!   the replicas acknowledged), pub/sub, the watchdog's renewal
//!   pipelines, a Cluster call sent on after `ASK` (`ASKING` holds only
//!   for the next command of its connection), and the administrative
//!   commands.
//!
//! A call on the shared connection keeps every guarantee of a pooled one:
//! it waits at most the response timeout from when it was queued or sent;
//! one still queued at its deadline is taken back unsent; one sent whose
//! reply is late, or whose connection broke, has an unknown outcome and is
//! handled as on a connection of its own (an acquire is undone); a reused
//! connection found dead before any reply is tried once more on a fresh
//! one. Through Sentinel the master has the shared connection (a new one
//! after a failover); on a Cluster each master node has one.

pub(crate) mod batch;
pub(crate) mod budget;
pub(crate) mod cluster;
mod eintr;
pub(crate) mod framed;
pub(crate) mod pool;
pub(crate) mod prelude;
pub(crate) mod scan;
pub(crate) mod sentinel;
pub(crate) mod server;
pub(crate) mod shared;
mod wire;

use std::sync::Arc;

use redis::IntoConnectionInfo;

use crate::error::{Error, Result};
use pool::Pool;

/// Where a client's Redis lives, from its URL (or builder calls): one case
/// per kind of deployment. Holds credentials: never printed whole (see
/// [`Deployment::label`]).
#[derive(Clone)]
pub(crate) enum Deployment {
    /// One server (or a proxy in front of one): `redis://`, `rediss://`,
    /// `redis+unix://`.
    Single(redis::ConnectionInfo),
    /// A master found through Sentinel: `redis+sentinel://`,
    /// `rediss+sentinel://`, or [`Builder::sentinel`](crate::Builder::sentinel).
    Sentinel(sentinel::SentinelSpec),
    /// A Redis Cluster, from its seed nodes: `redis+cluster://`,
    /// `rediss+cluster://`, or [`Builder::cluster`](crate::Builder::cluster).
    Cluster(Vec<redis::ConnectionInfo>),
}

impl Deployment {
    /// Parses a client URL, choosing the deployment by its scheme.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the URL does not parse; the message
    /// never repeats the URL (it may hold a password).
    pub(crate) fn parse(url: &str) -> Result<Deployment> {
        if let Some(seeds) = cluster::parse_url(url)? {
            return Ok(Deployment::Cluster(seeds));
        }
        if sentinel::is_sentinel_url(url) {
            return sentinel::SentinelSpec::parse_url(url).map(Deployment::Sentinel);
        }
        check_scheme(url)?;
        url.into_connection_info()
            .map(Deployment::Single)
            .map_err(|e| match Error::redis(e) {
                Error::InvalidArgument(why) => Error::invalid(format!("bad Redis URL: {why}")),
                other => Error::invalid(format!("bad Redis URL: {other}")),
            })
    }

    /// What the client talks to, safe to print: `"<host:port>/<db>"`.
    pub(crate) fn label(&self) -> String {
        match self {
            Deployment::Single(info) => {
                format!("{}/{}", info.addr(), info.redis_settings().db())
            }
            Deployment::Sentinel(spec) => spec.label(),
            Deployment::Cluster(seeds) => format!(
                "cluster {}",
                seeds
                    .iter()
                    .map(|s| s.addr().to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// `true` when connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Deployment::Single(info) => {
                matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
            }
            Deployment::Sentinel(spec) => spec.tls,
            Deployment::Cluster(seeds) => seeds
                .iter()
                .all(|s| matches!(s.addr(), redis::ConnectionAddr::TcpTls { .. })),
        }
    }
}

/// The schemes of a single server's URL (redis-rs's), beside which
/// `redis+sentinel://`, `rediss+sentinel://`, `redis+cluster://` and
/// `rediss+cluster://` choose the other deployments.
const SINGLE_SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

/// Refuses a URL without a scheme redguard knows, saying which schemes
/// there are. The scheme is repeated only when it looks like one (it
/// cannot hold a password then).
fn check_scheme(url: &str) -> Result<()> {
    let known = "use redis://, rediss://, redis+unix://, redis+sentinel://, \
                 rediss+sentinel://, redis+cluster:// or rediss+cluster://";
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::invalid(format!(
            "not a Redis URL: it has no scheme; {known}"
        )));
    };
    if SINGLE_SCHEMES
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
    {
        return Ok(());
    }
    let printable = scheme.len() <= 20
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    Err(Error::invalid(if printable {
        format!("unsupported URL scheme {scheme:?}; {known}")
    } else {
        format!("unsupported URL scheme; {known}")
    }))
}

/// Certificates for TLS connections (`rediss://`), beyond the system roots.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// PEM of the CA that signed the server's certificate (pinned).
    pub(crate) root_ca: Option<Vec<u8>>,
    /// PEM of the client certificate and its key, for mutual TLS.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    pub(crate) fn is_set(&self) -> bool {
        self.root_ca.is_some() || self.client.is_some()
    }

    /// Refuses PEM that cannot be what it is given as: a CA or client
    /// certificate without a `CERTIFICATE` block, a key without a `PRIVATE
    /// KEY` block (a key file given as the CA, `/etc/hostname`). Without
    /// this, the mistake showed only at the first handshake, as a server
    /// whose certificate nobody signed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming which of them is wrong.
    pub(crate) fn check_pem(&self) -> Result<()> {
        let has = |pem: &[u8], label: &str| {
            let begin = format!("-----BEGIN {label}");
            pem.windows(begin.len()).any(|w| w == begin.as_bytes())
        };
        if let Some(ca) = &self.root_ca
            && !has(ca, "CERTIFICATE-----")
        {
            return Err(Error::invalid(
                "the TLS CA (tls_root_ca, --tls-ca) holds no PEM certificate \
                 (-----BEGIN CERTIFICATE-----)",
            ));
        }
        if let Some((cert, key)) = &self.client {
            if !has(cert, "CERTIFICATE-----") {
                return Err(Error::invalid(
                    "the TLS client certificate (--tls-cert) holds no PEM certificate \
                     (-----BEGIN CERTIFICATE-----)",
                ));
            }
            if !has(key, "PRIVATE KEY-----")
                && !has(key, "RSA PRIVATE KEY-----")
                && !has(key, "EC PRIVATE KEY-----")
            {
                return Err(Error::invalid(
                    "the TLS client key (--tls-key) holds no PEM private key \
                     (-----BEGIN PRIVATE KEY-----)",
                ));
            }
        }
        Ok(())
    }
}

/// The connections of one Redis deployment.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one Source per client, made once and kept behind an Arc"
)]
pub(crate) enum Source {
    /// One server (or a proxy in front of one), through a pool.
    Single(Pool),
    /// The master of a Sentinel deployment, followed across failovers.
    Sentinel(sentinel::Sentinel),
    /// A Redis Cluster: one pool per node, routed by slot.
    Cluster(cluster::Cluster),
}

/// Identifies the server a key lives on, so that renewals of keys on the
/// same server can share one round trip.
pub(crate) type NodeId = usize;

/// How a [`Source`]'s connections are made, whatever the deployment.
#[derive(Clone)]
pub(crate) struct ConnectOptions {
    /// The name every connection gets (`CLIENT SETNAME`), if any.
    pub(crate) name: Option<Arc<str>>,
    pub(crate) tls: Tls,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: std::time::Duration,
    pub(crate) response_timeout: std::time::Duration,
    /// How long a call made outside a waiting call keeps trying a Cluster
    /// slot whose master cannot be reached, for the cluster to promote a
    /// replica: a third of the watchdog timeout, the time within which a
    /// failover must end for holders' leases to survive it.
    pub(crate) failover_wait: std::time::Duration,
    /// How long a call waits for a Cluster slot that moves (see
    /// `cluster.rs`): the client's lease.
    pub(crate) slot_move_wait: std::time::Duration,
}

impl Source {
    /// The connections of `deployment`. Connects lazily: nothing is sent
    /// yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the TLS material cannot be used.
    pub(crate) fn open(deployment: &Deployment, options: &ConnectOptions) -> Result<Source> {
        match deployment {
            Deployment::Single(info) => Ok(Source::Single(
                Pool::new(
                    info.clone(),
                    &options.tls,
                    options.pool_size,
                    options.connect_timeout,
                    options.response_timeout,
                )?
                .standalone()
                .named(options.name.clone()),
            )),
            Deployment::Sentinel(spec) => Ok(Source::Sentinel(sentinel::Sentinel::new(
                spec.clone(),
                options.clone(),
            )?)),
            Deployment::Cluster(seeds) => {
                Ok(Source::Cluster(cluster::Cluster::new(seeds, options)?))
            }
        }
    }

    /// Runs `op` on a connection to the server that owns `key`.
    pub(crate) fn with_conn<T>(
        &self,
        key: &[u8],
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        match self {
            Source::Single(pool) => pool.with_conn(op),
            Source::Sentinel(sentinel) => sentinel.with_conn(op),
            Source::Cluster(cluster) => cluster.with_conn(key, op),
        }
    }

    /// Runs `op` on the shared connection of the server that owns `key`
    /// (see [`shared`]). `op` must leave the connection as it found it: no
    /// `MULTI`, no pub/sub, no `WAIT`, no timeouts changed.
    pub(crate) fn with_shared_conn<T>(
        &self,
        key: &[u8],
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        // This thread's prelude (a waiting thread's record entry) rides on
        // its next call to the name's server (see `prelude`).
        let mut op = op;
        let mut rider = prelude::take(self, self.node_of(key));
        let mut op = |conn: &mut dyn redis::ConnectionLike| match rider.take() {
            None => op(conn),
            before => op(&mut framed::Framed::skipping(conn).with_before(before)),
        };
        match self {
            Source::Single(pool) => pool.with_shared_conn(&mut op),
            Source::Sentinel(sentinel) => sentinel.with_shared_conn(&mut op),
            Source::Cluster(cluster) => cluster.with_shared_conn(key, &mut op),
        }
    }

    /// The node that owns `key`.
    pub(crate) fn node_of(&self, key: &[u8]) -> NodeId {
        match self {
            Source::Single(_) | Source::Sentinel(_) => 0,
            Source::Cluster(cluster) => cluster.node_of(key),
        }
    }

    /// Whether node `node` serves any key now: always outside a Cluster.
    pub(crate) fn serves_slots(&self, node: NodeId) -> bool {
        match self {
            Source::Single(_) | Source::Sentinel(_) => true,
            Source::Cluster(cluster) => cluster.serves_slots(node),
        }
    }

    /// Runs `op` on a connection to node `node` (as returned by
    /// [`Source::node_of`]).
    pub(crate) fn with_node_conn<T>(
        &self,
        node: NodeId,
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        match self {
            Source::Single(pool) => pool.with_conn(op),
            Source::Sentinel(sentinel) => sentinel.with_conn(op),
            Source::Cluster(cluster) => cluster.with_node_conn(node, op),
        }
    }

    /// A dedicated new connection to node `node` (the watchdog's watch
    /// connection of that node).
    pub(crate) fn node_connection(&self, node: NodeId) -> Result<redis::Connection> {
        match self {
            Source::Single(pool) => pool.connect(),
            Source::Sentinel(sentinel) => sentinel.connect(),
            Source::Cluster(cluster) => cluster.node_connection(node),
        }
    }

    /// A dedicated new connection to node `node` for sharded pub/sub: RESP3
    /// on a cluster, so that no frame is lost after a read that timed out.
    pub(crate) fn sharded_connection(&self, node: NodeId) -> Result<redis::Connection> {
        match self {
            Source::Cluster(cluster) => cluster.sharded_connection(node),
            _ => self.node_connection(node),
        }
    }

    /// Asks a cluster for its slot map again (after a node refused a
    /// connection); nothing for the other deployments.
    pub(crate) fn refresh_topology(&self) {
        if let Source::Cluster(cluster) = self {
            cluster.refresh_map();
        }
    }

    /// Whether messages about `key` go out with sharded pub/sub: on a
    /// Cluster node that has it (Redis 7+, Valkey), `true`; on a node
    /// without it (Redis 6.2), and outside a Cluster, `false`. Each node's
    /// version is learned once, by its pool's first connection; a node not
    /// asked yet counts as having it (the scripts that `SPUBLISH` fall back
    /// to `PUBLISH` by themselves).
    pub(crate) fn sharded_publish(&self, key: &[u8]) -> bool {
        match self {
            Source::Cluster(cluster) => cluster.sharded_pubsub(cluster.node_of(key)),
            Source::Single(_) | Source::Sentinel(_) => false,
        }
    }

    /// Whether node `node` has sharded pub/sub, as far as its pool knows
    /// (`true` until it learned otherwise). Only a Cluster uses it.
    pub(crate) fn sharded_pubsub(&self, node: NodeId) -> bool {
        match self {
            Source::Cluster(cluster) => cluster.sharded_pubsub(node),
            Source::Single(_) | Source::Sentinel(_) => true,
        }
    }

    /// `true` for a Redis Cluster: a multi-key call must stay in one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Source::Cluster(_))
    }

    /// Checks that a count-down latch's keys share a slot on a Cluster.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] saying why, on a Cluster only.
    pub(crate) fn check_latch_name(&self, name: &[u8]) -> Result<()> {
        match self {
            Source::Cluster(_) => match crate::keys::latch_cluster_conflict(name) {
                Some(why) => Err(Error::InvalidArgument(why)),
                None => Ok(()),
            },
            Source::Single(_) | Source::Sentinel(_) => Ok(()),
        }
    }

    /// On a Cluster, the node where redguard clients' classic pub/sub
    /// connections sit (see `Cluster::classic_pubsub_node`); `None`
    /// elsewhere.
    pub(crate) fn classic_pubsub_node(&self) -> Option<NodeId> {
        match self {
            Source::Cluster(cluster) => cluster.classic_pubsub_node(),
            Source::Single(_) | Source::Sentinel(_) => None,
        }
    }

    /// A dedicated new connection for pub/sub.
    pub(crate) fn pubsub_connection(&self) -> Result<redis::Connection> {
        match self {
            Source::Single(pool) => pool.connect(),
            Source::Sentinel(sentinel) => sentinel.connect(),
            Source::Cluster(cluster) => cluster.pubsub_connection(),
        }
    }

    /// The masters of the deployment: one for a single server or Sentinel,
    /// every master serving slots for a Cluster.
    ///
    /// # Errors
    ///
    /// A Cluster whose slot map cannot be had.
    pub(crate) fn masters(&self) -> Result<Vec<NodeId>> {
        match self {
            Source::Single(_) | Source::Sentinel(_) => Ok(vec![0]),
            Source::Cluster(cluster) => cluster.masters(),
        }
    }

    /// Open pooled connections (idle or in use).
    pub(crate) fn open_connections(&self) -> usize {
        match self {
            Source::Single(pool) => pool.open_connections(),
            Source::Sentinel(sentinel) => sentinel.open_connections(),
            Source::Cluster(cluster) => cluster.open_connections(),
        }
    }

    /// Changes whenever the node serving the deployment changes (a Sentinel
    /// failover): a long-lived connection (pub/sub) made under another
    /// value should reconnect. Always 0 for a single server.
    pub(crate) fn generation(&self) -> u64 {
        match self {
            // A cluster's pub/sub connection breaks with its node.
            Source::Single(_) | Source::Cluster(_) => 0,
            Source::Sentinel(sentinel) => sentinel.generation(),
        }
    }
}
