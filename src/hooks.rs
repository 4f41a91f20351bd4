//! [`Hooks`]: what one client has asked to be told about its holds (the
//! lost-lease callback), shared by the client and every watchdog entry of
//! it. No I/O.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::holder::HolderId;
use crate::lost::{self, HoldKind, LossReason, LostCallback, LostLease};
use crate::metrics::Labels;
use crate::record::RecordSpec;

/// One client's hooks.
#[derive(Default)]
pub(crate) struct Hooks {
    /// [`Builder::on_lease_lost`](crate::Builder::on_lease_lost).
    pub(crate) on_lost: Option<LostCallback>,
    /// What the client's holder records say; `None` when it keeps none
    /// ([`Builder::holder_record`](crate::Builder::holder_record)).
    pub(crate) record: Option<Arc<RecordSpec>>,
    /// [`Builder::metrics_lock_names`](crate::Builder::metrics_lock_names).
    pub(crate) metrics_names: bool,
    /// The client's subscriber, to which the watchdog hands the holds to
    /// listen for (a force unlock); set when the subscriber starts.
    pub(crate) listener: std::sync::OnceLock<crate::subscriber::Listener>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("on_lost", &self.on_lost.is_some())
            .field("record", &self.record.is_some())
            .finish()
    }
}

impl Hooks {
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
