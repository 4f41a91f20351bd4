//! The renewal I/O worker of one server ("redguard-renew"): a long-lived
//! thread, fed jobs over a channel by the scheduling thread, that does all
//! of the watchdog's network I/O with that server. A frozen server blocks
//! only its own worker.
//!
//! Besides the jobs, the worker watches the server while the watchdog holds
//! leases there: it keeps one idle connection open and looks at it between
//! jobs. The server closing it (a restart, a failover, a killed client), or
//! a new `run_id` when it connects again, is reported at once as
//! [`Report::Suspect`], so that every lease held there is checked without
//! waiting for its next renewal.
//!
//! It ends when the scheduling thread drops its job sender (after the jobs
//! already sent), or when its server's connections are gone for good (its
//! client and every entry using them dropped).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::retried::{Retry, Step};
use super::{Entry, Outcome, Server};
use crate::connection::Source;
use crate::error::{Error, Result};
use crate::lease::Counters;
use crate::lost::LossReason;
use crate::record::{self, RecordWrite};
use crate::retry::Backoff;
use crate::scripts::{self, Renewal, SyncRenewal};

/// A lease found gone, before [`Worker::explain`] says why.
const GONE: Outcome = Outcome::Gone(LossReason::RenewalRefused);

/// How often an idle worker looks at its watch connection: the delay, at
/// most, between a server closing it and the check of its leases.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How long one look at the watch connection may block. The socket layer
/// rounds any read timeout up to a scheduler tick (1 to 4 ms), so this is
/// the cost of a look, not of a round trip.
const LOOK: Duration = Duration::from_micros(100);
/// How often a worker without work checks whether its server's connections
/// are gone for good.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Work for a server's worker.
pub(super) enum Job {
    /// Renew `entries` (all on this server) in round trips of at most
    /// `per_trip` renewals, `renew_batch` per script call.
    Renew {
        entries: Vec<Entry>,
        per_trip: usize,
        /// A write of the client's holder record, sent in the first round
        /// trip (alone when no renewal round trip can carry it).
        record: Option<RecordWrite>,
    },
    /// Write the client's holder record.
    Record(RecordWrite),
    /// Delete a departed client's holder record. `done` as for `Release`.
    Forget {
        key: Arc<[u8]>,
        source: Arc<Source>,
        done: Option<Sender<()>>,
    },
    /// Release the locks of a client that went away. `done` is dropped when
    /// the job is over, which is what [`super::client_gone`] waits for.
    Release {
        entries: Vec<Entry>,
        done: Option<Sender<()>>,
    },
    /// Keep (or stop keeping) a watch connection open.
    Watch(bool),
    /// Retry an operation that met a failover (see [`retry`]).
    Retry(Retry),
}

/// What a worker tells the scheduling thread.
pub(super) enum Report {
    /// A batch of renewals is back.
    Renewed(Done),
    /// The server closed the watch connection or restarted: check every
    /// lease held there now.
    Suspect(Server),
    /// A holder-record write is back: whether the record was there before.
    Recorded {
        server: Server,
        write: RecordWrite,
        result: Result<bool>,
    },
}

/// A batch of renewals back from the worker.
pub(super) struct Done {
    pub(super) server: Server,
    /// The job's last batch: the server takes new renewals again.
    pub(super) last: bool,
    pub(super) sent: Instant,
    pub(super) results: Vec<(Entry, Outcome)>,
}

/// Starts the worker of `server`, whose connections come from `source`.
pub(super) fn spawn(
    server: Server,
    source: &Arc<Source>,
    reports: Sender<Report>,
) -> std::io::Result<Sender<Job>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut worker = Worker {
        server,
        source: Arc::downgrade(source),
        jobs: rx,
        reports,
        retries: Vec::new(),
        retry_at: None,
        retry_backoff: Backoff::waiting_call(),
        watch: Watch {
            wanted: false,
            conn: None,
            run_id: None,
            next_look: None,
            failures: 0,
            backoff: Backoff::watch_connection(WATCH_EVERY),
        },
        renewing: false,
        restarted_at: None,
        evicted_keys: None,
        clock_offset: None,
    };
    std::thread::Builder::new()
        .name("redguard-renew".into())
        .spawn(move || {
            // Its calls are retried on its own schedule.
            crate::connection::budget::set_call(crate::connection::budget::Call::Background);
            worker.run();
        })?;
    Ok(tx)
}

