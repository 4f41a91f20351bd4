//! A small blocking pool of Redis connections to one server.
//!
//! Why not r2d2: a lock call must fail fast and say why. r2d2 retries a
//! failing connect in its own threads until its checkout timeout and then
//! reports a stringified error, so a refused connection or a wrong password
//! would surface as a generic timeout seconds later. Here a connection is
//! made on the caller's thread with the connect timeout, and its typed error
//! ([`Error::Connection`], [`Error::Auth`], ...) is returned at once. No
//! background threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::connection::Tls;
use crate::connection::server::{self, Server};
use crate::connection::shared::Shared;
use crate::connection::wire::{self, Link, Wire};
use crate::error::{Error, Redirect, Result, TimeoutKind};

#[cfg(feature = "tls")]
pub(crate) fn build_with_tls(info: redis::ConnectionInfo, tls: &Tls) -> Result<redis::Client> {
    let certs = redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_ca.clone(),
    };
    redis::Client::build_with_tls(info, certs)
        .map_err(|e| Error::invalid(format!("bad TLS certificates: {}", e.category())))
}

#[cfg(not(feature = "tls"))]
pub(crate) fn build_with_tls(_info: redis::ConnectionInfo, _tls: &Tls) -> Result<redis::Client> {
    Err(Error::invalid(
        "TLS certificates need redguard's `tls` feature",
    ))
}

/// Connection pool for one Redis server.
pub(crate) struct Pool {
    client: redis::Client,
    state: Mutex<State>,
    freed: Condvar,
    max: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Bumped by [`Pool::flush`]; connections of an older generation are
    /// closed when they come back.
    generation: AtomicU64,
    /// Whether every new connection must find a master (`ROLE`) before it
    /// is used: set for a master found through Sentinel, which may have
    /// been demoted since.
    master_only: bool,
    /// Whether the pool stands for a whole single-server deployment: a
    /// Redis Cluster node behind it is refused (see
    /// [`server::cluster_node`]).
    standalone: bool,
    /// What the server is, from the first connection that could tell
    /// (`None` inside: it would not say). Unset until then, and while the
    /// server is one redguard refuses.
    server: OnceLock<Option<Server>>,
    /// What each new connection is named (`CLIENT SETNAME`), if anything.
    name: Option<std::sync::Arc<str>>,
    /// The shared connection of lock calls (see [`super::shared`]).
    shared: Shared,
    /// How shared connections speak TLS, for a `rediss://` server.
    #[cfg(feature = "tls")]
    tls: wire::TlsSetup,
}

struct State {
    idle: Vec<(redis::Connection, u64)>,
    /// Connections that exist: idle, lent out, or being established.
    open: usize,
    /// Threads waiting in `checkout` for a connection to come back. The
    /// condvar is signalled only when this is non-zero: a signal is a
    /// syscall even when nobody waits, and a lock call returns a connection
    /// twice per cycle.
    waiting: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field(
                "server",
                &self.client.get_connection_info().addr().to_string(),
            )
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(crate) fn new(
        info: redis::ConnectionInfo,
        tls: &Tls,
        max: usize,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Pool> {
        // No CLIENT SETINFO round trips at connect: against a frozen server
        // each would wait a whole timeout before the connect fails.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        let client = if tls.is_set() {
            build_with_tls(info, tls)?
        } else {
            redis::Client::open(info).map_err(Error::redis)?
        };
        Ok(Pool {
            client,
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            freed: Condvar::new(),
            max,
            connect_timeout,
            response_timeout,
            generation: AtomicU64::new(0),
            master_only: false,
            standalone: false,
            server: OnceLock::new(),
            name: None,
            shared: Shared::new(SHARED_CONNECTIONS, response_timeout, connect_timeout),
            #[cfg(feature = "tls")]
            tls: wire::TlsSetup::new(tls),
        })
    }

    /// The same pool, checking with `ROLE` that every new connection
    /// reaches a master; one that reaches a replica fails with a `READONLY`
    /// error (see [`is_not_master`]) and is closed.
    pub(crate) fn master_only(mut self) -> Pool {
        self.master_only = true;
        self
    }

