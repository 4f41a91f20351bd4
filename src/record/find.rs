//! Finding the records of holders whose client is not known from their
//! holder id: an expiring permit's holder is a bare permit id, so the
//! records on the semaphore's node are searched (`SCAN`) for its hold.

use std::collections::HashSet;

use redis::Value;

use super::HolderRecord;
use super::read::{BOUNDS, bounded};
use crate::connection::scan::KeyScan;
use crate::connection::{NodeId, Source};
use crate::scripts::record_read::{ReadFields, query_reads, record_read};

/// The `SCAN MATCH` pattern of the record keys under `prefix` (checked:
/// no glob character of its own).
fn pattern(prefix: &str) -> String {
    format!("{prefix}*")
}

/// The records under `prefix` on node `node` that keep the start of a hold
/// of `name` by one of `holders`, each with only those holds. Searches
/// every record there: one `SCAN` per 1,000 keys of the node, and one
/// pipelined round trip per page that has records (a bounded read of each:
/// `lua/record_read.lua`); stops once every holder is found.
///
/// Records are a best-effort addition to what the lock itself says: a
/// server that refuses the search (an ACL user without `SCAN`) or fails
/// during it leaves the rest unfound (logged at debug level).
pub(crate) fn holding(
    source: &Source,
    prefix: &str,
    node: NodeId,
    name: &[u8],
    holders: &[String],
) -> Vec<HolderRecord> {
    let mut found = Vec::new();
    if holders.is_empty() {
        return found;
    }
    let mut left: HashSet<&str> = holders.iter().map(String::as_str).collect();
    let fields: Vec<Vec<u8>> = holders.iter().map(|h| super::hold_field(h, name)).collect();
    let pattern = pattern(prefix);
    let mut scan = KeyScan::new(source, node, pattern.as_bytes(), Some("hash"));
    while let Some(page) = scan.next_page(|conn, keys| {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            record_read(&mut pipe, key, BOUNDS, ReadFields::Named(&fields));
        }
        pipe.ignore_errors();
        let replies: Vec<Value> = query_reads(conn, &pipe)?;
        Ok(keys.into_iter().zip(replies).collect::<Vec<_>>())
    }) {
        let records = match page {
            Ok(records) => records,
            Err(e) => {
                log::debug!(
                    "redguard: searching the holder records failed: {e}",
                    e = e.chain()
                );
                break;
            }
        };
        for (key, reply) in records {
            let Some(record) = read(prefix, &key, reply) else {
                continue;
            };
            for hold in &record.holds {
                left.remove(hold.holder.as_str());
            }
            found.push(record);
        }
        if left.is_empty() {
            break;
        }
    }
    found
}

/// The records under `prefix` on node `node` that keep at least one wait,
/// each with its fixed fields and its waits (no holds). Searches every
/// record there: one `SCAN` per 1,000 keys of the node, and one pipelined
/// round trip per page that has records (a bounded read of each record's
/// fixed fields and `wait:` fields, `lua/record_read.lua`: never a read of
/// a whole hash, nor of a long value).
///
/// # Errors
///
/// Connection, timeout and server errors (an ACL user without `SCAN`).
pub(crate) fn waiting_on(
    source: &Source,
    prefix: &str,
    node: NodeId,
) -> crate::error::Result<Vec<HolderRecord>> {
    let mut found = Vec::new();
    let pattern = pattern(prefix);
    let mut scan = KeyScan::new(source, node, pattern.as_bytes(), Some("hash"));
    while let Some(page) = scan.next_page(|conn, keys| {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            record_read(
                &mut pipe,
                key,
                BOUNDS,
                ReadFields::Matching(super::WAIT_PREFIX),
            );
        }
        pipe.ignore_errors();
        let replies: Vec<Value> = query_reads(conn, &pipe)?;
        Ok(keys.into_iter().zip(replies).collect::<Vec<_>>())
    }) {
        for (key, reply) in page? {
            let Some(client) = client_of_key(prefix, &key) else {
                continue;
            };
            // A record says it waits when a wait of it was read, or left
            // unread for its length (which only this read can tell).
            found.extend(bounded(&client, Some(reply)).filter(|r| {
                !r.waits.is_empty()
                    || !r.long_names.is_empty()
                    || r.too_long.iter().any(|f| f.starts_with(super::WAIT_PREFIX))
            }));
        }
    }
    Ok(found)
}

/// The client id of a record key under `prefix` (`<prefix>{<uuid>}` or
/// `<prefix>{<uuid>:<n>}`).
fn client_of_key(prefix: &str, key: &[u8]) -> Option<String> {
    let rest = key.strip_prefix(prefix.as_bytes())?.strip_prefix(b"{")?;
    let uuid = std::str::from_utf8(rest.get(..36)?).ok()?;
    uuid::Uuid::parse_str(uuid).ok()?;
    matches!(rest.get(36), Some(b'}' | b':')).then(|| uuid.to_owned())
}

/// The record at `key` (under `prefix`) from its bounded read, when it
/// keeps at least one of the holds asked about.
fn read(prefix: &str, key: &[u8], reply: Value) -> Option<HolderRecord> {
    let client = client_of_key(prefix, key)?;
    let record = bounded(&client, Some(reply))?;
    (!record.holds.is_empty()).then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60";
    const P: &str = super::super::DEFAULT_PREFIX;

    #[test]
    fn client_ids_are_read_from_record_keys() {
        assert_eq!(
            client_of_key(P, &super::super::key(P, UUID, 0)).as_deref(),
            Some(UUID)
        );
        assert_eq!(
            client_of_key(P, &super::super::key(P, UUID, 12)).as_deref(),
            Some(UUID)
        );
        assert_eq!(
            client_of_key("t:rg:", &super::super::key("t:rg:", UUID, 3)).as_deref(),
            Some(UUID)
        );
        // Under another prefix, a key is not a record.
        assert_eq!(client_of_key("t:rg:", &super::super::key(P, UUID, 0)), None);
        assert_eq!(client_of_key(P, b"redguard:client:{nope}"), None);
        assert_eq!(client_of_key(P, b"other:{e605b3b7}"), None);
    }

    #[test]
    fn a_record_counts_only_with_a_wanted_hold() {
        let key = super::super::key(P, UUID, 0);
        let bulk = |s: &[u8]| Value::BulkString(s.to_vec());
        let reply = |hold: Option<&str>| {
            let mut items = vec![Value::Int(900), Value::Int(0)];
            for (f, v) in [("host", "h1"), ("pid", "42"), ("program", "job")] {
                items.extend([bulk(f.as_bytes()), bulk(v.as_bytes())]);
            }
            if let Some(v) = hold {
                let field = super::super::hold_field("ab12", b"sem");
                items.extend([bulk(&field), bulk(v.as_bytes())]);
            }
            Value::Array(items)
        };
        let r = read(P, &key, reply(Some("1700000001000"))).unwrap();
        assert_eq!((r.host.as_str(), r.pid), ("h1", Some(42)));
        assert_eq!(r.holds.len(), 1);
        assert_eq!(r.holds[0].holder, "ab12");
        assert_eq!(r.holds[0].name, b"sem");
        assert!(read(P, &key, reply(None)).is_none());
    }
}
