//! Connection faults: Redis down, refusing, blackholed; wrong credentials;
//! secrets never printed (RELIABILITY B6, C2, C6, J3, J7).

use std::time::{Duration, Instant};

use crate::support::{
    FaultProxy, Mode, RedisServer, TEST_RESPONSE, TestContext, capture_logs, logged_lines, ms,
    test_builder, unique_name, wait_until,
};

#[test]
fn b6_redis_down_at_acquire_fails_fast_with_a_connection_error() {
    let mut server = RedisServer::start();
    let client = test_builder(&server.url()).build().unwrap();
    let lock = client.lock(unique_name("b6"));
    lock.lock().unwrap().unlock().unwrap();
    server.kill();
    for call in 0..3 {
        let t0 = Instant::now();
        let err = match call {
            0 => lock.lock().map(|_| ()).unwrap_err(),
            1 => lock.try_lock().map(|_| ()).unwrap_err(),
            _ => lock
                .try_lock_for(Duration::from_secs(1))
                .map(|_| ())
                .unwrap_err(),
        };
        assert!(err.is_connection() || err.is_timeout(), "{err:?}");
        assert!(err.is_transient());
        // Refused at once; bounded by the connect timeout (1 s here) at worst.
        assert!(t0.elapsed() < ms(1500), "{:?}", t0.elapsed());
    }
    server.start_again();
    assert!(lock.try_lock_for(Duration::from_secs(2)).unwrap().is_some());
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

#[test]
fn c2_partitioned_waiter_returns_by_its_deadline_and_recovers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url()).build().unwrap();
    let name = unique_name("c2");
    let lock = client.lock(&name);
    lock.lock().unwrap().unlock().unwrap();
    // Someone else holds it, then our path goes dark.
    let holder_client = test_builder(&server.url()).build().unwrap();
    let hold = holder_client.lock(&name);
    let g = hold.lock().unwrap();
    proxy.set_mode(Mode::Blackhole);
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t0 = Instant::now();
        let result = lock.try_lock_for(Duration::from_secs(1));
        worst = worst.max(t0.elapsed());
        match result {
            Ok(None) => {}
            Err(e) => assert!(e.is_timeout() || e.is_connection(), "{e:?}"),
            Ok(Some(_)) => panic!("acquired a lock held by someone else"),
        }
    }
    assert!(
        worst <= Duration::from_secs(1) + TEST_RESPONSE + ms(150),
        "{worst:?}"
    );
    proxy.set_mode(Mode::Pass);
    drop(g);
    assert!(lock.try_lock_for(Duration::from_secs(3)).unwrap().is_some());
}

#[test]
fn c1_partitioned_holder_learns_of_the_loss_before_anyone_else_can_acquire() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url()).build().unwrap();
    let name = unique_name("c1");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    let other_client = test_builder(&server.url()).build().unwrap();
    let other = other_client.lock(&name);
    proxy.set_mode(Mode::Blackhole);
    // The holder's local deadline fires before the key expires on the server.
    assert!(wait_until(Duration::from_secs(3), || guard.is_lost()));
    let lost_at = Instant::now();
    let g = other
        .try_lock_for(Duration::from_secs(3))
        .unwrap()
        .expect("other acquires");
    let acquired_at = Instant::now();
    assert!(
        acquired_at > lost_at,
        "loss known before the other acquired"
    );
    drop(g);
    proxy.set_mode(Mode::Pass);
}

#[test]
fn j3_wrong_password_is_an_auth_error_and_nothing_runs_unauthenticated() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let wrong = test_builder(&format!("redis://:wrong-pw@127.0.0.1:{}/", server.port()))
        .build()
        .unwrap();
    let name = unique_name("j3");
    let err = wrong.lock(&name).try_lock().map(|_| ()).unwrap_err();
    assert!(matches!(err, redguard::Error::Auth(_)), "{err:?}");
    assert!(!err.to_string().contains("wrong-pw"));
    let right = test_builder(&format!("redis://:s3cret-pw@127.0.0.1:{}/", server.port()))
        .build()
        .unwrap();
    let lock = right.lock(&name);
    assert!(
        !lock.is_locked().unwrap(),
        "the failed client wrote nothing"
    );
    assert!(lock.try_lock().unwrap().is_some());
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
