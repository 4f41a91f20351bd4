//! [`LockInfo`]: a read-only look at whatever is stored at a lock name, for
//! monitoring and administration (`redguard status`). Reads only; never
//! changes a key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::shape;
use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::keys;
use crate::lease::{Pttl, Ttl};
use crate::lock::Lock;
use crate::lost::HoldKind;
use crate::record::{self, HolderRecord};
use crate::scripts::bounded_read::{self, Element};

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
    /// How many waiters a fair lock's queue holds in all (0 for the other
    /// kinds). [`LockKind::Fair`]'s `queue` lists the first
    /// [`MAX_QUEUE_READ`] of them at most: a longer queue is not read whole.
    pub queue_len: u64,
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
    /// many of its threads wait). On a Cluster, classic and sharded
    /// (`PUBSUB SHARDNUMSUB`) subscribers are counted on the lock's master,
    /// where Redisson subscribes; a redguard client, which subscribes both
    /// ways (its classic subscription on the master of the first slot),
    /// counts once. On a master without sharded pub/sub (Redis 6.2),
    /// classic subscribers are counted on every master, as a cluster
    /// forwards a `PUBLISH` to all its nodes. Subscribers on replicas are
    /// not counted. `None` when the server would not say.
    ///
    /// A redguard holder listens on the channel too, for a force unlock
    /// (once its hold lasted 100 ms): such holders are not counted, as far
    /// as their holder records tell (a holder without a record is).
    pub subscribers: Option<u64>,
    /// For a key of another kind ([`LockKind::Other`]) listed by
    /// [`Client::list_locks`](crate::Client::list_locks): what its
    /// bounded reads saw (see [`LockInfo::may_be_counter`]).
    pub(crate) seen: Seen,
}

/// What [`Client::list_locks`](crate::Client::list_locks) saw of a key
/// that is no lock, so that a caller sorting such keys out reads further
/// only those that may be a counter or a run-once record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// A string whose value is (or may be) an integer.
    pub(crate) counter: bool,
    /// A hash whose fields are (or may be) a finished run-once record's.
    pub(crate) once_record: bool,
    /// A counter with (or maybe with) an expiring semaphore's lease set
    /// beside it.
    pub(crate) permits: bool,
}

impl Seen {
    /// Nothing was seen: anything may be.
    pub(crate) const UNKNOWN: Seen = Seen {
        counter: true,
        once_record: true,
        permits: true,
    };
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

    /// `false` when the key is known not to be a counter (a semaphore's
    /// permits, a latch's count): [`Client::list_locks`](crate::Client::list_locks)
    /// saw a string that is no integer, or a key of another type. `true`
    /// when it may be one, or nothing was read to tell.
    pub fn may_be_counter(&self) -> bool {
        self.seen.counter
    }

    /// `false` when no expiring permit is known to be held on the key (a
    /// counter without an expiring semaphore's lease set,
    /// `{name}:timeout`, beside it, or a key that is no counter):
    /// [`Client::list_locks`](crate::Client::list_locks) looked. `true`
    /// when the set exists, or nothing was read to tell.
    pub fn may_hold_permits(&self) -> bool {
        self.seen.counter && self.seen.permits
    }

