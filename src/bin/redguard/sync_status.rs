//! `redguard status` for the synchronizers stored as a plain counter: a
//! semaphore's available permits (with the leases of an expiring-permit
//! semaphore) or a count-down latch's count.

use std::fmt::Write;
use std::time::Duration;

use redguard::{PermitId, Ttl};
use serde_json::{Value, json};

use crate::connect::Connection;
use crate::fail::Failure;
use crate::show;

/// A counter found at a name, with the expiring permits held on it.
pub(crate) struct Counter {
    value: i64,
    /// The counter key's remaining lifetime.
    ttl: Option<Ttl>,
    /// Held expiring permits and the time left on each lease.
    leases: Vec<(PermitId, Duration)>,
}

/// Reads the counter at `name`; `None` when the name holds no integer
/// counter and no permit is held on it. `ttl`: the key's remaining
/// lifetime, as read with the lock layouts.
pub(crate) fn read(
    conn: &Connection,
    name: &[u8],
    ttl: Option<Ttl>,
) -> Result<Option<Counter>, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let value = match conn.client.semaphore(name).available_permits() {
        Ok(n) => n,
        Err(redguard::Error::WrongType { .. }) => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    let leases = match conn.client.expiring_semaphore(name).leases() {
        Ok(leases) => leases,
        Err(redguard::Error::WrongType { .. }) => Vec::new(),
        Err(e) => return Err(fail(e)),
    };
    if value == 0 && leases.is_empty() {
        return Ok(None);
    }
    Ok(Some(Counter { value, ttl, leases }))
}

impl Counter {
    /// `true` when expiring permits are held on it.
    pub(crate) fn is_held(&self) -> bool {
        !self.leases.is_empty()
    }

    pub(crate) fn text(&self, name: &[u8]) -> String {
        let shown = show::name(name);
        let mut text = String::new();
        if self.leases.is_empty() {
            let _ = writeln!(
                text,
                "counter {shown}: {} (a semaphore's available permits, or a latch's count)",
                self.value
            );
            return text;
        }
        let _ = writeln!(
            text,
            "semaphore {shown}: {} permit(s) available, {} held (expiring permits)",
            self.value,
            self.leases.len()
        );
        for (id, left) in &self.leases {
            let _ = writeln!(text, "  permit {id}: lease {}", show::left(*left));
        }
        text
    }

    pub(crate) fn json(&self, name: &[u8]) -> Value {
        let mut v = if self.leases.is_empty() {
            json!({
                "name": show::json_name(name),
                "kind": "counter",
                "held": false,
                "value": self.value,
            })
        } else {
            self.semaphore_json(name)
        };
        show::expiry_fields(self.ttl, &mut v);
        v
    }

    fn semaphore_json(&self, name: &[u8]) -> Value {
        json!({
            "name": show::json_name(name),
            "kind": "expiring_semaphore",
            "held": true,
            "available": self.value,
            "permits": self
                .leases
                .iter()
                .map(|(id, left)| json!({
                    "id": id.to_string(),
                    "expires_in_ms": show::ms(*left),
                    "expires_at_unix_ms": show::unix_ms_in(*left),
                }))
                .collect::<Vec<_>>(),
        })
    }
}