struct Watch {
    wanted: bool,
    conn: Option<redis::Connection>,
    /// The server's `run_id` when last connected.
    run_id: Option<String>,
    next_look: Option<Instant>,
    /// Failed attempts to open it since it last worked.
    failures: u32,
    /// Pauses between those attempts.
    backoff: Backoff,
}

struct Worker {
    server: Server,
    source: Weak<Source>,
    jobs: Receiver<Job>,
    reports: Sender<Report>,
    watch: Watch,
    /// A renewal job is under way: the scheduling thread waits for its
    /// last batch.
    renewing: bool,
    /// When the server was last seen to have restarted (a new `run_id`, or
    /// back after being unreachable): losses of leases renewed before it
    /// are put down to the restart.
    restarted_at: Option<Instant>,
    /// The server's `evicted_keys` when last read: a lock key found missing
    /// after it grew was evicted.
    evicted_keys: Option<u64>,
    /// The server's clock minus this machine's (ms), for the times in
    /// holder records; measured once, with `TIME`.
    clock_offset: Option<i64>,
    /// Operations being retried, all in one round after one pause.
    retries: Vec<Retry>,
    /// When their next round starts.
    retry_at: Option<Instant>,
    /// Pauses between rounds that failed.
    retry_backoff: Backoff,
}

