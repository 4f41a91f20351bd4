//! Who waits for a name, as the waiters' holder records say: host, pid,
//! program, what kind of wait and since when. Shared by `status` and
//! `list`. Redisson's waiters keep no record: they show only as subscribers,
//! or in a fair lock's queue.

use std::collections::HashMap;
use std::time::SystemTime;

use redguard::{HolderRecord, QueuedWaiter, RecordedWait};
use serde_json::{Value, json};

use crate::connect::Connection;
use crate::show;

/// One recorded waiter.
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    pub(crate) holder: String,
    /// `None`: too long to read.
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    /// `None`: too long to read.
    pub(crate) program: Option<String>,
    pub(crate) kind: String,
    /// `None`: the wait's entry was too long to read.
    pub(crate) since: Option<SystemTime>,
}

impl Waiter {
    fn of(record: &HolderRecord, wait: &RecordedWait) -> Waiter {
        Waiter {
            holder: wait.holder.as_str().to_owned(),
            host: (!record.field_too_long("host")).then(|| record.host.clone()),
            pid: record.pid,
            program: (!record.field_too_long("program")).then(|| record.program.clone()),
            kind: wait.kind.clone(),
            since: Some(wait.since),
        }
    }

    /// A wait of `record` whose entry (field `field`) was too long to read:
    /// its holder and name are known from the field's name, not its start
    /// or kind. `None` when `field` is no wait's.
    fn too_long(record: &HolderRecord, field: &[u8]) -> Option<(Vec<u8>, Waiter)> {
        let rest = field.strip_prefix(b"wait:")?;
        let bar = rest.iter().position(|&b| b == b'|')?;
        let waiter = Waiter {
            holder: String::from_utf8_lossy(&rest[..bar]).into_owned(),
            host: (!record.field_too_long("host")).then(|| record.host.clone()),
            pid: record.pid,
            program: (!record.field_too_long("program")).then(|| record.program.clone()),
            // Its kind follows the start in the value left unread.
            kind: "kind unknown".to_owned(),
            since: None,
        };
        Some((rest[bar + 1..].to_vec(), waiter))
    }

    /// How long it has waited, by this machine's clock (the start is by the
    /// waiter's).
    fn waited(&self) -> Option<std::time::Duration> {
        Some(
            SystemTime::now()
                .duration_since(self.since?)
                .unwrap_or_default(),
        )
    }

    /// host, pid, program and how long it has waited, on one line.
    pub(crate) fn line(&self) -> String {
        let pid = self.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
        format!(
            "host {}, pid {pid}, program {}; waiting for {} ({})",
            self.host
                .as_deref()
                .map_or_else(|| show::TOO_LONG.to_owned(), show::text),
            self.program
                .as_deref()
                .map_or_else(|| show::TOO_LONG.to_owned(), |p| show::name(p.as_bytes())),
            self.waited()
                .map_or_else(|| show::TOO_LONG.to_owned(), show::left),
            show::text(&self.kind)
        )
    }

    /// The fields of `--json`: `id`, `host`, `pid`, `program` (`host` and
    /// `program` null when too long to read), `kind`,
    /// `waiting_since_unix_ms`, `waiting_for_ms`.
    pub(crate) fn json(&self) -> Value {
        json!({
            "id": self.holder,
            "host": self.host,
            "pid": self.pid,
            "program": self.program,
            "kind": self.kind,
            "waiting_since_unix_ms": self.since.map(show::unix_ms),
            "waiting_for_ms": self.waited().map(show::ms),
        })
    }
}

/// Every recorded wait, by the name waited for (first waiter first).
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_name: HashMap<Vec<u8>, Vec<Waiter>>,
    /// The records could not be searched (an ACL user without `SCAN`).
    pub(crate) unknown: bool,
    /// Records keeping a wait whose name could not be read (a field name
    /// too long, or fields left out): each as its client id and what was
    /// left unread.
    pub(crate) unreadable: Vec<String>,
}

impl Waiters {
    /// Reads every record that keeps a wait. A search the server refuses
    /// leaves the waiters unknown (said in the output), not the command
    /// failed.
    pub(crate) fn read(conn: &Connection) -> Waiters {
        match conn.client.waiting_records() {
            Ok(records) => Waiters::from_records(&records),
            Err(e) => {
                log::debug!("waiter records could not be read: {e}");
                Waiters {
                    unknown: true,
                    ..Waiters::default()
                }
            }
        }
    }

    pub(crate) fn from_records(records: &[HolderRecord]) -> Waiters {
        let mut by_name: HashMap<Vec<u8>, Vec<Waiter>> = HashMap::new();
        let mut unreadable = Vec::new();
        for record in records {
            for wait in &record.waits {
                by_name
                    .entry(wait.name.clone())
                    .or_default()
                    .push(Waiter::of(record, wait));
            }
            for field in &record.too_long {
                if let Some((name, waiter)) = Waiter::too_long(record, field) {
                    by_name.entry(name).or_default().push(waiter);
                }
            }
            if !record.long_names.is_empty() || record.partial {
                unreadable.push(format!(
                    "client {}{}",
                    show::text(&record.client),
                    show::unread_note(record)
                ));
            }
        }
        for list in by_name.values_mut() {
            list.sort_by(|a, b| a.since.cmp(&b.since).then(a.holder.cmp(&b.holder)));
        }
        Waiters {
            by_name,
            unknown: false,
            unreadable,
        }
    }

