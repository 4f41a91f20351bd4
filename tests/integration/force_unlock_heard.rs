//! A holder hears a force unlock at once (issue 32, part 3): while it
//! holds, a client listens on its lock's channel, and an unlock message
//! there makes it check its hold with one round trip. A force unlock by
//! another client (redguard's `force_unlock`, or Redisson's: `DEL` plus
//! the unlock message) is reported within 100 ms by the guard and the
//! `on_lease_lost` hook, with a 30 s lease, whose renewals (every 10 s)
//! cannot be what noticed it. A message that is not a loss (another
//! reader's release of a shared read lock) leaves the hold be.

use std::time::{Duration, Instant};

use redguard::{Client, HoldKind, LossReason};

use crate::lost_lease::Losses;
use crate::support::{TestContext, ms, test_builder, unique_name, wait_until};

/// How soon the loss must be reported after the force unlock returned.
const HEARD_WITHIN: Duration = Duration::from_millis(100);

/// A holder client with a 30 s lease, whose losses `losses` records.
fn holder(ctx: &TestContext, losses: &Losses) -> Client {
    losses
        .attach(test_builder(&ctx.server.url()))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Waits until the server counts a subscriber of `channel`: the holder
/// listens (it does once its hold lasted 100 ms).
fn await_listening(ctx: &TestContext, channel: &str) {
    let listening = || {
        let (_, n): (String, i64) = ctx.server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
        n >= 1
    };
    assert!(
        wait_until(Duration::from_secs(5), listening),
        "the holder never subscribed {channel}"
    );
}

/// Runs `force` and waits (at most 2 s) until `guard` says its lease is
/// lost and the hook heard of it; the time that took.
fn time_to_loss(
    losses: &Losses,
    name: &str,
    guard: &redguard::LockGuard,
    force: impl FnOnce(),
) -> Duration {
    force();
    let t0 = Instant::now();
    let heard = wait_until(Duration::from_secs(2), || {
        guard.is_lost() && !losses.of(name).is_empty()
    });
    let took = t0.elapsed();
    assert!(
        heard,
        "loss of {name:?} not reported within 2 s (guard lost: {}, hook calls: {:?})",
        guard.is_lost(),
        losses.of(name)
    );
    took
}

/// `force_unlock()` from another client: the holder's guard and hook
/// report the loss within 100 ms, once, as refused; the watchdog entry is
/// gone.
#[test]
fn a_force_unlock_from_another_client_is_heard_at_once() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let a = holder(&ctx, &losses);
    let name = unique_name("heard-force");
    let guard = a.lock(&name).lock().unwrap();
    await_listening(&ctx, &format!("redisson_lock__channel:{{{name}}}"));
    let took = time_to_loss(&losses, &name, &guard, || {
        assert!(ctx.other_client().lock(&name).force_unlock().unwrap());
    });
    assert!(
        took <= HEARD_WITHIN,
        "loss reported {took:?} after the force unlock"
    );
    assert!(guard.check().unwrap_err().is_lock_lost());
    let lost = losses.exactly(&name, 1, ms(200)).remove(0);
    assert_eq!(lost.reason, LossReason::RenewalRefused);
    assert_eq!(lost.kind, HoldKind::Reentrant);
    assert!(
        wait_until(Duration::from_secs(2), || a.stats().watchdog_entries == 0),
        "{:?}",
        a.stats()
    );
    assert!(a.stats().hold_checks >= 1, "{:?}", a.stats());
}

/// Redisson's force unlock, done by hand on a raw connection: `DEL` of the
/// lock plus the unlock message on its channel, for a reentrant lock
/// (`redisson_lock__channel:{name}`, `0`) and a read hold of a read-write
/// lock (`redisson_rwlock:{name}`, `0`, as `RedissonReadLock.forceUnlock`).
#[test]
fn a_redisson_style_force_unlock_is_heard_at_once() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let a = holder(&ctx, &losses);
    let plain = unique_name("heard-raw");
    let rw = unique_name("heard-raw-rw");
    let plain_guard = a.lock(&plain).lock().unwrap();
    let read_guard = a.read_write_lock(&rw).read().lock().unwrap();
    for (name, guard, channel, kind) in [
        (
            &plain,
            &plain_guard,
            format!("redisson_lock__channel:{{{plain}}}"),
            HoldKind::Reentrant,
        ),
        (
            &rw,
            &read_guard,
            format!("redisson_rwlock:{{{rw}}}"),
            HoldKind::Read,
        ),
    ] {
        await_listening(&ctx, &channel);
        let took = time_to_loss(&losses, name, guard, || {
            let mut raw = ctx.server.conn();
            let deleted: i64 = redis::cmd("DEL").arg(name).query(&mut raw).unwrap();
            assert_eq!(deleted, 1);
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg("0")
                .query(&mut raw)
                .unwrap();
        });
        assert!(
            took <= HEARD_WITHIN,
            "{name}: loss reported {took:?} after the force unlock"
        );
        let lost = losses.exactly(name, 1, ms(100)).remove(0);
        assert_eq!(lost.kind, kind);
        assert!(guard.check().unwrap_err().is_lock_lost());
    }
}

/// A fair lock's force unlock (redguard's) is heard too, with and without
/// a waiter queued behind the holder.
#[test]
fn a_fair_locks_force_unlock_is_heard_at_once() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let a = holder(&ctx, &losses);
    let name = unique_name("heard-fair");
    let guard = a.fair_lock(&name).lock().unwrap();
    await_listening(&ctx, &format!("redisson_lock__channel:{{{name}}}"));
    let took = time_to_loss(&losses, &name, &guard, || {
        assert!(ctx.other_client().fair_lock(&name).force_unlock().unwrap());
    });
    assert!(
        took <= HEARD_WITHIN,
        "loss reported {took:?} after the force unlock"
    );
    assert_eq!(losses.exactly(&name, 1, ms(100))[0].kind, HoldKind::Fair);
}

/// Another reader's normal release of a shared read lock, and unlock
/// messages on the read-write channel that do not come with a loss (a
/// release elsewhere, a Redisson version that publishes on every read
/// release): the hold is checked, found held, and not reported lost.
#[test]
fn a_read_hold_survives_messages_that_are_not_its_loss() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let a = holder(&ctx, &losses);
    let b = ctx.other_client();
    let name = unique_name("heard-shared");
    let channel = format!("redisson_rwlock:{{{name}}}");
    let mine = a.read_write_lock(&name).read().lock().unwrap();
    let theirs = b.read_write_lock(&name).read().lock().unwrap();
    await_listening(&ctx, &channel);
    theirs.unlock().unwrap();
    let checks = a.stats().hold_checks;
    for message in ["1", "0"] {
        let _: i64 = ctx
            .server
            .cmd("PUBLISH", &[channel.as_bytes(), message.as_bytes()]);
    }
    assert!(
        wait_until(Duration::from_secs(2), || {
            mine.is_lost() || a.stats().hold_checks > checks
        }),
        "the messages made no check: {:?}",
        a.stats()
    );
    // A loss found by that check would be marked before it is counted.
    assert!(!mine.is_lost(), "{:?}", losses.seen());
    mine.check().unwrap();
    assert!(losses.of(&name).is_empty(), "{:?}", losses.seen());
    let held: i64 = ctx.server.cmd("HLEN", &[name.as_bytes()]);
    assert_eq!(held, 2, "mode and the one read hold");
    mine.unlock().unwrap();
}
