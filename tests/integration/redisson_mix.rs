//! Deployments shared with Redisson (Java) clients (README, "Mixing with
//! Redisson (Java)"): a foreign read-lock watchdog that cuts redguard's
//! fixed read holds short, and expiring permits stamped by clocks that
//! differ by ±2 s (`faketime`). The foreign side runs scripts equivalent to
//! Redisson's (written from reading `RedissonReadLock`, `ReadLockTask` and
//! `RedissonPermitExpirableSemaphore`).

use std::time::{Duration, Instant};

use crate::foreign::{Foreign, unix_ms};
use crate::support::{
    ChildTest, RedisServer, TestContext, child_env, child_role, hear, ms, say, sleep, test_builder,
    unique_name, wait_until,
};

/// Redisson's read-lock renewal before 4.4 (`renewExpirationAsync`): when
/// the renewing holder still holds, the lock key and the timeout keys of
/// *every* holder get the renewer's `lockWatchdogTimeout`.
/// KEYS: lock key, key prefix `{name}`; ARGV: lease ms, renewing holder.
const REDISSON_READ_RENEW_BEFORE_4_4: &str = r"
local count = redis.call('hget', KEYS[1], ARGV[2])
if count == false then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) > 1 then
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                redis.call('pexpire', KEYS[2] .. ':' .. field .. ':rwlock_timeout:' .. i, ARGV[1])
            end
        end
    end
end
return 1
";

/// Redisson's read-lock renewal since 4.4 (`ReadLockTask`): only the
/// renewer's own timeout keys, but the lock key still gets the renewer's
/// `lockWatchdogTimeout`, longer or shorter than what it had.
const REDISSON_READ_RENEW_SINCE_4_4: &str = r"
local count = redis.call('hget', KEYS[1], ARGV[2])
if count == false then
    return 0
end
for i = tonumber(count), 1, -1 do
    redis.call('pexpire', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. i, ARGV[1])
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
";

/// Redisson's read unlock (one hold; without its retry-guard key): the lock
/// key then lives as long as the longest remaining timeout key of any
/// holder, and is deleted (and `0` published) when none is left.
/// KEYS: lock key, channel, own timeout prefix, key prefix; ARGV: holder.
const REDISSON_READ_UNLOCK: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('publish', KEYS[2], '0')
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter == 0 then
    redis.call('hdel', KEYS[1], ARGV[1])
end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                local left = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(left, longest)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return 0
    end
    if mode == 'write' then
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
";

/// The Java side of a read-write lock: a [`Foreign`] reader (its read lock
/// is Redisson's) plus Redisson's renewal and unlock scripts.
struct JavaReader {
    foreign: Foreign,
    conn: redis::Connection,
    name: String,
}

impl JavaReader {
    fn new(ctx: &TestContext, name: &str, thread: u64) -> JavaReader {
        JavaReader {
            foreign: Foreign::new(&ctx.server, thread),
            conn: ctx.server.conn(),
            name: name.to_owned(),
        }
    }

    fn prefix(&self) -> String {
        format!("{{{}}}", self.name)
    }

    /// One pass of the Java read-lock watchdog, with its
    /// `lockWatchdogTimeout`.
    fn renew(&mut self, script: &str, watchdog: Duration) {
        let renewed: i64 = redis::Script::new(script)
            .key(&self.name)
            .key(self.prefix())
            .arg(watchdog.as_millis() as u64)
            .arg(&self.foreign.holder)
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(renewed, 1, "the Java reader holds");
    }

    fn unlock(&mut self) {
        let own = format!("{}:{}:rwlock_timeout", self.prefix(), self.foreign.holder);
        let _: redis::Value = redis::Script::new(REDISSON_READ_UNLOCK)
            .key(&self.name)
            .key(format!("redisson_rwlock:{}", self.prefix()))
            .key(own)
            .key(self.prefix())
            .arg(&self.foreign.holder)
            .invoke(&mut self.conn)
            .unwrap();
    }
}

/// Lease of the Rust fixed-lease reader.
const FIXED_READ: Duration = Duration::from_secs(6);
/// The Java client's `lockWatchdogTimeout` (Redisson renews every third).
const JAVA_WATCHDOG: Duration = Duration::from_secs(2);
/// redguard's watchdog timeout here: fixed read holds are looked up every
/// third of it (500 ms), well within what a Java renewal leaves.
const RUST_WATCHDOG: Duration = Duration::from_millis(1_500);

#[test]
fn java_read_watchdog_and_rust_fixed_read_holds() {
    let ctx = TestContext::new();
    for (generation, script) in [
        ("before 4.4", REDISSON_READ_RENEW_BEFORE_4_4),
        ("since 4.4", REDISSON_READ_RENEW_SINCE_4_4),
    ] {
        a_java_renewal_cannot_cut_a_fixed_read_hold_short(&ctx, generation, script);
    }
    a_cut_read_hold_that_ran_out_is_reported_lost(&ctx);
}

/// Issue 22, part 3. A Rust reader holds with a fixed 6 s lease; a Java
/// reader (2 s `lockWatchdogTimeout`) joins and renews once, which sets the
/// lock key (and, before Redisson 4.4, the Rust reader's timeout key) to
/// expire in 2 s. Before 4.4 the Java reader then unlocks (the lock key
/// then lives as long as the longest timeout key, 2 s); since 4.4 it dies
/// without unlocking. Either way the Rust hold's look-up (every 500 ms)
/// restores what was cut: a writer trying for 3.5 s after the cut never
/// gets in, while the reader's `check()` stays `Ok` and the lock key lives
/// on. Without the look-ups the writer got in about 2 s after the cut, the
/// reader's guard still valid.
fn a_java_renewal_cannot_cut_a_fixed_read_hold_short(
    ctx: &TestContext,
    generation: &str,
    script: &str,
) {
    let name = unique_name("mix-rw-keep");
    let client = test_builder(&ctx.server.url())
        .watchdog_timeout(RUST_WATCHDOG)
        .build()
        .unwrap();
    let writers = test_builder(&ctx.server.url()).build().unwrap();
    let rw = client.read_write_lock(&name);
    let reader = rw.with_lease(FIXED_READ).read().lock().unwrap();
    let mut java = JavaReader::new(ctx, &name, 71);
    assert!(java.foreign.read_lock(&name, JAVA_WATCHDOG));
    let cut = Instant::now();
    java.renew(script, JAVA_WATCHDOG);
    if generation == "before 4.4" {
        java.unlock();
    }
    let writer = writers
        .read_write_lock(&name)
        .write()
        .try_lock_for(ms(3_500))
        .unwrap();
    let waited = cut.elapsed();
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    // The reader's own timeout key, which Redisson's read unlock counts:
    // cut to 2 s before 4.4, it would be gone by now had the look-ups not
    // restored it.
    let timeout_key = format!(
        "{}:{}:rwlock_timeout:1",
        java.prefix(),
        reader.holder_id().as_str()
    );
    let hold_pttl = ctx.server.pttl(&timeout_key);
    eprintln!(
        "Redisson {generation} read renewal ({JAVA_WATCHDOG:?}) on a {FIXED_READ:?} Rust read \
         hold: writer got in: {} (after {waited:?}); reader check {:?}; lock PTTL {pttl} ms",
        writer.is_some(),
        reader.check().map_err(|e| e.to_string()),
    );
    assert!(
        writer.is_none(),
        "a writer entered {waited:?} after the Java renewal, during the Rust read hold"
    );
    reader.check().unwrap();
    assert!(pttl > 0, "{pttl}");
    assert!(
        hold_pttl > 0,
        "Redisson {generation}: the reader's timeout key: PTTL {hold_pttl}"
    );
    reader.unlock().unwrap();
}