    /// `false` when the key is known not to be a finished run-once record
    /// (a hash of the fields `outcome`, `at` and `by` only) nor a run-once
    /// key's last-attempt record (a hash named `redguard_once_attempt:…`):
    /// [`Client::list_locks`](crate::Client::list_locks) saw a hash with
    /// other fields, or a key of another type. `true` when it may be one,
    /// or nothing was read to tell.
    pub fn may_be_once_record(&self) -> bool {
        self.seen.once_record
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
        /// deadlines: the first [`MAX_QUEUE_READ`] at most
        /// ([`LockInfo::queue_len`] counts them all).
        queue: Vec<QueuedWaiter>,
    },
    /// A fenced lock (Redisson's `RFencedLock`): the reentrant hash plus
    /// its fencing-token counter, `redisson_lock_token:{name}`. A run of a
    /// run-once key in progress has this layout too (its runner's holder
    /// record, [`LockInfo::hold_kind`], tells it apart as
    /// [`HoldKind::Once`]). A reentrant lock whose name once served a
    /// fenced lock, whose counter never expires, reads as fenced as well.
    Fenced,
    /// A read-write lock (Redisson's `RReadWriteLock`): the hash carries a
    /// `mode` field.
    ReadWrite {
        /// `"read"` or `"write"`, as stored.
        mode: String,
    },
    /// A value that is not a lock of any known layout: another Redis type,
    /// or a hash that is not a lock's. A lock is recognised by its shape,
    /// never by its type alone: every field of a lock hash is a holder id
    /// (`<uuid>:<thread id>` with a decimal thread id, as redguard, Redisson
    /// and goRedisson write it; `<uuid>:<uuid>`, node-redisson's; or
    /// `<holder id>:write`) with an integer hold count, or a read-write lock's `mode` (`read` or
    /// `write`); a hash of more than [`MAX_LOCK_FIELDS`] fields is not a
    /// lock (and is not read). An application's hash (`HSET cart:42
    /// sku123 2`) is thus `Other`, and the acquire and force-unlock
    /// scripts refuse it with [`Error::WrongType`], touching nothing.
    Other {
        /// The Redis type (`TYPE` reply): `string`, `list`, `hash`, ...
        redis_type: String,
    },
}

impl LockKind {
    /// The kind of a lock hash judged [`LockKind::Reentrant`] whose
    /// fencing-token counter exists: [`LockKind::Fenced`]; any other kind
    /// is kept.
    pub(crate) fn with_token_counter(self) -> LockKind {
        match self {
            LockKind::Reentrant => LockKind::Fenced,
            other => other,
        }
    }
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
    /// The length of an entry too long to be a holder id (longer than 79
    /// bytes: someone else's value, not a waiter's), which was not read:
    /// its `holder` is a text saying so, its `deadline` `None`.
    too_long: Option<u64>,
}

impl QueuedWaiter {
    /// The length in bytes of a queue entry too long to be a holder id,
    /// which was not read (its [`QueuedWaiter::holder`] says so in words);
    /// `None` for a waiter read whole.
    pub fn too_long(&self) -> Option<u64> {
        self.too_long
    }
}

/// One field of a hash and its value, as raw bytes.
pub(crate) type Field = (Vec<u8>, Vec<u8>);

/// The most fields a hash can have and still be a lock: one per holder
/// thread (a read-write lock's readers), plus `mode`. A larger hash is not
/// a lock ([`LockKind::Other`]) and is not read: [`Lock::inspect`],
/// [`Client::list_locks`](crate::Client::list_locks) and
/// [`Lock::holders`] look at its length (`HLEN`) only, and the acquire
/// scripts refuse it.
pub const MAX_LOCK_FIELDS: u64 = shape::MAX_LOCK_FIELDS;

/// The most waiters of a fair lock's queue that [`Lock::inspect`] and
/// [`Client::list_locks`](crate::Client::list_locks) read (`LRANGE 0
/// 999`): [`LockInfo::queue_len`] says how many more there are.
pub const MAX_QUEUE_READ: u64 = 1_000;

/// The first look at a hash that may be a lock: `HLEN` and a first `HSCAN`
/// page of a few fields, in one command (`lua/bounded_read.lua`, part of a
/// round trip). A small hash comes back whole; of one too large to be a
/// lock, nothing more is read. No field name longer than a lock's
/// ([`shape::MAX_FIELD_LEN`]) nor value longer than a hold count
/// ([`shape::MAX_VALUE_LEN`]) is sent: such a hash is no lock, and its
/// name or value is only counted.
#[derive(Debug, Default)]
pub(crate) struct HashLook {
    /// `HLEN`.
    len: u64,
    /// The `HSCAN` cursor to go on from (0: every field was read).
    cursor: u64,
    /// The fields read so far; a value too long to be sent reads as empty.
    fields: Vec<Field>,
    /// A field name too long for a lock's was met (not sent).
    long_name: bool,
    /// A value too long for a lock's was met (not sent).
    long_value: bool,
}

