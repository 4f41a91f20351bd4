//! Run-once keys: [`Client::once`] and friends, [`Once`], [`OnceGuard`],
//! [`Outcome`]. The semantics and the keys are documented on [`Once`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::Client;
use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::holder::HolderId;
use crate::keys;
use crate::lease::{MAX_LEASE, MIN_LEASE, lease_ms};
use crate::lock::FencingToken;
use crate::lock::{Lock, LockGuard};
use crate::lost::HoldKind;
use crate::scripts::once::{self as script, ATTEMPT_FIELDS, Claim, Forget};
use crate::scripts::record_read::Named;
use crate::scripts::{Acquire, Release};
use crate::wait::{Attempt, Wake, wait_loop};

/// The largest outcome [`OnceGuard::complete`] records: 1 MiB. A record is
/// read by every later caller; keep it to a receipt, an id or a status, and
/// store bulk results elsewhere.
pub const MAX_OUTCOME_LEN: usize = 1024 * 1024;

/// The longest a failed, abandoned or timed-out attempt is kept in the
/// last-attempt record: 7 days (or the run-once ttl, when shorter).
pub const MAX_FAILED_ATTEMPT_TTL: Duration = Duration::from_secs(7 * 86_400);

/// How the last attempt at a run-once key stands, in its last-attempt
/// record ([`OnceAttempt`]). Redisson has no run-once keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptState {
    /// The runner holds the claim and works.
    Running,
    /// The runner recorded its outcome ([`OnceGuard::complete`]).
    Done,
    /// The work failed and the runner said so ([`OnceGuard::end_attempt`]).
    Failed,
    /// The runner gave up or lost its lease, or died: an attempt recorded
    /// as running whose claim is no longer held is shown as abandoned.
    Abandoned,
    /// The work ran past its time limit and was stopped.
    TimedOut,
}

impl AttemptState {
    /// The state's name as stored and printed: `running`, `done`,
    /// `failed`, `abandoned`, `timed_out`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Running => "running",
            AttemptState::Done => "done",
            AttemptState::Failed => "failed",
            AttemptState::Abandoned => "abandoned",
            AttemptState::TimedOut => "timed_out",
        }
    }

    fn parse(text: &str) -> Option<AttemptState> {
        Some(match text {
            "running" => AttemptState::Running,
            "done" => AttemptState::Done,
            "failed" => AttemptState::Failed,
            "abandoned" => AttemptState::Abandoned,
            "timed_out" => AttemptState::TimedOut,
            _ => return None,
        })
    }
}

/// The last attempt at a run-once key, whatever its end, from
/// [`Client::once_inspect`] ([`OnceInfo::last_attempt`](crate::OnceInfo)):
/// who ran it, when (Redis server clock, millisecond precision), and how
/// it ended. Kept in `redguard_once_attempt:{K}` beside the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceAttempt {
    /// How it stands (a `running` attempt whose claim is gone reads as
    /// [`AttemptState::Abandoned`]).
    pub state: AttemptState,
    /// The runner's holder id.
    pub holder: String,
    /// The runner's host name.
    pub host: String,
    /// The runner's process id (`None` when not recorded).
    pub pid: Option<u32>,
    /// The runner's program, as its holder record keeps it (empty with
    /// holder records off).
    pub program: String,
    /// When the claim was granted.
    pub started_at: SystemTime,
    /// When it ended (`None` while running, or when it ended unseen).
    pub ended_at: Option<SystemTime>,
    /// The exit status the runner reported, as a shell gives it.
    pub exit_status: Option<i32>,
    /// The signal that ended the work, as the runner reported it.
    pub signal: Option<i32>,
    /// The names of the fields left unread because their value is longer
    /// than any redguard writes (over 4 KiB: someone else wrote it):
    /// `holder`, `host`, `program`, ... Such a field reads as empty
    /// (`holder`, `host`, `program`) or `None`. Only its length is read,
    /// never its bytes. (A record whose `state` or `started_at` is too
    /// long is no record: [`OnceInfo::last_attempt`](crate::OnceInfo) is
    /// then `None`.)
    pub too_long: Vec<String>,
}

impl OnceAttempt {
    /// From `ended_at` back to `started_at` (`None` before the end).
    pub fn duration(&self) -> Option<Duration> {
        self.ended_at
            .and_then(|end| end.duration_since(self.started_at).ok())
    }

    /// Whether the field `field` (`holder`, `host`, `program`, ...) was
    /// left unread for its length ([`too_long`](Self::too_long)).
    pub fn field_too_long(&self, field: &str) -> bool {
        self.too_long.iter().any(|f| f == field)
    }

