//! [`Builder`] and the validated, immutable `Config` it produces. No I/O;
//! `Builder::build` itself lives with the [`Client`](crate::Client) it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::connection::sentinel::SentinelOptions;
use crate::connection::{ConnectOptions, Deployment, Tls};
use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::lease::{MAX_LEASE, MIN_LEASE, lease_ms};
use crate::lost::{LostCallback, LostLease};
use crate::record::RecordCommand;
use crate::redisson_settings::{ClassicPublish, Interop};
use crate::replicas::ReplicaAcks;

/// Default lease of watchdog-renewed locks: 30 s (Redisson's `lockWatchdogTimeout`).
pub(crate) const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on the wait for one Redis reply: 3 s (Redisson's `timeout`).
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on establishing one connection: 3 s.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default number of pooled connections per client: 16.
const DEFAULT_POOL_SIZE: usize = 16;
/// Default longest sleep of a waiter between two attempts when no unlock
/// message arrives: 1 s.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default number of lease renewals the watchdog sends in one script call: 100
/// (Redisson's renewal batch).
const DEFAULT_RENEW_BATCH: usize = 100;
/// Default time a queued fair-lock waiter keeps its place without an
/// attempt: 300 s (Redisson's `fairLockWaitTimeout`).
const DEFAULT_FAIR_WAIT_TIMEOUT: Duration = Duration::from_secs(300);

/// Shortest response, connect or poll setting: shorter ones could never
/// see a reply.
const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest response, connect or poll setting: longer ones would only hide
/// a dead server (and overflow deadline arithmetic near `Duration::MAX`).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Most pooled connections: far above what one process can use.
const MAX_POOL_SIZE: usize = 4096;
/// Most renewals in one script call: Redis serves nobody else while a
/// call runs, so a huge batch would stall every client of the server.
const MAX_RENEW_BATCH: usize = 10_000;

/// Configuration of a [`Client`](crate::Client), made by
/// [`Client::builder`](crate::Client::builder).
///
/// Every setter documents its default and its bounds. Nothing is checked
/// until [`Builder::build`], which reports every problem as
/// [`Error::InvalidArgument`]; no setting, however large or small, makes
/// the client panic later.
///
/// | setting | default | bounds |
/// | --- | --- | --- |
/// | [`url`](Builder::url) | `redis://127.0.0.1:6379/` | a redis-rs URL |
/// | [`watchdog_timeout`](Builder::watchdog_timeout) | 30 s | 5 ms ..= 365 days, ≥ 3 × response timeout |
/// | [`response_timeout`](Builder::response_timeout) | 3 s | 1 ms ..= 1 day |
/// | [`connect_timeout`](Builder::connect_timeout) | 3 s | 1 ms ..= 1 day |
/// | [`pool_size`](Builder::pool_size) | 16 | 1 ..= 4096 |
/// | [`poll_interval`](Builder::poll_interval) | 1 s | 1 ms ..= 1 day |
/// | [`renew_batch`](Builder::renew_batch) | 100 | 1 ..= 10 000 |
/// | [`fair_wait_timeout`](Builder::fair_wait_timeout) | 300 s | 5 ms ..= 365 days, ≥ 3 × response timeout |
/// | [`release_on_shutdown`](Builder::release_on_shutdown) | `true` | |
/// | [`classic_publish`](Builder::classic_publish) | [`Auto`](crate::ClassicPublish::Auto) | |
/// | [`permit_clock_skew`](Builder::permit_clock_skew) | 0 | 0 ..= 1 day |
/// | [`on_lease_lost`](Builder::on_lease_lost) | none | |
/// | [`holder_record`](Builder::holder_record) | `true` | |
/// | [`program`](Builder::program) | `argv[0]` | cut to 256 bytes |
/// | [`host`](Builder::host) | this machine's host name | cut to 256 bytes |
/// | [`record_command`](Builder::record_command) | [`Masked`](crate::RecordCommand::Masked) | |
/// | [`record_prefix`](Builder::record_prefix) | `redguard:client:` | 1 ..= 256 bytes, no `*?[]\{}` |
/// | [`metrics_lock_names`](Builder::metrics_lock_names) | `false` | |
/// | [`tls_root_ca`](Builder::tls_root_ca), [`tls_client_cert`](Builder::tls_client_cert) | system roots, none | PEM; `rediss://` only |
#[derive(Clone)]
#[must_use = "a builder does nothing until `build()`"]
pub struct Builder {
    url: Option<String>,
    /// Seed URLs of a Redis Cluster (set by [`Builder::cluster`]).
    cluster: Option<Vec<String>>,
    pool_size: usize,
    watchdog_timeout: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    poll_interval: Duration,
    renew_batch: usize,
    release_on_shutdown: bool,
    fair_wait_timeout: Duration,
    on_lease_lost: Option<LostCallback>,
    holder_record: bool,
    program: Option<String>,
    host: Option<String>,
    record_command: RecordCommand,
    record_prefix: String,
    metrics_lock_names: bool,
    tls: Tls,
    /// Sentinel deployment: see `connection::sentinel` for its setters.
    pub(crate) sentinel: SentinelOptions,
    /// Replica acknowledgement: see `replicas` for its setters.
    pub(crate) acks: ReplicaAcks,
    /// Mixed deployments with Redisson: see `interop` for its setters.
    pub(crate) interop: Interop,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: show only where it points.
        f.debug_struct("Builder")
            .field("url_set", &self.url.is_some())
            .field("cluster_seeds", &self.cluster.as_ref().map_or(0, Vec::len))
            .field("pool_size", &self.pool_size)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("renew_batch", &self.renew_batch)
            .field("release_on_shutdown", &self.release_on_shutdown)
            .field("fair_wait_timeout", &self.fair_wait_timeout)
            .field("on_lease_lost", &self.on_lease_lost.is_some())
            .field("holder_record", &self.holder_record)
            .field("program", &self.program)
            .field("host", &self.host)
            .field("record_command", &self.record_command)
            .field("record_prefix", &self.record_prefix)
            .field("metrics_lock_names", &self.metrics_lock_names)
            .field("tls_root_ca", &self.tls.root_ca.is_some())
            .field("tls_client_cert", &self.tls.client.is_some())
            .field("sentinel", &self.sentinel)
            .field("acks", &self.acks)
            .field("interop", &self.interop)
            .finish()
    }
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            url: None,
            cluster: None,
            pool_size: DEFAULT_POOL_SIZE,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            renew_batch: DEFAULT_RENEW_BATCH,
            release_on_shutdown: true,
            fair_wait_timeout: DEFAULT_FAIR_WAIT_TIMEOUT,
            on_lease_lost: None,
            holder_record: true,
            program: None,
            host: None,
            record_command: RecordCommand::Masked,
            record_prefix: crate::record::DEFAULT_PREFIX.to_owned(),
            metrics_lock_names: false,
            tls: Tls::default(),
            sentinel: SentinelOptions::default(),
            acks: ReplicaAcks::default(),
            interop: Interop::default(),
        }
    }
}

