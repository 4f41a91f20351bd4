//! Calls started while a master is down (issue: "a call started while a
//! master is down never finds the promoted replica"). A master that still
//! has a replica is `kill -9`ed; 300 ms later, while the cluster has not yet
//! promoted the replica, new calls start for names on that master, from
//! clients whose URL names one *other* live master as its only seed:
//!
//! * a library `lock()` from a client that served the dead master before
//!   (its pool and slot map point at the dead node);
//! * a `try_lock_for` from a client built after the kill;
//! * a waiter on a lock held across the failover, woken by its release;
//! * the CLI: `exec -n` and `exec --wait 20s`.
//!
//! Each must succeed within the promotion + 1 s: a call that meets a dead
//! node reloads the slot map from the nodes it knows and goes on, within
//! its own deadline.

use std::process::{Command, Output};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{builder, name_on};
use crate::support::RedisCluster;

/// How long after the promotion is agreed a call started in the gap may
/// take to succeed.
const AFTER_PROMOTION: Duration = Duration::from_secs(1);

/// A master with a live replica, or `None` when the bed has none left.
fn master_with_replica(bed: &RedisCluster) -> Option<usize> {
    bed.masters().into_iter().find(|&m| {
        let id = bed.id_of(m);
        bed.nodes_seen_by(m)
            .iter()
            .any(|n| n.master_id.as_deref() == Some(&id) && !n.failed)
    })
}

/// `redguard exec` with `args`, for `name`, against `url`.
fn cli_exec(url: &str, args: &[&str], name: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redguard"))
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .env_remove("REDGUARD_LOG")
        .args(["--url", url, "exec"])
        .args(args)
        .args([name, "--", "true"])
        .output()
        .unwrap()
}

/// One call started in the gap: its label, and when it ended (or why it
/// failed).
type Call = (&'static str, JoinHandle<Result<Instant, String>>);

pub(super) fn new_calls_find_the_promoted_replica(bed: &mut RedisCluster) {
    let Some(victim) = master_with_replica(bed) else {
        panic!("no master with a live replica is left for this case");
    };
    let other = bed
        .masters()
        .into_iter()
        .find(|&m| m != victim)
        .expect("another master");
    // One seed only, and not the node that dies.
    let one_seed = format!("redis+cluster://127.0.0.1:{}/", bed.node(other).port());
    let lease = Duration::from_secs(30);
    // A client that has served the victim: its map and pool point there.
    let warm = builder(&one_seed).watchdog_timeout(lease).build().unwrap();
    warm.lock(name_on(bed, victim, "gap-warm"))
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
    // A lock held across the failover (replicated before the kill) by a
    // client of its own, released once the replica is promoted.
    let holder = builder(&bed.url()).watchdog_timeout(lease).build().unwrap();
    let held_name = name_on(bed, victim, "gap-held");
    let held = holder.lock(&held_name).lock().unwrap();
    let replica = bed.replica_of(victim);
    let mut on_replica = bed.node(replica).conn();
    let () = redis::cmd("READONLY").query(&mut on_replica).unwrap();
    assert!(
        crate::support::wait_until(Duration::from_secs(5), || redis::cmd("EXISTS")
            .arg(&held_name)
            .query::<bool>(&mut on_replica)
            .unwrap()),
        "the held lock did not reach the replica"
    );
    let names: Vec<String> = (0..4).map(|_| name_on(bed, victim, "gap")).collect();

    let killed = Instant::now();
    let mut calls: Vec<Call> = Vec::new();
    bed.kill_master_then(victim, |_| {
        crate::support::sleep(Duration::from_millis(300));
        let (client, name) = (warm.clone(), names[0].clone());
        calls.push((
            "library lock() on a client that served the dead master",
            std::thread::spawn(move || {
                let guard = client.lock(&name).lock().map_err(|e| format!("{e:?}"))?;
                let at = Instant::now();
                guard.unlock().map_err(|e| format!("{e:?}"))?;
                Ok(at)
            }),
        ));
        let (url, name) = (one_seed.clone(), names[1].clone());
        calls.push((
            "library try_lock_for on a client built in the gap",
            std::thread::spawn(move || {
                let client = builder(&url).build().map_err(|e| format!("{e:?}"))?;
                let got = client
                    .lock(&name)
                    .try_lock_for(Duration::from_secs(20))
                    .map_err(|e| format!("{e:?}"))?;
                let at = Instant::now();
                got.ok_or("timed out")?
                    .unlock()
                    .map_err(|e| format!("{e:?}"))?;
                Ok(at)
            }),
        ));
        let (client, name) = (warm.clone(), held_name.clone());
        calls.push((
            "library waiter on the lock held across the failover",
            std::thread::spawn(move || {
                let got = client
                    .lock(&name)
                    .try_lock_for(Duration::from_secs(20))
                    .map_err(|e| format!("{e:?}"))?;
                let at = Instant::now();
                got.ok_or("timed out")?
                    .unlock()
                    .map_err(|e| format!("{e:?}"))?;
                Ok(at)
            }),
        ));
        for (label, args, name) in [
            ("CLI exec -n", &["-n"][..], names[2].clone()),
            (
                "CLI exec --wait 20s",
                &["--wait", "20s"][..],
                names[3].clone(),
            ),
        ] {
            let url = one_seed.clone();
            calls.push((
                label,
                std::thread::spawn(move || {
                    let out = cli_exec(&url, args, &name);
                    let at = Instant::now();
                    if out.status.success() {
                        Ok(at)
                    } else {
                        Err(format!(
                            "{}: {}",
                            out.status,
                            String::from_utf8_lossy(&out.stderr).trim()
                        ))
                    }
                }),
            ));
        }
    });
    let promoted = Instant::now();
    eprintln!(
        "failover gap: promotion agreed {:?} after kill -9",
        promoted - killed
    );
    held.unlock().unwrap();
    let mut late = Vec::new();
    for (label, call) in calls {
        let at = call.join().unwrap();
        match at {
            Ok(at) => {
                eprintln!(
                    "failover gap: {label}: done {:?} after kill -9",
                    at - killed
                );
                if at > promoted + AFTER_PROMOTION {
                    late.push(format!("{label}: {:?} after the promotion", at - promoted));
                }
            }
            Err(e) => late.push(format!("{label}: {e}")),
        }
    }
    assert!(
        late.is_empty(),
        "calls started in the failover gap: {late:#?}"
    );
}