    /// Reads the record's fields; `None` when there is none (or it is
    /// unreadable: no state or start that redguard writes).
    pub(crate) fn from_fields(record: &Named) -> Option<OnceAttempt> {
        let fields: Vec<(&str, String)> = record
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        let too_long = |name: &str| record.too_long.iter().any(|f| f == name);
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_str())
        };
        let time = |name: &str| {
            get(name)
                .and_then(|v| v.parse::<u64>().ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
        };
        Some(OnceAttempt {
            state: AttemptState::parse(get("state")?)?,
            // A holder too long to read is no runner's, but the attempt
            // still says how it ended.
            holder: match get("holder") {
                Some(holder) => holder.to_owned(),
                None if too_long("holder") => String::new(),
                None => return None,
            },
            host: get("host").unwrap_or_default().to_owned(),
            pid: get("pid").and_then(|p| p.parse().ok()).filter(|&p| p > 0),
            program: get("program").unwrap_or_default().to_owned(),
            started_at: time("started_at")?,
            ended_at: time("ended_at"),
            exit_status: get("exit_status").and_then(|v| v.parse().ok()),
            signal: get("signal").and_then(|v| v.parse().ok()),
            too_long: record
                .too_long
                .iter()
                .filter(|f| ATTEMPT_FIELDS.contains(&f.as_str()))
                .cloned()
                .collect(),
        })
    }
}

/// `ttl` in whole milliseconds (fractions round up), for how long a record
/// of `what` is kept: between [`MIN_LEASE`] and [`MAX_LEASE`], the bounds of
/// every expiry the crate sets.
pub(crate) fn ttl_ms(what: &str, ttl: Duration) -> Result<u64> {
    lease_ms(ttl).map_err(|_| {
        Error::invalid(format!(
            "{what} ttl {} is out of range: it must be at least {} and at most {}",
            Human(ttl),
            Human(MIN_LEASE),
            Human(MAX_LEASE)
        ))
    })
}