/// Issue 22, part 3: a Java renewal with a 1 ms watchdog timeout cuts the
/// Rust reader's timeout key, which runs out before any look-up can restore
/// it; the Java reader's unlock then finds no live hold and deletes the
/// lock. A writer gets in at once, and the Rust reader's `check()` reports
/// the loss within 1 s (two look-up periods), not at the end of its 6 s
/// lease.
fn a_cut_read_hold_that_ran_out_is_reported_lost(ctx: &TestContext) {
    let name = unique_name("mix-rw-lost");
    let client = test_builder(&ctx.server.url())
        .watchdog_timeout(RUST_WATCHDOG)
        .build()
        .unwrap();
    let rw = client.read_write_lock(&name);
    let reader = rw.with_lease(FIXED_READ).read().lock().unwrap();
    let mut java = JavaReader::new(ctx, &name, 72);
    assert!(java.foreign.read_lock(&name, JAVA_WATCHDOG));
    java.renew(REDISSON_READ_RENEW_BEFORE_4_4, ms(1));
    sleep(ms(20));
    java.unlock();
    let writer = test_builder(&ctx.server.url())
        .build()
        .unwrap()
        .read_write_lock(&name)
        .write()
        .try_lock()
        .unwrap()
        .expect("the Java unlock deleted the lock: the cut hold ran out");
    let entered = Instant::now();
    assert!(
        wait_until(ms(1_000), || reader.check().is_err()),
        "the reader's guard still claims its hold {:?} after a writer entered",
        entered.elapsed()
    );
    eprintln!(
        "a cut Rust read hold reported lost {:?} after a writer entered",
        entered.elapsed()
    );
    assert!(reader.check().unwrap_err().is_lock_lost());
    drop(writer);
}

