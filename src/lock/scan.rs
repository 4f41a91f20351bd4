//! [`Client::list_locks`]: every lock whose name matches a pattern, found
//! with `SCAN` (bounded `COUNT`, never `KEYS`) on every master, read a page
//! at a time with pipelined round trips. Reads only.

use std::collections::HashMap;

use redis::Value;

use crate::client::Client;
use crate::connection::scan::KeyScan;
use crate::connection::{NodeId, Source};
use crate::error::{Error, Result};
use crate::keys;
use crate::lease::Pttl;
use crate::lock::inspect::{HashLook, MAX_QUEUE_READ, Seen, deadlines_of, queued};
use crate::lock::{LockInfo, LockKind};
use crate::record;

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

impl Client {
    /// Every lock (reentrant, fenced, fair, read-write: a hash of hold
    /// counts) whose name matches `pattern` (a `SCAN MATCH` glob: `*`, `?`,
    /// `[abc]`, `\` escapes), on every master, as [`Lock::inspect`](crate::Lock::inspect)
    /// would describe each: kind, holders, lease
    /// left, fair queue with the waiters' deadlines, subscribed
    /// waiters (on a Cluster, classic subscribers of every master) and the
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
    /// has; one `SCAN` per 1,000 keys, and two pipelined round trips per
    /// page that has locks (three with `others`), one more when a page
    /// has a fair queue or a lock of more fields than one `HSCAN` page
    /// returns, plus on a Cluster one per other master for the classic
    /// subscribers. Every read of a key is bounded: `HLEN` and an `HSCAN`
    /// of a few fields first, so a hash of millions of fields costs no
    /// more than a lock (it is not one: more than
    /// [`MAX_LOCK_FIELDS`](crate::MAX_LOCK_FIELDS) fields); a fair queue's
    /// first [`MAX_QUEUE_READ`](crate::MAX_QUEUE_READ) waiters. A snapshot
    /// per page, not of the whole keyspace: keys written meanwhile may or
    /// may not appear. In no particular order.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`], and connection, timeout and server errors.
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
    pub fn list_locks(&self, pattern: &str, others: bool) -> Result<Vec<LockInfo>> {
        self.check_open()?;
        let source = self.source();
        let mut out = Vec::new();
        for node in source.masters()? {
            // Locks are hashes: unless others are asked for, the server
            // skips the rest.
            let mut scan = KeyScan::new(source, node, pattern.as_bytes(), !others);
            while let Some(keys) = scan.next_page(|_, keys| Ok(keys)) {
                let keys = keys?;
                if !keys.is_empty() {
                    out.extend(page(source, node, keys, others)?);
                }
            }
        }
        Ok(out)
    }
}

