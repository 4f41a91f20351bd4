//! The one error type of the crate and its classification of Redis failures.

use std::fmt;
use std::io;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in redguard.
///
/// Network and server failures never panic; they arrive here. The enum is
/// `#[non_exhaustive]`: match the cases you handle and keep a wildcard arm,
/// or use the predicates ([`Error::is_connection`], [`Error::is_timeout`],
/// [`Error::is_lock_lost`], ...).
///
/// Messages never contain passwords: errors name hosts and keys, not URLs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller's holder id does not hold the lock it tried to release or
    /// extend (Redisson throws `IllegalMonitorStateException` here). Nothing
    /// was changed on the server.
    #[error("lock {name:?} is not held by this holder")]
    NotHeld {
        /// The lock name (lossy UTF-8).
        name: String,
    },
    /// The lease of a held lock is gone: it expired, was renewed too late,
    /// was deleted by someone else, or Redis lost it (restart, failover,
    /// eviction). The critical section may no longer be exclusive.
    #[error("the lease of lock {name:?} was lost")]
    LockLost {
        /// The lock name (lossy UTF-8).
        name: String,
    },
    /// A value that is not a lock of the expected kind is stored at the lock
    /// key: another Redis type, or a hash whose fields are not a lock's
    /// (holder ids with hold counts: see
    /// [`LockKind::Other`](crate::LockKind::Other)), such as an
    /// application's hash that shares the name. The value is left
    /// untouched, and an acquire reports it at once instead of waiting on
    /// it (Redisson would wait on any hash as if it were held).
    #[error("key {key:?} holds a value of the wrong type for this lock")]
    WrongType {
        /// The key (lossy UTF-8).
        key: String,
    },
    /// An argument was rejected before anything was sent to Redis (empty
    /// name, zero or out-of-range duration, inconsistent configuration, bad
    /// URL), or the URL points at the wrong kind of server: a data node
    /// where a `redis+sentinel://` URL expects sentinels, a single server
    /// where a `redis+cluster://` URL expects Cluster nodes.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Something took longer than its limit: a connection, a reply, a
    /// free pooled connection, a wait (see [`TimeoutKind`]). Redisson
    /// reports the same cases as `RedisTimeoutException` (connect, reply)
    /// and `RedisConnectionException` (pool).
    #[error("{}", timeout_message(*.kind, *.limit, .server.as_deref(), .about.as_deref()))]
    Timeout {
        /// Which timeout ran out.
        kind: TimeoutKind,
        /// The limit that ran out: the connect or response timeout of
        /// [`Builder`](crate::Builder), the caller's wait, or the lease.
        /// [`Duration::MAX`](std::time::Duration::MAX) for a wait without
        /// a deadline that gave up; `Duration::ZERO` where it is not known
        /// (a socket timeout met outside the connection pool, e.g. asking
        /// a sentinel).
        limit: std::time::Duration,
        /// The server (`host:port/db`, never a password), when one was
        /// being talked to.
        server: Option<String>,
        /// What was being done, when the kind alone does not say (the
        /// lock or key, why the wait ended).
        about: Option<String>,
    },
    /// The client was shut down; no more operations are accepted.
    #[error("the redguard client was shut down")]
    Shutdown,
    /// Redis could not be reached, or the connection broke. The message
    /// names the server; the [`source`](std::error::Error::source) says
    /// why (`Connection refused (os error 111)`, `unexpected end of file`).
    #[error("connection to Redis{} failed{}", at_server(&.0.server), .0.note.as_deref().unwrap_or(""))]
    Connection(#[source] RedisCause),
    /// Redis refused the credentials (`WRONGPASS`, `NOAUTH`), or a TLS
    /// handshake refused a certificate either way: the server's is not
    /// signed by the CA given, or the server refused the client's (none,
    /// or not signed by its CA). Not transient: a wait ends at once. The
    /// connection is discarded: no command is ever sent unauthenticated.
    /// The [`source`](std::error::Error::source) is the server's reply or
    /// the TLS library's reason.
    #[error("{}", auth_message(.0))]
    Auth(#[source] RedisCause),
    /// The Redis ACL user may not run a command or touch a key or channel
    /// (`NOPERM`, or an ACL refusal inside a script). The message names the
    /// key the call was about; the [`source`](std::error::Error::source)
    /// is the server's reply.
    #[error("permission denied by Redis{}{}", at_server(&.0.server), .0.note.as_deref().unwrap_or(""))]
    Permission(#[source] RedisCause),
    /// Redis answered something that is not a valid reply for the operation.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    /// Any other error reported by Redis; the
    /// [`source`](std::error::Error::source) is the server's reply.
    #[error("Redis{} answered with an error{}", at_server(&.0.server), .0.note.as_deref().unwrap_or(""))]
    Redis(#[source] RedisCause),
    /// The server runs a version redguard does not support (below Redis
    /// 6.2; every Valkey release is supported). Checked on the first
    /// connection to each server (`INFO server`); nothing else is sent.
    #[error("{server} runs {version}; redguard needs Redis 6.2 or later (or any Valkey)")]
    UnsupportedServer {
        /// The server (`host:port`).
        server: String,
        /// What the server reported, e.g. `Redis 6.0.16`.
        version: String,
    },
    /// Fewer replicas than [`Builder::min_replica_acks`] acknowledged a
    /// grant (a lock, a fencing token, an expiring permit or a run-once
    /// claim) or an extension within the replica ack timeout (Redis's
    /// `WAIT`), so a failover could lose it. A grant was undone; nothing
    /// is held. Redisson reports the same case as "None of slaves were
    /// synced" (`checkLockSyncedSlaves`).
    ///
    /// [`Builder::min_replica_acks`]: crate::Builder::min_replica_acks
    #[error(
        "lock {name:?} was granted but only {acked} of the {wanted} replica acknowledgements \
         required arrived in time; the grant was undone"
    )]
    NotReplicated {
        /// The lock name (lossy UTF-8).
        name: String,
        /// Replicas that acknowledged the write.
        acked: u64,
        /// Replicas required ([`Builder::min_replica_acks`]).
        ///
        /// [`Builder::min_replica_acks`]: crate::Builder::min_replica_acks
        wanted: u64,
    },
    /// A release ([`LockGuard::unlock`](crate::LockGuard::unlock),
    /// [`PermitGuard::release`](crate::PermitGuard::release)) could not be
    /// confirmed: Redis did not answer (down, restarting, paused, failing
    /// over) and had not answered within one response timeout of the
    /// retry either. The release is not given up: the watchdog keeps
    /// retrying it, with backoff, until it goes through or the lease ends
    /// (the key then expires by itself);
    /// [`Client::await_releases`](crate::Client::await_releases) waits for
    /// that. A process about to exit should call it, or the lock stays
    /// held until its lease ends. The hold is no longer this thread's
    /// either way.
    #[error(
        "the release of lock {name:?} is not confirmed ({cause}); it is retried until it goes          through or the lease ends in {left:?}"
    )]
    ReleasePending {
        /// The lock name (lossy UTF-8).
        name: String,
        /// How long the retry may still take: the lease left on this
        /// client's clock when the error was returned.
        left: std::time::Duration,
        /// Why the release was not confirmed: the failure that handed it
        /// to the retry.
        cause: String,
    },
    /// The operating system's random number generator failed (drawing a
    /// one-use [`Token`](crate::Token)). Nothing was stored.
    #[error("the OS random number generator failed: {0}")]
    Random(String),
    /// Releasing a guard over several locks ([`MultiLockGuard`] or
    /// [`RedLockGuard`]) failed on some of them. Every lock was still
    /// attempted: those not listed were released. Each failure names its
    /// lock and server (`"<name> on <host:port>/<db>"`); the locks that
    /// failed are released by their lease running out.
    ///
    /// [`MultiLockGuard`]: crate::MultiLockGuard
    /// [`RedLockGuard`]: crate::RedLockGuard
    #[error("unlock failed on {} of {total} locks: {}", .failures.len(), list_failures(.failures))]
    Unlock {
        /// How many locks the guard held.
        total: usize,
        /// The locks whose release failed, each with its error.
        failures: Vec<(String, Error)>,
    },
}

