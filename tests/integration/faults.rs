//! Connection faults: Redis down, refusing, blackholed, a reply cut off;
//! wrong credentials; secrets never printed (RELIABILITY B6, C1, C2, C3,
//! C6, J3, J7).

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::support::{
    FaultProxy, Mode, RedisServer, ReplyFault, TestContext, capture_logs, logged_lines, ms,
    test_builder, test_client, unique_name, wait_until,
};

/// B6 (since issue 32, section 4): with Redis down at acquire, `try_lock`
/// returns the connection error at once; `try_lock_for` keeps trying until
/// its deadline and returns a timeout naming the refusal; `lock()` keeps
/// trying until Redis is back, and then gets the lock.
#[test]
fn b6_redis_down_at_acquire_try_lock_fails_fast_and_waits_ride_it_out() {
    let mut server = RedisServer::start();
    let client = test_builder(&server.url()).build().unwrap();
    let lock = client.lock(unique_name("b6"));
    lock.lock().unwrap().unlock().unwrap();
    server.kill();
    let t0 = Instant::now();
    let err = lock.try_lock().map(|_| ()).unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    // Refused at once; bounded by the connect timeout (1 s here) at worst.
    assert!(t0.elapsed() < ms(1500), "{:?}", t0.elapsed());

    let t0 = Instant::now();
    let err = lock
        .try_lock_for(Duration::from_secs(1))
        .map(|_| ())
        .unwrap_err();
    let took = t0.elapsed();
    assert!(err.is_timeout() && err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(took >= ms(1000) && took < ms(2500), "{took:?}");

    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let got = lock.lock().map(|guard| guard.unlock());
        tx.send(()).unwrap();
        got
    });
    assert!(
        rx.recv_timeout(ms(1500)).is_err(),
        "lock() gave up while Redis was down"
    );
    server.start_again();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("lock() did not get the lock once Redis was back");
    waiter.join().unwrap().unwrap().unwrap();
}

#[test]
fn c6_connection_refused_is_reported_in_under_50ms() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url()).build().unwrap();
    let lock = client.lock(unique_name("c6"));
    proxy.set_mode(Mode::Refuse);
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let t0 = Instant::now();
        let err = lock.try_lock().map(|_| ()).unwrap_err();
        worst = worst.max(t0.elapsed());
        assert!(err.is_connection(), "{err:?}");
    }
    assert!(worst < ms(50), "slowest refusal {worst:?}");
    proxy.set_mode(Mode::Pass);
    assert!(
        lock.try_lock().unwrap().is_some(),
        "reconnects once the port answers"
    );
}

/// C2, 200 trials (4 rounds of 50 waiters at once): `try_lock_for(1 s)`
/// through a blackholed path returns `Ok(None)` or a timeout within the
/// wait + one command timeout (250 ms); after the partition heals, the
/// lock is acquired normally.
#[test]
fn c2_partitioned_waiters_return_by_their_deadline_and_recover() {
    const ROUNDS: usize = 4;
    const AT_ONCE: usize = 50;
    let response = ms(250);
    let wait = Duration::from_secs(1);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .response_timeout(response)
        .pool_size(64)
        .build()
        .unwrap();
    let name = unique_name("c2");
    let lock = client.lock(&name);
    lock.lock().unwrap().unlock().unwrap();
    // Someone else holds it, then our path goes dark.
    let holder_client = test_builder(&server.url()).build().unwrap();
    let hold = holder_client.lock(&name);
    let g = hold.lock().unwrap();
    proxy.set_mode(Mode::Blackhole);
    let mut took = Vec::new();
    for _ in 0..ROUNDS {
        let start = Arc::new(Barrier::new(AT_ONCE));
        let trials: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                let (lock, start) = (lock.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    let result = lock.try_lock_for(wait);
                    let took = t0.elapsed();
                    match result {
                        Ok(None) => {}
                        Err(e) => assert!(e.is_timeout() || e.is_connection(), "{e:?}"),
                        Ok(Some(_)) => panic!("acquired a lock held by someone else"),
                    }
                    took
                })
            })
            .collect();
        took.extend(trials.into_iter().map(|t| t.join().unwrap()));
    }
    took.sort();
    let worst = *took.last().unwrap();
    eprintln!(
        "C2: {} partitioned waits of {wait:?}: p50 {:?}, p100 {worst:?}",
        took.len(),
        took[took.len() / 2]
    );
    assert!(worst <= wait + response, "{worst:?}");
    proxy.set_mode(Mode::Pass);
    drop(g);
    assert!(lock.try_lock_for(Duration::from_secs(3)).unwrap().is_some());
}

