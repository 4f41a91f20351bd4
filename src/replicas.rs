//! Replica acknowledgement: Redis's `WAIT` after a grant, an extension or a
//! fencing-token increment, so that a write a failover would lose is caught
//! before the caller relies on it. Redisson does the same with
//! `checkLockSyncedSlaves` / `slavesSyncTimeout`: its lock scripts go out
//! in a batch followed by `WAIT`, and a grant that no replica acknowledged
//! is released and reported as an error.
//!
//! Two facts shape the code (RELIABILITY 3.6, verified on Redis 7.0):
//! `WAIT` counts the acknowledgements of the *calling connection's own*
//! writes, so it must go on the connection that ran the script; and it is
//! sent in the same write as the script (`connection::framed`), so it costs no extra
//! round trip beyond the replicas' own.

use std::fmt;
use std::time::Duration;

use redis::{ConnectionLike, Value};

use crate::connection::framed::Framed;

use crate::duration_text::Human;
use crate::error::{Error, Result};

/// Default bound on the wait for replica acknowledgements: 1 s (Redisson's
/// `slavesSyncTimeout`).
const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// Shortest ack timeout: `WAIT … 0` would wait forever.
const MIN_ACK_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest ack timeout.
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Most acknowledgements one can ask for: far above any real deployment.
const MAX_ACKS: u32 = 1000;

/// How many replicas must acknowledge a lock write, and how long to wait
/// for them. `min == 0` (the default) sends no `WAIT`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) min: u32,
    pub(crate) timeout: Duration,
}

impl Default for ReplicaAcks {
    fn default() -> ReplicaAcks {
        ReplicaAcks {
            min: 0,
            timeout: DEFAULT_ACK_TIMEOUT,
        }
    }
}

impl fmt::Debug for ReplicaAcks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} within {:?}", self.min, self.timeout)
    }
}

impl ReplicaAcks {
    /// Checks the bounds [`Builder::min_replica_acks`] and
    /// [`Builder::replica_ack_timeout`] document.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.min > MAX_ACKS {
            return Err(Error::invalid(format!(
                "min replica acks {} is above {MAX_ACKS}",
                self.min
            )));
        }
        if !(MIN_ACK_TIMEOUT..=MAX_ACK_TIMEOUT).contains(&self.timeout) {
            return Err(Error::invalid(format!(
                "replica ack timeout {} is outside {} ..= {}",
                Human(self.timeout),
                Human(MIN_ACK_TIMEOUT),
                Human(MAX_ACK_TIMEOUT)
            )));
        }
        Ok(())
    }

    /// Runs `op` on `conn`, each of its commands followed by `WAIT` in the
    /// same write, and `before` (packed commands and their count, replies
    /// dropped) ahead of its first; returns `op`'s result and how many
    /// replicas acknowledged its last command (`None` when `min` is 0:
    /// nothing was asked).
    ///
    /// The connection's read timeout grows by the ack timeout meanwhile,
    /// since the server answers only once `WAIT` is done.
    pub(crate) fn run<T>(
        &self,
        conn: &mut redis::Connection,
        response_timeout: Duration,
        before: Option<(Vec<u8>, usize)>,
        op: impl FnOnce(&mut dyn ConnectionLike) -> Result<T>,
    ) -> Result<(T, Option<u64>)> {
        if self.min == 0 {
            return match before {
                None => op(conn),
                before => op(&mut Framed::plain(conn).with_before(before)),
            }
            .map(|value| (value, None));
        }
        let ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let wait = redis::cmd("WAIT")
            .arg(self.min)
            .arg(ms)
            .get_packed_command();
        conn.set_read_timeout(Some(response_timeout.saturating_add(self.timeout)))
            .map_err(Error::redis)?;
        let mut framed = Framed::plain(&mut *conn)
            .with_before(before)
            .with_after(wait);
        let result = op(&mut framed);
        let count = match framed.after_reply() {
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        // A failure here leaves the longer timeout in place; the pool
        // discards connections whose I/O failed.
        conn.set_read_timeout(Some(response_timeout))
            .map_err(Error::redis)?;
        let value = result?;
        Ok((value, Some(count.unwrap_or(0))))
    }
}

impl ReplicaAcks {
    /// Sends `WAIT min timeout` on `conn` after writes made on it (a
    /// pipeline of renewals): how many replicas acknowledged them, `None`
    /// when `min` is 0 (nothing sent).
    pub(crate) fn wait(
        &self,
        conn: &mut redis::Connection,
        response_timeout: Duration,
    ) -> Result<Option<u64>> {
        if self.min == 0 {
            return Ok(None);
        }
        let ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        conn.set_read_timeout(Some(response_timeout.saturating_add(self.timeout)))
            .map_err(Error::redis)?;
        let acked = redis::cmd("WAIT")
            .arg(self.min)
            .arg(ms)
            .query::<u64>(conn)
            .map_err(Error::redis);
        conn.set_read_timeout(Some(response_timeout))
            .map_err(Error::redis)?;
        acked.map(Some)
    }

    /// `true` when `acked` (from [`ReplicaAcks::run`] or
    /// [`ReplicaAcks::wait`]) falls short of `min`.
    pub(crate) fn short(&self, acked: Option<u64>) -> bool {
        self.min > 0 && acked.unwrap_or(0) < u64::from(self.min)
    }

    /// The error for a write of `name` that only `acked` replicas (`None`:
    /// none counted) acknowledged of the `min` asked for.
    pub(crate) fn not_replicated(&self, name: &[u8], acked: Option<u64>) -> Error {
        Error::NotReplicated {
            name: String::from_utf8_lossy(name).into_owned(),
            acked: acked.unwrap_or(0),
            wanted: u64::from(self.min),
        }
    }
}