impl Worker {
    fn run(&mut self) {
        loop {
            let mut deadline = match self.watch.next_look {
                Some(at) if self.watch.wanted => at,
                _ => Instant::now() + IDLE_CHECK,
            };
            if let Some(at) = self.retry_wake() {
                deadline = deadline.min(at);
            }
            match self.jobs.recv_deadline(deadline) {
                Ok(job) => {
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.job(job);
                    }));
                    if ran.is_err() {
                        log::error!("redguard watchdog: a renewal job panicked; continuing");
                        if std::mem::take(&mut self.renewing) {
                            // Its entries are gone with it (their guards see
                            // the lease run out on their own clock), but the
                            // server must take renewals again.
                            self.report_done(Instant::now(), Vec::new(), true);
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    if self.source.strong_count() == 0 {
                        // Nothing can send work for this server any more.
                        return;
                    }
                }
            }
            if self.watch.wanted && self.watch.next_look.is_none_or(|at| at <= Instant::now()) {
                self.look();
            }
            if self.retry_wake().is_some_and(|at| at <= Instant::now()) {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.retry_round(Instant::now());
                }));
                if ran.is_err() {
                    log::error!("redguard watchdog: a retry panicked; continuing");
                }
            }
        }
    }

    /// When the retries need the thread next: their next round, or the
    /// end of a lease among them (given up then, at once).
    fn retry_wake(&self) -> Option<Instant> {
        let first_end = self.retries.iter().map(|r| r.until).min()?;
        Some(self.retry_at.map_or(first_end, |at| at.min(first_end)))
    }

    /// Gives up the retries whose lease is over, and when a round is due,
    /// tries the others in turn. A failover error that shows the server
    /// unreachable ends the round: the rest would only cost one more
    /// connection attempt each. Another round follows after a pause that
    /// grows while rounds fail, up to [`MAX_PAUSE`](crate::retry::MAX_PAUSE) or a sixth of
    /// the shortest lease.
    fn retry_round(&mut self, now: Instant) {
        let due = self.retry_at.is_none_or(|at| at <= now);
        let mut kept = Vec::with_capacity(self.retries.len());
        let mut stop = !due;
        let mut answered = false;
        for mut retry in std::mem::take(&mut self.retries) {
            if now >= retry.until {
                retry.give_up();
                continue;
            }
            if stop {
                kept.push(retry);
                continue;
            }
            match retry.attempt(now) {
                Step::Finished => answered = true,
                Step::Again { unreachable } => {
                    stop = unreachable;
                    kept.push(retry);
                }
            }
        }
        self.retries = kept;
        if !due {
            return;
        }
        if answered {
            self.retry_backoff.reset();
        }
        self.retry_at = match self.retries.iter().map(|r| r.lease).min() {
            Some(shortest) => {
                let pause = self
                    .retry_backoff
                    .next_pause()
                    .min(shortest / 6)
                    .max(Duration::from_millis(1));
                Some(Instant::now() + pause)
            }
            None => {
                self.retry_backoff.reset();
                None
            }
        };
    }

    fn job(&mut self, job: Job) {
        match job {
            Job::Renew {
                entries,
                per_trip,
                record,
            } => {
                self.renewing = true;
                let record = self.renew(entries, per_trip, record);
                self.renewing = false;
                if let Some(write) = record {
                    self.record(write);
                }
            }
            Job::Record(write) => self.record(write),
            Job::Forget { key, source, done } => {
                let deleted = source.with_node_conn(self.server.1, |conn| {
                    redis::cmd("DEL")
                        .arg(&key[..])
                        .query::<i64>(conn)
                        .map_err(Error::redis)
                });
                if let Err(e) = deleted {
                    log::debug!(
                        "redguard: could not delete the holder record at shutdown: {e}",
                        e = e.chain()
                    );
                }
                drop(done);
            }
            Job::Release { entries, done } => {
                release_gone(entries);
                drop(done);
            }
            Job::Retry(retry) => {
                // The first attempt just failed: the next waits a pause,
                // with the other retries of this server.
                if self.retry_at.is_none() {
                    let pause = self
                        .retry_backoff
                        .next_pause()
                        .min(retry.lease / 6)
                        .max(Duration::from_millis(1));
                    self.retry_at = Some(Instant::now() + pause);
                }
                self.retries.push(retry);
            }
            Job::Watch(on) => {
                self.watch.wanted = on;
                if on {
                    self.watch.next_look = None;
                } else {
                    self.watch.conn = None;
                }
            }
        }
    }

    /// Renews `entries` in batches and sends each batch's outcome back.
    /// `record` rides on the first round trip of plain lock renewals;
    /// returned when there was none.
    fn renew(
        &mut self,
        entries: Vec<Entry>,
        per_trip: usize,
        mut record: Option<RecordWrite>,
    ) -> Option<RecordWrite> {
        let Some(first) = entries.first() else {
            self.report_done(Instant::now(), Vec::new(), true);
            return record;
        };
        let per_call = first.renew_batch.max(1);
        let per_trip = per_trip.max(per_call);
        let source = first.source.clone();
        let counters = first.counters.clone();
        let node = self.server.1;
        let cluster = source.is_cluster();
        let mut entries = entries;
        if cluster {
            // One script call per slot: neighbours in slot order share it.
            entries.sort_by_cached_key(|e| crate::keys::slot(&e.key));
        }
        let mut entries = entries.into_iter().peekable();
        // Set when a round trip could not reach the server: the chunks
        // after it fail the same way without another connection attempt.
        let mut unreachable: Option<Arc<Error>> = None;
        while entries.peek().is_some() {
            let chunk: Vec<Entry> = entries.by_ref().take(per_trip).collect();
            if let Some(e) = &unreachable {
                let sent = Instant::now();
                let results = chunk
                    .into_iter()
                    .map(|entry| (entry, Outcome::Failed(e.clone())))
                    .collect();
                let last = entries.peek().is_none();
                if !self.report_done(sent, results, last) {
                    return record;
                }
                continue;
            }
            // Fixed leases come only with a check: they are looked up, not
            // extended.
            let (chunk, fixed): (Vec<Entry>, Vec<Entry>) = chunk.into_iter().partition(|e| e.renew);
            // Holds of read-write locks and expiring permits have scripts of
            // their own, pipelined apart.
            let (chunk, synced): (Vec<Entry>, Vec<Entry>) =
                chunk.into_iter().partition(|e| e.sync.is_none());
            let sent = Instant::now();
            let mut results = Vec::with_capacity(chunk.len() + fixed.len() + synced.len());
            if !synced.is_empty() {
                results.extend(renew_acked(
                    &source,
                    node,
                    &counters,
                    synced,
                    |conn, synced| {
                        let renewals: Vec<SyncRenewal<'_>> = synced
                            .iter()
                            .filter_map(|e| {
                                Some(SyncRenewal {
                                    hold: e.sync.as_ref()?,
                                    key: &e.key,
                                    holder: &e.holder,
                                    lease_ms: e.lease_ms(),
                                })
                            })
                            .collect();
                        scripts::renew_sync_batch(conn, &renewals)
                    },
                ));
            }
            if !chunk.is_empty() {
                let write = record.take();
                let mut offset = self.clock_offset;
                let mut written = None;
                results.extend(renew_acked(
                    &source,
                    node,
                    &counters,
                    chunk,
                    |conn, chunk| {
                        let renewals: Vec<Renewal<'_>> = chunk
                            .iter()
                            .map(|e| Renewal {
                                key: &e.key,
                                holder: &e.holder,
                                lease_ms: e.lease_ms(),
                            })
                            .collect();
                        let extra = match &write {
                            Some(w) => w.commands(clock(conn, w, &mut offset)?),
                            None => Vec::new(),
                        };
                        let (replies, extra) =
                            scripts::renew_batch(conn, &renewals, per_call, cluster, &extra)?;
                        written = Some(RecordWrite::existed(&extra));
                        Ok(replies)
                    },
                ));
                self.clock_offset = offset;
                if let Some(write) = write {
                    let result = written.unwrap_or_else(|| {
                        Err(Error::Protocol("the renewal round trip failed".into()))
                    });
                    self.report_record(write, result);
                }
            }
            if !fixed.is_empty() {
                let replies = source.with_node_conn(node, |conn| still_held(conn, &fixed));
                results.extend(outcomes(fixed, replies, |held| {
                    if held { Outcome::Held } else { GONE }
                }));
            }
            if cluster {
                results = reroute(&source, results);
            }
            self.explain(&source, sent, &mut results);
            unreachable = results.iter().find_map(|(_, o)| match o {
                Outcome::Failed(e) if e.is_connection() => Some(e.clone()),
                _ => None,
            });
            let last = entries.peek().is_none();
            if !self.report_done(sent, results, last) {
                return record;
            }
        }
        record
    }

    /// Writes a holder record in a round trip of its own (two the first
    /// time the server's clock is needed) and reports the outcome.
    fn record(&mut self, write: RecordWrite) {
        let Some(source) = self.source.upgrade() else {
            self.report_record(write, Err(Error::Shutdown));
            return;
        };
        let mut offset = self.clock_offset;
        write
            .counters
            .record_round_trips
            .fetch_add(1, Ordering::Relaxed);
        let result = source.with_node_conn(self.server.1, |conn| {
            let cmds = write.commands(clock(conn, &write, &mut offset)?);
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            let replies: Vec<redis::Value> = pipe.query(conn).map_err(Error::redis)?;
            RecordWrite::existed(&replies)
        });
        self.clock_offset = offset;
        self.report_record(write, result);
    }

    fn report_record(&self, write: RecordWrite, result: Result<bool>) {
        let _ = self.reports.send(Report::Recorded {
            server: self.server,
            write,
            result,
        });
    }

    /// Sends a batch back; `false` when the scheduling thread is gone. Its
    /// entries then have no one to renew them: those of clients that went
    /// away are released here, as they asked.
    fn report_done(&self, sent: Instant, results: Vec<(Entry, Outcome)>, last: bool) -> bool {
        let done = Done {
            server: self.server,
            last,
            sent,
            results,
        };
        match self.reports.send(Report::Renewed(done)) {
            Ok(()) => true,
            Err(crossbeam_channel::SendError(report)) => {
                if let Report::Renewed(done) = report {
                    let gone = done
                        .results
                        .into_iter()
                        .map(|(entry, _)| entry)
                        .filter(|e| e.counters.gone.load(Ordering::Acquire))
                        .collect();
                    release_gone(gone);
                }
                false
            }
        }
    }

    /// Looks at the watch connection (opening it when needed) and reports
    /// the server when it closed the connection or came back as a new
    /// process.
    fn look(&mut self) {
        let now = Instant::now();
        self.watch.next_look = Some(now + WATCH_EVERY);
        if let Some(conn) = self.watch.conn.as_mut() {
            let closed = {
                let mut pubsub = conn.as_pubsub();
                let _ = pubsub.set_read_timeout(Some(LOOK));
                match pubsub.get_message() {
                    Err(e) if e.is_timeout() => None,
                    // Nothing is ever sent on this connection, so nothing
                    // should come; whatever it was, it is still there.
                    Ok(_) => None,
                    Err(e) => Some(Error::redis(e)),
                }
            };
            let Some(e) = closed else {
                return;
            };
            log::debug!(
                "redguard watchdog: the watch connection closed ({e}); checking every lease there",
                e = e.chain()
            );
            self.watch.conn = None;
            self.watch.failures = 0;
            self.suspect();
        }
        self.reconnect(now);
    }

    fn reconnect(&mut self, now: Instant) {
        let Some(source) = self.source.upgrade() else {
            return;
        };
        let opened = source.node_connection(self.server.1).and_then(|mut conn| {
            // Every default section: `server` for the run_id, `stats` for
            // the eviction count. An ACL user without `INFO` keeps the
            // connection all the same: its closing still tells of a
            // restart, and opening it again at every look would cost the
            // server a connection every half second for the whole hold.
            match redis::cmd("INFO")
                .query::<String>(&mut conn)
                .map_err(Error::redis)
            {
                Ok(info) => Ok((conn, run_id(&info), evicted_keys(&info))),
                // Only a refusal: any other error stays one, as a server
                // that answers INFO with an error may be one that restarted.
                Err(Error::Permission(_)) => Ok((conn, None, None)),
                Err(e) => Err(e),
            }
        });
        drop(source);
        match opened {
            Ok((conn, id, evicted)) => {
                self.evicted_keys = evicted;
                self.watch.conn = Some(conn);
                // A new process; or, with nothing to compare, a server that
                // could not be reached since leases were taken there.
                let restarted = match (&self.watch.run_id, &id) {
                    (Some(old), Some(new)) => old != new,
                    (None, _) => self.watch.failures > 0,
                    (Some(_), None) => false,
                };
                self.watch.failures = 0;
                self.watch.backoff.reset();
                if id.is_some() {
                    self.watch.run_id = id;
                }
                if restarted {
                    self.restarted_at = Some(now);
                    log::debug!(
                        "redguard watchdog: the server restarted or was unreachable; checking every lease there"
                    );
                    self.suspect();
                }
            }
            Err(e) => {
                // The sooner the server is back the sooner its leases are
                // checked, but a server that stays down must not be
                // hammered: the pause grows to half a second.
                self.watch.failures = self.watch.failures.saturating_add(1);
                let pause = self.watch.backoff.next_pause();
                self.watch.next_look = Some(now + pause);
                log::debug!(
                    "redguard watchdog: cannot open the watch connection ({e}); again in {pause:?}",
                    e = e.chain()
                );
            }
        }
    }

    fn suspect(&self) {
        let _ = self.reports.send(Report::Suspect(self.server));
    }

    /// Says why each lease of `results` found gone was lost, with one more
    /// round trip (only when some were): the server's `INFO` (a new
    /// `run_id`: a restart; a grown `evicted_keys`: evictions) and whether
    /// each key still exists. A loss of a lease last renewed before a
    /// restart is the restart's; a missing key on a server that evicted
    /// keys meanwhile was evicted; a renewal sent after the lease ran out
    /// on this client's clock came too late; anything else (deleted, taken,
    /// expired on the server) was refused.
    fn explain(&mut self, source: &Source, sent: Instant, results: &mut [(Entry, Outcome)]) {
        let gone: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, (_, o))| matches!(o, Outcome::Gone(_)))
            .map(|(i, _)| i)
            .collect();
        if gone.is_empty() {
            return;
        }
        let probe = source.with_node_conn(self.server.1, |conn| {
            let mut pipe = redis::pipe();
            pipe.cmd("INFO");
            for &i in &gone {
                pipe.cmd("EXISTS").arg(&results[i].0.key[..]);
            }
            pipe.ignore_errors();
            let replies: Vec<redis::Value> = pipe.query(conn).map_err(Error::redis)?;
            Ok(replies)
        });
        let (mut info, mut exists) = (None, Vec::new());
        if let Ok(replies) = probe {
            let mut replies = replies.into_iter();
            info = replies.next().and_then(|v| match v {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                redis::Value::VerbatimString { text, .. } => Some(text),
                _ => None,
            });
            exists = replies
                .map(|v| !matches!(v, redis::Value::Int(0)))
                .collect();
        }
        let now = Instant::now();
        let mut evicted = false;
        if let Some(info) = &info {
            let id = run_id(info);
            if let (Some(old), Some(new)) = (&self.watch.run_id, &id)
                && old != new
            {
                // A restart the watch connection has not seen yet: the
                // other leases held there are checked too.
                self.watch.run_id = id;
                self.restarted_at = Some(now);
                self.suspect();
            }
            let count = evicted_keys(info);
            evicted = matches!((self.evicted_keys, count), (Some(a), Some(b)) if b > a);
            if count.is_some() {
                self.evicted_keys = count;
            }
        }
        for (n, &i) in gone.iter().enumerate() {
            let (entry, outcome) = &mut results[i];
            let missing = exists.get(n).is_some_and(|e| !e);
            let reason = if self.restarted_at.is_some_and(|at| at > entry.renewed_at) {
                LossReason::Restart
            } else if missing && evicted {
                LossReason::Evicted
            } else if entry.state.valid_until() <= sent {
                LossReason::DeadlinePassed
            } else {
                LossReason::RenewalRefused
            };
            *outcome = Outcome::Gone(reason);
        }
    }
}