/// Redisson's expiring-permit acquire (`tryAcquireAsync`): permits whose
/// stamped lease end is at or before the *client's* clock (`ARGV[3]`) are
/// taken back first; then `ARGV[1]` permits are taken, each stamped with the
/// lease end `ARGV[2]` the client computed from its own clock.
/// KEYS: counter, `{name}:timeout`, channel; ARGV: permits, lease end, now,
/// ids from `ARGV[4]`.
const REDISSON_PERMIT_ACQUIRE: &str = r"
local ended = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #ended > 0 then
    redis.call('zrem', KEYS[2], unpack(ended))
    local value = redis.call('incrby', KEYS[1], #ended)
    if tonumber(value) > 0 then
        redis.call('publish', KEYS[3], value)
    end
end
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 4, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 1
end
return 0
";

/// How far the Java client's clock is off (`faketime`).
const CLOCK_OFF: Duration = Duration::from_secs(2);
/// The skew the recommended setting tolerates: at least how far clocks may
/// be off.
const TOLERATED_SKEW: Duration = Duration::from_millis(2_500);
/// Lease of the permits on both sides.
const PERMIT_LEASE: Duration = Duration::from_secs(3);

/// The Java client of an expiring semaphore, run under `faketime`: reports
/// its wall clock and, told to go, takes one permit with Redisson's acquire (its own clock
/// for "now" and for the lease end; retrying every 20 ms for at most 15 s),
/// says `HELD`, and says `EXPIRED` once its own clock passes the lease end
/// (until then it counts itself a holder).
#[test]
#[ignore = "child process of permits_stamped_by_a_clock_two_seconds_off"]
fn java_permit_child() {
    let Some(_) = child_role() else { return };
    let mut conn = redis::Client::open(child_env("RG_URL"))
        .unwrap()
        .get_connection()
        .unwrap();
    let name = child_env("RG_NAME");
    let lease: u64 = child_env("RG_LEASE_MS").parse().unwrap();
    say(&format!("WALL {}", unix_ms()));
    assert_eq!(hear(), "GO");
    let id: [u8; 16] = rand::random();
    let script = redis::Script::new(REDISSON_PERMIT_ACQUIRE);
    let mut ends = 0;
    let held = (0..750).any(|_| {
        let now = unix_ms();
        ends = now + lease;
        let taken: i64 = script
            .key(&name)
            .key(format!("{{{name}}}:timeout"))
            .key(format!("redisson_sc:{{{name}}}"))
            .arg(1)
            .arg(ends)
            .arg(now)
            .arg(&id[..])
            .invoke(&mut conn)
            .unwrap();
        if taken == 0 {
            sleep(ms(20));
        }
        taken == 1
    });
    assert!(held, "no permit within 15 s");
    say("HELD");
    while unix_ms() < ends {
        sleep(ms(5));
    }
    say("EXPIRED");
}

/// Spawns the Java child with its clock `offset` ("+2s" or "-2s") and
/// checks that faketime moved its clock by about that much.
fn java_child(server: &RedisServer, name: &str, offset: &str, ahead: bool) -> ChildTest {
    let child = ChildTest::spawn_faked(
        offset,
        "redisson_mix::java_permit_child",
        "java",
        &[
            ("RG_URL", &server.url()),
            ("RG_NAME", name),
            ("RG_LEASE_MS", &PERMIT_LEASE.as_millis().to_string()),
        ],
    );
    let wall: u64 = child
        .expect_line("WALL ", Duration::from_secs(20))
        .parse()
        .unwrap();
    let off = wall as i64 - unix_ms() as i64;
    let expected = CLOCK_OFF.as_millis() as i64 * if ahead { 1 } else { -1 };
    assert!(
        (off - expected).abs() < 500,
        "the child's clock is {off} ms off, not {expected}: is faketime working?"
    );
    child
}

/// The Java clock runs 2 s behind the server: its permit's stamped end is
/// 2 s early on the server's clock. Returns whether the Rust client got
/// the (only) permit while the Java holder still counted itself a holder,
/// and after how long.
fn java_behind(server: &RedisServer, client: &redguard::Client) -> (bool, Duration) {
    let name = unique_name("mix-permit-behind");
    let semaphore = client.expiring_semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let mut java = java_child(server, &name, "-2s", false);
    java.send_line("GO");
    java.expect_line("HELD", Duration::from_secs(20));
    let t = Instant::now();
    let ours = semaphore
        .try_acquire_for(Duration::from_secs(8))
        .unwrap()
        .expect("the Java permit comes back once its lease is over");
    let waited = t.elapsed();
    let java_still_holds = !java.transcript().iter().any(|l| l == "EXPIRED");
    drop(ours);
    java.expect_line("EXPIRED", Duration::from_secs(10));
    assert!(java.wait_success(Duration::from_secs(10)));
    (java_still_holds, waited)
}

/// The Java clock runs 2 s ahead: it takes back a Rust permit (fixed 3 s
/// lease) 2 s before its end. Returns whether the Java client got the
/// (only) permit while the Rust guard still held a valid lease, and after
/// how long.
fn java_ahead(server: &RedisServer, client: &redguard::Client) -> (bool, Duration) {
    let name = unique_name("mix-permit-ahead");
    let semaphore = client.expiring_semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let mut java = java_child(server, &name, "+2s", true);
    let ours = semaphore
        .with_lease(PERMIT_LEASE)
        .try_acquire()
        .unwrap()
        .unwrap();
    let t = Instant::now();
    java.send_line("GO");
    java.expect_line("HELD", Duration::from_secs(20));
    let waited = t.elapsed();
    let rust_still_holds = ours.check().is_ok();
    drop(ours);
    java.expect_line("EXPIRED", Duration::from_secs(10));
    assert!(java.wait_success(Duration::from_secs(10)));
    (rust_still_holds, waited)
}

/// The Java clock runs 2 s ahead of a Rust permit renewed by the watchdog
/// (900 ms lease, renewed every 300 ms), held for 3 s. Returns whether the
/// Java client took it while the Rust guard held it.
fn java_ahead_of_a_renewed_permit(server: &RedisServer, client: &redguard::Client) -> bool {
    let name = unique_name("mix-permit-renewed");
    let semaphore = client.expiring_semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let mut java = java_child(server, &name, "+2s", true);
    let ours = semaphore.try_acquire().unwrap().unwrap();
    java.send_line("GO");
    let taken = wait_until(Duration::from_secs(3), || {
        java.transcript().iter().any(|l| l == "HELD")
    });
    // Taken from under a guard that was not released: two holders until
    // the guard's next renewal finds its permit gone.
    drop(ours);
    java.expect_line("HELD", Duration::from_secs(10));
    java.expect_line("EXPIRED", Duration::from_secs(10));
    assert!(java.wait_success(Duration::from_secs(10)));
    taken
}

/// Issue 22, part 2: Redisson stamps permit lease ends with its own clock,
/// redguard with the server's. A Java client whose clock runs 2 s behind
/// (libfaketime, `FAKETIME=-2s`) holds the only permit for 3 s by its clock; one 2 s
/// ahead takes the only permit from a Rust holder, whether its lease is
/// fixed (3 s) or renewed by the watchdog (900 ms). With the default
/// (`permit_clock_skew` 0) both directions let two holders share the one
/// permit (for about 2 s); with the skew the README recommends for mixed
/// deployments (at least the clocks' offset, here 2.5 s) neither does.
/// The six runs (two settings, three cases) wait out leases, not CPU: they
/// run side by side, each with its own permit and Java child.
#[test]
fn permits_stamped_by_a_clock_two_seconds_off() {
    let _heavy = crate::support::cpu_heavy();
    let server = RedisServer::start();
    fn joined<T>(run: std::thread::ScopedJoinHandle<'_, T>) -> T {
        run.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
    let outcomes = std::thread::scope(|scope| {
        let runs: Vec<_> = [Duration::ZERO, TOLERATED_SKEW]
            .into_iter()
            .map(|skew| {
                let client = test_builder(&server.url())
                    .permit_clock_skew(skew)
                    .build()
                    .unwrap();
                let server = &server;
                let behind = scope.spawn({
                    let client = client.clone();
                    move || java_behind(server, &client)
                });
                let ahead = scope.spawn({
                    let client = client.clone();
                    move || java_ahead(server, &client)
                });
                let renewed = scope.spawn(move || java_ahead_of_a_renewed_permit(server, &client));
                (skew, behind, ahead, renewed)
            })
            .collect();
        runs.into_iter()
            .map(|(skew, behind, ahead, renewed)| {
                (skew, joined(behind), joined(ahead), joined(renewed))
            })
            .collect::<Vec<_>>()
    });
    for (skew, (behind, rust_waited), (ahead, java_waited), renewed) in outcomes {
        eprintln!(
            "permit clock skew {skew:?}: Java 2 s behind: Rust took the permit after \
             {rust_waited:?} (Java lease {PERMIT_LEASE:?}), two holders: {behind}; Java 2 s \
             ahead: Java took the Rust permit after {java_waited:?} (Rust lease \
             {PERMIT_LEASE:?}), two holders: {ahead}; Java 2 s ahead of a renewed Rust \
             permit, two holders: {renewed}"
        );
        if skew.is_zero() {
            assert!(
                behind && ahead,
                "the default shows the problem: {behind} {ahead}"
            );
        } else {
            assert!(!behind, "a Rust holder joined a live Java permit");
            assert!(!ahead, "a Java holder joined a live Rust permit");
            assert!(!renewed, "a Java holder joined a renewed Rust permit");
        }
    }
}

// ---------------------------------------------------------------------------
// Issue 34: a fair queue shared with Redisson, and a forced latch delete.
//
// The Java side runs scripts written from reading `RedissonFairLock`
// (redisson/redisson at 66863978, 4.7.1-SNAPSHOT): what `tryLockInnerAsync`
// (`EVAL_LONG`, the variant `lock()` and `tryLock(wait, …)` use),
// `unlockInnerAsync` and `acquireFailedAsync` do to the lock hash, the queue
// list and the deadline zset, with the client's clock for "now" and the
// waiter's wait (`tryLock`'s wait, else `fairLockWaitTimeout`, 300 s) as
// Redisson passes them. Left out: the unlock retry guard key (see the
// README's harmless differences).
// ---------------------------------------------------------------------------

/// Redisson's fair acquire. KEYS: lock, queue, deadlines; ARGV: lease ms,
/// holder, wait ms, client now (ms). Returns nil when acquired (or
/// re-entered), else a ttl: the lock's when already queued, else the time
/// from now to the new entry's predecessor's deadline.
const REDISSON_FAIR_ACQUIRE: &str = r"
local now = tonumber(ARGV[4])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then
        break
    end
    local due = redis.call('zscore', KEYS[3], first)
    if due ~= false and tonumber(due) <= now then
        redis.call('zrem', KEYS[3], first)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
if redis.call('exists', KEYS[1]) == 0
    and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, id in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), id)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
    return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) ~= false then
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
";

