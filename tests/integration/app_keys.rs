//! A lock is recognised by its shape, never by its type alone: an
//! application's hashes (a cart, a user, a session) sharing a name with a
//! lock are refused at once by every acquire and force unlock, left byte
//! for byte intact, and skipped by `list`; a hash far too large to be a
//! lock costs the server no more than a lock does. Redisson-shaped locks
//! (Java UUID holder ids, a read-write lock's `mode` and `:write` fields,
//! node-redisson's and goRedisson's holder ids) still are locks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redguard::{Error, LockKind};

use crate::support::{RedisServer, TestContext, ms, unique_name};

/// A Java client's holder id as Redisson writes it: `UUID.randomUUID()`,
/// a colon, the thread id.
pub(crate) const JAVA: &str = "5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10";

/// Well below any wait asked for below (10 s): a refusal is at once.
const AT_ONCE: Duration = Duration::from_secs(2);

/// The three application hashes, under fresh names: a cart with a
/// ttl, a user and a session without.
pub(crate) fn app_hashes(server: &RedisServer) -> Vec<String> {
    let cart = unique_name("cart");
    let user = unique_name("user");
    let session = unique_name("session");
    let () = server.cmd("HSET", &[cart.as_bytes(), b"sku123", b"2", b"sku777", b"1"]);
    let _: i64 = server.cmd("PEXPIRE", &[cart.as_bytes(), b"600000"]);
    let () = server.cmd("HSET", &[user.as_bytes(), b"age", b"41", b"visits", b"3"]);
    let () = server.cmd("HSET", &[session.as_bytes(), b"a", b"1", b"b", b"2"]);
    vec![cart, user, session]
}

/// What a key holds, byte for byte (`DUMP`), and whether it keeps a ttl.
pub(crate) fn snapshot(server: &RedisServer, key: &str) -> (Vec<u8>, bool) {
    let dump: Vec<u8> = server.cmd("DUMP", &[key.as_bytes()]);
    (dump, server.pttl(key) > 0)
}

/// Asserts that `key` is as `before` (its ttl, when it had one, not
/// lengthened past its start: 600 s).
pub(crate) fn assert_intact(server: &RedisServer, key: &str, before: &(Vec<u8>, bool)) {
    let now = snapshot(server, key);
    assert_eq!(now.0, before.0, "{key} was changed");
    assert_eq!(now.1, before.1, "{key}'s ttl was changed");
    let pttl = server.pttl(key);
    assert!(
        pttl == -1 || (0..=600_000).contains(&pttl),
        "{key}: pttl {pttl}"
    );
    if !before.1 {
        assert_eq!(pttl, -1, "{key} was given a ttl");
    }
}

/// One call on a key: its name, and whether it answered `WrongType`.
type Attempt<'a> = (&'static str, Box<dyn Fn() -> bool + 'a>);

fn is_wrong_type<T: std::fmt::Debug>(result: &redguard::Result<T>) -> bool {
    matches!(result, Err(Error::WrongType { .. }))
}

