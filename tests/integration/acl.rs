//! Least privilege (RELIABILITY.md J1, J2): the ACL line docs/SECURITY.md gives
//! (read from that file itself, so the two cannot drift apart) is enough
//! for every lock kind's whole cycle, and a name outside its patterns is
//! `Err(Permission)` naming it, never "busy".

use std::time::{Duration, Instant};

use crate::support::{RedisServer, TEST_WATCHDOG, ms, sleep, test_builder, test_client};

const PW: &str = "j1-acl-pw-77c2";

/// The README's `ACL SETUSER redguard …` line, with the password filled
/// in, split into the arguments after `ACL`.
fn readme_acl_args() -> Vec<String> {
    crate::support::readme_acl_line()
        .split_whitespace()
        .skip(1)
        .map(|w| w.replace(">CHANGE-ME", &format!(">{PW}")))
        .collect()
}

fn server_with_acl_user() -> RedisServer {
    let server = RedisServer::start();
    let args = readme_acl_args();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let () = server.cmd("ACL", &args);
    server
}

fn user_url(server: &RedisServer) -> String {
    format!("redis://redguard:{PW}@127.0.0.1:{}/", server.port())
}

/// J1: as the README's user, the whole cycle of every lock kind works:
/// acquire, re-enter, watchdog renewal past a lease, inspection, a waiter
/// woken by the unlock message, fair queueing, fencing tokens, and `WAIT`.
#[test]
fn j1_readme_acl_user_runs_the_whole_lock_cycle() {
    let server = server_with_acl_user();
    let url = user_url(&server);
    let client = test_client(&url);
    let other = test_client(&url);

    let lock = client.lock("rg:j1");
    let guard = lock.lock().unwrap();
    let again = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    sleep(TEST_WATCHDOG + ms(300));
    guard.check().unwrap();
    assert!(lock.is_locked().unwrap());
    assert_eq!(lock.holders().unwrap().len(), 1);
    assert!(lock.remaining_ttl().unwrap().is_some());
    // The holder record is written and read back as this user, and the
    // connections are named after the client.
    let info = lock.inspect().unwrap();
    let record = info.record_of(guard.holder_id()).expect("a holder record");
    assert_eq!(record.pid, Some(std::process::id()));
    assert!(info.held_since(guard.holder_id()).is_some());
    let list: String = server.cmd("CLIENT", &[b"LIST"]);
    let short = &client.id().to_string()[..8];
    assert!(list.contains(&format!("name=redguard-{short}")), "{list}");

    // A waiter on another client is woken by the unlock message (well
    // before its 200 ms poll interval would have it retry).
    let waiter = std::thread::spawn({
        let lock = other.lock("rg:j1");
        move || {
            let guard = lock.try_lock_for(Duration::from_secs(5)).unwrap();
            let at = Instant::now();
            assert!(guard.is_some(), "J1: the waiter never got the lock");
            at
        }
    });
    sleep(ms(400));
    drop(again);
    let released = Instant::now();
    guard.unlock().unwrap();
    let acquired = waiter.join().unwrap();
    assert!(
        acquired.saturating_duration_since(released) < ms(2000),
        "J1: woken {:?} after the unlock",
        acquired.saturating_duration_since(released)
    );

    // Fair lock: queue, hand-over, inspection of the queue.
    let fair = client.fair_lock("rg:j1-fair");
    let fair_guard = fair.lock().unwrap();
    let queued = std::thread::spawn({
        let fair = other.fair_lock("rg:j1-fair");
        move || fair.try_lock_for(Duration::from_secs(5)).unwrap().is_some()
    });
    sleep(ms(300));
    fair_guard.unlock().unwrap();
    assert!(
        queued.join().unwrap(),
        "J1: the queued fair waiter never got the lock"
    );

    // Fenced lock: tokens.
    let fenced = client.fenced_lock("rg:j1-fenced");
    let first = fenced.lock().unwrap().fencing_token().unwrap();
    let second = fenced.lock().unwrap().fencing_token().unwrap();
    assert!(second > first);

    // WAIT is allowed: a server without replicas answers it with 0.
    let err = client
        .lock("rg:j1-acked")
        .min_replica_acks(1)
        .replica_ack_timeout(ms(50))
        .try_lock()
        .unwrap_err();
    assert!(err.is_not_replicated(), "J1: {err:?}");
    assert!(!client.lock("rg:j1-acked").is_locked().unwrap());

    // Force unlock.
    let held = client.lock("rg:j1-force").lock().unwrap();
    assert!(other.lock("rg:j1-force").force_unlock().unwrap());
    drop(held);
}

