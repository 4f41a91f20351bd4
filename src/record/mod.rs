//! Holder records: one small hash per client beside the locks, saying who
//! the client is (host, pid, program, crate version, start time) and since
//! when each of its holds began, so that `redguard status` can tell an
//! operator more than a holder id. The locks' own layout (Redisson's) is
//! not touched: a Java holder simply has no record.
//!
//! * Key: `<prefix>{<client uuid>}`, the prefix `redguard:client:` unless
//!   the client gives another (`Builder::record_prefix`: one per tenant on
//!   a shared server; readers look only under their own). On a Cluster a
//!   client keeps one record on every master where it holds something, at
//!   the first of `<prefix>{<uuid>}`, `<prefix>{<uuid>:1}`, `…:2}`, …
//!   whose slot that master serves ([`key_for`]); a reader finds it with
//!   the same rule and the slot map it has, in the round trip that reads
//!   the lock's neighbours.
//! * Fields: `host`, `pid`, `program`, `version`, `started` (ms since the
//!   epoch on the server's clock), and `hold:<holder id>|<lock name>` →
//!   the hold's start, ms on the server's clock, a space and the kind of
//!   hold ([`HoldKind::as_str`]; at most [`MAX_HOLDS`] per record).
//! * A waiting client adds `wait:<holder id>|<name>` → the wait's start
//!   (ms since the epoch, by the waiter's clock), a space and what it waits
//!   for ([`RecordedWait::kind`]), sent with the wait's own attempts (no
//!   round trip of its own) and deleted when the wait ends, whatever its end
//!   (`wait`).
//! * Lifetime: `PEXPIRE` = the client's watchdog timeout, refreshed in the
//!   round trips that renew its leases; deleted when the client shuts down.
//!   A killed process's record is gone within one lease.
//!
//! * Reads are bounded on the server (`lua/record_read.lua`, bounds in
//!   `read::BOUNDS`): a record is any client's to write, and a field of
//!   100 MB must not reach a reader. Over-long values and names are sent as
//!   their lengths ([`HolderRecord::too_long`], [`HolderRecord::long_names`]).
//!
//! This module knows the layout: names, fields, what a write sends and how
//! a read is parsed. The watchdog decides when to write (`watchdog::records`).

mod find;
mod mask;
mod read;
mod spec;
pub(crate) mod wait;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::{Error, Result};
use crate::holder::{ClientId, HolderId};
use crate::lease::Ttl;
use crate::lost::HoldKind;

pub(crate) use find::{holding, waiting_on};
pub use mask::RecordCommand;
pub(crate) use read::{add_classic_elsewhere, around, clients_of, on_node, records_of};
pub(crate) use spec::{RecordSpec, RecordWrite, clock_offset};

/// Most hold start times one record keeps: a client holding more locks on
/// one server has the rest without a start time (a record stays small).
pub(crate) const MAX_HOLDS: usize = 1000;

/// The prefix of record keys unless the client gives another
/// ([`Builder::record_prefix`](crate::Builder::record_prefix)).
pub(crate) const DEFAULT_PREFIX: &str = "redguard:client:";

/// Longest record key prefix, in bytes.
const MAX_PREFIX: usize = 256;

/// Checks a record key prefix: 1 ..= 256 bytes, no `{`/`}` (the hash tag
/// that follows must be the key's first, for the Cluster slot to be the
/// client's) and no glob character (the prefix is a `SCAN MATCH`
/// pattern's start, and a glob there would find other keys).
///
/// # Errors
///
/// What is wrong, to be wrapped as an invalid argument.
pub(crate) fn check_prefix(prefix: &str) -> std::result::Result<(), String> {
    if prefix.is_empty() {
        return Err("record prefix is empty".to_owned());
    }
    if prefix.len() > MAX_PREFIX {
        return Err(format!(
            "record prefix is {} bytes, longer than {MAX_PREFIX}",
            prefix.len()
        ));
    }
    if let Some(c) = prefix.chars().find(|c| "*?[]\\{}".contains(*c)) {
        return Err(format!(
            "record prefix {prefix:?} holds {c:?}: no glob character (*?[]\\) and no {{ or }}"
        ));
    }
    Ok(())
}

/// The prefix of a hold field.
const HOLD_PREFIX: &[u8] = b"hold:";

/// The prefix of a wait field.
const WAIT_PREFIX: &[u8] = b"wait:";

/// The record key under `prefix` with suffix number `n` (0: none) of
/// client `client`.
pub(crate) fn key(prefix: &str, client: &str, n: u32) -> Vec<u8> {
    match n {
        0 => format!("{prefix}{{{client}}}").into_bytes(),
        n => format!("{prefix}{{{client}:{n}}}").into_bytes(),
    }
}