/// Sends again, one by one through the cluster's routing, the renewals and
/// checks that a slot move or a failover redirected (`MOVED`, `ASK`,
/// `TRYAGAIN`): only the affected keys, so that a resharding costs no
/// failed renewal.
/// A node that refused the connection is gone (killed, its replica not yet
/// promoted, or promoted already): the slot map is asked for again, once,
/// so that the watchdog's next retry of those renewals goes to the new
/// owner instead of the dead node until the leases run out.
fn reroute(source: &Source, results: Vec<(Entry, Outcome)>) -> Vec<(Entry, Outcome)> {
    let gone = results
        .iter()
        .any(|(_, o)| matches!(o, Outcome::Failed(e) if e.is_refusal()));
    if gone {
        source.refresh_topology();
    }
    results
        .into_iter()
        .map(|(entry, outcome)| match outcome {
            Outcome::Failed(e) if e.is_redirect() => {
                let outcome = source
                    .with_conn(&entry.key, |conn| renew_one(conn, &entry))
                    .unwrap_or_else(|e| Outcome::Failed(Arc::new(e)));
                (entry, outcome)
            }
            other => (entry, other),
        })
        .collect()
}

/// One entry's renewal (or check, for a fixed lease) on its own.
fn renew_one(conn: &mut redis::Connection, e: &Entry) -> Result<Outcome> {
    let answer = |held: bool, yes: Outcome| if held { yes } else { GONE };
    let reply = if !e.renew {
        still_held(conn, std::slice::from_ref(e))?
            .pop()
            .map(|r| r.map(|held| answer(held, Outcome::Held)))
    } else if let Some(hold) = &e.sync {
        let one = [SyncRenewal {
            hold,
            key: &e.key,
            holder: &e.holder,
            lease_ms: e.lease_ms(),
        }];
        scripts::renew_sync_batch(conn, &one)?
            .pop()
            .map(|r| r.map(|renewed| answer(renewed, Outcome::Renewed)))
    } else {
        Some(
            scripts::renew(conn, &e.key, &e.holder, e.lease_ms())
                .map(|renewed| answer(renewed, Outcome::Renewed)),
        )
    };
    match reply {
        Some(Ok(outcome)) => Ok(outcome),
        Some(Err(Error::WrongType { .. })) => Ok(GONE),
        Some(Err(e)) => Err(e),
        None => Err(Error::Protocol("no reply to a renewal".into())),
    }
}

