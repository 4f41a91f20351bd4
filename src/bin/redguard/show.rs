//! How names and remaining times are written for people and for JSON.
//!
//! Names are bytes. They are written escaped, reversibly: each byte that
//! is not part of valid UTF-8 as `\xHH`, a backslash as `\\`; in text a
//! ASCII control character also as `\xHH` and a double quote as `\"`, inside
//! double quotes. A name that is printable UTF-8 without a backslash reads
//! as itself.

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redguard::{HolderRecord, LockInfo, LockKind, Ttl};
use serde_json::{Value, json};

/// A name for messages and text output: quoted and escaped.
pub(crate) fn name(name: &[u8]) -> String {
    format!("\"{}\"", escape(name, true))
}

/// A text field read from Redis (a record's host, version, holder) for
/// text output: escaped as names are, unquoted, so that a field holding a
/// newline or a terminal escape prints as one visible token, never as a
/// forged line or a cleared screen.
pub(crate) fn text(field: &str) -> String {
    escape(field.as_bytes(), true)
}

/// What text output says in place of a record field too long to read.
pub(crate) const TOO_LONG: &str = "(too long)";

/// Most bytes of a too-long field's name shown.
const SHOWN_FIELD: usize = 64;

/// A record's text field `field` (`host`, `version`) for text output, as
/// [`text`] writes it, or [`TOO_LONG`] when it was too long to read.
pub(crate) fn record_text(record: &HolderRecord, field: &str, value: &str) -> String {
    if record.field_too_long(field) {
        TOO_LONG.to_owned()
    } else {
        text(value)
    }
}

/// A record's program for text output, quoted as [`name`] writes it, or
/// [`TOO_LONG`] when it was too long to read.
pub(crate) fn record_program(record: &HolderRecord) -> String {
    if record.field_too_long("program") {
        TOO_LONG.to_owned()
    } else {
        name(record.program.as_bytes())
    }
}

/// A record's text field for JSON: null when it was too long to read
/// (the record's `too_long` list then names it).
pub(crate) fn record_json(record: &HolderRecord, field: &str, value: &str) -> Value {
    if record.field_too_long(field) {
        Value::Null
    } else {
        json!(value)
    }
}

/// The fields of a record left unread, for text output: empty when none,
/// else `; fields too long to read: "hold:…" (too long)` (each name cut
/// to 64 bytes, a cut one followed by `...`), and `; more fields than a
/// record has (partial)` when the rest was left out too.
pub(crate) fn unread_note(record: &HolderRecord) -> String {
    let mut note = String::new();
    let names: Vec<String> = unread_names(record)
        .map(|(f, cut)| format!("{}{}", name(f), if cut { "..." } else { "" }))
        .collect();
    if !names.is_empty() {
        let _ = write!(
            note,
            "; fields too long to read: {} {TOO_LONG}",
            names.join(", ")
        );
    }
    if record.partial {
        note.push_str("; more fields than a record has (partial)");
    }
    note
}

/// The names of the fields of `record` left unread for their length, each
/// cut to 64 bytes, and whether it was cut.
fn unread_names(record: &HolderRecord) -> impl Iterator<Item = (&[u8], bool)> {
    let cut = |f: &[u8]| f.len() > SHOWN_FIELD;
    record
        .too_long
        .iter()
        .map(move |f| (&f[..f.len().min(SHOWN_FIELD)], cut(f)))
        .chain(
            record
                .long_names
                .iter()
                .map(|f| (&f[..f.len().min(SHOWN_FIELD)], true)),
        )
}

/// The fields of a record left unread, for JSON: `too_long` (the names of
/// the fields too long to read, escaped, each cut to 64 bytes) and
/// `partial` (fields left out besides).
pub(crate) fn unread_json(record: &HolderRecord, v: &mut Value) {
    v["too_long"] = json!(
        unread_names(record)
            .map(|(f, _)| json_name(f))
            .collect::<Vec<_>>()
    );
    v["partial"] = json!(record.partial);
}

/// A name for JSON: escaped, unquoted (JSON quotes and escapes the rest).
pub(crate) fn json_name(name: &[u8]) -> String {
    escape(name, false)
}

fn escape(bytes: &[u8], text: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' if text => out.push_str("\\\""),
                c if text && c.is_ascii_control() => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A remaining time for people, to the millisecond: `2s 350ms`, `0ms`.
pub(crate) fn left(d: Duration) -> String {
    let ms = Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64);
    if ms.is_zero() {
        "0ms".to_owned()
    } else {
        humantime::format_duration(ms).to_string()
    }
}

