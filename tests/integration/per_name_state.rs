//! No per-name state outlives a name's last hold or wait (issue 45, item
//! 12): a service locking one name per order must not grow with its
//! orders. After many distinct names are held (briefly, or long enough to
//! be listened for a force unlock) and waited for, and released, the
//! client keeps no entry for any of them (`Client::residue`, `stats`), no
//! channel stays subscribed on the server, and no collection keeps the
//! room a burst made it take.

use std::time::Duration;

use redguard::Client;

use crate::support::{TestContext, bulk_client, unique_name, wait_until};

/// Room a collection may keep once empty (`capacity::KEEP` and the hash
/// table's rounding).
const SMALL_ROOM: usize = 256;

/// The server's channels of names starting with `prefix`.
fn channels_left(ctx: &TestContext, prefix: &str) -> Vec<String> {
    ctx.server.cmd(
        "PUBSUB",
        &[
            b"CHANNELS",
            format!("redisson_lock__channel:{{{prefix}*").as_bytes(),
        ],
    )
}

/// Waits (at most 10 s) until `client` keeps nothing of any name: no
/// hold, watchdog entry, waiter, listened hold or subscription, and little
/// room; panics with what was left.
fn assert_nothing_left(ctx: &TestContext, client: &Client, prefix: &str) {
    let clear = || {
        let s = client.stats();
        let r = client.residue();
        s.held_locks == 0
            && s.watchdog_entries == 0
            && s.waiters == 0
            && s.subscribed_channels == 0
            && s.listened_holds == 0
            && r.thread_holds.0 == 0
            && r.waiter_channels.0 == 0
            && r.listened.0 == 0
            && r.subscribed.0 == 0
            && [r.thread_holds, r.waiter_channels, r.listened, r.subscribed]
                .iter()
                .all(|(_, room)| *room <= SMALL_ROOM)
            && channels_left(ctx, prefix).is_empty()
    };
    assert!(
        wait_until(Duration::from_secs(10), clear),
        "state left after the last hold: {:?}, {:?}, channels {:?}",
        client.stats(),
        client.residue(),
        channels_left(ctx, prefix)
    );
}

/// Eight threads lock and release names never used twice: nothing of them
/// stays.
#[test]
fn distinct_names_held_briefly_leave_nothing() {
    let ctx = TestContext::new();
    let client = bulk_client(&ctx.server.url());
    let prefix = unique_name("pn-brief");
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, prefix) = (&client, &prefix);
            s.spawn(move || {
                for i in 0..300 {
                    let guard = client.lock(format!("{prefix}:{t}:{i}")).lock().unwrap();
                    guard.unlock().unwrap();
                }
                assert_eq!(client.residue().thread_holds.0, 0);
            });
        }
    });
    assert_nothing_left(&ctx, &client, &prefix);
}

/// Holds that last long enough to be listened for a force unlock, taken
/// and released in rounds of many at once: after each round the listened
/// holds go, and their channels are unsubscribed. (The subscriber thread
/// used to fall asleep with unsubscribes queued; every later hold then
/// stayed listened for good, up to 10,000.)
#[test]
fn distinct_names_held_long_enough_to_be_listened_leave_nothing() {
    let ctx = TestContext::new();
    let client = bulk_client(&ctx.server.url());
    let prefix = unique_name("pn-listened");
    for round in 0..3 {
        let locks: Vec<_> = (0..60)
            .map(|i| client.lock(format!("{prefix}:{round}:{i}")))
            .collect();
        let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
        assert!(
            wait_until(Duration::from_secs(5), || client.stats().listened_holds
                >= 60),
            "round {round}: the holds were not listened for: {:?}",
            client.stats()
        );
        drop(guards);
        assert_nothing_left(&ctx, &client, &prefix);
    }
}

/// A thread that held 3,000 names at once, and waits on many names, leave
/// small tables behind once it is all over.
#[test]
fn a_burst_of_holds_and_waits_gives_its_room_back() {
    let ctx = TestContext::new();
    let client = bulk_client(&ctx.server.url());
    let other = ctx.other_client();
    let prefix = unique_name("pn-burst");
    let locks: Vec<_> = (0..3000)
        .map(|i| client.lock(format!("{prefix}:h{i}")))
        .collect();
    let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
    assert!(client.residue().thread_holds.1 >= 3000);
    // Waits on names another client holds: each registers a waiter and
    // subscribes its channel, then gives up.
    let held: Vec<_> = (0..40)
        .map(|i| other.lock(format!("{prefix}:w{i}")).lock().unwrap())
        .collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, prefix) = (&client, &prefix);
            s.spawn(move || {
                for i in (t..40).step_by(8) {
                    let lock = client.lock(format!("{prefix}:w{i}"));
                    assert!(
                        lock.try_lock_for(Duration::from_millis(30))
                            .unwrap()
                            .is_none()
                    );
                }
            });
        }
    });
    drop(guards);
    drop(held);
    assert_nothing_left(&ctx, &client, &prefix);
}
