//! What [`MultiLock`](super::MultiLock) and [`RedLock`](super::RedLock)
//! share: their members in canonical order, the check of a member set,
//! and releasing many guards.

use crate::error::{Error, Result};
use crate::lock::{Lock, LockGuard};

/// One lock of a multi-lock or RedLock, with the server it lives on.
#[derive(Clone)]
pub(crate) struct Member {
    pub(crate) lock: Lock,
    pub(crate) server: String,
}

impl Member {
    /// `"<name> on <server>"`: how errors name this lock.
    pub(crate) fn label(&self) -> String {
        label(&self.lock)
    }
}

/// `"<name> on <server>"`: how errors name a lock of a multi-lock.
fn label(lock: &Lock) -> String {
    format!(
        "{} on {}",
        String::from_utf8_lossy(lock.name()),
        lock.client().server()
    )
}

/// The locks sorted by (server, name): the canonical order.
pub(crate) fn canonical(locks: impl IntoIterator<Item = Lock>) -> Vec<Member> {
    let mut members: Vec<Member> = locks
        .into_iter()
        .map(|lock| Member {
            server: lock.client().server(),
            lock,
        })
        .collect();
    members.sort_by(|a, b| {
        (a.server.as_str(), a.lock.name()).cmp(&(b.server.as_str(), b.lock.name()))
    });
    members
}

/// Refuses an empty set and two different clients naming the same lock on
/// the same server (`what` names the kind of lock in the message).
pub(crate) fn check_members(members: &[Member], what: &str) -> Result<()> {
    if members.is_empty() {
        return Err(Error::invalid(format!("{what} over no locks")));
    }
    for pair in members.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.server == b.server
            && a.lock.name() == b.lock.name()
            && !a.lock.client().same_client(b.lock.client())
        {
            return Err(Error::invalid(format!(
                "{what} names lock {} twice through different clients",
                a.label()
            )));
        }
    }
    Ok(())
}

/// Guards of several locks, taken in canonical order and released last
/// first: on drop (failures logged by each guard; the lease is the
/// backstop), or by [`Held::unlock`], which reports every failure.
#[derive(Default)]
pub(crate) struct Held(Vec<LockGuard>);

impl Held {
    pub(crate) fn push(&mut self, guard: LockGuard) {
        self.0.push(guard);
    }

    pub(crate) fn guards(&self) -> &[LockGuard] {
        &self.0
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Releases every guard, last taken first; a failure on one does not
    /// stop the others.
    ///
    /// # Errors
    ///
    /// [`Error::Unlock`] listing each lock whose release failed.
    pub(crate) fn unlock(mut self) -> Result<()> {
        let total = self.0.len();
        let mut failures = Vec::new();
        while let Some(guard) = self.0.pop() {
            let label = label(guard.lock());
            if let Err(e) = guard.unlock() {
                failures.push((label, e));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            failures.reverse();
            Err(Error::Unlock { total, failures })
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        while let Some(guard) = self.0.pop() {
            drop(guard);
        }
    }
}
