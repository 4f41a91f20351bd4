//! The Lua scripts of `lua/` and typed wrappers around them. The only module
//! that knows each script's `KEYS`/`ARGV` order and reply shape.
//!
//! Every script is a compiled-in constant: names and holder ids travel only
//! as `KEYS`/`ARGV`, never spliced into script text.

/// A script that wakes waiters: `lua/notify.lua` (its `notify` function
/// publishes an unlock message as the deployment needs it) followed by
/// `lua/<name>.lua`, which calls `notify` and never PUBLISH itself; one
/// variant per [`Publish`]. The classic variant (one server, Sentinel)
/// publishes in place of each call instead ([`publish_inline`]).
macro_rules! notifying {
    ($name:literal) => {
        notifying!($name, "")
    };
    // `shaped`: `lua/lock_shape.lua` goes between `notify.lua` and the script.
    ($name:literal, shaped) => {
        notifying!($name, include_str!("../../lua/lock_shape.lua"))
    };
    ($name:literal, $prelude:expr) => {
        $crate::scripts::Notifying {
            classic: redis::Script::new(&$crate::scripts::assemble(
                $prelude,
                &$crate::scripts::publish_inline(include_str!(concat!("../../lua/", $name, ".lua"))),
            )),
            cluster: notifying!(@variant "true, false", $prelude, $name),
            cluster_always: notifying!(@variant "true, true", $prelude, $name),
        }
    };
    (@variant $flags:literal, $prelude:expr, $name:literal) => {
        redis::Script::new(&$crate::scripts::assemble(
            concat!(
                "local cluster, always_classic = ",
                $flags,
                "\n",
                include_str!("../../lua/notify.lua"),
                $prelude,
            ),
            include_str!(concat!("../../lua/", $name, ".lua")),
        ))
    };
}

/// A script that meets hashes it did not write: `lua/lock_shape.lua` (its
/// `is_lock` function tells a lock's hash from an application's) followed
/// by `lua/<name>.lua`.
macro_rules! shaped {
    ($name:literal) => {
        redis::Script::new(&$crate::scripts::assemble(
            include_str!("../../lua/lock_shape.lua"),
            include_str!(concat!("../../lua/", $name, ".lua")),
        ))
    };
}

/// Where a script's prelude goes: a line of its own in the script's text.
const PRELUDE_MARK: &str = "\n-- @prelude\n";

/// `body` with `prelude` (helper functions, settings) put at its
/// `-- @prelude` line, or before it all when it has none. Lua makes a
/// closure of every `local function` each time the script runs: a script
/// whose common path needs no helper names the place after that path, and
/// the path runs without them (a lock taken or re-entered, one hold of
/// several let go).
pub(crate) fn assemble(prelude: &str, body: &str) -> String {
    match body.find(PRELUDE_MARK) {
        Some(at) => {
            let at = at + 1;
            [&body[..at], prelude, &body[at..]].concat()
        }
        None => [prelude, body].concat(),
    }
}

/// `body` with each `notify(` call made a classic `PUBLISH`, which is all
/// `notify` does outside a Cluster: the script then makes no closure of
/// `notify` at each run (a full release runs its publish without one).
pub(crate) fn publish_inline(body: &str) -> String {
    body.replace("notify(", "redis.call('publish', ")
}

/// How the scripts that wake waiters publish their messages
/// (`lua/notify.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    /// One server (or Sentinel's master), or a Cluster node without
    /// sharded pub/sub (Redis 6.2): a classic `PUBLISH` on every release,
    /// listened to or not, since a waiter may listen on a replica that
    /// passes it on (on a Cluster: on any node, which the cluster forwards
    /// it to).
    Classic,
    /// Redis Cluster: `SPUBLISH` always; the classic `PUBLISH`, which the
    /// cluster forwards to every node, only when the slot's node counts a
    /// classic listener of the channel ([`ClassicPublish::Auto`]).
    Cluster,
    /// Redis Cluster with [`ClassicPublish::Always`]: `SPUBLISH` and the
    /// classic `PUBLISH` on every release, for classic listeners on
    /// replicas, which the slot's master cannot count.
    ClusterAlways,
}

