//! Reading holder records and what surrounds a lock (the server's clock,
//! the waiters subscribed to its channels) in one round trip to the lock's
//! server.

use std::collections::BTreeSet;
use std::time::SystemTime;

use redis::Value;

use super::HolderRecord;
use crate::connection::{NodeId, Source};
use crate::error::{Error, Result};
use crate::scripts::record_read::{ReadBounds, ReadFields, ReadReply, query_reads, record_read};

/// The bounds of every record read: no field name longer than a hold's
/// (`hold:`, a holder id, `|` and a lock name of up to 64 KiB), no value
/// longer than 4 KiB (redguard writes at most 256 bytes of host and
/// program, and a few dozen elsewhere), at most twice the fields a record
/// has (its fixed fields and [`super::MAX_HOLDS`] holds, plus waits), and
/// at most 1 MiB in all: a hash at a record's key written by someone else
/// costs no more than that to read, never a read of the whole.
pub(super) const BOUNDS: ReadBounds = ReadBounds {
    name: crate::keys::MAX_NAME_LEN + 256,
    value: 4096,
    fields: 2 * (super::MAX_HOLDS + 16),
    total: 1 << 20,
};

/// The record of `client` from the reply of a bounded read
/// (`lua/record_read.lua`); `None` when there is none (or the reply is an
/// error: records are a best-effort addition).
pub(super) fn bounded(client: &str, reply: Option<Value>) -> Option<HolderRecord> {
    let read = ReadReply::parse(reply?)?;
    if read.fields.is_empty() && read.too_long.is_empty() && read.long_names.is_empty() {
        return None;
    }
    // A record whose every field is too long still says that much.
    let fields = if read.fields.is_empty() {
        vec![(b"-".to_vec(), Vec::new())]
    } else {
        read.fields
    };
    let mut record = HolderRecord::parse(client, fields, read.pttl)?;
    record.too_long = read.too_long;
    record.long_names = read.long_names;
    record.partial = read.partial;
    Some(record)
}

/// What one more round trip says about a lock.
#[derive(Debug, Default)]
pub(crate) struct Around {
    /// The server's clock when read.
    pub(crate) server_time: Option<SystemTime>,
    /// Connections subscribed to the lock's channels (`PUBSUB NUMSUB`, and
    /// `SHARDNUMSUB` on a Cluster node with sharded pub/sub).
    pub(crate) subscribers: Option<u64>,
    /// The records of the clients asked about that have one there.
    pub(crate) records: Vec<HolderRecord>,
}

/// The distinct client ids of `holders` (holder ids of redguard's or
/// Redisson's form), in order.
pub(crate) fn clients_of<'a>(holders: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let set: BTreeSet<&str> = holders.into_iter().filter_map(super::client_of).collect();
    set.into_iter().map(str::to_owned).collect()
}

/// Reads, on the server holding `name`, in one round trip: its clock, the
/// subscribers of `channels`, and the records of `clients` (under
/// `prefix`).
///
/// # Errors
///
/// Connection, timeout and server errors of the round trip as a whole; a
/// command the ACL user may not run only leaves its part empty.
pub(crate) fn around(
    source: &Source,
    prefix: &str,
    name: &[u8],
    channels: &[Vec<u8>],
    clients: &[String],
) -> Result<Around> {
    let node = source.node_of(name);
    let mut read = on_node(source, prefix, node, channels, clients)?;
    add_classic_elsewhere(source, node, channels, &mut read.subscribers)?;
    let counts: Vec<u64> = read.subscribers.iter().flatten().copied().collect();
    Ok(Around {
        server_time: read.server_time,
        subscribers: (!counts.is_empty() || channels.is_empty()).then(|| counts.iter().sum()),
        records: read.records,
    })
}

/// On a Cluster whose node `node` has no sharded pub/sub (Redis 6.2), adds
/// to `counts` (one per channel of `channels`, as [`on_node`] read them on
/// `node`) the classic subscribers of those channels on every other
/// master: there every waiter listens with a classic `SUBSCRIBE`, which a
/// cluster forwards to all its nodes, so it may sit on any of them
/// (redguard's own on the first master it reaches). One round trip per
/// other master, `PUBSUB NUMSUB` of every channel at once; nothing on a
/// single server, Sentinel, or a node with sharded pub/sub (where
/// [`on_node`] counted every redguard subscriber by its `SSUBSCRIBE`).
///
/// Replicas are not asked: a subscriber on a replica (Redisson's default
/// `subscriptionMode = SLAVE`) is not counted. A master that does not
/// answer is left out of the sum.
///
/// # Errors
///
/// When the slot map cannot be had.
pub(crate) fn add_classic_elsewhere(
    source: &Source,
    node: NodeId,
    channels: &[Vec<u8>],
    counts: &mut [Option<u64>],
) -> Result<()> {
    if !source.is_cluster() || channels.is_empty() || source.sharded_pubsub(node) {
        return Ok(());
    }
    for other in source.masters()? {
        if other == node {
            continue;
        }
        let reply: Option<Value> = source
            .with_node_conn(other, |conn| {
                let mut cmd = redis::cmd("PUBSUB");
                cmd.arg("NUMSUB");
                for ch in channels {
                    cmd.arg(&ch[..]);
                }
                cmd.query(conn).map_err(Error::redis)
            })
            .map_err(|e| {
                log::debug!(
                    "redguard: PUBSUB NUMSUB on node {other}: {e}",
                    e = e.chain()
                );
            })
            .ok();
        add_counts(counts, numsub(reply, channels.len()));
    }
    Ok(())
}

