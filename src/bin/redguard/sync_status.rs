//! `redguard status` for the synchronizers stored as a plain counter: a
//! semaphore's available permits (with the expiring permits held on it,
//! their leases and their holders' records) or a count-down latch's count,
//! each with the waiters subscribed to it.

use std::fmt::Write;

use redguard::{LatchInfo, SemaphoreInfo};
use serde_json::{Value, json};

use crate::connect::Connection;
use crate::fail::Failure;
use crate::record_view::{record_json, record_line};
use crate::show;

/// A counter found at a name: what the semaphore and the latch handles
/// read there (the two share Redisson's layout, a bare integer).
pub(crate) struct Counter {
    semaphore: SemaphoreInfo,
    latch: LatchInfo,
}

/// Reads the counter at `name`; `None` when the name holds no integer
/// counter and no expiring permit is held on it.
pub(crate) fn read(conn: &Connection, name: &[u8]) -> Result<Option<Counter>, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let semaphore = match conn.client.expiring_semaphore(name).inspect() {
        Ok(info) => info,
        Err(redguard::Error::WrongType { .. }) => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    if semaphore.ttl.is_none() && semaphore.permits.is_empty() {
        return Ok(None);
    }
    let latch = conn.client.count_down_latch(name).inspect().map_err(fail)?;
    Ok(Some(Counter { semaphore, latch }))
}

/// A subscriber count for people.
fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
}

impl Counter {
    /// `true` when expiring permits are held on it.
    pub(crate) fn is_held(&self) -> bool {
        !self.semaphore.permits.is_empty()
    }

    pub(crate) fn text(&self, name: &[u8]) -> String {
        let shown = show::name(name);
        let sem = &self.semaphore;
        let mut text = String::new();
        if sem.permits.is_empty() {
            let _ = writeln!(
                text,
                "counter {shown}: {} (a semaphore's available permits, or a latch's count)",
                sem.available
            );
            let _ = writeln!(
                text,
                "  waiters: {} on the semaphore, {} on the latch (subscribed)",
                count(sem.subscribers),
                count(self.latch.subscribers)
            );
            return text;
        }
        let _ = writeln!(
            text,
            "semaphore {shown}: {} permit(s) available, {} held (expiring permits)",
            sem.available,
            sem.permits.len()
        );
        for permit in &sem.permits {
            let client = sem
                .record_of(&permit.id)
                .map_or_else(String::new, |r| format!(", client {}", r.client));
            let _ = writeln!(
                text,
                "  permit {}: lease {}{client}",
                permit.id,
                show::left(permit.lease_left)
            );
            let line = record_line(sem.record_of(&permit.id), sem.held_for(&permit.id));
            let _ = writeln!(text, "    {line}");
        }
        let _ = writeln!(text, "  waiters: {} subscribed", count(sem.subscribers));
        text
    }

    pub(crate) fn json(&self, name: &[u8]) -> Value {
        let sem = &self.semaphore;
        let mut v = if sem.permits.is_empty() {
            json!({
                "name": show::json_name(name),
                "kind": "counter",
                "held": false,
                "value": sem.available,
                "semaphore_subscribers": sem.subscribers,
                "latch_subscribers": self.latch.subscribers,
            })
        } else {
            self.semaphore_json(name)
        };
        show::expiry_fields(sem.ttl, &mut v);
        v
    }

    fn semaphore_json(&self, name: &[u8]) -> Value {
        let sem = &self.semaphore;
        let permits: Vec<Value> = sem
            .permits
            .iter()
            .map(|p| {
                let mut permit = json!({
                    "id": p.id.to_string(),
                    // A permit id is no holder id: the client that holds
                    // it, for `redguard who`, is known by its record.
                    "client": sem.record_of(&p.id).map(|r| r.client.as_str()),
                    "expires_in_ms": show::ms(p.lease_left),
                    "expires_at_unix_ms": show::unix_ms_in(p.lease_left),
                });
                record_json(
                    sem.record_of(&p.id),
                    sem.held_for(&p.id),
                    sem.held_since(&p.id),
                    &mut permit,
                );
                permit
            })
            .collect();
        json!({
            "name": show::json_name(name),
            "kind": "expiring_semaphore",
            "held": true,
            "available": sem.available,
            "held_permits": permits.len(),
            "permits": permits,
            "subscribers": sem.subscribers,
        })
    }
}
