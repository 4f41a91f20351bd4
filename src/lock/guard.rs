//! [`LockGuard`]: one hold of a [`Lock`]; dropping it releases the hold.

use std::fmt;
use std::marker::PhantomData;

use crate::holder::NotSend;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::lease::{self, LeaseState, lease_ms};
use crate::lock::{FencingToken, Lock, thread_holds};
use crate::scripts::Release;
use crate::watchdog::retried::Handle;

/// One hold of a [`Lock`], returned by [`Lock::lock`] and friends.
///
/// The guard owns a clone of its (cheap) [`Lock`] handle, so a function can
/// take a lock and return the guard:
///
/// ```no_run
/// fn take(client: &redguard::Client) -> redguard::Result<redguard::LockGuard> {
///     client.lock("report:nightly").lock()
/// }
/// ```
///
/// Dropping the guard releases the hold: a best-effort unlock bounded by the
/// client's response timeout, whose failure is logged, never panicking; the
/// lease is the backstop. Call [`LockGuard::unlock`] to see the error.
///
/// The guard is `!Send`: the hold belongs to the thread that took it (the
/// holder id contains the thread id), as with `std::sync::MutexGuard`. Like
/// `MutexGuard` it is `Sync`, so a scoped thread may look at a borrowed
/// guard:
///
/// ```no_run
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let guard = client.lock("report:nightly").lock()?;
/// std::thread::scope(|s| {
///     s.spawn(|| guard.check()).join().expect("no panic")
/// })?;
/// # Ok::<(), redguard::Error>(())
/// ```
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// let guard = client.lock("x").lock().unwrap();
/// assert_send(guard);
/// ```
///
/// A lease can be lost while the guard lives (a renewal found the key gone,
/// Redis restarted empty, the process stalled past its lease): use
/// [`LockGuard::check`] before acting on the lock's protection, or better,
/// fencing tokens.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    lock: Lock,
    holder: HolderId,
    state: Arc<LeaseState>,
    lease_ms: u64,
    renewed: bool,
    acquired_at: Instant,
    token: Option<FencingToken>,
    done: bool,
    /// The retry of a release that met an unreachable or changing server,
    /// with that failure, for [`LockGuard::unlock`] to wait on.
    retry: Option<(Handle, String)>,
    _not_send: NotSend,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &String::from_utf8_lossy(self.lock.name()))
            .field("holder", &self.holder)
            .field("watchdog", &self.renewed)
            .field("fencing_token", &self.token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        lock: Lock,
        holder: HolderId,
        state: Arc<LeaseState>,
        lease_ms: u64,
        renewed: bool,
        acquired_at: Instant,
        token: Option<u64>,
    ) -> LockGuard {
        LockGuard {
            lock,
            holder,
            state,
            lease_ms,
            renewed,
            acquired_at,
            token: token.map(FencingToken::new),
            done: false,
            retry: None,
            _not_send: PhantomData,
        }
    }

    /// The lock this guard holds.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The fencing token of this grant, for a lock made by
    /// [`Client::fenced_lock`](crate::Client::fenced_lock): larger than the
    /// token of every earlier grant of the lock, re-entries included
    /// (Redisson's `RFencedLock`). Pass it with every write made under the
    /// lock and let the storage refuse older ones
    /// ([`Client::fenced_set`](crate::Client::fenced_set)). `None` for the
    /// other kinds, which draw no token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.fenced_lock("invoice:7").lock()?;
    /// if let Some(token) = guard.fencing_token() {
    ///     let written = client.fenced_set("{invoice:7}:pdf", b"...", token)?;
    ///     assert!(written.is_written());
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.token
    }

    /// The holder id under which the hold is stored.
    pub fn holder_id(&self) -> &HolderId {
        &self.holder
    }

    /// When the acquire script that granted this hold was sent.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// `true` when the watchdog renews this lock's lease.
    pub fn is_renewed(&self) -> bool {
        self.renewed
    }

    /// `true` when the lease is known to be lost, or its validity on this
    /// client's clock ran out (no renewal succeeded in time), or the client
    /// was shut down ([`Client::shutdown`](crate::Client::shutdown): it
    /// released the lock, or stopped renewing it).
    pub fn is_lost(&self) -> bool {
        self.lock.client().is_shut_down() || self.state.is_lost_at(Instant::now())
    }

    /// How much longer the lease is known to be valid on this client's
    /// clock: the last successful renewal's send time + lease − drift
    /// (1 % + 2 ms), minus now. Zero once lost.
    pub fn valid_for(&self) -> Duration {
        self.state.valid_for()
    }

    /// `Ok(())` while the lease is held.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when a renewal found the lock gone or taken, when
    /// renewals failed until the lease ran out, when a fixed lease expired,
    /// or when the client was shut down and released it. Purely local: no
    /// round trip.
    pub fn check(&self) -> Result<()> {
        // From the moment `shutdown` begins: it releases the lock (or stops
        // renewing it) whatever its round trips still do.
        if self.lock.client().is_shut_down() {
            return Err(Error::lost(self.lock.name()));
        }
        self.state.check(self.lock.name())
    }

    /// Sets the lease to `lease` from now, if this holder still holds the
    /// lock (Redisson users have long asked for this). Meant for fixed-lease
    /// locks; on a watchdog-renewed lock the next renewal sets the lease
    /// back to the watchdog timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero or too long lease,
    /// [`Error::LockLost`] when the lease is already known lost, or when the
    /// extension was answered only after the lease had run out on this
    /// client's clock (the guard counts as lost from its end on, so the
    /// extension is given back: every hold of this holder is released),
    /// [`Error::NotHeld`] when Redis says this holder no longer holds the
    /// lock (the guard is then marked lost), [`Error::NotReplicated`] when
    /// fewer replicas than the lock's
    /// [`min_replica_acks`](crate::Lock::min_replica_acks) acknowledged the
    /// extension (the master has it, but the guard's lease is not counted
    /// as extended), and connection, timeout and server errors.
    ///
    /// An extension that fails because the master is gone or changing (see
    /// [`Client::await_releases`](crate::Client::await_releases) for which
    /// errors) is retried by the watchdog against the new master until it
    /// goes through or the lease runs out; this call waits for that, and
    /// then returns its outcome (the last error when the lease ran out).
    pub fn extend(&self, lease: Duration) -> Result<()> {
        let ms = lease_ms(lease)?;
        if self.state.is_marked_lost() {
            return Err(Error::lost(self.lock.name()));
        }
        let until = self.state.valid_until();
        let (lock, holder, state) = (self.lock.clone(), self.holder.clone(), self.state.clone());
        let extend = move || {
            let sent = Instant::now();
            if !lock.renew(&holder, ms)? {
                state.mark_lost();
                return Err(Error::not_held(lock.name()));
            }
            if state.set_valid_until(lease::valid_until(sent, lease), Instant::now()) {
                return Ok(());
            }
            // Answered after the lease ended on this client's clock (a
            // retry across a failover, a frozen server): the guard counts
            // as lost from then on, so the key must not stay held for the
            // new lease with nobody to release it.
            state.mark_lost();
            lock.give_back_lost(&holder);
            Err(Error::lost(lock.name()))
        };
        match extend() {
            Err(e) if e.is_failover() => {
                let client = self.lock.client();
                let retry = self.lock.submit_retry(
                    format!(
                        "extension of lock {:?}",
                        String::from_utf8_lossy(self.lock.name())
                    ),
                    Duration::from_millis(self.lease_ms),
                    until,
                    e,
                    extend,
                );
                // The retry ends by `until`; the bound only guards against
                // a worker held up by a frozen server.
                let response = client.config().response_timeout;
                retry.wait_until(Some(until + response * 2));
                retry.take_outcome().unwrap_or_else(|| {
                    // Still at work: what it does next may give the hold
                    // back (above), which this thread's next acquire of
                    // the lock must not meet.
                    thread_holds::releasing(client.id().as_u128(), self.lock.hold_key(), retry);
                    Err(Error::Timeout {
                        kind: crate::error::TimeoutKind::Lease,
                        limit: Duration::from_millis(self.lease_ms),
                        server: None,
                        about: Some(format!(
                            "the extension of lock {:?} was still being retried when its lease \
                             ended",
                            String::from_utf8_lossy(self.lock.name())
                        )),
                    })
                })
            }
            other => other,
        }
    }

    /// Releases this hold now and reports the outcome.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the lease was already known lost (nothing is
    /// sent: the key may belong to someone else by now),
    /// [`Error::NotHeld`] when Redis says this holder no longer holds the
    /// lock (expired, deleted, or taken by another holder; that holder is
    /// not touched), and connection, timeout and server errors (the lease
    /// then expires by itself: the watchdog stops renewing it).
    ///
    /// `Ok(())` only when Redis confirmed the release. On a Cluster, a
    /// release whose slot is migrating with the lock's keys split between
    /// the two nodes (`TRYAGAIN`) is sent again until the lease ends; one
    /// that never went through is an error, never `Ok`. A release that
    /// fails because the server is unreachable or changing (down, paused,
    /// restarting, failing over) is handed to the watchdog, which retries
    /// it against the (new) master until it goes through or the lease runs
    /// out; `unlock` waits for that retry for at most one
    /// [`response_timeout`](crate::Builder::response_timeout), and returns
    /// [`Error::ReleasePending`] when it has not gone through by then (it
    /// goes on in the background:
    /// [`Client::await_releases`](crate::Client::await_releases) waits for
    /// it). This thread's next acquire of the lock waits for that retry
    /// first. A guard's drop hands the release over the same way without
    /// waiting.
    ///
    /// # Errors
    ///
    /// As above, and [`Error::ReleasePending`] when the release was not
    /// confirmed within one response timeout of its retry.
    pub fn unlock(mut self) -> Result<()> {
        let outcome = self.release();
        let Some((retry, cause)) = self.retry.take() else {
            return outcome;
        };
        let response = self.lock.client().config().response_timeout;
        retry.confirm(response, self.lock.name(), self.state.valid_until(), cause)
    }

    /// Ends this hold with `script` instead of the lock's release script
    /// (a run-once completion records and releases in one step); `script`
    /// answers as the release script would. Not sent when the lease is
    /// already known lost.
    pub(crate) fn release_with(
        mut self,
        script: impl FnOnce(&Lock, &HolderId) -> Result<Release>,
    ) -> Result<()> {
        self.release_by(script, false)
    }

    fn release(&mut self) -> Result<()> {
        let ms = self.lease_ms;
        self.release_by(|lock, holder| lock.release(holder, ms), true)
    }

    /// Ends this thread's hold with `script`. A last hold whose release
    /// met a failover is handed to the watchdog when `retry` is set (see
    /// [`LockGuard::unlock`]).
    fn release_by(
        &mut self,
        script: impl FnOnce(&Lock, &HolderId) -> Result<Release>,
        retry: bool,
    ) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let client = self.lock.client().id().as_u128();
        let name = self.lock.name();
        let left = thread_holds::leave(client, self.lock.hold_key(), &self.state);
        if self.state.is_marked_lost() {
            return Err(Error::lost(name));
        }
        if left == 0 {
            // A loss the watchdog sees from now on may be this release.
            self.state.begin_release();
        }
        let until = self.state.valid_until();
        let valid_when_sent = Instant::now() < until;
        // A slot that moves is waited for until the lease ends, not longer.
        let reply =
            match crate::connection::budget::within(until, || script(&self.lock, &self.holder)) {
                // Written whole and run, its reply lost to a stopped and
                // continued process: read what it did rather than send it
                // again (a second release would find the lock gone and call a
                // valid hold lost).
                Err(e) if e.is_interrupted() => {
                    match self
                        .lock
                        .settle_interrupted_release(&self.holder, valid_when_sent)
                    {
                        Some(settled) => Ok(settled),
                        None => Err(e),
                    }
                }
                other => other,
            };
        let outcome = match reply {
            Ok(Release::Released) => {
                self.state.mark_released();
                let (kind, held) = (self.lock.hold_kind(), self.state.held_since().elapsed());
                crate::metrics::released(
                    self.lock.client().context().labels(kind, name),
                    Some(held),
                );
                log::debug!(
                    "redguard: released {kind} lock {:?} held by {} for {held:?}",
                    String::from_utf8_lossy(name),
                    self.holder
                );
                Ok(())
            }
            Ok(Release::StillHeld) if left == 0 => {
                // Redis counts more holds than this thread knows of (a grant
                // whose reply was lost): none of them has a guard, drop them.
                let all = self.lock.release_all(&self.holder);
                self.state.mark_released();
                match all {
                    Err(e) if retry && e.is_failover() => {
                        self.retry_release(until, e);
                        Ok(())
                    }
                    all => all.map(|_| ()),
                }
            }
            Ok(Release::StillHeld) => Ok(()),
            Ok(Release::NotHeld) => {
                self.state.mark_lost();
                Err(Error::not_held(name))
            }
            Err(e) => {
                if left == 0 {
                    // Stop renewing: the lease is the backstop now.
                    self.state.mark_released();
                }
                if left == 0 && retry && e.is_failover() {
                    self.retry_release(until, e);
                    Ok(())
                } else {
                    Err(e)
                }
            }
        };
        if left == 0 || self.state.is_marked_lost() || self.state.is_released() {
            thread_holds::forget(client, self.lock.hold_key(), &self.state);
        }
        outcome
    }
}

