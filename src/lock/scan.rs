//! [`Client::list_locks`]: every lock whose name matches a pattern, found
//! with `SCAN` (bounded `COUNT`, never `KEYS`) on every master, read a page
//! at a time with pipelined round trips. Reads only.
//!
//! A key the ACL user may not read is skipped and named in
//! [`Listing::unreadable`], from the `NOPERM` replies of the page's own
//! pipelined reads (no round trip of its own): a user confined to
//! `~tenantA:*` lists its keys among everyone's instead of failing at the
//! first foreign one.

use std::collections::HashMap;

use redis::Value;

use crate::client::Client;
use crate::connection::batch::Group;
use crate::connection::scan::KeyScan;
use crate::connection::{NodeId, Source};
use crate::error::Result;
use crate::keys;
use crate::lease::Pttl;
use crate::lock::inspect::{HashLook, Seen, queue_command, queued};
use crate::lock::{LockInfo, LockKind};
use crate::record;
use crate::scripts::bounded_read;

/// The start of a run-once key's last-attempt record's name
/// ([`keys::once_attempt`]).
const ONCE_ATTEMPT_PREFIX: &[u8] = b"redguard_once_attempt:";

/// Bytes of a string's value read to tell whether it may be a counter (an
/// integer, at most 20 characters): the whole value of any counter, and
/// never more of a large value.
const COUNTER_PEEK: usize = 64;

/// Whether `peek` (the first [`COUNTER_PEEK`] bytes of a string's value,
/// the whole value when shorter) may be a counter: an integer as the
/// counters' reads parse it (surrounding whitespace allowed). A longer
/// value may be one only when what was read is all digits, signs and
/// whitespace.
fn may_be_counter(peek: &[u8]) -> bool {
    if peek.len() < COUNTER_PEEK {
        return std::str::from_utf8(peek).is_ok_and(|s| s.trim().parse::<i64>().is_ok());
    }
    peek.iter().all(|&b| {
        b.is_ascii_digit() || b == b'-' || b == b'+' || b.is_ascii_whitespace() || b >= 0x80
    })
}

/// What [`Client::list_locks`] and [`Client::list_synchronizers`] found:
/// the keys listed, and the matching keys skipped because the ACL user may
/// not read them.
///
/// Iterating a `Listing` iterates [`Listing::found`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The keys listed, in no particular order.
    pub found: Vec<LockInfo>,
    /// The names of the matching keys skipped because the server refused
    /// to let this user read them (`NOPERM` for the key: the ACL's key
    /// patterns leave it out; `SCAN` shows every name in the database).
    /// Nothing else was read of them. Empty when every key could be read.
    pub unreadable: Vec<Vec<u8>>,
}

impl Listing {
    /// How many keys were listed.
    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// `true` when no key was listed (keys may still have been skipped:
    /// see [`Listing::unreadable`]).
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The keys listed.
    pub fn iter(&self) -> std::slice::Iter<'_, LockInfo> {
        self.found.iter()
    }
}

impl IntoIterator for Listing {
    type Item = LockInfo;
    type IntoIter = std::vec::IntoIter<LockInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.found.into_iter()
    }
}

impl<'a> IntoIterator for &'a Listing {
    type Item = &'a LockInfo;
    type IntoIter = std::slice::Iter<'a, LockInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.found.iter()
    }
}

