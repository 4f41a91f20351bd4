//! Where connections come from: "a connection for this key". Lock code never
//! sees the deployment (single server today; Sentinel and Cluster plug in
//! here as further cases).

use crate::error::Result;
use crate::pool::Pool;

/// The connections of one Redis deployment.
#[derive(Debug)]
pub(crate) enum Source {
    /// One server (or a proxy in front of one), through a pool.
    Single(Pool),
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
        }
    }

    /// The node that owns `key`.
    pub(crate) fn node_of(&self, _key: &[u8]) -> NodeId {
        match self {
            Source::Single(_) => 0,
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
        }
    }

    /// A dedicated new connection for pub/sub.
    pub(crate) fn pubsub_connection(&self) -> Result<redis::Connection> {
        match self {
            Source::Single(pool) => pool.connect(),
        }
    }

    /// Open pooled connections (idle or in use).
    pub(crate) fn open_connections(&self) -> usize {
        match self {
            Source::Single(pool) => pool.open_connections(),
        }
    }
}
