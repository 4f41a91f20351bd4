//! [`LockInfo`]: a read-only look at whatever is stored at a lock name, for
//! monitoring and administration (`redguard status`). Reads only; never
//! changes a key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::keys;
use crate::lease::{Pttl, Ttl};
use crate::lock::Lock;
use crate::lost::HoldKind;
use crate::record::{self, HolderRecord};

/// What [`Lock::inspect`] found at a lock name.
///
/// A snapshot: by the time it is read the lock may have changed hands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: Vec<u8>,
    /// The kind of lock stored at the name (or [`LockKind::Free`]).
    pub kind: LockKind,
    /// Every holder id with its hold count, as stored in the lock hash
    /// (empty when the lock is free or the value is not a lock). Write
    /// holds of a read-write lock appear as Redisson stores them, with a
    /// `:write` suffix.
    pub holders: Vec<(HolderId, u64)>,
    /// The remaining lease of the lock key: `None` when nothing is stored
    /// there, [`Ttl::Persistent`] when the key has no expiry.
    pub ttl: Option<Ttl>,
    /// The holder records of the holders' clients that keep one (see
    /// [`Builder::holder_record`](crate::Builder::holder_record)): host,
    /// pid, program, and since when each hold began. A holder whose client
    /// has none here (a Java process, a client with records off, a record
    /// not written yet) is simply missing: [`LockInfo::record_of`] answers
    /// `None` for it.
    pub records: Vec<HolderRecord>,
    /// The server's clock when the records were read: "held for" is this
    /// minus [`LockInfo::held_since`]. `None` when nothing was held.
    pub server_time: Option<SystemTime>,
    /// Connections subscribed to the lock's unlock channel (and, for a fair
    /// lock, its waiters' channels): the waiters of other processes,
    /// asleep until a release (`PUBSUB NUMSUB`; one per client, however
    /// many of its threads wait). On a Cluster, classic subscribers are
    /// counted on every master (a cluster forwards a `PUBLISH` to all its
    /// nodes) and sharded ones (`PUBSUB SHARDNUMSUB`) on the lock's node;
    /// subscribers on replicas are not counted. `None` when the server
    /// would not say.
    ///
    /// A redguard holder listens on the channel too, for a force unlock
    /// (once its hold lasted 100 ms): such holders are not counted, as far
    /// as their holder records tell (a holder without a record is).
    pub subscribers: Option<u64>,
}

impl LockInfo {
    /// Takes the holders that listen on the lock's channel themselves out
    /// of [`LockInfo::subscribers`]: one connection per holder client whose
    /// record shows a hold here that lasted long enough to be listened for.
    pub(crate) fn discount_listening_holders(&mut self) {
        let Some(n) = self.subscribers else {
            return;
        };
        let listen_after = crate::subscriber::LISTEN_AFTER;
        let mut clients: Vec<&str> = self
            .holders
            .iter()
            .filter(|(h, _)| self.held_for(h).is_some_and(|d| d >= listen_after))
            .filter_map(|(h, _)| record::client_of(h.as_str()))
            .collect();
        clients.sort_unstable();
        clients.dedup();
        self.subscribers = Some(n.saturating_sub(clients.len() as u64));
    }

    /// The holder record of `holder`'s client, if it keeps one.
    pub fn record_of(&self, holder: &HolderId) -> Option<&HolderRecord> {
        let client = crate::record::client_of(holder.as_str())?;
        self.records.iter().find(|r| r.client == client)
    }

    /// When `holder`'s hold began (server clock), as its record says.
    pub fn held_since(&self, holder: &HolderId) -> Option<SystemTime> {
        self.record_of(holder)?
            .held_since(holder.as_str(), &self.name)
    }

    /// What kind of hold `holder` has, as its record says: a run-once
    /// claim ([`HoldKind::Once`]) shares the layout of a fenced lock, and
    /// only its record tells them apart.
    pub fn hold_kind(&self, holder: &HolderId) -> Option<HoldKind> {
        self.record_of(holder)?
            .hold_kind(holder.as_str(), &self.name)
    }

    /// How long `holder` has held the lock: [`LockInfo::server_time`]
    /// minus [`LockInfo::held_since`].
    pub fn held_for(&self, holder: &HolderId) -> Option<Duration> {
        let now = self.server_time?;
        Some(
            now.duration_since(self.held_since(holder)?)
                .unwrap_or_default(),
        )
    }

