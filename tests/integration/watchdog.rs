//! The watchdog: renewal while held (B2), no renewal and no orphan after
//! release or a cancelled wait (B3), a killed holder (B1), loss reported
//! when Redis forgets the lock (B4, H3 for every lock kind), slow Redis at
//! the catalogue's timings (C4), a flushed script cache (I10).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::support::{
    ChildTest, TEST_RESPONSE, TEST_WATCHDOG, TestContext, child_env, child_role, ms, say,
    test_builder, test_client, unique_name, wait_until,
};

/// The catalogue's lease, renewed every 500 ms.
const CATALOGUE_LEASE: Duration = Duration::from_millis(1500);
/// The catalogue's command timeout.
const CATALOGUE_RESPONSE: Duration = Duration::from_millis(250);

/// A client with the catalogue's timings (L = 1.5 s, 250 ms command
/// timeout) and a given poll interval.
fn catalogue_client(url: &str) -> redguard::Client {
    test_builder(url)
        .watchdog_timeout(CATALOGUE_LEASE)
        .response_timeout(CATALOGUE_RESPONSE)
        .build()
        .unwrap()
}

/// B2: held for 10 × L (L = 1.5 s) while 8 threads of another client
/// contend for it, PTTL sampled every 50 ms never reaches 0 and never drops
/// below 0.6 × L.
#[test]
fn b2_watchdog_keeps_the_lock_for_10x_the_lease_under_contention() {
    let _heavy = crate::support::cpu_heavy();
    const CONTENDERS: usize = 8;
    let ctx = TestContext::new();
    let name = unique_name("b2");
    let client = catalogue_client(&ctx.server.url());
    let guard = client.lock(&name).lock().unwrap();
    let others = test_builder(&ctx.server.url())
        .poll_interval(ms(100))
        .build()
        .unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    let contenders: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let lock = others.lock(&name);
            let acquired = acquired.clone();
            std::thread::spawn(move || {
                let g = lock.try_lock_for(CATALOGUE_LEASE * 10 + Duration::from_secs(10));
                if let Some(g) = g.unwrap() {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || others
        .stats()
        .waiters
        == CONTENDERS));
    let lease = CATALOGUE_LEASE.as_millis() as i64;
    let mut conn = ctx.server.conn();
    let mut min_pttl = i64::MAX;
    let mut samples = 0;
    let t0 = Instant::now();
    while t0.elapsed() < CATALOGUE_LEASE * 10 {
        let p: i64 = redis::cmd("PTTL").arg(&name).query(&mut conn).unwrap();
        assert!(p > 0, "pttl hit {p} after {:?}", t0.elapsed());
        min_pttl = min_pttl.min(p);
        samples += 1;
        crate::support::sleep(ms(50));
    }
    eprintln!(
        "B2: {samples} samples over {:?}: min PTTL {min_pttl} ms of {lease} ({:.2} L), {} renewals",
        t0.elapsed(),
        min_pttl as f64 / lease as f64,
        client.stats().renewals
    );
    assert_eq!(acquired.load(Ordering::SeqCst), 0, "a contender got in");
    assert!(samples > 200);
    assert!(
        min_pttl as f64 >= 0.6 * lease as f64,
        "min pttl {min_pttl} of {lease}"
    );
    guard.check().unwrap();
    guard.unlock().unwrap();
    for t in contenders {
        t.join().unwrap();
    }
    assert_eq!(acquired.load(Ordering::SeqCst), CONTENDERS);
}

/// B3: 1,000 waits whose deadline falls at the moment the lock frees
/// (Redisson's interrupted `tryLock` case), each grant dropped at once;
/// then no lock, no watchdog entry and no key is left, and the server sees
/// no renewal over 3 × L.
#[test]
fn b3_no_renewal_and_no_orphan_after_1000_waits_cancelled_at_the_moment_of_success() {
    const LANES: usize = 20;
    const PER_LANE: usize = 50;
    let ctx = TestContext::new();
    let lease = ms(600);
    let client = test_builder(&ctx.server.url())
        .watchdog_timeout(lease)
        .response_timeout(ms(200))
        .poll_interval(ms(50))
        .build()
        .unwrap();
    let holder = test_builder(&ctx.server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let prefix = unique_name("b3");
    let won = Arc::new(AtomicUsize::new(0));
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let mine = client.lock(format!("{prefix}:{lane}"));
            let theirs = holder.lock(format!("{prefix}:{lane}"));
            let won = won.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rng();
                for _ in 0..PER_LANE {
                    let hold = ms(rng.random_range(8..16));
                    let g = theirs
                        .with_lease(hold)
                        .try_lock_for(Duration::from_secs(2))
                        .unwrap()
                        .expect("the holder takes it back");
                    // The wait ends within a few ms of the lease running out.
                    let wait = hold.saturating_sub(ms(2)) + ms(rng.random_range(0..4));
                    if let Some(mine) = mine.try_lock_for(wait).unwrap() {
                        won.fetch_add(1, Ordering::SeqCst);
                        drop(mine);
                    }
                    drop(g);
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.join().unwrap();
    }
    let won = won.load(Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(3), || {
            let s = client.stats();
            s.held_locks == 0 && s.watchdog_entries == 0
        }),
        "{:?}",
        client.stats()
    );
    let before = ctx.server.command_calls(&["evalsha", "eval"]);
    crate::support::sleep(lease * 3);
    let after = ctx.server.command_calls(&["evalsha", "eval"]);
    let keys: Vec<String> = ctx.server.cmd("KEYS", &[format!("{prefix}*").as_bytes()]);
    eprintln!(
        "B3: {} waits ending as the lock freed, {won} of them granted and dropped at once; \
         script calls over 3 L after: {}; keys left: {}",
        LANES * PER_LANE,
        after - before,
        keys.len()
    );
    assert_eq!(after, before, "something was renewed after release");
    assert!(keys.is_empty(), "orphan keys {keys:?}");
    assert!(
        won > 0 && won < LANES * PER_LANE,
        "the race never ran: {won}"
    );
}

/// B3, from the moment `unlock` returns: locks of every renewal path (a
/// reentrant lock, renewed in `renew_many` batches; a read hold; a write
/// hold; an expiring permit) are held across a renewal, then released right
/// after one; from the moment the last `unlock` returns the server sees no
/// script call for 3 × L. A watchdog that renewed a released lock once more
/// before dropping it would be seen at the next due renewal, L/3 later.
#[test]
fn b3_a_release_stops_its_renewals_at_once() {
    const EACH: usize = 5;
    let ctx = TestContext::new();
    let lease = TEST_WATCHDOG;
    let prefix = unique_name("b3-release");
    let sem = ctx.client.expiring_semaphore(format!("{prefix}:sem"));
    assert!(sem.try_set_permits(EACH as u32).unwrap());
    let mut locks = Vec::new();
    let mut permits = Vec::new();
    for i in 0..EACH {
        locks.push(
            ctx.client
                .lock(format!("{prefix}:lock:{i}"))
                .lock()
                .unwrap(),
        );
        let rw = ctx.client.read_write_lock(format!("{prefix}:rw:{i}"));
        locks.push(rw.read().lock().unwrap());
        let rw = ctx.client.read_write_lock(format!("{prefix}:w:{i}"));
        locks.push(rw.write().lock().unwrap());
        permits.push(sem.acquire().unwrap());
    }
    let held = 4 * EACH as u64;
    // Released right after a renewal round reached the server (one
    // `renew_many` call for the reentrant locks, one script call for each
    // other hold): the next round is due L/3 later, well after the
    // releases return.
    let scripts = || ctx.server.command_calls(&["evalsha", "eval"]);
    let start = scripts();
    assert!(
        wait_until(lease, || ctx.client.stats().renewals >= held),
        "no renewal round within L"
    );
    assert!(wait_until(ms(200), || scripts() >= start + 1 + 3 * EACH as u64));
    let t0 = Instant::now();
    for g in locks {
        g.unlock().unwrap();
    }
    for p in permits {
        p.release().unwrap();
    }
    let released = t0.elapsed();
    let after_unlock = scripts();
    crate::support::sleep(lease * 3);
    let stray = scripts() - after_unlock;
    eprintln!(
        "B3 release: {held} holds released in {released:?}; script calls over 3 L after the last \
         unlock returned: {stray}"
    );
    assert!(released < lease / 3, "the releases took {released:?}");
    assert_eq!(stray, 0, "renewals after release");
    assert_eq!(ctx.client.stats().held_locks, 0);
}

/// B2 for the holds with renewal scripts of their own: a read hold, a write
/// hold and an expiring permit, with a reentrant lock renewed in a
/// multi-key batch beside them, held for 3 × L (L = 900 ms). None is lost
/// and every lock key still has more than L/3 to live. A successful renewal
/// misread as a failure would end each hold at its local deadline, about L
/// after the grant.
#[test]
fn b2_holds_of_every_renewal_script_are_kept_past_their_lease() {
    let ctx = TestContext::new();
    let lease = TEST_WATCHDOG;
    let client = test_builder(&ctx.server.url())
        .renew_batch(10)
        .build()
        .unwrap();
    let tag = unique_name("b2-kinds");
    let sem = client.expiring_semaphore(format!("{tag}:sem"));
    assert!(sem.try_set_permits(1).unwrap());
    let kinds: Vec<(&str, redguard::LockGuard)> = vec![
        (
            "reentrant",
            client.lock(format!("{tag}:lock")).lock().unwrap(),
        ),
        (
            "read",
            client
                .read_write_lock(format!("{tag}:r"))
                .read()
                .lock()
                .unwrap(),
        ),
        (
            "write",
            client
                .read_write_lock(format!("{tag}:w"))
                .write()
                .lock()
                .unwrap(),
        ),
    ];
    let permit = sem.acquire().unwrap();
    crate::support::sleep(lease * 3);
    for (kind, guard) in &kinds {
        guard.check().unwrap_or_else(|e| panic!("{kind}: {e}"));
        let pttl = ctx.server.pttl(guard.lock().name());
        assert!(
            pttl > (lease / 3).as_millis() as i64,
            "{kind}: PTTL {pttl} ms"
        );
    }
    permit.check().unwrap_or_else(|e| panic!("permit: {e}"));
    assert!(!permit.is_lost());
    for (_, guard) in kinds {
        guard.unlock().unwrap();
    }
    permit.release().unwrap();
}

/// B4: Redis restarts without persistence while a lock is held. The lease
/// is 30 s, so no regular renewal falls within the bound: the loss is seen
/// within 1 s only because the restart is noticed and the lease checked at
/// once.
#[test]
fn b4_redis_restart_without_persistence_reports_lock_lost() {
    let mut ctx = TestContext::new();
    let losses = crate::lost_lease::Losses::default();
    let client = losses
        .attach(test_builder(&ctx.server.url()))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let name = unique_name("b4");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    assert!(wait_until(Duration::from_secs(2), || crate::loss::watched(
        &ctx.server
    )));
    let t0 = Instant::now();
    ctx.server.restart();
    assert!(
        wait_until(Duration::from_secs(3), || guard.is_lost()),
        "loss not reported"
    );
    let seen = t0.elapsed();
    eprintln!("B4 watchdog: loss seen {seen:?} after the restart began (L = 30 s)");
    assert!(seen < Duration::from_secs(1), "{seen:?}");
    assert!(guard.check().unwrap_err().is_lock_lost());
    // The callback heard of it once, as a restart (the check after the
    // restart and the restart seen by run_id both look at the lease).
    let lost = losses.exactly(&name, 1, ms(500)).remove(0);
    assert_eq!(lost.reason, redguard::LossReason::Restart);
    assert_eq!(lost.holder, *guard.holder_id());
    // Another client can take it after the restart (documented limitation).
    let other = ctx.other_client().lock(&name);
    assert!(
        other
            .try_lock_for(Duration::from_secs(2))
            .unwrap()
            .is_some()
    );
    assert!(guard.unlock().unwrap_err().is_lock_lost());
    assert_eq!(losses.seen().len(), 1, "{:?}", losses.seen());
}

/// How many of `guards` are lost.
fn lost(guards: &[redguard::LockGuard]) -> usize {
    guards.iter().filter(|g| g.is_lost()).count()
}

/// C4 at the catalogue's timings (L = 1.5 s, 250 ms command timeout), with
/// 10 locks held: `CLIENT PAUSE 500 ALL` and a 700 ms `SIGSTOP` of
/// redis-server (both ≤ 0.5 × L) cost no lease, twice each; a `SIGSTOP`
/// of L + 200 ms is reported as lost for every lock, while Redis is still
/// frozen, twice.
#[test]
fn c4_pauses_up_to_half_the_lease_cost_nothing_and_pauses_past_it_are_reported() {
    const LOCKS: usize = 10;
    let ctx = TestContext::new();
    let client = catalogue_client(&ctx.server.url());
    let names: Vec<String> = (0..LOCKS).map(|_| unique_name("c4")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    let mut spurious = 0;
    for round in 0..2 {
        let t0 = Instant::now();
        ctx.server.client_pause(500);
        // The pause is over once a command gets through again.
        let _: String = ctx.server.cmd("PING", &[]);
        let paused = t0.elapsed();
        crate::support::sleep(CATALOGUE_LEASE / 3);
        spurious += lost(&guards);
        eprintln!("C4 round {round}: CLIENT PAUSE 500 ALL held commands {paused:?}");

        ctx.server.sigstop();
        crate::support::sleep(ms(700));
        ctx.server.sigcont();
        crate::support::sleep(CATALOGUE_LEASE / 3);
        spurious += lost(&guards);
    }
    for n in &names {
        assert!(ctx.server.pttl(n) > 0, "{n} expired");
    }
    assert_eq!(spurious, 0, "leases lost to pauses of at most 0.5 L");
    for g in guards {
        g.unlock().unwrap();
    }

    let mut reported = 0;
    let mut worst = Duration::ZERO;
    for _ in 0..2 {
        let guards: Vec<_> = (0..LOCKS)
            .map(|_| client.lock(unique_name("c4-long")).lock().unwrap())
            .collect();
        let t0 = Instant::now();
        ctx.server.sigstop();
        // Reported while Redis is still silent: never a silent loss.
        let all = wait_until(CATALOGUE_LEASE + ms(200), || lost(&guards) == LOCKS);
        worst = worst.max(t0.elapsed());
        reported += lost(&guards);
        ctx.server.sigcont();
        assert!(all, "only {} of {LOCKS} losses reported", lost(&guards));
        for g in &guards {
            assert!(g.check().unwrap_err().is_lock_lost());
        }
    }
    eprintln!(
        "C4: 0 of {} leases lost to pauses <= 0.5 L; {reported} of {} reported for pauses of L + 200 ms, the last {worst:?} into the pause",
        LOCKS * 4,
        LOCKS * 2
    );
    assert_eq!(reported, LOCKS * 2);
}

/// H3 for every lock kind (reentrant, fair, fenced, read, write, and a lock
/// renewed in a multi-key batch): an admin `DEL`s or `PEXPIRE 1`s the held
/// key, and the holder is told within L/3 + RTT + 150 ms. The local lease
/// would run out only after L − drift, so a loss seen then would fail.
#[test]
fn h3_server_side_expiry_is_noticed_within_a_third_of_the_lease_for_every_kind() {
    let ctx = TestContext::new();
    let client = catalogue_client(&ctx.server.url());
    let batched = test_builder(&ctx.server.url())
        .watchdog_timeout(CATALOGUE_LEASE)
        .response_timeout(CATALOGUE_RESPONSE)
        .renew_batch(10)
        .build()
        .unwrap();
    let mut conn = ctx.server.conn();
    let t = Instant::now();
    let _: String = redis::cmd("PING").query(&mut conn).unwrap();
    let rtt = t.elapsed();
    // A fifth of the lease for a late watchdog on a loaded host (150 ms was
    // crossed once): still under the next round of renewals (2L/3), where
    // a watchdog that skipped one would tell.
    let bound = CATALOGUE_LEASE / 3 + rtt + CATALOGUE_LEASE / 5;
    let mut report = Vec::new();
    for how in ["DEL", "PEXPIRE"] {
        let tag = unique_name("h3");
        let kinds: Vec<(&str, redguard::Lock)> = vec![
            ("reentrant", client.lock(format!("{tag}:lock"))),
            ("fair", client.fair_lock(format!("{tag}:fair"))),
            ("fenced", client.fenced_lock(format!("{tag}:fenced"))),
            ("read", client.read_write_lock(format!("{tag}:rr")).read()),
            ("write", client.read_write_lock(format!("{tag}:rw")).write()),
        ];
        let mut watched: Vec<(String, Vec<u8>, redguard::LockGuard)> = kinds
            .into_iter()
            .map(|(kind, lock)| {
                let key = lock.name().to_vec();
                (kind.to_owned(), key, lock.lock().unwrap())
            })
            .collect();
        // 35 locks renewed in batches of 10; the fifth one goes.
        let mut batch: Vec<_> = (0..35)
            .map(|i| batched.lock(format!("{tag}:batch:{i}")).lock().unwrap())
            .collect();
        let fifth = batch.swap_remove(4);
        watched.push(("batch".to_owned(), fifth.lock().name().to_vec(), fifth));
        // Renewals are spread over the period: wait for one round of them.
        crate::support::sleep(CATALOGUE_LEASE / 3);
        let mut pipe = redis::pipe();
        for (_, key, _) in &watched {
            if how == "DEL" {
                pipe.cmd("DEL").arg(key).ignore();
            } else {
                pipe.cmd("PEXPIRE").arg(key).arg(1).ignore();
            }
        }
        let () = pipe.query(&mut conn).unwrap();
        let removed = Instant::now();
        let mut noticed: Vec<Option<Duration>> = vec![None; watched.len()];
        wait_until(CATALOGUE_LEASE * 2, || {
            for (i, (_, _, g)) in watched.iter().enumerate() {
                if noticed[i].is_none() && g.is_lost() {
                    noticed[i] = Some(removed.elapsed());
                }
            }
            noticed.iter().all(Option::is_some)
        });
        for ((kind, _, g), seen) in watched.iter().zip(&noticed) {
            report.push(format!("{how} {kind}: {seen:?}"));
            let seen = seen.unwrap_or_else(|| panic!("{how} {kind}: loss never reported"));
            assert!(
                seen <= bound,
                "{how} {kind}: told after {seen:?} > {bound:?}"
            );
            assert!(g.check().unwrap_err().is_lock_lost(), "{how} {kind}");
        }
        assert!(
            batch.iter().all(|g| !g.is_lost()),
            "{how}: the rest of the batch"
        );
        // The next fenced holder gets a larger token.
        let fenced = &watched[2].2;
        let next = ctx
            .other_client()
            .fenced_lock(format!("{tag}:fenced"))
            .try_lock()
            .unwrap()
            .expect("free after the expiry");
        assert!(next.fencing_token().unwrap().get() > fenced.fencing_token().unwrap().get());
    }
    eprintln!("H3: bound {bound:?} (RTT {rtt:?}); {report:?}");
}

#[test]
fn i10_script_flush_while_held_keeps_renewing() {
    let ctx = TestContext::new();
    let name = unique_name("i10");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    ctx.server.cmd::<String>("SCRIPT", &[b"FLUSH"]);
    let before = ctx.client.stats().renewals;
    assert!(wait_until(TEST_WATCHDOG * 2, || ctx
        .client
        .stats()
        .renewals
        >= before + 2));
    guard.check().unwrap();
    assert!(ctx.server.pttl(&name) > (TEST_WATCHDOG / 2).as_millis() as i64);
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// The holder side of B1, run in a child process.
#[test]
#[ignore = "child process of b1_holder_killed_frees_the_lock_within_one_lease"]
fn b1_child_holder() {
    let Some(_) = child_role() else { return };
    let client = test_client(&child_env("RG_URL"));
    let lock = client.lock(child_env("RG_NAME"));
    let _guard = lock.lock().unwrap();
    say("ACQUIRED");
    // Killed by the parent long before this ends.
    crate::support::sleep(Duration::from_secs(60));
}

/// B1, 20 runs at once: 20 child processes each hold a lock (watchdog on,
/// renewed); a waiter of this process blocks on each; the children are
/// killed with SIGKILL. No unlock message comes, so each waiter acquires
/// only when the key's TTL has run out: never before the TTL read at the
/// kill, and within the response timeout + 100 ms after it. The waiters'
/// poll interval is 10 s: a waiter that did not sleep by the holder's ttl
/// would come seconds late.
#[test]
fn b1_holder_killed_frees_the_lock_within_one_lease() {
    const RUNS: usize = 20;
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let names: Vec<String> = (0..RUNS).map(|_| unique_name("b1")).collect();
    let mut children: Vec<ChildTest> = names
        .iter()
        .map(|name| {
            ChildTest::spawn(
                "watchdog::b1_child_holder",
                "b1",
                &[("RG_URL", &url), ("RG_NAME", name)],
            )
        })
        .collect();
    for child in &children {
        child.expect_line("ACQUIRED", Duration::from_secs(20));
    }
    // Held across renewals by the children.
    let renewed = ctx.server.command_calls(&["evalsha", "eval"]);
    assert!(wait_until(TEST_WATCHDOG * 2, || ctx
        .server
        .command_calls(&["evalsha", "eval"])
        >= renewed + 2 * RUNS as u64));
    // A 10 s poll interval: only the holder's ttl, which the busy acquire
    // reports, bounds the waiters' sleep.
    let waiting = test_builder(&url)
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = waiting.lock(name);
            std::thread::spawn(move || {
                let g = lock.lock().unwrap();
                let at = Instant::now();
                drop(g);
                at
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || waiting
        .stats()
        .waiters
        == RUNS));
    let mut conn = ctx.server.conn();
    let mut killed = Vec::new();
    for (child, name) in children.iter_mut().zip(&names) {
        // Taken before the PTTL is read: the key's expiry is at least
        // `at + ttl` (to Redis's whole milliseconds).
        let at = Instant::now();
        let ttl: i64 = redis::cmd("PTTL").arg(name).query(&mut conn).unwrap();
        child.signal(libc::SIGKILL);
        killed.push((ttl, at));
    }
    let mut report = Vec::new();
    for (waiter, (ttl, at)) in waiters.into_iter().zip(killed) {
        let acquired = waiter.join().unwrap();
        let waited = acquired - at;
        assert!(ttl > 0);
        let ttl = Duration::from_millis(ttl as u64);
        report.push((waited.as_millis(), ttl.as_millis()));
        // Never before the ttl ran out (2 ms for Redis's whole
        // milliseconds: the expiry's start and the PTTL reading), and not
        // much after.
        assert!(
            waited + ms(2) >= ttl,
            "acquired after {waited:?}, ttl was {ttl:?}"
        );
        assert!(
            waited <= ttl + TEST_RESPONSE + ms(100),
            "acquired after {waited:?}, ttl was {ttl:?}"
        );
    }
    let late = report
        .iter()
        .map(|(w, t)| *w as i128 - *t as i128)
        .max()
        .unwrap();
    eprintln!(
        "B1: {RUNS} killed holders; (acquired after ms, TTL at the kill ms): {report:?}; latest {late} ms after the TTL"
    );
}
