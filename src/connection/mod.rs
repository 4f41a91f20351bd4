//! Where connections come from: "a connection for this key". Lock code never
//! sees the deployment: a single server today, through the crate's own
//! pool; Sentinel and Cluster are further cases of [`Source`].

pub(crate) mod pool;
pub(crate) mod sentinel;

use crate::error::Result;
use pool::Pool;

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
}

/// Identifies the server a key lives on, so that renewals of keys on the
/// same server can share one round trip.
pub(crate) type NodeId = usize;

impl Source {
    /// Runs `op` on a connection to the server that owns `key`.
    pub(crate) fn with_conn<T>(
        &self,
        _key: &[u8],
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        match self {
            Source::Single(pool) => pool.with_conn(op),
            Source::Sentinel(sentinel) => sentinel.with_conn(op),
        }
    }

    /// The node that owns `key`.
    pub(crate) fn node_of(&self, _key: &[u8]) -> NodeId {
        match self {
            Source::Single(_) | Source::Sentinel(_) => 0,
        }
    }

    /// Runs `op` on a connection to node `node` (as returned by
    /// [`Source::node_of`]).
    pub(crate) fn with_node_conn<T>(
        &self,
        _node: NodeId,
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        match self {
            Source::Single(pool) => pool.with_conn(op),
            Source::Sentinel(sentinel) => sentinel.with_conn(op),
        }
    }

    /// A dedicated new connection for pub/sub.
    pub(crate) fn pubsub_connection(&self) -> Result<redis::Connection> {
        match self {
            Source::Single(pool) => pool.connect(),
            Source::Sentinel(sentinel) => sentinel.connect(),
        }
    }

    /// Open pooled connections (idle or in use).
    pub(crate) fn open_connections(&self) -> usize {
        match self {
            Source::Single(pool) => pool.open_connections(),
            Source::Sentinel(sentinel) => sentinel.open_connections(),
        }
    }

    /// Changes whenever the node serving the deployment changes (a Sentinel
    /// failover): a long-lived connection (pub/sub) made under another
    /// value should reconnect. Always 0 for a single server.
    pub(crate) fn generation(&self) -> u64 {
        match self {
            Source::Single(_) => 0,
            Source::Sentinel(sentinel) => sentinel.generation(),
        }
    }
}