/// C1, 50 of 50 runs (10 partitioned holders at once, 5 runs each, lease
/// L = 600 ms): a holder whose path is blackholed reports the loss at its
/// local deadline, and at that instant the key still lives on the server
/// for at least the drift allowance 0.01 × L + 2 ms.
///
/// The key's expiry is read over a direct connection as an absolute time:
/// the server's `TIME` and the key's `PTTL` in one `MULTI` (every server
/// runs them back to back, microseconds apart; `PEXPIRETIME` would say it
/// in one call but Redis 6.2 lacks it), and the holder's deadline (an
/// `Instant`) is mapped to the same wall clock, so a slow reading on a
/// loaded machine cannot blur the margin. Redis stamps the start of a
/// lease in whole milliseconds, which can put it up to 1 ms before the
/// request was sent: 1 ms is allowed for that. `PTTL` counts whole
/// milliseconds from the server's clock, and `TIME` truncated to the
/// millisecond may lie up to 1 ms before that reading: the expiry read so
/// is up to 1 ms early, never late, and 1 ms more is allowed for that.
#[test]
fn c1_partitioned_holder_reports_the_loss_while_the_key_still_lives() {
    const LANES: usize = 10;
    const RUNS: usize = 5;
    let lease = ms(600);
    let drift = lease / 100 + ms(2);
    let server = RedisServer::start();
    let lanes: Vec<_> = (0..LANES)
        .map(|_| {
            let proxy = FaultProxy::start(server.port());
            let url = proxy.url();
            let mut direct = server.conn();
            std::thread::spawn(move || {
                let losses = crate::lost_lease::Losses::default();
                let client = losses
                    .attach(test_builder(&url))
                    .watchdog_timeout(lease)
                    .response_timeout(lease / 3)
                    .build()
                    .unwrap();
                let mut rng = rand::rng();
                let mut margins = Vec::new();
                let mut late = Vec::new();
                let mut again: Vec<String> = Vec::new();
                while margins.len() < RUNS {
                    proxy.set_mode(Mode::Pass);
                    let name = unique_name("c1");
                    let guard = client.lock(&name).lock().unwrap();
                    // Cut at a random point of the renewal period.
                    crate::support::sleep(ms(rng.random_range(0..200)));
                    proxy.set_mode(Mode::Blackhole);
                    // A renewal in flight is settled within one response
                    // timeout; from then on the deadline cannot move.
                    crate::support::sleep(lease / 3 + ms(20));
                    assert!(!guard.is_lost(), "lost before its deadline");
                    let (now, wall) = (Instant::now(), SystemTime::now());
                    let deadline = now + guard.valid_for();
                    let deadline_wall = wall + (deadline - now);
                    let (time, pttl): ((u64, u64), i64) = redis::pipe()
                        .atomic()
                        .cmd("TIME")
                        .cmd("PTTL")
                        .arg(&name)
                        .query(&mut direct)
                        .unwrap();
                    assert!(pttl >= 0, "PTTL {pttl}: the key is gone before the loss");
                    let expiry_ms = (time.0 * 1000 + time.1 / 1000) as i64 + pttl;
                    crate::support::sleep(deadline.saturating_duration_since(Instant::now()));
                    if !guard.is_lost() && guard.valid_for() > Duration::ZERO && again.len() < 3 {
                        // The deadline moved: a renewal sent before the cut
                        // whose reply a loaded machine read only after the
                        // wait above (past its response timeout) counts
                        // from its send, rightly. Not what this run is
                        // about: it goes again.
                        proxy.set_mode(Mode::Pass);
                        drop(guard);
                        again.push(name);
                        continue;
                    }
                    assert!(guard.is_lost(), "not lost at its deadline");
                    let deadline_ms = deadline_wall
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_secs_f64()
                        * 1000.0;
                    margins.push(expiry_ms as f64 - deadline_ms);
                    // Told once, as a deadline passed unrenewed.
                    let lost = losses.exactly(&name, 1, ms(50)).remove(0);
                    assert_eq!(lost.reason, redguard::LossReason::DeadlinePassed);
                    // Told at the deadline, not when the renewal worker,
                    // held up by the blackholed server, gets round to it.
                    late.push(
                        lost.noticed_at
                            .duration_since(deadline_wall)
                            .unwrap_or_default(),
                    );
                    proxy.set_mode(Mode::Pass);
                    drop(guard);
                    losses.exactly(&name, 1, ms(0));
                }
                let counted: Vec<_> = losses
                    .seen()
                    .into_iter()
                    .filter(|l| !again.iter().any(|n| &l.name[..] == n.as_bytes()))
                    .collect();
                assert_eq!(counted.len(), RUNS, "{counted:?}");
                if !again.is_empty() {
                    eprintln!("C1: run again after a late renewal reply: {again:?}");
                }
                (margins, late)
            })
        })
        .collect();
    let (mut margins, mut late): (Vec<f64>, Vec<Duration>) = (Vec::new(), Vec::new());
    for lane in lanes {
        let (m, l) = lane.join().unwrap();
        margins.extend(m);
        late.extend(l);
    }
    margins.sort_by(f64::total_cmp);
    late.sort();
    let need = drift.as_secs_f64() * 1000.0 - 2.0;
    let short = margins.iter().filter(|m| **m < need).count();
    eprintln!(
        "C1: {} runs: the key outlived the reported loss by {:.1} ms at least, {:.1} ms median \
         (drift allowance {drift:?}); {short} runs under {need:.1} ms; the loss told {:?} \
         after the deadline at worst ({:?} median)",
        margins.len(),
        margins[0],
        margins[margins.len() / 2],
        late[late.len() - 1],
        late[late.len() / 2],
    );
    assert_eq!(margins.len(), LANES * RUNS);
    assert_eq!(short, 0, "margins {margins:?}");
    // The renewal worker of a blackholed server spends a response timeout
    // (L/3) on each round trip and more on reconnecting: a loss reported
    // only once it hands its leases back comes L/3 to seconds late.
    assert!(
        late[late.len() - 1] < lease / 3,
        "losses told late: {late:?}"
    );
}

