//! `redguard status` for the synchronizers stored as a plain counter: a
//! semaphore's available permits (with the leases of an expiring-permit
//! semaphore) or a count-down latch's count.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::cli::{show_name, show_ttl};
use crate::connect::Connection;
use crate::fail::Failure;

/// What a counter at a name is, for people and for `--json`; `None` when
/// the name holds no integer counter.
pub(crate) fn describe(conn: &Connection, name: &[u8]) -> Result<Option<(String, Value)>, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let counter = match conn.client.semaphore(name).available_permits() {
        Ok(n) => n,
        Err(redguard::Error::WrongType { .. }) => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    let leases = conn
        .client
        .expiring_semaphore(name)
        .leases()
        .map_err(fail)?;
    let shown = show_name(name);
    let mut text = String::new();
    if leases.is_empty() {
        if counter == 0 {
            return Ok(None);
        }
        let _ = writeln!(
            text,
            "counter {shown}: {counter} (a semaphore's available permits, or a latch's count)"
        );
        let json = json!({
            "name": String::from_utf8_lossy(name),
            "held": false,
            "kind": "counter",
            "value": counter,
        });
        return Ok(Some((text, json)));
    }
    let _ = writeln!(
        text,
        "semaphore {shown}: {counter} permit(s) available, {} held (expiring permits)",
        leases.len()
    );
    for (id, left) in &leases {
        let _ = writeln!(
            text,
            "  permit {id}: lease {}",
            show_ttl(Some(redguard::Ttl::Expires(*left)))
        );
    }
    let json = json!({
        "name": String::from_utf8_lossy(name),
        "held": true,
        "kind": "expiring_semaphore",
        "available": counter,
        "permits": leases
            .iter()
            .map(|(id, left)| json!({"id": id.to_string(), "lease_ms": left.as_millis() as u64}))
            .collect::<Vec<_>>(),
    });
    Ok(Some((text, json)))
}
