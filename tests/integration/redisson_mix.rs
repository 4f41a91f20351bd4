//! Deployments shared with Redisson (Java) clients (README, "Mixing with
//! Redisson (Java)"): a foreign read-lock watchdog that cuts redguard's
//! fixed read holds short, and expiring permits stamped by clocks that
//! differ by ±2 s (`faketime`). The foreign side runs scripts equivalent to
//! Redisson's (written from reading `RedissonReadLock`, `ReadLockTask` and
//! `RedissonPermitExpirableSemaphore`).

use std::time::{Duration, Instant};

use crate::foreign::Foreign;
use crate::support::{TestContext, ms, sleep, test_builder, unique_name, wait_until};

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
