//! A Redis Sentinel deployment as a [`Source`](super::Source): the master
//! is found through the sentinels, followed across failovers, and never
//! written to once it is known to be a replica.
//!
//! * **Discovery**: `SENTINEL get-master-addr-by-name <master>` on the
//!   sentinels in turn, starting with the last one that answered; the
//!   first address reported is the master. The sentinels' own credentials
//!   ([`SentinelSpec::sentinel_username`], `sentinel_password`) are used
//!   for them, the data nodes' credentials for the master.
//! * **`ROLE` on every new connection** to the master: a node that
//!   answers as a replica is refused before anything is sent to it (a
//!   demoted master with `replica-read-only no` would take writes that no
//!   other client sees), and the sentinel that named it is no longer asked
//!   first: a stale sentinel that keeps naming it is passed over.
//! * **Rediscovery**: a call that meets `READONLY`, a replica where the
//!   master was, or a refused connection forgets the master's pool and
//!   asks the sentinels again, retrying within the connect timeout (the
//!   bound on "getting a connection" the caller already accepted). A call
//!   that failed after its command may have run (a connection that broke
//!   mid-reply) is not repeated here: its caller decides, as it does on a
//!   single server; the next call rediscovers.
//! * **`+switch-master`**: one background thread ("redguard-sentinel")
//!   listens on a sentinel and swaps the master's pool the moment the
//!   sentinels announce a failover, instead of on the next error. It holds
//!   only a weak reference and ends when the client is dropped.
//!
//! Why not redis-rs's `sentinel` feature: its blocking `Sentinel`
//! (redis 1.8) asks `SENTINEL MASTERS` and then opens its own connections
//! to sentinels and masters without a connect or read timeout, so a frozen
//! sentinel or master would hang discovery without bound; and it needs
//! `&mut self` behind a lock shared by every thread. Here every I/O is
//! bounded by the client's connect and response timeouts, and the pool is
//! the crate's own (see [`Pool`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;

use super::pool::Pool;
use super::{ConnectOptions, Deployment};
use crate::error::{Error, Result};
use crate::retry::Backoff;

/// Port of a sentinel whose address in a `redis+sentinel://` URL names none.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// A `+switch-master` subscription that lasted this long starts the
/// listener's reconnect pauses again from the first (the cap of
/// [`Backoff::sentinel_listener`]).
const LISTEN_MAX_RETRY: Duration = Duration::from_secs(2);
/// How long the `+switch-master` listener blocks in one read before it
/// checks whether its client is still alive.
const LISTEN_TICK: Duration = Duration::from_millis(250);

/// What a Sentinel deployment is: its sentinels, the master's name and the
/// credentials of both kinds of node. No secret is ever printed (`Debug`
/// redacts).
#[derive(Clone)]
pub(crate) struct SentinelSpec {
    /// The sentinels, `(host, port)`.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under.
    pub(crate) master_name: String,
    /// TLS to sentinels and data nodes (`rediss+sentinel://`).
    pub(crate) tls: bool,
    /// Database, username and password of the data nodes.
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// Credentials of the sentinels themselves.
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
    /// Whether to listen for `+switch-master` (off only in tests of the
    /// paths that must work without it).
    pub(crate) switch_listener: bool,
}

impl fmt::Debug for SentinelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("tls", &self.tls)
            .field("db", &self.db)
            .field("password_set", &self.password.is_some())
            .field("sentinel_password_set", &self.sentinel_password.is_some())
            .finish_non_exhaustive()
    }
}