impl Publish {
    /// How scripts publish for a key whose node has sharded pub/sub
    /// (`sharded`, from `Source::sharded_publish`), under `classic`:
    /// `SPUBLISH` and a classic `PUBLISH` only for classic listeners
    /// ([`Publish::Cluster`], or [`Publish::ClusterAlways`]), else classic
    /// `PUBLISH` ([`Publish::Classic`]).
    pub(crate) fn of(sharded: bool, classic: ClassicPublish) -> Publish {
        let publish = if sharded {
            Publish::Cluster
        } else {
            Publish::Classic
        };
        publish.with_classic(classic)
    }

    /// The way `self` becomes under `classic`: [`Publish::Cluster`] sends
    /// the classic message on every release with [`ClassicPublish::Always`].
    pub(crate) fn with_classic(self, classic: ClassicPublish) -> Publish {
        match (self, classic) {
            (Publish::Cluster, ClassicPublish::Always) => Publish::ClusterAlways,
            (other, _) => other,
        }
    }
}

/// The variants of a script that wakes waiters.
pub(crate) struct Notifying {
    classic: Script,
    cluster: Script,
    cluster_always: Script,
}

impl Notifying {
    /// The variant for `publish`.
    pub(crate) fn get(&self, publish: Publish) -> &Script {
        match publish {
            Publish::Classic => &self.classic,
            Publish::Cluster => &self.cluster,
            Publish::ClusterAlways => &self.cluster_always,
        }
    }
}

pub(crate) mod bounded_read;
pub(crate) mod latch;
pub(crate) mod record_read;
pub(crate) mod rwlock;
mod scripted_holds;
pub(crate) mod semaphore;

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{Error, Result};
use crate::keys::UNLOCK_MESSAGE;
use crate::lease::Pttl;
use crate::redisson_settings::ClassicPublish;
pub(crate) use scripted_holds::{
    SyncHold, SyncRenewal, release_all as release_sync_hold, renew_batch as renew_sync_batch,
};

pub(crate) mod once;

static LOCK: LazyLock<Script> = LazyLock::new(|| shaped!("lock"));
static UNLOCK: LazyLock<Notifying> = LazyLock::new(|| notifying!("unlock"));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/renew.lua")));
static RENEW_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/renew_many.lua")));
static FORCE_UNLOCK: LazyLock<Notifying> = LazyLock::new(|| notifying!("force_unlock", shaped));
static RELEASE_HOLDER: LazyLock<Notifying> = LazyLock::new(|| notifying!("release_holder"));
static FAIR_LOCK: LazyLock<Script> = LazyLock::new(|| shaped!("fair_lock"));
static FAIR_UNLOCK: LazyLock<Notifying> = LazyLock::new(|| notifying!("fair_unlock"));
static FAIR_LEAVE: LazyLock<Notifying> = LazyLock::new(|| notifying!("fair_leave"));
static FENCED_LOCK: LazyLock<Script> = LazyLock::new(|| shaped!("fenced_lock"));
static FENCED_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fenced_set.lua")));

/// Outcome of the acquire script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired, or re-entered by the same holder; `token` is the fencing
    /// token drawn by a fenced lock (`None` for the other kinds).
    Acquired { token: Option<u64> },
    /// Not acquired. `pttl` is how long until it is worth trying again: the
    /// holder's remaining ttl (for a fair lock that is free but promised to
    /// the queue head, the time until the head's deadline); `None` when the
    /// key has no expiry.
    Busy { pttl: Option<Duration> },
}

