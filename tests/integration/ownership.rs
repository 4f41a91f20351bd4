//! Ownership and leases: a guard whose lease is gone never touches the next
//! holder's lock; fixed leases expire; `extend` is owner-checked.

use std::time::{Duration, Instant};

use crate::support::{TestContext, ms, unique_name, wait_until};

#[test]
fn fixed_lease_expires_and_check_reports_lock_lost() {
    let ctx = TestContext::new();
    let name = unique_name("fixed");
    let lock = ctx.client.lock(&name).with_lease(ms(300));
    let guard = lock.lock().unwrap();
    assert!(!guard.is_renewed());
    guard.check().unwrap();
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    assert!(pttl > 0 && pttl <= 300, "pttl {pttl}");
    // Nobody renews it: the key goes, and the guard knows without asking.
    assert!(wait_until(Duration::from_secs(3), || !lock
        .is_locked()
        .unwrap()));
    assert!(guard.check().unwrap_err().is_lock_lost());
    assert!(guard.is_lost());
    assert_eq!(guard.valid_for(), Duration::ZERO);
}

/// A5, 1,000 trials (20 locks at once, 50 trials each): A holds with a
/// 30 ms lease and no watchdog; B takes the lock once A's lease has run
/// out; then A's late `extend` and `unlock` fail and leave B's hash and
/// PTTL as they were.
#[test]
fn a5_late_unlock_and_extend_do_not_touch_the_new_holders_lock() {
    const LANES: usize = 20;
    const PER_LANE: usize = 50;
    let ctx = TestContext::new();
    let b_client = ctx.other_client();
    let prefix = unique_name("a5");
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let name = format!("{prefix}:{lane}");
            let a = ctx.client.lock(&name).with_lease(ms(30));
            let b = b_client.lock(&name);
            let mut conn = ctx.server.conn();
            std::thread::spawn(move || {
                let mut survived = 0;
                for _ in 0..PER_LANE {
                    let ga = a.lock().unwrap();
                    // B takes the lock as soon as A's lease runs out.
                    let gb = b
                        .try_lock_for(Duration::from_secs(3))
                        .unwrap()
                        .expect("B acquires");
                    let read = |conn: &mut redis::Connection| {
                        redis::pipe()
                            .cmd("HGETALL")
                            .arg(&name)
                            .cmd("PTTL")
                            .arg(&name)
                            .query::<(Vec<(String, String)>, i64)>(conn)
                            .unwrap()
                    };
                    let t = Instant::now();
                    let (before, pttl_before) = read(&mut conn);
                    let extend = ga.extend(Duration::from_secs(60)).unwrap_err();
                    assert!(extend.is_not_held() || extend.is_lock_lost(), "{extend:?}");
                    let unlock = ga.unlock().unwrap_err();
                    assert!(unlock.is_not_held() || unlock.is_lock_lost(), "{unlock:?}");
                    let (after, pttl_after) = read(&mut conn);
                    // The PTTL only ran down, by no more than the time
                    // between the two reads (a loaded machine may take
                    // more than 50 ms for them).
                    let between = t.elapsed().as_millis() as i64 + 2;
                    if before == after
                        && pttl_after <= pttl_before
                        && pttl_before - pttl_after <= between
                    {
                        survived += 1;
                    }
                    gb.unlock().unwrap();
                }
                survived
            })
        })
        .collect();
    let survived: usize = lanes.into_iter().map(|l| l.join().unwrap()).sum();
    eprintln!(
        "A5: B's lock intact after A's late extend and unlock in {survived} of {} trials",
        LANES * PER_LANE
    );
    assert_eq!(survived, LANES * PER_LANE);
}

#[test]
fn a4_non_holders_are_refused_and_change_nothing() {
    let ctx = TestContext::new();
    let name = unique_name("a4");
    let holder = ctx.client.lock(&name);
    let g = holder.lock().unwrap();
    let before: Vec<(String, String)> = ctx.server.cmd("HGETALL", &[name.as_bytes()]);
    // Other clients (other client ids) and other threads cannot take or
    // release it: a non-holder has no guard, and a try gets nothing.
    let other = ctx.other_client().lock(&name);
    for _ in 0..200 {
        assert!(other.try_lock().unwrap().is_none());
    }
    let t = {
        let lock = holder;
        std::thread::spawn(move || {
            (0..200).all(|_| lock.try_lock().unwrap().is_none()) && lock.hold_count().unwrap() == 0
        })
    };
    assert!(t.join().unwrap());
    let after: Vec<(String, String)> = ctx.server.cmd("HGETALL", &[name.as_bytes()]);
    assert_eq!(before, after);
    // A guard whose hold was deleted by someone else gets NotHeld on unlock.
    other.force_unlock().unwrap();
    let third = ctx.other_client().lock(&name);
    let g3 = third.lock().unwrap();
    let err = g.unlock().unwrap_err();
    assert!(err.is_not_held() || err.is_lock_lost(), "{err:?}");
    assert!(third.is_locked().unwrap());
    g3.unlock().unwrap();
}

#[test]
fn extend_moves_a_fixed_lease() {
    let ctx = TestContext::new();
    let name = unique_name("extend");
    let lock = ctx.client.lock(&name).with_lease(ms(300));
    let g = lock.lock().unwrap();
    g.extend(Duration::from_secs(5)).unwrap();
    let pttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    assert!(pttl > 4_000, "pttl {pttl}");
    crate::support::sleep(ms(400));
    g.check().unwrap();
    assert!(g.valid_for() > Duration::from_secs(4));
    assert!(
        g.extend(Duration::ZERO)
            .unwrap_err()
            .to_string()
            .contains("lease")
    );
    g.unlock().unwrap();
}