    /// The same pool, refusing a Redis Cluster node: what a `redis://`
    /// URL reaches must serve every slot.
    pub(crate) fn standalone(mut self) -> Pool {
        self.standalone = true;
        self
    }

    /// The same pool, naming every new connection `name` once it is set up
    /// (`CLIENT SETNAME`: `CLIENT LIST` then says whose it is).
    pub(crate) fn named(mut self, name: Option<std::sync::Arc<str>>) -> Pool {
        self.name = name;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection outside the pool (pub/sub, admin), with the pool's
    /// timeouts applied. The pool's first connection also learns what the
    /// server is (see [`Pool::server`]) and refuses one that is too old.
    ///
    /// # Errors
    ///
    /// The connection's failure, named after the server; a server older
    /// than Redis 6.2 is [`Error::UnsupportedServer`].
    pub(crate) fn connect(&self) -> Result<redis::Connection> {
        self.connect_within(None)
    }

    /// [`Pool::connect`], all of it within `limit` when given (each of
    /// its steps bounded by what is left of it): a shared connection made
    /// for commands whose deadlines are near.
    pub(crate) fn connect_within(&self, limit: Option<Duration>) -> Result<redis::Connection> {
        self.setting_up(limit, |until| self.connect_until(until))
    }

    /// Runs `attempt` (one connect and set-up, within what is left until
    /// its deadline) again while it fails on an interrupted socket call: a
    /// stopped and continued process (EINTR) says nothing about the server,
    /// and every set-up command (`AUTH`, `SELECT`, `INFO`, `ROLE`,
    /// `CLIENT SETNAME`) may simply be sent again on a new connection. The
    /// attempts share one deadline: `limit`, or the connect and response
    /// timeouts together.
    fn setting_up<C>(
        &self,
        limit: Option<Duration>,
        attempt: impl Fn(Option<Instant>) -> Result<C>,
    ) -> Result<C> {
        let start = Instant::now();
        let budget =
            limit.unwrap_or_else(|| self.connect_timeout.saturating_add(self.response_timeout));
        let deadline = start.checked_add(budget);
        let until = limit.and_then(|l| start.checked_add(l));
        let mut tries = 0;
        loop {
            match attempt(until) {
                Err(e)
                    if e.is_interrupted()
                        && tries < MAX_INTERRUPTED_SETUPS
                        && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    tries += 1;
                    log::debug!(
                        "redguard: connection set-up interrupted ({e}); connecting again",
                        e = e.chain()
                    );
                }
                other => return other,
            }
        }
    }

    fn connect_until(&self, until: Option<Instant>) -> Result<redis::Connection> {
        let addr = self.addr();
        let left = |full: Duration| step_budget(until, super::budget::setup_timeout(full));
        let connect_timeout = left(self.connect_timeout);
        let mut conn = self
            .client
            .get_connection_with_timeout(connect_timeout)
            .map_err(|e| self.connect_error(Error::redis(e), &addr, connect_timeout))?;
        let setup_timeout = left(self.response_timeout);
        conn.set_read_timeout(Some(setup_timeout))
            .map_err(Error::redis)?;
        conn.set_write_timeout(Some(setup_timeout))
            .map_err(Error::redis)?;
        self.prepare(&mut conn, &addr)?;
        if setup_timeout != self.response_timeout {
            conn.set_read_timeout(Some(self.response_timeout))
                .map_err(Error::redis)?;
            conn.set_write_timeout(Some(self.response_timeout))
                .map_err(Error::redis)?;
        }
        Ok(conn)
    }