/// The keys of a fair lock besides its hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairKeys<'a> {
    /// The lock hash.
    pub(crate) key: &'a [u8],
    /// `redisson_lock_queue:{name}`.
    pub(crate) queue: &'a [u8],
    /// `redisson_lock_timeout:{name}`.
    pub(crate) timeouts: &'a [u8],
    /// `redisson_lock__channel:{name}`, the base of every waiter's channel.
    pub(crate) channel: &'a [u8],
}

/// Outcome of the release script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The holder did not hold the lock; nothing changed.
    NotHeld,
    /// One hold released; the holder still holds the lock.
    StillHeld,
    /// The last hold released: key deleted, unlock message published.
    Released,
}

/// Sends `EVALSHA <script's hash> <numkeys> <keys> <args>` in one command;
/// on NOSCRIPT (a restarted or flushed server) loads the script and sends it
/// again. The same as `Script::key(..).arg(..).invoke(..)`, without building
/// every argument twice: the hot path of every lock call.
fn evalsha(
    conn: &mut dyn redis::ConnectionLike,
    script: &Script,
    keys: &[&[u8]],
    args: impl FnOnce(&mut redis::Cmd),
) -> redis::RedisResult<Value> {
    // Sized up front: growing the argument buffers one argument at a time
    // cost several reallocations per lock call.
    let key_bytes: usize = keys.iter().map(|k| k.len()).sum();
    let mut cmd = redis::Cmd::with_capacity(keys.len() + 6, key_bytes + 160);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    args(&mut cmd);
    query_loading(conn, script, &cmd)
}

/// Sends `cmd`, an `EVALSHA` of `script`; on NOSCRIPT (a restarted or
/// flushed server) loads the script and sends it again.
fn query_loading(
    conn: &mut dyn redis::ConnectionLike,
    script: &Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query(conn) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            cmd.query(conn)
        }
        other => other,
    }
}

/// Whether `reply` (or, for an `EXEC` reply or a script's array, one of
/// its items) is a `NOSCRIPT` error: a script the server does not have,
/// met in a pipeline or a transaction whose error replies stay values.
pub(crate) fn is_noscript(reply: &Value) -> bool {
    match reply {
        Value::ServerError(e) => e.code() == "NOSCRIPT",
        Value::Array(items) => items.iter().any(is_noscript),
        _ => false,
    }
}

/// The busy reply's PTTL as a bound on the wait (none without expiry).
fn ttl_from(ms: i64) -> Option<Duration> {
    Pttl::from_ms(ms).expiry()
}

/// Runs the acquire script for `holder` with a lease of `lease_ms`.
pub(crate) fn acquire(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let reply = evalsha(conn, &LOCK, &[key], |cmd| {
        cmd.arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Nil => Ok(Acquire::Acquired { token: None }),
        Value::Int(ms) => Ok(Acquire::Busy { pttl: ttl_from(ms) }),
        other => Err(unexpected("acquire", &other)),
    }
}

/// Runs the fenced acquire script: like [`acquire`], and every success
/// (re-entry included) draws the next token from `token_key`.
pub(crate) fn fenced_acquire(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    token_key: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let reply: Value = FENCED_LOCK
        .key(key)
        .key(token_key)
        .arg(lease_ms)
        .arg(holder)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    fenced_acquire_reply(&reply)
}

fn fenced_acquire_reply(reply: &Value) -> Result<Acquire> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1), Value::Int(token)] => match u64::try_from(*token) {
                Ok(token) if token > 0 => Ok(Acquire::Acquired { token: Some(token) }),
                _ => Err(unexpected("fenced acquire", reply)),
            },
            [Value::Int(0), Value::Int(ms)] => Ok(Acquire::Busy {
                pttl: ttl_from(*ms),
            }),
            _ => Err(unexpected("fenced acquire", reply)),
        },
        other => Err(unexpected("fenced acquire", other)),
    }
}