/// Reads one page of keys of node `node`: their types, the lock hashes
/// with their ttl and fair queue, then the records and subscribers.
fn page(source: &Source, node: NodeId, keys: Vec<Vec<u8>>, others: bool) -> Result<Vec<LockInfo>> {
    let types: Vec<String> = if others {
        source.with_node_conn(node, |conn| {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("TYPE").arg(&key[..]);
            }
            pipe.query(conn).map_err(Error::redis)
        })?
    } else {
        vec!["hash".to_owned(); keys.len()]
    };
    let wanted: Vec<(Vec<u8>, String)> = keys
        .into_iter()
        .zip(types)
        .filter(|(_, t)| t != "none" && (others || t == "hash"))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let replies: Vec<Value> = source.with_node_conn(node, |conn| {
        let mut pipe = redis::pipe();
        for (key, kind) in &wanted {
            pipe.cmd("PTTL").arg(&key[..]);
            if kind == "string" {
                // Bounded: whether it may be a counter, from its first bytes.
                pipe.cmd("GETRANGE")
                    .arg(&key[..])
                    .arg(0)
                    .arg(COUNTER_PEEK - 1);
            }
            if kind == "hash" {
                // Bounded: a hash too large to be a lock costs an HLEN and
                // a page of a few fields, never a read of the whole.
                HashLook::add(&mut pipe, key);
                pipe.cmd("EXISTS").arg(keys::token(key));
                let queue = keys::fair_queue(key);
                pipe.cmd("LLEN")
                    .arg(&queue)
                    .cmd("LRANGE")
                    .arg(&queue)
                    .arg(0)
                    .arg(MAX_QUEUE_READ - 1);
            }
        }
        pipe.ignore_errors();
        pipe.query(conn).map_err(Error::redis)
    })?;
    let mut replies = replies.into_iter();
    let mut infos = Vec::with_capacity(wanted.len());
    // Per hash kept: its look (pages still to read) and its queue.
    let mut hashes: Vec<(usize, HashLook, Vec<String>)> = Vec::new();
    // The hashes whose fencing-token counter exists.
    let mut token_counters: Vec<usize> = Vec::new();
    for (name, redis_type) in wanted {
        let pttl: i64 = replies
            .next()
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or(-2);
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
            },
        };
        if redis_type == "string" {
            info.seen.counter = replies
                .next()
                .and_then(|v| redis::from_redis_value::<Vec<u8>>(v).ok())
                .is_none_or(|peek| may_be_counter(&peek));
        }
        if redis_type == "hash" {
            let look = HashLook::from_replies(replies.next(), replies.next());
            info.seen.once_record = look.may_be_once_record();
            let token_counter: i64 = replies
                .next()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or(0);
            if token_counter > 0 {
                token_counters.push(infos.len());
            }
            let queue_len: u64 = replies
                .next()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or(0);
            let queue: Vec<String> = replies
                .next()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or_default();
            info.queue_len = queue_len;
            hashes.push((infos.len(), look, queue));
            infos.push(info);
        } else if others {
            infos.push(info);
        }
    }
    // Hashes of more fields than one page (rare: a read-write lock with
    // many readers) and fair queues' deadlines: one more round trip when
    // any, plus a page per further HSCAN page.
    let queued_any = hashes.iter().any(|(_, _, q)| !q.is_empty());
    let more_any = hashes.iter().any(|(_, look, _)| look.needs_more());
    let mut deadlines: HashMap<usize, Vec<Option<f64>>> = HashMap::new();
    if queued_any || more_any {
        source.with_node_conn(node, |conn| {
            for (i, look, queue) in &mut hashes {
                if let Err(e) = look.read_rest(conn, &infos[*i].name) {
                    // A key that changed type meanwhile is left judged on
                    // what was read; only a broken connection ends the page.
                    if e.breaks_connection() {
                        return Err(e);
                    }
                }
                if !queue.is_empty() {
                    let of = deadlines_of(conn, &keys::fair_timeouts(&infos[*i].name), queue)
                        .unwrap_or_default();
                    deadlines.insert(*i, of);
                }
            }
            Ok(())
        })?;
    }
    for (i, look, queue) in hashes {
        let info = &mut infos[i];
        (info.kind, info.holders) = look.judge();
        if matches!(info.kind, LockKind::Reentrant) && (!queue.is_empty() || info.queue_len > 0) {
            let of = deadlines.remove(&i).unwrap_or_default();
            info.kind = LockKind::Fair {
                queue: queued(&queue, &of),
            };
        } else {
            info.queue_len = 0;
            if token_counters.contains(&i) {
                info.kind = std::mem::replace(&mut info.kind, LockKind::Free).with_token_counter();
            }
        }
    }
    if !others {
        infos.retain(|info| !matches!(info.kind, LockKind::Other { .. }));
    }
    around(source, node, &mut infos)?;
    Ok(infos)
}

/// Fills in the records, the server's clock and the subscribers of a
/// page's locks, in one round trip to their node.
fn around(source: &Source, node: NodeId, infos: &mut [LockInfo]) -> Result<()> {
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
    let mut read = record::on_node(source, node, &channels, &clients)?;
    record::add_classic_elsewhere(source, node, &channels, &mut read.subscribers)?;
    let by_client: HashMap<&str, &record::HolderRecord> = read
        .records
        .iter()
        .map(|r| (r.client.as_str(), r))
        .collect();
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
            .filter_map(|c| by_client.get(c))
            .map(|r| record::HolderRecord {
                holds: r
                    .holds
                    .iter()
                    .filter(|h| h.name == info.name)
                    .cloned()
                    .collect(),
                ..record::HolderRecord::clone_without_holds(r)
            })
            .collect();
        info.discount_listening_holders();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{COUNTER_PEEK, may_be_counter};

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
