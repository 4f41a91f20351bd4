//! C3 for every kind: a grant whose reply is lost is undone before the
//! failing call returns. The proxy lets the acquire reach Redis (the grant
//! is made) and replaces its reply with bytes that are not RESP, so the call
//! fails with a `Protocol` error while Redis holds the grant. With a 30 s
//! lease, a grant left to its lease (or undone later, in the background)
//! would still be there when the call returns.

use std::time::Duration;

use redguard::{Client, Once};

use crate::support::{FaultProxy, KINDS, Kind, RedisServer, ReplyFault, test_builder, unique_name};

/// Permits of each expiring semaphore here.
const PERMITS: u32 = 2;

/// One acquire of `kind` at `name` (a semaphore's permits set before):
/// `Ok(true)` when granted (the guard is released at once), `Ok(false)`
/// when busy, or the call's error.
fn acquire(client: &Client, kind: Kind, name: &str) -> redguard::Result<bool> {
    let lock = match kind {
        Kind::Reentrant => client.lock(name),
        Kind::Fair => client.fair_lock(name),
        Kind::Fenced => client.fenced_lock(name),
        Kind::Read => client.read_write_lock(name).read(),
        Kind::Write => client.read_write_lock(name).write(),
        Kind::Permit => return Ok(client.expiring_semaphore(name).try_acquire()?.is_some()),
        Kind::Once => {
            return Ok(matches!(
                client.once(name, Duration::from_secs(60))?,
                Once::Run(_)
            ));
        }
    };
    Ok(lock.try_lock()?.is_some())
}

/// `each` + 1 names of `kind` under `prefix` (a semaphore's permits set
/// at each), the last one acquired and released once: the connection and
/// the kind's scripts are then loaded, and the first `each` are the
/// trials'.
fn trial_names(client: &Client, prefix: &str, kind: Kind, each: usize) -> Vec<String> {
    let names: Vec<String> = (0..=each)
        .map(|trial| format!("{prefix}-{kind:?}-{trial}"))
        .collect();
    if let Kind::Permit = kind {
        for name in &names {
            let sem = client.expiring_semaphore(name);
            assert!(sem.try_set_permits(PERMITS).unwrap());
        }
    }
    assert!(acquire(client, kind, &names[each]).unwrap());
    names
}

/// What is left at `name` of a grant: every key but those that outlive
/// grants by design (a fencing-token counter; a permit counter holding
/// all its permits).
fn grant_left(server: &RedisServer, name: &str) -> Vec<String> {
    let keys: Vec<String> = server.cmd("KEYS", &[format!("*{name}*").as_bytes()]);
    keys.into_iter()
        .filter(|k| !k.starts_with("redisson_lock_token:"))
        // A run-once claim's last-attempt record is a trace, not a grant:
        // it blocks nobody, and reads as abandoned once the claim is gone.
        .filter(|k| !k.starts_with("redguard_once_attempt:"))
        .filter(|k| {
            k != name || server.cmd::<String>("TYPE", &[k.as_bytes()]) != "string" || {
                server.cmd::<i64>("GET", &[k.as_bytes()]) != i64::from(PERMITS)
            }
        })
        .collect()
}

/// C3, 5 lost replies for each of 7 kinds: the failing call returns a
/// `Protocol` error, and by then nothing of its grant is left on the server
/// (the lease is 30 s).
#[test]
fn c3_a_lost_grant_is_undone_before_the_call_returns_for_every_kind() {
    const EACH: usize = 5;
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let prefix = unique_name("c3k");
    let mut report = Vec::new();
    let mut not_undone = Vec::new();
    for kind in KINDS {
        let names = trial_names(&client, &prefix, kind, EACH);
        let mut left = Vec::new();
        for name in &names[..EACH] {
            let cut = proxy.reply_faults_done();
            proxy.fault_replies_to(name.as_bytes(), ReplyFault::Garbage, 1);
            let err = acquire(&client, kind, name).unwrap_err();
            assert_eq!(proxy.reply_faults_done(), cut + 1, "{kind:?}: {err:?}");
            assert!(
                matches!(err, redguard::Error::Protocol(_)),
                "{kind:?}: {err:?}"
            );
            left.extend(grant_left(&server, name));
        }
        report.push(format!("{kind:?}: {} keys left", left.len()));
        if !left.is_empty() {
            not_undone.push(format!("{kind:?}: {left:?}"));
        }
    }
    eprintln!("C3 every kind: {EACH} lost grant replies each; {report:?}");
    assert!(
        not_undone.is_empty(),
        "lost grants not undone: {not_undone:#?}"
    );
}

