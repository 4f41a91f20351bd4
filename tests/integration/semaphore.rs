//! Semaphores: Redisson's `RSemaphore` and `RPermitExpirableSemaphore`
//! layouts, bad input, interop with the foreign implementation, SEM-1
//! (two processes, 3 permits) and SEM-2 (a SIGKILLed holder). One server
//! for the whole area; the cases run in sequence on it.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::foreign::Foreign;
use crate::reentrant::Listener;
use crate::support::{
    ChildTest, TEST_WATCHDOG, TestContext, child_role, hear, ms, say, sleep, test_builder,
    test_client, unique_name, wait_until,
};

fn deaf_client(url: &str) -> redguard::Client {
    test_builder(url)
        .poll_interval(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[test]
fn sem1_sem2_semaphore_bed() {
    let _heavy = crate::support::cpu_heavy();
    let ctx = TestContext::new();
    layout_and_messages(&ctx);
    handles_name_themselves(&ctx);
    bad_input_is_refused_and_counters_stay_intact(&ctx);
    expiring_layout_lost_permits_and_fixed_leases(&ctx);
    interop_foreign_permit_holder_wakes_our_waiter(&ctx);
    interop_foreign_expiring_permit_comes_back_at_its_lease_end(&ctx);
    sem2_sigkilled_holders(&ctx);
    sem1_two_processes_three_permits(&ctx);
}

/// The handles' names and `Debug` (a guard's permits, a permit guard's id
/// and state); a permit id reads as its 32 hex digits and parses back; an
/// expiring semaphore's `add_permits` and `try_acquire_until`.
fn handles_name_themselves(ctx: &TestContext) {
    let name = unique_name("sem-debug");
    let sem = ctx.client.semaphore(&name);
    assert_eq!(sem.name(), name.as_bytes());
    assert_eq!(
        format!("{sem:?}"),
        format!("Semaphore {{ name: {name:?}, .. }}")
    );
    assert!(sem.try_set_permits(3).unwrap());
    let guard = sem.acquire(2).unwrap();
    assert_eq!(guard.semaphore().name(), name.as_bytes());
    assert_eq!(guard.permits(), 2);
    assert_eq!(
        format!("{guard:?}"),
        format!("SemaphoreGuard {{ semaphore: {name:?}, permits: 2 }}")
    );
    guard.release().unwrap();

    // Both kinds keep their permits at the name: another one.
    let name = unique_name("sem-debug-expiring");
    let expiring = ctx.client.expiring_semaphore(&name).with_lease(ms(5_000));
    assert_eq!(expiring.name(), name.as_bytes());
    assert_eq!(
        format!("{expiring:?}"),
        format!("ExpiringSemaphore {{ name: {name:?}, lease: Some(5s), .. }}")
    );
    assert!(expiring.try_set_permits(1).unwrap());
    expiring.add_permits(2).unwrap();
    assert_eq!(expiring.available_permits().unwrap(), 3);
    let until = expiring
        .try_acquire_until(Instant::now() + ms(500))
        .unwrap()
        .expect("3 permits free");
    assert_eq!(expiring.available_permits().unwrap(), 2);
    until.release().unwrap();
    // A permit guard dropped gives its permit back at once.
    let dropped = expiring.acquire().unwrap();
    assert_eq!(expiring.available_permits().unwrap(), 2);
    drop(dropped);
    assert_eq!(expiring.available_permits().unwrap(), 3);
    expiring.add_permits(-2).unwrap();
    let permit = expiring.acquire().unwrap();
    assert_eq!(permit.semaphore().name(), name.as_bytes());
    let id = permit.id().to_string();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(id.parse::<redguard::PermitId>().unwrap(), *permit.id());
    assert_eq!(format!("{:?}", permit.id()), format!("PermitId({id})"));
    assert_eq!(
        format!("{permit:?}"),
        format!(
            "PermitGuard {{ semaphore: {name:?}, id: PermitId({id}), watchdog: false, lost: false }}"
        )
    );
    permit.release().unwrap();
}

fn layout_and_messages(ctx: &TestContext) {
    let name = unique_name("sem-layout");
    let sem = ctx.client.semaphore(&name);
    let listener = Listener::start(&ctx.server, format!("redisson_sc:{{{name}}}").into_bytes());
    assert_eq!(sem.available_permits().unwrap(), 0, "never set");
    assert!(sem.try_acquire(1).unwrap().is_none());
    assert!(sem.try_set_permits(3).unwrap());
    assert!(!sem.try_set_permits(5).unwrap(), "set once");
    let value: String = ctx.server.cmd("GET", &[name.as_bytes()]);
    assert_eq!(value, "3");
    let g = sem.acquire(2).unwrap();
    assert_eq!(g.permits(), 2);
    assert_eq!(sem.available_permits().unwrap(), 1);
    assert!(sem.try_acquire(2).unwrap().is_none(), "all or nothing");
    let one = sem.try_acquire(1).unwrap().expect("one left");
    drop(g);
    one.release().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 3);
    let got = listener.collect(3, ms(50));
    assert_eq!(got, vec![b"3".to_vec(), b"2".to_vec(), b"3".to_vec()]);
    // Zero permits: a guard at once, nothing taken.
    let zero = sem.try_acquire(0).unwrap().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 3);
    drop(zero);
    // add_permits adds and takes away; negative counts are Redisson's.
    sem.add_permits(2).unwrap();
    sem.add_permits(-6).unwrap();
    assert_eq!(sem.available_permits().unwrap(), -1);
    sem.add_permits(4).unwrap();
    // Kept permits are given back through release, never more.
    let g = sem.acquire(3).unwrap();
    g.forget();
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert!(matches!(
        sem.release(4).unwrap_err(),
        redguard::Error::InvalidArgument(_)
    ));
    assert_eq!(sem.available_permits().unwrap(), 0, "nothing released");
    sem.release(2).unwrap();
    ctx.client.semaphore(&name).release(1).unwrap();
    assert!(matches!(
        sem.release(1).unwrap_err(),
        redguard::Error::InvalidArgument(_)
    ));
    assert_eq!(sem.available_permits().unwrap(), 3);
    let other = ctx.other_client().semaphore(&name);
    sem.acquire(1).unwrap().forget();
    assert!(
        other.release(1).is_err(),
        "another client cannot release what this one kept"
    );
    sem.release(1).unwrap();
}