impl Builder {
    /// The server to use, as a redis-rs URL: `redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` for TLS (needs a TLS feature of the `redis` crate),
    /// `redis+unix:///path`; or a Sentinel deployment,
    /// `redis+sentinel://[[user]:password@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[?db=N]`
    /// (see [`Client::open`](crate::Client::open)). Default:
    /// `redis://127.0.0.1:6379/`.
    ///
    /// Percent-encoded passwords are decoded by redis-rs; the password is
    /// never printed by redguard (`Debug` shows only host and port).
    pub fn url(mut self, url: &str) -> Builder {
        self.url = Some(url.to_owned());
        self
    }

    /// Use a Redis Cluster, found through `seeds`: node URLs
    /// (`redis://[[user]:password@]host:port` or `rediss://...`, all alike),
    /// of which one reachable node is enough; the rest of the topology is
    /// discovered (`CLUSTER SLOTS`). Same as a
    /// `redis+cluster://[[user]:password@]H:P[,H:P...]/` URL; replaces
    /// [`url`](Builder::url).
    ///
    /// On a Cluster every key of one lock must share a hash slot: names
    /// whose derived keys cannot (see docs/DEPLOYMENTS.md) are
    /// rejected with [`Error::InvalidArgument`] when used. Bad seed URLs are
    /// reported by [`build`](Builder::build).
    ///
    /// While a slot migrates, Redis refuses (`TRYAGAIN`) every call whose
    /// keys are split between the two nodes, for as long as the migration
    /// lasts. Such a call is sent again, with backoff: a waiting call until
    /// its deadline, a release until its lease ends, any other call (a
    /// `try_lock`, an `inspect`, a force unlock) for up to the
    /// [`watchdog_timeout`](Builder::watchdog_timeout); only then does the
    /// error reach the caller.
    pub fn cluster<I, S>(mut self, seeds: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.cluster = Some(seeds.into_iter().map(|s| s.as_ref().to_owned()).collect());
        self
    }

    /// Most exclusive connections the client keeps open to each server,
    /// for the calls that need a connection to themselves (`MULTI`/`EXEC`,
    /// `WAIT` for [`min_replica_acks`](Builder::min_replica_acks), the
    /// status and administrative commands). Lock calls share one more
    /// connection per server, pipelined, whatever the number of threads;
    /// the subscriber's pub/sub connection and the watchdog's connection
    /// are extra. Default 16; must be at least 1.
    pub fn pool_size(mut self, size: usize) -> Builder {
        self.pool_size = size;
        self
    }