/// Every acquire of every kind, and every force unlock, refuses the
/// issue's hashes at once with `WrongType` (a wait of 10 s asked for is not
/// waited), and leaves them byte for byte intact; `inspect` calls them
/// `Other`, `holders` refuses them.
#[test]
fn app_hashes_are_refused_at_once_by_every_acquire_and_force_unlock() {
    let ctx = TestContext::new();
    let client = &ctx.client;
    for key in app_hashes(&ctx.server) {
        let before = snapshot(&ctx.server, &key);
        let wait = Duration::from_secs(10);
        let attempts: Vec<Attempt<'_>> = vec![
            (
                "lock",
                Box::new(|| is_wrong_type(&client.lock(&key).lock())),
            ),
            (
                "try_lock_for",
                Box::new(|| is_wrong_type(&client.lock(&key).try_lock_for(wait))),
            ),
            (
                "try_lock",
                Box::new(|| is_wrong_type(&client.lock(&key).try_lock())),
            ),
            (
                "fair try_lock_for",
                Box::new(|| is_wrong_type(&client.fair_lock(&key).try_lock_for(wait))),
            ),
            (
                "fenced try_lock_for",
                Box::new(|| is_wrong_type(&client.fenced_lock(&key).try_lock_for(wait))),
            ),
            (
                "read try_lock_for",
                Box::new(|| is_wrong_type(&client.read_write_lock(&key).read().try_lock_for(wait))),
            ),
            (
                "write try_lock_for",
                Box::new(|| {
                    is_wrong_type(&client.read_write_lock(&key).write().try_lock_for(wait))
                }),
            ),
            (
                "once",
                Box::new(|| is_wrong_type(&client.once(&key, Duration::from_secs(60)))),
            ),
            (
                "once_status",
                Box::new(|| is_wrong_type(&client.once_status(&key))),
            ),
            (
                "forget_once",
                Box::new(|| is_wrong_type(&client.forget_once(&key))),
            ),
            (
                "force_unlock",
                Box::new(|| is_wrong_type(&client.lock(&key).force_unlock())),
            ),
            (
                "fair force_unlock",
                Box::new(|| is_wrong_type(&client.fair_lock(&key).force_unlock())),
            ),
            (
                "holders",
                Box::new(|| is_wrong_type(&client.lock(&key).holders())),
            ),
        ];
        for (what, attempt) in attempts {
            let t0 = Instant::now();
            assert!(attempt(), "{what} on {key}: not WrongType");
            assert!(
                t0.elapsed() < AT_ONCE,
                "{what} on {key}: {:?}",
                t0.elapsed()
            );
            assert_intact(&ctx.server, &key, &before);
        }
        // A read-write force unlock finds no "mode": nothing to delete.
        assert!(!client.read_write_lock(&key).write().force_unlock().unwrap());
        let info = client.lock(&key).inspect().unwrap();
        assert_eq!(
            info.kind,
            LockKind::Other {
                redis_type: "hash".into()
            },
            "{key}"
        );
        assert!(info.holders.is_empty());
        assert_intact(&ctx.server, &key, &before);
        // No fair queue was left behind by the refused fair acquire.
        assert!(!ctx.server.exists(format!("redisson_lock_queue:{{{key}}}")));
    }
}

/// A hash with a read-write lock's `mode` field but other fields beside
/// is not a lock either: neither side joins it, a force unlock of either
/// side refuses it. Nor is a hash with an `outcome` field and others a
/// run-once record.
#[test]
fn a_mode_field_alone_does_not_make_a_lock() {
    let ctx = TestContext::new();
    // An application's hash with an "outcome" field is no run-once record.
    let result = unique_name("result");
    let () = ctx.server.cmd(
        "HSET",
        &[result.as_bytes(), b"outcome", b"win", b"score", b"3"],
    );
    let before = snapshot(&ctx.server, &result);
    assert!(is_wrong_type(&ctx.client.forget_once(&result)));
    assert!(is_wrong_type(&ctx.client.once_status(&result)));
    assert!(is_wrong_type(
        &ctx.client.lock(&result).try_lock_for(ms(5000))
    ));
    assert_intact(&ctx.server, &result, &before);
    // As many fields as a record, but not a record's.
    let () = ctx.server.cmd("HSET", &[result.as_bytes(), b"level", b"2"]);
    let before = snapshot(&ctx.server, &result);
    assert!(is_wrong_type(&ctx.client.forget_once(&result)));
    assert!(is_wrong_type(&ctx.client.once_status(&result)));
    assert_intact(&ctx.server, &result, &before);

    let key = unique_name("settings");
    let () = ctx.server.cmd(
        "HSET",
        &[key.as_bytes(), b"mode", b"read", b"theme", b"dark"],
    );
    let before = snapshot(&ctx.server, &key);
    let rw = ctx.client.read_write_lock(&key);
    assert!(is_wrong_type(&rw.read().try_lock_for(ms(5000))));
    assert!(is_wrong_type(&rw.write().try_lock_for(ms(5000))));
    assert!(is_wrong_type(&rw.read().force_unlock()));
    assert!(is_wrong_type(&rw.write().force_unlock()));
    assert!(is_wrong_type(&ctx.client.lock(&key).force_unlock()));
    assert_intact(&ctx.server, &key, &before);
}