/// C1 with one holder alone on its watchdog thread (records off): nothing
/// else wakes the thread while the renewal worker is held up by the
/// blackholed server, so only the thread's own wake-up for the deadline of
/// a lease at the worker tells the loss in time: within 20 ms of the local
/// deadline at the median of 5 runs, 150 ms at worst (a thread that does
/// not wake for it tells the loss 30-230 ms late, the first time when the
/// worker hands the lease back).
#[test]
fn c1_a_lone_partitioned_holder_is_told_at_its_deadline() {
    const RUNS: usize = 5;
    let lease = ms(600);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let losses = crate::lost_lease::Losses::default();
    let client = losses
        .attach(test_builder(&proxy.url()))
        .watchdog_timeout(lease)
        .response_timeout(lease / 3)
        .holder_record(false)
        .build()
        .unwrap();
    let mut late = Vec::new();
    for run in 0..RUNS {
        proxy.set_mode(Mode::Pass);
        let name = unique_name("c1-lone");
        let guard = client.lock(&name).lock().unwrap();
        crate::support::sleep(ms(40 * run as u64));
        proxy.set_mode(Mode::Blackhole);
        crate::support::sleep(lease / 3 + ms(20));
        let deadline = SystemTime::now() + guard.valid_for();
        let lost = losses.exactly(&name, 1, ms(0)).remove(0);
        assert_eq!(lost.reason, redguard::LossReason::DeadlinePassed);
        late.push(lost.noticed_at.duration_since(deadline).unwrap_or_default());
        proxy.set_mode(Mode::Pass);
        drop(guard);
    }
    eprintln!("C1 (one holder): the loss told {late:?} after the deadline");
    late.sort();
    assert!(
        late[RUNS / 2] < ms(20) && late[RUNS - 1] < ms(150),
        "losses told late: {late:?}"
    );
}