/// A key's remaining lifetime for people: `2s 350ms`, `no expiry`, `none`.
pub(crate) fn ttl(ttl: Option<Ttl>) -> String {
    match ttl {
        None => "none".to_owned(),
        Some(Ttl::Persistent) => "no expiry".to_owned(),
        Some(Ttl::Expires(d)) => left(d),
    }
}

/// Milliseconds, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The Unix time in ms at which something `d` from now happens, by this
/// host's clock.
pub(crate) fn unix_ms_in(d: Duration) -> u64 {
    unix_ms(SystemTime::now() + d)
}

/// A time as Unix ms (0 for times before 1970).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, ms)
}

/// Why a value of Redis type `redis_type` is not a lock, for messages:
/// a hash is one only by its fields.
pub(crate) fn not_a_lock(redis_type: &str) -> String {
    match redis_type {
        "hash" => "the key holds a hash whose fields are not a lock's (holder ids with hold \
                   counts)"
            .to_owned(),
        other => format!("the key holds a {other}"),
    }
}

/// One line naming the current holder(s) and the remaining ttl, for the
/// spinner, the waiting lines of `-v` and the "busy" message. A holder
/// with a record is named by its host, pid, program and how long it has
/// held the lock, then its holder id: what an operator needs to find the
/// process.
pub(crate) fn describe_holder(info: &LockInfo) -> String {
    let ttl = ttl(info.ttl);
    match (&info.kind, info.holders.as_slice()) {
        (LockKind::Other { redis_type }, _) => {
            format!("not a lock: {} (ttl {ttl})", not_a_lock(redis_type))
        }
        (_, []) => format!("no holder recorded (ttl {ttl})"),
        (_, [(holder, _)]) => format!("held by {}", holder_text(info, holder, &ttl)),
        (_, [(holder, _), rest @ ..]) => format!(
            "held by {} and {} more",
            holder_text(info, holder, &ttl),
            rest.len()
        ),
    }
}

/// One holder of `info`: `host H, pid P, program "X", for 3s (holder ID,
/// ttl T)` from its record; `ID (ttl T)` without one.
fn holder_text(info: &LockInfo, holder: &redguard::HolderId, ttl: &str) -> String {
    let Some(record) = info.record_of(holder) else {
        return format!("{holder} (ttl {ttl})");
    };
    let pid = record.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
    let age = info
        .held_for(holder)
        .map_or_else(|| "an unknown time".to_owned(), left);
    format!(
        "host {}, pid {pid}, program {}, for {age} (holder {holder}, ttl {ttl}){}",
        record_text(record, "host", &record.host),
        record_program(record),
        unread_note(record)
    )
}

/// Who holds `lock` now, on one line ([`describe_holder`]); one round
/// trip.
pub(crate) fn look_holder(lock: &redguard::Lock) -> String {
    match lock.inspect() {
        Ok(info) if info.is_held() => describe_holder(&info),
        Ok(_) => "free, acquiring".to_owned(),
        Err(_) => "holder unknown (Redis did not answer)".to_owned(),
    }
}

/// `expires_in_ms` and `expires_at_unix_ms` of a key's remaining lifetime
/// (both null for no key or no expiry).
pub(crate) fn expiry_fields(ttl: Option<Ttl>, v: &mut Value) {
    let left = ttl.and_then(Ttl::expires_in);
    v["expires_in_ms"] = json!(left.map(ms));
    v["expires_at_unix_ms"] = json!(left.map(unix_ms_in));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reverses [`escape`], to show that no two names print the same.
    fn unescape(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            match chars.next() {
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                Some(c) => out.push(c as u8),
                None => panic!("dangling backslash in {s:?}"),
            }
        }
        out
    }

    #[test]
    fn names_are_escaped_reversibly() {
        let names: [&[u8]; 7] = [
            b"nightly",
            "caf\u{e9}".as_bytes(),
            b"\xff\xfe",
            b"a\\xff",
            b"quote\"d",
            b"tab\tnl\n",
            b"mixed\xc3(\\",
        ];
        for n in names {
            let text = name(n);
            let inner = &text[1..text.len() - 1];
            assert_eq!(unescape(inner), n, "{text}");
            assert_eq!(unescape(&json_name(n)), n, "{}", json_name(n));
        }
        assert_eq!(name(b"nightly"), "\"nightly\"");
        assert_eq!(name(b"\xff"), "\"\\xff\"");
        assert_eq!(json_name(b"a\\xff"), "a\\\\xff");
        assert_ne!(json_name(b"\xff"), json_name(b"\\xff"));
    }

    #[test]
    fn times_left_are_to_the_millisecond() {
        assert_eq!(left(Duration::from_micros(2_350_999)), "2s 350ms");
        assert_eq!(left(Duration::from_micros(10)), "0ms");
        assert_eq!(ttl(Some(Ttl::Persistent)), "no expiry");
    }
}