/// Fields named like holders are not enough: a hold count is an integer,
/// and a hash of more than `MAX_LOCK_FIELDS` fields is no lock even when
/// every field looks like a holder's. A lock of exactly that many holders
/// (readers) is read whole, over several `HSCAN` pages.
#[test]
fn holder_ids_with_other_values_or_too_many_fields_are_no_lock() {
    let ctx = TestContext::new();
    let client = &ctx.client;
    let pending = unique_name("not-counts");
    let field = format!("{JAVA}:1");
    let () = ctx
        .server
        .cmd("HSET", &[pending.as_bytes(), field.as_bytes(), b"pending"]);
    let before = snapshot(&ctx.server, &pending);
    let t0 = Instant::now();
    assert!(is_wrong_type(&client.lock(&pending).try_lock_for(ms(5000))));
    assert!(t0.elapsed() < AT_ONCE, "{:?}", t0.elapsed());
    assert!(is_wrong_type(&client.lock(&pending).force_unlock()));
    assert!(matches!(
        client.lock(&pending).inspect().unwrap().kind,
        LockKind::Other { .. }
    ));
    assert_intact(&ctx.server, &pending, &before);

    let fill = |key: &str, fields: u64| {
        let mut hset = redis::cmd("HSET");
        hset.arg(key);
        for i in 0..fields {
            hset.arg(format!("{}:{i}", &JAVA)).arg(1);
        }
        let _: i64 = hset.query(&mut ctx.server.conn()).unwrap();
    };
    let many = unique_name("many-holders");
    fill(&many, redguard::MAX_LOCK_FIELDS + 1);
    let t0 = Instant::now();
    assert!(is_wrong_type(&client.lock(&many).try_lock_for(ms(5000))));
    assert!(t0.elapsed() < AT_ONCE, "{:?}", t0.elapsed());
    assert!(is_wrong_type(&client.lock(&many).force_unlock()));
    assert!(is_wrong_type(&client.lock(&many).holders()));
    let info = client.lock(&many).inspect().unwrap();
    assert!(
        matches!(info.kind, LockKind::Other { .. }),
        "{:?}",
        info.kind
    );
    let len: u64 = ctx.server.cmd("HLEN", &[many.as_bytes()]);
    assert_eq!(len, redguard::MAX_LOCK_FIELDS + 1);

    let most = unique_name("most-holders");
    fill(&most, redguard::MAX_LOCK_FIELDS);
    let info = client.lock(&most).inspect().unwrap();
    assert_eq!(info.kind, LockKind::Reentrant);
    assert_eq!(info.holders.len() as u64, redguard::MAX_LOCK_FIELDS);
    assert_eq!(
        client.lock(&most).holders().unwrap().len() as u64,
        redguard::MAX_LOCK_FIELDS
    );
    assert!(client.lock(&most).try_lock().unwrap().is_none());
    assert!(client.lock(&most).force_unlock().unwrap());
}