/// A shutdown releases the client's locks (`release_on_shutdown`, the
/// default), a fair lock with nobody queued among them: the keys are gone
/// once it returns, and nothing is logged: neither the watchdog's warning
/// for a hand-over of the releases to its worker that failed, nor the
/// worker's for a release that failed (a fair lock's release with an empty
/// queue must not try to wake a head that is not there).
#[test]
fn shutdown_releases_the_locks_without_a_warning() {
    capture_logs();
    let server = RedisServer::start();
    let client = test_builder(&server.url()).build().unwrap();
    let names: Vec<String> = (0..4).map(|_| unique_name("shutdown-released")).collect();
    let mut guards: Vec<_> = names[..3]
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    guards.push(client.fair_lock(&names[3]).lock().unwrap());
    let warnings = [
        "cannot release a departed client's locks",
        "at client shutdown",
    ];
    let warned = || {
        logged_lines()
            .iter()
            .filter(|l| warnings.iter().any(|w| l.contains(w)))
            .count()
    };
    let before = warned();
    client.shutdown();
    assert!(
        names.iter().all(|n| !server.exists(n)),
        "a lock outlived the shutdown"
    );
    assert_eq!(warned(), before, "a warning for releases that went out");
    drop(guards);
}

/// `release_on_shutdown(false)`: a shutdown leaves the client's locks to
/// their lease. The keys are still there, with their holder, once the
/// shutdown returns, and are no longer renewed: gone within the lease.
#[test]
fn shutdown_without_release_leaves_the_locks_to_their_lease() {
    let lease = ms(900);
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(lease)
        .release_on_shutdown(false)
        .build()
        .unwrap();
    let names: Vec<String> = (0..3).map(|_| unique_name("shutdown-kept")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    client.shutdown();
    // The shutdown waits for its releases, if any: none may have gone.
    assert!(
        names.iter().all(|n| server.exists(n)),
        "a lock was released at shutdown"
    );
    for guard in &guards {
        assert!(guard.check().unwrap_err().is_lock_lost());
    }
    assert!(
        wait_until(lease + ms(500), || names.iter().all(|n| !server.exists(n))),
        "a key outlived its lease: still renewed after the shutdown"
    );
    drop(guards);
}

/// C3: 1,000 acquires whose request reaches Redis and whose reply is cut
/// off (the proxy shuts the connection instead of forwarding it). The
/// outcome is unknown to the client; it must neither leak nor share the
/// lock: a granted call's lock is nobody else's, and once the lease
/// (1.5 s) has passed after the last trial no key is left: no grant is
/// kept alive (renewed) without a guard. How many keys were still there
/// 1 s after the last trial (the undo of lost grants at work) is reported.
#[test]
fn c3_a_reply_lost_to_a_reset_leaves_no_orphan_and_no_double_owner() {
    const CUTS: usize = 1_000;
    let lease = Duration::from_millis(1500);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .watchdog_timeout(lease)
        .build()
        .unwrap();
    let other = test_builder(&server.url())
        .watchdog_timeout(lease)
        .build()
        .unwrap();
    let prefix = unique_name("c3");
    // Warm: the script cache and a connection.
    client.lock(&prefix).lock().unwrap().unlock().unwrap();
    let t0 = Instant::now();
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut double = 0;
    let mut trials = 0;
    // A trial whose request never left (a connect that timed out on a
    // loaded machine) cuts nothing: go on until 1,000 replies were cut.
    while proxy.reply_faults_done() < CUTS && trials < CUTS + CUTS / 10 {
        let name = format!("{prefix}:{trials}");
        trials += 1;
        proxy.fault_replies_to(name.as_bytes(), ReplyFault::Cut, 1);
        let lock = client.lock(&name);
        match lock.try_lock() {
            Ok(Some(g)) => {
                *outcomes.entry("granted").or_default() += 1;
                // Held by us: nobody else may have it.
                if other.lock(&name).try_lock().unwrap().is_some() {
                    double += 1;
                }
                g.unlock().unwrap();
            }
            Ok(None) => *outcomes.entry("busy").or_default() += 1,
            Err(e) => {
                assert!(e.is_connection() || e.is_timeout(), "{e:?}");
                *outcomes.entry("error").or_default() += 1;
            }
        }
    }
    let took = t0.elapsed();
    let last = Instant::now();
    let cuts = proxy.reply_faults_done();
    let keys = || -> Vec<String> { server.cmd("KEYS", &[format!("{prefix}:*").as_bytes()]) };
    crate::support::sleep(ms(1000));
    let after_1s = keys().len();
    crate::support::sleep((last + lease + ms(200)).saturating_duration_since(Instant::now()));
    let left = keys();
    eprintln!(
        "C3: {trials} acquires, {cuts} replies cut, in {took:?}: {outcomes:?}; {after_1s} keys \
         left 1 s after the last, {} after the lease; {double} double owners",
        left.len()
    );
    assert_eq!(cuts, CUTS, "the proxy did not cut {CUTS} replies");
    // A granted call's unlock leaves nothing, even when Redis counted the
    // grant twice (the script ran again after the cut); only a call that
    // ended in an error may leave a key until its lease runs out (its undo
    // is one round trip, which a loaded machine may time out).
    let errors = outcomes.get("error").copied().unwrap_or(0);
    assert!(
        after_1s <= errors,
        "{after_1s} keys left 1 s after the last trial, {errors} calls failed"
    );
    assert!(left.is_empty(), "orphan keys after the lease: {left:?}");
    assert_eq!(double, 0);
    // Every name is free for someone else now.
    for i in (0..trials).step_by(97) {
        let g = other.lock(format!("{prefix}:{i}")).try_lock().unwrap();
        assert!(g.is_some(), "{prefix}:{i} still taken");
    }
}

/// An ACL user with a password, while the `default` user stays open (no
/// password): a client that carried on after a failed AUTH would run its
/// commands as `default`, and they would succeed (RELIABILITY 4.1).
fn fail_open_server() -> RedisServer {
    let server = RedisServer::start();
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"rguser",
            b"on",
            b">right-pw",
            b"~*",
            b"&*",
            b"+@all",
        ],
    );
    server
}

