//! Renewals a Redis Cluster turned away. A batch goes to the node that
//! served its keys' slots when it was scheduled; after a failover or a slot
//! migration, some of its keys answer `MOVED`, `ASK` or `TRYAGAIN`, and a
//! node that is gone refuses the connection or answers `CLUSTERDOWN`.
//!
//! The slot map is then asked for again (once per batch), so that the next
//! batches go to the new owners. The renewals that were redirected are
//! renewed again at once, one by one through the cluster's routing (which
//! follows `MOVED` and `ASK`), so that a failover or a migration costs them
//! no renewal; those that failed for a node gone keep the watchdog's usual
//! retry until their lease runs out.

use std::sync::Arc;

use super::{Entry, Outcome};
use crate::connection::Source;
use crate::error::{ClusterHint, Error, Result};
use crate::scripts::{self, SyncRenewal};

/// Follows the redirections among `results` (see the module docs).
pub(super) fn follow(source: &Source, results: &mut [(Entry, Outcome)]) {
    let Some(cluster) = source.cluster() else {
        return;
    };
    let hint = |o: &Outcome| match o {
        Outcome::Failed(e) => e.cluster_hint(),
        _ => ClusterHint::None,
    };
    if results.iter().all(|(_, o)| hint(o) == ClusterHint::None) {
        return;
    }
    cluster.reroute();
    for (entry, outcome) in results.iter_mut() {
        if !matches!(
            hint(outcome),
            ClusterHint::Moved(_) | ClusterHint::Ask(_) | ClusterHint::TryAgain
        ) {
            continue;
        }
        *outcome = match renew_one(source, entry) {
            Ok(true) if entry.renew => Outcome::Renewed,
            Ok(true) => Outcome::Held,
            Ok(false) | Err(Error::WrongType { .. }) => Outcome::Gone,
            Err(e) => Outcome::Failed(Arc::new(e)),
        };
    }
}

/// Renews (or, for a fixed lease, looks up) one entry on the node that
/// serves its key now.
fn renew_one(source: &Source, entry: &Entry) -> Result<bool> {
    source.with_conn(&entry.key, |conn| {
        if !entry.renew {
            return redis::cmd("HEXISTS")
                .arg(&entry.key[..])
                .arg(&*entry.holder)
                .query(conn)
                .map_err(|e| Error::from_redis(e, &entry.key));
        }
        match &entry.sync {
            Some(hold) => {
                let renewal = SyncRenewal {
                    hold,
                    key: &entry.key,
                    holder: &entry.holder,
                    lease_ms: entry.lease_ms(),
                };
                scripts::renew_sync_batch(conn, &[renewal])?
                    .pop()
                    .unwrap_or_else(|| Err(Error::Protocol("renewal without a reply".into())))
            }
            None => scripts::renew(conn, &entry.key, &entry.holder, entry.lease_ms()),
        }
    })
}