/// One `WAIT` follows a batch of renewals, on its connection (see
/// `replicas`), for the most any of its entries asks.
fn batch_acks(entries: &[Entry]) -> crate::replicas::ReplicaAcks {
    entries
        .iter()
        .map(|e| e.acks)
        .max_by_key(|a| (a.min, a.timeout))
        .unwrap_or_default()
}

/// Renews `entries` in one round trip with `renew` (it builds the batch
/// from the entries and sends it on the connection), followed by one
/// `WAIT` on the same connection, and counts the round trip. A renewal that
/// too few replicas acknowledged extended the lease on the master only: a
/// failover could bring back the shorter lease, so it fails (with
/// [`Error::NotReplicated`]) and is retried, and the holder's lease does
/// not count as extended.
fn renew_acked(
    source: &Source,
    node: crate::connection::NodeId,
    counters: &Counters,
    entries: Vec<Entry>,
    mut renew: impl FnMut(&mut redis::Connection, &[Entry]) -> Result<Vec<Result<bool>>>,
) -> Vec<(Entry, Outcome)> {
    counters
        .renewals
        .fetch_add(entries.len() as u64, Ordering::Relaxed);
    crate::metrics::renewals(entries.len() as u64);
    counters.renewal_round_trips.fetch_add(1, Ordering::Relaxed);
    let (acks, response_timeout) = (batch_acks(&entries), first_response_timeout(&entries));
    let (replies, acked) = match source.with_node_conn(node, |conn| {
        let replies = renew(conn, &entries)?;
        let acked = acks.wait(conn, response_timeout)?;
        Ok((replies, acked))
    }) {
        Ok((replies, acked)) => (Ok(replies), acked),
        Err(e) => (Err(e), None),
    };
    let renewed = outcomes(entries, replies, |renewed| {
        if renewed { Outcome::Renewed } else { GONE }
    });
    renewed
        .into_iter()
        .map(|(entry, outcome)| {
            let outcome = match outcome {
                Outcome::Renewed if entry.acks.short(acked) => {
                    Outcome::Failed(Arc::new(entry.acks.not_replicated(&entry.key, acked)))
                }
                other => other,
            };
            (entry, outcome)
        })
        .collect()
}