/// Redisson's fair unlock. KEYS: lock, queue, deadlines, channel base;
/// ARGV: unlock message, lease ms, holder, client now (ms). Drops dead heads
/// first, then wakes the queue head on its own channel.
const REDISSON_FAIR_UNLOCK: &str = r"
local now = tonumber(ARGV[4])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then
        break
    end
    local due = redis.call('zscore', KEYS[3], first)
    if due ~= false and tonumber(due) <= now then
        redis.call('zrem', KEYS[3], first)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
if redis.call('exists', KEYS[1]) == 0 then
    local next = redis.call('lindex', KEYS[2], 0)
    if next ~= false then
        redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
    end
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then
    redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
end
return 1
";

/// Redisson's `acquireFailedAsync` (a `tryLock` that timed out). KEYS:
/// queue, deadlines; ARGV: holder, wait ms. The wait comes off every
/// deadline behind the leaver.
const REDISSON_FAIR_ACQUIRE_FAILED: &str = r"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
    i = i + 1
end
for j = i + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[j])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
";

/// Redisson's `fairLockWaitTimeout` default: the wait of a Java `lock()`.
const JAVA_LOCK_WAIT: Duration = Duration::from_secs(300);
/// The lease of a Java holder (`lockWatchdogTimeout`).
const JAVA_LEASE: Duration = Duration::from_secs(30);
/// How long each holder keeps the lock before releasing it.
const TURN: Duration = Duration::from_millis(30);

fn fair_queue(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn fair_deadlines(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

/// The queue, head first.
fn queue_of(server: &RedisServer, name: &str) -> Vec<String> {
    server.cmd("LRANGE", &[fair_queue(name).as_bytes(), b"0", b"-1"])
}

/// A waiter's deadline (ms since the epoch).
fn deadline_of(server: &RedisServer, name: &str, holder: &str) -> i64 {
    let score: f64 = server.cmd(
        "ZSCORE",
        &[fair_deadlines(name).as_bytes(), holder.as_bytes()],
    );
    score as i64
}

/// Waits until the queue has `n` entries; returns it.
fn queue_reaches(server: &RedisServer, name: &str, n: usize) -> Vec<String> {
    let mut queue = Vec::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            queue = queue_of(server, name);
            queue.len() == n
        }),
        "the queue never had {n} entries: {queue:?}"
    );
    queue
}

/// One thread of a Java client using an `RFairLock`, on its own
/// connections (commands, and the pub/sub one its `lock()` subscribes on).
struct JavaFair {
    conn: redis::Connection,
    sub: redis::Connection,
    holder: String,
    name: String,
    /// The wait Redisson passes: `tryLock`'s, else `fairLockWaitTimeout`.
    wait: Duration,
}

impl JavaFair {
    fn new(server: &RedisServer, name: &str, thread: u64, wait: Duration) -> JavaFair {
        JavaFair {
            conn: server.conn(),
            sub: server.conn(),
            holder: format!("9b0c2f3e-5d41-4a7e-b3c2-0f8e6d4a1c57:{thread}"),
            name: name.to_owned(),
            wait,
        }
    }

    /// `lock()` (no `give_up`) or `tryLock(wait)`: attempt; when busy,
    /// subscribe to the own channel and attempt again after each message
    /// or once the returned ttl has passed. A `tryLock` whose time is up
    /// leaves with `acquireFailedAsync` and returns `false`.
    fn lock(&mut self, give_up: Option<Instant>) -> bool {
        let JavaFair {
            conn,
            sub,
            holder,
            name,
            wait,
        } = self;
        let wait_ms = wait.as_millis() as u64;
        let attempt = |conn: &mut redis::Connection| -> Option<i64> {
            redis::Script::new(REDISSON_FAIR_ACQUIRE)
                .key(&*name)
                .key(fair_queue(name))
                .key(fair_deadlines(name))
                .arg(JAVA_LEASE.as_millis() as u64)
                .arg(&*holder)
                .arg(wait_ms)
                .arg(unix_ms())
                .invoke(conn)
                .unwrap()
        };
        if attempt(conn).is_none() {
            return true;
        }
        let channel = format!("redisson_lock__channel:{{{name}}}:{holder}");
        let mut pubsub = sub.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        let started = Instant::now();
        loop {
            let Some(ttl) = attempt(conn) else {
                return true;
            };
            let mut pause = ms(ttl.clamp(5, 5_000) as u64);
            if let Some(give_up) = give_up {
                let left = give_up.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let () = redis::Script::new(REDISSON_FAIR_ACQUIRE_FAILED)
                        .key(fair_queue(name))
                        .key(fair_deadlines(name))
                        .arg(&*holder)
                        .arg(wait_ms)
                        .invoke(conn)
                        .unwrap();
                    return false;
                }
                pause = pause.min(left.max(ms(1)));
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "a Java waiter waited a minute"
            );
            pubsub.set_read_timeout(Some(pause)).unwrap();
            let _ = pubsub.get_message();
        }
    }

    /// `unlock()`: one hold released; the last wakes the queue head.
    fn unlock(&mut self) {
        let released: Option<i64> = redis::Script::new(REDISSON_FAIR_UNLOCK)
            .key(&self.name)
            .key(fair_queue(&self.name))
            .key(fair_deadlines(&self.name))
            .key(format!("redisson_lock__channel:{{{}}}", self.name))
            .arg(0)
            .arg(JAVA_LEASE.as_millis() as u64)
            .arg(&self.holder)
            .arg(unix_ms())
            .invoke(&mut self.conn)
            .unwrap();
        assert_eq!(released, Some(1), "{} held the lock", self.holder);
    }
}

