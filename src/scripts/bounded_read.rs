//! `lua/bounded_read.lua`: the reads of a lock hash, a fair lock's queue
//! and a lease set whose every element is bounded on the server before it
//! is sent. An element too long for what such a key stores (another
//! tenant's 20 MB field, entry or member) comes back as its length, which
//! [`Element::TooLong`] carries.
//!
//! The commands built here go into pipelines and `MULTI`/`EXEC` snapshots
//! of reads; a server that lost its script cache answers `NOSCRIPT`, which
//! [`super::is_noscript`] tells, and the caller loads [`script`] and sends
//! its reads once more (they change nothing).

use std::sync::LazyLock;

use redis::{Script, Value};

static BOUNDED_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/bounded_read.lua")));

/// The script, to load on `NOSCRIPT`.
pub(crate) fn script() -> &'static Script {
    &BOUNDED_READ
}

/// Sends `cmd` (one of this module's) on `conn`; on `NOSCRIPT` loads the
/// script and sends it once more.
///
/// # Errors
///
/// The command's own errors (`WRONGTYPE` for a key of another type),
/// connection and timeout errors, a refused `SCRIPT LOAD`.
pub(crate) fn query(conn: &mut redis::Connection, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
    super::query_loading(conn, &BOUNDED_READ, cmd)
}

/// One element of a bounded read: its bytes, or the length of one too
/// long to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Element {
    /// Sent whole.
    Bytes(Vec<u8>),
    /// Longer than the read's bound: this many bytes, none sent.
    TooLong(u64),
}

impl Element {
    /// The element from its reply: a bulk string, or an integer length.
    fn from_reply(v: Value) -> Option<Element> {
        match v {
            Value::Int(n) => Some(Element::TooLong(u64::try_from(n).ok()?)),
            other => redis::from_redis_value::<Vec<u8>>(other)
                .ok()
                .map(Element::Bytes),
        }
    }

    /// The bytes, when sent whole.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Element::Bytes(b) => Some(b),
            Element::TooLong(_) => None,
        }
    }
}

/// `EVALSHA` of the script with `numkeys` keys, `key` the first.
fn evalsha(numkeys: usize, key: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(BOUNDED_READ.get_hash()).arg(numkeys).arg(key);
    cmd
}

/// `HLEN` and one `HSCAN` page (`cursor`, `count`) of the hash at `key`,
/// in one command: field names longer than `max_name` bytes and values
/// longer than `max_value` come as their lengths; no page is read of a
/// hash of more than `max_fields` fields.
pub(crate) fn hash_page(
    key: &[u8],
    max_name: usize,
    max_value: usize,
    cursor: u64,
    count: u64,
    max_fields: u64,
) -> redis::Cmd {
    let mut cmd = evalsha(1, key);
    cmd.arg("hash")
        .arg(max_name)
        .arg(max_value)
        .arg(cursor)
        .arg(count)
        .arg(max_fields);
    cmd
}

/// A [`hash_page`] reply: `HLEN`, the cursor to go on from, the pairs
/// (name, value).
pub(crate) type HashPage = (u64, u64, Vec<(Element, Element)>);

/// Reads a [`hash_page`] reply; `None` for an error or another shape.
pub(crate) fn hash_page_reply(v: Value) -> Option<HashPage> {
    let Value::Array(items) = v else {
        return None;
    };
    let mut items = items.into_iter();
    let len: u64 = redis::from_redis_value(items.next()?).ok()?;
    let cursor: u64 = redis::from_redis_value(items.next()?).ok()?;
    let mut pairs = Vec::with_capacity(items.len() / 2);
    while let (Some(name), Some(value)) = (items.next(), items.next()) {
        pairs.push((Element::from_reply(name)?, Element::from_reply(value)?));
    }
    Some((len, cursor, pairs))
}

