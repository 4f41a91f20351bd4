//! `status` and `list` on a Cluster: a waiter counts once, the holder's
//! own subscription (it listens for a force unlock) not at all, wherever
//! the lock's slot lives; and `list` reads a slot being migrated, the keys
//! moved already included (the importing node answers them after
//! `ASKING`).

use std::time::Duration;

use redguard::Client;

use super::{builder, name_on, slot};
use crate::cli::{redguard, run};
use crate::support::{RedisCluster, unique_name, wait_until};

/// Both cases, each on a bed shared with the other cluster cases.
pub(super) fn listing(bed: &RedisCluster) {
    crate::support::timed_case("holders_own_subscriptions_are_not_waiters", || {
        holders_own_subscriptions_are_not_waiters(bed);
    });
    crate::support::timed_case("list_reads_a_migrating_slot", || {
        list_reads_a_migrating_slot(bed);
    });
}

/// Subscribers of lock `name` as `status` counts them: the library's
/// inspection, `list_locks`, and `redguard status --json`.
fn counted(bed: &RedisCluster, reader: &Client, name: &str) -> (Option<u64>, Option<u64>, u64) {
    let listed = reader.list_locks(name, false).unwrap().found;
    let mut cmd = redguard(&bed.url());
    cmd.args(["status", name, "--json"]);
    let out = run(cmd);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    (
        reader.lock(name).inspect().unwrap().subscribers,
        listed.first().and_then(|l| l.subscribers),
        v["subscribers"].as_u64().unwrap_or(u64::MAX),
    )
}

/// A lock held by one redguard client (listening on its channel for a
/// force unlock once held 100 ms) and waited for by another: one waiter,
/// on the master where the clients' classic pub/sub connections sit (that
/// of slot 0) and on another. Each redguard client subscribes there with
/// a classic and a sharded subscription, which were counted apiece (and
/// the holder's as waiters): 3 for this one waiter.
fn holders_own_subscriptions_are_not_waiters(bed: &RedisCluster) {
    let classic = bed.master_of_slot(0);
    let other = bed.masters().into_iter().find(|&m| m != classic).unwrap();
    let holder = builder(&bed.url())
        .program("listing-holder")
        .build()
        .unwrap();
    let waiter = builder(&bed.url()).build().unwrap();
    let reader = builder(&bed.url()).build().unwrap();
    for master in [classic, other] {
        let name = name_on(bed, master, "listing-subs");
        let guard = holder.lock(&name).lock().unwrap();
        // The hold is listened for and its start recorded.
        assert!(
            wait_until(Duration::from_secs(5), || {
                let info = reader.lock(&name).inspect().unwrap();
                info.held_for(guard.holder_id())
                    .is_some_and(|d| d >= Duration::from_millis(200))
            }),
            "{name}: no recorded hold start"
        );
        assert!(
            wait_until(Duration::from_secs(5), || counted(bed, &reader, &name)
                == (Some(0), Some(0), 0)),
            "{name} on master {master} (classic pub/sub on {classic}): the holder alone \
             counted {:?}",
            counted(bed, &reader, &name)
        );
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                let got = waiter.lock(&name).try_lock_for(Duration::from_secs(20));
                got.unwrap()
                    .expect("granted after the holder's release")
                    .unlock()
                    .unwrap();
            });
            assert!(
                wait_until(Duration::from_secs(5), || counted(bed, &reader, &name)
                    == (Some(1), Some(1), 1)),
                "{name} on master {master} (classic pub/sub on {classic}): one waiter \
                 counted {:?}",
                counted(bed, &reader, &name)
            );
            drop(guard);
            waiting.join().unwrap();
        });
    }
    holder.shutdown();
    waiter.shutdown();
}

/// `list` while a slot migrates, one of its two locks moved: both listed
/// with their holder, by the CLI (which exited 69 on `MOVED`) and by the
/// library (which listed the moved one as a lock without holders).
fn list_reads_a_migrating_slot(bed: &RedisCluster) {
    let prefix = unique_name("listing-moving");
    let from = bed.masters()[0];
    let to = bed.masters().into_iter().find(|&m| m != from).unwrap();
    let moved = name_on(bed, from, &prefix);
    let s = slot(moved.as_bytes());
    let stays = (0..200_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| *n != moved && slot(n.as_bytes()) == s)
        .expect("a second name in the slot");
    let holder = "5ad00000-0000-4000-8000-00000000115d:7";
    for name in [&moved, &stays] {
        let () = bed
            .node(from)
            .cmd("HSET", &[name.as_bytes(), holder.as_bytes(), b"1"]);
        let _: bool = bed.node(from).cmd("PEXPIRE", &[name.as_bytes(), b"60000"]);
    }
    bed.begin_migration(s, from, to);
    let port = bed.node(to).port().to_string();
    let _: redis::Value = bed.node(from).cmd(
        "MIGRATE",
        &[
            b"127.0.0.1",
            port.as_bytes(),
            moved.as_bytes(),
            b"0",
            b"5000",
        ],
    );
    let pattern = format!("{prefix}*");
    let mut cmd = redguard(&bed.url());
    cmd.args(["list", &pattern, "--json", "--sort", "name"]);
    let out = run(cmd);
    let reader = builder(&bed.url()).build().unwrap();
    let mut listed = reader.list_locks(&pattern, false).unwrap().found;
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    // The bed's slot is given to its new owner before any assertion can
    // fail, so that the cases after this one find a settled cluster.
    bed.move_keys(s, from, to);
    bed.end_migration(s, from, to);
    bed.wait_settled();
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mut names = [moved.as_str(), stays.as_str()];
    names.sort_unstable();
    let got: Vec<(&str, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or(""),
                l["holders"][0]["id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(got, [(names[0], holder), (names[1], holder)], "{v}");
    let got: Vec<(Vec<u8>, Vec<String>)> = listed
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.holders
                    .iter()
                    .map(|(h, _)| h.as_str().to_owned())
                    .collect(),
            )
        })
        .collect();
    let want: Vec<(Vec<u8>, Vec<String>)> = names
        .iter()
        .map(|n| (n.as_bytes().to_vec(), vec![holder.to_owned()]))
        .collect();
    assert_eq!(got, want);
}
