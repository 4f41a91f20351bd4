//! Loss seen within a second (RELIABILITY B4, B5): a server that closes
//! its connections or comes back as a new process has every lease held
//! there checked at once, not at the next renewal a third of the lease
//! later. Locks that are still there (a restart with AOF, a mere
//! reconnect) are kept.
//!
//! Every client here uses the default-like 30 s watchdog timeout, so its
//! first regular renewal is 10 s away: whatever these tests see within a
//! second or two is the check, not a renewal.

use std::time::{Duration, Instant};

use crate::support::{RedisServer, ms, test_builder, unique_name, wait_until};

const LONG_LEASE: Duration = Duration::from_secs(30);

fn long_lease_client(url: &str) -> redguard::Client {
    test_builder(url)
        .watchdog_timeout(LONG_LEASE)
        .build()
        .unwrap()
}

/// `true` once a connection of the watchdog watches `server`: the only
/// connection whose last command was `INFO`.
pub(crate) fn watched(server: &RedisServer) -> bool {
    let clients: String = server.cmd("CLIENT", &[b"LIST"]);
    clients.contains("cmd=info")
}

#[test]
fn b4_restart_without_persistence_is_seen_within_1s() {
    let mut server = RedisServer::start();
    let client = long_lease_client(&server.url());
    let mut seen = Vec::new();
    for run in 0..5 {
        let name = unique_name("b4-fast");
        let guard = client.lock(&name).lock().unwrap();
        // Held, and watched: the watchdog's worker opened its watch
        // connection (the one whose last command was INFO).
        assert!(wait_until(Duration::from_secs(2), || watched(&server)));
        let t0 = Instant::now();
        server.restart();
        let restarted = t0.elapsed();
        let lost = wait_until(Duration::from_secs(3), || guard.check().is_err());
        let after = t0.elapsed();
        assert!(lost, "run {run}: the loss was not seen within 3 s");
        assert!(guard.check().unwrap_err().is_lock_lost());
        seen.push((restarted, after));
        drop(guard);
    }
    eprintln!(
        "B4 fast: (restart took, loss seen after) over {} runs: {seen:?}",
        seen.len()
    );
    let worst = seen.iter().map(|s| s.1).max().unwrap();
    assert!(
        worst < Duration::from_secs(1),
        "slowest: {worst:?} ({seen:?})"
    );
}

#[test]
fn b4_a_fixed_lease_lost_in_a_restart_is_seen_within_1s() {
    let mut server = RedisServer::start();
    let client = long_lease_client(&server.url());
    let name = unique_name("b4-fixed");
    let guard = client.lock(&name).with_lease(LONG_LEASE).lock().unwrap();
    let kept = unique_name("b4-fixed-kept");
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let t0 = Instant::now();
    server.restart();
    // Retaken at once by someone else: the old holder must not see it as
    // its own.
    let other = long_lease_client(&server.url());
    let _taken = other.lock(&name).with_lease(LONG_LEASE).lock().unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || guard.check().is_err()),
        "the loss of a fixed lease was not seen"
    );
    let after = t0.elapsed();
    eprintln!("B4 fixed lease: loss seen {after:?} after the restart began");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert!(guard.check().unwrap_err().is_lock_lost());
    // A fixed lease that is still there is not extended by the check.
    let held = client.lock(&kept).with_lease(ms(5_000)).lock().unwrap();
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"normal"]);
    crate::support::sleep(ms(500));
    held.check().unwrap();
    assert!(server.pttl(&kept) <= 4_600, "extended by the check");
    drop(held);
}