/// C3 when the undo meets a fault too: the acquire's reply is garbled
/// (the grant is made), then the undo is lost on its way (its connection
/// breaks; the server never runs it). Its outcome unknown, the undo goes
/// once more on a fresh connection before the call returns, and nothing of
/// the grant is left (the lease is 30 s): a grant left to its lease would
/// still be there. Holder records are off, so that no other request names
/// the lock between the two.
#[test]
fn c3_an_undo_whose_own_reply_is_lost_goes_once_more_for_every_kind() {
    const EACH: usize = 2;
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .holder_record(false)
        .build()
        .unwrap();
    let prefix = unique_name("c3u");
    let mut not_undone = Vec::new();
    for kind in KINDS {
        let names = trial_names(&client, &prefix, kind, EACH);
        for name in &names[..EACH] {
            let cut = proxy.reply_faults_done();
            proxy.fault_replies_in_turn(
                name.as_bytes(),
                &[ReplyFault::Garbage, ReplyFault::LostRequest],
            );
            let err = acquire(&client, kind, name).unwrap_err();
            assert!(
                matches!(err, redguard::Error::Protocol(_)),
                "{kind:?}: {err:?}"
            );
            // Both faults were spent: on the acquire and on the first undo.
            assert_eq!(proxy.reply_faults_done(), cut + 2, "{kind:?}");
            let left = grant_left(&server, name);
            if !left.is_empty() {
                not_undone.push(format!("{kind:?}: {left:?}"));
            }
        }
    }
    assert!(
        not_undone.is_empty(),
        "grants whose undo lost its reply were left: {not_undone:#?}"
    );
}

/// A lost reply to a busy attempt: the script ran and found the lock held
/// by B, the reply was garbled, and the undo of a grant that did not happen
/// leaves B's lock (its fields, its expiry, the queue, the permits) as it
/// was, for every kind.
#[test]
fn c3_a_lost_busy_reply_leaves_the_holders_lock_alone_for_every_kind() {
    use crate::holder_checks::{snapshot, unchanged};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let a = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let b = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let prefix = unique_name("c3b");
    let mut conn = server.conn();
    let mut changed = Vec::new();
    for kind in KINDS {
        let name = format!("{prefix}-{kind:?}");
        // Not a superstring of `name`: the proxy garbles the first reply
        // whose request names it, and the holder-record write of this hold
        // (its field names the lock) may pass while the fault is armed.
        let warm = format!("{prefix}-warm-{kind:?}");
        if let Kind::Permit = kind {
            for n in [&name, &warm] {
                assert!(a.expiring_semaphore(n).try_set_permits(1).unwrap());
            }
        }
        assert!(acquire(&a, kind, &warm).unwrap());
        // B holds it (a run-once claim it keeps running).
        let _held: Box<dyn std::any::Any> = match kind {
            Kind::Permit => Box::new(b.expiring_semaphore(&name).acquire().unwrap()),
            Kind::Once => match b.once(&name, Duration::from_secs(60)).unwrap() {
                Once::Run(g) => Box::new(g),
                other => panic!("{other:?}"),
            },
            Kind::Reentrant => Box::new(b.lock(&name).lock().unwrap()),
            Kind::Fair => Box::new(b.fair_lock(&name).lock().unwrap()),
            Kind::Fenced => Box::new(b.fenced_lock(&name).lock().unwrap()),
            Kind::Read => Box::new(b.read_write_lock(&name).write().lock().unwrap()),
            Kind::Write => Box::new(b.read_write_lock(&name).read().lock().unwrap()),
        };
        let t = std::time::Instant::now();
        let before = snapshot(&mut conn, &name);
        proxy.fault_replies_to(name.as_bytes(), ReplyFault::Garbage, 1);
        let err = acquire(&a, kind, &name).unwrap_err();
        assert!(
            matches!(err, redguard::Error::Protocol(_)),
            "{kind:?}: {err:?}"
        );
        let after = snapshot(&mut conn, &name);
        if let Err(e) = unchanged(&before, &after, t.elapsed() + crate::support::ms(2)) {
            changed.push(format!("{kind:?}: {e}"));
        }
    }
    assert!(
        changed.is_empty(),
        "the holder's lock changed: {changed:#?}"
    );
}

