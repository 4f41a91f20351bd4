//! The scheduling thread's side of holder records (see `crate::record`):
//! for one server of one client, what its record there needs next. No
//! threads, no I/O: the scheduling thread asks for writes and hands them to
//! the server's worker, alone or riding on a renewal round trip.
//!
//! * The first hold on a server writes the whole record at once.
//! * A hold's start goes out with the next write after the scheduling
//!   thread takes the hold in (at its first renewal at the latest), and is
//!   deleted with the next write after it ends.
//! * Every renewal round trip refreshes the record's expiry; while the
//!   client uses the server but renews nothing there (short or fixed-lease
//!   holds), a write of its own does it every third of the lease.
//! * A refresh that finds the record gone (expired, a restart, an
//!   eviction) makes the next write rebuild it whole.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::lease::{Counters, LeaseState};
use crate::record::{MAX_HOLDS, RecordSpec, RecordWrite};

/// Longest a hold's start (or its deletion) waits for a write.
const PACE: Duration = Duration::from_secs(1);

/// One client's record on one server.
pub(super) struct RecordState {
    spec: Arc<RecordSpec>,
    /// The client's counters: who the record belongs to.
    pub(super) counters: Arc<Counters>,
    /// The record key on this server, once known (`None` again after a
    /// write that went to the wrong node).
    key: Option<Arc<[u8]>>,
    /// The whole record was written and not found gone since.
    written: bool,
    /// Hold starts to write.
    adds: Vec<(Vec<u8>, Arc<LeaseState>)>,
    /// Hold fields to delete.
    dels: Vec<Vec<u8>>,
    /// Hold fields on the server, as far as known.
    fields: usize,
    /// No record key was found on this server (its node serves no slot,
    /// after a failover): the search is not tried again before this.
    no_key_until: Option<Instant>,
    /// A write is at the worker.
    in_flight: bool,
    /// The last write failed (the server down, the key refused): the next
    /// waits for the pace.
    failed: bool,
    sent_at: Option<Instant>,
    /// When the client last took a lock on this server.
    used_at: Instant,
}

impl RecordState {
    pub(super) fn new(spec: Arc<RecordSpec>, counters: Arc<Counters>, now: Instant) -> Self {
        RecordState {
            spec,
            counters,
            key: None,
            written: false,
            adds: Vec::new(),
            dels: Vec::new(),
            fields: 0,
            no_key_until: None,
            in_flight: false,
            failed: false,
            sent_at: None,
            used_at: now,
        }
    }

    /// The record of a client that holds nothing and took nothing on this
    /// server: it is written only for what is pending (an ended wait's
    /// deletion), not kept alive.
    pub(super) fn idle(spec: Arc<RecordSpec>, counters: Arc<Counters>, now: Instant) -> Self {
        let used_at = now.checked_sub(spec.ttl).unwrap_or(now);
        let mut state = RecordState::new(spec, counters, now);
        state.used_at = used_at;
        state
    }

    /// The client took a lock on this server.
    pub(super) fn used(&mut self, now: Instant) {
        self.used_at = now;
    }

    /// A hold to record (unless the record keeps [`MAX_HOLDS`] already).
    pub(super) fn hold(&mut self, field: Vec<u8>, state: Arc<LeaseState>) {
        if self.fields + self.adds.len() < MAX_HOLDS {
            self.adds.push((field, state));
        }
    }

    /// A recorded hold ended: its field goes.
    pub(super) fn ended(&mut self, field: Vec<u8>) {
        self.dels.push(field);
    }

    /// A hold whose lock moved to another node: its field goes from this
    /// record (or, when not written yet, is not written here at all).
    pub(super) fn moved_away(&mut self, field: &[u8]) {
        let before = self.adds.len();
        self.adds.retain(|(f, _)| f.as_slice() != field);
        if self.adds.len() == before {
            self.dels.push(field.to_vec());
        }
    }

    fn pace(&self) -> Duration {
        PACE.min(self.spec.ttl / 3)
    }

