//! What the server does with its data: a restart with AOF keeps the lock
//! and its holder keeps renewing (RELIABILITY B5); an eviction under
//! `maxmemory` is reported to the holder like any other early expiry (H4).

use std::time::{Duration, Instant};

use crate::support::{RedisServer, ms, test_builder, unique_name, wait_until};

/// The catalogue's lease, renewed every 500 ms.
const LEASE: Duration = Duration::from_millis(1500);

fn client(server: &RedisServer) -> redguard::Client {
    test_builder(&server.url())
        .watchdog_timeout(LEASE)
        .response_timeout(ms(250))
        .build()
        .unwrap()
}

/// B5 with `appendfsync everysec`: a clean `SHUTDOWN` and a restart within
/// L keep the lock; its TTL kept counting while the server was down
/// (PTTL ≈ before − downtime, ± 100 ms); the holder is not told anything
/// and renews on the new server (PTTL back above 0.6 L).
#[test]
fn b5_aof_everysec_restart_keeps_the_lock_and_the_holder_renewing() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let client = client(&server);
    let name = unique_name("b5");
    let guard = client.lock(&name).lock().unwrap();
    for run in 0..3 {
        let before = server.pttl(&name);
        let t0 = Instant::now();
        server.restart_keeping_data();
        let down = t0.elapsed();
        let after = server.pttl(&name);
        let expected = before - down.as_millis() as i64;
        eprintln!(
            "B5 run {run}: PTTL {before} ms before, {after} ms after {down:?} down (expected {expected})"
        );
        assert!(down < LEASE, "the restart took {down:?}");
        assert!(after > 0, "the AOF did not keep the lock");
        // Renewals go on meanwhile (the holder reconnects), so the reading
        // may be higher than the expectation, never much lower.
        assert!(after >= expected - 100, "{after} < {expected} - 100");
        let renewals = client.stats().renewals;
        assert!(
            wait_until(LEASE, || client.stats().renewals > renewals
                && server.pttl(&name) > (LEASE.as_millis() * 6 / 10) as i64),
            "no renewal reached the restarted server"
        );
        guard.check().unwrap();
    }
    guard.unlock().unwrap();
    assert!(!server.exists(&name));
}

/// H4: under `maxmemory 2mb` with `allkeys-lru`, a flood of other keys
/// evicts the lock's key; the holder is told at its next renewal, within
/// L/3 + 150 ms of the eviction, like H3. (The README recommends
/// `noeviction` or a `volatile-*` policy for the lock's Redis.)
#[test]
fn h4_an_evicted_lock_is_reported_to_its_holder() {
    let server =
        RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]);
    let losses = crate::lost_lease::Losses::default();
    let client = losses
        .attach(test_builder(&server.url()))
        .watchdog_timeout(LEASE)
        .response_timeout(ms(250))
        .build()
        .unwrap();
    let name = unique_name("h4");
    let guard = client.lock(&name).lock().unwrap();
    let mut conn = server.conn();
    let value = vec![b'v'; 10 * 1024];
    let mut evicted_at = None;
    for i in 0..2_000 {
        let () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&value)
            .query(&mut conn)
            .unwrap();
        if !server.exists(&name) {
            evicted_at = Some(Instant::now());
            break;
        }
    }
    let evicted_at = evicted_at.expect("the lock key was never evicted");
    let info: String = server.cmd("INFO", &[b"stats"]);
    assert!(!info.contains("evicted_keys:0\r"), "{info}");
    assert!(wait_until(LEASE * 2, || guard.is_lost()), "never told");
    let told = evicted_at.elapsed();
    eprintln!("H4: the evicted lock was reported lost {told:?} after the eviction");
    assert!(told <= LEASE / 3 + ms(150), "told after {told:?}");
    assert!(guard.check().unwrap_err().is_lock_lost());
    // The callback heard of it once, as an eviction.
    let lost = losses.exactly(&name, 1, LEASE / 3).remove(0);
    assert_eq!(lost.reason, redguard::LossReason::Evicted);
    drop(guard);
    assert_eq!(losses.seen().len(), 1, "{:?}", losses.seen());
}
