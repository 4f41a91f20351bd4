//! `redguard unlock --force` wakes whoever waits.
use super::*;

#[test]
fn unlock_force_on_a_fair_lock_wakes_the_queue_head() {
    let server = RedisServer::start();
    let name = unique_name("unlock-fair");
    let slow = || {
        crate::support::test_builder(&server.url())
            .watchdog_timeout(Duration::from_secs(30))
            .poll_interval(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let holder = slow();
    let held = holder.fair_lock(&name);
    let guard = held.lock().unwrap();
    let waiter_client = slow();
    let waiter = std::thread::spawn(move || {
        let lock = waiter_client.fair_lock(&name);
        let t0 = std::time::Instant::now();
        let got = lock
            .try_lock_for(Duration::from_secs(10))
            .unwrap()
            .is_some();
        (got, t0)
    });
    assert!(wait_until(Duration::from_secs(5), || matches!(
        held.inspect().unwrap().kind,
        redguard::LockKind::Fair { queue } if queue.len() == 1
    )));
    let mut cmd = redguard(&server.url());
    cmd.args([
        "unlock",
        "--force",
        std::str::from_utf8(held.name()).unwrap(),
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let released = std::time::Instant::now();
    let (got, _) = waiter.join().unwrap();
    assert!(got);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{:?}",
        released.elapsed()
    );
    // The old holder's release finds its hold gone.
    assert!(guard.unlock().unwrap_err().is_not_held());
}