fn bad_input_is_refused_and_counters_stay_intact(ctx: &TestContext) {
    let name = unique_name("sem-bad");
    let sem = ctx.client.semaphore(&name);
    for err in [
        sem.try_set_permits(u32::MAX).unwrap_err(),
        sem.add_permits(i64::MIN).unwrap_err(),
        sem.try_acquire(redguard::MAX_PERMITS + 1).unwrap_err(),
        ctx.client.semaphore("").try_acquire(1).unwrap_err(),
        ctx.client.expiring_semaphore("").try_acquire().unwrap_err(),
        ctx.client
            .expiring_semaphore(&name)
            .with_lease(Duration::ZERO)
            .try_acquire()
            .unwrap_err(),
    ] {
        assert!(matches!(err, redguard::Error::InvalidArgument(_)), "{err}");
    }
    assert_eq!(ctx.server.cmd::<i64>("EXISTS", &[name.as_bytes()]), 0);
    // A value of another type at the name is reported and left alone.
    let text = unique_name("sem-text");
    ctx.server.cmd::<()>("SET", &[text.as_bytes(), b"three"]);
    let sem = ctx.client.semaphore(&text);
    let exp = ctx.client.expiring_semaphore(&text);
    for err in [
        sem.try_set_permits(3).unwrap_err(),
        sem.try_acquire(1).unwrap_err(),
        sem.add_permits(1).unwrap_err(),
        sem.available_permits().unwrap_err(),
        exp.try_acquire().unwrap_err(),
        exp.available_permits().unwrap_err(),
    ] {
        assert!(matches!(err, redguard::Error::WrongType { .. }), "{err}");
    }
    let value: String = ctx.server.cmd("GET", &[text.as_bytes()]);
    assert_eq!(value, "three");
    let hash = unique_name("sem-hash");
    ctx.server
        .cmd::<i64>("HSET", &[hash.as_bytes(), b"a", b"1"]);
    assert!(matches!(
        ctx.client.semaphore(&hash).try_acquire(1).unwrap_err(),
        redguard::Error::WrongType { .. }
    ));
}