impl SentinelSpec {
    /// `"<master>@<host:port>,<host:port>/<db>"`: names the deployment in
    /// messages; holds no credentials.
    pub(crate) fn label(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| host_port(h, *p))
            .collect();
        format!("{}@{}/{}", self.master_name, hosts.join(","), self.db)
    }

    /// Parses `redis+sentinel://[[user]:password@]HOST[:PORT][,HOST[:PORT]...]/MASTER[?db=N]`
    /// (`rediss+sentinel://` for TLS). The credentials are the data nodes';
    /// the sentinels' come from the builder. Errors never repeat the URL.
    pub(crate) fn parse_url(url: &str) -> Result<SentinelSpec> {
        let bad = |why: &str| Error::invalid(format!("bad Sentinel URL: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected redis+sentinel://"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "redis+sentinel" => false,
            "rediss+sentinel" => true,
            _ => return Err(bad("expected redis+sentinel:// or rediss+sentinel://")),
        };
        let (authority, path) = rest.split_once('/').ok_or_else(|| {
            bad("no master name (expected redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER)")
        })?;
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((user, pw)) => (
                    Some(percent_decode(user).ok_or_else(|| bad("bad escape in the username"))?)
                        .filter(|u| !u.is_empty()),
                    Some(percent_decode(pw).ok_or_else(|| bad("bad escape in the password"))?),
                ),
                None => (
                    Some(percent_decode(info).ok_or_else(|| bad("bad escape in the username"))?)
                        .filter(|u| !u.is_empty()),
                    None,
                ),
            },
        };
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            sentinels.push(parse_host_port(host).ok_or_else(|| {
                bad("each sentinel must be HOST or HOST:PORT (IPv6 as [ADDR]:PORT)")
            })?);
        }
        let (name, query) = match path.split_once('?') {
            Some((name, query)) => (name, Some(query)),
            None => (path, None),
        };
        let master_name = percent_decode(name.trim_end_matches('/'))
            .ok_or_else(|| bad("bad escape in the master name"))?;
        if master_name.is_empty() {
            return Err(bad("no master name after the sentinels"));
        }
        let mut db = 0;
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("db", n)) => {
                    db = n
                        .parse::<i64>()
                        .ok()
                        .filter(|n| *n >= 0)
                        .ok_or_else(|| bad("db must be a number >= 0"))?;
                }
                _ => return Err(bad("the only query parameter accepted is db=N")),
            }
        }
        Ok(SentinelSpec {
            sentinels,
            master_name,
            tls,
            db,
            username,
            password,
            sentinel_username: None,
            sentinel_password: None,
            switch_listener: true,
        })
    }

    /// Connection parameters of the node at `host:port`, with the data
    /// nodes' (`sentinel == false`) or the sentinels' credentials.
    fn connection_info(
        &self,
        host: &str,
        port: u16,
        sentinel: bool,
    ) -> Result<redis::ConnectionInfo> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let info = format!("{scheme}://{}/", host_port(host, port))
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::invalid(format!("bad node address: {}", e.category())))?;
        let (user, pw, db) = if sentinel {
            (&self.sentinel_username, &self.sentinel_password, 0)
        } else {
            (&self.username, &self.password, self.db)
        };
        let mut settings = info.redis_settings().clone().set_db(db);
        if let Some(user) = user {
            settings = settings.set_username(user);
        }
        if let Some(pw) = pw {
            settings = settings.set_password(pw);
        }
        Ok(info.set_redis_settings(settings))
    }
}

/// The Sentinel settings of a [`Builder`](crate::Builder), resolved by
/// [`SentinelOptions::resolve`] when the client is built.
#[derive(Clone, Default)]
pub(crate) struct SentinelOptions {
    /// From [`Builder::sentinel`](crate::Builder::sentinel): the sentinels' URLs or addresses and the
    /// master name.
    pub(crate) sentinels: Option<(Vec<String>, String)>,
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
    /// The data nodes' credentials, overriding any in the URL.
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// Set by the hidden [`Builder::sentinel_switch_listener`](crate::Builder::sentinel_switch_listener).
    pub(crate) no_switch_listener: bool,
}

impl fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("master_name", &self.sentinels.as_ref().map(|(_, m)| m))
            .field("sentinel_password_set", &self.sentinel_password.is_some())
            .field("password_set", &self.password.is_some())
            .finish_non_exhaustive()
    }
}

