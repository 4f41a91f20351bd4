//! Read-only looks at the synchronizers that are not lock hashes, for
//! monitoring and administration (`redguard status`): [`SemaphoreInfo`]
//! ([`Semaphore::inspect`], [`ExpiringSemaphore::inspect`]), [`LatchInfo`]
//! ([`CountDownLatch::inspect`]) and [`OnceInfo`]
//! ([`Client::once_inspect`]). Reads only; never changes a key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::latch::CountDownLatch;
use crate::lease::{Pttl, Ttl};
use crate::once::OnceStatus;
use crate::record::{self, HolderRecord};
use crate::scripts::bounded_read;
use crate::semaphore::{ExpiringSemaphore, PermitId, Semaphore};

/// What [`Semaphore::inspect`] or [`ExpiringSemaphore::inspect`] found at
/// a semaphore's name. Both kinds keep the same counter (Redisson's
/// layout), so either handle reads both: the counter, and the expiring
/// permits held on it with their holders.
///
/// A snapshot: by the time it is read permits may have changed hands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name.
    pub name: Vec<u8>,
    /// The available permits, as stored (0 when the counter does not
    /// exist). Expiring permits whose lease ended are counted back by the
    /// next caller that acquires or counts permits, not by this read.
    pub available: i64,
    /// The counter key's remaining lifetime: `None` when it does not exist.
    pub ttl: Option<Ttl>,
    /// The expiring permits held (Redisson's `{name}:timeout` set), in
    /// order of lease end: the first 1,000 (a lease set is never read
    /// whole). A plain semaphore's permits have no owner and
    /// are not listed: they show only as fewer available permits.
    pub permits: Vec<HeldPermit>,
    /// The holder records that keep the start of one of [`permits`]
    /// (a permit taken by a client with
    /// [`Builder::holder_record`](crate::Builder::holder_record) on), each
    /// with only those holds; see [`SemaphoreInfo::record_of`].
    ///
    /// [`permits`]: SemaphoreInfo::permits
    pub records: Vec<HolderRecord>,
    /// The server's clock when read.
    pub server_time: Option<SystemTime>,
    /// Connections subscribed to the semaphore's channel
    /// (`redisson_sc:{name}`): the waiters of other processes (one per
    /// client). Counted as [`LockInfo::subscribers`](crate::LockInfo::subscribers)
    /// is. `None` when the server would not say.
    pub subscribers: Option<u64>,
}

/// One expiring permit held, in a [`SemaphoreInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    /// The permit's id.
    pub id: PermitId,
    /// Time left on its lease by the server's clock (zero for a lease that
    /// ended but was not counted back yet). Read as stored: a permit taken
    /// by Redisson ends by its client's clock.
    pub lease_left: Duration,
}

impl SemaphoreInfo {
    /// The holder record of the client holding permit `id`, if one keeps
    /// the permit.
    pub fn record_of(&self, id: &PermitId) -> Option<&HolderRecord> {
        let holder = id.to_string();
        self.records
            .iter()
            .find(|r| r.held_since(&holder, &self.name).is_some())
    }

    /// When permit `id` was taken (server clock), as its holder's record
    /// says.
    pub fn held_since(&self, id: &PermitId) -> Option<SystemTime> {
        self.record_of(id)?.held_since(&id.to_string(), &self.name)
    }

    /// How long permit `id` has been held: [`SemaphoreInfo::server_time`]
    /// minus [`SemaphoreInfo::held_since`].
    pub fn held_for(&self, id: &PermitId) -> Option<Duration> {
        let now = self.server_time?;
        Some(now.duration_since(self.held_since(id)?).unwrap_or_default())
    }
}

/// What [`CountDownLatch::inspect`] found at a latch's name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchInfo {
    /// The latch's name.
    pub name: Vec<u8>,
    /// The count; 0 when the latch is open (its key does not exist).
    pub count: u64,
    /// The count key's remaining lifetime: `None` when it does not exist.
    pub ttl: Option<Ttl>,
    /// Connections subscribed to the latch's channel
    /// (`redisson_countdownlatch__channel__{name}`): the waiters of other
    /// processes (one per client), counted as
    /// [`LockInfo::subscribers`](crate::LockInfo::subscribers) is. `None`
    /// when the server would not say.
    pub subscribers: Option<u64>,
}