/// The response timeout `WAIT` adds to (the same for every entry of one
/// client; entries of one server may come from several clients).
fn first_response_timeout(entries: &[Entry]) -> std::time::Duration {
    entries
        .iter()
        .map(|e| e.response_timeout)
        .max()
        .unwrap_or(std::time::Duration::from_secs(3))
}

/// Pairs entries with the replies of their round trip. A round trip that
/// failed as a whole fails every entry in it the same way, and the error
/// keeps its kind.
fn outcomes(
    entries: Vec<Entry>,
    replies: Result<Vec<Result<bool>>>,
    answer: impl Fn(bool) -> Outcome,
) -> Vec<(Entry, Outcome)> {
    match replies {
        Ok(replies) => entries
            .into_iter()
            .zip(replies)
            .map(|(entry, reply)| {
                let outcome = match reply {
                    Ok(yes) => answer(yes),
                    // Another type now lives at the key: the lock is gone.
                    Err(Error::WrongType { .. }) => GONE,
                    Err(e) => Outcome::Failed(Arc::new(e)),
                };
                (entry, outcome)
            })
            .collect(),
        Err(e) => {
            let e = Arc::new(e);
            entries
                .into_iter()
                .map(|entry| (entry, Outcome::Failed(e.clone())))
                .collect()
        }
    }
}

