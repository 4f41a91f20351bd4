//! Finding the records of holders whose client is not known from their
//! holder id: an expiring permit's holder is a bare permit id, so the
//! records on the semaphore's node are searched (`SCAN`) for its hold.

use std::collections::HashSet;

use redis::Value;

use super::{HolderRecord, KEY_PREFIX};
use crate::connection::scan::KeyScan;
use crate::connection::{NodeId, Source};
use crate::error::Error;

/// The fixed fields read from each record.
const STATICS: [&str; 5] = ["host", "pid", "program", "version", "started"];

/// The records on node `node` that keep the start of a hold of `name` by
/// one of `holders`, each with only those holds. Searches every record
/// there: one `SCAN` per 1,000 keys of the node, and one pipelined round
/// trip per page that has records; stops once every holder is found.
///
/// Records are a best-effort addition to what the lock itself says: a
/// server that refuses the search (an ACL user without `SCAN`) or fails
/// during it leaves the rest unfound (logged at debug level).
pub(crate) fn holding(
    source: &Source,
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
    let pattern = format!("{KEY_PREFIX}*");
    let mut scan = KeyScan::new(source, node, pattern.as_bytes(), Some("hash"));
    while let Some(page) = scan.next_page(|conn, keys| {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("HMGET").arg(&key[..]).arg(&STATICS[..]);
            for field in &fields {
                pipe.arg(&field[..]);
            }
            pipe.cmd("PTTL").arg(&key[..]);
        }
        pipe.ignore_errors();
        let replies: Vec<Value> = pipe.query(conn).map_err(Error::redis)?;
        Ok(keys.into_iter().zip(pairs(replies)).collect::<Vec<_>>())
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
        for (key, (values, pttl)) in records {
            let Some(record) = read(&key, &fields, values, pttl) else {
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

/// Fields of a record's waits asked for in one `HSCAN` call: a record has
/// its fixed fields, at most [`super::MAX_HOLDS`] holds and one wait per
/// waiting thread; a hash at a record's key written by someone else costs
/// no more than this to read.
const WAIT_SCAN_COUNT: usize = 2 * (super::MAX_HOLDS + 16);

/// The records on node `node` that keep at least one wait, each with its
/// fixed fields and its waits (no holds). Searches every record there: one
/// `SCAN` per 1,000 keys of the node, and one pipelined round trip per page
/// that has records (`HMGET` of the fixed fields, an `HSCAN … MATCH wait:*`
/// of bounded `COUNT` and `PTTL` per record: never a read of a whole hash).
///
/// # Errors
///
/// Connection, timeout and server errors (an ACL user without `SCAN`).
pub(crate) fn waiting_on(source: &Source, node: NodeId) -> crate::error::Result<Vec<HolderRecord>> {
    let mut found = Vec::new();
    let pattern = format!("{KEY_PREFIX}*");
    let mut scan = KeyScan::new(source, node, pattern.as_bytes(), Some("hash"));
    while let Some(page) = scan.next_page(|conn, keys| {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("HMGET").arg(&key[..]).arg(&STATICS[..]);
            pipe.cmd("HSCAN")
                .arg(&key[..])
                .arg(0)
                .arg("MATCH")
                .arg("wait:*")
                .arg("COUNT")
                .arg(WAIT_SCAN_COUNT);
            pipe.cmd("PTTL").arg(&key[..]);
        }
        pipe.ignore_errors();
        let replies: Vec<Value> = pipe.query(conn).map_err(Error::redis)?;
        Ok(keys.into_iter().zip(triples(replies)).collect::<Vec<_>>())
    }) {
        for (key, (statics, waits, pttl)) in page? {
            found.extend(read_waits(&key, statics, waits, pttl));
        }
    }
    Ok(found)
}

/// The replies of a page of [`waiting_on`], three per key.
fn triples(replies: Vec<Value>) -> Vec<(Value, Value, Value)> {
    let mut replies = replies.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b), Some(c)) = (replies.next(), replies.next(), replies.next()) {
        out.push((a, b, c));
    }
    out
}

/// The record at `key` from the replies of [`waiting_on`], when it keeps
/// at least one wait.
fn read_waits(key: &[u8], statics: Value, waits: Value, pttl: Value) -> Option<HolderRecord> {
    let client = client_of_key(key)?;
    let values: Vec<Option<Vec<u8>>> = redis::from_redis_value(statics).ok()?;
    type Page = (u64, Vec<(Vec<u8>, Vec<u8>)>);
    let (_, waits): Page = redis::from_redis_value(waits).ok()?;
    if waits.is_empty() {
        return None;
    }
    let pttl: i64 = redis::from_redis_value(pttl).unwrap_or(-2);
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = STATICS
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .zip(values)
        .filter_map(|(field, value)| Some((field, value?)))
        .chain(waits)
        .collect();
    let record = HolderRecord::parse(&client, pairs, pttl)?;
    (!record.waits.is_empty()).then_some(record)
}

/// The replies of a page, two per key: `HMGET`'s and `PTTL`'s.
fn pairs(replies: Vec<Value>) -> Vec<(Value, Value)> {
    let mut replies = replies.into_iter();
    let mut out = Vec::new();
    while let (Some(values), Some(pttl)) = (replies.next(), replies.next()) {
        out.push((values, pttl));
    }
    out
}

/// The client id of a record key (`redguard:client:{<uuid>}` or
/// `…{<uuid>:<n>}`).
fn client_of_key(key: &[u8]) -> Option<String> {
    let rest = key
        .strip_prefix(KEY_PREFIX.as_bytes())?
        .strip_prefix(b"{")?;
    let uuid = std::str::from_utf8(rest.get(..36)?).ok()?;
    uuid::Uuid::parse_str(uuid).ok()?;
    matches!(rest.get(36), Some(b'}' | b':')).then(|| uuid.to_owned())
}

/// The record at `key` from its `HMGET` reply (the fixed fields, then
/// `fields`) and `PTTL`, when it keeps at least one of `fields`.
fn read(key: &[u8], fields: &[Vec<u8>], values: Value, pttl: Value) -> Option<HolderRecord> {
    let client = client_of_key(key)?;
    let values: Vec<Option<Vec<u8>>> = redis::from_redis_value(values).ok()?;
    let pttl: i64 = redis::from_redis_value(pttl).unwrap_or(-2);
    let names = STATICS.iter().map(|s| s.as_bytes().to_vec());
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = names
        .chain(fields.iter().cloned())
        .zip(values)
        .filter_map(|(field, value)| Some((field, value?)))
        .collect();
    let record = HolderRecord::parse(&client, pairs, pttl)?;
    (!record.holds.is_empty()).then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60";

    #[test]
    fn client_ids_are_read_from_record_keys() {
        assert_eq!(
            client_of_key(&super::super::key(UUID, 0)).as_deref(),
            Some(UUID)
        );
        assert_eq!(
            client_of_key(&super::super::key(UUID, 12)).as_deref(),
            Some(UUID)
        );
        assert_eq!(client_of_key(b"redguard:client:{nope}"), None);
        assert_eq!(client_of_key(b"other:{e605b3b7}"), None);
    }

    #[test]
    fn a_record_counts_only_with_a_wanted_hold() {
        let key = super::super::key(UUID, 0);
        let fields = vec![super::super::hold_field("ab12", b"sem")];
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let values = |hold: Value| {
            Value::Array(vec![
                bulk("h1"),
                bulk("42"),
                bulk("job"),
                bulk("0.3.0"),
                bulk("1700000000000"),
                hold,
            ])
        };
        let r = read(
            &key,
            &fields,
            values(bulk("1700000001000")),
            Value::Int(900),
        )
        .unwrap();
        assert_eq!((r.host.as_str(), r.pid), ("h1", Some(42)));
        assert_eq!(r.holds.len(), 1);
        assert_eq!(r.holds[0].holder, "ab12");
        assert_eq!(r.holds[0].name, b"sem");
        assert!(read(&key, &fields, values(Value::Nil), Value::Int(900)).is_none());
    }
}