/// What [`Client::once_inspect`] found at a run-once key: its state, and
/// the holder record of the runner's client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceInfo {
    /// The run-once key.
    pub key: Vec<u8>,
    /// Not run, running (who, and the lease left) or done (the outcome).
    pub status: OnceStatus,
    /// The holder record of the runner's client: of the holder of a run in
    /// progress, or of the client that recorded a finished run, while that
    /// client lives. `None` without one (a client with records off, or
    /// gone).
    pub record: Option<HolderRecord>,
    /// The server's clock when read.
    pub server_time: Option<SystemTime>,
    /// Connections subscribed to the key's channel: callers of
    /// [`Client::once_wait`] in other processes, waiting for the runner
    /// (one per client). `None` when the server would not say.
    pub subscribers: Option<u64>,
    /// The last attempt, whatever its end (`None` when none is kept): a
    /// `running` attempt whose claim is no longer held by its runner reads
    /// as [`AttemptState::Abandoned`](crate::AttemptState::Abandoned).
    pub last_attempt: Option<crate::once::OnceAttempt>,
}

impl OnceInfo {
    /// The runner's holder id: who runs the work, or who recorded it.
    pub fn runner(&self) -> Option<&str> {
        match &self.status {
            OnceStatus::Running { holder, .. } => Some(holder),
            OnceStatus::Done(outcome) => Some(&outcome.by),
            _ => None,
        }
    }

    /// When the run in progress began (server clock), as the runner's
    /// record says; `None` for a key not running.
    pub fn held_since(&self) -> Option<SystemTime> {
        let OnceStatus::Running { holder, .. } = &self.status else {
            return None;
        };
        self.record.as_ref()?.held_since(holder, &self.key)
    }

    /// How long the run in progress has been going:
    /// [`OnceInfo::server_time`] minus [`OnceInfo::held_since`].
    pub fn held_for(&self) -> Option<Duration> {
        let now = self.server_time?;
        Some(now.duration_since(self.held_since()?).unwrap_or_default())
    }
}

impl Semaphore {
    /// Looks at the semaphore without changing it: available permits,
    /// the expiring permits held on the same counter (with the holder
    /// records that keep them) and the subscribed waiters. The same as
    /// [`ExpiringSemaphore::inspect`].
    ///
    /// One `MULTI`/`EXEC` of reads, one round trip for the subscribers (on
    /// a Cluster, one more per other master); with expiring permits held,
    /// a search of the records on the semaphore's server: one `SCAN` per
    /// 1,000 keys there, stopping once every permit's record is found.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`]
    /// when the name holds something that is not a permit count (or its
    /// lease set another type), [`Error::Shutdown`], connection, timeout
    /// and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let info = client.semaphore("partner-api").inspect()?;
    /// println!("{} available, {:?} waiting", info.available, info.subscribers);
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn inspect(&self) -> Result<SemaphoreInfo> {
        read_semaphore(self.client(), self.name())
    }
}

impl ExpiringSemaphore {
    /// Looks at the semaphore without changing it: available permits, each
    /// permit held with its lease left and, where a holder record keeps
    /// it, its holder's host, pid, program and since when it holds the
    /// permit. Nothing is counted back. As [`Semaphore::inspect`].
    ///
    /// # Errors
    ///
    /// As [`Semaphore::inspect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let info = client.expiring_semaphore("render-farm").inspect()?;
    /// for permit in &info.permits {
    ///     let host = info.record_of(&permit.id).map_or("no record", |r| r.host.as_str());
    ///     println!("{} on {host}, lease {:?}", permit.id, permit.lease_left);
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn inspect(&self) -> Result<SemaphoreInfo> {
        read_semaphore(self.client(), self.name())
    }
}

/// A counter's value as stored: 0 when absent, [`Error::WrongType`] when
/// it is no integer.
fn counter_value(name: &[u8], raw: Option<Vec<u8>>) -> Result<i64> {
    match raw {
        None => Ok(0),
        Some(raw) => std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .ok_or_else(|| Error::WrongType {
                key: String::from_utf8_lossy(name).into_owned(),
            }),
    }
}