    /// The pool's setup of a new connection, after redis-rs's (`AUTH`,
    /// `SELECT`): learns what the server is (first connection only),
    /// checks that it is a master when it must be, names the connection.
    fn prepare(&self, conn: &mut dyn redis::ConnectionLike, addr: &str) -> Result<()> {
        if self.server.get().is_none() {
            // The first round trip: over TLS it also completes the
            // handshake, so a plaintext port shows here.
            let found = server::probe(conn)
                .map_err(|e| self.connect_error(e, addr, self.response_timeout))?;
            if let Some(server) = &found {
                server.check(addr)?;
            }
            let _ = self.server.set(found);
        }
        if self.standalone
            && self
                .server
                .get()
                .is_some_and(|s| s.as_ref().is_some_and(|s| s.cluster))
        {
            return Err(server::cluster_node(&self.addr()));
        }
        if self.master_only {
            let role: redis::Role = redis::cmd("ROLE").query(conn).map_err(Error::redis)?;
            if !matches!(role, redis::Role::Primary { .. }) {
                return Err(Error::not_master(addr));
            }
        }
        if let Some(name) = &self.name {
            // After the connection is set up (authenticated): nothing is
            // sent behind a failing AUTH. An ACL user without
            // `client|setname` just has unnamed connections.
            let named = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(&**name)
                .query::<()>(conn)
                .map_err(Error::redis);
            match named {
                Ok(()) | Err(Error::Permission(_) | Error::Redis(_)) => {}
                Err(e) => return Err(e.at(&self.label())),
            }
        }
        Ok(())
    }

    /// A connection for the shared connection (see
    /// [`Pool::connect_within`]), set up here as redis-rs sets up its own:
    /// `HELLO 3` for RESP3 (with the credentials), else `AUTH` when there
    /// is a password; `SELECT` when the database is not 0.
    fn connect_link_within(&self, limit: Option<Duration>) -> Result<Link> {
        self.setting_up(limit, |until| self.connect_link_until(until))
    }