/// The record key of `client` under `prefix` that lives where `wanted` says (on a
/// Cluster: on the master serving it; `wanted(key)` answers whether a key
/// lands there). `None` when no suffix up to a bound lands there (a slot
/// map that lost the master).
pub(crate) fn key_for(
    prefix: &str,
    client: &str,
    mut wanted: impl FnMut(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    // A master of n serves about 1/n of the slots: with 1,000 masters the
    // chance that 100,000 tries miss it is e^-100.
    (0..100_000)
        .map(|n| key(prefix, client, n))
        .find(|k| wanted(k))
}

/// The field holding the start of `holder`'s hold on `name`.
pub(crate) fn hold_field(holder: &str, name: &[u8]) -> Vec<u8> {
    let mut field = Vec::with_capacity(HOLD_PREFIX.len() + holder.len() + 1 + name.len());
    field.extend_from_slice(HOLD_PREFIX);
    field.extend_from_slice(holder.as_bytes());
    field.push(b'|');
    field.extend_from_slice(name);
    field
}

/// The field saying that `holder` waits for `name`.
pub(crate) fn wait_field(holder: &str, name: &[u8]) -> Vec<u8> {
    let mut field = Vec::with_capacity(WAIT_PREFIX.len() + holder.len() + 1 + name.len());
    field.extend_from_slice(WAIT_PREFIX);
    field.extend_from_slice(holder.as_bytes());
    field.push(b'|');
    field.extend_from_slice(name);
    field
}

/// The client id at the front of a holder id (`<uuid>:<thread>…`), when it
/// has the form of one of redguard's (or Redisson's) client ids.
pub(crate) fn client_of(holder: &str) -> Option<&str> {
    let uuid = holder.get(..36)?;
    (uuid::Uuid::parse_str(uuid).is_ok() && holder[36..].starts_with(':')).then_some(uuid)
}

/// What a client's holder record says (see [`LockInfo::records`](crate::LockInfo::records)
/// and
/// [`Client::holder_records`](crate::Client::holder_records)).
///
/// Times are on the Redis server's clock. Fields a record lacks (a newer
/// or older writer) are `None` or empty.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderRecord {
    /// The client's id: the first part of its holder ids.
    pub client: String,
    /// The host name of the client's machine.
    pub host: String,
    /// The client's process id.
    pub pid: Option<u32>,
    /// What the process runs: `argv[0]`, or what it set with
    /// [`Builder::program`](crate::Builder::program) (the `redguard`
    /// command line tool: the command it runs), at most 256 bytes.
    pub program: String,
    /// The redguard version of the client.
    pub version: String,
    /// When the client was made.
    pub started: Option<SystemTime>,
    /// The holds whose start the record keeps, on the server it was read
    /// from.
    pub holds: Vec<RecordedHold>,
    /// How long until the record expires unless refreshed (the client's
    /// watchdog timeout at most).
    pub ttl: Option<Ttl>,
    /// What the client's threads wait for, on the server it was read from
    /// (each wait is kept while it lasts, and deleted when it ends).
    pub waits: Vec<RecordedWait>,
    /// The names of the fields whose value was left unread because it is
    /// longer than any value redguard writes (over 4 KiB: someone else
    /// wrote it): `program`, `hold:<holder>|<name>`, ... Such a fixed field
    /// reads as empty (`host`, `program`, `version`) or `None` (`pid`,
    /// `started`); such a hold or wait is not in [`holds`](Self::holds) or
    /// [`waits`](Self::waits). Only the value's length is read, never its
    /// bytes.
    pub too_long: Vec<Vec<u8>>,
    /// The first 64 bytes of each field name left unread because it is
    /// longer than any redguard writes (over 64 KiB + 256 bytes), with
    /// neither its whole name nor its value read.
    pub long_names: Vec<Vec<u8>>,
    /// Whether other fields were left unread: the record had more fields
    /// than redguard ever writes (over 2,032: then only its fixed fields
    /// were read), or the fields read came to 1 MiB.
    pub partial: bool,
}

/// One wait a [`HolderRecord`] keeps: a thread of the client waiting to
/// acquire a lock, permits or a run-once claim, or for a latch to open.
/// Redisson's waiters keep none (they show only as subscribers, or in a
/// fair lock's queue).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedWait {
    /// The waiting thread's holder id (`<client id>:<thread>`), as a fair
    /// lock's queue names it.
    pub holder: HolderId,
    /// The name waited for.
    pub name: Vec<u8>,
    /// When the wait began, by the waiter's clock (its first busy attempt).
    pub since: SystemTime,
    /// What is waited for: `reentrant`, `fair`, `fenced`, `read`, `write`
    /// (a lock's kind, as [`HoldKind::as_str`]), `permit` (an expiring
    /// semaphore), `semaphore`, `latch` or `once`.
    pub kind: String,
}

