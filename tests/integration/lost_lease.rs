//! `Builder::on_lease_lost`: called once per lease the watchdog finds lost,
//! with the reason, and never for a normal release. The restart (B4),
//! eviction (H4) and partition (C1) cases assert it where those scenarios
//! live (`watchdog`, `persistence`, `faults`); [`Losses`] is their
//! recorder.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redguard::{HoldKind, LossReason, LostLease};

use crate::support::{TestContext, ms, test_builder, unique_name, wait_until};

/// Records every call of the lost-lease callback of the clients it was
/// attached to.
#[derive(Clone, Default)]
pub(crate) struct Losses(Arc<Mutex<Vec<LostLease>>>);

impl Losses {
    /// `builder` with this recorder as its lost-lease callback.
    pub(crate) fn attach(&self, builder: redguard::Builder) -> redguard::Builder {
        let me = self.clone();
        builder.on_lease_lost(move |lost| me.list().push(lost.clone()))
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<LostLease>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What was recorded so far.
    pub(crate) fn seen(&self) -> Vec<LostLease> {
        self.list().clone()
    }

    /// The calls for lock `name`.
    pub(crate) fn of(&self, name: &str) -> Vec<LostLease> {
        self.seen()
            .into_iter()
            .filter(|l| &l.name[..] == name.as_bytes())
            .collect()
    }

    /// Waits until `name` has `n` calls; then waits `settle` more and says
    /// whether there are exactly `n` (a second call would show by then).
    pub(crate) fn exactly(&self, name: &str, n: usize, settle: Duration) -> Vec<LostLease> {
        assert!(
            wait_until(Duration::from_secs(5), || self.of(name).len() >= n),
            "{} calls for {name:?} within 5 s: {:?}",
            self.of(name).len(),
            self.seen()
        );
        crate::support::sleep(settle);
        let calls = self.of(name);
        assert_eq!(calls.len(), n, "calls for {name:?}: {calls:?}");
        calls
    }
}

/// A server, a recorder and a client of the server with the test timings
/// (the watchdog timeout `watchdog` when given) whose lost-lease callback
/// is the recorder.
fn recorded(watchdog: Option<Duration>) -> (TestContext, Losses, redguard::Client) {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let mut builder = losses.attach(test_builder(&ctx.server.url()));
    if let Some(timeout) = watchdog {
        builder = builder.watchdog_timeout(timeout);
    }
    let client = builder.build().unwrap();
    (ctx, losses, client)
}

/// A key deleted under its holder (`force_unlock`): one call, reason
/// `RenewalRefused`, with the lock's name, kind and holder id; the guard
/// says the same.
#[test]
fn a_deleted_lock_is_reported_once_as_refused() {
    let (ctx, losses, client) = recorded(None);
    let name = unique_name("lost-refused");
    let guard = client.fair_lock(&name).lock().unwrap();
    let before = std::time::SystemTime::now();
    assert!(ctx.client.lock(&name).force_unlock().unwrap());
    let calls = losses.exactly(&name, 1, ms(900));
    let lost = &calls[0];
    assert_eq!(lost.reason, LossReason::RenewalRefused);
    assert_eq!(lost.kind, HoldKind::Fair);
    assert_eq!(lost.holder, *guard.holder_id());
    assert!(lost.noticed_at >= before);
    assert!(guard.check().unwrap_err().is_lock_lost());
    // The guard's release finds it lost: no second call.
    assert!(guard.unlock().is_err());
    losses.exactly(&name, 1, ms(300));
}

/// An inner release of a reentrant lock is no last release: the outer
/// hold, deleted under it afterwards, is still reported lost (a release
/// under way silences only the loss it may itself cause).
#[test]
fn an_inner_release_leaves_the_outer_holds_loss_reported() {
    let (ctx, losses, client) = recorded(None);
    let name = unique_name("lost-inner");
    let lock = client.lock(&name);
    let outer = lock.lock().unwrap();
    lock.lock().unwrap().unlock().unwrap();
    assert!(ctx.client.lock(&name).force_unlock().unwrap());
    let lost = losses.exactly(&name, 1, ms(300)).remove(0);
    assert_eq!(lost.reason, LossReason::RenewalRefused);
    assert!(outer.check().unwrap_err().is_lock_lost());
}

/// A lock taken by someone else after the deletion: still `RenewalRefused`
/// (the key exists, with another holder).
#[test]
fn a_lock_taken_over_is_reported_as_refused() {
    let (ctx, losses, client) = recorded(None);
    let name = unique_name("lost-taken");
    let guard = client.read_write_lock(&name).write().lock().unwrap();
    let other = ctx.other_client();
    assert!(other.read_write_lock(&name).write().force_unlock().unwrap());
    let _theirs = other.read_write_lock(&name).write().lock().unwrap();
    let lost = losses.exactly(&name, 1, ms(600)).remove(0);
    assert_eq!(lost.reason, LossReason::RenewalRefused);
    assert_eq!(lost.kind, HoldKind::Write);
    assert!(lost.holder.as_str().ends_with(":write"), "{}", lost.holder);
    drop(guard);
}

/// A fixed lease that runs out while its guard lives: `LeaseEnded`,
/// worded as a fixed lease's end (it was never to be renewed).
#[test]
fn a_fixed_lease_that_runs_out_is_reported_as_ended() {
    let (_server, losses, client) = recorded(None);
    let name = unique_name("lost-fixed");
    let guard = client.lock(&name).with_lease(ms(200)).lock().unwrap();
    let lost = losses.exactly(&name, 1, ms(300)).remove(0);
    assert_eq!(lost.reason, LossReason::LeaseEnded);
    assert_eq!(
        lost.reason.to_string(),
        "the fixed lease ran out at its end"
    );
    assert!(guard.is_lost());
}

/// Never for a normal release: 400 holds of every renewed kind (8 threads),
/// each released within 20 ms of its first renewal (a third of the 450 ms
/// lease), so that releases race renewals in flight; then a shutdown that
/// releases what is still held. Not one call.
#[test]
fn never_called_for_a_normal_release_or_a_shutdown() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let lease = ms(450);
    let client = losses
        .attach(test_builder(&ctx.server.url()))
        .watchdog_timeout(lease)
        .response_timeout(ms(150))
        .build()
        .unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                use rand::Rng;
                let mut rng = rand::rng();
                for i in 0..50 {
                    let name = unique_name(&format!("lost-normal-{t}-{}", i % 7));
                    let hold = lease / 3 + ms(rng.random_range(0..40)) - ms(20);
                    match i % 5 {
                        0 => {
                            let g = client.lock(&name).lock().unwrap();
                            crate::support::sleep(hold);
                            g.unlock().unwrap();
                        }
                        1 => {
                            let g = client.fair_lock(&name).lock().unwrap();
                            crate::support::sleep(hold);
                            drop(g);
                        }
                        2 => {
                            let g = client.read_write_lock(&name).read().lock().unwrap();
                            crate::support::sleep(hold);
                            g.unlock().unwrap();
                        }
                        3 => {
                            let g = client.fenced_lock(&name).lock().unwrap();
                            crate::support::sleep(hold);
                            g.unlock().unwrap();
                        }
                        _ => {
                            let sem = client.expiring_semaphore(&name);
                            sem.try_set_permits(1).unwrap();
                            let p = sem.acquire().unwrap();
                            crate::support::sleep(hold);
                            p.release().unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let kept: Vec<_> = (0..20)
        .map(|i| {
            client
                .lock(unique_name(&format!("lost-kept-{i}")))
                .lock()
                .unwrap()
        })
        .collect();
    crate::support::sleep(ms(100));
    client.shutdown();
    drop(kept);
    crate::support::sleep(ms(200));
    let renewals = client.stats().renewals;
    eprintln!(
        "400 holds released around their first renewal ({renewals} renewals), 20 released by \
         shutdown: {} calls",
        losses.seen().len()
    );
    assert!(renewals > 50, "too few renewals to race: {renewals}");
    assert_eq!(losses.seen(), Vec::new());
}

/// A callback that panics does not stop the watchdog: the next loss is
/// reported too, and other leases keep being renewed.
#[test]
fn a_panicking_callback_stops_nothing() {
    let ctx = TestContext::new();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let client = test_builder(&ctx.server.url())
        .on_lease_lost(move |_| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            panic!("a callback bug");
        })
        .build()
        .unwrap();
    let kept = client.lock(unique_name("lost-panic-kept")).lock().unwrap();
    for round in 1..=2 {
        let name = unique_name("lost-panic");
        let guard = client.lock(&name).lock().unwrap();
        ctx.client.lock(&name).force_unlock().unwrap();
        assert!(
            wait_until(Duration::from_secs(3), || calls
                .load(std::sync::atomic::Ordering::SeqCst)
                == round),
            "round {round}"
        );
        drop(guard);
    }
    crate::support::sleep(crate::support::TEST_WATCHDOG * 2);
    kept.check().unwrap();
}

/// A fixed lease moved by `extend` is kept to its new end. The watchdog,
/// which looks at a fixed lease at its end, finds the end moved and looks
/// again then: no loss reported 1 s past the first end (500 ms), while
/// its other work goes on (a renewed lock of the same client, lease
/// 900 ms, keeps its lease); at the new end (2.5 s) it reports the loss,
/// once, as `LeaseEnded`.
#[test]
fn a_fixed_lease_extended_is_reported_lost_at_its_new_end_only() {
    let (ctx, losses, client) = recorded(None);
    let renewed = client
        .lock(unique_name("lost-extended-neighbour"))
        .lock()
        .unwrap();
    let name = unique_name("lost-extended");
    let start = std::time::Instant::now();
    let guard = client.lock(&name).with_lease(ms(500)).lock().unwrap();
    guard.extend(ms(2500)).unwrap();
    crate::support::sleep((start + ms(1500)).saturating_duration_since(std::time::Instant::now()));
    assert_eq!(losses.of(&name), Vec::new(), "reported before its new end");
    guard.check().unwrap();
    renewed.check().unwrap();
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    assert!(pttl > 500, "the key's lease: {pttl} ms");
    let calls = losses.exactly(&name, 1, ms(300));
    assert_eq!(calls[0].reason, LossReason::LeaseEnded);
    assert!(
        start.elapsed() >= ms(2400),
        "reported {:?} after the start",
        start.elapsed()
    );
    renewed.unlock().unwrap();
}

/// A fixed read hold, which the watchdog also looks up every third of the
/// watchdog timeout before its end (a Redisson read-lock watchdog may cut
/// it), is reported lost at its end (300 ms), not at the look-up after it
/// (the watchdog timeout is 6 s here: a look-up every 2 s). `LeaseEnded`.
#[test]
fn a_fixed_read_hold_that_runs_out_is_reported_at_its_end() {
    let (_server, losses, client) = recorded(Some(Duration::from_secs(6)));
    let name = unique_name("lost-fixed-read");
    let start = std::time::Instant::now();
    let guard = client
        .read_write_lock(&name)
        .read()
        .with_lease(ms(300))
        .lock()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !losses.of(&name).is_empty()),
        "no loss reported"
    );
    let reported = start.elapsed();
    assert!(reported < ms(1300), "reported {reported:?} after the start");
    let lost = losses.exactly(&name, 1, ms(300)).remove(0);
    assert_eq!(lost.reason, LossReason::LeaseEnded);
    assert_eq!(lost.kind, HoldKind::Read);
    assert!(guard.is_lost());
}

