//! [`Client`]: the shared handle on one Redis deployment. Owns the client
//! id, the configuration, the connection source and the subscriber thread;
//! registers with the process-wide watchdog. Runs no Lua itself.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::{Builder, Config};
use crate::connection::Source;
use crate::context::ClientContext;
use crate::error::{Error, Result};
use crate::holder::{ClientId, HolderId};
use crate::lease::Counters;
use crate::record::{self, HolderRecord, RecordSpec};
use crate::subscriber::{Reactions, Subscriber};
use crate::watchdog;

/// A handle on one Redis deployment, from which locks are made.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`: make one per deployment and
/// share it. It owns a connection pool, a random client id (the first half
/// of every holder id it writes) and, once some thread waits for a lock,
/// one subscriber thread with one pub/sub connection. Lease renewal is done
/// by one watchdog thread per process, shared by all clients, and one
/// renewal thread per server in use; they end when no client is left.
///
/// Dropping the last handle (every [`Lock`](crate::Lock) holds one) or calling
/// [`Client::shutdown`] stops the subscriber thread and, unless disabled
/// with [`Builder::release_on_shutdown`], releases the locks the client
/// still holds.
///
/// # Examples
///
/// ```no_run
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("orders:42");
/// let guard = lock.lock()?;
/// // ... critical section ...
/// drop(guard);
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    id: ClientId,
    config: Config,
    source: Arc<Source>,
    subscriber: OnceLock<Option<Subscriber>>,
    counters: Arc<Counters>,
    context: Arc<ClientContext>,
    shut_down: AtomicBool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.shared.id)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// What a client keeps per lock name, channel or hold, each as
/// (entries, room the collection keeps), from `Client::residue`: once
/// nothing is held or waited for, no entry is left and little room. For
/// the tests that say so; not part of the API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Residue {
    /// The calling thread's holds of this client.
    pub thread_holds: (usize, usize),
    /// Channels with waiters.
    pub waiter_channels: (usize, usize),
    /// Holds listened for a force unlock.
    pub listened: (usize, usize),
    /// Channels the subscriber thread subscribed for waiters.
    pub subscribed: (usize, usize),
    /// The watchdog's schedule (process-wide: every client's holds).
    pub watchdog_schedule: (usize, usize),
    /// Holds waiting to be listened for (process-wide).
    pub watchdog_young: (usize, usize),
    /// Holds to check after an unlock message (process-wide).
    pub watchdog_verify: (usize, usize),
}

impl Residue {
    /// Entries left, over every collection.
    pub fn entries(&self) -> usize {
        self.all().iter().map(|(entries, _)| entries).sum()
    }

    /// The room of the roomiest collection.
    pub fn largest_room(&self) -> usize {
        self.all().iter().map(|(_, room)| *room).max().unwrap_or(0)
    }

    fn all(&self) -> [(usize, usize); 7] {
        [
            self.thread_holds,
            self.waiter_channels,
            self.listened,
            self.subscribed,
            self.watchdog_schedule,
            self.watchdog_young,
            self.watchdog_verify,
        ]
    }
}