#[test]
fn b7_a_grant_slower_than_its_lease_is_given_back() {
    // The proxy delays every reply by more than the lease: the acquire
    // "succeeds" on the server, but too late to be of use.
    let server = crate::support::RedisServer::start();
    let proxy = crate::support::FaultProxy::start(server.port());
    let client = crate::support::test_builder(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .unwrap();
    let name = unique_name("b7");
    let lock = client.lock(&name).with_lease(ms(150));
    // Warm the connection and script cache before the delay.
    lock.lock().unwrap().unlock().unwrap();
    proxy.set_mode(crate::support::Mode::Delay(ms(100)));
    let t0 = Instant::now();
    let got = lock.try_lock_for(ms(600)).unwrap();
    assert!(got.is_none(), "no guard with less than its validity left");
    assert!(t0.elapsed() < Duration::from_secs(3));
    proxy.set_mode(crate::support::Mode::Pass);
    // Nothing of ours stays behind once the lease has passed.
    assert!(wait_until(Duration::from_secs(2), || {
        server.cmd::<i64>("EXISTS", &[name.as_bytes()]) == 0
    }));
}

/// A handle's own `min_replica_acks` and `replica_ack_timeout` are the ones
/// its grants wait for: one acknowledgement asked of a server without
/// replicas, within 50 ms (the client asks for none, within 1 s). The
/// grant is given back and reported as `NotReplicated` within a fraction
/// of the client's timeout.
#[test]
fn a_handles_replica_acks_are_its_own() {
    let ctx = TestContext::new();
    let name = unique_name("acks-handle");
    let lock = ctx
        .client
        .lock(&name)
        .min_replica_acks(1)
        .replica_ack_timeout(ms(50));
    let started = Instant::now();
    let err = lock.try_lock().unwrap_err();
    let took = started.elapsed();
    assert!(err.is_not_replicated(), "{err:?}");
    assert!(took < ms(600), "refused after {took:?}");
    assert!(!ctx.server.exists(&name), "the grant was given back");
}

/// A waiter's grant is acknowledged like any other: the record entry of
/// the wait rides ahead of the acquire on the same connection, and the
/// `WAIT` still follows the script. One replica, one acknowledgement asked
/// for. The record lives 3 s (the watchdog timeout, long enough that a
/// grant slowed by a loaded machine is not given back as too late), so
/// its entry is armed again every second: every attempt after a 1.2 s
/// poll carries it, the granting one included (the holder lets go once
/// the entry rode on two attempts after the first). (Were the `WAIT` left out when an entry
/// rides, the grant would count no acknowledgement and be given back as
/// `NotReplicated`.)
#[test]
fn a_grant_after_a_recorded_wait_is_acknowledged_too() {
    let (master, _replica) = crate::support::RedisServer::start_master_and_replica();
    let client = || {
        crate::support::test_builder(&master.url())
            .watchdog_timeout(Duration::from_secs(3))
            .poll_interval(Duration::from_millis(1200))
            .min_replica_acks(1)
            .holder_record(true)
            .build()
            .unwrap()
    };
    let (first, second) = (client(), client());
    let name = unique_name("acks-after-wait");
    let held = first
        .lock(&name)
        .try_lock()
        .unwrap()
        .expect("free at first");
    let waiter = {
        let lock = second.lock(&name);
        std::thread::spawn(move || match lock.try_lock_for(Duration::from_secs(20)) {
            // The guard stays on its thread; its release goes with it.
            Ok(Some(guard)) => guard.unlock().map(|()| true),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        })
    };
    // The waiter's entry is in its client's record once an attempt found
    // the lock busy.
    let mut record = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let keys: Vec<Vec<u8>> = master.cmd("KEYS", &[b"redguard:client:*"]);
            record = keys.into_iter().find(|key| {
                let fields: Vec<Vec<u8>> = master.cmd("HKEYS", &[key]);
                fields.iter().any(|f| f.starts_with(b"wait:"))
            });
            record.is_some()
        }),
        "the wait was never recorded"
    );
    let record = record.unwrap();
    // Held until the entry rode on two more attempts (each ride sets the
    // record's lifetime again): the waiter's attempts now arm it each time.
    let mut last = master.pttl(&record);
    let mut rides = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let pttl = master.pttl(&record);
            if pttl > last {
                rides += 1;
            }
            last = pttl;
            rides >= 2
        }),
        "the entry did not ride again"
    );
    drop(held);
    match waiter.join().unwrap() {
        Ok(true) => {}
        other => panic!("the waiter's grant: {other:?}"),
    }
    assert!(!master.exists(&name), "released");
}

/// A grant that exactly as many replicas acknowledged as asked for is
/// kept: one replica, one acknowledgement asked for.
#[test]
fn a_grant_with_exactly_the_acknowledgements_asked_for_is_kept() {
    let (master, _replica) = crate::support::RedisServer::start_master_and_replica();
    // A lease well above the `WAIT` timeout (1 s): a slow acknowledgement
    // on a loaded machine must not make the grant come after its lease.
    let client = crate::support::test_builder(&master.url())
        .watchdog_timeout(Duration::from_secs(10))
        .min_replica_acks(1)
        .build()
        .unwrap();
    let name = unique_name("acks-exact");
    let guard = client.lock(&name).try_lock().unwrap();
    assert!(guard.is_some(), "one replica acknowledged the grant");
    assert!(master.exists(&name));
    drop(guard);
}