/// Whether each entry's holder still holds its lock (`HEXISTS`), in one
/// pipelined round trip; nothing is changed.
fn still_held(conn: &mut redis::Connection, entries: &[Entry]) -> Result<Vec<Result<bool>>> {
    let now = Instant::now();
    let build = || {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for e in entries {
            match e.sync.as_deref() {
                // A permit is held while its id is in the lease set.
                Some(scripts::SyncHold::Permit { timeouts, id, .. }) => {
                    pipe.cmd("ZSCORE").arg(&timeouts[..]).arg(&id[..]);
                }
                // A read hold looked up before its end: kept as granted.
                Some(scripts::SyncHold::Read { timeout_prefix, .. }) if e.recheck.is_some() => {
                    let left = e.state.valid_until().saturating_duration_since(now);
                    pipe.add_command(scripts::rwlock::read_keep_cmd(
                        &e.key,
                        timeout_prefix,
                        left,
                        &e.holder,
                    ));
                }
                _ => {
                    pipe.cmd("HEXISTS").arg(&e.key[..]).arg(&*e.holder);
                }
            }
        }
        pipe
    };
    let mut replies: Vec<redis::Value> = build().query(conn).map_err(Error::redis)?;
    let noscript =
        |v: &redis::Value| matches!(v, redis::Value::ServerError(e) if e.code() == "NOSCRIPT");
    if replies.iter().any(noscript) {
        // The server lost its script cache (or never had it): load, ask again.
        scripts::rwlock::load_read_keep(conn)?;
        replies = build().query(conn).map_err(Error::redis)?;
    }
    if replies.len() != entries.len() {
        return Err(Error::Protocol(format!(
            "{} replies to {} lookups",
            replies.len(),
            entries.len()
        )));
    }
    Ok(replies
        .into_iter()
        .zip(entries)
        .map(|(reply, e)| match reply {
            redis::Value::Int(n) => Ok(n == 1),
            redis::Value::Nil => Ok(false),
            redis::Value::BulkString(_) | redis::Value::Double(_) => Ok(true),
            redis::Value::ServerError(err) => {
                Err(Error::from_redis(redis::RedisError::from(err), &e.key))
            }
            other => Err(Error::Protocol(format!(
                "unexpected lookup reply {other:?}"
            ))),
        })
        .collect())
}