#[test]
fn b5_locks_still_there_after_an_aof_restart_are_kept() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap().to_owned();
    let mut server = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        &dir,
    ]);
    let client = long_lease_client(&server.url());
    let name = unique_name("b5-aof");
    let guard = client.lock(&name).lock().unwrap();
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let before = client.stats().renewals;
    server.restart();
    assert!(server.pttl(&name) > 0, "the AOF did not keep the lock");
    // The restart is noticed and the lease checked (renewed), well before
    // the first regular renewal 10 s away.
    assert!(
        wait_until(Duration::from_secs(2), || client.stats().renewals > before),
        "no check after the restart"
    );
    crate::support::sleep(ms(500));
    guard.check().unwrap();
    assert!(server.pttl(&name) > 20_000, "the check renewed the lease");
    guard.unlock().unwrap();
    // A release whose connection met the restart goes on in the background
    // (`unlock` is `Ok`): wait for it before looking.
    assert!(client.await_releases(Duration::from_secs(5)));
    assert_eq!(server.pttl(&name), -2);
}

/// A thread of `client` waiting (3 s) on a lock another client holds,
/// returned once it waits: the subscriber then has a pub/sub connection to
/// lose. The thread answers whether its wait ran out; the other client and
/// its guard are returned with it, to be dropped after it.
fn waiting_on_a_held_lock(
    server: &RedisServer,
    client: &redguard::Client,
    prefix: &str,
) -> (
    std::thread::JoinHandle<bool>,
    redguard::LockGuard,
    redguard::Client,
) {
    let other = long_lease_client(&server.url());
    let busy = unique_name(prefix);
    let busy_guard = other.lock(&busy).lock().unwrap();
    let waiter = std::thread::spawn({
        let lock = client.lock(&busy);
        move || lock.try_lock_for(Duration::from_secs(3)).unwrap().is_none()
    });
    assert!(wait_until(Duration::from_secs(2), || client
        .stats()
        .pubsub_connections
        == 1
        && client.stats().waiters == 1));
    (waiter, busy_guard, other)
}

#[test]
fn b5_locks_are_kept_across_a_mere_reconnect() {
    let server = RedisServer::start();
    let client = long_lease_client(&server.url());
    let name = unique_name("b5-reconnect");
    let guard = client.lock(&name).lock().unwrap();

    // The pool's and the watch connection go.
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let before = client.stats().renewals;
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"normal"]);
    assert!(
        wait_until(Duration::from_secs(2), || client.stats().renewals > before),
        "no check after the connections were killed"
    );

    // The subscriber's pub/sub connection goes: a thread of the same
    // client waits on a lock someone else holds.
    let (waiter, busy_guard, _other) = waiting_on_a_held_lock(&server, &client, "b5-busy");
    let before = client.stats().renewals;
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"pubsub"]);
    assert!(
        wait_until(Duration::from_secs(2), || client.stats().renewals > before),
        "no check after the pub/sub connection was killed"
    );
    // One check, then the lease's own pace (its next renewal 10 s away):
    // what was renewed after the suspicion is not checked again.
    let checked = client.stats().renewals;
    crate::support::sleep(ms(300));
    let more = client.stats().renewals - checked;
    assert!(more <= 1, "{more} renewals in the 300 ms after the check");
    guard.check().unwrap();
    assert!(server.pttl(&name) > 20_000);
    assert!(waiter.join().unwrap());
    drop(busy_guard);
    guard.unlock().unwrap();
}

/// After a suspicion (the subscriber's pub/sub connection killed: every
/// lease on the server is checked at once), renewals go back to their pace:
/// a lock with a 900 ms lease is renewed about 3 times a second, not once
/// per round trip (the suspicion's instant stays recorded, and only
/// renewals sent before it may be checked again at once).
#[test]
fn b5_after_a_check_renewals_keep_their_pace() {
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(ms(900))
        .build()
        .unwrap();
    let guard = client.lock(unique_name("b5-pace")).lock().unwrap();
    let (waiter, busy_guard, _other) = waiting_on_a_held_lock(&server, &client, "b5-pace-busy");
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"pubsub"]);
    // The check goes at once; then a second of ordinary renewals.
    crate::support::sleep(ms(200));
    let before = client.stats().renewals;
    crate::support::sleep(Duration::from_secs(1));
    let renewals = client.stats().renewals - before;
    eprintln!("renewals of one 900 ms lease in the second after a check: {renewals}");
    assert!(renewals <= 8, "{renewals} renewals in a second");
    guard.check().unwrap();
    assert!(waiter.join().unwrap());
    drop(busy_guard);
    guard.unlock().unwrap();
}