/// J3 in the fail-open setup: a wrong password is `Err(Auth)` for every
/// call, and not one command other than `AUTH`/`HELLO` reaches the server
/// from that client (`INFO commandstats`: calls, rejected and failed
/// calls), though the `default` user would have let it through.
#[test]
fn j3_wrong_password_fails_closed_and_sends_nothing_after_the_failed_auth() {
    let server = fail_open_server();
    let url = |pw: &str| format!("redis://rguser:{pw}@127.0.0.1:{}/", server.port());
    let wrong = test_builder(&url("wrong-pw")).build().unwrap();
    let name = unique_name("j3");
    let reached = |server: &RedisServer| -> BTreeMap<String, u64> {
        server
            .commandstats()
            .into_iter()
            .filter(|(cmd, _)| !matches!(cmd.as_str(), "info" | "auth" | "hello"))
            .map(|(cmd, stat)| (cmd, stat.reached()))
            .collect()
    };
    let before = reached(&server);
    let lock = wrong.lock(&name);
    let errors = [
        lock.try_lock().map(|_| ()).unwrap_err(),
        lock.try_lock_for(ms(300)).map(|_| ()).unwrap_err(),
        lock.is_locked().map(|_| ()).unwrap_err(),
        lock.force_unlock().map(|_| ()).unwrap_err(),
        wrong.fair_lock(&name).try_lock().map(|_| ()).unwrap_err(),
    ];
    for err in &errors {
        assert!(matches!(err, redguard::Error::Auth(_)), "{err:?}");
        assert!(!err.to_string().contains("wrong-pw"));
    }
    let after = reached(&server);
    let auth = server
        .commandstats()
        .get("auth")
        .copied()
        .unwrap_or_default();
    eprintln!(
        "J3: AUTH reached the server {} times ({} failed); other commands before {before:?}, after {after:?}",
        auth.reached(),
        auth.failed
    );
    assert!(auth.reached() > 0, "the client never tried to authenticate");
    assert_eq!(
        before, after,
        "a command reached the server after a failed AUTH"
    );
    assert!(!server.exists(&name));
    // The right password works, on the same server.
    let right = test_builder(&url("right-pw")).build().unwrap();
    assert!(right.lock(&name).try_lock().unwrap().is_some());
}