impl SentinelOptions {
    /// The deployment the builder describes: [`Builder::sentinel`](crate::Builder::sentinel)'s when
    /// it was called, else `parsed` (from the URL); with the credentials
    /// set on the builder applied.
    pub(crate) fn resolve(&self, parsed: Deployment) -> Result<Deployment> {
        let parsed = match &self.sentinels {
            Some((urls, name)) => Deployment::Sentinel(spec_from_list(urls, name)?),
            None => parsed,
        };
        Ok(match parsed {
            Deployment::Single(info) => Deployment::Single(self.apply_data_credentials(info)),
            Deployment::Cluster(seeds) => Deployment::Cluster(
                seeds
                    .into_iter()
                    .map(|info| self.apply_data_credentials(info))
                    .collect(),
            ),
            Deployment::Sentinel(mut spec) => {
                if self.sentinel_username.is_some() {
                    spec.sentinel_username.clone_from(&self.sentinel_username);
                }
                if self.sentinel_password.is_some() {
                    spec.sentinel_password.clone_from(&self.sentinel_password);
                }
                if self.username.is_some() {
                    spec.username.clone_from(&self.username);
                }
                if self.password.is_some() {
                    spec.password.clone_from(&self.password);
                }
                spec.switch_listener = !self.no_switch_listener;
                Deployment::Sentinel(spec)
            }
        })
    }

    /// `info` with [`Builder::username`](crate::Builder::username) / [`Builder::password`](crate::Builder::password) applied.
    fn apply_data_credentials(&self, info: redis::ConnectionInfo) -> redis::ConnectionInfo {
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(pw) = &self.password {
            settings = settings.set_password(pw);
        }
        info.set_redis_settings(settings)
    }
}

/// `true` for `redis+sentinel://` and `rediss+sentinel://` URLs.
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis+sentinel")
            || scheme.eq_ignore_ascii_case("rediss+sentinel")
    })
}

/// A spec from [`Builder::sentinel`](crate::Builder::sentinel)'s list: each entry a URL
/// (`redis://[user:password@]host:port`, `rediss://` for TLS; its
/// credentials are the sentinels') or a bare `host[:port]`.
fn spec_from_list(urls: &[String], master_name: &str) -> Result<SentinelSpec> {
    if master_name.is_empty() {
        return Err(Error::invalid("the Sentinel master name must not be empty"));
    }
    if urls.is_empty() {
        return Err(Error::invalid(
            "a Sentinel deployment needs at least one sentinel",
        ));
    }
    let mut sentinels = Vec::new();
    let mut tls = None;
    let (mut user, mut pw) = (None, None);
    for url in urls {
        let url = url.trim();
        let (host, port, is_tls) = if url.contains("://") {
            let info = url
                .into_connection_info()
                .map_err(|e| Error::invalid(format!("bad sentinel URL: {}", e.category())))?;
            let settings = info.redis_settings();
            if user.is_none() {
                user = settings.username().map(str::to_owned);
            }
            if pw.is_none() {
                pw = settings.password().map(str::to_owned);
            }
            match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
                redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port, true),
                _ => return Err(Error::invalid("a sentinel must be reached over TCP")),
            }
        } else {
            let (host, port) = parse_host_port(url).ok_or_else(|| {
                Error::invalid("a sentinel must be HOST[:PORT] or a redis:// URL")
            })?;
            (host, port, false)
        };
        if *tls.get_or_insert(is_tls) != is_tls {
            return Err(Error::invalid(
                "sentinels must all use TLS (rediss://) or none",
            ));
        }
        sentinels.push((host, port));
    }
    Ok(SentinelSpec {
        sentinels,
        master_name: master_name.to_owned(),
        tls: tls.unwrap_or(false),
        db: 0,
        username: None,
        password: None,
        sentinel_username: user,
        sentinel_password: pw,
        switch_listener: true,
    })
}

/// `host:port`, with IPv6 hosts in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn parse_host_port(s: &str) -> Option<(String, u16)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match s.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() || (host.contains(':') && !s.starts_with('[')) {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => DEFAULT_SENTINEL_PORT,
    };
    Some((host.to_owned(), port))
}

/// Decodes `%XX` escapes; `None` for a malformed escape or bytes that are
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The current master: its address and the pool of connections to it.
struct Master {
    addr: (String, u16),
    pool: Arc<Pool>,
    /// Bumped on every change of master.
    generation: u64,
    /// The sentinel (its index) whose answer named this master; `None`
    /// when a `+switch-master` announcement did.
    named_by: Option<usize>,
}