/// What [`Client::once`] found at a run-once key: run the work
/// ([`Once::Run`]), it was done ([`Once::Done`], with the outcome, when and
/// by whom), or someone is running it ([`Once::Running`]).
///
/// Services retry: a client clicks twice, a caller times out and sends the
/// request again, cron fires on two hosts, a job is restarted after a
/// crash. A lock alone does not make such work idempotent: the second
/// caller must also learn that the work was done, and what came of it.
///
/// ```no_run
/// use std::time::Duration;
/// use redguard::Once;
///
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let receipt = match client.once_wait("payment:7f3a", Duration::from_secs(86_400), Duration::from_secs(10))? {
///     Once::Run(run) => {
///         let receipt = b"charged 12.00 EUR, ref 991".to_vec(); // do the work
///         run.complete(&receipt)?.value                     // record it for a day
///     }
///     Once::Done(outcome) => outcome.value,                 // done before: same receipt
///     Once::Running { holder, .. } => {
///         return Err(format!("still running on {holder}").into());
///     }
/// };
/// # let _ = receipt;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # The guarantee
///
/// **At most one runner at a time.** A runner holds the key as a lease,
/// renewed by the watchdog while its [`OnceGuard`] lives, exactly like a
/// lock. **The work is "done once" only if the work itself is idempotent
/// under a crash, or is fenced.** A runner that crashes, or stalls past
/// its lease, after doing some or all of the work but before
/// [`OnceGuard::complete`], leaves no record, and the next caller runs the
/// work again. Make the work safe to redo (an upsert keyed by the same id,
/// a payment provider's own idempotency key), or pass
/// [`OnceGuard::fencing_token`] to the storage and let it refuse the older
/// runner's writes ([`Client::fenced_set`]).
///
/// * [`OnceGuard::complete`] records the outcome for the key's ttl and ends
///   the run in one atomic step, and only if the guard still holds the key:
///   a runner whose lease was lost cannot record, so a late runner never
///   overwrites its successor's outcome.
/// * [`OnceGuard::abandon`], or dropping the guard without completing, ends
///   the run without a record: the next caller runs.
/// * A runner that crashes frees the key when its lease runs out (the
///   client's watchdog timeout, 30 s by default): the next caller runs.
/// * A record is kept for the ttl given to [`Client::once`]; until then
///   every caller gets [`Once::Done`] with the same bytes, time and runner.
///   [`Client::forget_once`] deletes it earlier.
///
/// # Keys
///
/// For a run-once key `K` (any bytes, 1 byte to
/// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)):
///
/// | key / channel | holds |
/// | --- | --- |
/// | `K` | while running: a lock in Redisson's layout (a hash of the runner's holder id → 1, `PEXPIRE` = lease), renewed by the watchdog. Once done: the record, a hash with fields `outcome`, `at` (ms since the Unix epoch, Redis server clock) and `by` (the runner's holder id), `PEXPIRE` = the ttl |
/// | `redisson_lock_token:{K}` | the fencing-token counter, `INCR`ed by each claim; never expires |
/// | `redguard_once_attempt:{K}` | the last attempt ([`OnceAttempt`]): a hash with `state`, `holder`, `host`, `pid`, `program`, `started_at`, `ended_at` (ms, server clock), `exit_status`, `signal`; replaced by each claim, `PEXPIRE` = the ttl (a failed one at most [`MAX_FAILED_ATTEMPT_TTL`]) |
/// | `redisson_lock__channel:{K}` | `1` is published when a run completes (it wakes every [`Client::once_wait`] caller), `0` when it is abandoned (it wakes one, the next runner) |
///
/// Redisson has no run-once keys; because the running claim is a lock in
/// its layout, a Redisson `RLock` on `K` sees a run in progress (or a
/// record) as a lock held by someone else.
///
/// The derived keys carry `{K}` as hash tag, so all of them live in `K`'s
/// cluster slot, under the same naming rule as every lock's keys. Running
/// and done are two states of one key, so no two keys can disagree, and a
/// running claim shows in `redguard status K` like any lock. A lock named
/// `K` and the run-once key `K` exclude each other (a record blocks lock
/// acquirers of `K` for its ttl): give them different names.
#[derive(Debug)]
#[must_use = "a Run must be completed or abandoned; dropping it abandons the run"]
pub enum Once {
    /// The key was free: the caller runs the work, and holds the key until
    /// it calls [`OnceGuard::complete`] or [`OnceGuard::abandon`] or drops
    /// the guard.
    Run(OnceGuard),
    /// The work was done: its recorded outcome.
    Done(Outcome),
    /// Another runner holds the key and is working on it (or the calling
    /// thread itself does: a claim is not reentrant).
    #[non_exhaustive]
    Running {
        /// The runner's holder id, `"<client id>:<thread id>"`.
        holder: String,
        /// How long until the runner's lease runs out unless renewed;
        /// `None` when the key has no expiry.
        expires_in: Option<Duration>,
    },
}

/// A recorded outcome: what [`OnceGuard::complete`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outcome {
    /// The bytes given to [`OnceGuard::complete`].
    pub value: Vec<u8>,
    /// When it was recorded, on the Redis server's clock (millisecond
    /// precision).
    pub at: SystemTime,
    /// The holder id of the runner that recorded it.
    pub by: String,
    /// How long the record is kept from now (`None`: no expiry, which
    /// redguard never sets).
    pub expires_in: Option<Duration>,
    /// The names of the record's fields left unread because their value
    /// is longer than any redguard writes (someone else wrote it):
    /// `outcome` (over [`MAX_OUTCOME_LEN`]), `at` or `by` (over 4 KiB).
    /// Such a field reads as empty (`value`, `by`) or the Unix epoch
    /// (`at`); only its length is read, never its bytes. Only ever set by
    /// [`Client::once_status`] and [`Client::once_inspect`]: a claim
    /// refuses such a record ([`Error::WrongType`]).
    pub too_long: Vec<String>,
}

/// What is stored at a run-once key, from [`Client::once_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnceStatus {
    /// Nothing: the next caller of [`Client::once`] runs.
    NotRun,
    /// A runner holds the key.
    Running {
        /// The runner's holder id.
        holder: String,
        /// How long until its lease runs out unless renewed (`None`: the
        /// key has no expiry).
        expires_in: Option<Duration>,
    },
    /// The work was done.
    Done(Outcome),
}

/// The run of a run-once key, from [`Once::Run`]: the caller holds the key
/// (a lease renewed by the watchdog) until it completes, abandons, or
/// drops the guard.
///
/// `!Send`, like [`LockGuard`]: the claim belongs to the thread that made
/// it.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// if let redguard::Once::Run(run) = client.once("k", std::time::Duration::from_secs(60)).unwrap() {
///     assert_send(run);
/// }
/// ```
#[must_use = "dropping the guard abandons the run: the next caller runs again"]
#[clippy::has_significant_drop]
pub struct OnceGuard {
    guard: LockGuard,
    token: FencingToken,
    ttl: Duration,
    ttl_ms: u64,
}