impl Client {
    /// Every lock (reentrant, fenced, fair, read-write: a hash of hold
    /// counts) whose name matches `pattern` (a `SCAN MATCH` glob: `*`, `?`,
    /// `[abc]`, `\` escapes), on every master, as [`Lock::inspect`](crate::Lock::inspect)
    /// would describe each: kind, holders, lease
    /// left, fair queue with the waiters' deadlines, subscribed
    /// waiters (counted as [`LockInfo::subscribers`] says) and the
    /// holders' records. With `others`, keys of other
    /// types and hashes of other layouts are listed too, as
    /// [`LockKind::Other`] (the fair queues and other keys beside the locks
    /// among them).
    ///
    /// A hash is a lock only by its shape (see [`LockKind::Other`]): an
    /// application's hashes among the matches are left out (listed as
    /// [`LockKind::Other`] with `others`).
    ///
    /// Uses `SCAN` with `COUNT` 1,000 (and `TYPE hash` without `others`),
    /// never `KEYS`, so the server stays responsive however many keys it
    /// has; one `SCAN` per 1,000 keys, and a pipelined round trip per step
    /// of a page (with `others` the types; each key's first look; the
    /// locks' token counters and fair queues; their records and
    /// subscribers), one more when a page has a fair queue or a lock of
    /// more fields than one `HSCAN` page returns, plus on a Cluster of
    /// Redis 6.2 one per other master for the classic subscribers. On a
    /// Cluster, the keys of a slot being migrated are read where they are
    /// (`ASKING` the importing node, `MOVED`, `ASK` and `TRYAGAIN`
    /// followed within the call's budget). Every read of a key is bounded: `HLEN` and an `HSCAN`
    /// of a few fields first, so a hash of millions of fields costs no
    /// more than a lock (it is not one: more than
    /// [`MAX_LOCK_FIELDS`](crate::MAX_LOCK_FIELDS) fields); a fair queue's
    /// first [`MAX_QUEUE_READ`](crate::MAX_QUEUE_READ) waiters. Nor is any
    /// field, value or queue entry longer than a lock's sent (a read-only
    /// script sends its length instead, loaded once per master: one more
    /// round trip each), as [`Lock::inspect`](crate::Lock::inspect) says. A snapshot
    /// per page, not of the whole keyspace: keys written meanwhile may or
    /// may not appear. In no particular order.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`](crate::error::Error::Shutdown), and connection, timeout and
    /// server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// for info in client.list_locks("job:*", false)? {
    ///     for (holder, count) in &info.holders {
    ///         let host = info.record_of(holder).map_or("no record", |r| r.host.as_str());
    ///         println!("{} held by {holder} ({count}) on {host}", String::from_utf8_lossy(&info.name));
    ///     }
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn list_locks(&self, pattern: &str, others: bool) -> Result<Listing> {
        if others {
            self.list(pattern, &[None], Keep::All)
        } else {
            // Locks are hashes: the server skips the rest.
            self.list(pattern, &[Some("hash")], Keep::Locks)
        }
    }

    /// Every lock whose name matches `pattern`, as
    /// [`Client::list_locks`] lists them, and the keys there that may be
    /// another synchronizer, as [`LockKind::Other`]: the strings that may
    /// be a counter (a semaphore's permits, a latch's count, or an
    /// application's integer: see [`LockInfo::may_be_counter`] and
    /// [`LockInfo::may_hold_permits`]) and the hashes that may be a
    /// finished run-once record ([`LockInfo::may_be_once_record`]), and
    /// the run-once keys' last-attempt records (`redguard_once_attempt:…`,
    /// what a failed run leaves). The rest is skipped, neither listed nor read past what tells it apart.
    ///
    /// Two `SCAN`s per master (`TYPE hash`, then `TYPE string`), each with
    /// the reads of a page pipelined, one round trip per step: a string's
    /// first 64 bytes (`GETRANGE`), then for the integers their PTTL and
    /// whether an expiring semaphore's lease set is beside them; for the
    /// hashes as [`Client::list_locks`].
    ///
    /// # Errors
    ///
    /// As [`Client::list_locks`].
    pub fn list_synchronizers(&self, pattern: &str) -> Result<Listing> {
        self.list(
            pattern,
            &[Some("hash"), Some("string")],
            Keep::Synchronizers,
        )
    }