impl LockGuard {
    /// Hands the release of this thread's last hold, which met a failover
    /// (`err`), to the watchdog: it drops every hold of this holder,
    /// which is safe to repeat, until that goes through or the lease runs
    /// out at `until`. This thread's next acquire of the lock waits for it.
    fn retry_release(&mut self, until: Instant, err: Error) {
        let cause = err.chain();
        let (lock, holder) = (self.lock.clone(), self.holder.clone());
        let retry = self.lock.submit_retry(
            format!(
                "release of lock {:?}",
                String::from_utf8_lossy(self.lock.name())
            ),
            Duration::from_millis(self.lease_ms),
            until,
            err,
            move || lock.release_all(&holder).map(|_| ()),
        );
        thread_holds::releasing(
            self.lock.client().id().as_u128(),
            self.lock.hold_key(),
            retry.clone(),
        );
        self.retry = Some((retry, cause));
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            match e {
                Error::LockLost { .. } | Error::NotHeld { .. } => log::info!(
                    "redguard: guard of lock {:?} held by {} dropped after its lease was lost",
                    String::from_utf8_lossy(self.lock.name()),
                    self.holder
                ),
                e => log::warn!(
                    "redguard: unlock of lock {:?} held by {} failed: {e}; it expires with its \
                     lease",
                    String::from_utf8_lossy(self.lock.name()),
                    self.holder,
                    e = e.chain()
                ),
            }
        }
    }
}