/// Who got the lock and when, in order (the waiters' labels).
type Served = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, Instant)>>>;

/// The labels of `served`, in order.
fn labels(served: &Served) -> Vec<&'static str> {
    served.lock().unwrap().iter().map(|(l, _)| *l).collect()
}

/// A Java waiter's thread: `lock()` (or `tryLock` until `give_up`), a turn,
/// `unlock()`. Returns whether it got the lock.
fn java_waiter<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    mut java: JavaFair,
    label: &'static str,
    give_up: Option<Duration>,
    served: &Served,
) -> std::thread::ScopedJoinHandle<'scope, bool> {
    let served = served.clone();
    let give_up = give_up.map(|d| Instant::now() + d);
    scope.spawn(move || {
        if !java.lock(give_up) {
            return false;
        }
        served.lock().unwrap().push((label, Instant::now()));
        sleep(TURN);
        java.unlock();
        true
    })
}

/// A redguard waiter's thread: `try_lock_for(wait)`, a turn, `unlock()`.
/// Returns whether it got the lock.
fn rust_waiter<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    lock: redguard::Lock,
    label: &'static str,
    wait: Duration,
    served: &Served,
) -> std::thread::ScopedJoinHandle<'scope, bool> {
    let served = served.clone();
    scope.spawn(move || {
        let Some(guard) = lock.try_lock_for(wait).unwrap() else {
            return false;
        };
        served.lock().unwrap().push((label, Instant::now()));
        sleep(TURN);
        guard.unlock().unwrap();
        true
    })
}

/// A holder's fixed lease in the fair-queue cases: it outlives them, so
/// that no live waiter's deadline comes near and every deadline moves only
/// by the arithmetic under test.
const HOLD: Duration = Duration::from_secs(60);

/// Joins every thread; returns whether each got the lock.
fn joined_all(handles: Vec<std::thread::ScopedJoinHandle<'_, bool>>) -> Vec<bool> {
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}

/// Issue 34, part 1: H (redguard) holds; A (Java `lock()`, wait 300 s), B
/// (redguard, fair wait timeout 300 s) and C (Java `lock()`) join in that
/// order, and are served A, B, C. Each joins at the tail's deadline plus its
/// own wait, as Redisson's scripts compute. Before the fix B's deadline was
/// its last attempt + 300 s (not A's + 300 s), A's grant took 300 s off it,
/// and A's unlock dropped it as dead: served A, C, B.
#[test]
fn fair_java_rust_java_served_in_order() {
    let ctx = TestContext::new();
    let name = unique_name("mix-fair-abc");
    let held = ctx.client.fair_lock(&name).with_lease(HOLD).lock().unwrap();
    let b_client = test_builder(&ctx.server.url()).build().unwrap();
    let served = Served::default();
    std::thread::scope(|s| {
        let a = JavaFair::new(&ctx.server, &name, 1, JAVA_LOCK_WAIT);
        let c = JavaFair::new(&ctx.server, &name, 3, JAVA_LOCK_WAIT);
        let (a_id, c_id) = (a.holder.clone(), c.holder.clone());
        let mut threads = vec![java_waiter(s, a, "A", None, &served)];
        queue_reaches(&ctx.server, &name, 1);
        let b = b_client.fair_lock(&name);
        threads.push(rust_waiter(s, b, "B", Duration::from_secs(60), &served));
        queue_reaches(&ctx.server, &name, 2);
        threads.push(java_waiter(s, c, "C", None, &served));
        let queue = queue_reaches(&ctx.server, &name, 3);
        assert_eq!((&queue[0], &queue[2]), (&a_id, &c_id), "{queue:?}");
        let d: Vec<i64> = queue
            .iter()
            .map(|id| deadline_of(&ctx.server, &name, id))
            .collect();
        let waits = [d[1] - d[0], d[2] - d[1]];
        eprintln!("A, B, C joined; deadline gaps {waits:?} ms");
        assert_eq!(waits, [300_000, 300_000], "B's and C's own waits");
        held.unlock().unwrap();
        assert_eq!(joined_all(threads), [true, true, true]);
    });
    assert_eq!(labels(&served), ["A", "B", "C"]);
    assert!(queue_of(&ctx.server, &name).is_empty());
}

/// Issue 34, part 1: B (redguard, fair wait timeout 20 s, `try_lock_for`
/// 30 s), then A (Java `tryLock(60 s)`) and C (Java `lock()`) join; served
/// B, A, C. B's grant takes its own wait (20 s) off A's and C's deadlines,
/// exactly what its joining added, as a Redisson grant does (before the
/// fix: nothing).
#[test]
fn fair_rust_java_java_with_a_shorter_rust_wait() {
    let ctx = TestContext::new();
    let name = unique_name("mix-fair-bac");
    let held = ctx.client.fair_lock(&name).with_lease(HOLD).lock().unwrap();
    let b_wait = Duration::from_secs(20);
    let b_client = test_builder(&ctx.server.url())
        .fair_wait_timeout(b_wait)
        .build()
        .unwrap();
    let served = Served::default();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let a = JavaFair::new(&ctx.server, &name, 1, Duration::from_secs(60));
        let c = JavaFair::new(&ctx.server, &name, 3, JAVA_LOCK_WAIT);
        let (a_id, c_id) = (a.holder.clone(), c.holder.clone());
        let b = {
            let served = served.clone();
            let lock = b_client.fair_lock(&name);
            let (a_id, c_id, name) = (a_id.clone(), c_id.clone(), name.clone());
            let server = &ctx.server;
            s.spawn(move || {
                let guard = lock.try_lock_for(Duration::from_secs(30)).unwrap();
                let Some(guard) = guard else { return false };
                served.lock().unwrap().push(("B", Instant::now()));
                tx.send((
                    deadline_of(server, &name, &a_id),
                    deadline_of(server, &name, &c_id),
                ))
                .unwrap();
                sleep(TURN);
                guard.unlock().unwrap();
                true
            })
        };
        let mut threads = vec![b];
        let joined = queue_reaches(&ctx.server, &name, 1);
        let now: (u64, u64) = ctx.server.cmd("TIME", &[]);
        let now = (now.0 * 1000 + now.1 / 1000) as i64;
        let d_b = deadline_of(&ctx.server, &name, &joined[0]);
        // The first in line: the lock's expiry plus its wait.
        let expected = now + HOLD.as_millis() as i64 + b_wait.as_millis() as i64;
        assert!(
            (d_b - expected).abs() < 2_000,
            "B's deadline {d_b}, expected about {expected}"
        );
        threads.push(java_waiter(
            s,
            a,
            "A",
            Some(Duration::from_secs(60)),
            &served,
        ));
        queue_reaches(&ctx.server, &name, 2);
        threads.push(java_waiter(s, c, "C", None, &served));
        let queue = queue_reaches(&ctx.server, &name, 3);
        assert_eq!((&queue[1], &queue[2]), (&a_id, &c_id), "{queue:?}");
        let d_a = deadline_of(&ctx.server, &name, &a_id);
        let d_c = deadline_of(&ctx.server, &name, &c_id);
        assert_eq!([d_a - d_b, d_c - d_a], [60_000, 300_000]);
        held.unlock().unwrap();
        let (a_after, c_after) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("B is granted");
        eprintln!(
            "B's grant moved A's deadline by {} ms, C's by {} ms",
            a_after - d_a,
            c_after - d_c
        );
        assert_eq!([a_after - d_a, c_after - d_c], [-20_000, -20_000]);
        assert_eq!(joined_all(threads), [true, true, true]);
    });
    assert_eq!(labels(&served), ["B", "A", "C"]);
    assert!(queue_of(&ctx.server, &name).is_empty());
}

