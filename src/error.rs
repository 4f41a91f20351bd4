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
    /// Redis did not answer within the response timeout, or the connection
    /// pool had no connection to give within the connect timeout.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The client was shut down; no more operations are accepted.
    #[error("the redguard client was shut down")]
    Shutdown,
    /// Redis could not be reached, or the connection broke.
    #[error("connection to Redis failed: {0}")]
    Connection(#[source] RedisCause),
    /// Redis refused the credentials (`WRONGPASS`, `NOAUTH`). The connection
    /// is discarded: no command is ever sent unauthenticated.
    #[error("{}", auth_message(.0))]
    Auth(#[source] RedisCause),
    /// The Redis ACL user may not run a command or touch a key or channel
    /// (`NOPERM`, or an ACL refusal inside a script). The message names the
    /// key the call was about.
    #[error("permission denied by Redis: {0}")]
    Permission(#[source] RedisCause),
    /// Redis answered something that is not a valid reply for the operation.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    /// Any other error reported by Redis.
    #[error("Redis error: {0}")]
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
        .map(|(lock, e)| format!("{lock}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// `true` for [`Error::Connection`]: Redis unreachable or the connection broke.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection(_))
    }

    /// `true` for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout(_))
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
    /// (loading, failover in progress, read-only replica).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connection(_) | Error::Timeout(_) => true,
            Error::Redis(e) => {
                matches!(
                    e.code(),
                    Some("LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY")
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

    /// `true` when the error means the connection it happened on must not be
    /// reused: its state (a reply still in flight, a dead socket) is unknown.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(
            self,
            Error::Connection(_) | Error::Timeout(_) | Error::Protocol(_) | Error::Auth(_)
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
/// refused (os error 111)`), followed by what redguard knows about it (the
/// key an ACL refused).
pub struct RedisCause {
    err: redis::RedisError,
    /// Said after the driver's text, as it is (starting with its own
    /// separator).
    note: Option<String>,
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
        RedisCause { err, note: None }
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
        f.write_str(&self.plain())?;
        if let Some(note) = &self.note {
            f.write_str(note)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for RedisCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.err.source()
    }
}

/// The message of [`Error::Auth`]: what the refusal means, then the
/// server's words when it sent any (a refused `AUTH` at connect has none
/// beyond "failed").
fn auth_message(cause: &RedisCause) -> String {
    let what = match cause.code() {
        Some("NOAUTH") => "the server requires a password and the client sent none",
        _ => "the server refused the username or password",
    };
    match cause.err.code() {
        Some(_) => format!("authentication with Redis failed: {what} ({cause})"),
        None => match &cause.note {
            Some(note) => format!("authentication with Redis failed: {what}{note}"),
            None => format!("authentication with Redis failed: {what}"),
        },
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
            return Error::Timeout("no answer from Redis in time".into());
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

    /// The same error, saying which server it came from (`host:port`) when
    /// its message would not: a failed connect or login.
    pub(crate) fn at(self, server: &str) -> Error {
        match self {
            Error::Connection(_) | Error::Auth(_) => self.noted(format!(" at {server}")),
            other => other,
        }
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
        let text = err.to_string();
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
        .at("127.0.0.1:6379");
        assert!(matches!(wrongpass, Error::Auth(_)));
        assert_eq!(
            wrongpass.to_string(),
            "authentication with Redis failed: the server refused the username or password \
             (WRONGPASS invalid username-password pair or user is disabled. at 127.0.0.1:6379)"
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
        .at("h:1");
        assert_eq!(
            failed.to_string(),
            "authentication with Redis failed: the server refused the username or password at h:1"
        );
        let refused =
            Error::io(io::Error::new(io::ErrorKind::ConnectionRefused, "refused")).at("h:1");
        assert_eq!(
            refused.to_string(),
            "connection to Redis failed: refused at h:1"
        );
        for err in [wrongpass, noauth, failed, refused] {
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
    /// The README's error table names every variant of [`super::Error`]
    /// (read from this file's source, so a new variant fails here until the
    /// README lists it).
    #[test]
    fn readme_names_every_variant() {
        let source = include_str!("error.rs");
        let readme = include_str!("../README.md");
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
                "README lists no `{v}`"
            );
        }
    }
}