/// Locks as Redisson writes them (Java UUID holder ids, a read-write
/// lock's `mode` and `<holder id>:write` fields, a fair queue) are locks:
/// shown with their holders, waited on (busy, not refused), force-unlocked.
#[test]
fn redisson_shaped_locks_are_still_locks() {
    let ctx = TestContext::new();
    let client = &ctx.client;
    let server = &ctx.server;

    let reentrant = unique_name("java-reentrant");
    let holder = format!("{JAVA}:1");
    let () = server.cmd("HSET", &[reentrant.as_bytes(), holder.as_bytes(), b"2"]);
    let _: i64 = server.cmd("PEXPIRE", &[reentrant.as_bytes(), b"30000"]);
    let info = client.lock(&reentrant).inspect().unwrap();
    assert_eq!(info.kind, LockKind::Reentrant);
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].0, holder.as_str());
    assert_eq!(info.holders[0].1, 2);
    assert_eq!(client.lock(&reentrant).holders().unwrap().len(), 1);
    assert!(client.lock(&reentrant).try_lock().unwrap().is_none());
    assert!(client.fenced_lock(&reentrant).try_lock().unwrap().is_none());
    // Redisson's reactive API draws random, possibly negative, thread ids.
    let negative = unique_name("java-negative");
    let field = format!("{JAVA}:-8172635");
    let () = server.cmd("HSET", &[negative.as_bytes(), field.as_bytes(), b"1"]);
    assert!(client.lock(&negative).try_lock().unwrap().is_none());
    assert!(client.lock(&negative).force_unlock().unwrap());

    let writer = unique_name("java-write");
    let field = format!("{JAVA}:7:write");
    let () = server.cmd(
        "HSET",
        &[writer.as_bytes(), b"mode", b"write", field.as_bytes(), b"1"],
    );
    let _: i64 = server.cmd("PEXPIRE", &[writer.as_bytes(), b"30000"]);
    let info = client.lock(&writer).inspect().unwrap();
    assert_eq!(
        info.kind,
        LockKind::ReadWrite {
            mode: "write".into()
        }
    );
    assert_eq!(info.holders[0].0, field.as_str());
    let rw = client.read_write_lock(&writer);
    assert!(rw.read().try_lock().unwrap().is_none());
    assert!(rw.write().try_lock().unwrap().is_none());
    assert!(rw.write().force_unlock().unwrap());
    assert!(!server.exists(&writer));

    // A Java reader holds the read side: a redguard reader joins it.
    let readers = unique_name("java-read");
    let reader = format!("{JAVA}:3");
    let () = server.cmd(
        "HSET",
        &[
            readers.as_bytes(),
            b"mode",
            b"read",
            reader.as_bytes(),
            b"1",
        ],
    );
    let _: i64 = server.cmd("PEXPIRE", &[readers.as_bytes(), b"30000"]);
    let guard = client.read_write_lock(&readers).read().try_lock().unwrap();
    assert!(guard.is_some(), "a reader joins a Java reader");
    assert_eq!(
        client.lock(&readers).inspect().unwrap().holders.len(),
        2,
        "both readers are shown"
    );
    drop(guard);

    // A fair lock held by a Java client with a Java waiter queued.
    let fair = unique_name("java-fair");
    let queue = format!("redisson_lock_queue:{{{fair}}}");
    let waiter = format!("{JAVA}:9");
    let () = server.cmd("HSET", &[fair.as_bytes(), holder.as_bytes(), b"1"]);
    let _: i64 = server.cmd("PEXPIRE", &[fair.as_bytes(), b"30000"]);
    let _: i64 = server.cmd("RPUSH", &[queue.as_bytes(), waiter.as_bytes()]);
    let info = client.fair_lock(&fair).inspect().unwrap();
    match &info.kind {
        LockKind::Fair { queue } => assert_eq!(queue[0].holder, waiter.as_str()),
        other => panic!("{other:?}"),
    }
    assert_eq!(info.queue_len, 1);
    assert!(client.fair_lock(&fair).force_unlock().unwrap());
    assert!(!server.exists(&fair));
}

/// A second UUID, as node-redisson puts after its client's: its holder ids
/// are `<client uuid>:<lock handle uuid>`.
const HANDLE: &str = "0b7c3f1e-2d4a-4e6b-9c8d-7a6f5e4d3c2b";

/// Holder ids of the other Redisson-protocol clients are holders for both
/// rules, the acquire scripts' (`lua/lock_shape.lua`: busy, not refused;
/// force-unlocked) and the reads' (`src/lock/shape.rs`: shown with the
/// holder): node-redisson's `<uuid>:<uuid>`, goRedisson's
/// `<uuid>:<goroutine id>`, each also as a read-write lock's writer. Near
/// misses (a UUID cut short or run on) are refused by both.
#[test]
fn holder_ids_of_other_redisson_protocol_clients_are_locks() {
    let ctx = TestContext::new();
    let client = &ctx.client;
    let server = &ctx.server;
    let node = format!("{JAVA}:{HANDLE}");
    for (who, field, mode, count) in [
        ("node-redisson", node.clone(), None, "1"),
        (
            "node-redisson writer",
            format!("{node}:write"),
            Some("write"),
            "1",
        ),
        ("goRedisson", format!("{JAVA}:18"), None, "1"),
        (
            "goRedisson writer",
            format!("{JAVA}:18:write"),
            Some("write"),
            "1",
        ),
        // The bounds: 20 digits and a sign, 1,000 holds.
        (
            "the longest thread id, the most holds",
            format!("{JAVA}:-12345678901234567890"),
            None,
            "1000",
        ),
    ] {
        let name = unique_name("peer-held");
        let () = server.cmd(
            "HSET",
            &[name.as_bytes(), field.as_bytes(), count.as_bytes()],
        );
        if let Some(mode) = mode {
            let () = server.cmd("HSET", &[name.as_bytes(), b"mode", mode.as_bytes()]);
        }
        let _: i64 = server.cmd("PEXPIRE", &[name.as_bytes(), b"30000"]);
        let info = client.lock(&name).inspect().unwrap();
        assert!(
            !matches!(info.kind, LockKind::Other { .. }),
            "{who}: {:?}",
            info.kind
        );
        assert_eq!(info.holders.len(), 1, "{who}");
        assert_eq!(info.holders[0].0, field.as_str(), "{who}");
        let busy = match mode {
            Some(_) => client.read_write_lock(&name).read().try_lock(),
            None => client.lock(&name).try_lock(),
        };
        assert!(busy.unwrap().is_none(), "{who}: the acquire script refused");
        let forced = match mode {
            Some(_) => client.read_write_lock(&name).write().force_unlock(),
            None => client.lock(&name).force_unlock(),
        };
        assert!(forced.unwrap(), "{who}");
        assert!(!server.exists(&name), "{who}");
    }
    for (field, count) in [
        (format!("{JAVA}:{HANDLE}0"), "1"),
        (format!("{JAVA}:{}", &HANDLE[1..]), "1"),
        (format!("{JAVA}:{}", HANDLE.replace('-', "")), "1"),
        (format!("{JAVA}:{HANDLE}:1"), "1"),
        (format!("{JAVA}:123456789012345678901"), "1"),
        (format!("{JAVA}:1"), "10001"),
    ] {
        let name = unique_name("peer-like");
        let () = server.cmd(
            "HSET",
            &[name.as_bytes(), field.as_bytes(), count.as_bytes()],
        );
        let before = snapshot(server, &name);
        assert!(
            is_wrong_type(&client.lock(&name).try_lock()),
            "{field}: the acquire script took it for a lock"
        );
        assert!(
            matches!(
                client.lock(&name).inspect().unwrap().kind,
                LockKind::Other { .. }
            ),
            "{field}: read as a lock"
        );
        assert_intact(server, &name, &before);
    }
}