impl fmt::Debug for OnceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnceGuard")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("holder", self.guard.holder_id())
            .field("fencing_token", &self.token)
            .field("ttl", &self.ttl)
            .field("lost", &self.guard.is_lost())
            .finish()
    }
}

impl OnceGuard {
    /// The run-once key.
    pub fn key(&self) -> &[u8] {
        self.guard.lock().name()
    }

    /// The holder id under which the key is held (and the outcome will be
    /// recorded as [`Outcome::by`]).
    pub fn holder_id(&self) -> &HolderId {
        self.guard.holder_id()
    }

    /// How long the outcome will be kept: the ttl given to [`Client::once`].
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fencing token of this run: larger than that of every earlier run
    /// of the key (and of every fenced-lock grant of the same name). Send
    /// it with the run's writes to storage that refuses older tokens (such
    /// as [`Client::fenced_set`]), so a runner that lost its lease cannot
    /// write after its successor.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// `true` when the lease is known to be lost, or its validity on this
    /// client's clock ran out: [`OnceGuard::complete`] would be refused.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// How much longer the runner's lease is known to be valid on this
    /// client's clock, as [`LockGuard::valid_for`]: the send time of the
    /// last grant or renewal that succeeded + the lease − drift (1 % +
    /// 2 ms), minus now. Zero once lost. Purely local: no round trip. A
    /// supervisor can stop the run's work before this runs out (Redisson's
    /// `RLock.remainTimeToLive` is the server's view, a round trip).
    pub fn valid_for(&self) -> Duration {
        self.guard.valid_for()
    }

    /// `Ok(())` while the lease is held. Purely local: no round trip.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] as [`LockGuard::check`].
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Ends this run's last-attempt record ([`OnceAttempt`]) as `state`
    /// ([`AttemptState::Failed`], [`AttemptState::Abandoned`] or
    /// [`AttemptState::TimedOut`]) with the work's exit status and signal,
    /// on the server's clock, kept for the ttl but at most
    /// [`MAX_FAILED_ATTEMPT_TTL`]. It leaves the claim alone: call it before
    /// [`OnceGuard::abandon`] (or after [`OnceGuard::complete`] of a
    /// failure), and it works after a lost lease too. `false` when the
    /// record is gone or already another attempt's (a later runner's is
    /// never overwritten). One round trip. Redisson has no counterpart
    /// (it has no run-once keys).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for [`AttemptState::Running`] or
    /// [`AttemptState::Done`] (a claim and [`OnceGuard::complete`] write
    /// those); [`Error::WrongType`] when the record's key holds another
    /// type; connection, timeout and server errors.
    pub fn end_attempt(
        &self,
        state: AttemptState,
        exit_status: Option<i32>,
        signal: Option<i32>,
    ) -> Result<bool> {
        if matches!(state, AttemptState::Running | AttemptState::Done) {
            return Err(Error::invalid(format!(
                "an attempt cannot be ended as {}",
                state.as_str()
            )));
        }
        let key = self.key();
        let attempt_key = keys::once_attempt(key);
        let ttl_ms = self.ttl_ms.min(MAX_FAILED_ATTEMPT_TTL.as_millis() as u64);
        let holder = self.guard.holder_id().as_str();
        let client = self.guard.lock().client();
        let at = client.with_conn(key, |conn| {
            script::end_attempt(
                conn,
                &attempt_key,
                holder,
                state.as_str(),
                exit_status,
                signal,
                ttl_ms,
            )
        })?;
        Ok(at.is_some())
    }

