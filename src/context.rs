//! [`ClientContext`]: what one client shares with the background threads
//! about its holds (the lost-lease callback, its holder record, its metrics
//! labels, and where its subscriber listens for force unlocks), shared by
//! the client and every watchdog entry of it. No I/O.
//!
//! The watchdog reaches the client's subscriber only through
//! [`HoldListener`], set when the subscriber starts: neither thread's
//! module imports the other.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::holder::HolderId;
use crate::lost::{self, HoldKind, LossReason, LostCallback, LostLease};
use crate::metrics::Labels;
use crate::record::RecordSpec;

/// One client's context, shared with its watchdog entries.
#[derive(Default)]
pub(crate) struct ClientContext {
    /// [`Builder::on_lease_lost`](crate::Builder::on_lease_lost).
    pub(crate) on_lost: Option<LostCallback>,
    /// What the client's holder records say; `None` when it keeps none
    /// ([`Builder::holder_record`](crate::Builder::holder_record)).
    pub(crate) record: Option<Arc<RecordSpec>>,
    /// [`Builder::metrics_lock_names`](crate::Builder::metrics_lock_names).
    pub(crate) metrics_names: bool,
    /// The client's subscriber, to which the watchdog hands the holds to
    /// listen for (a force unlock); set when the subscriber starts.
    pub(crate) listener: std::sync::OnceLock<Arc<dyn HoldListener>>,
}

/// Where the watchdog hands over the holds that lasted
/// [`LISTEN_AFTER`](crate::lease::LISTEN_AFTER): the client's subscriber
/// then listens on their lock's channel for a force unlock.
pub(crate) trait HoldListener:
    Send + Sync + std::panic::RefUnwindSafe + std::panic::UnwindSafe
{
    /// Listens for a force unlock of `state`'s hold on `channel`. No I/O.
    fn listen(&self, channel: Arc<[u8]>, state: Arc<crate::lease::LeaseState>);
}

impl fmt::Debug for ClientContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientContext")
            .field("on_lost", &self.on_lost.is_some())
            .field("record", &self.record.is_some())
            .finish()
    }
}

impl ClientContext {
    /// The metrics labels of an event of lock `name` of `kind`.
    pub(crate) fn labels<'a>(
        &self,
        kind: impl Into<crate::metrics::Kind>,
        name: &'a [u8],
    ) -> Labels<'a> {
        Labels {
            kind: kind.into(),
            name: self.metrics_names.then_some(name),
        }
    }

    /// Tells the world that the lease of `holder` on `name` is lost: a
    /// warning in the log, and the callback when one is set. Called by the
    /// watchdog thread, which holds no lock meanwhile.
    pub(crate) fn lease_lost(
        &self,
        name: &Arc<[u8]>,
        kind: HoldKind,
        holder: &Arc<str>,
        reason: LossReason,
    ) {
        crate::metrics::lost(self.labels(kind, name), reason);
        log::warn!(
            "redguard: lease of {kind} lock {:?} held by {holder} lost: {reason}",
            String::from_utf8_lossy(name)
        );
        if let Some(callback) = &self.on_lost {
            let lost = LostLease {
                name: name.clone(),
                kind,
                holder: HolderId::from_stored(holder.clone()),
                noticed_at: SystemTime::now(),
                reason,
            };
            lost::notify(callback, &lost);
        }
    }
}