#[test]
fn j7_passwords_never_appear_in_debug_errors_or_logs() {
    capture_logs();
    let server = RedisServer::start_with(&["--requirepass", "p@ss-J7-secret"]);
    let url = format!(
        "redis://default:p%40ss-J7-secret@127.0.0.1:{}/",
        server.port()
    );
    let builder = test_builder(&url);
    let client = builder.clone().build().unwrap();
    let lock = client.lock(unique_name("j7"));
    let g = lock.lock().unwrap();
    let mut texts = vec![
        format!("{builder:?}"),
        format!("{client:?}"),
        format!("{lock:?}"),
        format!("{g:?}"),
    ];
    drop(g);
    // Errors: wrong password, and the server gone.
    let bad = test_builder(&format!(
        "redis://default:J7-wrong-secret@127.0.0.1:{}/",
        server.port()
    ))
    .build()
    .unwrap();
    let e = bad.lock("x").try_lock().map(|_| ()).unwrap_err();
    texts.push(format!("{e} {e:?}"));
    drop(server);
    let e = lock.try_lock().map(|_| ()).unwrap_err();
    texts.push(format!("{e} {e:?}"));
    texts.extend(logged_lines());
    for text in &texts {
        for secret in ["p@ss-J7-secret", "p%40ss-J7-secret", "J7-wrong-secret"] {
            assert!(!text.contains(secret), "secret leaked in: {text}");
        }
    }
}

#[test]
fn shutdown_wakes_waiters_with_an_error_and_releases_held_locks() {
    let ctx = TestContext::new();
    let name = unique_name("shutdown");
    let holder = ctx.other_client();
    let hold = holder.lock(&name);
    let g = hold.lock().unwrap();
    let mine = ctx.client.lock(unique_name("mine"));
    let my_guard = mine.lock().unwrap();
    let waiter = {
        let lock = ctx.client.lock(&name);
        std::thread::spawn(move || lock.lock().map(|_| ()).unwrap_err())
    };
    assert!(wait_until(Duration::from_secs(3), || ctx
        .client
        .stats()
        .waiters
        == 1));
    let t0 = Instant::now();
    ctx.client.shutdown();
    let err = waiter.join().unwrap();
    assert!(err.is_shutdown(), "{err:?}");
    assert!(t0.elapsed() < ms(500));
    assert!(my_guard.check().unwrap_err().is_lock_lost());
    assert!(
        !holder.lock(mine.name()).is_locked().unwrap(),
        "released at shutdown"
    );
    assert!(
        ctx.client
            .lock("after")
            .try_lock()
            .unwrap_err()
            .is_shutdown()
    );
    drop(my_guard);
    drop(g);
}

#[test]
fn a_leaked_guard_keeps_its_client_until_shutdown_releases_it() {
    let ctx = TestContext::new();
    let name = unique_name("drop-client");
    let client = ctx.other_client();
    let guard = client.lock(&name).lock().unwrap();
    // A leaked guard owns a handle on its client: the client lives on, and
    // the watchdog keeps renewing, like a leaked MutexGuard keeps its mutex.
    std::mem::forget(guard);
    let check = ctx.client.lock(&name);
    assert!(check.is_locked().unwrap());
    client.shutdown();
    drop(client);
    assert!(wait_until(Duration::from_secs(2), || !check
        .is_locked()
        .unwrap()));
}

/// I9/C3 regression: a grant whose reply was garbled is undone before the
/// error returns, never later. Were it undone in the background, the same
/// thread's next acquire (same holder id) could be deleted by the late undo
/// while its guard lives, and a rival would take the lock: two owners.
#[test]
fn i9_a_lost_grant_is_undone_before_the_next_acquire_of_the_same_thread() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    // No holder record: its writes name the lock too (a hold's field), and
    // one passing while the fault is armed would take it.
    let client = test_builder(&proxy.url())
        .holder_record(false)
        .build()
        .unwrap();
    let rival = test_builder(&server.url()).build().unwrap();
    let name = unique_name("undo-race");
    let lock = client.lock(&name);
    lock.lock().unwrap().unlock().unwrap();
    let mut doubles = 0;
    for _ in 0..50 {
        assert!(wait_until(Duration::from_secs(2), || !server.exists(&name)));
        proxy.fault_replies_to(name.as_bytes(), ReplyFault::Garbage, 1);
        assert!(lock.try_lock().is_err(), "the garbled grant is an error");
        let Some(guard) = lock.try_lock_for(Duration::from_secs(1)).unwrap() else {
            continue;
        };
        // Time for a background undo to land, were there one.
        crate::support::sleep(ms(30));
        if let Some(r) = rival.lock(&name).try_lock().unwrap() {
            doubles += 1;
            drop(r);
        }
        assert!(!guard.is_lost());
        guard.unlock().unwrap();
    }
    assert_eq!(doubles, 0, "a late undo deleted a live grant");
}