/// One hold a [`HolderRecord`] keeps the start of.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedHold {
    /// The holder id as the lock stores it (`:write` for a write side, the
    /// permit id for a permit).
    pub holder: HolderId,
    /// The lock's name.
    pub name: Vec<u8>,
    /// When the hold began (the first of a reentrant holder's holds).
    pub since: SystemTime,
    /// What kind of hold it is (`None` when the record does not say): a
    /// run-once claim and a fenced lock share a layout, and only this
    /// tells them apart.
    pub kind: Option<HoldKind>,
}

impl HolderRecord {
    /// When `holder` began to hold `name`, if the record keeps it.
    pub fn held_since(&self, holder: &str, name: &[u8]) -> Option<SystemTime> {
        self.holds
            .iter()
            .find(|h| h.holder == holder && h.name == name)
            .map(|h| h.since)
    }

    /// What kind of hold `holder` has on `name`, if the record says.
    pub fn hold_kind(&self, holder: &str, name: &[u8]) -> Option<HoldKind> {
        self.holds
            .iter()
            .find(|h| h.holder == holder && h.name == name)
            .and_then(|h| h.kind)
    }

    /// Whether the record's field `field` (`host`, `program`, ...) was left
    /// unread for its length ([`too_long`](Self::too_long)).
    pub fn field_too_long(&self, field: &str) -> bool {
        self.too_long.iter().any(|f| f == field.as_bytes())
    }

    /// The same record without its holds.
    pub(crate) fn clone_without_holds(&self) -> HolderRecord {
        HolderRecord {
            client: self.client.clone(),
            host: self.host.clone(),
            pid: self.pid,
            program: self.program.clone(),
            version: self.version.clone(),
            started: self.started,
            holds: Vec::new(),
            ttl: self.ttl,
            waits: Vec::new(),
            too_long: self
                .too_long
                .iter()
                .filter(|f| !f.starts_with(HOLD_PREFIX))
                .cloned()
                .collect(),
            long_names: self.long_names.clone(),
            partial: self.partial,
        }
    }

    /// Reads a record from its `HGETALL` or `HSCAN` reply (field, value pairs) and
    /// its `PTTL`; `None` when the hash is empty (no record).
    pub(crate) fn parse(client: &str, fields: Vec<(Vec<u8>, Vec<u8>)>, pttl: i64) -> Option<Self> {
        if fields.is_empty() {
            return None;
        }
        let mut record = HolderRecord {
            client: client.to_owned(),
            host: String::new(),
            pid: None,
            program: String::new(),
            version: String::new(),
            started: None,
            holds: Vec::new(),
            ttl: crate::lease::Pttl::from_ms(pttl).remaining(),
            waits: Vec::new(),
            too_long: Vec::new(),
            long_names: Vec::new(),
            partial: false,
        };
        for (field, value) in fields {
            let text = || String::from_utf8_lossy(&value).into_owned();
            match &field[..] {
                b"host" => record.host = text(),
                b"pid" => record.pid = text().parse().ok(),
                b"program" => record.program = text(),
                b"version" => record.version = text(),
                b"started" => record.started = epoch_ms(&value),
                f if f.starts_with(WAIT_PREFIX) => {
                    let rest = &f[WAIT_PREFIX.len()..];
                    let (Some(bar), Some(since)) =
                        (rest.iter().position(|&b| b == b'|'), epoch_ms(&value))
                    else {
                        continue;
                    };
                    let kind = std::str::from_utf8(&value)
                        .ok()
                        .and_then(|v| v.split_once(' '))
                        .map_or_else(String::new, |(_, kind)| kind.trim().to_owned());
                    record.waits.push(RecordedWait {
                        holder: HolderId::from_stored(
                            String::from_utf8_lossy(&rest[..bar]).into_owned(),
                        ),
                        name: rest[bar + 1..].to_vec(),
                        since,
                        kind,
                    });
                }
                f if f.starts_with(HOLD_PREFIX) => {
                    let rest = &f[HOLD_PREFIX.len()..];
                    let (Some(bar), Some(since)) =
                        (rest.iter().position(|&b| b == b'|'), epoch_ms(&value))
                    else {
                        continue;
                    };
                    let kind = std::str::from_utf8(&value)
                        .ok()
                        .and_then(|v| v.split_once(' '))
                        .and_then(|(_, kind)| HoldKind::from_name(kind.trim()));
                    record.holds.push(RecordedHold {
                        holder: HolderId::from_stored(
                            String::from_utf8_lossy(&rest[..bar]).into_owned(),
                        ),
                        name: rest[bar + 1..].to_vec(),
                        since,
                        kind,
                    });
                }
                _ => {}
            }
        }
        Some(record)
    }
}