/// A fixed read hold is looked up every third of the watchdog timeout
/// (here 500 ms), not back to back: over 1.6 s of a 2 s hold the server
/// sees about 20 commands (the look-ups and the holder record's), where a
/// next look-up set in the past (`now - every`) would send one per round
/// trip, thousands. The worker's looks at its watch connection (an
/// `UNSUBSCRIBE` and a `PUNSUBSCRIBE` every 100 ms) and this count's own
/// `INFO`s are left out. The hold is not reported lost meanwhile.
#[test]
fn a_fixed_read_hold_is_looked_up_at_its_pace() {
    let (ctx, losses, client) = recorded(Some(ms(1_500)));
    let name = unique_name("fixed-read-pace");
    let guard = client
        .read_write_lock(&name)
        .read()
        .with_lease(Duration::from_secs(2))
        .lock()
        .unwrap();
    let before = ctx.server.commandstats();
    crate::support::sleep(ms(1_600));
    let after = ctx.server.commandstats();
    let sent: Vec<(String, u64)> = after
        .iter()
        .filter(|(c, _)| !["info", "unsubscribe", "punsubscribe"].contains(&c.as_str()))
        .map(|(c, s)| (c.clone(), s.calls - before.get(c).map_or(0, |b| b.calls)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let commands: u64 = sent.iter().map(|(_, n)| n).sum();
    eprintln!("a fixed read hold held 1.6 s: {commands} commands: {sent:?}");
    assert!(commands <= 40, "{commands} commands in 1.6 s: {sent:?}");
    guard.check().unwrap();
    assert_eq!(losses.of(&name), Vec::new());
    guard.unlock().unwrap();
}

/// A lock whose deadline comes before the watchdog thread's next wake-up
/// wakes the thread when it is handed over: with a 30 s watchdog timeout
/// the thread sleeps 10 s after a renewed lock is taken, and each of three
/// fixed 300 ms leases taken next by the same client, one after the other,
/// is reported lost at its end (within 1 s), not at that wake-up. Three,
/// so that a wake-up is also needed after the thread took the last one
/// (which clears its "wake-up sent" flag). Without holder records, whose
/// writes would wake the thread too.
#[test]
fn a_lease_due_before_the_next_wake_up_wakes_the_watchdog() {
    let ctx = TestContext::new();
    let losses = Losses::default();
    let client = losses
        .attach(test_builder(&ctx.server.url()))
        .watchdog_timeout(Duration::from_secs(30))
        .holder_record(false)
        .build()
        .unwrap();
    let renewed = client.lock(unique_name("wake-renewed")).lock().unwrap();
    // The thread takes the first lock in, then goes to sleep until its
    // renewal (a moment after: the window below).
    assert!(wait_until(Duration::from_secs(5), || client
        .stats()
        .watchdog_entries
        == 1));
    for round in 0..3 {
        crate::support::sleep(ms(100));
        let name = unique_name("wake-fixed");
        let start = std::time::Instant::now();
        let fixed = client.lock(&name).with_lease(ms(300)).lock().unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || !losses.of(&name).is_empty()),
            "round {round}: no loss reported within 5 s"
        );
        let reported = start.elapsed();
        eprintln!(
            "round {round}: a 300 ms lease taken while the watchdog slept: lost reported after {reported:?}"
        );
        assert!(
            reported < ms(1_000),
            "round {round}: reported {reported:?} after the start"
        );
        assert_eq!(
            losses.exactly(&name, 1, ms(100))[0].reason,
            LossReason::LeaseEnded
        );
        assert!(fixed.is_lost());
    }
    renewed.check().unwrap();
    renewed.unlock().unwrap();
}
