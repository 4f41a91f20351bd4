//! [`ExpiringSemaphore`] (Redisson's `RPermitExpirableSemaphore`): permits
//! with an id and a lease, renewed by the watchdog while their guard lives.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::lease::{self, LeaseState, lease_ms};
use crate::scripts::SyncHold;
use crate::scripts::semaphore::{self as script, PermitAcquire, PermitKeys};
use crate::semaphore::Counter;
use crate::wait::{Attempt, Wake, wait_loop};
use crate::watchdog;

/// The id of one permit of an [`ExpiringSemaphore`]: 16 random bytes,
/// stored as such in the semaphore's lease set and shown as 32 lowercase
/// hex digits, as Redisson shows its permit ids.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PermitId([u8; 16]);

impl PermitId {
    fn random() -> PermitId {
        PermitId(rand::random())
    }

    /// The permit id stored as `bytes`.
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> PermitId {
        PermitId(bytes)
    }

    /// The 16 bytes stored in Redis.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Parses 32 hex digits (either case), as [`PermitId`]'s `Display` and
    /// Redisson write them.
    fn from_str(s: &str) -> Result<PermitId> {
        let bad = || Error::invalid(format!("{s:?} is not a permit id (32 hex digits)"));
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(id))
    }
}

/// A semaphore whose permits expire (Redisson's
/// `RPermitExpirableSemaphore`): each permit has an id and a lease, so a
/// holder that dies gives its permit back within one lease. Made by
/// [`Client::expiring_semaphore`]. A cheap handle (`Clone + Send + Sync`).
///
/// * **Leases**: without [`ExpiringSemaphore::with_lease`] a permit's lease
///   is the client's watchdog timeout (30 s by default), renewed by the
///   watchdog every third of it while its [`PermitGuard`] lives. A permit
///   whose lease ends (its process died, or stalled past the lease) is
///   counted back by the next caller that acquires or counts permits, and
///   its guard reports it lost ([`PermitGuard::check`] returns
///   [`Error::LockLost`]).
/// * **Lease ends** are stored in the server's clock (`TIME`), never the
///   client's. Redisson writes its own client's clock there: with Redisson
///   processes on the same semaphore, keep the clocks in sync.
/// * **Waiting**: waiters sleep until a release message arrives, or until
///   the earliest lease ends (a dead holder's permit comes back then),
///   re-checking at least every poll interval.
///
/// # Wire layout (Redisson's)
///
/// | key | type | content |
/// | --- | --- | --- |
/// | `name` | string | the number of available permits |
/// | `{name}:timeout` | zset | permit id (16 raw bytes) → lease end, ms since the Unix epoch |
/// | `redisson_sc:{name}` | channel | the new number of available permits |
///
/// # Examples
///
/// ```no_run
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let jobs = client.expiring_semaphore("render-farm");
/// jobs.try_set_permits(4)?;
/// let permit = jobs.acquire()?;          // renewed while it lives
/// println!("running under permit {}", permit.id());
/// permit.check()?;                       // Err(LockLost) if it expired
/// drop(permit);                          // back for the next job
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `acquire()` or `try_acquire()` on it"]
pub struct ExpiringSemaphore {
    client: Client,
    name: Arc<[u8]>,
    timeouts: Arc<[u8]>,
    channel: Arc<[u8]>,
    lease: Option<Duration>,
}