/// Runs the fair acquire script for `holder`, whose wait is `wait_ms`
/// (Redisson's `threadWaitTime`). With `enqueue`, a holder that cannot have
/// the lock joins the queue with Redisson's deadline (the tail's plus
/// `wait_ms`) or, already queued, raises its deadline to at least now +
/// `wait_ms` on the server's clock, and every deadline behind it by as
/// much; without, it leaves no trace. A grant takes `wait_ms` off every
/// queued deadline, as Redisson's does.
pub(crate) fn fair_acquire(
    conn: &mut dyn redis::ConnectionLike,
    keys: FairKeys<'_>,
    holder: &str,
    lease_ms: u64,
    wait_ms: u64,
    enqueue: bool,
) -> Result<Acquire> {
    let reply: Value = FAIR_LOCK
        .key(keys.key)
        .key(keys.queue)
        .key(keys.timeouts)
        .arg(lease_ms)
        .arg(holder)
        .arg(wait_ms)
        .arg(if enqueue { "1" } else { "0" })
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, keys.key))?;
    fair_acquire_reply(&reply)
}

fn fair_acquire_reply(reply: &Value) -> Result<Acquire> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1)] => Ok(Acquire::Acquired { token: None }),
            [Value::Int(0), Value::Int(ms)] => Ok(Acquire::Busy {
                pttl: ttl_from(*ms),
            }),
            _ => Err(unexpected("fair acquire", reply)),
        },
        other => Err(unexpected("fair acquire", other)),
    }
}

/// Runs the fair release script: releases one hold of `holder`; the last
/// one wakes only the queue head, on its own channel.
pub(crate) fn fair_release(
    conn: &mut dyn redis::ConnectionLike,
    publish: Publish,
    keys: FairKeys<'_>,
    holder: &str,
    lease_ms: u64,
) -> Result<Release> {
    let reply: Value = FAIR_UNLOCK
        .get(publish)
        .key(keys.key)
        .key(keys.queue)
        .key(keys.timeouts)
        .arg(UNLOCK_MESSAGE)
        .arg(lease_ms)
        .arg(holder)
        .arg(keys.channel)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, keys.key))?;
    release_reply(reply)
}

/// Takes `holder` out of a fair lock's queue and deadline set, taking its
/// wait `wait_ms` (as passed to [`fair_acquire`]) off every deadline behind
/// it (Redisson's `acquireFailedAsync`), and passing a wake-up on when it
/// was the head of a free lock: `true` when it was queued.
pub(crate) fn fair_leave(
    conn: &mut dyn redis::ConnectionLike,
    publish: Publish,
    keys: FairKeys<'_>,
    holder: &str,
    wait_ms: u64,
) -> Result<bool> {
    let reply: Value = FAIR_LEAVE
        .get(publish)
        .key(keys.key)
        .key(keys.queue)
        .key(keys.timeouts)
        .arg(UNLOCK_MESSAGE)
        .arg(holder)
        .arg(wait_ms)
        .arg(keys.channel)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, keys.queue))?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("fair leave", &other)),
    }
}

/// Runs the fenced write script: stores `value` at `key` unless the key has
/// seen a newer token than `token`.
pub(crate) fn fenced_set(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    token: u64,
    value: &[u8],
) -> Result<FencedSet> {
    let reply: Value = FENCED_SET
        .key(key)
        .arg(token.to_string())
        .arg(value)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    fenced_set_reply(&reply)
}

/// What the fenced write script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FencedSet {
    /// Stored.
    Written,
    /// Refused: the key accepted this newer token before.
    Rejected(u64),
}

fn fenced_set_reply(reply: &Value) -> Result<FencedSet> {
    let token = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1), _] => Ok(FencedSet::Written),
            [Value::Int(0), last] => match token(last) {
                Some(last) => Ok(FencedSet::Rejected(last)),
                None => Err(unexpected("fenced set", reply)),
            },
            _ => Err(unexpected("fenced set", reply)),
        },
        other => Err(unexpected("fenced set", other)),
    }
}

