//! The watchdog renews many leases per script call and per round trip, and
//! each lock of a batch keeps its own outcome.

use std::time::{Duration, Instant};

use crate::support::{TestContext, test_builder, unique_name, wait_until};

#[test]
fn b2_many_locks_stay_renewed_in_batches() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .renew_batch(10)
        .build()
        .unwrap();
    let names: Vec<String> = (0..35).map(|_| unique_name("batch")).collect();
    let locks: Vec<_> = names.iter().map(|n| client.lock(n)).collect();
    let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
    let before = client.stats();
    // Three renewal periods: every lock renewed at least twice more.
    assert!(wait_until(Duration::from_secs(5), || {
        client.stats().renewals >= before.renewals + 2 * 35
    }));
    let lowest = names.iter().map(|n| ctx.server.pttl(n)).min().unwrap();
    assert!(lowest > 0, "a key lost its expiry or expired: {lowest}");
    assert!(guards.iter().all(|g| !g.is_lost()));
    let stats = client.stats();
    assert!(stats.renewal_ticks > before.renewal_ticks);
    // 35 renewals fit one round trip (batches of 10, several per trip).
    assert!(
        stats.renewal_round_trips - before.renewal_round_trips
            <= stats.renewal_ticks - before.renewal_ticks,
        "{stats:?} vs {before:?}"
    );
    assert!(
        stats.renewals - before.renewals >= stats.renewal_round_trips - before.renewal_round_trips
    );
}

/// Renewals due close together go out together: 30 locks taken about
/// 1.5 ms apart (45 ms from the first to the last, within the window of an
/// eighth of the renewal interval: 62 ms for L = 1.5 s) are renewed in one
/// round trip a round, not one each (with no window, dispatched only when
/// due, they went in about one round trip per lock: 60 for two rounds).
///
/// On a loaded machine the 30 acquires can spread over more than one
/// window (the test failed once in a fresh clone at load 3-8, on Redis
/// 6.2, with the bound fixed at 4): the renewals of each window's worth of
/// locks then go as one trip, so the bound is two trips a round for every
/// window the acquires actually spread over, plus one for a round split at
/// a window's edge. Unloaded that is 4; the one-by-one renewals give 60.
#[test]
fn renewals_due_close_together_share_a_round_trip() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .watchdog_timeout(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let locks: Vec<_> = (0..30)
        .map(|_| client.lock(unique_name("window")))
        .collect();
    let mut guards = Vec::new();
    let started = Instant::now();
    for lock in &locks {
        guards.push(lock.lock().unwrap());
        crate::support::sleep(Duration::from_millis(1));
    }
    let spread = started.elapsed();
    // An eighth of the renewal interval (L/3).
    let window = Duration::from_millis(1_500) / 3 / 8;
    let windows = (spread.as_millis() / window.as_millis()) as u64 + 1;
    let renewed = |n: u64, base: u64| {
        assert!(
            wait_until(Duration::from_secs(5), || client.stats().renewals
                >= base + n),
            "not renewed"
        );
        client.stats()
    };
    // The first round, then two more, counted from round to round.
    let first = renewed(30, client.stats().renewals);
    let third = renewed(60, first.renewals);
    let trips = third.renewal_round_trips - first.renewal_round_trips;
    eprintln!(
        "30 locks taken over {spread:?} ({windows} window(s)): 2 renewal rounds in {trips} round trips"
    );
    // Plus one split a round: the watchdog thread is the process's, and
    // in the suite it serves other tests' clients too (5 trips were seen
    // once there, with the acquires in one window).
    assert!(
        trips <= 2 * (windows + 2),
        "2 rounds of 30 renewals taken over {spread:?} took {trips} round trips"
    );
    assert!(guards.iter().all(|g| !g.is_lost()));
}

#[test]
fn i7_wrong_type_in_a_batch_loses_only_that_lock() {
    let ctx = TestContext::new();
    let names: Vec<String> = (0..3).map(|_| unique_name("batch-wt")).collect();
    let locks: Vec<_> = names.iter().map(|n| ctx.client.lock(n)).collect();
    let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
    let _: () = ctx.server.cmd("DEL", &[names[1].as_bytes()]);
    let _: () = ctx.server.cmd("SET", &[names[1].as_bytes(), b"x"]);
    assert!(wait_until(Duration::from_secs(3), || guards[1].is_lost()));
    let renewals = ctx.client.stats().renewals;
    assert!(wait_until(Duration::from_secs(3), || ctx
        .client
        .stats()
        .renewals
        >= renewals + 4));
    assert!(!guards[0].is_lost() && !guards[2].is_lost());
    assert!(ctx.server.pttl(&names[0]) > 0 && ctx.server.pttl(&names[2]) > 0);
    let value: String = ctx.server.cmd("GET", &[names[1].as_bytes()]);
    assert_eq!(value, "x", "the foreign value is left alone");
}

#[test]
fn renewals_survive_a_script_cache_flush() {
    let ctx = TestContext::new();
    let name = unique_name("batch-flush");
    let lock = ctx.client.lock(&name);
    let guard = lock.lock().unwrap();
    assert!(wait_until(Duration::from_secs(3), || ctx
        .client
        .stats()
        .renewals
        >= 1));
    let _: () = ctx.server.cmd("SCRIPT", &[b"FLUSH"]);
    let renewals = ctx.client.stats().renewals;
    assert!(wait_until(Duration::from_secs(3), || ctx
        .client
        .stats()
        .renewals
        >= renewals + 2));
    assert!(!guard.is_lost());
    assert!(ctx.server.pttl(&name) > 0);
}