    /// Lease of locks taken without an explicit lease; the watchdog renews
    /// it every third of this while the lock is held (Redisson's
    /// `lockWatchdogTimeout`). Default 30 s. Must be at least 3 × the
    /// response timeout, so that a renewal can fail once and still be
    /// retried in time.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Builder {
        self.watchdog_timeout = timeout;
        self
    }

    /// Longest wait for one Redis reply. Default 3 s. A timed-out
    /// connection is discarded, never reused.
    pub fn response_timeout(mut self, timeout: Duration) -> Builder {
        self.response_timeout = timeout;
        self
    }

    /// Longest wait to establish one connection, and to get a connection
    /// from a pool whose every connection is busy. Default 3 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// Longest a waiter sleeps between two attempts when no unlock message
    /// arrives. Waiters are woken by pub/sub; this bounds the cost of a lost
    /// message or of a lock whose key has no expiry. A waiter never sleeps
    /// longer than the holder's remaining ttl either. Default 1 s.
    pub fn poll_interval(mut self, interval: Duration) -> Builder {
        self.poll_interval = interval;
        self
    }

    /// Most lease renewals the watchdog sends to one server in one script
    /// call (Redis runs a call without serving other clients meanwhile, so
    /// this bounds the pause others see); up to 16 calls share a round trip.
    /// Default 100.
    pub fn renew_batch(mut self, batch: usize) -> Builder {
        self.renew_batch = batch;
        self
    }

    /// Whether [`Client::shutdown`](crate::Client::shutdown) (or dropping the last handle) releases
    /// the locks this client still holds. Default `true`; with `false` they
    /// stay until their lease runs out.
    pub fn release_on_shutdown(mut self, release: bool) -> Builder {
        self.release_on_shutdown = release;
        self
    }

    /// How long a waiter queued on a fair lock ([`Client::fair_lock`](crate::Client::fair_lock)) keeps
    /// its place without an attempt (Redisson's `fairLockWaitTimeout`).
    /// Default 300 s.
    ///
    /// It is the waiter's wait in Redisson's queue arithmetic: a waiter
    /// joins with the deadline of the one ahead plus this (the lock's
    /// expiry plus this when first in line), and its grant, or its giving
    /// up, takes this off the deadlines behind it again. A live waiter
    /// attempts at least every third of this (and every poll interval),
    /// each attempt raising its deadline to at least now + this on the
    /// Redis server's clock (and every deadline behind it by as much), so
    /// it never loses its place by waiting long. A waiter whose process
    /// died (or stalled for longer than this) is pruned once it heads the
    /// queue and its deadline has passed: this long after its last attempt,
    /// or later when Redisson's arithmetic put its deadline further out (the
    /// lock's expiry when the queue formed plus the waits queued up to it).
    /// A stalled waiter that comes back joins the queue again at its tail. Must be at least 3 × the
    /// response timeout, so that a slow attempt does not cost a live waiter
    /// its place.
    pub fn fair_wait_timeout(mut self, timeout: Duration) -> Builder {
        self.fair_wait_timeout = timeout;
        self
    }

    /// Calls `callback` once for every lease of this client that the
    /// watchdog finds lost, with the lock's name and kind, the holder id,
    /// when the loss was noticed and why ([`LostLease`]). Default: none
    /// (the loss is logged as a warning either way, and the hold's guard
    /// reports it from [`LockGuard::check`](crate::LockGuard::check)).
    ///
    /// * **Once per lost lease**, from the watchdog's own thread, never
    ///   while redguard holds an internal lock: the callback may call
    ///   redguard (look at the lock, take another one on another thread).
    /// * **It must not block**: the same thread renews the leases of every
    ///   client of the process. Hand slow work (paging someone, stopping a
    ///   job) to a thread or a channel of your own. A panic in it is
    ///   caught and logged.
    /// * **Not called for a normal release**, nor for what the holder's
    ///   own release finds: an unlock that answers
    ///   [`Error::NotHeld`](crate::Error::NotHeld) tells the caller
    ///   directly; nor when the client's shutdown releases its locks.
    ///
    /// Redisson has no such hook (its watchdog only stops renewing).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::builder()
    ///     .url("redis://127.0.0.1/")
    ///     .on_lease_lost(|lost| {
    ///         eprintln!("lost {} ({}): {}", lost.name_lossy(), lost.kind, lost.reason);
    ///     })
    ///     .build()?;
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn on_lease_lost(
        mut self,
        callback: impl Fn(&LostLease) + Send + Sync + 'static,
    ) -> Builder {
        self.on_lease_lost = Some(LostCallback::new(callback));
        self
    }

    /// Whether the client keeps a holder record beside its locks, so that
    /// `redguard status` and [`Lock::inspect`](crate::Lock::inspect) can
    /// say which host, process and program holds a lock and since when.
    /// Default `true`.
    ///
    /// The record is one small hash per client (on a Cluster: per master
    /// where it holds something), `redguard:client:{<client id>}` (under
    /// another [`record_prefix`](Builder::record_prefix) if given), holding
    /// the host name, pid, [`program`](Builder::program), crate version and
    /// the client's start time, plus the start time of each of its holds
    /// (up to 1,000 per record), all on the server's clock. It lives one
    /// [`watchdog_timeout`](Builder::watchdog_timeout), is refreshed in the
    /// same round trips as the client's renewals and deleted when the
    /// client shuts down, so a killed process's record is gone within one
    /// lease. The locks themselves keep Redisson's layout: a Java holder
    /// simply has no record. The ACL user needs the key pattern
    /// `~redguard:client:*`, or that of its [`record_prefix`](Builder::record_prefix) (see docs/SECURITY.md).
    ///
    /// Hold start times are written off the acquire path, by the watchdog:
    /// the first hold at once, later ones within one renewal period
    /// (a third of the watchdog timeout), so holds shorter than that may
    /// show no start time.
    ///
    /// Every connection of the client is named `redguard-<first 8 hex
    /// digits of the client id>` (`CLIENT SETNAME`) either way, so that
    /// `CLIENT LIST` ties connections to their record.
    pub fn holder_record(mut self, keep: bool) -> Builder {
        self.holder_record = keep;
        self
    }

    /// What the holder record says this client runs. Default: the
    /// process's `argv[0]`. Kept as [`record_command`](Builder::record_command)
    /// says (by default with credentials masked), then cut to 256 bytes;
    /// say what helps an operator (a job's name, a command line). The
    /// `redguard` tool puts the command it runs there. Redisson keeps no
    /// such record.
    pub fn program(mut self, program: impl Into<String>) -> Builder {
        self.program = Some(program.into());
        self
    }

    /// The host name the holder record gives. Default: this machine's
    /// (`gethostname`). For a process that runs for several hosts (a
    /// container named after its pod, a test that plays several hosts).
    /// Cut to 256 bytes. Redisson keeps no such record.
    pub fn host(mut self, host: impl Into<String>) -> Builder {
        self.host = Some(host.into());
        self
    }

    /// How much of the [`program`](Builder::program) text the holder
    /// record keeps: all of it, with credentials masked (the default),
    /// the program's name only, or nothing. See [`RecordCommand`] for what
    /// is masked. Anyone who can read the lock's keys on the server can
    /// read the record (`HGETALL redguard:client:{<client id>}`), so a
    /// password passed on a command line must not reach it.
    ///
    /// Redisson keeps no holder record; this changes nothing in the
    /// locks' layout.
    pub fn record_command(mut self, how: RecordCommand) -> Builder {
        self.record_command = how;
        self
    }

    /// The prefix of this client's holder record keys, before the
    /// `{<client id>}` hash tag. Default `redguard:client:`. Tenants that
    /// share a server each give their own (`tenantA:redguard:client:`), so
    /// that an ACL user confined to its own keys (`~tenantA:*`) keeps its
    /// records there and can neither read nor touch another tenant's.
    ///
    /// Readers find records only under their own prefix: `status`,
    /// [`Lock::inspect`](crate::Lock::inspect),
    /// [`Client::holder_records`](crate::Client::holder_records) and
    /// [`Client::waiting_records`](crate::Client::waiting_records) of a
    /// client with another prefix see no record of this one.
    ///
    /// # Errors
    ///
    /// [`Builder::build`] rejects with [`Error::InvalidArgument`] a prefix
    /// that is empty, longer than 256 bytes, or holds `{` or `}` (the hash
    /// tag follows it) or a glob character `*`, `?`, `[`, `]`, `\` (records
    /// are searched with `SCAN MATCH <prefix>*`).
    pub fn record_prefix(mut self, prefix: impl Into<String>) -> Builder {
        self.record_prefix = prefix.into();
        self
    }

    /// Whether the metrics (feature `metrics`) carry the lock's name as a
    /// `name` label, beside `kind`. Default `false`: lock names are
    /// unbounded (one per order, per tenant...), and a series per name can
    /// swamp a metrics store. Turn it on for a small, fixed set of names.
    /// Without the feature it changes nothing.
    pub fn metrics_lock_names(mut self, on: bool) -> Builder {
        self.metrics_lock_names = on;
        self
    }

    /// Trusts the CA in `pem` (PEM-encoded) for `rediss://` servers, instead
    /// of the system's roots: pins the server's CA. Needs the `tls` feature
    /// (on by default).
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Builder {
        self.tls.root_ca = Some(pem.into());
        self
    }

    /// Presents `cert_pem` with its private key `key_pem` (both PEM) to
    /// `rediss://` servers that require client certificates (Redis's
    /// `tls-auth-clients yes`, its default). Needs the `tls` feature.
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Builder {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    pub(crate) fn into_config(self) -> Result<Config> {
        self.tls.check_pem()?;
        let parsed = match &self.cluster {
            Some(seeds) => Deployment::Cluster(crate::connection::cluster::seeds(seeds)?),
            None => Deployment::parse(self.url.as_deref().unwrap_or("redis://127.0.0.1:6379/"))?,
        };
        let deployment = self.sentinel.resolve(parsed)?;
        self.acks.validate()?;
        self.interop.validate()?;
        for (what, d) in [
            ("response timeout", self.response_timeout),
            ("connect timeout", self.connect_timeout),
            ("poll interval", self.poll_interval),
        ] {
            if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&d) {
                return Err(Error::invalid(format!(
                    "{what} {} is outside {} ..= {}",
                    Human(d),
                    Human(MIN_TIMEOUT),
                    Human(MAX_TIMEOUT)
                )));
            }
        }
        for (what, d) in [
            ("watchdog timeout", self.watchdog_timeout),
            ("fair wait timeout", self.fair_wait_timeout),
        ] {
            if !(MIN_LEASE..=MAX_LEASE).contains(&d) {
                return Err(Error::invalid(format!(
                    "{what} {} is outside {} ..= {}",
                    Human(d),
                    Human(MIN_LEASE),
                    Human(MAX_LEASE)
                )));
            }
        }
        if self.tls.is_set() {
            if !cfg!(feature = "tls") {
                return Err(Error::invalid(
                    "TLS certificates need redguard's `tls` feature",
                ));
            }
            if !deployment.is_tls() {
                return Err(Error::invalid("TLS certificates need a rediss:// URL"));
            }
        }
        crate::record::check_prefix(&self.record_prefix).map_err(Error::invalid)?;
        if !(1..=MAX_POOL_SIZE).contains(&self.pool_size) {
            return Err(Error::invalid(format!(
                "pool size {} is outside 1 ..= {MAX_POOL_SIZE}",
                self.pool_size
            )));
        }
        if !(1..=MAX_RENEW_BATCH).contains(&self.renew_batch) {
            return Err(Error::invalid(format!(
                "renew batch {} is outside 1 ..= {MAX_RENEW_BATCH}",
                self.renew_batch
            )));
        }
        lease_ms(self.watchdog_timeout)?;
        lease_ms(self.fair_wait_timeout)?;
        if self.watchdog_timeout < self.response_timeout.saturating_mul(3) {
            return Err(Error::invalid(format!(
                "watchdog timeout {} must be at least 3 x the response timeout {}",
                Human(self.watchdog_timeout),
                Human(self.response_timeout)
            )));
        }
        if self.fair_wait_timeout < self.response_timeout.saturating_mul(3) {
            return Err(Error::invalid(format!(
                "fair wait timeout {} must be at least 3 x the response timeout {}",
                Human(self.fair_wait_timeout),
                Human(self.response_timeout)
            )));
        }
        Ok(Config {
            deployment,
            pool_size: self.pool_size,
            watchdog_timeout: self.watchdog_timeout,
            response_timeout: self.response_timeout,
            connect_timeout: self.connect_timeout,
            poll_interval: self.poll_interval,
            renew_batch: self.renew_batch,
            release_on_shutdown: self.release_on_shutdown,
            fair_wait_timeout: self.fair_wait_timeout,
            on_lease_lost: self.on_lease_lost,
            holder_record: self.holder_record,
            program: self.program,
            host: self.host,
            record_command: self.record_command,
            record_prefix: Arc::from(self.record_prefix),
            metrics_lock_names: self.metrics_lock_names,
            tls: self.tls,
            acks: self.acks,
            interop: self.interop,
        })
    }
}