/// Issue 34, part 1: waiters that time out on either side leave the queue
/// as Redisson's `acquireFailedAsync` does: queued A (Java `lock()`), X
/// (Java `tryLock(6 s)`), Y (redguard, fair wait timeout 20 s,
/// `try_lock_for(6 s)`), B (redguard) and C (Java `lock()`); X and Y time
/// out, and each takes its own wait off the deadlines of B and C (6 s + 20 s
/// in all; before the fix Y took nothing off); served A, B, C.
#[test]
fn fair_timed_out_waiters_on_either_side_leave_the_queue() {
    let ctx = TestContext::new();
    let name = unique_name("mix-fair-leave");
    let held = ctx.client.fair_lock(&name).with_lease(HOLD).lock().unwrap();
    let y_wait = Duration::from_secs(20);
    let y_client = test_builder(&ctx.server.url())
        .fair_wait_timeout(y_wait)
        .build()
        .unwrap();
    let b_client = test_builder(&ctx.server.url()).build().unwrap();
    let served = Served::default();
    let give_up = Duration::from_secs(6);
    std::thread::scope(|s| {
        let a = JavaFair::new(&ctx.server, &name, 1, JAVA_LOCK_WAIT);
        let x = JavaFair::new(&ctx.server, &name, 2, give_up);
        let c = JavaFair::new(&ctx.server, &name, 3, JAVA_LOCK_WAIT);
        let (a_id, x_id, c_id) = (a.holder.clone(), x.holder.clone(), c.holder.clone());
        let mut threads = vec![java_waiter(s, a, "A", None, &served)];
        queue_reaches(&ctx.server, &name, 1);
        threads.push(java_waiter(s, x, "X", Some(give_up), &served));
        queue_reaches(&ctx.server, &name, 2);
        let y = y_client.fair_lock(&name);
        threads.push(rust_waiter(s, y, "Y", give_up, &served));
        queue_reaches(&ctx.server, &name, 3);
        let b = b_client.fair_lock(&name);
        threads.push(rust_waiter(s, b, "B", Duration::from_secs(60), &served));
        queue_reaches(&ctx.server, &name, 4);
        threads.push(java_waiter(s, c, "C", None, &served));
        let queue = queue_reaches(&ctx.server, &name, 5);
        assert_eq!(
            (&queue[0], &queue[1], &queue[4]),
            (&a_id, &x_id, &c_id),
            "all five joined before the first one timed out: {queue:?}"
        );
        let b_id = queue[3].clone();
        let before = [
            deadline_of(&ctx.server, &name, &b_id),
            deadline_of(&ctx.server, &name, &c_id),
        ];
        let left = queue_reaches(&ctx.server, &name, 3);
        assert_eq!(left, [a_id, b_id.clone(), c_id.clone()]);
        let after = [
            deadline_of(&ctx.server, &name, &b_id),
            deadline_of(&ctx.server, &name, &c_id),
        ];
        let moved = [after[0] - before[0], after[1] - before[1]];
        eprintln!("X and Y left; B's and C's deadlines moved by {moved:?} ms");
        let both = -((give_up + y_wait).as_millis() as i64);
        assert_eq!(moved, [both, both]);
        held.unlock().unwrap();
        assert_eq!(joined_all(threads), [true, false, false, true, true]);
    });
    assert_eq!(labels(&served), ["A", "B", "C"]);
    assert!(queue_of(&ctx.server, &name).is_empty());
}

/// Issue 34, part 1: a live redguard waiter keeps its place while the
/// holder holds for longer than the deadline it joined with, and raises the
/// waiters behind it along: B (redguard, fair wait timeout 1 s) heads the
/// queue behind H (watchdog lease 900 ms), C (Java `lock()`) joins behind
/// it, and for 3 s C's own attempts (each dropping a dead head by
/// Redisson's rule) find B alive, the gap between their deadlines still C's
/// wait (300 s); served B, C. Without the raise B is dropped about 2 s in;
/// raising B alone shrinks the gap, and C's deadline would pass before its
/// turn.
#[test]
fn fair_a_live_rust_head_keeps_its_place_and_the_gaps_behind_it() {
    let ctx = TestContext::new();
    let name = unique_name("mix-fair-live");
    let held = ctx.client.fair_lock(&name).lock().unwrap();
    let b_client = test_builder(&ctx.server.url())
        .fair_wait_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let served = Served::default();
    std::thread::scope(|s| {
        let c = JavaFair::new(&ctx.server, &name, 3, JAVA_LOCK_WAIT);
        let c_id = c.holder.clone();
        let b = b_client.fair_lock(&name);
        let mut threads = vec![rust_waiter(s, b, "B", Duration::from_secs(30), &served)];
        let b_id = queue_reaches(&ctx.server, &name, 1)[0].clone();
        threads.push(java_waiter(s, c, "C", None, &served));
        queue_reaches(&ctx.server, &name, 2);
        let until = Instant::now() + Duration::from_secs(3);
        let mut checks = 0;
        while Instant::now() < until {
            assert_eq!(
                queue_of(&ctx.server, &name),
                [b_id.clone(), c_id.clone()],
                "after {checks} checks"
            );
            let gap =
                deadline_of(&ctx.server, &name, &c_id) - deadline_of(&ctx.server, &name, &b_id);
            assert_eq!(gap, 300_000, "after {checks} checks");
            checks += 1;
            sleep(ms(100));
        }
        let b_deadline = deadline_of(&ctx.server, &name, &b_id);
        let now: (u64, u64) = ctx.server.cmd("TIME", &[]);
        let left = b_deadline - (now.0 * 1000 + now.1 / 1000) as i64;
        eprintln!("after 3 s B's deadline is {left} ms ahead ({checks} checks)");
        held.unlock().unwrap();
        assert_eq!(joined_all(threads), [true, true]);
    });
    assert_eq!(labels(&served), ["B", "C"]);
}