/// B5 for fixed leases: a fixed-lease lock, read hold and expiring permit
/// (30 s) across a mere reconnect. The check that follows looks each one up
/// with its own kind's command (a permit in its lease set with `ZSCORE`)
/// once, and keeps all three.
#[test]
fn b5_fixed_leases_of_every_kind_are_kept_across_a_mere_reconnect() {
    let server = RedisServer::start();
    let client = long_lease_client(&server.url());
    let name = unique_name("b5-fixed");
    let lock = client
        .lock(format!("{name}:lock"))
        .with_lease(LONG_LEASE)
        .lock()
        .unwrap();
    let read = client
        .read_write_lock(format!("{name}:rw"))
        .with_lease(LONG_LEASE)
        .read()
        .lock()
        .unwrap();
    let semaphore = client.expiring_semaphore(format!("{name}:sem"));
    assert!(semaphore.try_set_permits(2).unwrap());
    let permit = semaphore.with_lease(LONG_LEASE).acquire().unwrap();
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let lookups = server.command_calls(&["zscore"]);
    let _: i64 = server.cmd("CLIENT", &[b"KILL", b"TYPE", b"normal"]);
    assert!(
        wait_until(Duration::from_secs(2), || server.command_calls(&["zscore"])
            > lookups),
        "the permit was not looked up after the reconnect"
    );
    // One look-up each, then their own pace: what was looked up after the
    // suspicion is not looked up again.
    let looked = server.command_calls(&["zscore"]);
    crate::support::sleep(ms(300));
    let more = server.command_calls(&["zscore"]) - looked;
    assert!(
        more <= 1,
        "{more} permit look-ups in the 300 ms after the check"
    );
    lock.check().unwrap();
    read.check().unwrap();
    permit.check().unwrap();
    assert_eq!(semaphore.acquired_permits().unwrap(), 1);
}

/// The other side of B4/B5: a server that keeps its connections and its
/// process costs no check. With a 30 s lease no renewal falls due within
/// 2 s, so none may go out (a watch connection taken for closed at every
/// quiet look made the worker check every lease ten times a second).
#[test]
fn b5_a_server_that_stays_up_is_not_checked() {
    let server = RedisServer::start();
    let client = long_lease_client(&server.url());
    let guard = client.lock(unique_name("b5-quiet")).lock().unwrap();
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let renewals = client.stats().renewals;
    crate::support::sleep(Duration::from_secs(2));
    assert_eq!(
        client.stats().renewals,
        renewals,
        "leases checked while the server stayed up"
    );
    guard.check().unwrap();
}

#[cfg(feature = "cli")]
#[test]
fn b4_exec_exits_70_within_1500ms_of_a_restart() {
    use std::process::{Command, Stdio};

    let mut server = RedisServer::start();
    let name = unique_name("b4-exec");
    let mut child = Command::new(env!("CARGO_BIN_EXE_redguard"))
        .args(["exec", &name, "--url", &server.url(), "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held by the CLI, with its default 30 s watchdog timeout.
    assert!(
        wait_until(Duration::from_secs(10), || server.pttl(&name) > 0),
        "the CLI did not take the lock"
    );
    let lease = server.pttl(&name);
    assert!(lease > 20_000, "PTTL {lease}");
    assert!(wait_until(Duration::from_secs(2), || watched(&server)));
    let t0 = Instant::now();
    server.restart();
    let mut status = None;
    wait_until(Duration::from_secs(5), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let elapsed = t0.elapsed();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redguard exec still runs {elapsed:?} after the restart");
    };
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        use std::io::Read;
        let _ = err.read_to_string(&mut stderr);
    }
    eprintln!("B4 exec: exited {status} {elapsed:?} after the restart began");
    assert_eq!(status.code(), Some(70), "stderr: {stderr}");
    assert!(
        elapsed < Duration::from_millis(1500),
        "{elapsed:?}; stderr: {stderr}"
    );
}
