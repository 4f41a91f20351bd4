//! Which server a pool talks to, learned once from its first connection
//! (`INFO server`), and what follows from it: the oldest version redguard
//! runs on, and whether the server has sharded pub/sub.
//!
//! Valkey reports the Redis version it is compatible with
//! (`redis_version:7.2.4`) beside its own (`valkey_version:8.1.8`); the
//! former decides, the latter names the server in messages.

use crate::error::{Error, Result};

/// The oldest Redis version redguard runs on: the oldest it is tested on
/// (`scripts/test` runs the suite on Redis 6.2, 7.0 and Valkey 8).
pub(crate) const MIN_REDIS: (u32, u32, u32) = (6, 2, 0);

/// The first Redis version with sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
const SHARDED_PUBSUB: (u32, u32, u32) = (7, 0, 0);

/// A server as its `INFO server` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// `Redis 6.2.14`, `Valkey 8.1.8`.
    pub(crate) name: String,
    /// `redis_version`, as numbers.
    pub(crate) redis_version: (u32, u32, u32),
    /// `redis_mode:cluster` (Valkey: `server_mode:cluster`): a Cluster
    /// node, which serves only its own slots.
    pub(crate) cluster: bool,
}

impl Server {
    /// Reads the text of `INFO server`; `None` without a `redis_version`.
    pub(crate) fn parse(info: &str) -> Option<Server> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let redis = field("redis_version")?;
        let mut parts = redis.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().unwrap_or(0)
        });
        let redis_version = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        let name = match field("valkey_version") {
            Some(valkey) => format!("Valkey {valkey}"),
            None => format!("Redis {redis}"),
        };
        Some(Server {
            name,
            redis_version,
            // Valkey names the field `server_mode`.
            cluster: field("redis_mode").or_else(|| field("server_mode")) == Some("cluster"),
        })
    }

    /// Whether the server has sharded pub/sub (Redis 7.0+, every Valkey).
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.redis_version >= SHARDED_PUBSUB
    }

    /// Refuses a server older than [`MIN_REDIS`].
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedServer`] naming `addr` and what it runs.
    pub(crate) fn check(&self, addr: &str) -> Result<()> {
        if self.redis_version < MIN_REDIS {
            return Err(Error::UnsupportedServer {
                server: addr.to_owned(),
                version: self.name.clone(),
            });
        }
        Ok(())
    }
}

/// The refusal of a Redis Cluster node reached through a single-server
/// (`redis://`) URL: through it only the node's own slots could be used,
/// every other name would fail with `MOVED`, and `list` would show one
/// node's locks as if they were all.
pub(crate) fn cluster_node(addr: &str) -> Error {
    Error::invalid(format!(
        "{addr} is a Redis Cluster node: use a redis+cluster:// URL (for example \
         redis+cluster://{addr}/, with more nodes as seeds: redis+cluster://h1:p1,h2:p2/)"
    ))
}

/// Asks the server behind `conn` what it is (`INFO server`, one round
/// trip). `Ok(None)` when it will not say (an ACL user without `INFO`,
/// a proxy that hides it): nothing is known, and nothing is refused.
///
/// # Errors
///
/// A failure of the connection itself (timeout, I/O, authentication).
pub(crate) fn probe(conn: &mut dyn redis::ConnectionLike) -> Result<Option<Server>> {
    match redis::cmd("INFO").arg("server").query::<String>(conn) {
        Ok(info) => Ok(Server::parse(&info)),
        Err(e) => match Error::redis(e) {
            Error::Permission(_) | Error::Redis(_) | Error::Protocol(_) => Ok(None),
            other => Err(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_named_and_checked_by_version() {
        let redis62 =
            Server::parse("# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n").unwrap();
        assert_eq!(redis62.name, "Redis 6.2.14");
        assert!(!redis62.cluster);
        assert!(
            Server::parse("redis_version:7.0.15\r\nredis_mode:cluster\r\n")
                .unwrap()
                .cluster
        );
        assert!(
            Server::parse("redis_version:7.2.4\r\nvalkey_version:8.1.8\r\nserver_mode:cluster\r\n")
                .unwrap()
                .cluster
        );
        assert!(!redis62.sharded_pubsub());
        assert!(redis62.check("h:1").is_ok());

        let valkey = Server::parse(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n",
        )
        .unwrap();
        assert_eq!(valkey.name, "Valkey 8.1.8");
        assert!(valkey.sharded_pubsub());
        assert!(valkey.check("h:1").is_ok());

        let old = Server::parse("redis_version:6.0.16\r\n").unwrap();
        let err = old.check("10.0.0.1:6379").unwrap_err();
        assert!(matches!(err, Error::UnsupportedServer { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "10.0.0.1:6379 runs Redis 6.0.16; redguard needs Redis 6.2 or later (or any Valkey)"
        );
        assert!(
            Server::parse("redis_version:7.0.15\r\n")
                .unwrap()
                .sharded_pubsub()
        );
        assert_eq!(
            Server::parse("redis_version:7.4.0-rc1\r\n")
                .unwrap()
                .redis_version,
            (7, 4, 0)
        );
        assert!(Server::parse("# Server\r\n").is_none());
    }

    /// The README's "Supported servers" states the minimum this module
    /// enforces, and marks the servers the test suite runs on as tested.
    #[test]
    fn readme_states_the_minimum_and_the_tested_servers() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Supported servers")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README has a \"Supported servers\" section");
        let (major, minor, _) = MIN_REDIS;
        assert!(
            section.contains(&format!("The minimum is Redis {major}.{minor},")),
            "{section}"
        );
        assert!(section.contains("`Error::UnsupportedServer`"));
        for row in [
            "| Redis 6.2 | yes",
            "| Redis 7.0 | yes",
            "| Valkey 7.2, 8 | yes",
        ] {
            assert!(section.contains(row), "README lacks {row:?}");
        }
    }
}