impl HashLook {
    /// Adds the look's command to `pipe` (one reply).
    pub(crate) fn add(pipe: &mut redis::Pipeline, key: &[u8]) {
        pipe.add_command(HashLook::command(key));
    }

    /// The look's command: `HLEN` and `HSCAN key 0 COUNT 16`, bounded.
    pub(crate) fn command(key: &[u8]) -> redis::Cmd {
        HashLook::page(key, 0, shape::HSCAN_SAMPLE)
    }

    /// One bounded page of the hash at `key` from `cursor`.
    fn page(key: &[u8], cursor: u64, count: u64) -> redis::Cmd {
        bounded_read::hash_page(
            key,
            shape::MAX_FIELD_LEN,
            shape::MAX_VALUE_LEN,
            cursor,
            count,
            shape::MAX_LOCK_FIELDS,
        )
    }

    /// The look from its command's reply. A reply that is not what the
    /// command answers reads as an empty hash.
    pub(crate) fn from_reply(page: Option<Value>) -> HashLook {
        let mut look = HashLook::default();
        if let Some((len, cursor, pairs)) = page.and_then(bounded_read::hash_page_reply) {
            look.len = len;
            look.add_page(cursor, pairs);
        }
        look
    }

    /// Takes in one page's reply.
    fn add_page(&mut self, cursor: u64, pairs: Vec<(Element, Element)>) {
        self.cursor = cursor;
        for (name, value) in pairs {
            let Element::Bytes(name) = name else {
                self.long_name = true;
                continue;
            };
            let value = match value {
                Element::Bytes(v) => v,
                Element::TooLong(_) => {
                    self.long_value = true;
                    Vec::new()
                }
            };
            self.fields.push((name, value));
        }
    }

    /// Not a lock, from what was read so far: too many fields, or one of
    /// another shape.
    fn refused(&self) -> bool {
        self.long_name
            || self.long_value
            || self.len > shape::MAX_LOCK_FIELDS
            || self.fields.len() as u64 > shape::MAX_LOCK_FIELDS
            || !self.fields.iter().all(|(f, v)| shape::is_lock_field(f, v))
    }

    /// Whether the hash may be a finished run-once record (`once_claim.lua`:
    /// the fields `outcome`, `at` and `by` only). Exact for such a small
    /// hash: its first `HSCAN` page holds every field.
    pub(crate) fn may_be_once_record(&self) -> bool {
        self.len <= 3
            && !self.long_name
            && self
                .fields
                .iter()
                .all(|(f, _)| matches!(&f[..], b"outcome" | b"at" | b"by"))
    }

    /// Whether more `HSCAN` pages are needed to judge the hash and list its
    /// holders.
    pub(crate) fn needs_more(&self) -> bool {
        self.cursor != 0 && !self.refused()
    }

    /// Reads the rest of the hash, a page of [`shape::HSCAN_COUNT`] at a
    /// time, stopping at the first field that is not a lock's. The pages
    /// are not one snapshot: a lock changing hands meanwhile may show a
    /// holder twice or not at all, as any look at a busy lock may.
    pub(crate) fn read_rest(&mut self, conn: &mut redis::Connection, key: &[u8]) -> Result<()> {
        // A lock of MAX_LOCK_FIELDS fields needs about MAX / COUNT pages;
        // the margin covers a table being resized meanwhile.
        let most = 4 * (shape::MAX_LOCK_FIELDS / shape::HSCAN_COUNT) + 16;
        for _ in 0..most {
            if !self.needs_more() {
                break;
            }
            let cmd = HashLook::page(key, self.cursor, shape::HSCAN_COUNT);
            let reply = bounded_read::query(conn, &cmd).map_err(|e| Error::from_redis(e, key))?;
            let Some((_, cursor, pairs)) = bounded_read::hash_page_reply(reply) else {
                return Err(Error::Protocol(format!(
                    "unexpected reply to a bounded HSCAN of {:?}",
                    String::from_utf8_lossy(key)
                )));
            };
            self.add_page(cursor, pairs);
        }
        Ok(())
    }