    /// One `SCAN` per type of `types` (`None`: every type) on every
    /// master, each page read and sorted out as `keep` says.
    fn list(&self, pattern: &str, types: &[Option<&'static str>], keep: Keep) -> Result<Listing> {
        self.check_open()?;
        let source = self.source();
        let mut out = Listing::default();
        for node in source.masters()? {
            // The pages' bounded reads run a script: loaded up front (one
            // round trip), so that the first page is not sent twice for a
            // NOSCRIPT. A refusal here is met again, and told, there.
            let _ = source.with_node_conn(node, |conn| {
                bounded_read::script()
                    .load(conn)
                    .map_err(crate::error::Error::redis)
            });
            let mut records = Records::new(self.record_prefix());
            for &of_type in types {
                let mut scan = KeyScan::new(source, node, pattern.as_bytes(), of_type);
                while let Some(keys) = scan.next_page(|_, keys| Ok(keys)) {
                    let keys = keys?;
                    if !keys.is_empty() {
                        let found = page(
                            source,
                            node,
                            keys,
                            of_type,
                            keep,
                            &mut records,
                            &mut out.unreadable,
                        )?;
                        out.found.extend(found);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The holder records of one node read during one listing, each once
/// (a busy client's record lists a thousand holds, which every page of
/// its locks would read again), with its holds by lock name.
struct Records {
    /// The prefix of the record keys read.
    prefix: String,
    /// By client id; `None`: the client has no record there.
    by_client: HashMap<String, Option<Indexed>>,
}

/// A record without its holds, and its holds by lock name.
struct Indexed {
    bare: record::HolderRecord,
    holds: HashMap<Vec<u8>, Vec<record::RecordedHold>>,
}

impl Records {
    /// None read yet, of records under `prefix`.
    fn new(prefix: &str) -> Records {
        Records {
            prefix: prefix.to_owned(),
            by_client: HashMap::new(),
        }
    }

    /// The clients of `clients` not read yet.
    fn unread(&self, clients: Vec<String>) -> Vec<String> {
        clients
            .into_iter()
            .filter(|c| !self.by_client.contains_key(c))
            .collect()
    }

    /// Keeps what a read of `asked` found (`found`: their records there).
    fn add(&mut self, asked: &[String], found: Vec<record::HolderRecord>) {
        for client in asked {
            self.by_client.entry(client.clone()).or_insert(None);
        }
        for r in found {
            let mut holds: HashMap<Vec<u8>, Vec<record::RecordedHold>> = HashMap::new();
            for hold in &r.holds {
                holds
                    .entry(hold.name.clone())
                    .or_default()
                    .push(hold.clone());
            }
            let bare = record::HolderRecord::clone_without_holds(&r);
            self.by_client
                .insert(r.client.clone(), Some(Indexed { bare, holds }));
        }
    }

    /// The record of `client` with only its holds of `name`.
    fn of(&self, client: &str, name: &[u8]) -> Option<record::HolderRecord> {
        let indexed = self.by_client.get(client)?.as_ref()?;
        Some(record::HolderRecord {
            holds: indexed.holds.get(name).cloned().unwrap_or_default(),
            ..record::HolderRecord::clone_without_holds(&indexed.bare)
        })
    }
}

/// What a listing keeps of the keys it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Locks only.
    Locks,
    /// Locks, and the strings and hashes that may be another
    /// synchronizer.
    Synchronizers,
    /// Every key.
    All,
}

/// How servers word the refusal of a key (not of a command: "no
/// permissions to run the 'hlen' command"): Redis 6.2 and 7.0 ("this user
/// has no permissions to access one of the keys used as arguments"),
/// Redis 7.2+ and Valkey ("No permissions to access a key").
const KEY_REFUSED: &[&str] = &["access one of the keys", "access a key"];

/// Whether `replies` (one key's reads) hold a `NOPERM` for the key itself:
/// the ACL user may not read it. A refused command is not one (every key
/// would be "unreadable" for an ACL short of a command `list` needs).
fn key_refused(replies: &[Value]) -> bool {
    replies.iter().any(|r| {
        matches!(r, Value::ServerError(e) if e.code() == "NOPERM"
            && e.details().is_some_and(|d| KEY_REFUSED.iter().any(|p| d.contains(p))))
    })
}

/// One reply as `T`, `None` for an error or another shape.
fn reply<T: redis::FromRedisValue>(v: Option<Value>) -> Option<T> {
    v.and_then(|v| redis::from_redis_value(v).ok())
}

/// Reads one page of keys of node `node` (of type `of_type`, when the
/// scan asked for one), a pipelined round trip per stage: their types
/// (when not known), then each key's bounded first look (the PTTL, and a
/// string's first bytes or a hash's length and first fields), then for
/// the strings that may be counters whether permits are held on them, for
/// the hashes that are locks their fencing-token counter and fair queue,
/// then the records and subscribers. The keys whose first reads the ACL
/// refused go to `unreadable`, read no further.
fn page(
    source: &Source,
    node: NodeId,
    keys: Vec<Vec<u8>>,
    of_type: Option<&str>,
    keep: Keep,
    records: &mut Records,
    unreadable: &mut Vec<Vec<u8>>,
) -> Result<Vec<LockInfo>> {
    let all = keep == Keep::All;
    let mut keys = keys;
    let types: Vec<String> = if let Some(t) = of_type {
        vec![t.to_owned(); keys.len()]
    } else {
        let groups: Vec<Group> = keys
            .iter()
            .map(|key| Group {
                key: key.clone(),
                cmds: vec![redis::cmd("TYPE").arg(&key[..]).clone()],
            })
            .collect();
        let replies = batch(source, node, &groups)?;
        let (readable, refused): (Vec<_>, Vec<_>) = keys
            .into_iter()
            .zip(replies)
            .partition(|(_, r)| !key_refused(r));
        unreadable.extend(refused.into_iter().map(|(key, _)| key));
        let types;
        (keys, types) = readable
            .into_iter()
            .map(|(key, mut r)| {
                let t = reply(r.pop()).unwrap_or_else(|| "none".to_owned());
                (key, t)
            })
            .unzip();
        types
    };
    let wanted: Vec<(Vec<u8>, String)> = keys
        .into_iter()
        .zip(types)
        .filter(|(_, t)| match keep {
            Keep::Locks => t == "hash",
            Keep::Synchronizers => t == "hash" || t == "string",
            Keep::All => t != "none",
        })
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let groups: Vec<Group> = wanted
        .iter()
        .map(|(key, kind)| {
            let mut cmds = Vec::new();
            // A string's PTTL only with every key: else only an integer's
            // is read, below.
            if kind != "string" || all {
                cmds.push(redis::cmd("PTTL").arg(&key[..]).clone());
            }
            if kind == "string" {
                // Bounded: whether it may be a counter, from its first bytes.
                cmds.push(
                    redis::cmd("GETRANGE")
                        .arg(&key[..])
                        .arg(0)
                        .arg(COUNTER_PEEK - 1)
                        .clone(),
                );
            }
            if kind == "hash" {
                // Bounded: a hash too large to be a lock costs an HLEN and
                // a page of a few fields, never a read of the whole; no
                // field or value longer than a lock's is sent.
                cmds.push(HashLook::command(key));
            }
            Group {
                key: key.clone(),
                cmds,
            }
        })
        .collect();
    let replies = batch(source, node, &groups)?;
    let mut infos = Vec::with_capacity(wanted.len());
    // Per hash kept: its look (pages still to read).
    let mut hashes: Vec<(usize, HashLook)> = Vec::new();
    for ((name, redis_type), replies) in wanted.into_iter().zip(replies) {
        if key_refused(&replies) {
            // Judged on nothing it would be "may be anything" and read
            // again by the caller, refused again: skipped, and said.
            unreadable.push(name);
            continue;
        }
        let mut replies = replies.into_iter();
        let pttl: i64 = if redis_type != "string" || all {
            reply(replies.next()).unwrap_or(-2)
        } else {
            -2
        };
        let mut info = LockInfo {
            name,
            kind: LockKind::Other {
                redis_type: redis_type.clone(),
            },
            holders: Vec::new(),
            ttl: Pttl::from_ms(pttl).remaining(),
            queue_len: 0,
            records: Vec::new(),
            server_time: None,
            subscribers: None,
            seen: Seen {
                counter: false,
                once_record: false,
                permits: false,
            },
        };
        if redis_type == "string" {
            info.seen.counter =
                reply::<Vec<u8>>(replies.next()).is_none_or(|peek| may_be_counter(&peek));
        }
        if redis_type == "hash" {
            let look = HashLook::from_reply(replies.next());
            // A last-attempt record is all a run-once key keeps after a
            // failed run: kept, so that a listing of every key needs no
            // second scan to find them.
            info.seen.once_record =
                look.may_be_once_record() || info.name.starts_with(ONCE_ATTEMPT_PREFIX);
            hashes.push((infos.len(), look));
            infos.push(info);
        } else if all || (keep == Keep::Synchronizers && info.seen.counter) {
            infos.push(info);
        }
    }
    // The strings that may be counters: whether an expiring semaphore's
    // lease set is beside each (its permits name it a semaphore).
    let counters: Vec<usize> = (0..infos.len())
        .filter(|&i| infos[i].seen.counter)
        .collect();
    if !counters.is_empty() {
        let groups: Vec<Group> = counters
            .iter()
            .map(|&i| {
                let name = &infos[i].name;
                let mut cmds = Vec::new();
                if !all {
                    cmds.push(redis::cmd("PTTL").arg(&name[..]).clone());
                }
                cmds.push(
                    redis::cmd("EXISTS")
                        .arg(keys::permit_timeouts(name))
                        .clone(),
                );
                Group {
                    key: name.clone(),
                    cmds,
                }
            })
            .collect();
        let replies = batch(source, node, &groups)?;
        for (&i, mut replies) in counters.iter().zip(replies) {
            infos[i].seen.permits = reply::<i64>(replies.pop()).is_none_or(|n| n > 0);
            if !all {
                infos[i].ttl = Pttl::from_ms(reply(replies.pop()).unwrap_or(-2)).remaining();
            }
        }
    }
    // Hashes of more fields than one page (rare: a read-write lock with
    // many readers): a round trip per further HSCAN page.
    if hashes.iter().any(|(_, look)| look.needs_more()) {
        source.with_node_conn(node, |conn| {
            for (i, look) in &mut hashes {
                if let Err(e) = look.read_rest(conn, &infos[*i].name) {
                    // A key that changed type meanwhile is left judged on
                    // what was read; only a broken connection ends the page.
                    if e.breaks_connection() {
                        return Err(e);
                    }
                }
            }
            Ok(())
        })?;
    }
    for (i, look) in hashes {
        (infos[i].kind, infos[i].holders) = look.judge();
    }
    match keep {
        Keep::Locks => infos.retain(|info| !matches!(info.kind, LockKind::Other { .. })),
        Keep::Synchronizers => infos.retain(|info| match &info.kind {
            LockKind::Other { redis_type } if redis_type == "hash" => info.seen.once_record,
            _ => true,
        }),
        Keep::All => {}
    }
    beside(source, node, &mut infos)?;
    around(source, node, &mut infos, records)?;
    Ok(infos)
}

/// [`Source::node_batch`], once more after loading
/// `lua/bounded_read.lua` on every master when a reply says a server does
/// not have it (`NOSCRIPT`: restarted or flushed; a group may have been
/// followed to another master). The reads change nothing: sending them
/// again is safe.
fn batch(source: &Source, node: NodeId, groups: &[Group]) -> Result<Vec<Vec<Value>>> {
    let replies = source.node_batch(node, groups)?;
    if !replies.iter().flatten().any(crate::scripts::is_noscript) {
        return Ok(replies);
    }
    for master in source.masters()? {
        source.with_node_conn(master, |conn| {
            bounded_read::script()
                .load(conn)
                .map(drop)
                .map_err(crate::error::Error::redis)
        })?;
    }
    source.node_batch(node, groups)
}

/// Reads, for the locks among `infos` (hashes of a lock's shape), the keys
/// beside each: its fencing-token counter (a fenced lock) and its fair
/// queue's length, then for the fair locks their queues with the waiters'
/// deadlines (bounded: `lua/bounded_read.lua`). One round trip, one more
/// when a page has a fair queue.
fn beside(source: &Source, node: NodeId, infos: &mut [LockInfo]) -> Result<()> {
    let locks: Vec<usize> = (0..infos.len())
        .filter(|&i| matches!(infos[i].kind, LockKind::Reentrant))
        .collect();
    if locks.is_empty() {
        return Ok(());
    }
    let groups: Vec<Group> = locks
        .iter()
        .map(|&i| {
            let name = &infos[i].name;
            Group {
                key: name.clone(),
                cmds: vec![
                    redis::cmd("EXISTS").arg(keys::token(name)).clone(),
                    redis::cmd("LLEN").arg(keys::fair_queue(name)).clone(),
                ],
            }
        })
        .collect();
    let replies = batch(source, node, &groups)?;
    let mut queues: Vec<usize> = Vec::new();
    for (&i, replies) in locks.iter().zip(replies) {
        let mut replies = replies.into_iter();
        let token_counter: i64 = reply(replies.next()).unwrap_or(0);
        let queue_len: u64 = reply(replies.next()).unwrap_or(0);
        if queue_len > 0 {
            queues.push(i);
        } else if token_counter > 0 {
            infos[i].kind = LockKind::Reentrant.with_token_counter();
        }
    }
    if queues.is_empty() {
        return Ok(());
    }
    let groups: Vec<Group> = queues
        .iter()
        .map(|&i| {
            let name = &infos[i].name;
            Group {
                key: name.clone(),
                cmds: vec![queue_command(
                    &keys::fair_queue(name),
                    &keys::fair_timeouts(name),
                )],
            }
        })
        .collect();
    let replies = batch(source, node, &groups)?;
    for (i, mut replies) in queues.into_iter().zip(replies) {
        // A queue gone or changed type meanwhile: left a plain lock.
        let Some((len, _, queue)) = replies.pop().and_then(bounded_read::queue_reply) else {
            continue;
        };
        if len == 0 {
            continue;
        }
        infos[i].queue_len = len;
        infos[i].kind = LockKind::Fair {
            queue: queued(queue),
        };
    }
    Ok(())
}

/// Fills in the records, the server's clock and the subscribers of a
/// page's locks, in one round trip to their node (the records of clients
/// met on an earlier page are not read again).
fn around(
    source: &Source,
    node: NodeId,
    infos: &mut [LockInfo],
    records: &mut Records,
) -> Result<()> {
    let locks: Vec<usize> = (0..infos.len())
        .filter(|&i| !matches!(infos[i].kind, LockKind::Other { .. }))
        .collect();
    if locks.is_empty() {
        return Ok(());
    }
    let channels: Vec<Vec<u8>> = locks
        .iter()
        .map(|&i| match infos[i].kind {
            LockKind::ReadWrite { .. } => keys::rw_channel(&infos[i].name),
            _ => keys::channel(&infos[i].name),
        })
        .collect();
    let clients = record::clients_of(
        locks
            .iter()
            .flat_map(|&i| infos[i].holders.iter().map(|(h, _)| h.as_str())),
    );
    let unread = records.unread(clients);
    let mut read = record::on_node(source, &records.prefix, node, &channels, &unread)?;
    record::add_classic_elsewhere(source, node, &channels, &mut read.subscribers)?;
    records.add(&unread, std::mem::take(&mut read.records));
    for (n, &i) in locks.iter().enumerate() {
        let info = &mut infos[i];
        info.server_time = read.server_time;
        info.subscribers = read.subscribers.get(n).copied().flatten();
        let mut mine: Vec<&str> = info
            .holders
            .iter()
            .filter_map(|(h, _)| record::client_of(h.as_str()))
            .collect();
        mine.sort_unstable();
        mine.dedup();
        // Each lock gets its holders' records with only its own holds (a
        // record may list a thousand).
        info.records = mine
            .into_iter()
            .filter_map(|c| records.of(c, &info.name))
            .collect();
        info.discount_listening_holders();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{COUNTER_PEEK, key_refused, may_be_counter};

    fn reply(resp: &str) -> redis::Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    /// The refusal of a key as Redis 6.2/7.0 and Redis 7.2+/Valkey word
    /// it skips the key; a refused command or another error does not.
    #[test]
    fn only_a_refused_key_makes_a_key_unreadable() {
        for refused in [
            "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n",
            "-NOPERM No permissions to access a key\r\n",
        ] {
            assert!(
                key_refused(&[redis::Value::Int(5), reply(refused)]),
                "{refused}"
            );
        }
        for other in [
            "-NOPERM this user has no permissions to run the 'hlen' command\r\n",
            "-NOPERM User t has no permissions to run the 'hlen' command\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ] {
            assert!(!key_refused(&[reply(other)]), "{other}");
        }
        assert!(!key_refused(&[]));
    }

    #[test]
    fn a_string_may_be_a_counter_only_when_it_reads_as_an_integer() {
        for yes in [&b"0"[..], b"-3", b" 12 ", b"9223372036854775807"] {
            assert!(may_be_counter(yes), "{yes:?}");
        }
        for no in [&b"x"[..], b"", b"1.5", b"12a", b"99999999999999999999"] {
            assert!(!may_be_counter(no), "{no:?}");
        }
        // A value longer than what was read: only digits, signs and
        // whitespace so far keep it possible.
        assert!(may_be_counter(&[b' '; COUNTER_PEEK]));
        assert!(!may_be_counter(&[b'x'; COUNTER_PEEK]));
    }
}