/// A fair queue longer than `MAX_QUEUE_READ` is read to that bound, with
/// the total length beside it.
#[test]
fn a_long_fair_queue_is_read_to_a_bound() {
    let ctx = TestContext::new();
    let fair = long_fair_queue(&ctx.server, 2_500);
    let info = ctx.client.fair_lock(&fair).inspect().unwrap();
    match &info.kind {
        LockKind::Fair { queue } => {
            assert_eq!(queue.len() as u64, redguard::MAX_QUEUE_READ);
            assert_eq!(queue[0].holder, format!("{JAVA}:10").as_str());
            assert!(queue[0].deadline.is_some(), "deadlines are read by member");
            assert!(queue[1].deadline.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(info.queue_len, 2_500);
}

/// An expiring semaphore whose lease set holds 25,000 members (another
/// application's sorted set by that name, or a leak): `inspect` and
/// `leases` read the 1,000 that end first, never the whole set.
#[test]
fn a_huge_lease_set_is_read_to_a_bound() {
    let ctx = TestContext::new();
    let name = unique_name("big-leases");
    let set = format!("{{{name}}}:timeout");
    let mut conn = ctx.server.conn();
    let mut pipe = redis::pipe();
    for i in 0..25_000_u64 {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&i.to_be_bytes());
        pipe.cmd("ZADD")
            .arg(&set)
            .arg(4_000_000_000_000_u64 + i)
            .arg(&id[..])
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    let semaphore = ctx.client.expiring_semaphore(&name);
    let leases = semaphore.leases().unwrap();
    assert_eq!(leases.len(), 1_000);
    let info = semaphore.inspect().unwrap();
    assert_eq!(info.permits.len(), 1_000);
    let card: u64 = ctx.server.cmd("ZCARD", &[set.as_bytes()]);
    assert_eq!(card, 25_000, "read, not changed");
}

/// A fair lock held by a Java holder with `waiters` Java waiters queued
/// (the first with a deadline far ahead); its name.
pub(crate) fn long_fair_queue(server: &RedisServer, waiters: usize) -> String {
    let fair = unique_name("long-fair");
    let queue = format!("redisson_lock_queue:{{{fair}}}");
    let timeouts = format!("redisson_lock_timeout:{{{fair}}}");
    let holder = format!("{JAVA}:1");
    let mut conn = server.conn();
    let mut pipe = redis::pipe();
    pipe.cmd("HSET").arg(&fair).arg(&holder).arg(1).ignore();
    pipe.cmd("PEXPIRE").arg(&fair).arg(600_000).ignore();
    for i in 0..waiters {
        pipe.cmd("RPUSH")
            .arg(&queue)
            .arg(format!("{JAVA}:{}", i + 10))
            .ignore();
    }
    // Deadlines of others sort before the head's: a read of the zset's
    // first entries would miss the head's.
    for i in 0..1_500 {
        pipe.cmd("ZADD")
            .arg(&timeouts)
            .arg(1_000 + i)
            .arg(format!("{JAVA}:{}", 100_000 + i))
            .ignore();
    }
    pipe.cmd("ZADD")
        .arg(&timeouts)
        .arg(4_102_444_800_000_u64)
        .arg(format!("{JAVA}:10"))
        .ignore();
    let () = pipe.query(&mut conn).unwrap();
    fair
}

/// Runs `work` while another connection sends `PING`s one after another
/// (1 ms apart); returns the longest a `PING` waited, and what `work`
/// returned.
pub(crate) fn while_pinging<T>(server: &RedisServer, work: impl FnOnce() -> T) -> (Duration, T) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut conn = server.conn();
    let pinger = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            let start = Instant::now();
            // Bounded in count and time, whatever `work` does.
            for _ in 0..1_000_000 {
                if stop.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(60) {
                    break;
                }
                let t0 = Instant::now();
                let _: String = redis::cmd("PING").query(&mut conn).unwrap();
                longest = longest.max(t0.elapsed());
                // Pacing, not waiting for anything.
                crate::support::sleep(ms(1));
            }
            longest
        })
    };
    let out = work();
    stop.store(true, Ordering::Relaxed);
    (pinger.join().unwrap(), out)
}

