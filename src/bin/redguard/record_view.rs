//! How a holder record is shown: one line of text, or the fields of a
//! holder in `--json`. Shared by every command that names who holds
//! something (`status`, `list`, `once --status`).

use std::time::{Duration, SystemTime};

use redguard::HolderRecord;
use serde_json::{Value, json};

use crate::show;

/// What a holder record says, on one line: host, pid, program and how
/// long the hold has lasted (`held_for`); or that there is no record. Said
/// as the record's claim: any client that can write the record key can
/// write anything there.
pub(crate) fn record_line(record: Option<&HolderRecord>, held_for: Option<Duration>) -> String {
    let Some(record) = record else {
        return "no record (not a redguard client, records off, or not written yet)".to_owned();
    };
    let pid = record.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
    let held = held_for.map_or_else(|| "unknown".to_owned(), show::left);
    format!(
        "its record says: host {}, pid {pid}, program {}; held for {held}{}",
        show::record_text(record, "host", &record.host),
        show::record_program(record),
        show::unread_note(record)
    )
}

/// The record fields of one holder for `--json` (`status`, `list`,
/// `once --status`): `record` (whether there is one), `host`, `pid`,
/// `program`, `version`, `held_for_ms`, `held_since_unix_ms` (null when
/// unknown; `host`, `program` and `version` also when too long to read),
/// and with a record `too_long` (the names of the fields too long to
/// read) and `partial` (fields left out besides).
pub(crate) fn record_json(
    record: Option<&HolderRecord>,
    held_for: Option<Duration>,
    held_since: Option<SystemTime>,
    v: &mut Value,
) {
    v["record"] = json!(record.is_some());
    v["host"] = record.map_or(Value::Null, |r| show::record_json(r, "host", &r.host));
    v["pid"] = json!(record.and_then(|r| r.pid));
    v["program"] = record.map_or(Value::Null, |r| show::record_json(r, "program", &r.program));
    v["version"] = record.map_or(Value::Null, |r| show::record_json(r, "version", &r.version));
    if let Some(r) = record {
        show::unread_json(r, v);
    }
    v["held_for_ms"] = json!(held_for.map(show::ms));
    v["held_since_unix_ms"] = json!(held_since.map(show::unix_ms));
}

/// Says on stderr (unless `quiet`) that the server refused `client`'s
/// holder record, so that a run whose `status` showed no host, pid or
/// program is not a silent mystery: the usual cause is an ACL without the
/// record keys.
pub(crate) fn warn_if_unrecorded(client: &redguard::Client, quiet: bool) {
    let refused = client.stats().record_writes_refused;
    if refused > 0 && !quiet {
        crate::out::warn(&format!(
            "the server refused this run's holder record (permission denied): `status` and \
             `list` showed no host, pid or program for it; grant the ACL user \
             ~{}* (docs/SECURITY.md)",
            client.record_prefix()
        ));
    }
}