    fn connect_link_until(&self, until: Option<Instant>) -> Result<Link> {
        let addr = self.addr();
        let left = |full: Duration| step_budget(until, super::budget::setup_timeout(full));
        let info = self.client.get_connection_info();
        let connect_timeout = left(self.connect_timeout);
        let io_error = |e: std::io::Error| Error::redis(redis::RedisError::from(e));
        let refused = |e: std::io::Error| self.connect_error(io_error(e), &addr, connect_timeout);
        let wire = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => {
                Wire::Tcp(wire::connect_tcp(host, *port, connect_timeout).map_err(refused)?)
            }
            redis::ConnectionAddr::Unix(path) => {
                Wire::Unix(std::os::unix::net::UnixStream::connect(path).map_err(refused)?)
            }
            #[cfg(feature = "tls")]
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                let tcp = wire::connect_tcp(host, *port, connect_timeout).map_err(refused)?;
                // The handshake is bounded as the first round trip is.
                let handshake = left(self.response_timeout);
                tcp.set_read_timeout(Some(handshake)).map_err(io_error)?;
                tcp.set_write_timeout(Some(handshake)).map_err(io_error)?;
                self.tls
                    .connect(tcp, host, *insecure)
                    .map_err(|e| self.connect_error(e, &addr, handshake))?
            }
            other => {
                return Err(Error::invalid(format!(
                    "{addr}: no shared connection over {other}"
                )));
            }
        };
        let setup_timeout = left(self.response_timeout);
        let mut link = Link::new(wire, setup_timeout).map_err(io_error)?;
        let settings = info.redis_settings();
        let hello = settings.protocol().supports_resp3();
        if hello || settings.password().is_some() {
            let mut auth = redis::cmd(if hello { "HELLO" } else { "AUTH" });
            if hello {
                auth.arg(3);
            }
            if let Some(password) = settings.password() {
                if hello {
                    auth.arg("AUTH")
                        .arg(settings.username().unwrap_or("default"));
                } else if let Some(user) = settings.username() {
                    auth.arg(user);
                }
                auth.arg(password);
            }
            auth.query::<redis::Value>(&mut link)
                .map_err(|e| self.connect_error(Error::redis(e), &addr, setup_timeout))?;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .query::<()>(&mut link)
                .map_err(|e| Error::redis(e).at(&self.label()))?;
        }
        self.prepare(&mut link, &addr)?;
        if setup_timeout != self.response_timeout {
            link.set_timeouts(self.response_timeout).map_err(io_error)?;
        }
        Ok(link)
    }

    /// What the server is, once a connection of this pool learned it;
    /// `None` before, or when the server would not say.
    pub(crate) fn server(&self) -> Option<&Server> {
        self.server.get().and_then(Option::as_ref)
    }

    /// The server as errors name it: `host:port/db`.
    fn label(&self) -> String {
        let info = self.client.get_connection_info();
        format!("{}/{}", self.addr(), info.redis_settings().db())
    }

    /// The same result, an error naming this pool's server (and a reply
    /// timeout its limit).
    fn located<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|e| {
            // A cluster node that would not say what it is (an ACL user
            // without `INFO`) shows itself by its first redirection.
            if self.standalone
                && matches!(e.redirect(), Some(Redirect::Moved(..) | Redirect::Ask(_)))
            {
                return server::cluster_node(&self.addr());
            }
            e.on_server(&self.label(), self.response_timeout)
        })
    }

    /// `host:port` of the server.
    fn addr(&self) -> String {
        match self.client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
            other => other.to_string(),
        }
    }

    /// A failed connect (or first round trip, `waited` long) in plain
    /// words: which server, and for a TLS connection whose handshake got no
    /// TLS answer, the likely cause (a `rediss://` URL pointing at a
    /// plaintext port).
    fn connect_error(&self, err: Error, _addr: &str, waited: Duration) -> Error {
        let addr = &*self.label();
        let tls = matches!(
            self.client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        );
        let not_tls = || {
            String::from(
                "no answer to the TLS handshake: the server may not speak TLS on this port (a \
                 rediss:// URL needs the server's tls-port)",
            )
        };
        match err {
            Error::Timeout { .. } => Error::Timeout {
                kind: TimeoutKind::Connect,
                limit: waited,
                server: Some(addr.to_owned()),
                about: tls.then(not_tls),
            },
            Error::Connection(_) if tls && err.chain().contains("corrupt message") => {
                err.at(addr).noted(
                    " (the server does not speak TLS on this port; a rediss:// URL needs \
                     the server's tls-port)"
                        .into(),
                )
            }
            other => other.at(addr),
        }
    }

    /// Runs `op` on the shared connection (see [`super::shared`]).
    pub(crate) fn with_shared_conn<T>(
        &self,
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> Result<T>,
    ) -> Result<T> {
        self.located(
            self.shared
                .with_conn(&|limit| self.connect_link_within(limit), op),
        )
    }

    /// Runs `op` on a pooled connection.
    ///
    /// A connection on which `op` failed in a way that leaves its state
    /// unknown (I/O error, timeout, garbage) is closed, not returned. When a
    /// connection taken from the idle list turns out to be dead (the server
    /// restarted since it was last used), every idle connection is dropped
    /// and `op` runs once more on a fresh one.
    pub(crate) fn with_conn<T>(
        &self,
        op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        self.located(self.with_pooled_conn(op))
    }

    fn with_pooled_conn<T>(
        &self,
        mut op: impl FnMut(&mut redis::Connection) -> Result<T>,
    ) -> Result<T> {
        let (mut conn, reused) = self.checkout()?;
        let result = op(&mut conn.0);
        match result {
            Err(e) if e.breaks_connection() => {
                self.discard(conn);
                // An interrupted call (EINTR) met a live server: `op` ran,
                // or runs, there. Sending it again would run it twice.
                if reused && e.is_connection() && !e.is_interrupted() {
                    crate::metrics::reconnect();
                    self.flush();
                    // `op` may have run on the dead connection: a refused
                    // reconnect must not stand for its outcome (a Cluster
                    // reads "refused" as never sent and sends it elsewhere).
                    let Ok((mut fresh, _)) = self.checkout() else {
                        return Err(e);
                    };
                    let again = op(&mut fresh.0);
                    self.checkin(fresh, again.as_ref().err());
                    return again;
                }
                Err(e)
            }
            other => {
                self.checkin(conn, other.as_ref().err());
                other
            }
        }
    }

    fn checkout(&self) -> Result<((redis::Connection, u64), bool)> {
        // Read the clock only when there is a wait to bound.
        let mut deadline = None;
        let mut state = self.state();
        loop {
            if let Some(idle) = state.idle.pop() {
                return Ok((idle, true));
            }
            if state.open < self.max {
                state.open += 1;
                let generation = self.generation.load(Ordering::Acquire);
                drop(state);
                return match self.connect() {
                    Ok(conn) => Ok(((conn, generation), false)),
                    Err(e) => {
                        self.release_slot();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            // The builder bounds the timeout to a day; `checked_add` keeps
            // even an unbounded one from panicking (it then waits forever,
            // as a `Duration::MAX` wait means elsewhere).
            let deadline = *deadline.get_or_insert(
                now.checked_add(self.connect_timeout)
                    .unwrap_or(now + Duration::from_secs(365 * 24 * 3600)),
            );
            if now >= deadline {
                return Err(Error::Timeout {
                    kind: TimeoutKind::Pool,
                    limit: self.connect_timeout,
                    server: Some(self.label()),
                    about: Some(format!("all {} pooled connections stayed busy", self.max)),
                });
            }
            state.waiting += 1;
            state = self
                .freed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting -= 1;
        }
    }

    fn checkin(&self, conn: (redis::Connection, u64), error: Option<&Error>) {
        let stale = conn.1 != self.generation.load(Ordering::Acquire);
        if stale
            || error.is_some_and(Error::breaks_connection)
            || !redis::ConnectionLike::is_open(&conn.0)
        {
            self.discard(conn);
            return;
        }
        let mut state = self.state();
        state.idle.push(conn);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.freed.notify_one();
        }
    }

    fn discard(&self, conn: (redis::Connection, u64)) {
        self.release_slot();
        drop(conn);
    }

    /// One connection fewer exists: a waiter may open a new one.
    fn release_slot(&self) {
        let mut state = self.state();
        state.open -= 1;
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.freed.notify_one();
        }
    }

    /// Closes every idle connection; connections lent out are closed when
    /// they come back.
    pub(crate) fn flush(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let idle = {
            let mut state = self.state();
            let idle = std::mem::take(&mut state.idle);
            state.open -= idle.len();
            idle
        };
        self.freed.notify_all();
        drop(idle);
        self.shared.flush();
    }

    /// Connections currently open (idle or in use).
    pub(crate) fn open_connections(&self) -> usize {
        self.state().open + self.shared.open_connections()
    }
}