fn list_failures(failures: &[(String, Error)]) -> String {
    failures
        .iter()
        .map(|(lock, e)| format!("{lock}: {}", e.chain()))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// `true` for [`Error::Connection`]: Redis unreachable or the connection broke.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection(_))
    }

    /// `true` for [`Error::Timeout`], whatever its [`TimeoutKind`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// `true` for [`Error::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    /// `true` for [`Error::NotHeld`].
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// `true` for [`Error::NotReplicated`]: a grant too few replicas
    /// acknowledged, undone.
    pub fn is_not_replicated(&self) -> bool {
        matches!(self, Error::NotReplicated { .. })
    }

    /// `true` for [`Error::Shutdown`].
    pub fn is_shutdown(&self) -> bool {
        matches!(self, Error::Shutdown)
    }

    /// `true` when retrying later may succeed without any change by the
    /// caller: connection failures, timeouts and transient server states
    /// (`LOADING` after a restart, `READONLY`/`MASTERDOWN` during a
    /// failover, `TRYAGAIN`/`CLUSTERDOWN` on a Cluster, `BUSY` while a
    /// script runs too long, `NOREPLICAS` while too few replicas are
    /// connected for `min-replicas-to-write`). The server ran nothing of a
    /// call refused so. Waiting calls (`lock`, `try_lock_for`, a
    /// semaphore's `acquire`, a latch's `wait`, ...) retry these until their
    /// deadline, as Redisson retries a command within its `retryAttempts`;
    /// every other error (credentials, ACL, wrong type, bad input,
    /// shutdown, `OOM`, `MISCONF`) needs a change by someone and ends them
    /// at once.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connection(_) | Error::Timeout { .. } => true,
            Error::Redis(e) => {
                matches!(
                    e.code(),
                    Some(
                        "LOADING"
                            | "TRYAGAIN"
                            | "CLUSTERDOWN"
                            | "MASTERDOWN"
                            | "READONLY"
                            | "BUSY"
                            | "NOREPLICAS"
                    )
                ) || matches!(
                    e.kind(),
                    redis::ErrorKind::Server(
                        redis::ServerErrorKind::BusyLoading
                            | redis::ServerErrorKind::TryAgain
                            | redis::ServerErrorKind::ClusterDown
                            | redis::ServerErrorKind::MasterDown
                            | redis::ServerErrorKind::ReadOnly
                    )
                )
            }
            _ => false,
        }
    }

    /// `true` when the error may come from a master that is gone or being
    /// replaced (a failover, a restart): the connection failed or timed
    /// out, or the server answered `READONLY`, `MASTERDOWN`, `LOADING`,
    /// `CLUSTERDOWN`, `TRYAGAIN`, `MOVED` or `ASK`. An operation on a held
    /// lease that failed so is retried against the new master.
    pub(crate) fn is_failover(&self) -> bool {
        self.is_transient()
            || self
                .redis_error()
                .is_some_and(|e| e.redirect_node().is_some())
    }

    pub(crate) fn invalid(msg: impl fmt::Display) -> Error {
        Error::InvalidArgument(msg.to_string())
    }

    pub(crate) fn lost(name: &[u8]) -> Error {
        Error::LockLost {
            name: String::from_utf8_lossy(name).into_owned(),
        }
    }

    pub(crate) fn not_held(name: &[u8]) -> Error {
        Error::NotHeld {
            name: String::from_utf8_lossy(name).into_owned(),
        }
    }

    /// Classifies a Redis error met while operating on `key`. A `NOPERM`
    /// names the key: Redis's own message about a script does not say which
    /// key or channel the ACL refused.
    pub(crate) fn from_redis(err: redis::RedisError, key: &[u8]) -> Error {
        let key = String::from_utf8_lossy(key);
        match Error::redis(err) {
            Error::Redis(cause) if cause.code() == Some("WRONGTYPE") => Error::WrongType {
                key: key.into_owned(),
            },
            Error::Permission(cause) => Error::Permission(cause.with_note(format!(
                " (key {key:?}, or a key or channel named after it)"
            ))),
            other => other,
        }
    }

    /// `true` for a socket call interrupted by a signal (EINTR): on Linux a
    /// read or write with a timeout fails so when the process is stopped
    /// (`SIGSTOP`, `SIGTSTP`) and continued, even without a signal handler
    /// (signal(7)). The server is not at fault: a command already written
    /// runs, and its reply is still on its way.
    pub(crate) fn is_interrupted(&self) -> bool {
        self.redis_error()
            .and_then(io_error)
            .is_some_and(|io| io.kind() == io::ErrorKind::Interrupted)
    }

    /// `true` when the error means the connection it happened on must not be
    /// reused: its state (a reply still in flight, a dead socket) is unknown.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(
            self,
            Error::Connection(_) | Error::Timeout { .. } | Error::Protocol(_) | Error::Auth(_)
        )
    }
}