fn read_semaphore(client: &Client, name: &[u8]) -> Result<SemaphoreInfo> {
    keys::validate_name(name).map_err(Error::InvalidArgument)?;
    client.check_open()?;
    let timeouts = keys::permit_timeouts(name);
    type Reply = ((u64, u64), i64, Vec<u8>, i64, Value);
    let script = bounded_read::script();
    let ((secs, micros), exists, peek, pttl, leases): Reply = client.with_conn(name, |conn| {
        crate::snapshot::snapshot_running(conn, name, script, |pipe| {
            pipe.cmd("TIME");
            crate::snapshot::add_counter_read(pipe, name);
            pipe.cmd("PTTL").arg(name);
            pipe.add_command(crate::semaphore::lease_read(&timeouts));
        })
    })?;
    let available = counter_value(name, crate::snapshot::counter_bytes(exists, peek))?;
    let now_ms = secs.saturating_mul(1000) + micros / 1000;
    let permits: Vec<HeldPermit> = crate::semaphore::leases_of(leases, &timeouts, now_ms)?
        .into_iter()
        .map(|(id, lease_left)| HeldPermit { id, lease_left })
        .collect();
    let source = client.source();
    let around = record::around(
        source,
        client.record_prefix(),
        name,
        &[keys::semaphore_channel(name)],
        &[],
    )?;
    let holders: Vec<String> = permits.iter().map(|p| p.id.to_string()).collect();
    Ok(SemaphoreInfo {
        name: name.to_vec(),
        available,
        ttl: Pttl::from_ms(pttl).remaining(),
        records: record::holding(
            source,
            client.record_prefix(),
            source.node_of(name),
            name,
            &holders,
        ),
        permits,
        server_time: Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)),
        subscribers: around.subscribers,
    })
}

impl CountDownLatch {
    /// Looks at the latch without changing it: its count and the
    /// subscribed waiters. One `MULTI`/`EXEC` of reads and one round trip
    /// for the subscribers (on a Cluster, one more per other master).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the name holds something that is not a count, [`Error::Shutdown`],
    /// connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let info = client.count_down_latch("batch:42:workers").inspect()?;
    /// println!("{} to go, {:?} waiting", info.count, info.subscribers);
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn inspect(&self) -> Result<LatchInfo> {
        let (client, name) = (self.client(), self.name());
        keys::validate_name(name).map_err(Error::InvalidArgument)?;
        client.check_open()?;
        let (exists, peek, pttl): (i64, Vec<u8>, i64) = client.with_conn(name, |conn| {
            crate::snapshot::snapshot(conn, name, |pipe| {
                crate::snapshot::add_counter_read(pipe, name);
                pipe.cmd("PTTL").arg(name);
            })
        })?;
        let count =
            counter_value(name, crate::snapshot::counter_bytes(exists, peek))?.max(0) as u64;
        let around = record::around(
            client.source(),
            client.record_prefix(),
            name,
            &[keys::latch_channel(name)],
            &[],
        )?;
        Ok(LatchInfo {
            name: name.to_vec(),
            count,
            ttl: Pttl::from_ms(pttl).remaining(),
            subscribers: around.subscribers,
        })
    }
}

impl Client {
    /// Looks at the run-once key `key` without claiming it: what
    /// [`Client::once_status`] says, plus the holder record of the
    /// runner's client (host, pid, program, and for a run in progress
    /// since when it runs) and the callers waiting for it. Two round trips
    /// (on a Cluster, one more per other master).
    ///
    /// # Errors
    ///
    /// As [`Client::once_status`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let info = client.once_inspect("payment:7f3a")?;
    /// if let (Some(runner), Some(record)) = (info.runner(), &info.record) {
    ///     println!("{runner} on {} (pid {:?}), for {:?}", record.host, record.pid, info.held_for());
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn once_inspect(&self, key: impl AsRef<[u8]>) -> Result<OnceInfo> {
        let key = key.as_ref();
        let mut last_attempt = self.once_attempt_raw(key)?;
        let status = self.once_status(key)?;
        if let Some(attempt) = last_attempt.as_mut()
            && attempt.state == crate::once::AttemptState::Running
        {
            let runs = match &status {
                OnceStatus::Running { holder, .. } => *holder == attempt.holder,
                // A holder too long to read (empty) is nobody's.
                OnceStatus::Done(outcome) => {
                    outcome.by == attempt.holder && !attempt.holder.is_empty()
                }
                _ => false,
            };
            if !runs {
                attempt.state = crate::once::AttemptState::Abandoned;
            }
        }
        let mut info = OnceInfo {
            key: key.to_vec(),
            status,
            record: None,
            server_time: None,
            subscribers: None,
            last_attempt,
        };
        let clients = record::clients_of(info.runner());
        let around = record::around(
            self.source(),
            self.record_prefix(),
            key,
            &[keys::channel(key)],
            &clients,
        )?;
        info.record = around.records.into_iter().next();
        info.server_time = around.server_time;
        info.subscribers = around.subscribers;
        Ok(info)
    }
}