/// Counters describing a client's state, from [`Client::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Locks this client holds (one per lock and thread, whatever the hold
    /// count).
    pub held_locks: usize,
    /// This client's entries in the watchdog's schedule (held locks whose
    /// lease it renews or tracks). Released locks leave it within a second
    /// or so.
    pub watchdog_entries: usize,
    /// Threads registered as waiting for an unlock message.
    pub waiters: usize,
    /// Channels with at least one waiter.
    pub subscribed_channels: usize,
    /// Open pub/sub connections: 0 or 1.
    pub pubsub_connections: usize,
    /// Open connections of the pools: the exclusive ones (idle or in use,
    /// at most [`Builder::pool_size`](crate::Builder::pool_size) per
    /// server) and the shared connection of lock calls (one per server).
    pub pool_connections: usize,
    /// Lease renewals the watchdog has sent for this client since it was
    /// made: one per held lock and renewal period, plus one per held lock
    /// each time its server restarted or closed a connection (the check
    /// that sees the loss at once).
    pub renewals: u64,
    /// Round trips that carried those renewals: renewals due together go to
    /// Redis as script calls of at most [`Builder::renew_batch`] renewals,
    /// up to 16 calls per round trip.
    pub renewal_round_trips: u64,
    /// Watchdog wake-ups that renewed at least one of this client's leases
    /// (or looked up one of its fixed-lease read holds).
    /// Each sends at most ⌈due / renew batch⌉ script calls per server.
    pub renewal_ticks: u64,
    /// Releases (of locks, permits, run-once claims) and other operations
    /// on held leases that met a failover and are being retried by the
    /// watchdog (see [`Client::await_releases`]).
    pub pending_releases: usize,
    /// Of those retried operations, the ones that ended without going
    /// through: the lease ran out first (the key then expired by itself,
    /// unless it stays unreachable), or the client was shut down. A
    /// process that must not report success after a failed release
    /// compares it before and after [`Client::await_releases`], as
    /// `redguard exec` does.
    pub failed_releases: u64,
    /// Round trips that carried nothing but holder-record writes (see
    /// [`Builder::holder_record`]): the first write of a record on each
    /// server, a refresh every third of the lease while the client renews
    /// nothing there, and hold start times that could not wait for a
    /// renewal. Refreshes otherwise ride on renewal round trips.
    pub record_round_trips: u64,
    /// Holder-record writes the server refused with a permission error (an
    /// ACL user without `~redguard:client:*`, or the pattern of its
    /// [`record_prefix`](Builder::record_prefix); see docs/SECURITY.md): the
    /// locks work, but `status` and `list` show no host, pid or program
    /// for them. The first refusal is also logged as a warning.
    pub record_writes_refused: u64,
    /// Held locks whose unlock channel the subscriber listens to, so that a
    /// force unlock (redguard's `unlock --force`, Redisson's
    /// `forceUnlock`) is heard at once: every hold that lasted 100 ms.
    /// Ended holds leave it within a second.
    pub listened_holds: usize,
    /// Holds checked (one round trip per server and message) because an
    /// unlock message came on their channel while they were held; a check
    /// that finds the hold gone reports it lost.
    pub hold_checks: u64,
}

impl Client {
    /// A client for the deployment at `url`, with default settings (see
    /// [`Builder`]). No connection is made until the first lock operation.
    ///
    /// | URL | deployment |
    /// | --- | --- |
    /// | `redis://[[user]:password@]host[:port][/db]` | one server (port 6379 by default) |
    /// | `rediss://…` | one server over TLS |
    /// | `redis+unix:///path` | one server on a Unix socket |
    /// | `redis+sentinel://[[user]:password@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[?db=N]` | the master a Redis Sentinel deployment names `MASTER_NAME` (sentinel port 26379 by default) |
    /// | `rediss+sentinel://…` | the same over TLS, to sentinels and data nodes |
    ///
    /// In a Sentinel URL the credentials are the data nodes' (the master's);
    /// the sentinels' own password is set with
    /// [`Builder::sentinel_password`] (the CLI reads
    /// `REDIS_SENTINEL_PASSWORD`), because real deployments often differ.
    /// Percent-encode reserved characters in passwords and names (`%40` for
    /// `@`). Passwords are never printed. See docs/DEPLOYMENTS.md for
    /// what a failover means for a held lock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the URL cannot be parsed (the message
    /// never repeats the URL).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let single = redguard::Client::open("redis://:secret@127.0.0.1:6379/0")?;
    /// let sentinel = redguard::Client::open(
    ///     "redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26379/mymaster?db=0",
    /// )?;
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn open(url: &str) -> Result<Client> {
        Builder::default().url(url).build()
    }

    /// A [`Builder`] to configure a client.
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn from_config(config: Config) -> Result<Client> {
        let id = ClientId::new_random();
        let name: Arc<str> = format!("redguard-{}", &record::client_text(&id)[..8]).into();
        let source = Source::open(&config.deployment, &config.connect_options(Some(name)))?;
        // Counted until `watchdog::client_gone` (shutdown or drop).
        watchdog::attach();
        crate::metrics::register();
        let context = Arc::new(ClientContext {
            on_lost: config.on_lease_lost.clone(),
            metrics_names: config.metrics_lock_names,
            listener: std::sync::OnceLock::new(),
            record: config.holder_record.then(|| {
                let mut spec = RecordSpec::new(
                    &id,
                    config.program.as_deref(),
                    config.record_command,
                    config.watchdog_timeout,
                );
                if let Some(host) = config.host.as_deref() {
                    spec.set_host(host);
                }
                spec.set_prefix(config.record_prefix.clone());
                Arc::new(spec)
            }),
        });
        Ok(Client {
            shared: Arc::new(Shared {
                id,
                config,
                source: Arc::new(source),
                subscriber: OnceLock::new(),
                counters: Arc::new(Counters::default()),
                context,
                shut_down: AtomicBool::new(false),
            }),
        })
    }