    /// The kind and holders the look found: [`LockKind::Other`] (no
    /// holders) for a hash that is not a lock's, else
    /// [`LockKind::Reentrant`] or [`LockKind::ReadWrite`] with every holder
    /// (each once, as `HSCAN` may return a field twice).
    pub(crate) fn judge(mut self) -> (LockKind, Vec<(HolderId, u64)>) {
        if self.refused() || self.cursor != 0 {
            let other = LockKind::Other {
                redis_type: "hash".to_owned(),
            };
            return (other, Vec::new());
        }
        self.fields.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.fields.dedup_by(|a, b| a.0 == b.0);
        let mut mode = None;
        let mut holders = Vec::with_capacity(self.fields.len());
        for (field, value) in self.fields {
            let value = String::from_utf8_lossy(&value).into_owned();
            if field == b"mode" {
                mode = Some(value);
            } else if let Ok(count) = value.parse::<u64>() {
                holders.push((
                    HolderId::from_stored(String::from_utf8_lossy(&field).into_owned()),
                    count,
                ));
            }
        }
        match mode {
            Some(mode) => (LockKind::ReadWrite { mode }, holders),
            None => (LockKind::Reentrant, holders),
        }
    }
}

/// Reads the hash at `key` boundedly ([`HashLook`]) on `conn`: its kind
/// and holders.
pub(crate) fn read_lock_hash(
    conn: &mut redis::Connection,
    key: &[u8],
) -> Result<(LockKind, Vec<(HolderId, u64)>)> {
    let page = bounded_read::query(conn, &HashLook::command(key))
        .map_err(|e| Error::from_redis(e, key))?;
    let mut look = HashLook::from_reply(Some(page));
    look.read_rest(conn, key)?;
    Ok(look.judge())
}

impl Lock {
    /// Looks at what is stored at this lock's name without changing it:
    /// the kind of lock (reentrant, fair with its queue, read-write with its
    /// mode), its holders and hold counts, and its remaining lease. A value
    /// of another type is reported as [`LockKind::Other`], not as an error.
    ///
    /// A hash is a lock only by its fields (see [`LockKind::Other`]): an
    /// application's hash at the name is `Other`, without holders.
    ///
    /// Meant for monitoring and administration (the `redguard status`
    /// command): one round trip, two when a hash or a fair queue is found,
    /// each a `MULTI`/`EXEC` of reads, then one for the holders' records,
    /// the server's clock and the subscribed waiters (on a Cluster, one
    /// more per other master, for its classic subscribers). Every read is
    /// bounded whatever is stored: a hash's `HLEN` and a first `HSCAN` page
    /// of a few fields (more pages only for a lock of many readers; none
    /// for a hash of more than [`MAX_LOCK_FIELDS`] fields), a fair queue's
    /// first [`MAX_QUEUE_READ`] waiters (`LRANGE`) and their deadlines;
    /// never `HGETALL` or a whole list or sorted set. Nor is any field,
    /// value or queue entry longer than a lock's sent whole (another
    /// tenant's 20 MB value): these reads run in a read-only script on the
    /// server, which sends such an element's length in its place; a hash
    /// with one is [`LockKind::Other`], a queue entry
    /// [`QueuedWaiter::too_long`].
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
        let script = bounded_read::script();
        let (redis_type, pttl, queue_read): (String, i64, Value) =
            self.client().with_conn(name, |conn| {
                crate::snapshot::snapshot_running(conn, &queue_key, script, |pipe| {
                    pipe.cmd("TYPE").arg(name).cmd("PTTL").arg(name);
                    pipe.add_command(queue_command(&queue_key, &timeout_key));
                })
            })?;
        let (queue_len, deadline_count, queue) = bounded_read::queue_reply(queue_read)
            .ok_or_else(|| Error::Protocol("unexpected reply to a fair queue read".to_owned()))?;
        let fair = queue_len > 0 || deadline_count > 0;
        let mut info = LockInfo {
            name: name.to_vec(),
            kind: LockKind::Free,
            holders: Vec::new(),
            ttl: Pttl::from_ms(pttl).remaining(),
            queue_len: if fair { queue_len } else { 0 },
            records: Vec::new(),
            server_time: None,
            subscribers: None,
            seen: Seen::UNKNOWN,
        };
        match redis_type.as_str() {
            "none" => {}
            "hash" => {
                let token_key = keys::token(name);
                let replies: Vec<Value> = self.client().with_conn(name, |conn| {
                    crate::snapshot::snapshot_running(conn, name, script, |pipe| {
                        HashLook::add(pipe, name);
                        pipe.cmd("PTTL").arg(name);
                        pipe.cmd("EXISTS").arg(&token_key);
                    })
                })?;
                let mut replies = replies.into_iter();
                let mut look = HashLook::from_reply(replies.next());
                let pttl: i64 = replies
                    .next()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or(-2);
                let token_counter = replies
                    .next()
                    .and_then(|v| redis::from_redis_value::<i64>(v).ok())
                    .is_some_and(|n| n > 0);
                if look.needs_more() {
                    self.client()
                        .with_conn(name, |conn| look.read_rest(conn, name))?;
                }
                info.ttl = Pttl::from_ms(pttl).remaining();
                (info.kind, info.holders) = look.judge();
                if token_counter && !fair {
                    info.kind = info.kind.with_token_counter();
                }
            }
            _ => {
                info.kind = LockKind::Other {
                    redis_type: redis_type.clone(),
                };
            }
        }
        if fair && matches!(info.kind, LockKind::Free | LockKind::Reentrant) {
            info.kind = LockKind::Fair {
                queue: queued(queue),
            };
        } else {
            info.queue_len = 0;
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
                    .filter(|w| w.too_long.is_none())
                    .map(|w| keys::fair_channel(name, w.holder.as_str())),
            );
        }
        let clients = record::clients_of(info.holders.iter().map(|(h, _)| h.as_str()));
        let around = record::around(
            self.client().source(),
            self.client().record_prefix(),
            name,
            &channels,
            &clients,
        )?;
        info.records = around.records;
        info.server_time = around.server_time;
        info.subscribers = around.subscribers;
        info.discount_listening_holders();
        Ok(())
    }
}