/// The underlying failure reported by the Redis driver, kept as the
/// [`source`](std::error::Error::source) of [`Error::Connection`],
/// [`Error::Auth`], [`Error::Permission`] and [`Error::Redis`]. Opaque: its
/// text and the server's error code are what there is to read.
///
/// Its text is the server's own reply (`WRONGPASS invalid username-password
/// pair or user is disabled.`) or the operating system's (`Connection
/// refused (os error 111)`), and nothing else: the error wrapping it names
/// the server and what redguard knows about it (the key an ACL refused).
pub struct RedisCause {
    err: redis::RedisError,
    /// Said by the error wrapping this cause after its own words, as it
    /// is (starting with its own separator): the key an ACL refused, a
    /// likely reason.
    note: Option<String>,
    /// The server (`host:port/db`), named by the error wrapping this cause.
    server: Option<String>,
}

/// Error codes looked for wherever they sit in a reply: a server wraps
/// an error raised by a command inside a script in text of its own
/// (Redis 6.2: `ERR Error running script (call to f_…): @user_script:10:
/// WRONGTYPE Operation against a key holding the wrong kind of value`).
const CODES: &[&str] = &[
    "WRONGTYPE",
    "NOPERM",
    "WRONGPASS",
    "NOAUTH",
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOSCRIPT",
    "BUSY",
    "OOM",
    "MISCONF",
    "NOREPLICAS",
    "CROSSSLOT",
];

/// How servers word an ACL refusal inside a script, under the code `ERR`:
/// Redis 6.2 and 7.0 ("The user executing the script can't access at least
/// one of the keys …"), Redis 7.2+ and Valkey ("ACL failure in script: No
/// permissions to access a channel").
const ACL_IN_SCRIPT: &[&str] = &[
    "user executing the script can't",
    "can't access at least one of the",
    "ACL failure in script",
    "No permissions to access a",
];

/// The code of a known error wherever it sits in `text`: at its start or
/// right after a `": "`.
fn embedded_code(text: &str) -> Option<&'static str> {
    text.split(": ").find_map(|part| {
        let word = part.split_whitespace().next()?.trim_start_matches('-');
        CODES.iter().copied().find(|code| *code == word)
    })
}

impl RedisCause {
    fn new(err: redis::RedisError) -> RedisCause {
        RedisCause {
            err,
            note: None,
            server: None,
        }
    }

    /// Adds `note` (with its own leading separator) after the text.
    fn with_note(mut self, note: String) -> RedisCause {
        match &mut self.note {
            Some(old) => old.push_str(&note),
            None => self.note = Some(note),
        }
        self
    }

    /// The error code the server sent (`NOPERM`, `READONLY`, `WRONGPASS`,
    /// ...), if the failure came from the server. For an error a command
    /// raised inside a script, the code of that error wherever the server
    /// put it in its message (`ERR Error running script …: WRONGTYPE …` is
    /// `WRONGTYPE`); an ACL refusal inside a script is `NOPERM` whatever
    /// the server's wording.
    pub fn code(&self) -> Option<&str> {
        let code = self.err.code()?;
        if CODES.contains(&code) {
            return Some(code);
        }
        let detail = self.err.detail().unwrap_or("");
        if let Some(inner) = embedded_code(detail) {
            return Some(inner);
        }
        if ACL_IN_SCRIPT.iter().any(|phrase| detail.contains(phrase)) {
            return Some("NOPERM");
        }
        Some(code)
    }

    /// The driver's classification of the failure.
    pub(crate) fn kind(&self) -> redis::ErrorKind {
        self.err.kind()
    }