    /// Records `outcome` for the ttl and ends the run, in one atomic step,
    /// only if this guard still holds the key. Every later caller of
    /// [`Client::once`] gets [`Once::Done`] with these bytes; callers in
    /// [`Client::once_wait`] are woken. Returns the record as stored.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] when `outcome` is longer than
    ///   [`MAX_OUTCOME_LEN`]: nothing is recorded and the run is abandoned
    ///   (the key is released; the next caller runs).
    /// * [`Error::LockLost`] when the lease was lost (expired, deleted, or
    ///   the key claimed by the next runner): nothing is recorded and
    ///   nothing is overwritten. The work may have to be undone, or was
    ///   fenced.
    /// * Connection, timeout and server errors: the outcome is unknown (the
    ///   record may or may not have been written); if it was not, the key
    ///   frees itself when the lease runs out.
    ///
    /// A completion that fails because the master is gone or changing (a
    /// failover or a restart) is retried by the watchdog against the new
    /// master until it goes through or the lease runs out; this call waits
    /// for that and returns its outcome. A retry that finds the key no
    /// longer held but this runner's record there (an earlier attempt
    /// whose reply was lost wrote it) counts as recorded.
    pub fn complete(self, outcome: impl AsRef<[u8]>) -> Result<Outcome> {
        let value = outcome.as_ref();
        if value.len() > MAX_OUTCOME_LEN {
            return Err(Error::invalid(format!(
                "outcome is {} bytes long; the maximum is {MAX_OUTCOME_LEN} (the run is abandoned)",
                value.len()
            )));
        }
        let (ttl, ttl_ms) = (self.ttl, self.ttl_ms);
        let by = self.guard.holder_id().as_str().to_owned();
        let lease_left = self.guard.valid_for();
        let until = Instant::now() + lease_left;
        let recorded_at = Arc::new(AtomicU64::new(0));
        let released = self.guard.release_with(|lock, holder| {
            let record = Record {
                lock: lock.clone(),
                holder: holder.as_str().to_owned(),
                value: value.to_vec(),
                ttl_ms,
                at: recorded_at.clone(),
            };
            match record.write() {
                Ok(done) => Ok(done),
                // The master is gone or changing: the watchdog writes it on
                // the new one, and this call waits for that (bounded by the
                // lease).
                Err(e) if e.is_failover() => {
                    let client = lock.client();
                    let what = format!(
                        "completion of run-once key {:?}",
                        String::from_utf8_lossy(lock.name())
                    );
                    let retry = lock.submit_retry(
                        what.clone(),
                        client.watchdog_timeout(),
                        until,
                        e,
                        move || match record.write()? {
                            Release::Released => Ok(()),
                            _ => Err(Error::not_held(record.lock.name())),
                        },
                    );
                    retry.wait_until(Some(until + client.config().response_timeout * 2));
                    match retry.take_outcome() {
                        Some(Ok(())) => Ok(Release::Released),
                        Some(Err(Error::NotHeld { .. })) => Ok(Release::NotHeld),
                        Some(Err(e)) => Err(e),
                        None => Err(Error::Timeout {
                            kind: crate::error::TimeoutKind::Lease,
                            limit: lease_left,
                            server: None,
                            about: Some(format!(
                                "the {what} was still being retried when its lease ended"
                            )),
                        }),
                    }
                }
                Err(e) => Err(e),
            }
        });
        let recorded_at = match recorded_at.load(Ordering::Acquire) {
            0 => None,
            at => Some(at),
        };
        match (released, recorded_at) {
            (Ok(()), Some(at_ms)) => Ok(Outcome {
                value: value.to_vec(),
                at: UNIX_EPOCH + Duration::from_millis(at_ms),
                by,
                expires_in: Some(ttl),
                too_long: Vec::new(),
            }),
            (Err(Error::NotHeld { name }), _) => Err(Error::LockLost { name }),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(Error::Protocol("complete reported no record time".into())),
        }
    }

    /// Ends the run without recording anything: the key is released and the
    /// next caller runs (waiters in [`Client::once_wait`] are woken and one
    /// of them runs). Dropping the guard does the same, logging errors.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`]: [`Error::LockLost`] / [`Error::NotHeld`]
    /// when the lease was already lost, connection, timeout and server
    /// errors (the key then frees itself when the lease runs out).
    pub fn abandon(self) -> Result<()> {
        self.guard.unlock()
    }
}

/// A run's outcome to record, and where the record's time goes.
struct Record {
    lock: Lock,
    holder: String,
    value: Vec<u8>,
    ttl_ms: u64,
    /// The record's time (ms since the epoch) once written; 0 before.
    at: Arc<AtomicU64>,
}

impl Record {
    /// Writes the record and ends the run, if this holder still holds the
    /// key: `Released` then, `NotHeld` otherwise. An earlier attempt may
    /// have written it already, its reply lost (the connection pool sends a
    /// command again on a fresh connection after a cut reply, and the
    /// watchdog retries after a failover), so a refusal looks for this
    /// holder's record before it counts.
    fn write(&self) -> Result<Release> {
        let client = self.lock.client();
        let key = self.lock.name();
        let at = client.with_conn(key, |conn| {
            let at = script::complete(
                conn,
                client.publish(key),
                key,
                self.lock.channel(),
                &self.holder,
                &self.value,
                self.ttl_ms,
            )?;
            match at {
                None => script::recorded_by(conn, key, &self.holder),
                at => Ok(at),
            }
        })?;
        Ok(match at {
            Some(at) => {
                self.at.store(at, Ordering::Release);
                Release::Released
            }
            None => Release::NotHeld,
        })
    }
}