/// Fills `key` with `fields` integer fields, in scripts of 20,000 fields
/// each, so that the filling holds the server up only briefly each time.
pub(crate) fn fill_big_hash(server: &RedisServer, key: &str, fields: u64) {
    let mut conn = server.conn();
    // A script of 20,000 fields takes milliseconds, but far longer on a
    // loaded machine than the admin connection's timeout allows.
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let fill = redis::Script::new(
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
         redis.call('hset', KEYS[1], i, i) end return 1",
    );
    let mut from = 0;
    while from < fields {
        let to = (from + 20_000).min(fields) - 1;
        let _: i64 = fill.key(key).arg(from).arg(to).invoke(&mut conn).unwrap();
        from = to + 1;
    }
    let len: u64 = server.cmd("HLEN", &[key.as_bytes()]);
    assert_eq!(len, fields);
}

/// With a hash of 1,000,000 fields present, the library's reads of it
/// (`inspect`, `holders`, `list_locks`) and its refusals (an acquire, a
/// force unlock) end within a second all together, and another client's
/// `PING`s meanwhile never wait more than 50 ms: nothing reads it whole.
#[test]
fn a_million_field_hash_is_not_read_by_the_library() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    let big = unique_name("big");
    fill_big_hash(&ctx.server, &big, 1_000_000);
    let (max_ping, took) = while_pinging(&ctx.server, || {
        let lock = ctx.client.lock(&big);
        let t0 = Instant::now();
        let info = lock.inspect().unwrap();
        assert!(
            matches!(info.kind, LockKind::Other { .. }),
            "{:?}",
            info.kind
        );
        assert!(is_wrong_type(&lock.holders()));
        assert!(ctx.client.list_locks("big*", false).unwrap().is_empty());
        assert_eq!(ctx.client.list_locks(&big, true).unwrap().len(), 1);
        assert!(is_wrong_type(&lock.try_lock_for(Duration::from_secs(10))));
        assert!(is_wrong_type(
            &ctx.client
                .fair_lock(&big)
                .try_lock_for(Duration::from_secs(10))
        ));
        assert!(is_wrong_type(&lock.force_unlock()));
        t0.elapsed()
    });
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(max_ping < ms(50), "a PING waited {max_ping:?}");
    assert_eq!(ctx.server.command_calls(&["hgetall", "hkeys", "hvals"]), 0);
    let len: u64 = ctx.server.cmd("HLEN", &[big.as_bytes()]);
    assert_eq!((len, ctx.server.pttl(&big)), (1_000_000, -1));
}

