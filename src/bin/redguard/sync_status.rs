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
use crate::waiters::Waiters;

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

/// What a counter is, as far as can be told: the layout of a plain
/// semaphore and of a latch is the same integer, so only an expiring
/// permit held on it, or what redguard's waiters on it say they wait for,
/// tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterKind {
    /// Expiring permits are held on it, or its waiters wait for one.
    ExpiringSemaphore,
    /// Its waiters wait for permits of a plain semaphore.
    Semaphore,
    /// Its waiters wait for the latch to open.
    Latch,
    /// Nothing tells.
    Unknown,
}

impl CounterKind {
    /// What `permits_held` and the waiters of `name` tell.
    pub(crate) fn of(permits_held: bool, waiters: &Waiters, name: &[u8]) -> CounterKind {
        if permits_held {
            return CounterKind::ExpiringSemaphore;
        }
        match waiters.kinds(name).as_slice() {
            ["latch"] => CounterKind::Latch,
            ["semaphore"] => CounterKind::Semaphore,
            ["permit"] => CounterKind::ExpiringSemaphore,
            _ => CounterKind::Unknown,
        }
    }

    /// The kind as `--json` names it.
    pub(crate) fn word(self) -> &'static str {
        match self {
            CounterKind::ExpiringSemaphore => "expiring_semaphore",
            CounterKind::Semaphore => "semaphore",
            CounterKind::Latch => "latch",
            CounterKind::Unknown => "counter",
        }
    }
}

impl Counter {
    /// What the semaphore handle read there.
    pub(crate) fn semaphore(&self) -> &SemaphoreInfo {
        &self.semaphore
    }

    /// What the latch handle read there.
    pub(crate) fn latch(&self) -> &LatchInfo {
        &self.latch
    }

    /// What the counter is, as far as can be told.
    pub(crate) fn kind(&self, waiters: &Waiters, name: &[u8]) -> CounterKind {
        CounterKind::of(!self.semaphore.permits.is_empty(), waiters, name)
    }

    /// `true` when expiring permits are held on it.
    pub(crate) fn is_held(&self) -> bool {
        !self.semaphore.permits.is_empty()
    }

    pub(crate) fn text(&self, name: &[u8], waiters: &Waiters) -> String {
        let shown = show::name(name);
        let sem = &self.semaphore;
        let mut text = String::new();
        let recorded = waiters.of(name).len();
        match self.kind(waiters, name) {
            CounterKind::Unknown => {
                let _ = writeln!(
                    text,
                    "counter {shown}: {} (a semaphore's available permits, or a latch's count); \
                     the layout cannot tell them apart",
                    sem.available
                );
                let _ = writeln!(
                    text,
                    "  waiters: {} on the semaphore, {} on the latch (subscribed), {recorded} recorded",
                    count(sem.subscribers),
                    count(self.latch.subscribers)
                );
            }
            CounterKind::Latch => {
                let _ = writeln!(
                    text,
                    "latch {shown}: count {} (its waiters say it is a latch)",
                    self.latch.count
                );
                let _ = writeln!(
                    text,
                    "  waiters: {} subscribed, {recorded} recorded",
                    count(self.latch.subscribers)
                );
            }
            CounterKind::Semaphore => {
                let _ = writeln!(
                    text,
                    "semaphore {shown}: {} permit(s) available (its waiters say it is a semaphore)",
                    sem.available
                );
                let _ = writeln!(
                    text,
                    "  waiters: {} subscribed, {recorded} recorded",
                    count(sem.subscribers)
                );
            }
            CounterKind::ExpiringSemaphore => {
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
                    let _ = writeln!(
                        text,
                        "    {line}{}",
                        liveness_text(sem.record_of(&permit.id))
                    );
                }
                let _ = writeln!(
                    text,
                    "  waiters: {} subscribed, {recorded} recorded",
                    count(sem.subscribers)
                );
            }
        }
        text.push_str(&waiters.text(name, "  "));
        text
    }

    pub(crate) fn json(&self, name: &[u8], waiters: &Waiters) -> Value {
        let sem = &self.semaphore;
        let kind = self.kind(waiters, name);
        let mut v = match kind {
            CounterKind::ExpiringSemaphore => self.semaphore_json(name),
            CounterKind::Unknown => json!({
                "name": show::json_name(name),
                "kind": kind.word(),
                "held": false,
                "value": sem.available,
                "semaphore_subscribers": sem.subscribers,
                "latch_subscribers": self.latch.subscribers,
            }),
            CounterKind::Semaphore => json!({
                "name": show::json_name(name),
                "kind": kind.word(),
                "held": false,
                "value": sem.available,
                "available": sem.available,
                "subscribers": sem.subscribers,
            }),
            CounterKind::Latch => json!({
                "name": show::json_name(name),
                "kind": kind.word(),
                "held": false,
                "value": sem.available,
                "count": self.latch.count,
                "subscribers": self.latch.subscribers,
            }),
        };
        v["waiters"] = waiters.json(name);
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
                permit["alive"] = json!(liveness(sem.record_of(&p.id)));
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

/// Whether the process a record names is alive, where this machine can
/// tell: `Some` only for a record of this host (by host name), by whether
/// its pid exists here; `None` for another host's, or no record.
pub(crate) fn liveness(record: Option<&redguard::HolderRecord>) -> Option<bool> {
    let record = record?;
    let pid = record.pid?;
    if record.host != this_host() {
        return None;
    }
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        // A killed process not yet reaped by its parent still answers.
        return Some(!is_zombie(pid));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => Some(false),
        // EPERM: it exists, owned by someone else.
        _ => Some(true),
    }
}

/// Whether `pid` is a zombie (dead, not yet reaped), where `/proc` says.
fn is_zombie(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the parenthesised command name.
            let state = stat.rsplit(')').next()?.split_whitespace().next()?;
            Some(state == "Z" || state == "X")
        })
        .unwrap_or(false)
}

/// ", dead (pid not running on this host)" for a holder known dead, else
/// nothing.
pub(crate) fn liveness_text(record: Option<&redguard::HolderRecord>) -> &'static str {
    match liveness(record) {
        Some(false) => "; DEAD: pid not running on this host",
        _ => "",
    }
}

/// This machine's host name, as records give it.
fn this_host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}