/// What the last claim attempt of a wait met: what a wait that ends
/// without a claim reports.
enum Unclaimed {
    /// No attempt was answered.
    Nothing,
    /// Another runner holds the key (its holder id and remaining lease).
    Running(String, Option<Duration>),
    /// The claim was granted after its lease had run out, and given back.
    GivenBack,
}

impl Client {
    /// Claims the run-once key `key`, without waiting: [`Once::Run`] to
    /// the first caller (which runs the work and then calls
    /// [`OnceGuard::complete`]), [`Once::Done`] with the recorded outcome
    /// to the callers after it, [`Once::Running`] while a runner works.
    ///
    /// `ttl` is how long the outcome is kept once recorded. The run itself
    /// is held with the client's watchdog timeout as lease, renewed while
    /// the guard lives. See the [`Once`] docs for the
    /// guarantee and the keys used.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty key or one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), and for a `ttl` under 5 ms
    /// (zero included) or above 365 days; [`Error::WrongType`] when `key`
    /// holds a Redis value that is not a hash (left untouched), or a
    /// record with a value longer than redguard writes (an outcome over
    /// [`MAX_OUTCOME_LEN`], its `at` or `by` over 4 KiB: not sent, and
    /// not handed on as an outcome);
    /// [`Error::NotReplicated`] when
    /// [`Builder::min_replica_acks`](crate::Builder::min_replica_acks) asks
    /// for more replicas than acknowledged the claim (it was undone);
    /// [`Error::Timeout`] when the claim's reply came only after its lease
    /// had run out (the claim was given back: nobody runs the work, and a
    /// new call may claim it), and as [`Client::once_wait`] says;
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn once(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<Once> {
        self.claim_once(key.as_ref(), ttl, Some(Instant::now()))
    }

    /// As [`Client::once`], but a caller that finds the key running waits
    /// up to `wait` for the runner to finish: woken by the runner's
    /// completion (pub/sub), each wait bounded by the runner's lease and
    /// the client's poll interval. Returns [`Once::Done`] when the runner
    /// recorded its outcome, [`Once::Run`] when the runner gave up without
    /// a record (abandoned, crashed, lost its lease) and this caller is the
    /// next runner, and [`Once::Running`] when `wait` ran out. A `wait` too
    /// large to represent waits without a deadline.
    ///
    /// # Errors
    ///
    /// As [`Client::once`], but errors retrying can fix
    /// ([`Error::is_transient`]: a Redis restart, a freeze, a failover) are
    /// retried with backoff until `wait` runs out: then [`Error::Timeout`]
    /// naming the last of them. Errors retrying cannot fix (credentials,
    /// ACL, wrong type, bad input, shutdown) end the wait at once.
    pub fn once_wait(&self, key: impl AsRef<[u8]>, ttl: Duration, wait: Duration) -> Result<Once> {
        self.claim_once(key.as_ref(), ttl, Instant::now().checked_add(wait))
    }

    fn claim_once(&self, key: &[u8], ttl: Duration, deadline: Option<Instant>) -> Result<Once> {
        let started = Instant::now();
        // The wait that ran out, for its error.
        let wait = || deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(started));
        keys::validate_name(key).map_err(|e| Error::invalid(format!("run-once key: {e}")))?;
        let ttl_ms = ttl_ms("run-once", ttl)?;
        self.check_open()?;
        let lock = Lock::new_once(self.clone(), key);
        let lease = self.watchdog_timeout();
        let lease_ms = lease_ms(lease)?;
        let holder = self.holder_id();
        let holder_str: Arc<str> = holder.as_arc().clone();
        let token_key = keys::token(key);
        let (host, pid, program) = self.runner_fields();
        let runner = script::Runner {
            host: &host,
            pid,
            program: &program,
            ttl_ms,
        };
        let acks = lock.replica_acks();
        let response_timeout = self.config().response_timeout;
        // What the last attempt met, for a wait that ends without a claim.
        let mut last = Unclaimed::Nothing;
        // Whether a claim of this thread's own, left by an earlier attempt
        // whose reply was lost, was given back (once per call).
        let mut orphan_given_back = false;
        // This thread's release of the key may still be retried after a
        // failover (see `Lock::acquire`).
        if !crate::lock::thread_holds::wait_released(self.id().as_u128(), lock.hold_key(), deadline)
        {
            return Ok(Once::Running {
                holder: holder_str.to_string(),
                expires_in: None,
            });
        }
        let mut waiting = crate::metrics::Waiting::none();
        let found = wait_loop(
            self,
            lock.channel(),
            (key, "once"),
            deadline,
            Wake::One,
            || {
                last = Unclaimed::Nothing;
                let mut sent = Instant::now();
                let mut sent_script = false;
                let mut short_acks = None;
                let reply = self.with_conn(key, |conn| {
                    sent_script = true;
                    // The lease counts from the attempt that ran (a Cluster
                    // slot that moves is waited for).
                    sent = Instant::now();
                    // A waiting thread's record entry rides ahead of the script.
                    let before = crate::connection::prelude::take_for(self.source(), key);
                    let (reply, acked) = acks.run(conn, response_timeout, before, |conn| {
                        script::claim(
                            conn,
                            key,
                            &token_key,
                            &holder_str,
                            lease_ms,
                            Some(&runner),
                            MAX_OUTCOME_LEN,
                        )
                    })?;
                    if matches!(reply, Claim::Run { .. }) && acks.short(acked) {
                        short_acks = acked;
                    }
                    Ok(reply)
                });
                if let (Ok(Claim::Run { .. }), Some(acked)) = (&reply, short_acks) {
                    // Too few replicas have the claim: after a failover another
                    // runner could claim the key too. Undo it, as a lock grant
                    // does, and say why.
                    lock.release_one(&holder_str, lease_ms);
                    return Err(acks.not_replicated(key, Some(acked)));
                }
                let (acquire, token) = match reply {
                    Ok(Claim::Run { token }) => {
                        (Ok(Acquire::Acquired { token: Some(token) }), token)
                    }
                    Ok(Claim::Done { too_long, .. }) if !too_long.is_empty() => {
                        // A value longer than redguard writes: someone else
                        // wrote this hash, and its outcome (or who recorded
                        // it) is not to be handed on as the run's.
                        return Err(Error::WrongType {
                            key: String::from_utf8_lossy(key).into_owned(),
                        });
                    }
                    Ok(Claim::Done {
                        outcome,
                        at_ms,
                        by,
                        pttl,
                        too_long,
                    }) => {
                        return Ok(Attempt::Acquired(Once::Done(Outcome {
                            value: outcome,
                            at: UNIX_EPOCH + Duration::from_millis(at_ms),
                            by,
                            expires_in: pttl.expiry(),
                            too_long,
                        })));
                    }
                    Ok(Claim::Running {
                        pttl,
                        holder: runner,
                    }) => {
                        if *runner == *holder_str {
                            if !orphan_given_back
                                && crate::lock::thread_holds::current(
                                    self.id().as_u128(),
                                    lock.hold_key(),
                                )
                                .is_none()
                            {
                                // This thread runs nothing here: the claim is
                                // one of its own whose reply was lost and whose
                                // undo failed (a freeze or an outage met while
                                // retrying). Nobody runs the work; give it back
                                // and claim again (a claim is not reentrant).
                                orphan_given_back = true;
                                lock.release_unknown(&holder_str);
                                last = Unclaimed::Running(runner, pttl.expiry());
                                return Ok(Attempt::Busy(Some(Duration::ZERO)));
                            }
                            // Waiting for ourselves would only run out the clock.
                            return Ok(Attempt::Acquired(Once::Running {
                                holder: runner,
                                expires_in: pttl.expiry(),
                            }));
                        }
                        let expires_in = pttl.expiry();
                        last = Unclaimed::Running(runner, expires_in);
                        waiting.start(HoldKind::Once);
                        return Ok(Attempt::Busy(expires_in));
                    }
                    Ok(Claim::Free) => {
                        return Err(Error::Protocol("a claim reported a free key".into()));
                    }
                    // An outage (a restart, a freeze, a failover) is tried
                    // again until the deadline; the wait then ends with an
                    // error naming the last failure.
                    Err(e) => (Err(e), 0),
                };
                Ok(
                    match lock.settle(
                        acquire,
                        sent_script,
                        &holder_str,
                        lease,
                        lease_ms,
                        true,
                        sent,
                    )? {
                        Attempt::Acquired(granted) => Attempt::Acquired(Once::Run(OnceGuard {
                            guard: granted.into_guard(lock.clone(), holder.clone(), lease_ms, true),
                            token: FencingToken::new(token),
                            ttl,
                            ttl_ms,
                        })),
                        Attempt::Unknown(e) => Attempt::Unknown(e),
                        Attempt::Busy(hint) => {
                            // Granted after its lease ran out, and given back.
                            last = Unclaimed::GivenBack;
                            Attempt::Busy(hint)
                        }
                    },
                )
            },
        )?;
        drop(waiting);
        let labels = self.context().labels(HoldKind::Once, key);
        match &found {
            Some(Once::Run(_)) => crate::metrics::acquired(labels, started.elapsed()),
            // Found running by another runner until the deadline: a claim
            // given up, as a busy lock's.
            Some(Once::Running { .. }) | None => crate::metrics::timed_out(labels),
            // Nothing was claimed, and nothing waited for in vain.
            Some(Once::Done(_)) => {}
        }
        match (found, last) {
            (Some(once), _) => Ok(once),
            (None, Unclaimed::Running(holder, expires_in)) => {
                Ok(Once::Running { holder, expires_in })
            }
            (None, Unclaimed::GivenBack) => Err(Error::Timeout {
                kind: crate::error::TimeoutKind::Lease,
                limit: lease,
                server: None,
                about: Some(format!(
                    "run-once key {:?}: the claim was granted only after its lease ran out, \
                     and was given back; nobody runs it",
                    String::from_utf8_lossy(key),
                )),
            }),
            (None, Unclaimed::Nothing) => Err(Error::Timeout {
                kind: crate::error::TimeoutKind::Wait,
                limit: wait(),
                server: None,
                about: Some(format!(
                    "run-once key {:?}: the wait ran out before a claim was answered",
                    String::from_utf8_lossy(key)
                )),
            }),
        }
    }