    /// This client's id: the first half of every holder id it writes.
    pub fn id(&self) -> ClientId {
        self.shared.id
    }

    /// The holder id of the calling thread for this client,
    /// `"<client id>:<thread id>"`.
    pub fn holder_id(&self) -> HolderId {
        HolderId::current(self.shared.id)
    }

    /// The holder records of the client whose id is `client` (the text of
    /// a [`ClientId`], the first part of its holder ids): one from a single
    /// server or Sentinel, one per master where it holds something on a
    /// Cluster; empty when it keeps none (a Java client, records off, or a
    /// client gone for longer than its lease), or when it keeps them under
    /// another [`record_prefix`](Self::record_prefix). See
    /// [`Builder::holder_record`]. Reads only, one round trip per master,
    /// bounded by a script: no field name or value longer than a record's
    /// is sent, nor more fields than a record has (see
    /// [`HolderRecord::too_long`] and [`HolderRecord::partial`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `client` is not a client id (a UUID),
    /// [`Error::Shutdown`], and connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// for record in client.holder_records("e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60")? {
    ///     println!("{} pid {:?} runs {}", record.host, record.pid, record.program);
    ///     for hold in &record.holds {
    ///         println!("  holds {:?} since {:?}", String::from_utf8_lossy(&hold.name), hold.since);
    ///     }
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn holder_records(&self, client: &str) -> Result<Vec<HolderRecord>> {
        self.check_open()?;
        let id = uuid::Uuid::parse_str(client)
            .map_err(|_| Error::invalid(format!("{client:?} is not a client id (a UUID)")))?;
        record::records_of(
            &self.shared.source,
            self.record_prefix(),
            &id.hyphenated().to_string(),
        )
    }