/// A client that shuts down releases its locks and wakes their waiters in
/// other clients at once: the waiter polls every 20 s and the lease is 30
/// s, so only the release's message lets it in within half a second.
#[test]
fn a_shutdown_release_wakes_the_waiters_of_other_clients() {
    let server = RedisServer::start();
    let holder = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let waiter = test_builder(&server.url())
        .poll_interval(Duration::from_secs(20))
        .build()
        .unwrap();
    let name = unique_name("shutdown-wake");
    let _held = holder.lock(&name).lock().unwrap();
    let lock = waiter.lock(&name);
    let waiting = std::thread::spawn(move || {
        let got = lock.try_lock_for(Duration::from_secs(10)).unwrap();
        (got.is_some(), Instant::now())
    });
    let channel = format!("redisson_lock__channel:{{{name}}}");
    assert!(wait_until(Duration::from_secs(5), || {
        let counts: Vec<(String, i64)> =
            server.cmd("PUBSUB", &[&b"NUMSUB"[..], channel.as_bytes()]);
        waiter.stats().waiters == 1 && counts.first().is_some_and(|(_, n)| *n == 1)
    }));
    let shut = Instant::now();
    holder.shutdown();
    let (got, at) = waiting.join().unwrap();
    assert!(got, "never acquired");
    let woken = at.saturating_duration_since(shut);
    assert!(woken < ms(500), "woken {woken:?} after the shutdown");
}

/// `shutdown` on a paused server (`SIGSTOP`) keeps its word: it returns
/// after about one response timeout (it waited two), and every guard
/// reports `LockLost` as soon as it returns (one did only about 2 s later,
/// when the release at the paused server gave up).
#[test]
fn shutdown_on_a_paused_server_takes_one_response_timeout_and_loses_the_guards() {
    let server = RedisServer::start();
    let response = Duration::from_secs(1);
    let client = test_builder(&server.url())
        .response_timeout(response)
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let guards: Vec<_> = (0..3)
        .map(|_| client.lock(unique_name("paused-shutdown")).lock().unwrap())
        .collect();
    server.sigstop();
    let started = Instant::now();
    client.shutdown();
    let took = started.elapsed();
    let checks: Vec<_> = guards.iter().map(redguard::LockGuard::check).collect();
    server.sigcont();
    eprintln!("shutdown on a paused server: {took:?}");
    assert!(
        took < response + ms(500),
        "shutdown took {took:?}, the response timeout is {response:?}"
    );
    for check in checks {
        assert!(
            matches!(check, Err(ref e) if e.is_lock_lost()),
            "a guard's check right after shutdown: {check:?}"
        );
    }
    drop(guards);
}

/// The last `Client` handle dropped (no `shutdown`; a guard holds a handle
/// too, so it goes first): its holder record is gone within a second.
#[test]
fn the_last_drop_removes_the_record_at_once() {
    let server = RedisServer::start();
    let client = test_client(&server.url());
    let name = unique_name("last-drop");
    let guard = client.lock(&name).lock().unwrap();
    let record = format!("redguard:client:{{{}}}", client.id());
    assert!(
        wait_until(Duration::from_secs(3), || server.exists(&record)),
        "no record to begin with"
    );
    drop(guard);
    assert!(!server.exists(&name), "the lock outlived its guard");
    let dropped = Instant::now();
    drop(client);
    assert!(
        wait_until(Duration::from_secs(1), || !server.exists(&record)),
        "the record outlived the last drop by a second"
    );
    eprintln!("record gone {:?} after the last drop", dropped.elapsed());
}