impl fmt::Debug for ExpiringSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpiringSemaphore")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl ExpiringSemaphore {
    pub(crate) fn new(client: Client, name: &[u8]) -> ExpiringSemaphore {
        ExpiringSemaphore {
            timeouts: keys::permit_timeouts(name).into(),
            channel: keys::semaphore_channel(name).into(),
            name: name.into(),
            client,
            lease: None,
        }
    }

    /// The semaphore's name: the Redis key of its permit counter.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client this handle belongs to.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The same semaphore, whose permits get a fixed `lease` that the
    /// watchdog does not renew (Redisson's `acquire(leaseTime, unit)`).
    /// Checked when a permit is acquired: under
    /// [`MIN_LEASE`](crate::MIN_LEASE) or above
    /// [`MAX_LEASE`](crate::MAX_LEASE) is [`Error::InvalidArgument`].
    pub fn with_lease(&self, lease: Duration) -> ExpiringSemaphore {
        ExpiringSemaphore {
            lease: Some(lease),
            ..self.clone()
        }
    }

    fn keys(&self) -> PermitKeys<'_> {
        PermitKeys {
            counter: &self.name,
            timeouts: &self.timeouts,
            channel: &self.channel,
        }
    }

    /// [`Builder::permit_clock_skew`](crate::Builder::permit_clock_skew), in ms.
    fn skew_ms(&self) -> u64 {
        let skew = self.client.config().interop.permit_clock_skew;
        skew.as_millis().min(u128::from(u64::MAX)) as u64
    }

    fn counter(&self) -> Counter<'_> {
        Counter {
            client: &self.client,
            name: &self.name,
            channel: &self.channel,
        }
    }

    fn check(&self) -> Result<()> {
        self.counter().check()
    }

    /// Sets the number of permits to `permits` if it was never set
    /// (Redisson's `trySetPermits`): `true` when this call set it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS), [`Error::WrongType`] when the
    /// name holds something that is not a permit count (left untouched),
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.counter().try_set(permits)
    }

    /// Adds `permits` available permits (Redisson's `addPermits`); a
    /// negative number takes permits away. Zero does nothing.
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::try_set_permits`].
    pub fn add_permits(&self, permits: i64) -> Result<()> {
        self.counter().add(permits)
    }

    fn counts(&self) -> Result<(i64, u64)> {
        self.check()?;
        self.client.with_conn(&self.name, |conn| {
            script::permit_count(
                conn,
                self.client.publish(&self.name),
                self.keys(),
                self.skew_ms(),
            )
        })
    }

    /// The permits available now, after counting back those whose lease
    /// ended (Redisson's `availablePermits`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`],
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn available_permits(&self) -> Result<i64> {
        Ok(self.counts()?.0)
    }

    /// The permits held now under a live lease (Redisson's
    /// `acquiredPermits`).
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::available_permits`].
    pub fn acquired_permits(&self) -> Result<u64> {
        Ok(self.counts()?.1)
    }

    /// All permits, available and held (Redisson's `getPermits`): what
    /// [`ExpiringSemaphore::try_set_permits`] set, plus what was added
    /// since.
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::available_permits`].
    pub fn permits(&self) -> Result<i64> {
        let (available, held) = self.counts()?;
        Ok(available.saturating_add(held as i64))
    }

    /// The permits held now, each with the time left on its lease (zero
    /// for a lease that ended but was not counted back yet), by the
    /// server's clock: the 1,000 whose leases end first (a lease set is
    /// never read whole). Reads only: nothing is counted back. Members of the
    /// lease set that are not 16-byte ids are left out (a longer one is not
    /// even sent: a read-only script sends its length). Lease ends are read
    /// as stored: a permit taken by a client with a
    /// [`permit_clock_skew`](crate::Builder::permit_clock_skew) shows that
    /// much more, and one taken by Redisson ends by its client's clock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the lease set holds another type, [`Error::Shutdown`], connection,
    /// timeout and server errors.
    pub fn leases(&self) -> Result<Vec<(PermitId, Duration)>> {
        self.check()?;
        let script = crate::scripts::bounded_read::script();
        let (time, members): ((u64, u64), redis::Value) =
            self.client.with_conn(&self.name, |conn| {
                crate::snapshot::snapshot_running(conn, &self.timeouts, script, |pipe| {
                    pipe.cmd("TIME");
                    pipe.add_command(super::lease_read(&self.timeouts));
                })
            })?;
        let now = time.0.saturating_mul(1000) + time.1 / 1000;
        super::leases_of(members, &self.timeouts, now)
    }

    /// Takes one permit, waiting as long as it takes (Redisson's
    /// `acquire()`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (bad name or lease), [`Error::WrongType`],
    /// [`Error::Shutdown`] (also while waiting), [`Error::NotReplicated`]
    /// when [`Builder::min_replica_acks`](crate::Builder::min_replica_acks)
    /// asks for more replicas than acknowledged the permit within the ack
    /// timeout (the permit was given back), connection, timeout and server
    /// errors that retrying cannot fix. Errors retrying can fix
    /// ([`Error::is_transient`]: a Redis restart, a freeze, a failover) are
    /// retried with the waiters' backoff (10 ms doubling to 500 ms,
    /// jittered) until the deadline (`acquire`: for as long as it takes),
    /// then [`Error::Timeout`] names the last one. A permit whose reply was
    /// lost is given back by its id before the next attempt; if that fails
    /// too, it expires with its lease.
    pub fn acquire(&self) -> Result<PermitGuard> {
        self.acquire_until(None)?.ok_or_else(|| Error::Timeout {
            kind: crate::error::TimeoutKind::Wait,
            limit: std::time::Duration::MAX,
            server: None,
            about: None,
        })
    }

    /// Takes one permit if one is available now: `Ok(None)` when none is.
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::acquire`].
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        self.acquire_until(Some(Instant::now()))
    }

    /// Takes one permit, waiting at most `wait`: `Ok(None)` when none could
    /// be had in time.
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::acquire`].
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<PermitGuard>> {
        self.acquire_until(Instant::now().checked_add(wait))
    }

    /// Takes one permit, waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// As [`ExpiringSemaphore::acquire`].
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<PermitGuard>> {
        self.acquire_until(Some(deadline))
    }

    fn acquire_until(&self, deadline: Option<Instant>) -> Result<Option<PermitGuard>> {
        self.check()?;
        let (lease, renew) = match self.lease {
            Some(lease) => (lease, false),
            None => (self.client.watchdog_timeout(), true),
        };
        let ms = lease_ms(lease)?;
        // Permits of earlier attempts whose reply was lost and whose undo
        // failed too: given back before the next attempt, so that a wait
        // that rides out an outage leaves no permit taken by nobody.
        let mut orphans: Vec<PermitId> = Vec::new();
        let started = Instant::now();
        let mut waiting = crate::metrics::Waiting::none();
        let what = (&self.name[..], "permit");
        let granted = wait_loop(
            &self.client,
            &self.channel,
            what,
            deadline,
            Wake::One,
            || {
                let mut failed = None;
                orphans.retain(|id| match self.release(id) {
                    Ok(_) => false,
                    Err(e) => {
                        failed = Some(e);
                        true
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                let attempt = self.attempt(lease, ms, renew, &mut orphans);
                if matches!(attempt, Ok(Attempt::Busy(_))) {
                    waiting.start(crate::lost::HoldKind::Permit);
                }
                attempt
            },
        )?;
        drop(waiting);
        match granted {
            Some(_) => crate::metrics::acquired(self.labels(), started.elapsed()),
            None => crate::metrics::timed_out(self.labels()),
        }
        Ok(granted)
    }

    /// The metrics labels of this semaphore's permits.
    fn labels(&self) -> crate::metrics::Labels<'_> {
        self.client
            .context()
            .labels(crate::lost::HoldKind::Permit, &self.name)
    }

    fn attempt(
        &self,
        lease: Duration,
        ms: u64,
        renew: bool,
        orphans: &mut Vec<PermitId>,
    ) -> Result<Attempt<PermitGuard>> {
        let id = PermitId::random();
        let mut sent = Instant::now();
        let mut sent_script = false;
        let acks = self.client.config().acks;
        let response_timeout = self.client.config().response_timeout;
        let mut short_acks = None;
        let reply = self.client.with_conn(&self.name, |conn| {
            sent_script = true;
            // The lease counts from the attempt that ran, not the first
            // one (a Cluster slot that moves is waited for).
            sent = Instant::now();
            // A waiting thread's record entry rides ahead of the script.
            let before = crate::connection::prelude::take_for(self.client.source(), &self.name);
            let (reply, acked) = acks.run(conn, response_timeout, before, |conn| {
                script::permit_acquire(
                    conn,
                    self.client.publish(&self.name),
                    self.keys(),
                    ms,
                    self.skew_ms(),
                    &[id.0],
                )
            })?;
            if reply == PermitAcquire::Acquired && acks.short(acked) {
                short_acks = acked;
            }
            Ok(reply)
        });
        match reply {
            Ok(PermitAcquire::Acquired) if short_acks.is_some() => {
                // Too few replicas have the permit: a failover could give
                // it to someone else. Give it back and say why, as a lock
                // grant does.
                let _ = self.release(&id);
                return Err(acks.not_replicated(&self.name, short_acks));
            }
            Ok(PermitAcquire::Acquired) => {}
            Ok(PermitAcquire::Busy(hint)) => return Ok(Attempt::Busy(hint)),
            Err(e) => {
                if sent_script
                    && e.breaks_connection()
                    && crate::retry::give_back(|| self.release(&id)).is_err()
                {
                    // The permit may have been taken: give it back rather
                    // than leave it unusable for a whole lease; if that
                    // fails too, before the next attempt.
                    orphans.push(id);
                }
                return Err(e);
            }
        }
        let valid_until = lease::valid_until(sent, lease);
        if self.client.is_shut_down() || Instant::now() >= valid_until {
            let _ = self.release(&id);
            self.client.check_open()?;
            return Ok(Attempt::Busy(Some(Duration::ZERO)));
        }
        let state = Arc::new(LeaseState::since(
            sent,
            valid_until,
            self.client.counters().clone(),
            crate::lost::HoldKind::Permit,
        ));
        let entry = watchdog::Entry {
            key: self.name.clone(),
            channel: self.channel.clone(),
            holder: Arc::from(id.to_string()),
            lease,
            renew,
            recheck: None,
            renew_batch: self.client.config().renew_batch,
            queue: None,
            state: state.clone(),
            source: self.client.source().clone(),
            counters: self.client.counters().clone(),
            kind: crate::lost::HoldKind::Permit,
            context: self.client.context().clone(),
            renewed_at: sent,
            acks,
            response_timeout: self.client.config().response_timeout,
            sync: Some(Box::new(SyncHold::Permit {
                timeouts: self.timeouts.clone(),
                id: id.0,
                skew_ms: self.skew_ms(),
            })),
            classic_publish: self.client.config().interop.classic_publish,
            listen: false,
            home: watchdog::UNHOMED,
        };
        let due = if renew { sent + lease / 3 } else { valid_until };
        watchdog::register(entry, due);
        Ok(Attempt::Acquired(PermitGuard {
            semaphore: self.clone(),
            id,
            state,
            renewed: renew,
            done: false,
            retry: None,
        }))
    }

    /// Gives back the permit `id` (Redisson's `tryRelease(permitId)`), for
    /// permits kept with [`PermitGuard::forget`]: `true` when a permit was
    /// held under that id, `false` when not (given back before, or its lease
    /// ended).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`],
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn release(&self, id: &PermitId) -> Result<bool> {
        keys::validate_name(&self.name).map_err(Error::InvalidArgument)?;
        self.client.with_conn(&self.name, |conn| {
            script::permit_release(conn, self.client.publish(&self.name), self.keys(), &id.0)
        })
    }

    /// Deletes the semaphore (Redisson's `delete`): its permit counter and
    /// the leases of its held permits, in one step. `true` when there was
    /// something to delete. Afterwards no permit is available until
    /// [`ExpiringSemaphore::try_set_permits`] sets a count again; a holder
    /// finds its permit gone at its next renewal ([`PermitGuard::check`]
    /// then reports it lost). For an administrator resetting a semaphore
    /// whose count is wrong (`redguard unlock --force --kind semaphore`);
    /// it also resets a plain [`Semaphore`](crate::Semaphore) of the same
    /// name, which keeps only the counter.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`]
    /// when the name holds something that is not a permit count or the
    /// lease key something that is not a sorted set (both left untouched),
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn delete(&self) -> Result<bool> {
        self.check()?;
        self.client
            .with_conn(&self.name, |conn| script::permit_delete(conn, self.keys()))
    }
}

/// One permit of an [`ExpiringSemaphore`], given back when dropped; the
/// watchdog renews its lease while it lives (unless the semaphore was made
/// [`with_lease`](ExpiringSemaphore::with_lease)).
///
/// `Send`: a permit belongs to no thread. A lost permit (its lease ended:
/// the process stalled, Redis lost it) is reported by
/// [`PermitGuard::check`], as a [`LockGuard`](crate::LockGuard) reports a
/// lost lock.
#[must_use = "the permit is given back as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct PermitGuard {
    semaphore: ExpiringSemaphore,
    id: PermitId,
    state: Arc<LeaseState>,
    renewed: bool,
    done: bool,
    /// The retry of a release that met an unreachable or changing server,
    /// with that failure, for [`PermitGuard::release`] to wait on.
    retry: Option<(crate::watchdog::retried::Handle, String)>,
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("semaphore", &String::from_utf8_lossy(&self.semaphore.name))
            .field("id", &self.id)
            .field("watchdog", &self.renewed)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl PermitGuard {
    /// The semaphore the permit belongs to.
    pub fn semaphore(&self) -> &ExpiringSemaphore {
        &self.semaphore
    }

    /// The permit's id.
    pub fn id(&self) -> &PermitId {
        &self.id
    }

    /// `true` when the watchdog renews this permit's lease.
    pub fn is_renewed(&self) -> bool {
        self.renewed
    }

    /// `true` when the permit is known lost, or its lease ran out on this
    /// client's clock (no renewal succeeded in time).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost_at(Instant::now())
    }

    /// How much longer the permit is known to be held on this client's
    /// clock (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.state.valid_for()
    }

    /// `Ok(())` while the permit is held. Purely local: no round trip.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] (naming the semaphore) when a renewal found the
    /// permit gone, renewals failed until its lease ran out, a fixed lease
    /// ended, or the client was shut down.
    pub fn check(&self) -> Result<()> {
        self.state.check(&self.semaphore.name)
    }

    /// Gives the permit back now and reports the outcome.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the permit was known lost (nothing is sent),
    /// [`Error::NotHeld`] when Redis no longer held it under this id (its
    /// lease ended), connection, timeout and server errors (the permit then
    /// comes back when its lease ends: the watchdog stops renewing it).
    ///
    /// `Ok(())` only when Redis confirmed it, as
    /// [`LockGuard::unlock`](crate::LockGuard::unlock): a release that
    /// fails because the server is unreachable or changing (down, paused,
    /// restarting, failing over) is handed to the watchdog, which retries
    /// it until it goes through or the lease runs out; `release` waits for
    /// that retry for at most one response timeout, then returns
    /// [`Error::ReleasePending`] (see
    /// [`Client::await_releases`](crate::Client::await_releases)). A drop
    /// hands the release over without waiting.
    pub fn release(mut self) -> Result<()> {
        let outcome = self.give_back();
        let Some((retry, cause)) = self.retry.take() else {
            return outcome;
        };
        let response = self.semaphore.client.config().response_timeout;
        retry.confirm(
            response,
            &self.semaphore.name,
            self.state.valid_until(),
            cause,
        )
    }

    /// Stops renewing the permit and keeps it taken: it comes back when
    /// its lease ends, or earlier through [`ExpiringSemaphore::release`]
    /// with the returned id.
    pub fn forget(mut self) -> PermitId {
        self.done = true;
        self.state.mark_released();
        self.id
    }

    fn give_back(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        if self.state.is_marked_lost() {
            return Err(Error::lost(&self.semaphore.name));
        }
        self.state.begin_release();
        let until = self.state.valid_until();
        let released = self.semaphore.release(&self.id);
        match released {
            Ok(true) => {
                self.state.mark_released();
                crate::metrics::released(
                    self.semaphore.labels(),
                    Some(self.state.held_since().elapsed()),
                );
                Ok(())
            }
            Ok(false) => {
                self.state.mark_lost();
                Err(Error::not_held(&self.semaphore.name))
            }
            Err(e) => {
                self.state.mark_released();
                if !e.is_failover() {
                    return Err(e);
                }
                // Giving a permit back by its id is safe to repeat.
                let cause = e.chain();
                let (semaphore, id) = (self.semaphore.clone(), self.id);
                let client = &self.semaphore.client;
                let retry = crate::watchdog::retried::submit(
                    format!(
                        "release of permit {} of semaphore {:?}",
                        self.id,
                        String::from_utf8_lossy(&self.semaphore.name)
                    ),
                    self.semaphore.name.clone(),
                    client.source().clone(),
                    client.counters(),
                    self.semaphore
                        .lease
                        .unwrap_or_else(|| client.watchdog_timeout()),
                    until,
                    e,
                    move || semaphore.release(&id).map(|_| ()),
                );
                self.retry = Some((retry, cause));
                Ok(())
            }
        }
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if let Err(e) = self.give_back() {
            match e {
                Error::LockLost { .. } | Error::NotHeld { .. } => log::info!(
                    "redguard: permit {} of semaphore {:?} dropped after its lease was lost",
                    self.id,
                    String::from_utf8_lossy(&self.semaphore.name)
                ),
                e => log::warn!(
                    "redguard: could not give back permit {} of semaphore {:?}: {e}; it comes \
                     back when its lease ends",
                    self.id,
                    String::from_utf8_lossy(&self.semaphore.name),
                    e = e.chain()
                ),
            }
        }
    }
}

/// The expiring semaphore handle of a client.
impl Client {
    /// A semaphore whose permits carry an id and a lease (Redisson's
    /// `RPermitExpirableSemaphore`): a crashed holder's permit comes back
    /// within one lease. Cheap: no I/O.
    pub fn expiring_semaphore(&self, name: impl AsRef<[u8]>) -> ExpiringSemaphore {
        ExpiringSemaphore::new(self.clone(), name.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_print_and_parse_as_hex() {
        let id = PermitId([0xab; 16]);
        assert_eq!(id.to_string(), "ab".repeat(16));
        assert_eq!("AB".repeat(16).parse::<PermitId>().unwrap(), id);
        assert!("abc".parse::<PermitId>().is_err());
        assert!("zz".repeat(16).parse::<PermitId>().is_err());
        assert_ne!(PermitId::random(), PermitId::random());
    }
}