/// Issue 44, item 6: hold counts drive loops in the read-write scripts
/// (one timeout key per read hold), so a count above `MAX_HOLD_COUNT`
/// (1,000) is no lock's. With `HSET <lock> <uuid>:1 1000000` on a read
/// lock held by a renewed and a fixed-lease reader, a newcomer is refused
/// (`WrongType`, key untouched) and read as no lock, while the holders'
/// renewals, look-ups and releases go on; then the remaining readers' own
/// counts are set to a million, and their renewal, look-up and release
/// find no hold.
/// No script ran 10 ms or longer (`SLOWLOG`, `slowlog-log-slower-than
/// 10000`): before the bound the release looped over a million timeout
/// keys for seconds.
#[test]
fn a_hostile_hold_count_on_a_held_read_lock_slows_no_script() {
    let ctx = TestContext::new();
    let server = &ctx.server;
    let () = server.cmd("CONFIG", &[b"SET", b"slowlog-log-slower-than", b"10000"]);
    let () = server.cmd("SLOWLOG", &[b"RESET"]);
    let url = server.url();
    let name = unique_name("hostile-count");
    let renewed = ctx.client.read_write_lock(&name).read().lock().unwrap();
    let other = crate::support::test_builder(&url).build().unwrap();
    let fixed = other
        .read_write_lock(&name)
        .with_lease(Duration::from_secs(20))
        .read()
        .lock()
        .unwrap();
    // A second fixed reader (another client: another holder id), kept
    // until its own count is raised below.
    let third = crate::support::test_builder(&url).build().unwrap();
    let kept = third
        .read_write_lock(&name)
        .with_lease(Duration::from_secs(20))
        .read()
        .lock()
        .unwrap();
    let hostile = format!("{JAVA}:1");
    let () = server.cmd("HSET", &[name.as_bytes(), hostile.as_bytes(), b"1000000"]);
    let newcomer = crate::support::test_builder(&url).build().unwrap();
    let fields_before: Vec<String> = server.cmd("HGETALL", &[name.as_bytes()]);
    assert!(is_wrong_type(
        &newcomer.read_write_lock(&name).read().try_lock()
    ));
    assert!(is_wrong_type(
        &newcomer.read_write_lock(&name).write().force_unlock()
    ));
    assert!(matches!(
        newcomer.lock(&name).inspect().unwrap().kind,
        LockKind::Other { .. }
    ));
    let fields_after: Vec<String> = server.cmd("HGETALL", &[name.as_bytes()]);
    assert_eq!(fields_before, fields_after, "the refusals changed the hash");
    // Renewals (every 300 ms) and the fixed hold's look-ups run meanwhile.
    let renewals = ctx.client.stats().renewals;
    assert!(crate::support::wait_until(ms(5_000), || {
        ctx.client.stats().renewals >= renewals + 3
    }));
    renewed.check().unwrap();
    fixed.check().unwrap();
    // Its release looks for the longest remaining hold among the others.
    let fixed_released = fixed.unlock();
    let slow: Vec<redis::Value> = server.cmd("SLOWLOG", &[b"GET", b"100"]);
    assert!(slow.is_empty(), "the release ran 10 ms or longer: {slow:?}");
    fixed_released.unwrap();

    // The readers' own counts, raised past the bound: no hold, for the
    // renewal and for the fixed hold's look-up alike.
    for own in [renewed.holder_id().as_str(), kept.holder_id().as_str()] {
        let () = server.cmd("HSET", &[name.as_bytes(), own.as_bytes(), b"1000000"]);
    }
    assert!(
        crate::support::wait_until(ms(5_000), || renewed.check().is_err()),
        "the renewal still found a hold"
    );
    assert!(
        crate::support::wait_until(ms(5_000), || kept.check().is_err()),
        "the look-up still found a hold"
    );
    let released = renewed.unlock();
    assert!(released.is_err(), "{released:?}");
    let released = kept.unlock();
    assert!(released.is_err(), "{released:?}");

    // A release that reaches the server before any renewal saw the raised
    // count (renewals every 20 s): no hold, and the count is left as it is.
    let late = crate::support::test_builder(&url)
        .watchdog_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let other_name = unique_name("hostile-own");
    let reader = late.read_write_lock(&other_name).read().lock().unwrap();
    let own = reader.holder_id().as_str().to_owned();
    let () = server.cmd("HSET", &[other_name.as_bytes(), own.as_bytes(), b"1000000"]);
    let released = reader.unlock();
    assert!(released.is_err(), "{released:?}");
    let count: String = server.cmd("HGET", &[other_name.as_bytes(), own.as_bytes()]);
    assert_eq!(count, "1000000", "the release changed the raised count");

    let slow: Vec<redis::Value> = server.cmd("SLOWLOG", &[b"GET", b"100"]);
    assert!(slow.is_empty(), "scripts ran 10 ms or longer: {slow:?}");
}
