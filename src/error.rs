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
    /// key. The value is left untouched.
    #[error("key {key:?} holds a value of the wrong type for this lock")]
    WrongType {
        /// The key (lossy UTF-8).
        key: String,
    },
    /// An argument was rejected before anything was sent to Redis (empty
    /// name, zero or out-of-range duration, inconsistent configuration, bad
    /// URL).
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
    #[error("authentication with Redis failed: {0}")]
    Auth(#[source] RedisCause),
    /// The Redis ACL user may not run a command or touch a key or channel
    /// (`NOPERM`).
    #[error("permission denied by Redis: {0}")]
    Permission(#[source] RedisCause),
    /// Redis answered something that is not a valid reply for the operation.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    /// Any other error reported by Redis.
    #[error("Redis error: {0}")]
    Redis(#[source] RedisCause),
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
            Error::Redis(e) => matches!(
                e.0.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::BusyLoading
                        | redis::ServerErrorKind::TryAgain
                        | redis::ServerErrorKind::ClusterDown
                        | redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::ReadOnly
                )
            ),
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
        if err.code() == Some("WRONGTYPE") {
            return Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
            };
        }
        match Error::redis(err) {
            Error::Permission(cause) => Error::Permission(RedisCause(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
                "NOPERM",
                format!(
                    "{cause} (key {:?}, or a key or channel named after it)",
                    String::from_utf8_lossy(key)
                ),
            )))),
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
pub struct RedisCause(redis::RedisError);

impl RedisCause {
    /// The error code the server sent (`NOPERM`, `READONLY`, `WRONGPASS`,
    /// ...), if the failure came from the server.
    pub fn code(&self) -> Option<&str> {
        self.0.code()
    }

    /// The driver's classification of the failure.
    pub(crate) fn kind(&self) -> redis::ErrorKind {
        self.0.kind()
    }
}

impl fmt::Display for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for RedisCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Error {
    /// Classifies a failure of the Redis driver.
    pub(crate) fn redis(err: redis::RedisError) -> Error {
        use redis::ErrorKind as K;
        if err.is_timeout() {
            return Error::Timeout(err.to_string());
        }
        if err.code() == Some("WRONGPASS") || err.code() == Some("NOAUTH") {
            return Error::Auth(RedisCause(err));
        }
        let cause = RedisCause;
        match err.kind() {
            K::AuthenticationFailed => Error::Auth(cause(err)),
            K::Server(redis::ServerErrorKind::NoPerm) => Error::Permission(cause(err)),
            K::Io => Error::Connection(cause(err)),
            K::Parse | K::UnexpectedReturnType => Error::Protocol(err.to_string()),
            K::InvalidClientConfig => Error::InvalidArgument(err.to_string()),
            _ if err.is_connection_dropped() || err.is_connection_refusal() => {
                Error::Connection(cause(err))
            }
            _ if err.code() == Some("NOPERM")
                || err
                    .detail()
                    // A script refused by the ACL: a key it declared, or
                    // a channel it publishes to.
                    .is_some_and(|d| {
                        d.contains("can't access at least one of the")
                            || d.contains("user executing the script can't")
                    }) =>
            {
                Error::Permission(cause(err))
            }
            _ => Error::Redis(cause(err)),
        }
    }

    /// The driver's error behind a connection, authentication, permission
    /// or server error.
    pub(crate) fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Error::Connection(c) | Error::Auth(c) | Error::Permission(c) | Error::Redis(c) => {
                Some(&c.0)
            }
            _ => None,
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

    #[test]
    fn server_errors_are_classified() {
        let server_error = |resp: &[u8]| match redis::parse_redis_value(resp).unwrap() {
            redis::Value::ServerError(e) => redis::RedisError::from(e),
            other => panic!("not an error: {other:?}"),
        };
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