/// A decimal count of ms since the epoch (what follows a space, a hold's
/// kind, left out).
fn epoch_ms(value: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let ms: u64 = text.split(' ').next()?.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// `TIME`'s reply as a [`SystemTime`] (the server's clock).
pub(crate) fn server_time(reply: &Value) -> Result<SystemTime> {
    let parts: (u64, u64) = redis::from_redis_value(reply.clone())
        .map_err(|e| Error::Protocol(format!("unexpected TIME reply: {e}")))?;
    Ok(UNIX_EPOCH + Duration::from_secs(parts.0) + Duration::from_micros(parts.1))
}

/// A [`ClientId`]'s text, as it appears in holder ids and record keys.
pub(crate) fn client_text(id: &ClientId) -> String {
    id.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60";

    #[test]
    fn keys_share_the_client_tag_and_spread_over_slots() {
        assert_eq!(
            key(DEFAULT_PREFIX, UUID, 0),
            format!("redguard:client:{{{UUID}}}").as_bytes()
        );
        assert_eq!(key("t:", UUID, 7), format!("t:{{{UUID}:7}}").as_bytes());
        assert_eq!(
            key(DEFAULT_PREFIX, UUID, 7),
            format!("redguard:client:{{{UUID}:7}}").as_bytes()
        );
        // Some suffix lands in any given third of the slots, and early.
        for third in 0..3u16 {
            let k = key_for(DEFAULT_PREFIX, UUID, |k| {
                crate::keys::slot(k) / 5462 == third
            })
            .unwrap();
            assert_eq!(crate::keys::slot(&k) / 5462, third);
        }
        assert!(key_for(DEFAULT_PREFIX, UUID, |_| false).is_none());
    }

    #[test]
    fn a_record_reads_back() {
        let fields = vec![
            (b"host".to_vec(), b"h1".to_vec()),
            (b"pid".to_vec(), b"42".to_vec()),
            (b"program".to_vec(), b"job.sh".to_vec()),
            (b"version".to_vec(), b"0.3.0".to_vec()),
            (b"started".to_vec(), b"1700000000000".to_vec()),
            (
                hold_field(&format!("{UUID}:3"), b"a|b"),
                b"1700000001000".to_vec(),
            ),
            (
                hold_field(&format!("{UUID}:4"), b"k"),
                b"1700000002000 once".to_vec(),
            ),
            (b"hold:bad".to_vec(), b"x".to_vec()),
            (
                wait_field(&format!("{UUID}:5"), b"render"),
                b"1700000003000 permit".to_vec(),
            ),
        ];
        let r = HolderRecord::parse(UUID, fields, 2500).unwrap();
        assert_eq!((r.host.as_str(), r.pid), ("h1", Some(42)));
        assert_eq!(
            r.started,
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(r.holds.len(), 2);
        assert_eq!(r.holds[0].name, b"a|b");
        assert_eq!(r.hold_kind(&format!("{UUID}:3"), b"a|b"), None);
        assert_eq!(
            r.hold_kind(&format!("{UUID}:4"), b"k"),
            Some(HoldKind::Once)
        );
        assert_eq!(
            r.held_since(&format!("{UUID}:3"), b"a|b"),
            Some(UNIX_EPOCH + Duration::from_millis(1_700_000_001_000))
        );
        assert_eq!(r.ttl, Some(Ttl::Expires(Duration::from_millis(2500))));
        assert_eq!(r.waits.len(), 1);
        assert_eq!(r.waits[0].holder, format!("{UUID}:5").as_str());
        assert_eq!(
            (r.waits[0].name.as_slice(), r.waits[0].kind.as_str()),
            (&b"render"[..], "permit")
        );
        assert_eq!(
            r.waits[0].since,
            UNIX_EPOCH + Duration::from_millis(1_700_000_003_000)
        );
        assert!(HolderRecord::parse(UUID, Vec::new(), -2).is_none());
    }

    #[test]
    fn client_ids_are_read_from_holder_ids() {
        assert_eq!(client_of(&format!("{UUID}:12")), Some(UUID));
        assert_eq!(client_of(&format!("{UUID}:12:write")), Some(UUID));
        assert_eq!(client_of("not-a-uuid:1"), None);
        assert_eq!(client_of(UUID), None);
        assert_eq!(client_of("0123456789abcdef"), None);
    }
}