    /// The driver's text without its own type names: a server's error as
    /// the server sent it (code, then message), anything else as the
    /// driver words it less its `- Kind` tag.
    fn plain(&self) -> String {
        let err = &self.err;
        if let redis::ErrorKind::Server(_) | redis::ErrorKind::Extension = err.kind()
            && let Some(code) = err.code()
        {
            return match err.detail() {
                Some(detail) => format!("{code} {detail}"),
                None => code.to_owned(),
            };
        }
        let text = err.to_string();
        let tag = format!(" - {:?}", err.kind());
        match text.split_once(&tag) {
            Some((desc, rest)) => format!("{desc}{rest}"),
            None => text,
        }
    }
}

impl fmt::Display for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.plain())
    }
}

impl fmt::Debug for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for RedisCause {
    /// The driver's own cause, unless this cause's text already says it
    /// (a server's reply; an I/O error the driver only wraps: then that
    /// error's own source), so that no text is said twice.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if self.err.code().is_some() {
            // A server's reply: this cause's text is all of it.
            return None;
        }
        let inner = self.err.source()?;
        if inner.to_string() == self.plain() {
            inner.source()
        } else {
            Some(inner)
        }
    }
}

/// The socket failure behind a driver's error, if that is what it is.
fn io_error(err: &redis::RedisError) -> Option<&io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(err)?;
    match source.downcast_ref::<Shared>() {
        // redis-rs keeps its cause behind an `Arc`.
        Some(shared) => shared.downcast_ref::<io::Error>(),
        None => source.downcast_ref::<io::Error>(),
    }
}

/// The TLS library's reason when `err` is a certificate refused by either
/// side of the handshake (`invalid peer certificate: UnknownIssuer`,
/// `received fatal alert: CertificateRequired`); `None` for any other
/// I/O error.
fn tls_refusal(err: &redis::RedisError) -> Option<String> {
    let text = io_error(err)?.to_string();
    (text.contains("invalid peer certificate")
        || (text.contains("received fatal alert") && text.contains("Certificate")))
    .then_some(text)
}

/// `" at <server>"`, or nothing when the server is not known.
fn at_server(server: &Option<String>) -> String {
    server
        .as_deref()
        .map_or_else(String::new, |s| format!(" at {s}"))
}

/// The message of [`Error::Auth`]: what the refusal means. The server's
/// words are its source.
fn auth_message(cause: &RedisCause) -> String {
    if let Some(reason) = tls_refusal(&cause.err) {
        let hint = if reason.contains("peer certificate") {
            "the server's certificate is not trusted (the CA certificate given, \
             Builder::tls_root_ca or --tls-ca, did not sign it)"
        } else {
            "the server refused the TLS handshake (a client certificate is missing \
             or not signed by the server's CA: Builder::tls_client_cert or \
             --tls-cert and --tls-key)"
        };
        return format!(
            "TLS with Redis{} failed: {hint}{}",
            at_server(&cause.server),
            cause.note.as_deref().unwrap_or("")
        );
    }
    let what = match cause.code() {
        Some("NOAUTH") => "the server requires a password and the client sent none",
        _ => "the server refused the username or password",
    };
    format!(
        "authentication with Redis{} failed: {what}{}",
        at_server(&cause.server),
        cause.note.as_deref().unwrap_or("")
    )
}

/// Which limit an [`Error::Timeout`] ran into. Redisson tells the same
/// cases apart by message only (`RedisTimeoutException`: "Unable to
/// acquire connection", "Command execution timeout"); here a caller can
/// match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutKind {
    /// A new connection was not set up within the connect timeout (TCP
    /// connect), or its first round trip (TLS handshake, `AUTH`, `INFO`)
    /// got no answer within the response timeout. Nothing was sent on it.
    Connect,
    /// A command was sent and its reply did not come within the response
    /// timeout: whether it ran is unknown.
    Reply,
    /// Every pooled connection stayed busy for the connect timeout
    /// (Redisson: "Unable to acquire connection").
    Pool,
    /// The caller's wait (for a lock, a permit, a run-once claim) ran out,
    /// or a wait without a deadline gave up.
    Wait,
    /// An operation on a held lease (an extension, a release, a claim) was
    /// still being retried, or was granted, only after the lease ended.
    Lease,
}

/// The message of [`Error::Timeout`].
fn timeout_message(
    kind: TimeoutKind,
    limit: std::time::Duration,
    server: Option<&str>,
    about: Option<&str>,
) -> String {
    use crate::duration_text::Human;
    let at = server.map_or_else(String::new, |s| format!(" at {s}"));
    let within = if limit.is_zero() {
        String::from(" in time")
    } else {
        format!(" within {}", Human(limit))
    };
    let head = match kind {
        TimeoutKind::Connect => format!("no connection to Redis{at}{within}"),
        TimeoutKind::Reply => format!("no reply from Redis{at}{within}"),
        TimeoutKind::Pool => format!("no pooled connection to Redis{at} came free{within}"),
        TimeoutKind::Wait if limit == std::time::Duration::MAX => {
            String::from("gave up waiting without a deadline")
        }
        TimeoutKind::Wait => format!("the wait ran out after {}", Human(limit)),
        TimeoutKind::Lease => format!("the lease of {} ran out", Human(limit)),
    };
    match about {
        Some(about) => format!("{head}: {about}"),
        None => head,
    }
}

/// The item of a failed pipeline or transaction that says most about it:
/// a refused login first, then a refused permission, then any error
/// other than the transaction's own `EXECABORT`. Any other error is
/// itself.
fn decisive(err: redis::RedisError) -> redis::RedisError {
    // A single server error comes back as a list of one.
    let Some(items) = err.clone().into_server_errors() else {
        return err;
    };
    let rank = |e: &redis::ServerError| {
        let cause = RedisCause::new(redis::RedisError::from(e.clone()));
        match cause.code() {
            Some("WRONGPASS" | "NOAUTH") => 0,
            Some("NOPERM") => 1,
            Some("EXECABORT") => 3,
            _ => 2,
        }
    };
    items
        .iter()
        .map(|(_, e)| e)
        .min_by_key(|e| rank(e))
        .map_or(err, |e| redis::RedisError::from(e.clone()))
}