struct Inner {
    spec: SentinelSpec,
    settings: ConnectOptions,
    /// One client per sentinel, with the sentinels' credentials.
    sentinels: Vec<(String, redis::Client)>,
    /// The sentinel to ask first: the last one that answered.
    preferred: AtomicUsize,
    master: RwLock<Option<Arc<Master>>>,
    /// One discovery at a time; the others wait for its answer.
    discovering: Mutex<()>,
    generation: AtomicU64,
    listener: OnceLock<()>,
}

/// The [`Source`](super::Source) case of a Sentinel deployment.
pub(crate) struct Sentinel {
    inner: Arc<Inner>,
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinel")
            .field("deployment", &self.inner.spec.label())
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// A source for the deployment `spec`. No I/O: the first call
    /// discovers the master.
    pub(crate) fn new(spec: SentinelSpec, settings: ConnectOptions) -> Result<Sentinel> {
        if spec.sentinels.is_empty() {
            return Err(Error::invalid(
                "a Sentinel deployment needs at least one sentinel",
            ));
        }
        let mut sentinels = Vec::new();
        for (host, port) in &spec.sentinels {
            let info = spec.connection_info(host, *port, true)?;
            let info = info
                .clone()
                .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name());
            let client = if settings.tls.is_set() {
                super::pool::build_with_tls(info, &settings.tls)?
            } else {
                redis::Client::open(info).map_err(Error::redis)?
            };
            sentinels.push((host_port(host, *port), client));
        }
        Ok(Sentinel {
            inner: Arc::new(Inner {
                spec,
                settings,
                sentinels,
                preferred: AtomicUsize::new(0),
                master: RwLock::new(None),
                discovering: Mutex::new(()),
                generation: AtomicU64::new(0),
                listener: OnceLock::new(),
            }),
        })
    }

    /// Runs `op` on a connection to the master. See the module docs for
    /// when the call rediscovers the master and tries again.
    pub(crate) fn with_conn<T>(
        &self,
        mut op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        self.on_master(|pool, sent| {
            pool.with_conn(|conn| {
                *sent = true;
                op(conn)
            })
        })
    }

    /// [`Sentinel::with_conn`] on the master's shared connection. `op`
    /// runs before its shared connection is made, so a call counts as
    /// unsent when its connection was refused: its command was never
    /// written (as a Cluster reads a refusal).
    pub(crate) fn with_shared_conn<T>(
        &self,
        mut op: impl FnMut(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        self.on_master(|pool, sent| {
            let result = pool.with_shared_conn(&mut op);
            *sent = !matches!(&result, Err(e) if e.is_refusal());
            result
        })
    }

    /// Runs `call` on the master's pool; `call` sets its flag once its
    /// command may have been sent. A failure that shows the master gone or
    /// demoted makes the next attempt ask the sentinels again; a call that
    /// was refused by a replica (`READONLY`) or never sent is tried again
    /// within the connect timeout, with backoff.
    fn on_master<T>(&self, mut call: impl FnMut(&Pool, &mut bool) -> Result<T>) -> Result<T> {
        let inner = &self.inner;
        let start = Instant::now();
        // A waiting call's deadline bounds this, and once it met a failure
        // it retries by itself: one try here (see `crate::outage`).
        let budget = super::budget::inner_budget(inner.settings.connect_timeout);
        let mut backoff = Backoff::sentinel_lookup();
        loop {
            let master = match inner.master() {
                Ok(master) => master,
                Err(e) if e.is_transient() && pause_within(&mut backoff, start, budget) => {
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut sent = false;
            let result = call(&master.pool, &mut sent);
            let err = match result {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            let wrong_node = err.is_not_master();
            // An interrupted call (a stopped and continued process) says
            // nothing about the master.
            if wrong_node || (err.is_connection() && !err.is_interrupted()) {
                inner.forget(&master, &err);
            }
            // READONLY: the command was refused, so repeating it is safe.
            // A connection error before anything was sent: likewise.
            let again = wrong_node || (!sent && err.is_connection());
            if again && pause_within(&mut backoff, start, budget) {
                continue;
            }
            return Err(err);
        }
    }

    /// A new connection to the master, outside the pool (pub/sub).
    pub(crate) fn connect(&self) -> Result<redis::Connection> {
        let master = self.inner.master()?;
        master.pool.connect().inspect_err(|e| {
            if e.is_not_master() || e.is_connection() {
                self.inner.forget(&master, e);
            }
        })
    }

    /// Connections open in the current master's pool.
    pub(crate) fn open_connections(&self) -> usize {
        self.inner
            .current()
            .map_or(0, |m| m.pool.open_connections())
    }

    /// Changes whenever the master changes: a long-lived connection made
    /// under another value talks to a node that may no longer be the
    /// master.
    pub(crate) fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

/// Pauses for the backoff's next pause and returns `true`, unless that
/// would end past `budget` from `start` (then returns `false` at once).
fn pause_within(backoff: &mut Backoff, start: Instant, budget: Duration) -> bool {
    let pause = backoff.next_pause();
    if start.elapsed() + pause >= budget {
        return false;
    }
    crate::retry::pause_until(Instant::now() + pause);
    true
}

impl Inner {
    fn current(&self) -> Option<Arc<Master>> {
        self.master
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The master, discovering it when unknown.
    fn master(self: &Arc<Self>) -> Result<Arc<Master>> {
        if let Some(master) = self.current() {
            return Ok(master);
        }
        let _one = self
            .discovering
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(master) = self.current() {
            return Ok(master);
        }
        if self.spec.switch_listener {
            self.start_listener();
        }
        let (addr, sentinel) = self.discover()?;
        self.install_named(addr, Some(sentinel))
    }

    /// Makes `addr` the master, unless it already is (a `+switch-master`
    /// announcement).
    fn install(&self, addr: (String, u16)) -> Result<Arc<Master>> {
        self.install_named(addr, None)
    }

    /// Makes `addr`, as sentinel `named_by` answered, the master, unless it
    /// already is.
    fn install_named(&self, addr: (String, u16), named_by: Option<usize>) -> Result<Arc<Master>> {
        let mut slot = self.master.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = slot.as_ref()
            && current.addr == addr
        {
            return Ok(current.clone());
        }
        let pool = self
            .spec
            .connection_info(&addr.0, addr.1, false)
            .and_then(|info| {
                Pool::new(
                    info,
                    &self.settings.tls,
                    self.settings.pool_size,
                    self.settings.connect_timeout,
                    self.settings.response_timeout,
                )
            });
        let pool = Arc::new(pool?.master_only().named(self.settings.name.clone()));
        if let Some(old) = slot.as_ref() {
            log::info!(
                "redguard: master {:?} of {} moved from {} to {}",
                self.spec.master_name,
                self.spec.label(),
                host_port(&old.addr.0, old.addr.1),
                host_port(&addr.0, addr.1)
            );
            old.pool.flush();
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let master = Arc::new(Master {
            addr,
            pool,
            generation,
            named_by,
        });
        *slot = Some(master.clone());
        Ok(master)
    }

    /// Forgets `master` (if it is still the current one) after `err` showed
    /// it is gone or demoted: the next call asks the sentinels again.
    fn forget(&self, master: &Arc<Master>, err: &Error) {
        let mut slot = self.master.write().unwrap_or_else(PoisonError::into_inner);
        if slot
            .as_ref()
            .is_some_and(|m| m.generation == master.generation)
        {
            log::debug!(
                "redguard: master {} of {:?} dropped ({err}); asking the sentinels again",
                host_port(&master.addr.0, master.addr.1),
                self.spec.master_name,
                err = err.chain()
            );
            *slot = None;
            self.generation.fetch_add(1, Ordering::AcqRel);
            master.pool.flush();
            // The node named is a replica (its ROLE, or READONLY): the
            // sentinel that named it has a stale view (partitioned, or not
            // yet told of a failover). Ask the next one first, or a
            // sentinel that keeps giving that answer would be believed on
            // every retry.
            if let Some(stale) = master.named_by
                && err.is_not_master()
            {
                let next = (stale + 1) % self.sentinels.len();
                let _ = self.preferred.compare_exchange(
                    stale,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Asks the sentinels, preferred one first, for the master's address;
    /// returns it with the index of the sentinel that gave it.
    fn discover(&self) -> Result<((String, u16), usize)> {
        let n = self.sentinels.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut auth_error = None;
        let mut last_error = None;
        let mut unknown = 0;
        for i in 0..n {
            let index = (first + i) % n;
            let (label, client) = &self.sentinels[index];
            match self.ask(label, client) {
                Ok(Some(addr)) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok((addr, index));
                }
                Ok(None) => unknown += 1,
                Err(e) => {
                    log::debug!(
                        "redguard: sentinel {label} did not answer: {e}",
                        e = e.chain()
                    );
                    if matches!(e, Error::Auth(_)) {
                        auth_error = Some(e);
                    } else {
                        last_error = Some(e);
                    }
                }
            }
        }
        // A wrong sentinel password must not read as "unreachable".
        if let Some(e) = auth_error {
            return Err(e);
        }
        if unknown > 0 {
            return Err(Error::invalid(format!(
                "no sentinel of {} knows a master named {:?}",
                self.spec.label(),
                self.spec.master_name
            )));
        }
        Err(last_error.unwrap_or_else(|| Error::invalid("no sentinel configured")))
    }

    /// Asks one sentinel for the master's address; again, on a new
    /// connection, when a stopped and continued process interrupted the
    /// question (a read: it may be asked twice).
    fn ask(&self, label: &str, client: &redis::Client) -> Result<Option<(String, u16)>> {
        let mut tries = 0;
        loop {
            match self.ask_once(label, client) {
                Err(e) if e.is_interrupted() && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }

    fn ask_once(&self, label: &str, client: &redis::Client) -> Result<Option<(String, u16)>> {
        let mut conn = client
            .get_connection_with_timeout(self.settings.connect_timeout)
            .map_err(|e| Error::redis(e).at(label))?;
        conn.set_read_timeout(Some(self.settings.response_timeout))
            .map_err(Error::redis)?;
        conn.set_write_timeout(Some(self.settings.response_timeout))
            .map_err(Error::redis)?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.spec.master_name)
            .query::<Option<(String, u16)>>(&mut conn)
            .map_err(|e| not_a_sentinel(e, label))
    }

    /// Starts the `+switch-master` listener once.
    fn start_listener(self: &Arc<Self>) {
        self.listener.get_or_init(|| {
            let weak = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("redguard-sentinel".into())
                .spawn(move || listen(&weak));
            if let Err(e) = spawned {
                log::warn!(
                    "redguard: cannot start the +switch-master listener ({e}); \
                     failovers are noticed on the next error instead"
                );
            }
        });
    }
}

/// A server that does not know the `SENTINEL` command is a data node
/// behind a `redis+sentinel://` URL: said so, as a bad URL. Other errors
/// are classified as usual.
fn not_a_sentinel(e: redis::RedisError, label: &str) -> Error {
    let unknown = e.detail().is_some_and(|d| {
        let d = d.to_ascii_lowercase();
        d.contains("unknown command") && d.contains("sentinel")
    });
    if unknown {
        return Error::invalid(format!(
            "{label} is not a sentinel (it does not know the SENTINEL command): a \
             redis+sentinel:// URL lists sentinels (by default on port 26379), not data nodes"
        ));
    }
    Error::redis(e)
}

/// The `+switch-master` listener: subscribed on one sentinel at a time
/// (the next one when it fails), it installs the new master as soon as a
/// failover of ours is announced. Ends once its client is gone.
fn listen(weak: &Weak<Inner>) {
    let mut index = 0;
    let mut backoff = Backoff::sentinel_listener();
    let mut first = true;
    loop {
        // Every attempt after the first waits: a sentinel that refuses,
        // or accepts and drops the subscription at once, is not hammered.
        if !std::mem::take(&mut first) {
            let pause = backoff.next_pause();
            if weak.strong_count() == 0 {
                return;
            }
            crate::retry::pause_until(Instant::now() + pause);
        }
        let Some(inner) = weak.upgrade() else { return };
        let n = inner.sentinels.len();
        let (label, client) = &inner.sentinels[index % n];
        let label = label.clone();
        let connected = client
            .get_connection_with_timeout(inner.settings.connect_timeout)
            .map_err(Error::redis);
        drop(inner);
        let mut conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                log::debug!(
                    "redguard: +switch-master listener: sentinel {label}: {e}",
                    e = e.chain()
                );
                index += 1;
                continue;
            }
        };
        // Bounded, so that a frozen sentinel cannot hold the thread (and
        // its client's exit) forever.
        let _ = conn.set_read_timeout(Some(LISTEN_TICK.max(Duration::from_secs(1))));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
        let mut pubsub = conn.as_pubsub();
        if let Err(e) = pubsub.subscribe("+switch-master") {
            log::debug!("redguard: +switch-master listener: sentinel {label}: {e}");
            index += 1;
            continue;
        }
        let subscribed = Instant::now();
        let _ = pubsub.set_read_timeout(Some(LISTEN_TICK));
        loop {
            let message = pubsub.get_message();
            let Some(inner) = weak.upgrade() else { return };
            match message {
                Ok(msg) => {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if let Some(addr) = parse_switch(&payload, &inner.spec.master_name)
                        && let Err(e) = inner.install(addr)
                    {
                        log::warn!(
                            "redguard: sentinel announced an unusable master: {e}",
                            e = e.chain()
                        );
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => {
                    log::debug!("redguard: +switch-master listener: sentinel {label}: {e}");
                    index += 1;
                    if subscribed.elapsed() >= LISTEN_MAX_RETRY {
                        backoff.reset();
                    }
                    break;
                }
            }
        }
    }
}

/// The new master of a `+switch-master` payload
/// (`<name> <old ip> <old port> <new ip> <new port>`) when it names ours.
fn parse_switch(payload: &str, master_name: &str) -> Option<(String, u16)> {
    let parts: Vec<&str> = payload.split(' ').collect();
    match parts.as_slice() {
        [name, _, _, ip, port] if *name == master_name => {
            Some(((*ip).to_owned(), port.parse().ok()?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sentinel_urls() {
        let spec = SentinelSpec::parse_url(
            "redis+sentinel://app:p%40ss@10.0.0.1:26379,[::1]:26380,host/my%20master?db=3",
        )
        .unwrap();
        assert_eq!(
            spec.sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("::1".to_owned(), 26380),
                ("host".to_owned(), DEFAULT_SENTINEL_PORT)
            ]
        );
        assert_eq!(spec.master_name, "my master");
        assert_eq!(spec.db, 3);
        assert_eq!(spec.username.as_deref(), Some("app"));
        assert_eq!(spec.password.as_deref(), Some("p@ss"));
        assert!(!spec.tls);
        assert!(!format!("{spec:?}").contains("p@ss"));
        assert_eq!(
            spec.label(),
            "my master@10.0.0.1:26379,[::1]:26380,host:26379/3"
        );

        let spec = SentinelSpec::parse_url("rediss+sentinel://:pw@h:1/m").unwrap();
        assert!(spec.tls);
        assert_eq!(spec.username, None);
        assert_eq!(spec.password.as_deref(), Some("pw"));
    }

    #[test]
    fn rejects_bad_sentinel_urls_without_echoing_them() {
        for url in [
            "redis+sentinel://:s3cret@h:1",
            "redis+sentinel://:s3cret@h:1/",
            "redis+sentinel://:s3cret@/m",
            "redis+sentinel://:s3cret@h:0/m",
            "redis+sentinel://:s3cret@h:x/m",
            "redis+sentinel://:s3cret@h:1,/m",
            "redis+sentinel://:s3cret@h:1/m?db=-1",
            "redis+sentinel://:s3cret@h:1/m?foo=1",
            "redis+sentinel://:s3cr%zzet@h:1/m",
            "redis://:s3cret@h:1/m",
        ] {
            let err = SentinelSpec::parse_url(url).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{url}: {err:?}");
            assert!(!err.to_string().contains("s3cr"), "{url}: {err}");
        }
    }

    #[test]
    fn switch_messages_for_other_masters_are_ignored() {
        assert_eq!(
            parse_switch("m 127.0.0.1 1 127.0.0.1 2", "m"),
            Some(("127.0.0.1".to_owned(), 2))
        );
        assert_eq!(parse_switch("other 127.0.0.1 1 127.0.0.1 2", "m"), None);
        assert_eq!(parse_switch("m 127.0.0.1 1", "m"), None);
    }
}