    /// `true` when some holder holds the lock (or a value that is not a
    /// lock occupies the name, which blocks every acquirer all the same).
    pub fn is_held(&self) -> bool {
        match &self.kind {
            LockKind::Free => false,
            LockKind::Other { .. } => true,
            _ => !self.holders.is_empty(),
        }
    }
}

/// The kind of value found at a lock name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// Nothing is stored at the name and no fair-lock queue exists.
    Free,
    /// A reentrant lock (Redisson's `RLock` layout: a hash of holder id to
    /// hold count).
    Reentrant,
    /// A fair lock (Redisson's `RFairLock`): the reentrant hash plus a queue
    /// of waiting holder ids, `redisson_lock_queue:{name}`, and their wait
    /// deadlines, `redisson_lock_timeout:{name}`. The hash may be absent
    /// while the queue still lists waiters.
    Fair {
        /// The waiting holder ids, first in line first, with their
        /// deadlines.
        queue: Vec<QueuedWaiter>,
    },
    /// A read-write lock (Redisson's `RReadWriteLock`): the hash carries a
    /// `mode` field.
    ReadWrite {
        /// `"read"` or `"write"`, as stored.
        mode: String,
    },
    /// A value that is not a lock of any known layout: another Redis type,
    /// or a hash whose values are not hold counts.
    Other {
        /// The Redis type (`TYPE` reply): `string`, `list`, `hash`, ...
        redis_type: String,
    },
}

/// One waiter in a fair lock's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's holder id.
    pub holder: HolderId,
    /// When the waiter's place in the queue lapses unless it retries (the
    /// score in `redisson_lock_timeout:{name}`, Unix epoch ms); `None` when
    /// the waiter has no deadline recorded.
    pub deadline: Option<SystemTime>,
}

/// One field of a hash and its value, as raw bytes.
pub(crate) type Field = (Vec<u8>, Vec<u8>);