/// The first `most` entries of the list at `queue` (a fair lock's queue)
/// with each one's score in `deadlines`, its length and the deadlines'
/// count, in one command: entries longer than `max_entry` bytes come as
/// their lengths, without a deadline.
pub(crate) fn queue(queue: &[u8], deadlines: &[u8], max_entry: usize, most: u64) -> redis::Cmd {
    let mut cmd = evalsha(2, queue);
    cmd.arg(deadlines).arg("queue").arg(max_entry).arg(most);
    cmd
}

/// A [`queue`] reply: `LLEN`, `ZCARD`, each entry read with its deadline
/// (the score: Unix epoch ms, as stored).
pub(crate) type QueueRead = (u64, u64, Vec<(Element, Option<f64>)>);

/// Reads a [`queue`] reply; `None` for an error or another shape.
pub(crate) fn queue_reply(v: Value) -> Option<QueueRead> {
    let Value::Array(items) = v else {
        return None;
    };
    let mut items = items.into_iter();
    let len: u64 = redis::from_redis_value(items.next()?).ok()?;
    let zcard: u64 = redis::from_redis_value(items.next()?).ok()?;
    let mut entries = Vec::with_capacity(items.len() / 2);
    while let (Some(entry), Some(score)) = (items.next(), items.next()) {
        let score = redis::from_redis_value::<Option<f64>>(score).unwrap_or(None);
        entries.push((Element::from_reply(entry)?, score));
    }
    Some((len, zcard, entries))
}

/// The first `most` members of the sorted set at `key` with their scores,
/// lowest first (`ZRANGE 0 most-1 WITHSCORES`), in one command: members
/// longer than `max_member` bytes come as their lengths.
pub(crate) fn zset(key: &[u8], max_member: usize, most: u64) -> redis::Cmd {
    let mut cmd = evalsha(1, key);
    cmd.arg("zset").arg(max_member).arg(most);
    cmd
}

/// A [`zset`] reply's members and scores, or the error it is (a key of
/// another type answers `WRONGTYPE`).
///
/// # Errors
///
/// The reply's own error, or [`redis::RedisError`] of a reply of another
/// shape.
pub(crate) fn zset_reply(v: Value) -> redis::RedisResult<Vec<(Element, f64)>> {
    let items: Vec<Value> = redis::from_redis_value(v.extract_error()?)?;
    let mut items = items.into_iter();
    let mut out = Vec::with_capacity(items.len() / 2);
    while let (Some(member), Some(score)) = (items.next(), items.next()) {
        let score: f64 = redis::from_redis_value(score)?;
        let Some(member) = Element::from_reply(member) else {
            continue;
        };
        out.push((member, score));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    #[test]
    fn a_too_long_element_reads_as_its_length() {
        let page =
            parse("*6\r\n:2\r\n$1\r\n0\r\n:20971520\r\n$1\r\n1\r\n$4\r\nmode\r\n$4\r\nread\r\n");
        let (len, cursor, pairs) = hash_page_reply(page).unwrap();
        assert_eq!((len, cursor), (2, 0));
        assert_eq!(
            pairs,
            vec![
                (Element::TooLong(20 << 20), Element::Bytes(b"1".to_vec())),
                (
                    Element::Bytes(b"mode".to_vec()),
                    Element::Bytes(b"read".to_vec())
                ),
            ]
        );
        let queue = parse("*6\r\n:2\r\n:1\r\n:99\r\n$-1\r\n$3\r\na:1\r\n$13\r\n1700000000000\r\n");
        let (len, zcard, entries) = queue_reply(queue).unwrap();
        assert_eq!((len, zcard), (2, 1));
        assert_eq!(
            entries,
            vec![
                (Element::TooLong(99), None),
                (Element::Bytes(b"a:1".to_vec()), Some(1.7e12)),
            ]
        );
    }

    #[test]
    fn a_wrong_type_is_the_zset_reads_error() {
        let err = zset_reply(parse("-WRONGTYPE Operation against a key\r\n")).unwrap_err();
        assert_eq!(err.code(), Some("WRONGTYPE"));
    }
}