/// Issue 34, part 1: a dead redguard waiter is dropped in its turn, not
/// before: queued A (Java `lock()`), D (a redguard process with a 1 s fair
/// wait timeout, killed), E (redguard) and C (Java `lock()`). For 2 s after
/// D's death E's attempts leave it queued behind A (before the fix they
/// dropped it 1 s after its last attempt, out of turn); once A is served D
/// heads the queue, its deadline passes and it is dropped; served A, E, C,
/// E within 3 s of A's release.
#[test]
fn fair_a_dead_rust_waiter_is_dropped_in_its_turn() {
    use crate::support::ChildTest;
    let ctx = TestContext::new();
    let name = unique_name("mix-fair-dead");
    let held = ctx.client.fair_lock(&name).lock().unwrap();
    let e_client = test_builder(&ctx.server.url()).build().unwrap();
    let served = Served::default();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let mut a = JavaFair::new(&ctx.server, &name, 1, JAVA_LOCK_WAIT);
        let a_id = a.holder.clone();
        let a_thread = {
            let served = served.clone();
            s.spawn(move || {
                assert!(a.lock(None));
                served.lock().unwrap().push(("A", Instant::now()));
                sleep(TURN);
                a.unlock();
                tx.send(Instant::now()).unwrap();
                true
            })
        };
        queue_reaches(&ctx.server, &name, 1);
        let mut child = ChildTest::spawn(
            "fair_lock::a8_child_waiter",
            "a8",
            &[("A8_URL", &ctx.server.url()), ("A8_LOCK", &name)],
        );
        let d_id = child.expect_line("HOLDER ", Duration::from_secs(20));
        let queue = queue_reaches(&ctx.server, &name, 2);
        assert_eq!(queue, [a_id, d_id.clone()]);
        let mut threads = vec![a_thread];
        let e = e_client.fair_lock(&name);
        threads.push(rust_waiter(s, e, "E", Duration::from_secs(30), &served));
        queue_reaches(&ctx.server, &name, 3);
        let c = JavaFair::new(&ctx.server, &name, 3, JAVA_LOCK_WAIT);
        threads.push(java_waiter(s, c, "C", None, &served));
        queue_reaches(&ctx.server, &name, 4);
        child.kill();
        sleep(Duration::from_secs(2));
        let queue = queue_of(&ctx.server, &name);
        assert_eq!(queue.get(1), Some(&d_id), "dropped out of turn: {queue:?}");
        held.unlock().unwrap();
        let released = rx.recv_timeout(Duration::from_secs(20)).expect("A ran");
        assert_eq!(joined_all(threads), [true, true, true]);
        let e_at = served.lock().unwrap()[1].1;
        let waited = e_at.saturating_duration_since(released);
        eprintln!("E was granted {waited:?} after A's release");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        assert!(!queue_of(&ctx.server, &name).contains(&d_id));
    });
    assert_eq!(labels(&served), ["A", "E", "C"]);
    assert!(queue_of(&ctx.server, &name).is_empty());
}

/// A Java thread in Redisson's `RCountDownLatch.await(time)`: reads the
/// count; when not zero, subscribes to the latch's channel and, until the
/// count reads zero, sleeps on the entry's latch, which the zero message
/// (`0`) opens and the new-count message (`1`) closes
/// (`CountDownLatchPubSub`); an open latch makes it read the count again.
/// `subscribed` is called once it listens. Returns when it found the count
/// zero, or `None` when `timeout` passed first.
#[cfg(feature = "cli")]
fn java_await(
    server: &RedisServer,
    name: &str,
    timeout: Duration,
    subscribed: impl FnOnce(),
) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    let mut conn = server.conn();
    let mut sub = server.conn();
    let count = |conn: &mut redis::Connection| -> i64 {
        let value: Option<i64> = redis::cmd("GET").arg(name).query(conn).unwrap();
        value.unwrap_or(0)
    };
    if count(&mut conn) == 0 {
        return Some(Instant::now());
    }
    let mut pubsub = sub.as_pubsub();
    pubsub
        .subscribe(format!("redisson_countdownlatch__channel__{{{name}}}"))
        .unwrap();
    subscribed();
    let mut open = false;
    loop {
        if count(&mut conn) == 0 {
            return Some(Instant::now());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            if open {
                break;
            }
            pubsub.set_read_timeout(Some(left)).unwrap();
            let Ok(msg) = pubsub.get_message() else {
                continue;
            };
            match msg.get_payload::<Vec<u8>>().unwrap().as_slice() {
                b"0" => open = true,
                b"1" => open = false,
                _ => {}
            }
        }
    }
}

