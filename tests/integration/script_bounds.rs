//! Issue 44, item 6: no stored value makes a redguard script do unbounded
//! work. A tenant who can write a lock's keys plants what it can (a
//! million hash fields, list entries or zset members; 20-digit numbers)
//! beside each kind of synchronizer, in use or not; then the library drives
//! that kind (acquire, renew by the watchdog, inspect, release, force
//! unlock, delete) and no command of it runs 10 ms or longer (`SLOWLOG`,
//! `slowlog-log-slower-than 10000`, reset once the planting is done). Each
//! operation either works or fails with a clear error (`WrongType`), and
//! leaves the planted data as it was, or bounded work on it done.
//!
//! One server, the cases in sequence: each plants, drives, checks the log,
//! and frees its keys (`UNLINK`) before the next.

use std::time::{Duration, Instant};

use redguard::{Error, LockKind, Once};

use crate::app_keys::JAVA;
use crate::support::{RedisServer, TestContext, ms, unique_name, wait_until};

/// Writes `n` items `<prefix><i>` under `key` with `cmd` (`hset` with
/// the value `value`, `zadd` with the score `value`, `rpush`), in scripts
/// of 10,000 items (a few ms each, so that the locks of the case
/// keep their leases meanwhile) that send them 2,000 a command.
fn plant(server: &RedisServer, cmd: &str, key: &str, n: u64, prefix: &str, value: i64) {
    let fill = redis::Script::new(
        r"
        local cmd, prefix, value = ARGV[1], ARGV[4], ARGV[5]
        local args = {}
        for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
            if cmd == 'hset' then
                args[#args + 1] = prefix .. i
                args[#args + 1] = value
            elseif cmd == 'zadd' then
                args[#args + 1] = value
                args[#args + 1] = prefix .. i
            else
                args[#args + 1] = prefix .. i
            end
            if #args >= 2000 then
                redis.call(cmd, KEYS[1], unpack(args))
                args = {}
            end
        end
        if #args > 0 then
            redis.call(cmd, KEYS[1], unpack(args))
        end
        return 1",
    );
    let mut conn = server.conn();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut from = 0;
    while from < n {
        let to = (from + 10_000).min(n);
        let _: i64 = fill
            .key(key)
            .arg(cmd)
            .arg(from)
            .arg(to - 1)
            .arg(prefix)
            .arg(value)
            .invoke(&mut conn)
            .unwrap();
        from = to;
    }
}

/// `n` planted hash fields `f<i>` -> `1` (none a holder id).
fn plant_fields(server: &RedisServer, key: &str, n: u64) {
    plant(server, "hset", key, n, "f", 1);
}

/// `n` planted waiters `<uuid>:<i>` at the tail of a fair queue.
fn plant_queue(server: &RedisServer, key: &str, n: u64) {
    plant(server, "rpush", key, n, &format!("{JAVA}:"), 0);
}

/// `n` planted members `<uuid>:<i>` of a zset, all with the score `score`.
fn plant_zset(server: &RedisServer, key: &str, n: u64, score: i64) {
    plant(server, "zadd", key, n, &format!("{JAVA}:"), score);
}

/// From here on a command of 10 ms or more is logged.
fn watch_slowlog(server: &RedisServer) {
    let () = server.cmd("CONFIG", &[b"SET", b"slowlog-log-slower-than", b"10000"]);
    let () = server.cmd("SLOWLOG", &[b"RESET"]);
}

/// No command ran 10 ms or longer since `watch_slowlog`.
fn assert_none_slow(server: &RedisServer, case: &str) {
    let slow: Vec<redis::Value> = server.cmd("SLOWLOG", &[b"GET", b"100"]);
    assert!(
        slow.is_empty(),
        "{case}: commands ran 10 ms or longer: {slow:?}"
    );
}

fn unlink(server: &RedisServer, keys: &[&str]) {
    for key in keys {
        let _: i64 = server.cmd("UNLINK", &[key.as_bytes()]);
    }
}

fn len(server: &RedisServer, cmd: &str, key: &str) -> u64 {
    server.cmd(cmd, &[key.as_bytes()])
}

fn is_wrong_type<T: std::fmt::Debug>(result: &redguard::Result<T>) -> bool {
    matches!(result, Err(Error::WrongType { .. }))
}

/// The server's clock in ms since the epoch.
fn server_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = server.cmd("TIME", &[]);
    secs * 1000 + micros / 1000
}

/// Waits for `n` more watchdog renewals of `client`'s holds.
fn renewals_go_on(client: &redguard::Client, n: u64) {
    let from = client.stats().renewals;
    assert!(
        wait_until(ms(5_000), || client.stats().renewals >= from + n),
        "the watchdog stopped renewing"
    );
}

/// Every kind, in sequence, on one server.
#[test]
fn no_planted_value_makes_a_script_run_10_ms() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    let t0 = Instant::now();
    let cases: [(&str, fn(&TestContext)); 8] = [
        ("reentrant lock", reentrant_lock),
        ("fenced lock", fenced_lock),
        ("fair lock, a million waiters", fair_lock_million),
        ("fair lock, at the bound", fair_lock_at_the_bound),
        ("read-write lock", read_write_lock),
        ("semaphore and latch", semaphore_and_latch),
        ("expiring permits", expiring_permits),
        ("run once", run_once),
    ];
    for (name, case) in cases {
        crate::support::timed_case(name, || case(&ctx));
    }
    eprintln!("script bounds: {:?}", t0.elapsed());
}

/// A million fields planted beside a held lock: the holder's renewals and
/// release go on (the release takes only its own field: freeing a million
/// fields in one `DEL` took over 100 ms), everyone else is refused.
fn reentrant_lock(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-lock");
    let guard = ctx.client.lock(&name).lock().unwrap();
    plant_fields(server, &name, 1_000_000);
    watch_slowlog(server);
    renewals_go_on(&ctx.client, 2);
    guard.check().unwrap();
    let other = ctx.other_client();
    assert!(is_wrong_type(&other.lock(&name).try_lock()));
    assert!(is_wrong_type(&other.lock(&name).force_unlock()));
    assert!(matches!(
        other.lock(&name).inspect().unwrap().kind,
        LockKind::Other { .. }
    ));
    let own = guard.holder_id().as_str().to_owned();
    guard.unlock().unwrap();
    assert_none_slow(server, "reentrant lock");
    assert_eq!(len(server, "HLEN", &name), 1_000_000);
    let held: bool = server.cmd("HEXISTS", &[name.as_bytes(), own.as_bytes()]);
    assert!(!held, "the release left the holder's field");
    assert!(server.pttl(&name) > 0, "the planted hash lost its expiry");
    unlink(server, &[&name]);
}

/// A 20-digit token counter refuses an acquire before anything is
/// written, and a held fenced lock's re-entry (each draws a token); the
/// holder's renewals and release go on.
fn fenced_lock(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-fenced");
    let token = format!("redisson_lock_token:{{{name}}}");
    let () = server.cmd("SET", &[token.as_bytes(), b"99999999999999999999"]);
    watch_slowlog(server);
    let refused = ctx.client.fenced_lock(&name).try_lock();
    assert!(refused.is_err(), "{refused:?}");
    assert!(!server.exists(&name), "the refused acquire wrote the lock");
    let () = server.cmd("SET", &[token.as_bytes(), b"7"]);
    let guard = ctx.client.fenced_lock(&name).lock().unwrap();
    assert_eq!(guard.fencing_token().map(|t| t.get()), Some(8));
    let () = server.cmd("SET", &[token.as_bytes(), b"99999999999999999999"]);
    let again = ctx.client.fenced_lock(&name).try_lock();
    assert!(again.is_err(), "{again:?}");
    renewals_go_on(&ctx.client, 2);
    guard.unlock().unwrap();
    assert!(!server.exists(&name));
    assert_none_slow(server, "fenced lock");
    unlink(server, &[&token]);
}

/// A million dead waiters planted in the queue and deadlines of a held
/// fair lock: a newcomer is refused at once (a queue longer than 1,000 is
/// no lock's), the holder renews and releases, the release drops the first
/// 100 dead heads only.
fn fair_lock_million(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-fair");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let guard = ctx.client.fair_lock(&name).lock().unwrap();
    plant_queue(server, &queue, 1_000_000);
    plant_zset(server, &timeouts, 1_000_000, 1);
    watch_slowlog(server);
    let other = ctx.other_client();
    let t = Instant::now();
    assert!(is_wrong_type(
        &other.fair_lock(&name).try_lock_for(ms(10_000))
    ));
    assert!(t.elapsed() < ms(5_000), "the refusal waited");
    renewals_go_on(&ctx.client, 2);
    guard.check().unwrap();
    let info = other.fair_lock(&name).inspect().unwrap();
    assert_eq!(info.queue_len, 1_000_000);
    guard.unlock().unwrap();
    assert_eq!(len(server, "LLEN", &queue), 999_900);
    assert_eq!(len(server, "ZCARD", &timeouts), 999_900);
    // Free, but its queue is still planted: refused, and nothing to force.
    assert!(is_wrong_type(&other.fair_lock(&name).try_lock()));
    assert!(!other.fair_lock(&name).force_unlock().unwrap());
    assert_none_slow(server, "fair lock, a million waiters");
    assert_eq!(len(server, "LLEN", &queue), 999_900);
    unlink(server, &[&queue, &timeouts]);
}

/// At the bound: 1,000 dead heads and 1,000 deadlines of waiters not
/// queued, on a free fair lock. Acquires drop the heads, 100 a call, and
/// the one that gets the lock takes its wait off every deadline (a command
/// per waiter took over 10 ms); then a
/// waiter queued ahead of 999 planted live ones waits, is passed over and
/// leaves, taking its wait off theirs.
fn fair_lock_at_the_bound(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-fair-edge");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let far = server_ms(server) + 3_600_000;
    plant(server, "rpush", &queue, 1_000, &format!("{JAVA}:dead"), 0);
    plant_zset(server, &timeouts, 1_000, far);
    watch_slowlog(server);
    let lock = ctx.client.fair_lock(&name);
    let wait = lock.fair_wait_timeout().unwrap().as_millis() as i64;
    // 100 dead heads go per call: the eleventh try gets the lock.
    let mut tries = 0;
    let guard = loop {
        tries += 1;
        assert!(tries <= 11, "the dead heads were not dropped");
        if let Some(guard) = lock.try_lock().unwrap() {
            break guard;
        }
    };
    assert_eq!(len(server, "LLEN", &queue), 0);
    assert_eq!(len(server, "ZCARD", &timeouts), 1_000);
    let score: f64 = server.cmd(
        "ZSCORE",
        &[timeouts.as_bytes(), format!("{JAVA}:7").as_bytes()],
    );
    assert_eq!(score as i64, far - wait, "the grant's deadline arithmetic");
    let () = server.cmd("DEL", &[timeouts.as_bytes()]);

    // A waiter heads the queue; 999 live ones are planted behind it.
    let waiter = ctx.other_client();
    let (planted, server_url) = (
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        server.url(),
    );
    let planter = {
        let (queue, timeouts, planted) = (queue.clone(), timeouts.clone(), planted.clone());
        std::thread::spawn(move || {
            let admin = crate::support::admin_client(&server_url).unwrap();
            let mut conn = admin.get_connection().unwrap();
            let joined = wait_until(ms(5_000), || {
                redis::cmd("LLEN")
                    .arg(&queue)
                    .query::<u64>(&mut conn)
                    .unwrap()
                    == 1
            });
            assert!(joined, "the waiter never queued");
            let mut push = redis::cmd("RPUSH");
            push.arg(&queue);
            let mut add = redis::cmd("ZADD");
            add.arg(&timeouts);
            for i in 0..999 {
                push.arg(format!("{JAVA}:{i}"));
                add.arg(far).arg(format!("{JAVA}:{i}"));
            }
            redis::pipe()
                .add_command(push)
                .ignore()
                .add_command(add)
                .ignore()
                .query::<()>(&mut conn)
                .unwrap();
            planted.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let got = waiter.fair_lock(&name).try_lock_for(ms(2_000)).unwrap();
    planter.join().unwrap();
    assert!(got.is_none());
    assert!(planted.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(len(server, "LLEN", &queue), 999, "the waiter did not leave");
    assert_eq!(len(server, "ZCARD", &timeouts), 999);
    guard.unlock().unwrap();
    assert_eq!(
        len(server, "LLEN", &queue),
        999,
        "a live waiter was dropped"
    );
    assert_none_slow(server, "fair lock, at the bound");
    unlink(server, &[&queue, &timeouts]);
}

/// A million fields planted beside a held read lock, then 998 planted
/// readers of 1,000 holds each (a million timeout keys to look up): the
/// reader's renewals and release go on, the release looks up at most 1,000
/// leases and otherwise keeps the key's expiry; newcomers are refused.
fn read_write_lock(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-rw");
    let rw = ctx.client.read_write_lock(&name);
    let reader = rw.read().lock().unwrap();
    plant_fields(server, &name, 1_000_000);
    watch_slowlog(server);
    renewals_go_on(&ctx.client, 2);
    reader.check().unwrap();
    let other = ctx.other_client();
    assert!(is_wrong_type(
        &other.read_write_lock(&name).read().try_lock()
    ));
    assert!(is_wrong_type(
        &other.read_write_lock(&name).write().try_lock()
    ));
    assert!(is_wrong_type(&other.read_write_lock(&name).force_unlock()));
    let own = reader.holder_id().as_str().to_owned();
    reader.unlock().unwrap();
    let held: bool = server.cmd("HEXISTS", &[name.as_bytes(), own.as_bytes()]);
    assert!(!held, "the release left the reader's field");
    assert_eq!(len(server, "HLEN", &name), 1_000_001);
    assert!(server.pttl(&name) > 0);
    assert_none_slow(server, "read lock, a million fields");
    unlink(server, &[&name]);

    let name = unique_name("bounds-rw-holds");
    let reader = ctx.client.read_write_lock(&name).read().lock().unwrap();
    plant(server, "hset", &name, 998, &format!("{JAVA}:"), 1_000);
    assert_eq!(len(server, "HLEN", &name), 1_000);
    let () = server.cmd("SLOWLOG", &[b"RESET"]);
    renewals_go_on(&ctx.client, 2);
    let own = reader.holder_id().as_str().to_owned();
    reader.unlock().unwrap();
    let held: bool = server.cmd("HEXISTS", &[name.as_bytes(), own.as_bytes()]);
    assert!(!held, "the release left the reader's field");
    assert_eq!(len(server, "HLEN", &name), 999);
    assert!(server.pttl(&name) > 0, "the lock key lost its expiry");
    assert_none_slow(server, "read lock, a million holds of others");
    unlink(server, &[&name]);
}

/// 20-digit counts: every operation ends at once, with an error or the
/// latch deleted, and no count is changed by a failed call.
fn semaphore_and_latch(ctx: &TestContext) {
    let server = &ctx.server;
    let huge = b"99999999999999999999";
    let name = unique_name("bounds-sem");
    let () = server.cmd("SET", &[name.as_bytes(), huge]);
    watch_slowlog(server);
    let sem = ctx.client.semaphore(&name);
    let taken = sem.try_acquire(1);
    assert!(taken.is_err(), "{taken:?}");
    let given = sem.release(1);
    assert!(given.is_err(), "{given:?}");
    let value: Vec<u8> = server.cmd("GET", &[name.as_bytes()]);
    assert_eq!(value, huge);

    let latch_name = unique_name("bounds-latch");
    let () = server.cmd("SET", &[latch_name.as_bytes(), huge]);
    let latch = ctx.client.count_down_latch(&latch_name);
    let down = latch.count_down();
    assert!(down.is_err(), "{down:?}");
    let value: Vec<u8> = server.cmd("GET", &[latch_name.as_bytes()]);
    assert_eq!(value, huge);
    assert!(latch.delete().unwrap());
    assert_none_slow(server, "semaphore and latch");
    unlink(server, &[&name]);
}

/// A million expired leases planted in an expiring semaphore's lease set:
/// each call takes back at most 1,000 (a bounded `ZRANGEBYSCORE`), a permit
/// is acquired, renewed and released; the delete refuses a set of more than
/// 10,000 leases (one `DEL` of it took over 100 ms).
fn expiring_permits(ctx: &TestContext) {
    let server = &ctx.server;
    let name = unique_name("bounds-permits");
    let leases = format!("{{{name}}}:timeout");
    let sem = ctx.client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(1).unwrap());
    plant_zset(server, &leases, 1_000_000, 1);
    watch_slowlog(server);
    let permit = sem.try_acquire().unwrap().expect("no permit");
    assert_eq!(len(server, "ZCARD", &leases), 999_001);
    renewals_go_on(&ctx.client, 2);
    permit.check().unwrap();
    assert!(sem.leases().unwrap().len() <= 10_000);
    assert!(is_wrong_type(&sem.delete()));
    assert!(server.exists(&name) && server.exists(&leases));
    permit.release().unwrap();
    assert_none_slow(server, "expiring permits");
    unlink(server, &[&name, &leases]);
}

/// A million fields planted beside a running claim: its completion is
/// refused (`WrongType`, the hash left as is: replacing it freed a million
/// fields at once); a million-field last-attempt record makes a claim
/// refused, the key not taken.
fn run_once(ctx: &TestContext) {
    let server = &ctx.server;
    let key = unique_name("bounds-once");
    let Once::Run(guard) = ctx.client.once(&key, Duration::from_secs(60)).unwrap() else {
        panic!("the key was not free");
    };
    plant_fields(server, &key, 1_000_000);
    watch_slowlog(server);
    renewals_go_on(&ctx.client, 2);
    let done = guard.complete("done");
    assert!(is_wrong_type(&done), "{done:?}");
    assert_eq!(len(server, "HLEN", &key), 1_000_001);
    assert_none_slow(server, "run-once completion");
    unlink(server, &[&key]);

    let key = unique_name("bounds-once-attempt");
    let attempt = format!("redguard_once_attempt:{{{key}}}");
    plant_fields(server, &attempt, 1_000_000);
    let () = server.cmd("SLOWLOG", &[b"RESET"]);
    let claimed = ctx.client.once(&key, Duration::from_secs(60));
    assert!(is_wrong_type(&claimed), "{claimed:?}");
    assert!(!server.exists(&key), "the refused claim took the key");
    assert_eq!(len(server, "HLEN", &attempt), 1_000_000);
    assert_none_slow(server, "run-once claim");
    unlink(server, &[&attempt]);
}