/// What a failed call to a Cluster node asks for (see
/// [`Error::redirect`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// The slot lives on `addr` now (`MOVED`).
    Moved(u16, String),
    /// Ask `addr` this once: the slot is migrating (`ASK`).
    Ask(String),
    /// Wait and try again: the slot is migrating and the call's keys are
    /// not all on one side yet (`TRYAGAIN`). Lasts until the migration
    /// moves the keys or ends, which an operator or a stuck `redis-cli
    /// --cluster reshard` may take seconds or minutes to do.
    TryAgain,
    /// Wait and try again: the cluster is down (`CLUSTERDOWN`).
    Retry,
    /// The node refused the connection: the slot map may be stale.
    Unreachable,
}

impl Redirect {
    /// `true` for the answers of a slot that moves or moved (`MOVED`,
    /// `ASK`, `TRYAGAIN`): the cluster is healthy and the call will be
    /// served once the slot's keys are on one node, which may take as long
    /// as the migration does.
    pub(crate) fn slot_moving(&self) -> bool {
        matches!(
            self,
            Redirect::Moved(..) | Redirect::Ask(_) | Redirect::TryAgain
        )
    }
}

/// The classification the connection layer and the watchdog act on:
/// redirections, refusals and replicas met where a master was expected.
/// Kept here, beside [`Error::is_transient`] and [`Error::is_failover`],
/// so that every layer reads one classification.
impl Error {
    /// What a failed call asks for on a Cluster: a redirection (`MOVED`,
    /// `ASK`), a retry (`TRYAGAIN`, `CLUSTERDOWN`), a fresh slot map (a
    /// refused connection: nothing was sent, so trying elsewhere is safe);
    /// `None` for any other error.
    pub(crate) fn redirect(&self) -> Option<Redirect> {
        let err = self.redis_error()?;
        if let Some((addr, slot)) = err.redirect_node() {
            return Some(match err.kind() {
                redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => Redirect::Ask(addr.into()),
                _ => Redirect::Moved(slot, addr.into()),
            });
        }
        match err.kind() {
            redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain) => Some(Redirect::TryAgain),
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown) => Some(Redirect::Retry),
            _ if err.is_connection_refusal() => Some(Redirect::Unreachable),
            _ => None,
        }
    }

    /// `true` for a cluster redirection or a transient cluster state
    /// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): the call did not run
    /// and may be sent again.
    pub(crate) fn is_redirect(&self) -> bool {
        matches!(
            self.redirect(),
            Some(Redirect::Moved(..) | Redirect::Ask(_) | Redirect::TryAgain | Redirect::Retry)
        )
    }

    /// `true` for a refused connection: nothing was written on it. On a
    /// Cluster the node is gone (a `kill -9` before its replica's
    /// promotion) and the slot map must be asked for again before the call
    /// is worth sending elsewhere.
    pub(crate) fn is_refusal(&self) -> bool {
        self.redis_error()
            .is_some_and(redis::RedisError::is_connection_refusal)
    }

    /// `true` for an error that shows the node is not (or no longer) the
    /// master: a `READONLY` reply, or a new connection whose `ROLE` check
    /// found a replica ([`Error::not_master`]).
    pub(crate) fn is_not_master(&self) -> bool {
        matches!(
            self,
            Error::Redis(cause)
                if cause.code() == Some("READONLY")
                    || cause.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        )
    }

    /// The error of a connection that reached a replica where a master was
    /// expected: classified as `READONLY`, as a write to a replica would
    /// be, and worded as Redis words that refusal.
    pub(crate) fn not_master(addr: &str) -> Error {
        Error::redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "not a master",
            format!("{addr} is a read only replica (its ROLE), not the master"),
        )))
    }
}

impl Error {
    /// Classifies a failure of the Redis driver: by the server's error
    /// code wherever it sits in the reply (see [`RedisCause::code`]), and
    /// for a failed pipeline or transaction by its most telling item.
    pub(crate) fn redis(err: redis::RedisError) -> Error {
        use redis::ErrorKind as K;
        if err.is_timeout() {
            // The OS's words ("Resource temporarily unavailable") add
            // nothing; the caller names the server and the time where it
            // knows them.
            // The limit and server are filled in by the pool
            // ([`Error::on_server`]), which knows them.
            return Error::Timeout {
                kind: TimeoutKind::Reply,
                limit: std::time::Duration::ZERO,
                server: None,
                // redguard's own words on a shared connection ("was still
                // queued and was not sent"), not the OS's.
                about: io_error(&err)
                    .and_then(io::Error::get_ref)
                    .map(ToString::to_string),
            };
        }
        let cause = RedisCause::new(decisive(err));
        match cause.code() {
            Some("WRONGPASS" | "NOAUTH") => return Error::Auth(cause),
            Some("NOPERM") => return Error::Permission(cause),
            _ => {}
        }
        let err = &cause.err;
        match err.kind() {
            K::AuthenticationFailed => Error::Auth(cause),
            // A certificate refused either way is configuration, never an
            // outage: no retry can fix it, and a wait must not sit it out.
            K::Io if tls_refusal(err).is_some() => Error::Auth(cause),
            K::Io => Error::Connection(cause),
            K::Parse | K::UnexpectedReturnType => Error::Protocol(cause.to_string()),
            K::InvalidClientConfig => Error::InvalidArgument(cause.to_string()),
            _ if err.is_connection_dropped() || err.is_connection_refusal() => {
                Error::Connection(cause)
            }
            _ => Error::Redis(cause),
        }
    }

