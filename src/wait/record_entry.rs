//! A waiting thread's entry in its client's holder record, for as long as
//! the wait lasts (see `record::wait` for the entry's field and commands,
//! which ride on the wait's attempts at no round trip of their own).

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::client::Client;
use crate::connection::{NodeId, Source};
use crate::record::{self, RecordSpec};

/// A wait of the calling thread, recorded in its client's record from its
/// first busy attempt until it is dropped (whatever ends the wait: a grant,
/// a timeout, an error or a panic). Inert for a client without records.
pub(crate) struct WaitEntry<'c> {
    client: &'c Client,
    spec: Option<Arc<RecordSpec>>,
    name: &'c [u8],
    kind: &'static str,
    /// When the wait began (its first busy attempt), by this clock.
    since: Option<SystemTime>,
    /// The record key on the name's node (`None`: not found, nothing sent).
    key: Option<Vec<u8>>,
    node: NodeId,
    /// When the entry's commands were last armed.
    armed_at: Option<Instant>,
    /// This value owns the thread's recorded wait.
    owns: bool,
}

impl<'c> WaitEntry<'c> {
    /// The wait of the calling thread for `name`, of `kind` (see
    /// [`RecordedWait::kind`](crate::RecordedWait::kind)). Nothing is
    /// recorded before [`WaitEntry::busy`].
    pub(crate) fn new(client: &'c Client, name: &'c [u8], kind: &'static str) -> WaitEntry<'c> {
        WaitEntry {
            client,
            spec: client.context().record.clone(),
            name,
            kind,
            since: None,
            key: None,
            node: 0,
            armed_at: None,
            owns: false,
        }
    }

    /// An attempt found the name busy: the wait is recorded, its entry
    /// riding on the next attempt (and again every third of the record's
    /// lifetime).
    pub(crate) fn busy(&mut self) {
        let Some(spec) = self.spec.clone() else {
            return;
        };
        let now = Instant::now();
        if self.since.is_none() {
            self.since = Some(SystemTime::now());
            let source: &Source = self.client.source();
            self.node = source.node_of(self.name);
            let node = self.node;
            self.key = record::key_for(&spec.prefix, &spec.client, |k| source.node_of(k) == node);
            let field = record::wait_field(self.client.holder_id().as_str(), self.name);
            self.owns = record::wait::claim(source, node, field);
        }
        if !self.owns || self.armed_at.is_some_and(|at| now < at + spec.ttl / 3) {
            return;
        }
        let (Some(key), Some(since)) = (&self.key, self.since) else {
            return;
        };
        spec.note_wait_record(self.node, key);
        let since_ms = since
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        record::wait::arm(&spec, key, since_ms, self.kind);
        self.armed_at = Some(now);
    }
}

impl Drop for WaitEntry<'_> {
    fn drop(&mut self) {
        if !self.owns {
            return;
        }
        let Some(field) = record::wait::end() else {
            return;
        };
        // One round trip on the caller's connection (the watchdog, which
        // may have no connection to this server, would need one); the
        // watchdog's next record write when that fails.
        // After a shutdown that released the client's locks, the whole
        // record goes: this wait's last attempt may have written it again
        // after the shutdown deleted it.
        let whole = self.client.is_shut_down() && self.client.config().release_on_shutdown;
        let deleted = self.key.as_ref().is_some_and(|key| {
            self.client
                .with_shared_conn(self.name, |conn| {
                    let mut cmd = if whole {
                        redis::cmd("DEL")
                    } else {
                        redis::cmd("HDEL")
                    };
                    cmd.arg(&key[..]);
                    if !whole {
                        cmd.arg(&field[..]);
                    }
                    cmd.query::<i64>(conn).map_err(crate::error::Error::redis)
                })
                .is_ok()
        });
        if !deleted && let Some(spec) = self.spec.clone() {
            crate::watchdog::wait_ended(
                self.client.source().clone(),
                self.node,
                spec,
                self.client.counters().clone(),
                field,
            );
        }
    }
}