/// Runs the release script: releases one hold of `holder`, re-applying
/// `lease_ms` while holds remain.
pub(crate) fn release(
    conn: &mut dyn redis::ConnectionLike,
    publish: Publish,
    key: &[u8],
    channel: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<Release> {
    let reply = evalsha(conn, UNLOCK.get(publish), &[key], |cmd| {
        cmd.arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(holder)
            .arg(channel);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    release_reply(reply)
}

fn release_reply(reply: Value) -> Result<Release> {
    match reply {
        Value::Nil => Ok(Release::NotHeld),
        Value::Int(0) => Ok(Release::StillHeld),
        Value::Int(1) => Ok(Release::Released),
        other => Err(unexpected("release", &other)),
    }
}

/// Runs the renew script once: `true` when `holder` still held the lock and
/// its lease is now `lease_ms` from now.
pub(crate) fn renew(
    conn: &mut dyn redis::ConnectionLike,
    key: &[u8],
    holder: &str,
    lease_ms: u64,
) -> Result<bool> {
    let reply = evalsha(conn, &RENEW, &[key], |cmd| {
        cmd.arg(lease_ms).arg(holder);
    })
    .map_err(|e| Error::from_redis(e, key))?;
    renew_reply(&reply)
}

fn renew_reply(reply: &Value) -> Result<bool> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("renew", other)),
    }
}

/// One renewal of a batch: the lock key, the holder, the lease.
pub(crate) struct Renewal<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) holder: &'a str,
    pub(crate) lease_ms: u64,
}