    /// The driver's error behind a connection, authentication, permission
    /// or server error.
    pub(crate) fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Error::Connection(c) | Error::Auth(c) | Error::Permission(c) | Error::Redis(c) => {
                Some(&c.err)
            }
            _ => None,
        }
    }

    /// The same error, saying which server it came from (`host:port/db`)
    /// unless it says so already.
    pub(crate) fn at(self, server: &str) -> Error {
        let name = |c: RedisCause| RedisCause {
            server: c.server.or_else(|| Some(server.to_owned())),
            ..c
        };
        match self {
            Error::Connection(c) => Error::Connection(name(c)),
            Error::Auth(c) => Error::Auth(name(c)),
            Error::Permission(c) => Error::Permission(name(c)),
            Error::Redis(c) => Error::Redis(name(c)),
            Error::Timeout {
                kind,
                limit,
                server: None,
                about,
            } => Error::Timeout {
                kind,
                limit,
                server: Some(server.to_owned()),
                about,
            },
            other => other,
        }
    }

    /// [`Error::at`] `server`, and a reply timeout whose limit was not
    /// known where it was met gets `response_timeout`.
    pub(crate) fn on_server(self, server: &str, response_timeout: std::time::Duration) -> Error {
        match self.at(server) {
            Error::Timeout {
                kind: TimeoutKind::Reply,
                limit: std::time::Duration::ZERO,
                server,
                about,
            } => Error::Timeout {
                kind: TimeoutKind::Reply,
                limit: response_timeout,
                server,
                about,
            },
            other => other,
        }
    }

    /// The message and every source's, joined with `": "`: what a log
    /// line or an error made of other errors shows.
    pub(crate) fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            text.push_str(": ");
            text.push_str(&e.to_string());
            next = e.source();
        }
        text
    }

    /// The same error with `note` (starting with its own separator) after
    /// the driver's text; errors without a driver cause are unchanged.
    pub(crate) fn noted(self, note: String) -> Error {
        match self {
            Error::Connection(c) => Error::Connection(c.with_note(note)),
            Error::Auth(c) => Error::Auth(c.with_note(note)),
            Error::Permission(c) => Error::Permission(c.with_note(note)),
            Error::Redis(c) => Error::Redis(c.with_note(note)),
            other => other,
        }
    }

    /// Classifies a socket failure.
    pub(crate) fn io(err: io::Error) -> Error {
        Error::redis(redis::RedisError::from(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_timeouts_map_to_timeout() {
        for kind in [io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut] {
            let err = Error::io(io::Error::new(kind, "slow"));
            assert!(err.is_timeout(), "{kind:?} -> {err:?}");
            assert!(err.is_transient());
            assert!(err.breaks_connection());
        }
    }

    #[test]
    fn interrupted_calls_are_told_apart() {
        let err = Error::io(io::Error::from(io::ErrorKind::Interrupted));
        assert!(err.is_interrupted(), "{err:?}");
        assert!(err.is_connection(), "{err:?}");
        let reset = Error::io(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(!reset.is_interrupted(), "{reset:?}");
    }

    #[test]
    fn refused_maps_to_connection() {
        let err = Error::io(io::Error::new(io::ErrorKind::ConnectionRefused, "no"));
        assert!(err.is_connection(), "{err:?}");
    }

    fn server_error(resp: &[u8]) -> redis::RedisError {
        match redis::parse_redis_value(resp).unwrap() {
            redis::Value::ServerError(e) => redis::RedisError::from(e),
            other => panic!("not an error: {other:?}"),
        }
    }

    /// No redis-rs type name (`ResponseError`, `NoPerm`, `Server(…)`,
    /// `AuthenticationFailed`, `Io`, …) in a message.
    fn assert_plain(err: &Error) {
        let text = err.chain();
        for name in [
            "ResponseError",
            "NoPerm",
            "Server(",
            "Extension",
            "AuthenticationFailed",
            "InvalidClientConfig",
            " - Io",
            "\"WRONGPASS\"",
        ] {
            assert!(!text.contains(name), "{name} in {text:?}");
        }
    }

    #[test]
    fn server_errors_are_classified() {
        let wrongtype =
            server_error(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert!(matches!(
            Error::redis(server_error(b"-NOPERM no\r\n")),
            Error::Permission(_)
        ));
        assert!(matches!(
            Error::redis(server_error(b"-WRONGPASS bad\r\n")),
            Error::Auth(_)
        ));
        assert!(Error::redis(server_error(b"-READONLY replica\r\n")).is_transient());
        for transient in [
            &b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN \
               NOSAVE.\r\n"[..],
            b"-NOREPLICAS Not enough good replicas to write.\r\n",
        ] {
            let err = Error::redis(server_error(transient));
            assert!(err.is_transient(), "{err:?}");
        }
        for lasting in [
            &b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"[..],
            b"-MISCONF Redis is configured to save RDB snapshots, but it's currently unable \
              to persist to disk.\r\n",
            b"-ERR unknown command\r\n",
        ] {
            let err = Error::redis(server_error(lasting));
            assert!(!err.is_transient(), "{err:?}");
        }
        assert!(!Error::from_redis(wrongtype.clone(), b"k").is_transient());
        assert!(!Error::redis(server_error(b"-NOPERM no\r\n")).is_transient());
        assert!(!Error::redis(server_error(b"-WRONGPASS bad\r\n")).is_transient());
        assert!(!Error::Shutdown.is_transient());
        assert!(!Error::invalid("x").is_transient());
        for failover in [
            &b"-READONLY replica\r\n"[..],
            b"-MOVED 3999 127.0.0.1:7001\r\n",
            b"-ASK 3999 127.0.0.1:7001\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
        ] {
            let err = Error::redis(server_error(failover));
            assert!(err.is_failover(), "{err:?}");
        }
        assert!(Error::io(io::Error::new(io::ErrorKind::ConnectionRefused, "no")).is_failover());
        assert!(!Error::redis(server_error(b"-NOPERM no\r\n")).is_failover());
        assert!(!Error::redis(server_error(b"-ERR unknown\r\n")).is_failover());
        assert!(matches!(
            Error::from_redis(wrongtype, b"k"),
            Error::WrongType { key } if key == "k"
        ));
    }

    /// Error replies raised inside a script, as each server words them:
    /// classified by their code wherever it sits.
    #[test]
    fn errors_inside_scripts_are_classified_by_their_code() {
        // Redis 6.2 wraps the error of a command inside a script.
        let wrapped =
            b"-ERR Error running script (call to f_591c7ee7028775d57d91206e9bf2747ed5e53678): \
            @user_script:10: WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        let err = Error::from_redis(server_error(wrapped), b"rg:k");
        assert!(
            matches!(&err, Error::WrongType { key } if key == "rg:k"),
            "{err:?}"
        );
        let cause = RedisCause::new(server_error(wrapped));
        assert_eq!(cause.code(), Some("WRONGTYPE"));

        // Valkey 8: an ACL refusal of a channel inside a script.
        let valkey = b"-ERR ACL failure in script: No permissions to access a channel \
            script: 591c7ee7028775d57d91206e9bf2747ed5e53678, on @user_script:27.\r\n";
        let err = Error::from_redis(server_error(valkey), b"rg:j2-channel");
        assert!(matches!(err, Error::Permission(_)), "{err:?}");
        assert!(err.to_string().contains("\"rg:j2-channel\""), "{err}");
        assert_plain(&err);

        // Redis 6.2 and 7.0: the same refusal in their words.
        for reply in [
            &b"-ERR Error running script (call to f_591c): @user_script:27: @user_script: 27: \
               The user executing the script can't publish to the channel mentioned in the \
               command\r\n"[..],
            b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n",
        ] {
            let err = Error::from_redis(server_error(reply), b"rg:x");
            assert!(matches!(err, Error::Permission(_)), "{err:?}");
            assert_plain(&err);
        }

        // A replica's refusal inside a 6.2 script is still transient.
        let readonly = b"-ERR Error running script (call to f_1): @user_script:3: \
            READONLY You can't write against a read only replica.\r\n";
        assert!(Error::redis(server_error(readonly)).is_transient());
        // A code-like word elsewhere in the text is not a code.
        let other = b"-ERR value of key WRONGTYPE is bad\r\n";
        assert!(matches!(Error::redis(server_error(other)), Error::Redis(_)));
    }

    /// Messages say what happened in plain words: the server's own reply,
    /// never the driver's type names.
    #[test]
    fn messages_are_plain() {
        let wrongpass = Error::redis(server_error(
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        ))
        .at("127.0.0.1:6379/0");
        assert!(matches!(wrongpass, Error::Auth(_)));
        assert_eq!(
            wrongpass.chain(),
            "authentication with Redis at 127.0.0.1:6379/0 failed: the server refused the \
             username or password: WRONGPASS invalid username-password pair or user is disabled."
        );
        let noauth = Error::redis(server_error(b"-NOAUTH Authentication required.\r\n"));
        assert!(
            noauth
                .to_string()
                .contains("requires a password and the client sent none"),
            "{noauth}"
        );
        // The driver's own refusal at connect carries no server text.
        let failed = Error::redis(redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )))
        .at("h:1/0");
        assert_eq!(
            failed.chain(),
            "authentication with Redis at h:1/0 failed: the server refused the username or \
             password: Password authentication failed"
        );
        let refused =
            Error::io(io::Error::new(io::ErrorKind::ConnectionRefused, "refused")).at("h:1/0");
        assert_eq!(
            refused.chain(),
            "connection to Redis at h:1/0 failed: refused"
        );
        for err in [wrongpass, noauth, failed, refused] {
            assert_plain(&err);
        }
    }

    /// The messages of an error and of each of its sources, in order.
    fn levels(err: &Error) -> Vec<String> {
        let mut out = vec![err.to_string()];
        let mut next = std::error::Error::source(err);
        while let Some(e) = next {
            out.push(e.to_string());
            next = e.source();
        }
        out
    }

    /// Each variant's message and sources: every level says only its own
    /// part (no level repeats the text of the one below it), and the
    /// cause shows once in the chain.
    #[test]
    fn each_level_says_only_its_own_part() {
        use std::time::Duration;
        let os_refused = || io::Error::from_raw_os_error(111);
        let refused_text = os_refused().to_string();
        let timeout = |kind, limit, server: Option<&str>, about: Option<&str>| Error::Timeout {
            kind,
            limit,
            server: server.map(str::to_owned),
            about: about.map(str::to_owned),
        };
        let cases: Vec<(Error, Vec<String>)> = vec![
            (
                Error::io(os_refused()).at("127.0.0.1:47127/0"),
                vec![
                    "connection to Redis at 127.0.0.1:47127/0 failed".into(),
                    refused_text.clone(),
                ],
            ),
            (
                Error::io(io::Error::from(io::ErrorKind::UnexpectedEof))
                    .on_server("h:1/2", Duration::from_secs(3)),
                vec![
                    "connection to Redis at h:1/2 failed".into(),
                    "unexpected end of file".into(),
                ],
            ),
            (
                Error::from_redis(server_error(b"-NOPERM no permissions\r\n"), b"rg:k"),
                vec![
                    "permission denied by Redis (key \"rg:k\", or a key or channel named \
                     after it)"
                        .into(),
                    "NOPERM no permissions".into(),
                ],
            ),
            (
                Error::redis(server_error(b"-ERR unknown command\r\n")).at("h:1/0"),
                vec![
                    "Redis at h:1/0 answered with an error".into(),
                    "ERR unknown command".into(),
                ],
            ),
            (
                Error::redis(server_error(b"-NOAUTH Authentication required.\r\n")),
                vec![
                    "authentication with Redis failed: the server requires a password and the \
                     client sent none"
                        .into(),
                    "NOAUTH Authentication required.".into(),
                ],
            ),
            (
                Error::io(io::Error::from(io::ErrorKind::WouldBlock))
                    .on_server("h:1/0", Duration::from_millis(1500)),
                vec!["no reply from Redis at h:1/0 within 1s 500ms".into()],
            ),
            (
                timeout(
                    TimeoutKind::Connect,
                    Duration::from_secs(2),
                    Some("h:1/0"),
                    None,
                ),
                vec!["no connection to Redis at h:1/0 within 2s".into()],
            ),
            (
                timeout(
                    TimeoutKind::Pool,
                    Duration::from_secs(2),
                    Some("h:1/0"),
                    Some("all 4 pooled connections stayed busy"),
                ),
                vec![
                    "no pooled connection to Redis at h:1/0 came free within 2s: all 4 \
                     pooled connections stayed busy"
                        .into(),
                ],
            ),
            (
                timeout(TimeoutKind::Wait, Duration::MAX, None, None),
                vec!["gave up waiting without a deadline".into()],
            ),
            (
                timeout(
                    TimeoutKind::Wait,
                    Duration::from_secs(5),
                    None,
                    Some("run-once key"),
                ),
                vec!["the wait ran out after 5s: run-once key".into()],
            ),
            (
                timeout(
                    TimeoutKind::Lease,
                    Duration::from_secs(30),
                    None,
                    Some("extension"),
                ),
                vec!["the lease of 30s ran out: extension".into()],
            ),
            (
                Error::Unlock {
                    total: 2,
                    failures: vec![("a on h:1/0".into(), Error::io(os_refused()).at("h:1/0"))],
                },
                vec![format!(
                    "unlock failed on 1 of 2 locks: a on h:1/0: connection to Redis at h:1/0 \
                     failed: {refused_text}"
                )],
            ),
            (
                Error::lost(b"k"),
                vec!["the lease of lock \"k\" was lost".into()],
            ),
        ];
        for (err, want) in cases {
            let got = levels(&err);
            assert_eq!(got, want, "{err:?}");
            for pair in got.windows(2) {
                assert!(!pair[0].contains(&pair[1]), "{pair:?} repeats its source");
            }
            assert_plain(&err);
        }
    }

    /// A connection that answers every pipeline with the same replies.
    struct Canned(Vec<redis::Value>);

    impl redis::ConnectionLike for Canned {
        fn req_packed_command(&mut self, _cmd: &[u8]) -> redis::RedisResult<redis::Value> {
            Ok(self.0[0].clone())
        }
        fn req_packed_commands(
            &mut self,
            _cmd: &[u8],
            _offset: usize,
            _count: usize,
        ) -> redis::RedisResult<Vec<redis::Value>> {
            Ok(self.0.clone())
        }
        fn get_db(&self) -> i64 {
            0
        }
        fn check_connection(&mut self) -> bool {
            true
        }
        fn is_open(&self) -> bool {
            true
        }
    }

    /// A failed pipeline is classified by its most telling item: a refused
    /// login among its replies is `Auth`, a refused command `Permission`.
    #[test]
    fn pipelines_are_classified_by_their_items() {
        let reply = |resp: &[u8]| match redis::parse_redis_value(resp).unwrap() {
            v @ redis::Value::ServerError(_) => v,
            other => panic!("not an error: {other:?}"),
        };
        let run = |replies: Vec<redis::Value>| {
            let err = redis::pipe()
                .cmd("HGETALL")
                .arg("k")
                .cmd("PTTL")
                .arg("k")
                .query::<redis::Value>(&mut Canned(replies))
                .unwrap_err();
            Error::redis(err)
        };
        let auth = run(vec![
            reply(b"-ERR something else\r\n"),
            reply(b"-NOAUTH Authentication required.\r\n"),
        ]);
        assert!(matches!(auth, Error::Auth(_)), "{auth:?}");
        assert_plain(&auth);
        let perm = run(vec![
            reply(b"-NOPERM this user has no permissions to run the 'hgetall' command\r\n"),
            redis::Value::Int(5),
        ]);
        assert!(matches!(perm, Error::Permission(_)), "{perm:?}");
        assert_plain(&perm);
    }
}

#[cfg(test)]
mod readme {
    /// The error table (docs/LIBRARY.md, "Errors") names every variant of
    /// [`super::Error`] (read from this file's source, so a new variant
    /// fails here until the table lists it).
    #[test]
    fn readme_names_every_variant() {
        let source = include_str!("error.rs");
        let readme = include_str!("../docs/LIBRARY.md");
        let body = source
            .split("pub enum Error {")
            .nth(1)
            .and_then(|rest| rest.split("\n}\n").next())
            .expect("the enum's body");
        let variants: Vec<&str> = body
            .lines()
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
            .map(|line| {
                line.split(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or("")
            })
            .collect();
        assert!(variants.len() >= 14, "{variants:?}");
        for v in variants {
            assert!(
                readme.contains(&format!("| `{v}` |")),
                "docs/LIBRARY.md lists no `{v}`"
            );
        }
    }
}