    /// What is stored at the run-once key `key`, without claiming it: the
    /// record, the runner, or nothing. A snapshot: it may have changed by
    /// the time it is read. A record's value longer than redguard writes
    /// is not read: [`Outcome::too_long`] names it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key, [`Error::WrongType`] when
    /// `key` holds a value that is not a hash, connection, timeout and
    /// server errors.
    pub fn once_status(&self, key: impl AsRef<[u8]>) -> Result<OnceStatus> {
        let key = key.as_ref();
        keys::validate_name(key).map_err(|e| Error::invalid(format!("run-once key: {e}")))?;
        let token_key = keys::token(key);
        let found = self.with_conn(key, |conn| {
            script::claim(conn, key, &token_key, "", 1, None, MAX_OUTCOME_LEN)
        })?;
        Ok(match found {
            Claim::Free => OnceStatus::NotRun,
            Claim::Running { pttl, holder } => OnceStatus::Running {
                holder,
                expires_in: pttl.expiry(),
            },
            Claim::Done {
                outcome,
                at_ms,
                by,
                pttl,
                too_long,
            } => OnceStatus::Done(Outcome {
                value: outcome,
                at: UNIX_EPOCH + Duration::from_millis(at_ms),
                by,
                expires_in: pttl.expiry(),
                too_long,
            }),
            Claim::Run { .. } => {
                return Err(Error::Protocol("a look-only claim claimed the key".into()));
            }
        })
    }

