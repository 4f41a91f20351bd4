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
    let child = ChildTest::spawn_under(
        &["faketime", "-f", offset],
        "redisson_mix::java_permit_child",
        "java",
        &[
            ("RG_URL", &server.url()),
            ("RG_NAME", name),
            ("RG_LEASE_MS", &PERMIT_LEASE.as_millis().to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
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
/// (`faketime -f -2s`) holds the only permit for 3 s by its clock; one 2 s
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
