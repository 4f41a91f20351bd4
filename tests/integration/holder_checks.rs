//! A4: the scripts' own holder checks. A stale holder (its lock was
//! force-unlocked by an admin and taken by B, and its guard has not noticed)
//! sends its `extend`, its release and its renewal to Redis, and the scripts
//! refuse them: B's keys, their fields and their expiries stay as they were.
//! The guard's local state cannot answer first: it does not know yet, so
//! the refusal (`NotHeld`) can only come from the script.
//!
//! Every kind with a holder check: reentrant, fair, fenced, both sides of a
//! read-write lock, an expiring permit, a run-once claim.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redguard::{Client, Once};

use crate::support::{KINDS, Kind, RedisServer, ms, test_builder, unique_name, wait_until};

/// One key's type, content and `PTTL`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyState {
    kind: String,
    content: Vec<Vec<u8>>,
    pttl: i64,
}

/// Every key whose name contains `name` (names here are fixed-width, so
/// none is part of another): the lock, its queue, counters, timeout keys.
pub(crate) fn snapshot(conn: &mut redis::Connection, name: &str) -> BTreeMap<Vec<u8>, KeyState> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("*{name}*"))
        .query(conn)
        .unwrap();
    if keys.is_empty() {
        return BTreeMap::new();
    }
    let mut meta = redis::pipe();
    for k in &keys {
        meta.cmd("TYPE").arg(k).cmd("PTTL").arg(k);
    }
    let meta: Vec<(String, i64)> = meta.query(conn).unwrap();
    let mut reads = redis::pipe();
    for (k, (kind, _)) in keys.iter().zip(&meta) {
        match kind.as_str() {
            "hash" => reads.cmd("HGETALL").arg(k),
            "zset" => reads.cmd("ZRANGE").arg(k).arg(0).arg(-1).arg("WITHSCORES"),
            "list" => reads.cmd("LRANGE").arg(k).arg(0).arg(-1),
            _ => reads.cmd("GET").arg(k),
        };
    }
    let contents: Vec<redis::Value> = reads.query(conn).unwrap();
    keys.into_iter()
        .zip(meta)
        .zip(contents)
        .map(|((k, (kind, pttl)), v)| {
            let mut content: Vec<Vec<u8>> = match v {
                redis::Value::Array(items) | redis::Value::Set(items) => items
                    .into_iter()
                    .map(|i| redis::from_redis_value(i).unwrap())
                    .collect(),
                redis::Value::Map(pairs) => pairs
                    .into_iter()
                    .flat_map(|(a, b)| [a, b])
                    .map(|i| redis::from_redis_value(i).unwrap())
                    .collect(),
                other => vec![redis::from_redis_value::<Vec<u8>>(other).unwrap()],
            };
            if kind == "hash" {
                // Field order is not part of the state.
                let mut pairs: Vec<Vec<u8>> = content
                    .chunks(2)
                    .map(|c| [c[0].clone(), b"=".to_vec(), c[1].clone()].concat())
                    .collect();
                pairs.sort();
                content = pairs;
            }
            (
                k,
                KeyState {
                    kind,
                    content,
                    pttl,
                },
            )
        })
        .collect()
}

/// `Err(reason)` unless `after` has the same keys and contents as
/// `before`, and every expiry only ran down (by less than `slack`), never
/// moved.
pub(crate) fn unchanged(
    before: &BTreeMap<Vec<u8>, KeyState>,
    after: &BTreeMap<Vec<u8>, KeyState>,
    slack: Duration,
) -> Result<(), String> {
    let slack = slack.as_millis() as i64;
    if before.keys().collect::<Vec<_>>() != after.keys().collect::<Vec<_>>() {
        return Err(format!(
            "keys changed: {:?} -> {:?}",
            before
                .keys()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
            after
                .keys()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>()
        ));
    }
    for (k, b) in before {
        let a = &after[k];
        let key = String::from_utf8_lossy(k);
        if a.kind != b.kind || a.content != b.content {
            return Err(format!("{key} changed: {b:?} -> {a:?}"));
        }
        let ran_down = if b.pttl < 0 {
            a.pttl == b.pttl
        } else {
            a.pttl <= b.pttl && b.pttl - a.pttl <= slack
        };
        if !ran_down {
            return Err(format!("{key}: PTTL {} -> {}", b.pttl, a.pttl));
        }
    }
    Ok(())
}

/// What a stale holder holds: a guard of one kind.
enum Held {
    Lock(redguard::LockGuard),
    Permit(redguard::PermitGuard),
    Once(redguard::OnceGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(g) => g.is_lost(),
            Held::Permit(g) => g.is_lost(),
            Held::Once(g) => g.is_lost(),
        }
    }
}