/// Sends `pipe` and reads its `n` replies, giving up at the first I/O error
/// or timeout: redis-rs's own pipeline reading would wait one more timeout
/// for every remaining reply from a frozen server.
fn query_pipeline(
    conn: &mut redis::Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> Result<Vec<Value>> {
    conn.send_packed_command(&pipe.get_packed_pipeline())
        .map_err(Error::redis)?;
    let mut replies = Vec::with_capacity(n);
    for _ in 0..n {
        replies.push(conn.recv_response().map_err(Error::redis)?);
    }
    Ok(replies)
}

/// Renews many leases in one round trip: one pipeline of script calls, each
/// renewing at most `per_call` leases. The outer `Err` is a failure of the
/// whole round trip; each inner result is one renewal's, in `batch` order.
///
/// Multi-key script calls instead of one call per lock: the server pays the
/// script call overhead (several microseconds, most of a renewal's cost)
/// once per call, not once per lock; and several calls per round trip, so
/// that the renewing thread and the server do not hand the CPU back and
/// forth once per call. Both are what lets one server keep 100 000 leases of
/// a few seconds renewed. Every key must live on the connection's server
/// (for a cluster: the keys of one call in one slot).
///
/// With `by_slot` (a cluster), `batch` comes sorted by hash slot and no call
/// mixes two slots: a multi-key script may not cross slots.
///
/// `extra` commands ride along at the start of the same pipeline (the
/// client's holder record: see `record`); their replies come back as they
/// are. They must be safe to send twice: the pipeline is sent again when
/// the server lost its script cache.
pub(crate) fn renew_batch(
    conn: &mut redis::Connection,
    batch: &[Renewal<'_>],
    per_call: usize,
    by_slot: bool,
    extra: &[redis::Cmd],
) -> Result<(Vec<Result<bool>>, Vec<Value>)> {
    let groups = script_calls(batch, per_call, by_slot);
    let calls = groups.len();
    let build = |extra: &[redis::Cmd]| {
        let mut pipe = redis::pipe();
        for cmd in extra {
            pipe.add_command(cmd.clone());
        }
        for call in groups.iter().copied() {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(RENEW_MANY.get_hash())
                .arg(call.len());
            for r in call {
                cmd.arg(r.key);
            }
            for r in call {
                cmd.arg(r.lease_ms).arg(r.holder);
            }
        }
        pipe
    };
    if batch.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut replies = query_pipeline(conn, &build(extra), extra.len() + calls)?;
    let extra_replies: Vec<Value> = replies.drain(..extra.len()).collect();
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
    if replies.iter().any(noscript) {
        // The server lost its script cache (restart, SCRIPT FLUSH), or
        // never had the script: load it and send the calls once more. The
        // extra commands ran already: not again (a record write sent twice
        // writes its fields twice).
        RENEW_MANY.load(conn).map_err(Error::redis)?;
        replies = query_pipeline(conn, &build(&[]), calls)?;
    }
    if replies.len() != calls {
        return Err(Error::Protocol(format!(
            "renew pipeline answered {} replies for {calls} calls",
            replies.len()
        )));
    }
    let mut out = Vec::with_capacity(batch.len());
    for (reply, call) in replies.into_iter().zip(groups.iter().copied()) {
        match reply {
            Value::Array(items) if items.len() == call.len() => {
                for (item, r) in items.iter().zip(call) {
                    out.push(match item {
                        Value::Int(1) => Ok(true),
                        Value::Int(0) => Ok(false),
                        Value::Int(-1) => Err(Error::WrongType {
                            key: String::from_utf8_lossy(r.key).into_owned(),
                        }),
                        other => return Err(unexpected("renew", other)),
                    });
                }
            }
            Value::ServerError(e) => {
                let err = redis::RedisError::from(e);
                for r in call {
                    out.push(Err(Error::from_redis(err.clone(), r.key)));
                }
            }
            other => return Err(unexpected("renew", &other)),
        }
    }
    Ok((out, extra_replies))
}

/// Splits one round trip's renewals into script calls of at most
/// `per_call` renewals each; with `by_slot` (a cluster, `batch` sorted by
/// slot) no call mixes two slots. The round trip carries every call this
/// returns, however many: its size is bounded by its renewals (the caller
/// takes `renew_batch` x 16 of them), so that locks spread thin over the
/// slots (a cluster's 16,384 slots hold one or two of 30,000 locks each)
/// cost as few round trips as on one server, only more calls in each.
fn script_calls<'b, 'a>(
    batch: &'b [Renewal<'a>],
    per_call: usize,
    by_slot: bool,
) -> Vec<&'b [Renewal<'a>]> {
    let per_call = per_call.max(1);
    if by_slot {
        batch
            .chunk_by(|a, b| crate::keys::slot(a.key) == crate::keys::slot(b.key))
            .flat_map(|group| group.chunks(per_call))
            .collect()
    } else {
        batch.chunks(per_call).collect()
    }
}

/// Runs the force-unlock script: `true` when a lock was deleted. With the
/// `queue` of a fair lock, only its head is woken, on its own channel.
pub(crate) fn force_unlock(
    conn: &mut dyn redis::ConnectionLike,
    publish: Publish,
    key: &[u8],
    channel: &[u8],
    queue: Option<&[u8]>,
) -> Result<bool> {
    let mut invocation = FORCE_UNLOCK.get(publish).key(key);
    if let Some(queue) = queue {
        invocation.key(queue);
    }
    let reply: Value = invocation
        .arg(UNLOCK_MESSAGE)
        .arg(channel)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("force unlock", &other)),
    }
}

/// Drops every hold of `holder` at once: `true` when it held the lock.
/// With the `queue` of a fair lock, only its head is woken, on its own
/// channel.
pub(crate) fn release_holder(
    conn: &mut dyn redis::ConnectionLike,
    publish: Publish,
    key: &[u8],
    channel: &[u8],
    queue: Option<&[u8]>,
    holder: &str,
) -> Result<bool> {
    let mut invocation = RELEASE_HOLDER.get(publish).key(key);
    if let Some(queue) = queue {
        invocation.key(queue);
    }
    let reply: Value = invocation
        .arg(UNLOCK_MESSAGE)
        .arg(holder)
        .arg(channel)
        .invoke(conn)
        .map_err(|e| Error::from_redis(e, key))?;
    match reply {
        Value::Nil => Ok(false),
        Value::Int(1) => Ok(true),
        other => Err(unexpected("release holder", &other)),
    }
}