/// Shared connections per server at most. One carries what a few dozen
/// threads send; more are opened only as many more threads keep one busy
/// (see [`Shared`]'s growth), up to this many (BENCHMARKS.md, "Many
/// threads on one client").
const SHARED_CONNECTIONS: usize = 4;

/// How many times one connect starts over after an interrupted socket
/// call (see [`Pool::connect_within`]): a process stopped and continued
/// again and again still gets its connection, a bounded number of times.
const MAX_INTERRUPTED_SETUPS: u32 = 16;

/// How long one step of a connect may take: `full`, or what is left until
/// `until` when that is sooner, but at least 1 ms (a socket refuses a zero
/// timeout).
fn step_budget(until: Option<Instant>, full: Duration) -> Duration {
    match until {
        Some(until) => full
            .min(until.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1)),
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use redis::IntoConnectionInfo;

    /// A call whose pooled connection turns out dead after its command was
    /// written may have run: when the reconnect is refused, the call fails
    /// with the dead connection's error, not "refused".
    #[test]
    fn a_call_lost_with_a_reused_connection_is_not_reported_refused() {
        // One connection, answering its first two commands (the pool's
        // `INFO` probe and a `PING`) and cutting the third; then the port
        // is closed.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            drop(listener);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buf = [0u8; 4096];
            for _ in 0..2 {
                if !matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                    return;
                }
                let _ = conn.write_all(b"+OK\r\n");
            }
            let _ = conn.read(&mut buf);
            let _ = conn.shutdown(std::net::Shutdown::Both);
        });
        let info = format!("redis://{addr}/").into_connection_info().unwrap();
        let second = Duration::from_secs(1);
        let pool = Pool::new(info, &Tls::default(), 1, second, second).unwrap();
        let ping = |conn: &mut redis::Connection| {
            redis::cmd("PING")
                .query::<String>(conn)
                .map_err(Error::redis)
        };
        assert_eq!(pool.with_conn(ping).unwrap(), "OK");
        let err = pool.with_conn(ping).unwrap_err();
        let refused = err
            .redis_error()
            .is_some_and(redis::RedisError::is_connection_refusal);
        assert!(!refused, "reported as refused: {err}");
        assert!(err.is_connection(), "{err}");
    }
}