/// The lock of `kind` at `name` through `client`; for a read-write lock,
/// the side `kind` names, or the other one with `other_side`.
fn lock_of(client: &Client, kind: Kind, name: &str, other_side: bool) -> redguard::Lock {
    match (kind, other_side) {
        (Kind::Reentrant, _) => client.lock(name),
        (Kind::Fair, _) => client.fair_lock(name),
        (Kind::Fenced, _) => client.fenced_lock(name),
        (Kind::Read, false) | (Kind::Write, true) => client.read_write_lock(name).read(),
        (Kind::Write, false) | (Kind::Read, true) => client.read_write_lock(name).write(),
        (Kind::Permit | Kind::Once, _) => unreachable!("not a lock"),
    }
}

/// A takes `name` as `kind`; an admin (through `b`) deletes A's hold
/// behind A's back; B takes it. A's guard has not noticed.
fn stale_setup(a: &Client, b: &Client, kind: Kind, name: &str, other_side: bool) -> (Held, Held) {
    match kind {
        Kind::Permit => {
            let sem = a.expiring_semaphore(name);
            sem.try_set_permits(1).unwrap();
            let ga = sem.acquire().unwrap();
            let theirs = b.expiring_semaphore(name);
            assert!(theirs.release(ga.id()).unwrap(), "the admin takes it back");
            let gb = theirs.try_acquire().unwrap().expect("B takes the permit");
            (Held::Permit(ga), Held::Permit(gb))
        }
        Kind::Once => {
            let Once::Run(ga) = a.once(name, Duration::from_secs(60)).unwrap() else {
                panic!("A claims {name}");
            };
            assert!(b.lock(name).force_unlock().unwrap());
            let Once::Run(gb) = b.once(name, Duration::from_secs(60)).unwrap() else {
                panic!("B claims {name}");
            };
            (Held::Once(ga), Held::Once(gb))
        }
        _ => {
            let ga = lock_of(a, kind, name, false).lock().unwrap();
            let deleted = match kind {
                Kind::Read | Kind::Write => b.read_write_lock(name).force_unlock().unwrap(),
                _ => lock_of(b, kind, name, false).force_unlock().unwrap(),
            };
            assert!(deleted, "the admin deletes {name}");
            let gb = lock_of(b, kind, name, other_side)
                .try_lock()
                .unwrap()
                .expect("B takes the lock");
            (Held::Lock(ga), Held::Lock(gb))
        }
    }
}

/// One call of the stale holder, refused: its `extend` in even trials of a
/// kind that has one, its release otherwise (the first refusal marks the
/// guard lost, so a second call would be answered locally). `Err` names
/// what was not refused.
fn stale_call(a: Held, trial: usize) -> Result<(), String> {
    let refused = |what: &str, r: redguard::Result<()>, want: fn(&redguard::Error) -> bool| match r
    {
        Err(e) if want(&e) => Ok(()),
        other => Err(format!("A's {what}: {other:?}")),
    };
    let even = trial.is_multiple_of(2);
    match a {
        Held::Lock(g) if even => refused(
            "extend",
            g.extend(Duration::from_secs(60)),
            redguard::Error::is_not_held,
        ),
        Held::Lock(g) => refused("unlock", g.unlock(), redguard::Error::is_not_held),
        Held::Permit(g) => refused("release", g.release(), redguard::Error::is_not_held),
        // A completion refused by the script reads as a lost lease.
        Held::Once(g) if even => refused(
            "complete",
            g.complete(b"stale").map(|_| ()),
            redguard::Error::is_lock_lost,
        ),
        Held::Once(g) => refused("abandon", g.abandon(), redguard::Error::is_not_held),
    }
}