/// Issue 34, part 2: deleting a latch (`CountDownLatch::delete`, and
/// `redguard unlock --force --kind latch`) wakes a Java `await` within
/// 50 ms: the delete publishes the zero message, on which Redisson's
/// waiters read the count again and find the deleted latch open. Before the
/// fix it published the new-count message, which keeps a Java waiter
/// asleep (here until its 5 s timeout).
#[cfg(feature = "cli")]
#[test]
fn a_forced_latch_delete_wakes_java_waiters() {
    use crate::cli::{redguard, run};
    let ctx = TestContext::new();
    let url = ctx.server.url();
    for via_cli in [false, true] {
        let name = unique_name("mix-latch-delete");
        let latch = ctx.client.count_down_latch(&name);
        assert!(latch.try_set_count(2).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let (deleted, woke) = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                java_await(&ctx.server, &name, Duration::from_secs(5), || {
                    tx.send(()).unwrap();
                })
            });
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the Java waiter subscribed");
            let deleted = if via_cli {
                let mut cmd = redguard(&url);
                cmd.args(["unlock", "--force", &name, "--kind", "latch"]);
                let out = run(cmd);
                assert_eq!(out.code, Some(0), "{out:?}");
                assert!(
                    out.stdout
                        .contains("its waiters were woken and find it open"),
                    "{}",
                    out.stdout
                );
                Instant::now()
            } else {
                assert!(latch.delete().unwrap());
                Instant::now()
            };
            (deleted, waiter.join().unwrap())
        });
        let woke = woke.expect("the Java waiter slept through the delete until its timeout");
        let late = woke.saturating_duration_since(deleted);
        eprintln!(
            "a Java await woke {late:?} after the delete returned ({})",
            if via_cli {
                "unlock --force --kind latch"
            } else {
                "CountDownLatch::delete"
            }
        );
        assert!(late <= ms(50), "woke {late:?} after the delete");
        assert!(!ctx.server.exists(&name));
    }
}

/// How long CMD runs under `exec --read --lease 6s`: within the two
/// thirds of the fixed lease before which `exec` never stops CMD (4 s),
/// and past the 2 s a Java renewal 0.7 s into the run leaves.
#[cfg(feature = "cli")]
const EXEC_CMD_SECS: &str = "3.4";

/// How the simulated Java reader ends while the Rust reader runs CMD.
#[cfg(feature = "cli")]
#[derive(Clone, Copy, Debug, PartialEq)]
enum JavaEnd {
    /// Renews every third of its timeout until CMD ended.
    Lives,
    /// Renews once, then dies (no unlock): the lock key keeps its cut.
    Dies,
    /// Renews once, then unlocks: before 4.4, the lock key then lives as
    /// long as the Rust reader's cut timeout key.
    Unlocks,
}

/// Issue 45, item 9. `redguard exec --read --lease 6s -- sleep 3.4`
/// beside a Java reader whose read-lock watchdog (2 s
/// `lockWatchdogTimeout`) renews every third of it: each renewal cuts the
/// lock key (and before 4.4 the Rust reader's timeout key) to 2 s, which
/// the fixed hold's look-ups (every second here) give back. CMD runs to its
/// end and `exec` exits 0, with no word of stopping CMD or of a lost lease,
/// whether the Java reader lives on, dies after one renewal or unlocks
/// after one. Checked by breaking the restore (`lua/rw_read_keep.lua`
/// answering "held" without extending): the hold then runs out 2 s after
/// the Java side's last cut, and `exec` exits 70.
#[cfg(feature = "cli")]
#[test]
fn exec_read_with_a_fixed_lease_beside_a_java_reader_runs_to_its_end() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let ctx = TestContext::new();
    // The watchdog timeout of `exec`: the suite's 3 s, and the default
    // 30 s, whose third (10 s) is longer than the fixed lease: the fixed
    // hold is then looked up every third of its lease instead.
    let cases = [
        (
            "since 4.4",
            REDISSON_READ_RENEW_SINCE_4_4,
            JavaEnd::Lives,
            "3s",
        ),
        (
            "since 4.4",
            REDISSON_READ_RENEW_SINCE_4_4,
            JavaEnd::Dies,
            "3s",
        ),
        (
            "before 4.4",
            REDISSON_READ_RENEW_BEFORE_4_4,
            JavaEnd::Unlocks,
            "3s",
        ),
        (
            "before 4.4",
            REDISSON_READ_RENEW_BEFORE_4_4,
            JavaEnd::Unlocks,
            "30s",
        ),
    ];
    // The cases run side by side (their commands mostly sleep): one
    // server, a name each.
    std::thread::scope(|scope| {
        for (generation, script, end, watchdog) in cases {
            let ctx = &ctx;
            scope.spawn(move || {
                let name = unique_name("mix-exec-read");
                let mut java = JavaReader::new(ctx, &name, 73);
                assert!(java.foreign.read_lock(&name, JAVA_WATCHDOG));
                let stop = Arc::new(AtomicBool::new(false));
                let mut cmd = crate::cli::redguard_timed(&ctx.server.url(), watchdog, "1s");
                cmd.args([
                    "exec",
                    "--read",
                    "--lease",
                    "6s",
                    &name,
                    "--",
                    "sleep",
                    EXEC_CMD_SECS,
                ]);
                let started = Instant::now();
                let mut exec = crate::cli::Proc::spawn(cmd);
                // Java's read-lock watchdog, once the Rust reader joined: a renewal
                // every third of its timeout, for at most 15 s.
                assert!(
                    wait_until(ms(5_000), || {
                        let fields: i64 = ctx.server.cmd("HLEN", &[name.as_bytes()]);
                        fields == 3
                    }),
                    "exec --read did not join: {}",
                    exec.stderr_so_far()
                );
                let renewer = {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let start = Instant::now();
                        let mut renewals = 0;
                        while !stop.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(15) {
                            sleep(JAVA_WATCHDOG / 3);
                            if renewals == 1 && end != JavaEnd::Lives {
                                if end == JavaEnd::Unlocks {
                                    java.unlock();
                                }
                                break;
                            }
                            java.renew(script, JAVA_WATCHDOG);
                            renewals += 1;
                        }
                        renewals
                    })
                };
                let out = exec.wait(Duration::from_secs(15));
                let ran = started.elapsed();
                stop.store(true, Ordering::Release);
                let renewals = renewer.join().unwrap();
                eprintln!(
                    "Redisson {generation}, Java reader {end:?} ({renewals} renewals of \
                     {JAVA_WATCHDOG:?}): exec --read --lease 6s exit {:?} after {ran:?}; stderr {:?}",
                    out.code, out.stderr
                );
                assert!(renewals >= 1, "{generation}: no Java renewal");
                assert_eq!(
                    out.code,
                    Some(0),
                    "Redisson {generation}, {end:?}, watchdog {watchdog}: {out:?}"
                );
                assert!(
                    !out.stderr.contains("stopping CMD") && !out.stderr.contains("lost"),
                    "Redisson {generation}, {end:?}: {out:?}"
                );
                assert!(ran >= ms(3_400), "CMD ran {ran:?}");
            });
        }
    });
}
