//! [`LostLease`]: what [`Builder::on_lease_lost`](crate::Builder::on_lease_lost)
//! is told when the watchdog finds a lease gone, and [`HoldKind`], the kind
//! of hold a lease belongs to. No I/O.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::holder::HolderId;

/// The kind of hold a lease belongs to: which handle took it.
///
/// Used in [`LostLease`], in log lines and as the `kind` label of the
/// metrics (feature `metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldKind {
    /// A reentrant lock ([`Client::lock`](crate::Client::lock)).
    Reentrant,
    /// A fair lock ([`Client::fair_lock`](crate::Client::fair_lock)).
    Fair,
    /// A fenced lock ([`Client::fenced_lock`](crate::Client::fenced_lock)).
    Fenced,
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// A permit of an expiring semaphore
    /// ([`Client::expiring_semaphore`](crate::Client::expiring_semaphore)).
    Permit,
    /// A run of a run-once key ([`Client::once`](crate::Client::once)): a
    /// fenced lock in layout.
    Once,
}

impl HoldKind {
    /// A short lowercase name: `reentrant`, `fair`, `fenced`, `read`,
    /// `write`, `permit`, `once`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Reentrant => "reentrant",
            HoldKind::Fair => "fair",
            HoldKind::Fenced => "fenced",
            HoldKind::Read => "read",
            HoldKind::Write => "write",
            HoldKind::Permit => "permit",
            HoldKind::Once => "once",
        }
    }

    /// The kind named `name` ([`HoldKind::as_str`]'s names).
    pub(crate) fn from_name(name: &str) -> Option<HoldKind> {
        [
            HoldKind::Reentrant,
            HoldKind::Fair,
            HoldKind::Fenced,
            HoldKind::Read,
            HoldKind::Write,
            HoldKind::Permit,
            HoldKind::Once,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

impl fmt::Display for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the watchdog considers a lease lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal (or, for a fixed lease, a look-up) found that the holder no
    /// longer holds the lock: the key was deleted (`redguard unlock
    /// --force`, `DEL`), taken by another holder, or expired on the server
    /// while this client still counted it valid.
    RenewalRefused,
    /// The server restarted (or came back after being unreachable) since
    /// the lease was last renewed, and the lock was not there any more.
    Restart,
    /// The lock key was gone and the server evicted keys since the lease was
    /// last renewed (`maxmemory` with an evicting policy).
    Evicted,
    /// No renewal succeeded before the watchdog-renewed lease ran out on
    /// this client's clock (Redis unreachable or too slow for a whole
    /// lease, a partition).
    DeadlinePassed,
    /// A fixed lease ([`Lock::with_lease`](crate::Lock::with_lease), never
    /// renewed) ran out at its end while its guard was alive.
    LeaseEnded,
}

impl LossReason {
    /// A short lowercase name: `renewal_refused`, `restart`, `evicted`,
    /// `deadline_passed`, `lease_ended`.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::RenewalRefused => "renewal_refused",
            LossReason::Restart => "restart",
            LossReason::Evicted => "evicted",
            LossReason::DeadlinePassed => "deadline_passed",
            LossReason::LeaseEnded => "lease_ended",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::RenewalRefused => "the renewal found it no longer held",
            LossReason::Restart => "the server restarted without it",
            LossReason::Evicted => "the server evicted it",
            LossReason::DeadlinePassed => "no renewal succeeded before it ran out",
            LossReason::LeaseEnded => "the fixed lease ran out at its end",
        })
    }
}

/// A lease the watchdog found lost, as given to the callback set with
/// [`Builder::on_lease_lost`](crate::Builder::on_lease_lost).
///
/// The guard of the hold reports the same loss from
/// [`LockGuard::check`](crate::LockGuard::check).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostLease {
    /// The lock name (for a permit: the semaphore's name).
    pub name: Arc<[u8]>,
    /// Which kind of hold it was.
    pub kind: HoldKind,
    /// The holder id as stored in Redis: `<client uuid>:<thread id>`, with
    /// a `:write` suffix for the write side of a read-write lock; for a
    /// permit, the permit id.
    pub holder: HolderId,
    /// When the watchdog noticed the loss (this machine's wall clock).
    pub noticed_at: SystemTime,
    /// Why the lease is considered lost.
    pub reason: LossReason,
}

impl LostLease {
    /// The lock name as text (invalid UTF-8 replaced).
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// The callback of [`Builder::on_lease_lost`](crate::Builder::on_lease_lost).
///
/// Unwind-safe whatever it captures, so that `Client` and every handle stay
/// `UnwindSafe` and `RefUnwindSafe` (a `catch_unwind(|| client.lock(..)…)`
/// compiles): the callback runs only in [`notify`], inside `catch_unwind`,
/// on the watchdog's thread; a panic there is logged and leaves nothing of
/// the client half-changed, and no caller's `catch_unwind` ever sees it.
#[derive(Clone)]
pub(crate) struct LostCallback(Arc<dyn Fn(&LostLease) + Send + Sync + 'static>);

impl LostCallback {
    pub(crate) fn new(callback: impl Fn(&LostLease) + Send + Sync + 'static) -> LostCallback {
        LostCallback(Arc::new(callback))
    }
}

impl std::panic::UnwindSafe for LostCallback {}
impl std::panic::RefUnwindSafe for LostCallback {}

/// Calls `callback` with `lost`; a panic in it is caught and logged, so
/// that it cannot stop the watchdog.
pub(crate) fn notify(callback: &LostCallback, lost: &LostLease) {
    let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (callback.0)(lost)));
    if call.is_err() {
        log::error!(
            "redguard: the on_lease_lost callback panicked for lock {:?} held by {}",
            lost.name_lossy(),
            lost.holder
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn lost() -> LostLease {
        LostLease {
            name: Arc::from(&b"job"[..]),
            kind: HoldKind::Fair,
            holder: HolderId::from_stored("c:1"),
            noticed_at: SystemTime::now(),
            reason: LossReason::Evicted,
        }
    }

    #[test]
    fn a_panicking_callback_is_contained() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let callback = LostCallback::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            panic!("user code");
        });
        notify(&callback, &lost());
        notify(&callback, &lost());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn names_are_stable() {
        assert_eq!(HoldKind::Fair.as_str(), "fair");
        assert_eq!(HoldKind::from_name("once"), Some(HoldKind::Once));
        assert_eq!(HoldKind::from_name("fenced"), Some(HoldKind::Fenced));
        assert_eq!(HoldKind::from_name("lock"), None);
        assert_eq!(LossReason::DeadlinePassed.as_str(), "deadline_passed");
        assert_eq!(lost().name_lossy(), "job");
    }
}