/// The server's clock minus this machine's (ms) when `write` needs it:
/// `offset` when known, else measured on `conn` with `TIME` (one round
/// trip) and kept there.
fn clock(
    conn: &mut redis::Connection,
    write: &RecordWrite,
    offset: &mut Option<i64>,
) -> Result<i64> {
    if let Some(known) = *offset {
        return Ok(known);
    }
    if !write.needs_clock() {
        return Ok(0);
    }
    let before = std::time::SystemTime::now();
    let time: redis::Value = redis::cmd("TIME").query(conn).map_err(Error::redis)?;
    let measured = record::clock_offset(&time, before, std::time::SystemTime::now())?;
    *offset = Some(measured);
    Ok(measured)
}

/// The `run_id` line of an `INFO server` reply.
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

/// The `evicted_keys` line of an `INFO stats` reply.
fn evicted_keys(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Releases the locks of entries whose client went away (when it asked for
/// that), then marks each lost. After the first failure that breaks the
/// connection the rest are left to their leases, so that a dead server
/// costs one timeout, not one per lock.
pub(super) fn release_gone(entries: Vec<Entry>) {
    let mut broken = false;
    for entry in entries {
        let release = entry.counters.release_when_gone.load(Ordering::Acquire);
        if release && !broken && !entry.finished() {
            let released = entry
                .source
                .with_conn(&entry.key, |conn| match &entry.sync {
                    Some(hold) => scripts::release_sync_hold(
                        conn,
                        scripts::Publish::of(
                            entry.source.sharded_publish(&entry.key),
                            entry.classic_publish,
                        ),
                        hold,
                        &entry.key,
                        &entry.channel,
                        &entry.holder,
                    ),
                    None => scripts::release_holder(
                        conn,
                        scripts::Publish::of(
                            entry.source.sharded_publish(&entry.key),
                            entry.classic_publish,
                        ),
                        &entry.key,
                        &entry.channel,
                        entry.queue.as_deref(),
                        &entry.holder,
                    ),
                });
            if let Err(e) = released {
                broken = e.breaks_connection();
                log::warn!(
                    "redguard: could not release lock {:?} held by {} at client shutdown: {e}",
                    entry.name(),
                    entry.holder,
                    e = e.chain()
                );
            }
        }
        entry.state.mark_lost();
        entry
            .counters
            .watchdog_entries
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_is_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:1\r\n";
        assert_eq!(run_id(info).as_deref(), Some("abc123"));
        assert_eq!(run_id("# Server\r\n"), None);
        let stats = "# Stats\r\nexpired_keys:3\r\nevicted_keys:17\r\n";
        assert_eq!(evicted_keys(stats), Some(17));
        assert_eq!(evicted_keys(info), None);
    }
}