/// Only a call whose outcome is unknown is undone: one refused by the
/// server (a value of another type at the key: its script ran and granted
/// nothing) costs one script call and tries no undo (which would log that
/// it "could not be undone", refused the same way); one that never
/// reached Redis (a client's first connect refused) sends nothing and
/// tries no undo either. (A call that met a broken connection cannot tell
/// whether its script was written before the break, so it is undone even
/// when the fresh connection is refused.)
#[test]
fn c3_a_call_that_surely_failed_is_not_undone() {
    crate::support::capture_logs();
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Warm: the connection is made and the scripts are loaded.
    let warm = unique_name("c3-sure-warm");
    client.lock(&warm).lock().unwrap().unlock().unwrap();
    let undo_tried = |name: &str| {
        crate::support::logged_lines()
            .into_iter()
            .filter(|l| l.contains("could not be undone") && l.contains(name))
            .collect::<Vec<_>>()
    };

    let refused = unique_name("c3-sure-wrongtype");
    let () = server.cmd("SET", &[refused.as_bytes(), b"a string"]);
    let scripts = || server.command_calls(&["evalsha", "eval"]);
    let before = scripts();
    let err = client.lock(&refused).try_lock().unwrap_err();
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    assert_eq!(scripts() - before, 1, "script calls of a refused acquire");
    assert_eq!(undo_tried(&refused), Vec::<String>::new());

    // A client that has not connected yet: its first call is refused at
    // the connect, before anything is written. (Killing a warm client's
    // connection instead is racy: a call written on it before the close
    // is seen has an unknown outcome, and is rightly undone.)
    let unreachable = unique_name("c3-sure-unreachable");
    let proxy = FaultProxy::start(server.port());
    proxy.set_mode(crate::support::Mode::Refuse);
    let cold = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let err = cold.lock(&unreachable).try_lock().unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(undo_tried(&unreachable), Vec::<String>::new());
}

/// One acquire of `kind` at `name` that waits up to `wait`, riding out
/// failures: `Ok(true)` when granted (the guard is released at once, and
/// `while_held` sees the server first), or the call's error.
fn acquire_waiting(
    client: &Client,
    kind: Kind,
    name: &str,
    wait: Duration,
    while_held: impl FnOnce(),
) -> redguard::Result<bool> {
    let lock = match kind {
        Kind::Reentrant => client.lock(name),
        Kind::Fair => client.fair_lock(name),
        Kind::Fenced => client.fenced_lock(name),
        Kind::Read => client.read_write_lock(name).read(),
        Kind::Write => client.read_write_lock(name).write(),
        Kind::Permit => {
            let got = client.expiring_semaphore(name).try_acquire_for(wait)?;
            if got.is_some() {
                while_held();
            }
            return Ok(got.is_some());
        }
        Kind::Once => {
            return Ok(
                match client.once_wait(name, Duration::from_secs(60), wait)? {
                    Once::Run(guard) => {
                        while_held();
                        drop(guard);
                        true
                    }
                    _ => false,
                },
            );
        }
    };
    let got = lock.try_lock_for(wait)?;
    if got.is_some() {
        while_held();
    }
    Ok(got.is_some())
}

/// Section 4 with C3: a waiting acquire whose grant's reply is lost (the
/// connection is cut after the script ran) and whose undo is lost twice on
/// its way (the grant stays on the server) rides that out: it tries again
/// and gets the lock. Its retry may re-enter its own orphaned grant (a
/// lock's hold count is then 2 on the server for 1 guard; a run-once claim
/// is not reentrant and is given back first; a permit is given back by id
/// before the next attempt); whichever way, once the guard is released
/// nothing of any grant is left (the lease is 30 s).
#[test]
fn c3_a_waiter_rides_out_a_lost_grant_and_leaves_nothing_after_release_for_every_kind() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .holder_record(false)
        .build()
        .unwrap();
    let prefix = unique_name("c3w");
    let mut left_over = Vec::new();
    let mut reentered = Vec::new();
    for kind in KINDS {
        let names = trial_names(&client, &prefix, kind, 1);
        let name = &names[0];
        let cut = proxy.reply_faults_done();
        proxy.fault_replies_in_turn(
            name.as_bytes(),
            &[
                ReplyFault::Cut,
                ReplyFault::LostRequest,
                ReplyFault::LostRequest,
                ReplyFault::LostRequest,
            ],
        );
        // What the server holds at `name` while the guard lives: a hash's
        // fields and counts (a hold count of 2 is the re-entered orphan).
        let mut while_held = String::new();
        let got = acquire_waiting(&client, kind, name, Duration::from_secs(20), || {
            let held: redis::RedisResult<redis::Value> =
                redis::cmd("HGETALL").arg(name).query(&mut server.conn());
            while_held = format!("{held:?}");
        })
        .unwrap_or_else(|e| panic!("{kind:?}: the wait did not ride out the lost grant: {e:?}"));
        assert!(got, "{kind:?}: not acquired");
        assert_eq!(proxy.reply_faults_done(), cut + 4, "{kind:?}");
        reentered.push(format!("{kind:?}: {while_held}"));
        let left = grant_left(&server, name);
        if !left.is_empty() {
            left_over.push(format!("{kind:?}: {left:?}"));
        }
    }
    eprintln!("section 4 + C3: {reentered:?}");
    assert!(
        left_over.is_empty(),
        "grants left after the release: {left_over:#?}"
    );
}