/// A4 for every kind, 150 trials each (1,050 stale holders; of the five
/// lock kinds' 750, half extend and half unlock): the stale `extend`,
/// `unlock`, permit release, run-once completion and abandon all reach
/// Redis (A's guard does not know it lost the lock, so only the script can
/// say `NotHeld`) and change nothing of B's. B takes a read-write lock back
/// on the same side in half of the trials and on the other side in the
/// rest.
#[test]
fn a4_stale_extend_and_release_are_refused_by_the_scripts_for_every_kind() {
    const LANES: usize = 3;
    const PER_LANE: usize = 50;
    let server = RedisServer::start();
    // Long leases: nothing is renewed during a trial, and A's guard learns
    // of its loss only from the refusals.
    let long = |url: &str| {
        test_builder(url)
            .watchdog_timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    };
    let a = long(&server.url());
    let b = long(&server.url());
    let prefix = unique_name("a4s");
    let t0 = Instant::now();
    let lanes: Vec<_> = KINDS
        .iter()
        .flat_map(|&kind| (0..LANES).map(move |lane| (kind, lane)))
        .map(|(kind, lane)| {
            let (a, b) = (a.clone(), b.clone());
            let mut conn = server.conn();
            let prefix = format!("{prefix}-{kind:?}-{lane:02}");
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for trial in 0..PER_LANE {
                    let name = format!("{prefix}-{trial:03}");
                    let (ga, gb) = stale_setup(&a, &b, kind, &name, trial % 4 >= 2);
                    let t = Instant::now();
                    let before = snapshot(&mut conn, &name);
                    let calls = stale_call(ga, trial);
                    let after = snapshot(&mut conn, &name);
                    let state = unchanged(&before, &after, t.elapsed() + ms(2));
                    if let Err(e) = calls.and(state) {
                        failures.push(format!("{name}: {e}"));
                    }
                    drop(gb);
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = lanes.into_iter().flat_map(|l| l.join().unwrap()).collect();
    eprintln!(
        "A4 stale holders: {} trials over {} kinds in {:?}, {} not refused or not intact",
        KINDS.len() * LANES * PER_LANE,
        KINDS.len(),
        t0.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A4, renewal side: the watchdog renews a stale holder's entry (L = 1.5
/// s, first renewal L/3 after the grant) while B holds the lock. The
/// renewal script answers 0 for every kind, so the holder is told at that
/// renewal, long before its own lease runs out on its clock (L − drift),
/// and B's keys keep their contents and expiries.
#[test]
fn a4_a_stale_renewal_is_refused_by_the_script_for_every_kind() {
    let lease = ms(1500);
    let server = RedisServer::start();
    let a = test_builder(&server.url())
        .watchdog_timeout(lease)
        .build()
        .unwrap();
    let b = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let prefix = unique_name("a4r");
    // Told at the first renewal: L/3, a round trip, room for a loaded
    // machine; a renewal that fails instead of answering 0 is only seen at
    // L − drift (1.485 s).
    let bound = lease / 3 + ms(500);
    let runs: Vec<_> = KINDS
        .iter()
        .map(|&kind| {
            let (a, b) = (a.clone(), b.clone());
            let mut conn = server.conn();
            let name = format!("{prefix}-{kind:?}");
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let (ga, gb) = stale_setup(&a, &b, kind, &name, false);
                let t = Instant::now();
                let before = snapshot(&mut conn, &name);
                let told = wait_until(lease * 2, || ga.is_lost());
                let after_ms = t0.elapsed();
                let after = snapshot(&mut conn, &name);
                let state = unchanged(&before, &after, t.elapsed() + ms(2));
                drop(gb);
                drop(ga);
                (kind, told, after_ms, state)
            })
        })
        .collect();
    let mut report = Vec::new();
    for run in runs {
        let (kind, told, after, state) = run.join().unwrap();
        report.push(format!("{kind:?} told after {after:?}"));
        assert!(told, "{kind:?}: the stale holder was never told");
        assert!(after <= bound, "{kind:?}: told after {after:?} > {bound:?}");
        state.unwrap_or_else(|e| panic!("{kind:?}: B's lock changed: {e}"));
    }
    eprintln!("A4 stale renewals (bound {bound:?}): {report:?}");
}

/// A stale read hold whose name now holds another kind of lock of the same
/// holder id: an admin `force_unlock`ed the read-write lock and the same
/// thread took a reentrant lock of that name (whose hash field is the
/// holder id, as a reader's is). The stale read release reaches the read
/// unlock script, which refuses it: a hash without a mode is no read-write
/// lock, so the reentrant lock keeps its field and its expiry.
#[test]
fn a4_a_stale_read_release_leaves_a_reentrant_lock_of_the_same_holder_alone() {
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let name = unique_name("a4-kind");
    let read = client.read_write_lock(&name).read().lock().unwrap();
    assert!(client.read_write_lock(&name).force_unlock().unwrap());
    let reentrant = client.lock(&name).lock().unwrap();
    let mut conn = server.conn();
    let t = Instant::now();
    let before = snapshot(&mut conn, &name);
    let released = read.unlock();
    let after = snapshot(&mut conn, &name);
    assert!(
        released.as_ref().is_err_and(redguard::Error::is_not_held),
        "the stale read release: {released:?}"
    );
    unchanged(&before, &after, t.elapsed() + ms(2)).unwrap();
    reentrant.unlock().unwrap();
}