fn unexpected(what: &str, reply: &Value) -> Error {
    Error::Protocol(format!("unexpected {what} reply {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renewals(keys: &[Vec<u8>]) -> Vec<Renewal<'_>> {
        keys.iter()
            .map(|k| Renewal {
                key: k,
                holder: "h",
                lease_ms: 3_000,
            })
            .collect()
    }

    #[test]
    fn one_server_packs_full_calls() {
        let keys: Vec<Vec<u8>> = (0..1_600).map(|i| format!("k{i}").into_bytes()).collect();
        let batch = renewals(&keys);
        let calls = script_calls(&batch, 100, false);
        assert_eq!(calls.len(), 16);
        assert!(calls.iter().all(|c| c.len() == 100));
    }

    #[test]
    fn cluster_calls_stay_in_one_slot_and_share_one_round_trip() {
        // 1,600 renewals of thinly spread locks, sorted by slot as the
        // worker sorts them: one round trip of many small calls, none
        // crossing a slot, none lost or repeated.
        let mut keys: Vec<Vec<u8>> = (0..1_600)
            .map(|i| format!("w1c-{i}").into_bytes())
            .collect();
        keys.sort_by_cached_key(|k| crate::keys::slot(k));
        let batch = renewals(&keys);
        let calls = script_calls(&batch, 100, true);
        assert!(calls.len() > 16 * 10, "{} calls", calls.len());
        assert_eq!(calls.iter().map(|c| c.len()).sum::<usize>(), 1_600);
        for call in &calls {
            let slot = crate::keys::slot(call[0].key);
            assert!(call.iter().all(|r| crate::keys::slot(r.key) == slot));
        }
        // Keys of one slot (a hash tag) fill calls up to `per_call`.
        let tagged: Vec<Vec<u8>> = (0..250)
            .map(|i| format!("{{t}}:{i}").into_bytes())
            .collect();
        let batch = renewals(&tagged);
        let sizes: Vec<usize> = script_calls(&batch, 100, true)
            .iter()
            .map(|c| c.len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
    }

    #[test]
    fn scripts_are_constants_with_headers() {
        for text in [
            include_str!("../../lua/lock.lua"),
            include_str!("../../lua/unlock.lua"),
            include_str!("../../lua/renew.lua"),
            include_str!("../../lua/renew_many.lua"),
            include_str!("../../lua/force_unlock.lua"),
            include_str!("../../lua/release_holder.lua"),
            include_str!("../../lua/fair_lock.lua"),
            include_str!("../../lua/fair_unlock.lua"),
            include_str!("../../lua/fair_leave.lua"),
            include_str!("../../lua/fenced_lock.lua"),
            include_str!("../../lua/fenced_set.lua"),
        ] {
            assert!(text.starts_with("-- "));
            assert!(text.contains("KEYS[1]"));
            assert!(text.contains("Returns"));
        }
    }

    #[test]
    fn the_classic_variant_publishes_in_place_of_notify() {
        let classic = assemble("", &publish_inline(include_str!("../../lua/unlock.lua")));
        assert!(!classic.contains("notify("));
        assert!(classic.contains("redis.call('publish', ARGV[4], ARGV[1])"));
        let notify = include_str!("../../lua/notify.lua");
        // Outside a Cluster, notify is exactly one classic PUBLISH.
        let classic_branch = "    if not cluster then\n        redis.call('publish', channel, message)\n        return\n    end\n";
        assert!(notify.contains(classic_branch));
    }

    #[test]
    fn a_prelude_goes_at_its_mark_or_first() {
        assert_eq!(
            assemble("P\n", "a\n-- @prelude\nb\n"),
            "a\nP\n-- @prelude\nb\n"
        );
        assert_eq!(assemble("P\n", "a\nb\n"), "P\na\nb\n");
        // The lock's and the unlock's common paths run before any helper
        // is made.
        let lock = assemble(
            include_str!("../../lua/lock_shape.lua"),
            include_str!("../../lua/lock.lua"),
        );
        let first_helper = lock.find("local function").unwrap();
        assert!(lock.find("    return nil\nend\n").unwrap() < first_helper);
        let unlock = assemble(
            "local function notify() end\n",
            include_str!("../../lua/unlock.lua"),
        );
        assert!(
            unlock.find("    return 0\nend\n").unwrap() < unlock.find("local function").unwrap()
        );
    }

    #[test]
    fn only_notify_publishes() {
        let notify = include_str!("../../lua/notify.lua");
        assert!(notify.contains("local function notify(channel, message)"));
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut callers = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() == "notify.lua" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect();
            assert!(
                !code.contains("'publish'") && !code.contains("'spublish'"),
                "{path:?} publishes without notify"
            );
            callers += usize::from(code.contains("notify("));
        }
        assert_eq!(callers, 17);
    }

    /// A channel in KEYS is a key that never exists: while its slot
    /// migrates, Redis refuses the script (`TRYAGAIN`) for the whole
    /// migration, as the lock key is on the node and the channel is not.
    #[test]
    fn no_script_declares_a_channel_as_a_key() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut publishers = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| l.starts_with("-- KEYS[")) {
                assert!(!line.contains("channel"), "{path:?}: {line}");
            }
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect();
            assert!(!code.contains("notify(KEYS"), "{path:?}");
            publishers += usize::from(code.contains("notify(ARGV["));
        }
        assert_eq!(publishers, 17);
    }

    #[test]
    fn fenced_replies_parse() {
        let arr = |v: Vec<Value>| Value::Array(v);
        assert_eq!(
            fenced_acquire_reply(&arr(vec![Value::Int(1), Value::Int(7)])).unwrap(),
            Acquire::Acquired { token: Some(7) }
        );
        assert_eq!(
            fenced_acquire_reply(&arr(vec![Value::Int(0), Value::Int(-1)])).unwrap(),
            Acquire::Busy { pttl: None }
        );
        assert!(fenced_acquire_reply(&arr(vec![Value::Int(1), Value::Int(0)])).is_err());
        assert!(fenced_acquire_reply(&Value::Nil).is_err());
        let written = arr(vec![Value::Int(1), Value::BulkString(b"9".to_vec())]);
        assert_eq!(fenced_set_reply(&written).unwrap(), FencedSet::Written);
        let max = u64::MAX.to_string().into_bytes();
        let rejected = arr(vec![Value::Int(0), Value::BulkString(max)]);
        assert_eq!(
            fenced_set_reply(&rejected).unwrap(),
            FencedSet::Rejected(u64::MAX)
        );
        let garbage = arr(vec![Value::Int(0), Value::BulkString(b"x".to_vec())]);
        assert!(fenced_set_reply(&garbage).is_err());
    }

    #[test]
    fn fair_replies_parse() {
        let arr = |v: Vec<Value>| Value::Array(v);
        assert_eq!(
            fair_acquire_reply(&arr(vec![Value::Int(1)])).unwrap(),
            Acquire::Acquired { token: None }
        );
        assert_eq!(
            fair_acquire_reply(&arr(vec![Value::Int(0), Value::Int(250)])).unwrap(),
            Acquire::Busy {
                pttl: Some(Duration::from_millis(250))
            }
        );
        assert!(fair_acquire_reply(&Value::Nil).is_err());
    }

    #[test]
    fn negative_pttl_means_no_expiry() {
        assert_eq!(ttl_from(-1), None);
        assert_eq!(ttl_from(-2), None);
        assert_eq!(ttl_from(1500), Some(Duration::from_millis(1500)));
    }
}