    /// When the record needs a write of its own, if it does: `holding`
    /// says whether the client holds something on the server.
    pub(super) fn due_at(&self, holding: bool, now: Instant) -> Option<Instant> {
        let pending = !self.dels.is_empty();
        if self.in_flight || !(holding || pending || self.used_at + self.spec.ttl > now) {
            return None;
        }
        if let Some(at) = self.no_key_until.filter(|&at| at > now) {
            return Some(at);
        }
        if let Some(sent) = self.sent_at.filter(|_| self.failed) {
            // Sent again at once, a write that fails at once (a server
            // down, a refused key) would go out back to back.
            return Some(sent + self.pace());
        }
        let Some(sent) = self.sent_at.filter(|_| self.written) else {
            return Some(self.used_at);
        };
        if !self.adds.is_empty() || !self.dels.is_empty() {
            Some(sent + self.pace())
        } else {
            Some(sent + self.spec.ttl / 3)
        }
    }

    /// The write that goes now, unless one is at the worker: everything
    /// pending, and the fixed fields when the record is not known to be
    /// there. `key_of` finds the record key on this server (from the prefix
    /// and the client id).
    pub(super) fn take(
        &mut self,
        key_of: impl FnOnce(&str, &str) -> Option<Vec<u8>>,
        now: Instant,
    ) -> Option<RecordWrite> {
        if self.in_flight {
            return None;
        }
        if self.key.is_none() {
            if self.no_key_until.is_some_and(|at| now < at) {
                return None;
            }
            self.key = key_of(&self.spec.prefix, &self.spec.client).map(Arc::from);
            // Without a key the write stays due: asked again at once, the
            // search would spin the scheduling thread until the slot map
            // changes. It waits for the pace instead.
            self.no_key_until = self.key.is_none().then(|| now + self.pace());
        }
        let key = self.key.clone()?;
        let adds: Vec<_> = std::mem::take(&mut self.adds)
            .into_iter()
            .filter(|(_, state)| !state.is_over())
            .collect();
        for (_, state) in &adds {
            state.mark_recorded();
        }
        self.fields = (self.fields + adds.len()).saturating_sub(self.dels.len());
        self.in_flight = true;
        self.sent_at = Some(now);
        Some(RecordWrite {
            spec: self.spec.clone(),
            counters: self.counters.clone(),
            key,
            statics: !self.written,
            adds,
            dels: std::mem::take(&mut self.dels),
        })
    }

    /// What became of `write`. `true` when the record was found gone: the
    /// caller then hands in every live hold on the server again
    /// ([`RecordState::hold`]), and the next write rebuilds it whole.
    pub(super) fn settle(&mut self, write: RecordWrite, result: Result<bool, Error>) -> bool {
        self.in_flight = false;
        self.failed = result.is_err();
        match result {
            Ok(_) if write.statics => {
                self.written = true;
                false
            }
            Ok(true) => false,
            Ok(false) => {
                self.written = false;
                self.fields = 0;
                self.adds.clear();
                true
            }
            Err(e) => {
                if matches!(e, Error::Permission(_))
                    && self
                        .counters
                        .record_refusals
                        .fetch_add(1, Ordering::Relaxed)
                        == 0
                {
                    log::warn!(
                        "redguard: the server refused this client's holder record ({e}): its \
                         locks work, but status and list show no host, pid or program for \
                         them; grant the ACL user the record keys (~{prefix}*)",
                        e = e.chain(),
                        prefix = self.spec.prefix
                    );
                }
                log::debug!(
                    "redguard: could not write holder record {:?}: {e}",
                    String::from_utf8_lossy(&write.key),
                    e = e.chain()
                );
                if e.is_redirect() {
                    self.key = None;
                }
                self.fields = self.fields.saturating_sub(write.adds.len());
                self.adds.extend(write.adds);
                self.dels.extend(write.dels);
                false
            }
        }
    }