impl Lock {
    /// Looks at what is stored at this lock's name without changing it:
    /// the kind of lock (reentrant, fair with its queue, read-write with its
    /// mode), its holders and hold counts, and its remaining lease. A value
    /// of another type is reported as [`LockKind::Other`], not as an error.
    ///
    /// Meant for monitoring and administration (the `redguard status`
    /// command): one round trip, two when a hash is found, each a
    /// `MULTI`/`EXEC` of reads, then one for the holders' records, the
    /// server's clock and the subscribed waiters (on a Cluster, one more
    /// per other master, for its classic subscribers).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// a fair-lock queue key holds a value of another type,
    /// [`Error::Shutdown`], and connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redguard::LockKind;
    ///
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let info = client.fair_lock("tenant:42").inspect()?;
    /// if let LockKind::Fair { queue } = &info.kind {
    ///     println!("{} waiting, held by {:?}", queue.len(), info.holders);
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn inspect(&self) -> Result<LockInfo> {
        let name = self.name();
        keys::validate_name(name).map_err(Error::InvalidArgument)?;
        self.client().check_open()?;
        let queue_key = keys::fair_queue(name);
        let timeout_key = keys::fair_timeouts(name);
        let (redis_type, pttl, queue, deadlines): (String, i64, Vec<String>, Vec<(String, f64)>) =
            self.client().with_conn(name, |conn| {
                crate::transaction::snapshot(conn, &queue_key, |pipe| {
                    pipe.cmd("TYPE")
                        .arg(name)
                        .cmd("PTTL")
                        .arg(name)
                        .cmd("LRANGE")
                        .arg(&queue_key)
                        .arg(0)
                        .arg(-1)
                        .cmd("ZRANGE")
                        .arg(&timeout_key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES");
                })
            })?;
        let fair = !queue.is_empty() || !deadlines.is_empty();
        let mut info = LockInfo {
            name: name.to_vec(),
            kind: LockKind::Free,
            holders: Vec::new(),
            ttl: Pttl::from_ms(pttl).remaining(),
            records: Vec::new(),
            server_time: None,
            subscribers: None,
        };
        match redis_type.as_str() {
            "none" => {}
            "hash" => {
                let (fields, pttl): (Vec<Field>, i64) = self.client().with_conn(name, |conn| {
                    crate::transaction::snapshot(conn, name, |pipe| {
                        pipe.cmd("HGETALL").arg(name).cmd("PTTL").arg(name);
                    })
                })?;
                info.ttl = Pttl::from_ms(pttl).remaining();
                (info.kind, info.holders) = read_hash(fields);
            }
            _ => {
                info.kind = LockKind::Other {
                    redis_type: redis_type.clone(),
                };
            }
        }
        if fair && matches!(info.kind, LockKind::Free | LockKind::Reentrant) {
            info.kind = LockKind::Fair {
                queue: queued(&queue, &deadlines),
            };
        }
        self.read_around(&mut info)?;
        Ok(info)
    }

    /// Fills in what one more round trip says: the holders' records, the
    /// server's clock and the subscribed waiters.
    fn read_around(&self, info: &mut LockInfo) -> Result<()> {
        let name = self.name();
        let mut channels = vec![match info.kind {
            LockKind::ReadWrite { .. } => keys::rw_channel(name),
            _ => keys::channel(name),
        }];
        if let LockKind::Fair { queue } = &info.kind {
            channels.extend(
                queue
                    .iter()
                    .map(|w| keys::fair_channel(name, w.holder.as_str())),
            );
        }
        let clients = record::clients_of(info.holders.iter().map(|(h, _)| h.as_str()));
        let around = record::around(self.client().source(), name, &channels, &clients)?;
        info.records = around.records;
        info.server_time = around.server_time;
        info.subscribers = around.subscribers;
        info.discount_listening_holders();
        Ok(())
    }
}

/// A fair lock's waiters, from its queue (`LRANGE`) and its timeout zset
/// (`ZRANGE … WITHSCORES`: holder id → deadline, Unix epoch ms), first in
/// line first. A waiter without a score, or with one that is no time, has
/// no deadline.
pub(crate) fn queued(queue: &[String], deadlines: &[(String, f64)]) -> Vec<QueuedWaiter> {
    let deadline_of = |holder: &str| {
        deadlines
            .iter()
            .find(|(h, _)| h == holder)
            .and_then(|(_, ms)| {
                (ms.is_finite() && *ms >= 0.0)
                    .then(|| UNIX_EPOCH + Duration::from_millis(*ms as u64))
            })
    };
    queue
        .iter()
        .map(|holder| QueuedWaiter {
            holder: HolderId::from_stored(holder.as_str()),
            deadline: deadline_of(holder),
        })
        .collect()
}

/// The kind and holders of a lock hash, from its fields: hold counts (and
/// `mode` for a read-write lock); anything else makes it
/// [`LockKind::Other`], without holders.
pub(crate) fn read_hash(fields: Vec<Field>) -> (LockKind, Vec<(HolderId, u64)>) {
    let mut mode = None;
    let mut holders = Vec::new();
    for (field, value) in fields {
        let field = String::from_utf8_lossy(&field).into_owned();
        let value = String::from_utf8_lossy(&value);
        if field == "mode" {
            mode = Some(value.into_owned());
        } else if let Ok(count) = value.parse::<u64>() {
            holders.push((HolderId::from_stored(field), count));
        } else {
            let other = LockKind::Other {
                redis_type: "hash".to_owned(),
            };
            return (other, Vec::new());
        }
    }
    match mode {
        Some(mode) => (LockKind::ReadWrite { mode }, holders),
        None => (LockKind::Reentrant, holders),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_keys_share_the_hash_tag() {
        assert_eq!(keys::fair_queue(b"job"), b"redisson_lock_queue:{job}");
        assert_eq!(keys::fair_timeouts(b"job"), b"redisson_lock_timeout:{job}");
    }

    #[test]
    fn held_means_holders_or_foreign_value() {
        let mut info = LockInfo {
            name: b"job".to_vec(),
            kind: LockKind::Free,
            holders: Vec::new(),
            ttl: None,
            records: Vec::new(),
            server_time: None,
            subscribers: None,
        };
        assert!(!info.is_held());
        info.kind = LockKind::Other {
            redis_type: "string".into(),
        };
        assert!(info.is_held());
        info.kind = LockKind::Reentrant;
        assert!(!info.is_held());
        info.holders.push((HolderId::from_stored("a:1"), 1));
        assert!(info.is_held());
    }
}