/// A validated configuration.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) deployment: Deployment,
    pub(crate) pool_size: usize,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) renew_batch: usize,
    pub(crate) release_on_shutdown: bool,
    pub(crate) fair_wait_timeout: Duration,
    pub(crate) on_lease_lost: Option<LostCallback>,
    pub(crate) holder_record: bool,
    pub(crate) program: Option<String>,
    /// The host name the holder record gives instead of this machine's.
    pub(crate) host: Option<String>,
    pub(crate) record_command: RecordCommand,
    /// The prefix of holder record keys (checked).
    pub(crate) record_prefix: Arc<str>,
    pub(crate) metrics_lock_names: bool,
    pub(crate) tls: Tls,
    pub(crate) acks: ReplicaAcks,
    pub(crate) interop: Interop,
}

impl Config {
    /// How the connection source makes its connections.
    /// `name`: what each connection is named (`CLIENT SETNAME`).
    pub(crate) fn connect_options(&self, name: Option<Arc<str>>) -> ConnectOptions {
        ConnectOptions {
            name,
            tls: self.tls.clone(),
            pool_size: self.pool_size,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            failover_wait: self.watchdog_timeout / 3,
            slot_move_wait: self.watchdog_timeout,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("server", &self.deployment.label())
            .field("acks", &self.acks)
            .field("pool_size", &self.pool_size)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

// The Sentinel deployment and the data nodes' credentials (the settings
// `SentinelOptions` keeps until `Builder::build` resolves them).
impl Builder {
    /// A Sentinel deployment: the sentinels to ask (each a URL,
    /// `redis://[user:password@]host:port` or `rediss://…` for TLS, or a
    /// bare `host[:port]`, port 26379 by default) and the name they monitor
    /// the master under (`sentinel monitor <name> …`). Replaces
    /// [`Builder::url`]. Redisson's `useSentinelServers()`
    /// (`addSentinelAddress`, `setMasterName`).
    ///
    /// The client asks any reachable sentinel for the master
    /// (`SENTINEL get-master-addr-by-name`), checks `ROLE` on every new
    /// connection, and follows failovers: see docs/DEPLOYMENTS.md.
    /// Credentials in these URLs are the sentinels' own; set the data
    /// nodes' with [`Builder::username`] and [`Builder::password`], and
    /// override the sentinels' with [`Builder::sentinel_username`] and
    /// [`Builder::sentinel_password`]. The same deployment as one URL:
    /// `redis+sentinel://[[user]:password@]HOST:PORT[,HOST:PORT...]/MASTER[?db=N]`
    /// (see [`Client::open`](crate::Client::open)).
    ///
    /// Checked by [`Builder::build`]: an empty list or master name, an
    /// unparsable entry, or a mix of TLS and plain sentinels is
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::builder()
    ///     .sentinel(["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"], "mymaster")
    ///     .sentinel_password("sentinel-secret")
    ///     .password("data-secret")
    ///     .build()?;
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn sentinel<I, S>(mut self, sentinels: I, master_name: &str) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = sentinels
            .into_iter()
            .map(|s| s.as_ref().to_owned())
            .collect();
        self.sentinel.sentinels = Some((urls, master_name.to_owned()));
        self
    }

    /// The username the client authenticates to the sentinels with (ACL
    /// users on Redis 6+). Default: none, or the one in the sentinels' URLs.
    /// Separate from the data nodes' [`Builder::username`]: real
    /// deployments often differ. Never printed.
    pub fn sentinel_username(mut self, username: &str) -> Builder {
        self.sentinel.sentinel_username = Some(username.to_owned());
        self
    }

    /// The password the client authenticates to the sentinels with
    /// (their `requirepass`, Redisson's `sentinelPassword`). Default: none,
    /// or the one in the sentinels' URLs. Separate from the data nodes'
    /// [`Builder::password`]. Never printed: `Debug` shows only whether it
    /// is set.
    pub fn sentinel_password(mut self, password: &str) -> Builder {
        self.sentinel.sentinel_password = Some(password.to_owned());
        self
    }

    /// Whether the client listens for the sentinels' `+switch-master`
    /// (default `true`). Without it a failover is noticed on the next
    /// error (`READONLY`, a refused connection, a replica's `ROLE`). For
    /// tests of exactly that path.
    #[doc(hidden)]
    pub fn sentinel_switch_listener(mut self, on: bool) -> Builder {
        self.sentinel.no_switch_listener = !on;
        self
    }

    /// The username for the data nodes (the server, or a Sentinel
    /// deployment's master), overriding one in the URL. Default: the URL's.
    pub fn username(mut self, username: &str) -> Builder {
        self.sentinel.username = Some(username.to_owned());
        self
    }

    /// The password for the data nodes (the server, or a Sentinel
    /// deployment's master), overriding one in the URL. Default: the URL's.
    /// Never printed.
    pub fn password(mut self, password: &str) -> Builder {
        self.sentinel.password = Some(password.to_owned());
        self
    }
}

// Replica acknowledgement (`WAIT`; see `replicas`).
impl Builder {
    /// How many replicas must acknowledge each lock grant, lease extension
    /// and fencing-token increment before the call succeeds (Redis's
    /// `WAIT`; Redisson's `checkLockSyncedSlaves`, which asks for at least
    /// one). Default 0: no `WAIT`, as on a single server. At most 1000.
    /// [`Lock::min_replica_acks`](crate::Lock::min_replica_acks) overrides
    /// it per lock. It covers every lock kind (read-write locks and run-once
    /// claims included) and the permits of an
    /// [`ExpiringSemaphore`](crate::ExpiringSemaphore), their grants and
    /// their renewals alike.
    ///
    /// After the script, on the same connection and in the same write, the
    /// client sends `WAIT n timeout`. When fewer than `n` replicas
    /// acknowledge within [`Builder::replica_ack_timeout`]:
    ///
    /// * a grant (fencing token included) is undone and the call returns
    ///   [`Error::NotReplicated`]: nothing is held, and a failover cannot
    ///   hand the same lock or token to someone else afterwards;
    /// * a watchdog renewal does not extend the lease the holder counts on;
    ///   it is retried, and if no renewal is acknowledged before the lease
    ///   runs out the guard reports [`Error::LockLost`].
    ///
    /// `WAIT` makes a write survive the failover of the master it was made
    /// on only if one of the acknowledging replicas is promoted; it does not
    /// make Redis replication synchronous (see
    /// docs/DEPLOYMENTS.md).
    pub fn min_replica_acks(mut self, replicas: u32) -> Builder {
        self.acks.min = replicas;
        self
    }

    /// Longest wait for the acknowledgements [`Builder::min_replica_acks`]
    /// asks for (the `WAIT` timeout; Redisson's `slavesSyncTimeout`).
    /// Default 1 s; 1 ms ..= 1 day. A call that waits for acknowledgements
    /// may take up to this much longer than its response timeout.
    pub fn replica_ack_timeout(mut self, timeout: Duration) -> Builder {
        self.acks.timeout = timeout;
        self
    }
}

/// Settings for deployments shared with Redisson (Java) clients (see
/// `interop`).
impl Builder {
    /// Whether wake-ups on a Redis Cluster also send a classic `PUBLISH`
    /// when the slot's master counts no classic listener. Default
    /// [`ClassicPublish::Auto`]. Set [`ClassicPublish::Always`] when Java
    /// clients without sharded pub/sub (Redisson before 3.22,
    /// `shardedSubscriptionMode = OFF`, Redis 6) may wait on these names with
    /// `subscriptionMode = SLAVE` (Redisson's default), so that they hear
    /// unlocks, releases and latches reaching zero. No effect outside a
    /// Cluster, where the classic message is always sent.
    pub fn classic_publish(mut self, when: ClassicPublish) -> Builder {
        self.interop.classic_publish = when;
        self
    }

    /// The largest clock skew the lease ends of expiring permits
    /// ([`Client::expiring_semaphore`](crate::Client::expiring_semaphore))
    /// tolerate between the Redis server and other clients of the same
    /// semaphores. Default 0; at most 1 day.
    ///
    /// redguard stamps lease ends with the server's clock (`TIME`); Redisson
    /// stamps them with its own `System.currentTimeMillis()`. With a skew
    /// `s`, this client stamps its permits' lease ends `s` later than their
    /// leases (so a client whose clock runs up to `s` ahead does not take
    /// them back early) and takes back a permit only `s` after its stamped
    /// end (so a permit stamped by a clock up to `s` behind is not taken
    /// back early). The holder's own lease, as
    /// [`PermitGuard`](crate::PermitGuard) reports it, is unchanged. Cost:
    /// a permit whose holder died comes back up to `2 × s` later. Set it to
    /// the bound your clock synchronisation keeps between the Redis server
    /// and every Java client when Redisson's `RPermitExpirableSemaphore`
    /// shares these names; leave it at 0 otherwise.
    pub fn permit_clock_skew(mut self, skew: Duration) -> Builder {
        self.interop.permit_clock_skew = skew;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::sentinel::DEFAULT_SENTINEL_PORT;

    #[test]
    fn record_prefixes_are_checked() {
        let prefix = |p: &str| Builder::default().record_prefix(p).into_config();
        assert_eq!(
            &*prefix("tenantA:redguard:client:").unwrap().record_prefix,
            "tenantA:redguard:client:"
        );
        assert_eq!(
            &*Builder::default().into_config().unwrap().record_prefix,
            "redguard:client:"
        );
        assert!(prefix(&"x".repeat(256)).is_ok());
        let long = "x".repeat(257);
        for (bad, says) in [
            ("", "empty"),
            (long.as_str(), "longer than 256"),
            ("t:*", "glob"),
            ("t?:", "glob"),
            ("t[a]:", "glob"),
            ("t]:", "glob"),
            ("t\\:", "glob"),
            ("t{a}:", "{ or }"),
            ("t}:", "{ or }"),
        ] {
            match prefix(bad) {
                Err(Error::InvalidArgument(msg)) => {
                    assert!(
                        msg.contains("record prefix") && msg.contains(says),
                        "{bad:?}: {msg}"
                    );
                }
                other => panic!("{bad:?} gave {:?}", other.map(|_| ())),
            }
        }
    }

    #[test]
    fn builder_rejects_nonsense() {
        let b = || Builder::default();
        assert!(b().into_config().is_ok());
        assert!(b().url("not a url").into_config().is_err());
        assert!(b().pool_size(0).into_config().is_err());
        assert!(b().watchdog_timeout(Duration::ZERO).into_config().is_err());
        assert!(b().fair_wait_timeout(Duration::ZERO).into_config().is_err());
        assert!(b().fair_wait_timeout(Duration::MAX).into_config().is_err());
        assert!(
            b().fair_wait_timeout(Duration::from_secs(8))
                .into_config()
                .is_err(),
            "under 3 x the 3 s default response timeout"
        );
        assert_eq!(
            b().into_config().unwrap().fair_wait_timeout,
            DEFAULT_FAIR_WAIT_TIMEOUT
        );
        assert!(
            b().watchdog_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(1))
                .into_config()
                .is_err()
        );
        assert!(
            b().watchdog_timeout(Duration::from_millis(600))
                .response_timeout(Duration::from_millis(200))
                .into_config()
                .is_ok()
        );
    }

    /// Durations in messages read as typed (`30s`, not `0ns` or
    /// `31536000s`), and URL errors say what is wrong in plain words.
    #[test]
    fn messages_say_durations_and_urls_plainly() {
        let message = |b: Builder| b.into_config().unwrap_err().to_string();
        assert_eq!(
            message(Builder::default().response_timeout(Duration::ZERO)),
            "invalid argument: response timeout 0s is outside 1ms ..= 1d"
        );
        assert_eq!(
            message(Builder::default().watchdog_timeout(Duration::from_secs(400 * 86_400))),
            "invalid argument: watchdog timeout 400d is outside 5ms ..= 365d"
        );
        assert_eq!(
            message(
                Builder::default()
                    .watchdog_timeout(Duration::from_secs(2))
                    .response_timeout(Duration::from_millis(1500))
            ),
            "invalid argument: watchdog timeout 2s must be at least 3 x the response timeout \
             1s 500ms"
        );
        let http = message(Builder::default().url("http://x"));
        assert!(http.contains("unsupported URL scheme \"http\""), "{http}");
        assert!(http.contains("redis+cluster://"), "{http}");
        assert!(!http.contains("invalid client config"), "{http}");
        let bare = message(Builder::default().url("127.0.0.1:6379"));
        assert!(bare.contains("no scheme"), "{bare}");
        let secret = message(Builder::default().url("user:s3cret@host://x"));
        assert!(!secret.contains("s3cret"), "{secret}");
        let port = message(Builder::default().url("redis://127.0.0.1:notaport/"));
        assert!(
            port.starts_with("invalid argument: bad Redis URL: "),
            "{port}"
        );
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = Builder::default().url("redis://user:s3cret%40pw@127.0.0.1:7000/");
        let c = b.clone().into_config().unwrap();
        assert!(!format!("{b:?}").contains("s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn builder_sentinel_list_and_credentials() {
        let config = Builder::default()
            .sentinel(["redis://:s-pw@10.0.0.1:26379", "10.0.0.2"], "m")
            .password("d-pw")
            .username("app")
            .into_config()
            .unwrap();
        let Deployment::Sentinel(spec) = &config.deployment else {
            panic!("not a Sentinel deployment");
        };
        assert_eq!(
            spec.sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), DEFAULT_SENTINEL_PORT)
            ]
        );
        assert_eq!(spec.sentinel_password.as_deref(), Some("s-pw"));
        assert_eq!(spec.password.as_deref(), Some("d-pw"));
        assert_eq!(spec.username.as_deref(), Some("app"));
        for text in [format!("{config:?}"), config.deployment.label()] {
            assert!(!text.contains("s-pw") && !text.contains("d-pw"), "{text}");
        }

        // The URL form, with the sentinels' password from the builder.
        let config = Builder::default()
            .url("redis+sentinel://:d-pw@h1:1,h2:2/m?db=2")
            .sentinel_password("s-pw")
            .into_config()
            .unwrap();
        let Deployment::Sentinel(spec) = &config.deployment else {
            panic!("not a Sentinel deployment");
        };
        assert_eq!(spec.db, 2);
        assert_eq!(spec.sentinel_password.as_deref(), Some("s-pw"));
        assert_eq!(spec.password.as_deref(), Some("d-pw"));
        assert!(spec.switch_listener);

        let bad = |b: Builder| matches!(b.into_config(), Err(Error::InvalidArgument(_)));
        assert!(bad(Builder::default().sentinel(["h:1"], "")));
        assert!(bad(Builder::default().sentinel(Vec::<String>::new(), "m")));
        assert!(bad(
            Builder::default().sentinel(["redis://h:1", "rediss://h:2"], "m")
        ));
        assert!(bad(Builder::default().sentinel(["h:notaport"], "m")));
        assert!(bad(Builder::default().min_replica_acks(1001)));
        assert!(bad(Builder::default().replica_ack_timeout(Duration::ZERO)));
        assert!(!bad(Builder::default().min_replica_acks(2)));
    }
}