    /// This process's host, pid and program, for a last-attempt record:
    /// as its holder record keeps them (with records off: no program).
    fn runner_fields(&self) -> (String, u32, String) {
        match &self.context().record {
            Some(spec) => (
                spec.host().to_owned(),
                spec.pid(),
                spec.program().to_owned(),
            ),
            None => (
                gethostname::gethostname().to_string_lossy().into_owned(),
                std::process::id(),
                String::new(),
            ),
        }
    }

    /// The last-attempt record of the run-once key `key`, as stored (a
    /// `running` attempt is not checked against the claim here).
    pub(crate) fn once_attempt_raw(&self, key: &[u8]) -> Result<Option<OnceAttempt>> {
        let attempt_key = keys::once_attempt(key);
        let fields = self.with_conn(key, |conn| script::read_attempt(conn, &attempt_key))?;
        Ok(OnceAttempt::from_fields(&fields))
    }

    /// Deletes the record of the run-once key `key`, and its last-attempt
    /// record, so that the next caller of [`Client::once`] runs the work
    /// again. `true` when a record
    /// was deleted; `false` when nothing was recorded, or a runner holds
    /// the key (a running claim is never touched: tell the two apart with
    /// [`Client::once_status`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key, [`Error::WrongType`] when
    /// `key` holds a value that is not a hash (left untouched),
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn forget_once(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        keys::validate_name(key).map_err(|e| Error::invalid(format!("run-once key: {e}")))?;
        self.check_open()?;
        let attempt_key = keys::once_attempt(key);
        let forgot = self.with_conn(key, |conn| {
            let forgot = script::forget(conn, key)?;
            if forgot != Forget::Running {
                // The last attempt goes with the record: the key starts
                // afresh.
                redis::cmd("DEL")
                    .arg(&attempt_key)
                    .exec(conn)
                    .map_err(|e| Error::from_redis(e, &attempt_key))?;
            }
            Ok(forgot)
        })?;
        Ok(forgot == Forget::Deleted)
    }
}