/// J2: a lock whose key (and so its channel) lies outside the user's
/// patterns is `Err(Permission)` whose message names it, from `try_lock`,
/// `lock` and `try_lock_for` alike: never `Ok(None)` ("held by someone
/// else") and never a wait. A user whose channel grants lack the lock's
/// channel gets `Err(Permission)` naming the lock from the unlock that
/// publishes on it.
#[test]
fn j2_outside_the_acl_patterns_is_permission_naming_the_key() {
    let server = server_with_acl_user();
    let client = test_client(&user_url(&server));
    for name in ["other:j2", "rg-j2", "{other:j2}"] {
        let lock = client.lock(name);
        let err = lock.try_lock().unwrap_err();
        assert!(
            matches!(err, redguard::Error::Permission(_)),
            "{name}: {err:?}"
        );
        assert!(
            err.to_string().contains(name),
            "J2: {err} does not name {name}"
        );
        let started = Instant::now();
        let err = lock.try_lock_for(Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, redguard::Error::Permission(_)), "{err:?}");
        assert!(started.elapsed() < ms(2000), "J2: waited on a refused key");
    }

    // Keys granted, channels not.
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"keysonly",
            b"on",
            b">k-only-pw",
            b"resetkeys",
            b"~*",
            b"resetchannels",
            b"+@all",
        ],
    );
    let url = format!("redis://keysonly:k-only-pw@127.0.0.1:{}/", server.port());
    let client = test_builder(&url).build().unwrap();
    let guard = client.lock("rg:j2-channel").lock().unwrap();
    let err = guard.unlock().unwrap_err();
    assert!(matches!(err, redguard::Error::Permission(_)), "{err:?}");
    assert!(err.to_string().contains("rg:j2-channel"), "J2: {err}");
}