    /// The record key, when known: deleted when the client goes.
    pub(super) fn key(&self) -> Option<&Arc<[u8]>> {
        self.key.as_ref().filter(|_| self.sent_at.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::ClientId;

    fn state(now: Instant) -> Arc<LeaseState> {
        Arc::new(LeaseState::since(
            now,
            now + Duration::from_secs(30),
            Arc::new(Counters::default()),
            crate::lost::HoldKind::Reentrant,
        ))
    }

    /// A record with a 30 s lease, of a new client.
    fn record(now: Instant) -> RecordState {
        let spec = Arc::new(RecordSpec::new(
            &ClientId::new_random(),
            None,
            crate::RecordCommand::Masked,
            Duration::from_secs(30),
        ));
        RecordState::new(spec, Arc::new(Counters::default()), now)
    }

    #[test]
    fn a_server_without_a_record_key_is_asked_again_only_after_the_pace() {
        let now = Instant::now();
        let mut r = record(now);
        let mut searches = 0;
        let mut none = |_: &str, _: &str| {
            searches += 1;
            None
        };
        assert!(r.take(&mut none, now).is_none());
        assert_eq!(r.due_at(true, now), Some(now + PACE), "not due at once");
        let soon = now + PACE / 2;
        assert!(r.take(&mut none, soon).is_none());
        assert_eq!(searches, 1, "no second search within the pace");
        let later = now + PACE;
        let w = r.take(|_, _| Some(b"k".to_vec()), later).unwrap();
        assert!(w.statics);
        assert!(!r.settle(w, Ok(false)));
        assert_eq!(r.due_at(true, later), Some(later + Duration::from_secs(10)));
    }

    #[test]
    fn first_write_is_whole_then_pending_holds_then_refreshes() {
        let now = Instant::now();
        let mut r = record(now);
        assert_eq!(r.due_at(true, now), Some(now));
        let held = state(now);
        r.hold(b"f1".to_vec(), held.clone());
        let w = r.take(|_, _| Some(b"k".to_vec()), now).unwrap();
        assert!(w.statics && w.adds.len() == 1 && held.is_recorded());
        assert_eq!(r.due_at(true, now), None, "one write at a time");
        assert!(!r.settle(w, Ok(false)), "a new record is no loss");
        // Nothing pending: a refresh a third of the lease later.
        assert_eq!(r.due_at(true, now), Some(now + Duration::from_secs(10)));
        // A hold ended: within the pace.
        r.ended(b"f1".to_vec());
        assert_eq!(r.due_at(true, now), Some(now + PACE));
        let w = r.take(|_, _| None, now).unwrap();
        assert!(!w.statics && w.dels.len() == 1);
        // The record was gone: rebuilt whole next time.
        assert!(r.settle(w, Ok(false)));
        assert_eq!(r.due_at(true, now), Some(now));
        // A client that holds nothing and took nothing for a lease lets it
        // expire.
        assert_eq!(r.due_at(false, now + Duration::from_secs(31)), None);
    }

    #[test]
    fn a_failed_write_is_sent_again_and_ended_holds_are_not() {
        let now = Instant::now();
        let spec = Arc::new(RecordSpec::new(
            &ClientId::new_random(),
            None,
            crate::RecordCommand::Masked,
            Duration::from_secs(3),
        ));
        let mut r = RecordState::new(spec, Arc::new(Counters::default()), now);
        let (live, over) = (state(now), state(now));
        r.hold(b"live".to_vec(), live);
        r.hold(b"over".to_vec(), over.clone());
        over.mark_released();
        let w = r.take(|_, _| Some(b"k".to_vec()), now).unwrap();
        assert_eq!(w.adds.len(), 1);
        r.settle(
            w,
            Err(Error::Timeout {
                kind: crate::error::TimeoutKind::Reply,
                limit: std::time::Duration::from_secs(1),
                server: None,
                about: None,
            }),
        );
        let w = r.take(|_, _| None, now).unwrap();
        assert!(w.statics && w.adds.len() == 1);
    }

    #[test]
    fn a_failed_write_waits_for_the_pace() {
        let now = Instant::now();
        let mut r = record(now);
        r.hold(b"f1".to_vec(), state(now));
        // The first, whole write fails (the server went down).
        let w = r.take(|_, _| Some(b"k".to_vec()), now).unwrap();
        assert!(w.statics);
        r.settle(
            w,
            Err(Error::Timeout {
                kind: crate::error::TimeoutKind::Reply,
                limit: std::time::Duration::from_secs(1),
                server: None,
                about: None,
            }),
        );
        assert_eq!(r.due_at(true, now), Some(now + PACE), "sent again at once");
        // A later write that fails waits as long.
        let later = now + PACE;
        let w = r.take(|_, _| None, later).unwrap();
        r.settle(
            w,
            Err(Error::Timeout {
                kind: crate::error::TimeoutKind::Reply,
                limit: std::time::Duration::from_secs(1),
                server: None,
                about: None,
            }),
        );
        assert_eq!(r.due_at(true, later), Some(later + PACE));
        // Once one goes through, the record is due as usual.
        let w = r.take(|_, _| None, later + PACE).unwrap();
        assert!(w.statics && w.adds.len() == 1);
        assert!(!r.settle(w, Ok(false)));
        assert_eq!(
            r.due_at(true, later + PACE),
            Some(later + PACE + Duration::from_secs(10))
        );
    }
}