/// The bounded read of a fair lock's queue (`queue_key`) with its
/// waiters' deadlines (`timeouts`, the same slot): its length, the
/// deadlines' count, and its first [`MAX_QUEUE_READ`] entries, each longer
/// than a holder id ([`shape::MAX_FIELD_LEN`]) only counted
/// (`lua/bounded_read.lua`; read with [`bounded_read::queue_reply`]).
pub(crate) fn queue_command(queue_key: &[u8], timeouts: &[u8]) -> redis::Cmd {
    bounded_read::queue(queue_key, timeouts, shape::MAX_FIELD_LEN, MAX_QUEUE_READ)
}

/// A fair lock's waiters, from its queue's bounded read (each entry with
/// its deadline: the score in the timeout zset, Unix epoch ms), first in
/// line first. A waiter without a score, or with one that is no time, has
/// no deadline; an entry too long to be a holder id is a waiter known by
/// its length only ([`QueuedWaiter::too_long`]).
pub(crate) fn queued(queue: Vec<(Element, Option<f64>)>) -> Vec<QueuedWaiter> {
    queue
        .into_iter()
        .map(|(entry, deadline)| {
            let (holder, too_long) = match entry {
                Element::Bytes(b) => (String::from_utf8_lossy(&b).into_owned(), None),
                Element::TooLong(n) => {
                    (format!("({n} bytes, too long to be a holder id)"), Some(n))
                }
            };
            QueuedWaiter {
                holder: HolderId::from_stored(holder),
                deadline: deadline.and_then(|ms| {
                    (ms.is_finite() && ms >= 0.0)
                        .then(|| UNIX_EPOCH + Duration::from_millis(ms as u64))
                }),
                too_long,
            }
        })
        .collect()
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
            queue_len: 0,
            records: Vec::new(),
            server_time: None,
            subscribers: None,
            seen: Seen::UNKNOWN,
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