    /// The holder records that keep a wait ([`HolderRecord::waits`]): who
    /// waits for what, on which host, since when, on every master. Each
    /// record comes with its fixed fields and its waits, not its holds.
    /// Redisson's waiters keep no record (a fair lock's queue and the
    /// subscriber counts still show them).
    ///
    /// Reads only records under [`record_prefix`](Self::record_prefix):
    /// one `SCAN` (`COUNT` 1,000, `MATCH <prefix>*`) per 1,000 keys of
    /// each master, and one pipelined round trip per page that has
    /// records, each read bounded by a script (fixed and `wait:` fields
    /// only; no field name or value longer than a record's is sent: see
    /// [`HolderRecord::too_long`]).
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`], and connection, timeout and server errors (an
    /// ACL user that may not `SCAN`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// for record in client.waiting_records()? {
    ///     for wait in &record.waits {
    ///         println!("{} pid {:?} waits for {:?} since {:?}", record.host, record.pid,
    ///             String::from_utf8_lossy(&wait.name), wait.since);
    ///     }
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn waiting_records(&self) -> Result<Vec<HolderRecord>> {
        self.check_open()?;
        let source = &self.shared.source;
        let mut out = Vec::new();
        for node in source.masters()? {
            out.extend(record::waiting_on(source, self.record_prefix(), node)?);
        }
        Ok(out)
    }

    /// The Redis server's clock (`TIME`; on a Cluster, one master's), the
    /// clock of holder records and fair-lock deadlines. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`], and connection, timeout and server errors.
    pub fn server_time(&self) -> Result<std::time::SystemTime> {
        self.check_open()?;
        let reply: redis::Value = self.with_conn(b"redguard", |conn| {
            redis::cmd("TIME").query(conn).map_err(Error::redis)
        })?;
        record::server_time(&reply)
    }

    /// The lease of locks taken without an explicit lease.
    pub fn watchdog_timeout(&self) -> Duration {
        self.shared.config.watchdog_timeout
    }

    /// What the client's subscriber and the watchdog keep per channel or
    /// hold (the calling thread's holds are the lock module's to fill in).
    pub(crate) fn residue_of_threads(&self) -> Residue {
        let [waiter_channels, listened, subscribed] = self
            .shared
            .subscriber
            .get()
            .and_then(Option::as_ref)
            .map_or([(0, 0); 3], Subscriber::residue);
        let [watchdog_schedule, watchdog_young, watchdog_verify] = watchdog::residue();
        Residue {
            thread_holds: (0, 0),
            waiter_channels,
            listened,
            subscribed,
            watchdog_schedule,
            watchdog_young,
            watchdog_verify,
        }
    }

    /// A snapshot of the client's counters.
    pub fn stats(&self) -> Stats {
        let sub = self.shared.subscriber.get().and_then(Option::as_ref);
        Stats {
            held_locks: self.shared.counters.held.load(Ordering::Relaxed),
            watchdog_entries: self
                .shared
                .counters
                .watchdog_entries
                .load(Ordering::Relaxed),
            waiters: sub.map_or(0, Subscriber::waiters),
            subscribed_channels: sub.map_or(0, Subscriber::channels),
            pubsub_connections: sub.map_or(0, Subscriber::connections),
            pool_connections: self.shared.source.open_connections(),
            renewals: self.shared.counters.renewals.load(Ordering::Relaxed),
            renewal_round_trips: self
                .shared
                .counters
                .renewal_round_trips
                .load(Ordering::Relaxed),
            renewal_ticks: self.shared.counters.renewal_ticks.load(Ordering::Relaxed),
            pending_releases: self.shared.counters.retries.get(),
            failed_releases: self.shared.counters.failed_retries.load(Ordering::Relaxed),
            record_round_trips: self
                .shared
                .counters
                .record_round_trips
                .load(Ordering::Relaxed),
            record_writes_refused: self.shared.counters.record_refusals.load(Ordering::Relaxed),
            listened_holds: sub.map_or(0, Subscriber::listened_holds),
            hold_checks: self.shared.counters.hold_checks.load(Ordering::Relaxed),
        }
    }

    /// Waits until no release of this client is being retried, for at most
    /// `timeout`; `true` when none is left.
    ///
    /// A release (of a lock, a permit, or a run-once claim, by
    /// [`LockGuard::unlock`](crate::LockGuard::unlock),
    /// [`PermitGuard::release`](crate::PermitGuard::release) or a guard's
    /// drop) that fails because the master is gone or changing (a failover,
    /// a restart: a connection error, `READONLY`, `MOVED`, `CLUSTERDOWN`,
    /// `MASTERDOWN`, `LOADING`, `TRYAGAIN`) returns `Ok(())` and is handed
    /// to the watchdog, which retries it against the new master, with
    /// growing pauses (10 ms up to 500 ms), until it goes through or the
    /// lease is over (the key then expires by itself). Without this, a lock
    /// replicated to the new master would block everyone until its lease
    /// ran out. A process about to exit calls this first, bounded by its
    /// longest lease, so that its pending releases are not lost with it:
    /// `redguard exec` does.
    ///
    /// Each retry ends by its lease, so the wait is bounded by the longest
    /// lease of the releases pending, whatever `timeout`.
    pub fn await_releases(&self, timeout: Duration) -> bool {
        self.shared.counters.retries.wait_none(timeout)
    }

    /// Shuts the client down: every thread waiting for a lock of this
    /// client returns [`Error::Shutdown`], the subscriber thread stops, and
    /// the locks the client still holds are released (unless
    /// [`Builder::release_on_shutdown`] is `false`; then they expire after
    /// their lease). Their guards report [`Error::LockLost`] from
    /// [`LockGuard::check`](crate::LockGuard::check). Later operations on
    /// the client return [`Error::Shutdown`]. Idempotent.
    ///
    /// Waits at most about one response timeout for the releases.
    pub fn shutdown(&self) {
        if self.shared.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(Some(sub)) = self.shared.subscriber.get() {
            sub.shutdown();
        }
        watchdog::client_gone(
            &self.shared.counters,
            self.shared.config.release_on_shutdown,
            Some(self.shared.config.response_timeout),
        );
        // A record a wait wrote and no hold kept (the watchdog deleted
        // those of holds): gone with the client, not a lease later. Kept,
        // as the holds' records are, when the locks are left to their lease.
        if self.shared.config.release_on_shutdown
            && let Some(spec) = &self.shared.context.record
        {
            for (node, key) in spec.take_wait_records() {
                let _ = self.shared.source.with_node_conn(node, |conn| {
                    redis::cmd("DEL")
                        .arg(&key[..])
                        .query::<i64>(conn)
                        .map_err(Error::redis)
                });
            }
        }
    }

    /// `true` after [`Client::shutdown`].
    pub fn is_shut_down(&self) -> bool {
        self.shared.shut_down.load(Ordering::Acquire)
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_shut_down() {
            return Err(Error::Shutdown);
        }
        Ok(())
    }

    /// The server this client talks to, `"<host:port or socket path>/<db>"`:
    /// safe to print (it holds no credentials). Multi-locks order their
    /// locks by it, and errors about a lock of a multi-lock name it.
    pub fn server(&self) -> String {
        self.shared.config.deployment.label()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The prefix of holder record keys this client writes its record
    /// under and reads records from
    /// ([`Builder::record_prefix`](crate::Builder::record_prefix); default
    /// `redguard:client:`).
    pub fn record_prefix(&self) -> &str {
        &self.shared.config.record_prefix
    }

    pub(crate) fn source(&self) -> &Arc<Source> {
        &self.shared.source
    }

    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.shared.counters
    }

    pub(crate) fn context(&self) -> &Arc<ClientContext> {
        &self.shared.context
    }

    /// How this client's scripts publish the unlock messages of `key`
    /// (see [`Source::sharded_publish`]), under its
    /// [`ClassicPublish`](crate::ClassicPublish) setting.
    pub(crate) fn publish(&self, key: &[u8]) -> crate::scripts::Publish {
        crate::scripts::Publish::of(
            self.shared.source.sharded_publish(key),
            self.shared.config.interop.classic_publish,
        )
    }

    /// Runs `op` on a connection to the server that owns `key`.
    pub(crate) fn with_conn<T>(
        &self,
        key: &[u8],
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        self.shared.source.with_conn(key, op)
    }

    /// Runs `op` on the shared connection of the server that owns `key`
    /// (pipelined with other threads' calls; see `connection`'s module
    /// doc). `op` must leave the connection as it found it.
    pub(crate) fn with_shared_conn<T>(
        &self,
        key: &[u8],
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        self.shared.source.with_shared_conn(key, op)
    }

    /// The subscriber, started on first use. `None` when its thread could
    /// not be started (waiters then poll).
    pub(crate) fn subscriber(&self) -> Option<&Subscriber> {
        self.shared
            .subscriber
            .get_or_init(|| {
                let reactions = Reactions {
                    verify: watchdog::verify,
                    suspect: watchdog::suspect,
                };
                match Subscriber::start(
                    self.shared.source.clone(),
                    self.shared.config.response_timeout,
                    reactions,
                ) {
                    Ok(sub) => {
                        let _ = self.shared.context.listener.set(Arc::new(sub.listener()));
                        Some(sub)
                    }
                    Err(e) => {
                        log::error!(
                            "redguard: could not start the subscriber thread: {e}",
                            e = e.chain()
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The subscriber if it was started already.
    pub(crate) fn running_subscriber(&self) -> Option<&Subscriber> {
        self.shared.subscriber.get().and_then(Option::as_ref)
    }

    /// `true` when both handles are the same client.
    pub fn same_client(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Builder {
    /// Validates the configuration and makes the client. No connection is
    /// opened yet: the first lock operation connects.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an unparsable URL (a `rediss://` URL
    /// without the `tls` feature included), TLS certificates without the
    /// `tls` feature or with a URL that is not `rediss://`, and any setting
    /// outside the bounds the [`Builder`] table gives (a watchdog timeout or
    /// fair wait timeout under 3 × the response timeout included).
    pub fn build(self) -> Result<Client> {
        Client::from_config(self.into_config()?)
    }
}

impl Drop for Shared {
    /// The last handle went: shut down as [`Client::shutdown`] does, and
    /// wait, for at most one response timeout in all, for the releases at
    /// work (the held locks', and those being retried): the process may be
    /// about to end, which would take them along.
    fn drop(&mut self) {
        let response = self.config.response_timeout;
        let started = std::time::Instant::now();
        if !self.shut_down.load(Ordering::Acquire) {
            if let Some(Some(sub)) = self.subscriber.get() {
                sub.shutdown();
            }
            watchdog::client_gone(
                &self.counters,
                self.config.release_on_shutdown,
                Some(response),
            );
        }
        let _ = self
            .counters
            .retries
            .wait_none(response.saturating_sub(started.elapsed()));
    }
}