fn expiring_layout_lost_permits_and_fixed_leases(ctx: &TestContext) {
    let name = unique_name("exp-layout");
    let sem = ctx.client.expiring_semaphore(&name);
    let timeouts = format!("{{{name}}}:timeout");
    assert!(sem.try_set_permits(2).unwrap());
    let g = sem.acquire().unwrap();
    assert!(g.is_renewed());
    let members: Vec<(Vec<u8>, f64)> = ctx
        .server
        .cmd("ZRANGE", &[timeouts.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
    assert_eq!(members.len(), 1);
    assert_eq!(&members[0].0[..], &g.id().as_bytes()[..], "raw 16-byte id");
    let (secs, micros): (String, String) = ctx.server.cmd("TIME", &[]);
    let now = secs.parse::<f64>().unwrap() * 1000.0 + micros.parse::<f64>().unwrap() / 1000.0;
    let lease = TEST_WATCHDOG.as_millis() as f64;
    let left = members[0].1 - now;
    assert!(
        left > lease - 300.0 && left <= lease + 5.0,
        "lease end in {left} ms"
    );
    assert_eq!(sem.available_permits().unwrap(), 1);
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    assert_eq!(sem.permits().unwrap(), 2);
    // Renewed past several leases.
    sleep(TEST_WATCHDOG * 2);
    g.check().unwrap();
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    // A permit removed behind the holder's back is reported lost.
    ctx.server
        .cmd::<i64>("ZREM", &[timeouts.as_bytes(), &g.id().as_bytes()[..]]);
    assert!(wait_until(TEST_WATCHDOG, || g.is_lost()));
    assert!(g.check().unwrap_err().is_lock_lost());
    assert!(g.release().unwrap_err().is_lock_lost());
    // A fixed lease is not renewed: the permit comes back after it.
    let fixed = sem.with_lease(ms(300)).acquire().unwrap();
    assert!(!fixed.is_renewed());
    assert!(wait_until(ms(600), || fixed.is_lost()));
    assert!(wait_until(ms(500), || sem.acquired_permits().unwrap() == 0));
    // The permit removed by hand is gone for good; the expired one is back.
    assert_eq!(sem.available_permits().unwrap(), 1);
    drop(fixed);
    // A client that shuts down gives its permits back.
    let leaving = ctx.other_client();
    let p = leaving.expiring_semaphore(&name).acquire().unwrap();
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    leaving.shutdown();
    assert_eq!(sem.acquired_permits().unwrap(), 0);
    assert!(p.check().unwrap_err().is_lock_lost());
    drop(p);
    // forget keeps the permit; release by id gives it back.
    let id = sem.acquire().unwrap().forget();
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    assert!(sem.release(&id).unwrap());
    assert!(!sem.release(&id).unwrap(), "released once");
    assert_eq!(
        id.to_string().parse::<redguard::PermitId>().unwrap(),
        id,
        "ids print as hex"
    );
}

fn interop_foreign_permit_holder_wakes_our_waiter(ctx: &TestContext) {
    let name = unique_name("sem-foreign");
    let mut foreign = Foreign::new(&ctx.server, 51);
    assert!(foreign.set_permits(&name, 1));
    assert!(foreign.try_acquire(&name, 1));
    let sem = deaf_client(&ctx.server.url()).semaphore(&name);
    let s = sem.clone();
    let waiting = std::thread::spawn(move || {
        let g = s.try_acquire_for(1, Duration::from_secs(8)).unwrap();
        let at = Instant::now();
        (g.map(|g| g.permits()), at)
    });
    sleep(ms(300));
    assert!(
        !waiting.is_finished(),
        "our acquire waits for the foreign permit"
    );
    let released = Instant::now();
    foreign.release(&name, 1);
    let (got, at) = waiting.join().unwrap();
    assert_eq!(got, Some(1));
    let woke = at.duration_since(released);
    assert!(
        woke < ms(250),
        "woken by the foreign release message: {woke:?}"
    );
    eprintln!("interop semaphore: our acquire woke {woke:?} after the foreign release");
    // And the other way round.
    let g = sem.acquire(1).unwrap();
    assert!(!foreign.try_acquire(&name, 1));
    drop(g);
    assert!(foreign.try_acquire(&name, 1));
}

fn interop_foreign_expiring_permit_comes_back_at_its_lease_end(ctx: &TestContext) {
    let name = unique_name("exp-foreign");
    let mut foreign = Foreign::new(&ctx.server, 52);
    assert!(foreign.set_permits(&name, 1));
    let sem = deaf_client(&ctx.server.url()).expiring_semaphore(&name);
    let id = foreign
        .try_acquire_permit(&name, ms(400))
        .expect("foreign permit");
    assert!(sem.try_acquire().unwrap().is_none());
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    let started = Instant::now();
    let g = sem.try_acquire_for(Duration::from_secs(5)).unwrap();
    let waited = started.elapsed();
    assert!(g.is_some(), "the foreign permit's lease ended");
    assert!(
        waited < ms(400 + 250),
        "woken at the foreign lease end, not by polling: {waited:?}"
    );
    let members: Vec<Vec<u8>> = ctx.server.cmd(
        "ZRANGE",
        &[format!("{{{name}}}:timeout").as_bytes(), b"0", b"-1"],
    );
    assert!(
        !members.contains(&id.to_vec()),
        "the foreign id was counted back"
    );
}

/// SEM-2 child: holds a permit of the semaphore named by RG_NAME (an
/// expiring one for role "expiring", a plain one for "plain") until
/// killed.
#[test]
#[ignore = "child process of sem1_sem2_semaphore_bed"]
fn sem2_child_holder() {
    let Some(role) = child_role() else { return };
    let client = test_client(&std::env::var("RG_URL").unwrap());
    let name = std::env::var("RG_NAME").unwrap();
    if role == "expiring" {
        let permit = client.expiring_semaphore(&name).acquire().unwrap();
        say(&format!("held {}", permit.id()));
        hear();
    } else {
        let permit = client.semaphore(&name).acquire(1).unwrap();
        say("held");
        hear();
        drop(permit);
    }
}

fn sem2_sigkilled_holders(ctx: &TestContext) {
    let url = ctx.server.url();
    // Expiring: back within one lease of the SIGKILL.
    let name = unique_name("sem2-exp");
    let sem = ctx.client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(1).unwrap());
    let mut child = ChildTest::spawn(
        "semaphore::sem2_child_holder",
        "expiring",
        &[("RG_URL", &url), ("RG_NAME", &name)],
    );
    child.expect_line("held", Duration::from_secs(20));
    // Renewed past two leases while the holder lives.
    assert!(sem.try_acquire_for(TEST_WATCHDOG * 2).unwrap().is_none());
    child.signal(libc::SIGKILL);
    let killed = Instant::now();
    let got = sem.try_acquire_for(Duration::from_secs(5)).unwrap();
    let back = killed.elapsed();
    child.kill();
    assert!(got.is_some());
    let bound = TEST_WATCHDOG + ms(250);
    assert!(back <= bound, "SEM-2: permit back {back:?} after SIGKILL");
    eprintln!("SEM-2: expiring permit back {back:?} after SIGKILL (lease {TEST_WATCHDOG:?})");
    drop(got);

    // Plain: Redisson's semaphore has no lease; the permit stays taken.
    let name = unique_name("sem2-plain");
    let sem = ctx.client.semaphore(&name);
    assert!(sem.try_set_permits(1).unwrap());
    let mut child = ChildTest::spawn(
        "semaphore::sem2_child_holder",
        "plain",
        &[("RG_URL", &url), ("RG_NAME", &name)],
    );
    child.expect_line("held", Duration::from_secs(20));
    child.kill();
    assert!(sem.try_acquire_for(1, TEST_WATCHDOG * 2).unwrap().is_none());
    assert_eq!(
        sem.available_permits().unwrap(),
        0,
        "leaked, as in Redisson"
    );
}

/// Runs 8 threads taking permits of `name` `per_process` times in all,
/// counting who is inside in Redis; returns (acquisitions, max inside).
fn sem1_workload(url: &str, name: &str, per_process: u64) -> (u64, u64) {
    let client = test_client(url);
    let start = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8u64)
        .map(|i| {
            let sem = client.semaphore(name);
            let (url, name, start) = (url.to_owned(), name.to_owned(), start.clone());
            let ops = per_process / 8 + u64::from(i < per_process % 8);
            std::thread::spawn(move || {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                let inside = format!("{{{name}}}:inside");
                let (mut done, mut max) = (0, 0);
                let deadline = Instant::now() + Duration::from_secs(60);
                start.wait();
                for op in 0..ops {
                    assert!(Instant::now() < deadline, "SEM-1 took over 60 s");
                    let g = sem.acquire(1).unwrap();
                    let n: u64 = redis::cmd("INCR").arg(&inside).query(&mut conn).unwrap();
                    max = max.max(n);
                    if op % 3 == 0 {
                        sleep(ms(1));
                    }
                    let _: i64 = redis::cmd("DECR").arg(&inside).query(&mut conn).unwrap();
                    drop(g);
                    done += 1;
                }
                (done, max)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |(d, m), (d2, m2)| (d + d2, m.max(m2)))
}

/// SEM-1 child: runs the workload and reports.
#[test]
#[ignore = "child process of sem1_sem2_semaphore_bed"]
fn sem1_child_workload() {
    let Some(_role) = child_role() else { return };
    let url = std::env::var("RG_URL").unwrap();
    let name = std::env::var("RG_NAME").unwrap();
    say("ready");
    assert_eq!(hear(), "go");
    let (done, max) = sem1_workload(&url, &name, 500);
    say(&format!("report {done} {max}"));
}

fn sem1_two_processes_three_permits(ctx: &TestContext) {
    let name = unique_name("sem1");
    let url = ctx.server.url();
    assert!(ctx.client.semaphore(&name).try_set_permits(3).unwrap());
    let mut child = ChildTest::spawn(
        "semaphore::sem1_child_workload",
        "worker",
        &[("RG_URL", &url), ("RG_NAME", &name)],
    );
    child.expect_line("ready", Duration::from_secs(20));
    let started = Instant::now();
    child.send_line("go");
    let (here, max_here) = sem1_workload(&url, &name, 500);
    let line = child.expect_line("report", Duration::from_secs(90));
    let elapsed = started.elapsed();
    let there: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
    let (total, max) = (here + there[0], max_here.max(there[1]));
    let available = ctx.client.semaphore(&name).available_permits().unwrap();
    eprintln!(
        "SEM-1: {total} acquisitions in {elapsed:?} ({:.0}/s); max inside {max}; \
         available at the end {available}",
        total as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(total, 1000);
    assert!(max <= 3, "more than 3 inside: {max}");
    assert_eq!(max, 3, "the 3 permits were all used at once at some point");
    assert_eq!(available, 3, "the count is exact at the end");
    assert!(child.wait_success(Duration::from_secs(5)));
}

/// `ExpiringSemaphore::delete` resets a semaphore: counter and leases go
/// in one step, a holder finds its permit lost, the next `try_set_permits`
/// sets a new count; a value of another type is refused and left alone.
#[test]
fn expiring_semaphore_delete_resets_counter_and_leases() {
    let ctx = TestContext::new();
    let name = unique_name("sem-delete");
    let timeouts = format!("{{{name}}}:timeout");
    let sem = ctx.client.expiring_semaphore(&name);
    assert!(!sem.delete().unwrap(), "nothing to delete yet");
    assert!(sem.try_set_permits(2).unwrap());
    let held = sem.acquire().unwrap();
    assert!(ctx.server.exists(&timeouts));
    assert!(sem.delete().unwrap());
    assert!(!ctx.server.exists(&name) && !ctx.server.exists(&timeouts));
    assert!(wait_until(TEST_WATCHDOG * 2, || held.is_lost()));
    assert!(held.release().unwrap_err().is_lock_lost());
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert!(
        sem.try_set_permits(3).unwrap(),
        "a new count after the reset"
    );
    assert_eq!(sem.available_permits().unwrap(), 3);
    assert!(sem.delete().unwrap());

    let () = ctx.server.cmd("HSET", &[name.as_bytes(), b"a", b"b"]);
    assert!(matches!(
        sem.delete().unwrap_err(),
        redguard::Error::WrongType { .. }
    ));
    assert!(ctx.server.exists(&name), "left untouched");

    // Permit leases that are not a sorted set: refused, both keys kept.
    let _: i64 = ctx.server.cmd("DEL", &[name.as_bytes()]);
    assert!(sem.try_set_permits(1).unwrap());
    let () = ctx.server.cmd("SET", &[timeouts.as_bytes(), b"not-leases"]);
    assert!(matches!(
        sem.delete().unwrap_err(),
        redguard::Error::WrongType { .. }
    ));
    assert!(ctx.server.exists(&name) && ctx.server.exists(&timeouts));
}

/// An expiry set on an expiring semaphore's counter (Redisson's `expire`)
/// is lent to its permit leases by every grant, so both keys go together.
#[test]
fn an_expiring_counter_lends_its_expiry_to_the_permit_leases() {
    let ctx = TestContext::new();
    let name = unique_name("exp-ttl");
    let sem = ctx.client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(2).unwrap());
    let _: i64 = ctx.server.cmd("PEXPIRE", &[name.as_bytes(), b"60000"]);
    let permit = sem.acquire().unwrap();
    let pttl = ctx.server.pttl(format!("{{{name}}}:timeout"));
    assert!(pttl > 50_000 && pttl <= 60_000, "permit leases PTTL {pttl}");
    permit.release().unwrap();
}

/// A released permit wakes a waiter at once, for both kinds: the waiter
/// polls every 20 s and the holder's lease is 30 s, so only the release's
/// message can let it in within half a second.
#[test]
fn a_release_wakes_a_waiting_acquirer_of_either_kind() {
    let ctx = TestContext::new();
    let holder = test_builder(&ctx.server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let waiter = deaf_client(&ctx.server.url());
    // Waiting, and its channel subscribed on the server (a registered
    // waiter's subscription may still be on its way on a loaded machine).
    let subscribed = |name: &str| {
        let channel = format!("redisson_sc:{{{name}}}");
        let counts: Vec<(String, i64)> = ctx
            .server
            .cmd("PUBSUB", &[&b"NUMSUB"[..], channel.as_bytes()]);
        waiter.stats().waiters == 1 && counts.first().is_some_and(|(_, n)| *n == 1)
    };

    let name = unique_name("exp-wake");
    assert!(holder.expiring_semaphore(&name).try_set_permits(1).unwrap());
    let permit = holder.expiring_semaphore(&name).acquire().unwrap();
    let sem = waiter.expiring_semaphore(&name);
    let waiting = std::thread::spawn(move || {
        let got = sem.try_acquire_for(Duration::from_secs(10)).unwrap();
        (got.is_some(), Instant::now())
    });
    assert!(wait_until(Duration::from_secs(5), || subscribed(&name)));
    let released = Instant::now();
    permit.release().unwrap();
    let (got, at) = waiting.join().unwrap();
    assert!(got, "expiring: never acquired");
    let woken = at.saturating_duration_since(released);
    assert!(woken < ms(500), "expiring: woken after {woken:?}");

    let name = unique_name("plain-wake");
    assert!(holder.semaphore(&name).try_set_permits(1).unwrap());
    let permit = holder.semaphore(&name).acquire(1).unwrap();
    let sem = waiter.semaphore(&name);
    let waiting = std::thread::spawn(move || {
        let got = sem.try_acquire_for(1, Duration::from_secs(10)).unwrap();
        (got.is_some(), Instant::now())
    });
    assert!(wait_until(Duration::from_secs(5), || subscribed(&name)));
    let released = Instant::now();
    permit.release().unwrap();
    let (got, at) = waiting.join().unwrap();
    assert!(got, "plain: never acquired");
    let woken = at.saturating_duration_since(released);
    assert!(woken < ms(500), "plain: woken after {woken:?}");
}

/// The renewal of an expiring permit reports it lost at once when its
/// lease ended on the server's clock (an ended permit is never revived:
/// any acquirer may count it back), and when a value of another type
/// replaced the permit leases; both are seen at the next renewal (L/3),
/// long before the lease runs out on the holder's clock.
#[test]
fn a_permit_that_ended_or_lost_its_leases_is_lost_at_the_next_renewal() {
    let ctx = TestContext::new();
    let bound = TEST_WATCHDOG / 3 + ms(400);
    for how in ["ended", "wrong type"] {
        let name = unique_name("exp-ended");
        let sem = ctx.client.expiring_semaphore(&name);
        assert!(sem.try_set_permits(1).unwrap());
        let permit = sem.acquire().unwrap();
        let timeouts = format!("{{{name}}}:timeout");
        let started = Instant::now();
        if how == "ended" {
            let (secs, micros): (u64, u64) = ctx.server.cmd("TIME", &[]);
            let past = (secs * 1000 + micros / 1000 - 1_000).to_string();
            let _: i64 = ctx.server.cmd(
                "ZADD",
                &[
                    timeouts.as_bytes(),
                    b"XX",
                    past.as_bytes(),
                    &permit.id().as_bytes()[..],
                ],
            );
        } else {
            let () = ctx.server.cmd("SET", &[timeouts.as_bytes(), b"not a zset"]);
        }
        assert!(wait_until(TEST_WATCHDOG * 2, || permit.is_lost()), "{how}");
        let told = started.elapsed();
        assert!(told <= bound, "{how}: told after {told:?} > {bound:?}");
        drop(permit);
    }
}

/// A client's `permit_clock_skew` goes into every lease end it stamps (5 s
/// on a 2 s lease here): `leases` lists the 3 permits taken, each with 7 s
/// left at the grant, less the time since, by the server's clock (read 5
/// times, 100 ms apart: a clock read wrong by up to a second shows in most
/// reads). The guard's own deadline leaves the skew out.
#[test]
fn a_permit_lease_end_carries_the_tolerated_clock_skew() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .permit_clock_skew(Duration::from_secs(5))
        .build()
        .unwrap();
    let semaphore = client
        .expiring_semaphore(unique_name("skew"))
        .with_lease(Duration::from_secs(2));
    assert!(semaphore.try_set_permits(3).unwrap());
    let before = Instant::now();
    let permits: Vec<_> = (0..3).map(|_| semaphore.acquire().unwrap()).collect();
    let granted = Instant::now();
    for read in 0..5 {
        let (low, leases, high) = (
            granted.elapsed(),
            semaphore.leases().unwrap(),
            before.elapsed(),
        );
        assert_eq!(leases.len(), 3, "{leases:?}");
        for permit in &permits {
            let left = leases
                .iter()
                .find(|(id, _)| id == permit.id())
                .map(|(_, left)| *left);
            // Milliseconds on both sides: 1 ms of rounding.
            let bounds = (ms(7000) - high - ms(300), ms(7001) - low);
            assert!(
                left.is_some_and(|left| left > bounds.0 && left <= bounds.1),
                "read {read}, {}: {left:?}, bounds {bounds:?}",
                permit.id()
            );
        }
        sleep(ms(100));
    }
    // The guard's own deadline (on this client's clock) has no skew in it.
    for permit in permits {
        let valid = permit.valid_for();
        assert!(valid > ms(1000) && valid < ms(2000), "{valid:?}");
        permit.release().unwrap();
    }
}

/// A permit that too few replicas acknowledged is given back and reported
/// as `NotReplicated`, as a lock grant is (one acknowledgement asked for,
/// no replica here).
#[test]
fn a_permit_too_few_replicas_acknowledged_is_given_back() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .min_replica_acks(1)
        .replica_ack_timeout(ms(50))
        .build()
        .unwrap();
    let semaphore = client.expiring_semaphore(unique_name("acks"));
    assert!(semaphore.try_set_permits(1).unwrap());
    let err = semaphore.try_acquire().unwrap_err();
    assert!(err.is_not_replicated(), "{err:?}");
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    assert_eq!(semaphore.leases().unwrap(), Vec::new());
}

/// Permits kept with `forget` are counted down exactly by each `release`
/// (4 kept, given back 1 then 3: none left), and a release that could not
/// reach the server leaves them this client's to release again.
/// `try_acquire_until` takes permits; `MAX_PERMITS` itself is a count one
/// may ask for (not available here: `None`, no error).
#[test]
fn kept_permits_are_counted_exactly_and_stay_kept_when_a_release_fails() {
    use crate::support::{FaultProxy, Mode, RedisServer};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url()).build().unwrap();
    let sem = client.semaphore(unique_name("sem-kept"));
    assert!(sem.try_set_permits(6).unwrap());
    sem.acquire(4).unwrap().forget();
    sem.release(1).unwrap();
    sem.release(3).unwrap();
    let none_left = sem.release(1).unwrap_err();
    assert!(
        matches!(none_left, redguard::Error::InvalidArgument(_)),
        "{none_left:?}"
    );
    assert_eq!(sem.available_permits().unwrap(), 6);

    sem.acquire(2).unwrap().forget();
    proxy.set_mode(Mode::Refuse);
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"normal"]);
    let unreachable = sem.release(2).unwrap_err();
    assert!(unreachable.is_transient(), "{unreachable:?}");
    proxy.set_mode(Mode::Pass);
    sem.release(2).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 6);

    let until = sem
        .try_acquire_until(2, Instant::now() + Duration::from_secs(1))
        .unwrap();
    assert_eq!(
        until.as_ref().map(redguard::SemaphoreGuard::permits),
        Some(2)
    );
    drop(until);
    assert!(sem.try_acquire(redguard::MAX_PERMITS).unwrap().is_none());
}