    /// The recorded waiters of `name`, longest waiting first.
    pub(crate) fn of(&self, name: &[u8]) -> &[Waiter] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }

    /// The recorded waiter with holder id `holder` waiting for `name`.
    pub(crate) fn find(&self, name: &[u8], holder: &str) -> Option<&Waiter> {
        self.of(name).iter().find(|w| w.holder == holder)
    }

    /// The kinds the waiters of `name` wait as (`semaphore`, `latch`, ...),
    /// distinct, in order.
    pub(crate) fn kinds(&self, name: &[u8]) -> Vec<&str> {
        let mut kinds: Vec<&str> = self.of(name).iter().map(|w| w.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// The recorded waiters of `name` as text lines after `indent`, or a
    /// line saying they could not be read.
    pub(crate) fn text(&self, name: &[u8], indent: &str) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if self.unknown {
            let _ = writeln!(
                s,
                "{indent}recorded waiters: unknown (the records could not be searched)"
            );
            return s;
        }
        for w in self.of(name) {
            // The holder id is the record's field name: escaped like its
            // other fields.
            let _ = writeln!(s, "{indent}waiter {}: {}", show::text(&w.holder), w.line());
        }
        // Whose wait these are for is unknown: said beside every name.
        for r in &self.unreadable {
            let _ = writeln!(s, "{indent}recorded waiter of an unreadable name: {r}");
        }
        s
    }

    /// The recorded waiters of `name` for `--json` (`null` when unknown).
    pub(crate) fn json(&self, name: &[u8]) -> Value {
        if self.unknown {
            return Value::Null;
        }
        self.of(name).iter().map(Waiter::json).collect()
    }

    /// A fair lock's queue for people, one line per waiter read (first in
    /// line first) with its deadline and, where its record says, its host,
    /// pid, program and how long it has waited; then how many more of the
    /// `total` were not read, and how many of those read keep no record
    /// (Redisson's waiters, or records off).
    pub(crate) fn queue_text(
        &self,
        name: &[u8],
        queue: &[QueuedWaiter],
        total: u64,
        indent: &str,
    ) -> String {
        use std::fmt::Write;
        let now = SystemTime::now();
        let mut s = String::new();
        for (i, waiter) in queue.iter().enumerate() {
            let deadline = match waiter.deadline {
                Some(at) => match at.duration_since(now) {
                    Ok(left) => format!("deadline in {}", show::left(left)),
                    Err(_) => "deadline passed".to_owned(),
                },
                None => "no deadline".to_owned(),
            };
            let who = match self.find(name, waiter.holder.as_str()) {
                Some(w) => w.line(),
                None => "no record (not a redguard client, or records off)".to_owned(),
            };
            // An entry is whatever was pushed on the list: escaped, as every
            // value read from Redis, so that it cannot forge a line.
            let _ = writeln!(
                s,
                "{indent}queued #{}: {} ({deadline}): {who}",
                i + 1,
                show::text(waiter.holder.as_str())
            );
        }
        let more = total.saturating_sub(queue.len() as u64);
        if more > 0 {
            let _ = writeln!(s, "{indent}... and {more} more queued (not read)");
        }
        if !queue.is_empty() && !self.unknown {
            let _ = writeln!(
                s,
                "{indent}foreign waiters (queued, no record): {}",
                self.foreign(name, queue)
            );
        }
        s
    }

    /// How many of `queue` keep no record: Redisson's waiters (or
    /// redguard's with records off).
    pub(crate) fn foreign(&self, name: &[u8], queue: &[QueuedWaiter]) -> usize {
        queue
            .iter()
            .filter(|w| self.find(name, w.holder.as_str()).is_none())
            .count()
    }

    /// A fair lock's queue for `--json`: `[{position, id,
    /// deadline_unix_ms, record, host, pid, program, kind,
    /// waiting_since_unix_ms, waiting_for_ms}]`, first in line first.
    pub(crate) fn queue_json(&self, name: &[u8], queue: &[QueuedWaiter]) -> Value {
        queue
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let found = self.find(name, w.holder.as_str());
                let mut v = found.map_or_else(|| json!({}), Waiter::json);
                v["position"] = json!(i + 1);
                v["id"] = json!(w.holder.as_str());
                v["deadline_unix_ms"] = json!(w.deadline.map(show::unix_ms));
                v["record"] = json!(found.is_some());
                for field in ["host", "pid", "program", "kind"] {
                    if v.get(field).is_none() {
                        v[field] = Value::Null;
                    }
                }
                v
            })
            .collect()
    }
}