/// J2 for pub/sub: a channel the ACL refuses costs only its own waiters
/// their wake-ups (they poll); waiters on granted channels of the same
/// client are still woken by the unlock message, not by polling.
#[test]
fn j2_a_refused_channel_leaves_the_other_channels_wake_ups_alone() {
    let server = RedisServer::start();
    let () = server.cmd(
        "ACL",
        &[
            &b"SETUSER"[..],
            b"waiter",
            b"on",
            b">j2-chan-pw",
            b"~*",
            b"resetchannels",
            b"&redisson_lock__channel:{rg:granted}",
            b"+@all",
        ],
    );
    let poll = Duration::from_secs(3);
    let waiters = test_builder(&format!(
        "redis://waiter:j2-chan-pw@127.0.0.1:{}/",
        server.port()
    ))
    .poll_interval(poll)
    .build()
    .unwrap();
    let holder = test_client(&server.url());
    let refused = holder.lock("rg:refused").lock().unwrap();
    let granted = holder.lock("rg:granted").lock().unwrap();

    let wait_on = |name: &'static str| {
        let lock = waiters.lock(name);
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = lock
                .try_lock_for(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{name}: {e:?} after {:?}", started.elapsed()));
            let at = Instant::now();
            assert!(got.is_some(), "{name}: never acquired");
            at
        })
    };
    let on_refused = wait_on("rg:refused");
    let on_granted = wait_on("rg:granted");
    assert!(
        crate::support::wait_until(Duration::from_secs(5), || waiters.stats().waiters == 2),
        "both threads wait"
    );
    // The refusal does not cost the subscriber its connection: one and the
    // same pub/sub connection of the waiters' user all along.
    let pubsub_ids = || -> Vec<String> {
        let list: String = server.cmd("CLIENT", &[&b"LIST"[..], b"TYPE", b"pubsub"]);
        list.lines()
            .filter(|l| l.contains("user=waiter"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    // Registered waiters are not yet a subscription: on a loaded machine
    // the subscriber may still be connecting when both threads wait (they
    // wait for its confirmation for one response timeout only). Read the
    // connection once the server has it subscribed to the granted channel.
    let granted_subscribed = || {
        let counts: Vec<(String, i64)> = server.cmd(
            "PUBSUB",
            &[&b"NUMSUB"[..], b"redisson_lock__channel:{rg:granted}"],
        );
        counts.first().is_some_and(|(_, n)| *n == 1)
    };
    assert!(
        crate::support::wait_until(Duration::from_secs(5), || granted_subscribed()
            && pubsub_ids().len() == 1),
        "the waiters' subscriber never subscribed the granted channel"
    );
    let first = pubsub_ids();
    for _ in 0..10 {
        sleep(ms(100));
        assert_eq!(pubsub_ids(), first, "the subscriber reconnected");
    }
    assert_eq!(first.len(), 1, "one pub/sub connection: {first:?}");
    let released = Instant::now();
    drop(granted);
    drop(refused);
    let granted_at = on_granted.join().unwrap();
    let refused_at = on_refused.join().unwrap();
    let woken = granted_at.saturating_duration_since(released);
    assert!(
        woken < ms(500),
        "the granted channel's waiter polled ({woken:?}, poll interval {poll:?})"
    );
    assert!(
        refused_at.saturating_duration_since(released) < poll + ms(1000),
        "the refused channel's waiter still gets the lock by polling"
    );
}

/// The read-only snapshots (`inspect`, expiring-permit `leases`) run in a
/// `MULTI`: a server that wants a password refuses the `MULTI` itself, and
/// that is `Err(Auth)`, never a panic; a key outside the user's patterns
/// is `Err(Permission)` naming the lock, not an aborted transaction.
#[test]
fn j2_snapshots_classify_noauth_and_noperm() {
    let server = server_with_acl_user();
    let () = server.cmd("CONFIG", &[b"SET", b"requirepass", b"admin-pw-j2"]);
    let anonymous = test_client(&format!("redis://127.0.0.1:{}/", server.port()));
    let err = anonymous.lock("rg:j2-snap").inspect().unwrap_err();
    assert!(matches!(err, redguard::Error::Auth(_)), "{err:?}");
    let err = anonymous
        .expiring_semaphore("rg:j2-snap")
        .leases()
        .unwrap_err();
    assert!(matches!(err, redguard::Error::Auth(_)), "{err:?}");

    let client = test_client(&user_url(&server));
    let err = client.lock("other:j2-snap").inspect().unwrap_err();
    assert!(matches!(err, redguard::Error::Permission(_)), "{err:?}");
    assert!(err.to_string().contains("other:j2-snap"), "{err}");
}

/// An ACL user without `INFO` (it is optional: the watchdog uses it to
/// tell a restart or evictions apart): a hold opens no more connections
/// than with it. The watch connection was opened again at every look,
/// about twice a second, for the whole hold: 33 connections in 10 s.
#[test]
fn a_user_without_info_holds_without_reconnecting() {
    let server = RedisServer::start();
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"noinfo",
            b"on",
            b">noinfo-pw",
            b"~*",
            b"&*",
            b"+@all",
            b"-info",
        ],
    );
    let url = format!("redis://noinfo:noinfo-pw@127.0.0.1:{}/", server.port());
    let connections = || -> u64 {
        let stats: String = server.cmd("INFO", &[b"stats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let client = test_client(&url);
    let guard = client.lock("rg:noinfo").lock().unwrap();
    // The hold's own connections (the watchdog's, its watch connection,
    // the subscriber's for a force unlock) are open after two leases.
    sleep(TEST_WATCHDOG * 2);
    let before = connections();
    // Four more leases: at least eight looks at the watch connection,
    // each of which reopened it.
    sleep(TEST_WATCHDOG * 4);
    guard.check().unwrap();
    let opened = connections() - before;
    guard.unlock().unwrap();
    assert!(opened <= 1, "{opened} connections opened in a steady hold");
}

/// The documented ACL (read from docs/SECURITY.md) is enough for every
/// CLI command and every library kind, and nothing they send is refused:
/// the server's `ACL LOG` stays empty (a refused `SUBSCRIBE`, `INFO` or
/// record write would only degrade, so the log is the check, not the exit
/// statuses alone).
#[cfg(feature = "cli")]
#[test]
fn every_command_and_kind_runs_under_the_documented_acl() {
    use crate::cli::{redguard, run};
    let server = server_with_acl_user();
    let url = user_url(&server);
    let holder = test_client(&url);
    let held = holder.lock("rg:acl-held").lock().unwrap();
    let mut failed: Vec<String> = Vec::new();
    let mut cli = |args: &[&str], want: i32| {
        let mut cmd = redguard(&url);
        cmd.args(args);
        let out = run(cmd);
        if out.code != Some(want) {
            failed.push(format!("redguard {args:?}: {out:?}"));
        }
    };
    // Every CLI command, each kind of `exec`.
    for (name, kind) in [
        ("rg:acl-exec", &[][..]),
        ("rg:acl-fair", &["--fair"][..]),
        ("rg:acl-fenced", &["--fenced"][..]),
        ("rg:acl-read", &["--read"][..]),
        ("rg:acl-write", &["--write"][..]),
        ("rg:acl-permits", &["--permits", "2"][..]),
    ] {
        let mut args = vec!["exec", name];
        args.extend(kind);
        args.extend(["--", "true"]);
        cli(&args, 0);
    }
    // A read hold, then a write hold of the same lock: the read hold was
    // released (a refused release would make the writer wait).
    cli(&["exec", "--read", "rg:acl-rw", "--", "true"], 0);
    cli(&["exec", "-n", "--write", "rg:acl-rw", "--", "true"], 0);
    cli(&["once", "rg:acl-once", "--", "true"], 0);
    cli(&["once", "--status", "rg:acl-once"], 0);
    cli(&["once", "--forget", "rg:acl-once"], 0);
    cli(&["latch", "rg:acl-latch", "--count", "1"], 0);
    cli(&["latch", "rg:acl-latch", "--count-down"], 0);
    cli(
        &["latch", "rg:acl-latch", "--wait", "2s", "--allow-missing"],
        0,
    );
    cli(&["status", "rg:acl-exec"], 1);
    cli(&["status", "rg:acl-held"], 0);
    cli(&["status", "rg:acl-permits"], 1);
    cli(&["list", "rg:*"], 0);
    cli(&["list", "rg:*", "--json"], 0);
    cli(&["who", &holder.id().to_string()], 0);
    cli(&["unlock", "--force", "rg:acl-held"], 0);
    cli(
        &["unlock", "--force", "--kind", "semaphore", "rg:acl-permits"],
        0,
    );
    drop(held);
    // Every library kind's cycle, with a waiter woken by pub/sub.
    let client = test_client(&url);
    let other = test_client(&url);
    let mut lib = |what: &str, result: redguard::Result<()>| {
        if let Err(e) = result {
            failed.push(format!("{what}: {e:?}"));
        }
    };
    lib("lock", (|| client.lock("rg:acl-l").lock()?.unlock())());
    lib("fair", (|| client.fair_lock("rg:acl-f").lock()?.unlock())());
    lib(
        "fenced",
        (|| client.fenced_lock("rg:acl-t").lock()?.unlock())(),
    );
    lib(
        "read-write",
        (|| {
            let rw = client.read_write_lock("rg:acl-rw2");
            rw.read().lock()?.unlock()?;
            rw.write().lock()?.unlock()
        })(),
    );
    lib(
        "semaphore",
        (|| {
            let s = client.semaphore("rg:acl-s");
            s.try_set_permits(1)?;
            s.acquire(1)?.release()
        })(),
    );
    lib(
        "expiring permits",
        (|| {
            let s = client.expiring_semaphore("rg:acl-e");
            s.try_set_permits(1)?;
            s.acquire()?.release()
        })(),
    );
    lib(
        "latch",
        (|| {
            let l = client.count_down_latch("rg:acl-cd");
            l.try_set_count(1)?;
            l.count_down()?;
            l.wait_for(ms(500)).map(drop)
        })(),
    );
    lib(
        "once",
        (|| match client.once("rg:acl-o", Duration::from_secs(60))? {
            redguard::Once::Run(run) => run.complete("0").map(drop),
            _ => Ok(()),
        })(),
    );
    lib(
        "woken waiter",
        (|| {
            let held = client.lock("rg:acl-w").lock()?;
            let waiter = std::thread::spawn({
                let other = other.clone();
                move || {
                    other
                        .lock("rg:acl-w")
                        .try_lock_for(Duration::from_secs(5))
                        .map(|g| g.map(|g| g.unlock()).is_some())
                }
            });
            sleep(ms(300));
            held.unlock()?;
            assert!(waiter.join().unwrap()?, "the waiter timed out");
            Ok(())
        })(),
    );
    lib(
        "list and records",
        (|| {
            let _held = client.lock("rg:acl-r").lock()?;
            client.list_locks("rg:*", true)?;
            client.holder_records(&client.id().to_string())?;
            client.waiting_records().map(drop)
        })(),
    );
    client.shutdown();
    other.shutdown();
    holder.shutdown();
    let log: Vec<redis::Value> = server.cmd("ACL", &[b"LOG"]);
    if !log.is_empty() {
        failed.push(format!("ACL LOG: {log:#?}"));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A user whose ACL refuses a command the read release needs (`HGETALL`,
/// here): the release fails before it changes anything, so the lock is
/// not left without its holder but with its mode (an empty read lock that
/// blocked writers until it expired), and `exec` exits 74 saying the key
/// is still there, held by its holder.
#[cfg(feature = "cli")]
#[test]
fn a_read_release_refused_half_way_changes_nothing() {
    use crate::cli::{redguard, run};
    let server = RedisServer::start();
    let line: Vec<String> = readme_acl_args()
        .into_iter()
        .filter(|a| a != "+hgetall")
        .collect();
    let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
    let () = server.cmd("ACL", &args);
    let mut cmd = redguard(&user_url(&server));
    cmd.args(["exec", "--read", "rg:half", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.code, Some(74), "{out:?}");
    assert!(
        out.stderr
            .contains("still there, held by this process's holder"),
        "{out:?}"
    );
    // The hold is whole: the holder's field and its timeout key.
    let fields: Vec<String> = server.cmd("HKEYS", &[b"rg:half"]);
    assert_eq!(fields.len(), 2, "{fields:?}");
}