/// The subscribers of a channel on its slot's node of a Cluster with
/// sharded pub/sub, from that node's classic and sharded counts. Every
/// redguard client listening there (a waiter, or a holder listening for a
/// force unlock) has one sharded subscription on this node, and a classic
/// one on the node of its classic pub/sub connection
/// (`classic_here`: this node is it), where it would be counted twice: there
/// the classic subscribers that the sharded ones account for are left out
/// (exact unless both Redisson's sharded and classic listeners sit here).
fn on_sharded_node(classic: Option<u64>, sharded: Option<u64>, classic_here: bool) -> Option<u64> {
    match (classic, sharded) {
        (Some(c), Some(s)) if classic_here => Some(c.max(s)),
        (Some(c), Some(s)) => Some(c + s),
        (c, s) => c.or(s),
    }
}

/// Adds `more` to `counts`, channel by channel: an unknown count on one
/// side leaves the other side's.
fn add_counts(counts: &mut [Option<u64>], more: Vec<Option<u64>>) {
    for (a, b) in counts.iter_mut().zip(more) {
        *a = match (*a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// What [`on_node`] read.
#[derive(Debug, Default)]
pub(crate) struct NodeRead {
    /// The node's clock.
    pub(crate) server_time: Option<SystemTime>,
    /// Subscribers of each channel asked about, in order (`None`: the
    /// server would not say).
    pub(crate) subscribers: Vec<Option<u64>>,
    /// The records found.
    pub(crate) records: Vec<HolderRecord>,
}

/// Reads, on node `node`, in one round trip: its clock, the subscribers of
/// each of `channels` (classic, plus sharded on a Cluster node that has
/// them) and the records there of `clients` (under `prefix`).
///
/// # Errors
///
/// As [`around`].
pub(crate) fn on_node(
    source: &Source,
    prefix: &str,
    node: NodeId,
    channels: &[Vec<u8>],
    clients: &[String],
) -> Result<NodeRead> {
    let keys: Vec<Option<Vec<u8>>> = clients
        .iter()
        .map(|c| super::key_for(prefix, c, |k| source.node_of(k) == node))
        .collect();
    let sharded = source.is_cluster() && source.sharded_pubsub(node);
    let replies: Vec<Value> = source.with_node_conn(node, |conn| {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        if !channels.is_empty() {
            pipe.cmd("PUBSUB").arg("NUMSUB");
            for ch in channels {
                pipe.arg(&ch[..]);
            }
            if sharded {
                pipe.cmd("PUBSUB").arg("SHARDNUMSUB");
                for ch in channels {
                    pipe.arg(&ch[..]);
                }
            }
        }
        for key in keys.iter().flatten() {
            record_read(&mut pipe, key, BOUNDS, ReadFields::All);
        }
        pipe.ignore_errors();
        query_reads(conn, &pipe)
    })?;
    let mut replies = replies.into_iter();
    let mut out = NodeRead {
        server_time: replies.next().and_then(|t| super::server_time(&t).ok()),
        ..NodeRead::default()
    };
    if !channels.is_empty() {
        let mut counts = numsub(replies.next(), channels.len());
        if sharded {
            let classic_here = source.classic_pubsub_node() == Some(node);
            let shard = numsub(replies.next(), channels.len());
            for (count, shard) in counts.iter_mut().zip(shard) {
                *count = on_sharded_node(*count, shard, classic_here);
            }
        }
        out.subscribers = counts;
    }
    for (client, key) in clients.iter().zip(&keys) {
        if key.is_none() {
            continue;
        }
        out.records.extend(bounded(client, replies.next()));
    }
    Ok(out)
}

/// The counts of a `PUBSUB NUMSUB` reply (channel, count, channel,
/// count…), one per channel asked about; `None`s when it is no such reply.
fn numsub(reply: Option<Value>, channels: usize) -> Vec<Option<u64>> {
    let pairs: Option<Vec<(Vec<u8>, u64)>> = reply.and_then(|r| redis::from_redis_value(r).ok());
    match pairs {
        Some(pairs) if pairs.len() == channels => pairs.into_iter().map(|(_, n)| Some(n)).collect(),
        _ => vec![None; channels],
    }
}

/// The records of `client` under `prefix` on every master of `source` (one
/// on a single server or Sentinel; on a Cluster, each master where the
/// client holds something), read with one round trip per master.
///
/// # Errors
///
/// Connection, timeout and server errors.
pub(crate) fn records_of(source: &Source, prefix: &str, client: &str) -> Result<Vec<HolderRecord>> {
    let mut out = Vec::new();
    for node in source.masters()? {
        let Some(key) = super::key_for(prefix, client, |k| source.node_of(k) == node) else {
            continue;
        };
        let mut replies: Vec<Value> = source.with_node_conn(node, |conn| {
            let mut pipe = redis::pipe();
            record_read(&mut pipe, &key, BOUNDS, ReadFields::All);
            pipe.ignore_errors();
            query_reads(conn, &pipe)
        })?;
        // Here the record is all that is asked: a refused read is an error.
        if let Some(Value::ServerError(e)) = replies.first() {
            return Err(Error::from_redis(redis::RedisError::from(e.clone()), &key));
        }
        out.extend(bounded(client, replies.pop()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_read_names_what_it_left_unread() {
        let bulk = |s: &[u8]| Value::BulkString(s.to_vec());
        let reply = Value::Array(vec![
            Value::Int(1500),
            Value::Int(1),
            bulk(b"host"),
            bulk(b"h1"),
            bulk(b"program"),
            Value::Int(20_000_000),
            Value::Int(70_000),
            bulk(b"wait:abc|xxxx"),
            bulk(b"pid"),
            bulk(b"7"),
        ]);
        let r = bounded("c", Some(reply)).unwrap();
        assert_eq!(
            (r.host.as_str(), r.pid, r.program.as_str()),
            ("h1", Some(7), "")
        );
        assert!(r.field_too_long("program") && !r.field_too_long("host"));
        assert_eq!(r.long_names, vec![b"wait:abc|xxxx".to_vec()]);
        assert!(r.partial);
        // Every field too long: still a record, which says so.
        let reply = Value::Array(vec![
            Value::Int(-1),
            Value::Int(0),
            bulk(b"program"),
            Value::Int(9_000),
        ]);
        let r = bounded("c", Some(reply)).unwrap();
        assert_eq!(r.too_long, vec![b"program".to_vec()]);
        assert!(!r.partial);
        let empty = Value::Array(vec![Value::Int(-2), Value::Int(0)]);
        assert!(bounded("c", Some(empty)).is_none());
        assert!(bounded("c", Some(Value::Nil)).is_none());
    }

    #[test]
    fn clients_are_distinct_and_foreign_ids_skipped() {
        let a = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60";
        let b = "00000000-3c5e-4d1a-9f00-1b2c3d4e5f60";
        let holders = [
            format!("{a}:1"),
            format!("{b}:7:write"),
            format!("{a}:2"),
            "java-thread-1".to_owned(),
        ];
        assert_eq!(clients_of(holders.iter().map(String::as_str)), vec![b, a]);
    }

    #[test]
    fn numsub_replies_are_read_per_channel() {
        let reply = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::Int(2),
            Value::BulkString(b"b".to_vec()),
            Value::Int(3),
        ]);
        assert_eq!(numsub(Some(reply), 2), vec![Some(2), Some(3)]);
        assert_eq!(numsub(Some(Value::Nil), 2), vec![None, None]);
    }

    #[test]
    fn a_redguard_subscriber_counts_once_on_a_sharded_node() {
        // Two redguard clients (classic elsewhere) and a Redisson 3.2x one.
        assert_eq!(on_sharded_node(Some(0), Some(3), false), Some(3));
        // An older Redisson listening classic on the slot's node besides.
        assert_eq!(on_sharded_node(Some(1), Some(3), false), Some(4));
        // The node of the redguard clients' classic connections: each of
        // them is there twice.
        assert_eq!(on_sharded_node(Some(2), Some(2), true), Some(2));
        assert_eq!(on_sharded_node(Some(3), Some(2), true), Some(3));
        assert_eq!(on_sharded_node(None, Some(2), true), Some(2));
        assert_eq!(on_sharded_node(None, None, false), None);
    }

    #[test]
    fn counts_of_several_nodes_add_up_per_channel() {
        let mut counts = vec![Some(1), None, Some(2), None];
        add_counts(&mut counts, vec![Some(3), Some(4), None, None]);
        assert_eq!(counts, vec![Some(4), Some(4), Some(2), None]);
        add_counts(&mut counts, vec![Some(1); 4]);
        assert_eq!(counts, vec![Some(5), Some(5), Some(3), Some(1)]);
    }
}
