//! The sharded subscriptions' own upkeep on a Redis 7 Cluster
//! (`src/subscriber/sharded.rs`): a channel is `SUNSUBSCRIBE`d when its
//! last waiter leaves, a broken sharded connection is seen and its channels
//! subscribed again after a pause, a refused `SSUBSCRIBE` is retried with a
//! growing pause, and one redguard unlock, heard on both kinds, wakes a
//! waiter once. Each case uses a lock held by a foreign holder with a 30 s
//! lease and waiters that poll every 10 s, so only pub/sub wakes them.

use std::time::{Duration, Instant};

use redguard::Client;

use super::{builder, calls, name_on};
use crate::support::{RedisCluster, RedisServer, ms, sleep, wait_until};

/// Redisson's channel of lock `name`.
fn channel_of(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// Sharded subscribers of `channel` on `node` (`PUBSUB SHARDNUMSUB`).
fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let reply: Vec<redis::Value> = node.cmd("PUBSUB", &[b"SHARDNUMSUB", channel.as_bytes()]);
    match reply.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("PUBSUB SHARDNUMSUB: {other:?}"),
    }
}

/// `total_connections_received` of `node` (`INFO stats`).
fn connections_received(node: &RedisServer) -> u64 {
    let info: String = node.cmd("INFO", &[b"stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received")
}

/// A lock on master `master` held by a foreign (Redisson-layout) holder
/// with a 30 s lease: nothing of redguard's renews or releases it.
fn foreign_hold(bed: &RedisCluster, master: usize, prefix: &str) -> String {
    let name = name_on(bed, master, prefix);
    let owner = bed.node(master);
    let () = owner.cmd(
        "HSET",
        &[
            name.as_bytes(),
            b"5ad00000-0000-4000-8000-0000000000d1:1",
            b"1",
        ],
    );
    let _: bool = owner.cmd("PEXPIRE", &[name.as_bytes(), b"30000"]);
    name
}

/// Frees a foreign hold and tells its waiters, as Redisson 3.2x does on a
/// Cluster (`SPUBLISH` only).
fn foreign_release(owner: &RedisServer, name: &str) {
    let _: i64 = owner.cmd("DEL", &[name.as_bytes()]);
    let _: i64 = owner.cmd("SPUBLISH", &[channel_of(name).as_bytes(), b"0"]);
}

/// Waiters polling every 10 s: only a message wakes them in time.
fn waiters(url: &str) -> Client {
    builder(url)
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A waiter of `client` on a fresh foreign hold on `master` (see
/// [`foreign_hold`]), waiting up to `wait`, returned once its channel is
/// `SSUBSCRIBE`d there: the lock's name and the waiter's thread, which
/// answers when it got the lock (and released it), or `None`.
fn sharded_waiter(
    bed: &RedisCluster,
    client: &Client,
    master: usize,
    prefix: &str,
    wait: Duration,
) -> (String, std::thread::JoinHandle<Option<Instant>>) {
    let name = foreign_hold(bed, master, prefix);
    let lock = client.lock(&name);
    let waiter = std::thread::spawn(move || {
        let guard = lock.try_lock_for(wait).unwrap()?;
        let at = Instant::now();
        guard.unlock().unwrap();
        Some(at)
    });
    let channel = channel_of(&name);
    assert!(
        wait_until(Duration::from_secs(5), || shard_subscribers(
            bed.node(master),
            &channel
        ) == 1),
        "never SSUBSCRIBEd"
    );
    (name, waiter)
}

pub(super) fn sharded_upkeep(bed: &RedisCluster) {
    let master = bed.masters()[0];
    unsubscribed_when_the_last_waiter_leaves(bed, master);
    a_broken_sharded_connection_is_subscribed_again(bed, master);
    a_refused_ssubscribe_is_retried_with_a_growing_pause(bed, master);
    one_unlock_heard_on_both_kinds_wakes_once(bed, master);
}

/// A waiter that leaves (its wait ran out) takes its channel's sharded
/// subscription with it: `PUBSUB SHARDNUMSUB` on the slot's master goes
/// back to 0.
fn unsubscribed_when_the_last_waiter_leaves(bed: &RedisCluster, master: usize) {
    let client = waiters(&bed.url());
    let (name, waiter) = sharded_waiter(bed, &client, master, "sh-unsub", ms(1_500));
    let (owner, channel) = (bed.node(master), channel_of(&name));
    assert!(
        waiter.join().unwrap().is_none(),
        "the foreign hold was taken"
    );
    let left = Instant::now();
    let gone = wait_until(Duration::from_secs(3), || {
        shard_subscribers(owner, &channel) == 0
    });
    eprintln!(
        "sharded: the waiter left; its channel SUNSUBSCRIBEd: {gone} after {:?}",
        left.elapsed()
    );
    assert!(
        gone,
        "the channel stayed SSUBSCRIBEd after its last waiter left"
    );
    let _: i64 = owner.cmd("DEL", &[name.as_bytes()]);
}

/// The node's sharded pub/sub connection is killed under a waiter. The
/// reader sees the connection broken, and its channel is subscribed again
/// after the first retry pause (50–100 ms, never at once), on a fresh
/// connection; a `SPUBLISH`-only release then wakes the waiter at once.
/// Meanwhile a quiet wait costs no connection: a read that times out
/// (every 5 ms) is not a broken connection.
fn a_broken_sharded_connection_is_subscribed_again(bed: &RedisCluster, master: usize) {
    let client = waiters(&bed.url());
    let (name, waiter) = sharded_waiter(bed, &client, master, "sh-broken", ms(20_000));
    let (owner, channel) = (bed.node(master), channel_of(&name));

    // A quiet second: no new connection to the slot's master but the one
    // the second reading comes on.
    let before = connections_received(owner);
    sleep(Duration::from_secs(1));
    let quiet = connections_received(owner) - before - 1;
    eprintln!("sharded: {quiet} connections in a quiet second");
    assert!(quiet <= 1, "{quiet} connections in a quiet second");

    // Kill the sharded connections alone (the classic one may be on this
    // node too: its reconnect would subscribe the channel again by itself).
    let list: String = owner.cmd("CLIENT", &[b"LIST", b"TYPE", b"pubsub"]);
    let ids: Vec<String> = list
        .lines()
        .filter(|l| l.contains(" cmd=ssubscribe "))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect();
    // Another client's, closing as it is dropped, may still be listed.
    assert!(!ids.is_empty(), "no sharded connection: {list}");
    let killed = Instant::now();
    for id in &ids {
        let _: i64 = owner.cmd("CLIENT", &[b"KILL", b"ID", id.as_bytes()]);
    }
    let mut again = None;
    for _ in 0..2_000 {
        if shard_subscribers(owner, &channel) == 1 {
            again = Some(killed.elapsed());
            break;
        }
        if killed.elapsed() > Duration::from_secs(3) {
            break;
        }
        sleep(ms(1));
    }
    let released = Instant::now();
    foreign_release(owner, &name);
    let woken = waiter
        .join()
        .unwrap()
        .expect("not woken")
        .saturating_duration_since(released);
    eprintln!(
        "sharded: connection killed, subscribed again after {again:?}; woken {woken:?} after a SPUBLISH-only release"
    );
    let again = again.expect("the channel was not subscribed again within 3 s");
    assert!(
        again >= ms(45),
        "subscribed again {again:?} after the kill, before the first pause"
    );
    assert!(
        woken < Duration::from_secs(2),
        "woken {woken:?} after the release"
    );
}

/// A user whose ACL refuses `SSUBSCRIBE`: the channel's subscription is
/// tried again after pauses that grow from 100 ms to 2 s, so a 3 s wait
/// costs at most 7 refused attempts on the slot's master (every 5 ms tick
/// would be 600), and at least 2 (it is retried at all).
fn a_refused_ssubscribe_is_retried_with_a_growing_pause(bed: &RedisCluster, master: usize) {
    let args: [&[u8]; 8] = [
        b"SETUSER",
        b"nossub",
        b"on",
        b">nossub-pw",
        b"~*",
        b"&*",
        b"+@all",
        b"-ssubscribe",
    ];
    for i in 0..6 {
        let () = bed.node(i).cmd("ACL", &args);
    }
    let url = bed
        .url()
        .replace("redis+cluster://", "redis+cluster://nossub:nossub-pw@");
    let client = waiters(&url);
    let name = foreign_hold(bed, master, "sh-refused");
    let owner = bed.node(master);
    let refused = |owner: &RedisServer| {
        owner
            .commandstats()
            .get("ssubscribe")
            .map_or(0, |s| s.rejected)
    };
    let before = refused(owner);
    let waited = Instant::now();
    assert!(
        client
            .lock(&name)
            .try_lock_for(ms(3_000))
            .unwrap()
            .is_none()
    );
    let waited = waited.elapsed();
    let tries = refused(owner) - before;
    eprintln!("sharded: SSUBSCRIBE refused {tries} times in a {waited:?} wait");
    for i in 0..6 {
        let _: i64 = bed.node(i).cmd("ACL", &[b"DELUSER", b"nossub"]);
    }
    let _: i64 = owner.cmd("DEL", &[name.as_bytes()]);
    assert!(
        (2..=7).contains(&tries),
        "{tries} refused SSUBSCRIBEs in {waited:?}"
    );
}

/// One redguard unlock is published on both kinds when the slot's master
/// counts a classic listener; a waiter hears it twice and must wake once.
/// Here the two messages go out one by one (`PUBLISH`, the waiter's
/// attempt, then `SPUBLISH`), in both orders: each pair costs exactly one
/// acquire attempt (a script call on the slot's master), the first message
/// of each pair waking it whichever its kind.
fn one_unlock_heard_on_both_kinds_wakes_once(bed: &RedisCluster, master: usize) {
    let client = waiters(&bed.url());
    let (name, waiter) = sharded_waiter(bed, &client, master, "sh-pair", ms(30_000));
    let (owner, channel) = (bed.node(master), channel_of(&name));
    assert!(wait_until(Duration::from_secs(5), || client
        .stats()
        .waiters
        == 1));
    let attempts = || calls(bed, master, "evalsha") + calls(bed, master, "eval");
    // Once subscribed the waiter attempts once more (an unlock may have
    // raced its subscription): that attempt must not count as a wake-up.
    let mut seen = attempts();
    for _ in 0..20 {
        sleep(ms(250));
        let now = attempts();
        if now == seen {
            break;
        }
        seen = now;
    }
    let publish = |kind: &str| {
        let _: i64 = owner.cmd(kind, &[channel.as_bytes(), b"0"]);
    };
    let mut per_pair = Vec::new();
    for round in 0..6 {
        let (first, second) = if round % 2 == 0 {
            ("PUBLISH", "SPUBLISH")
        } else {
            ("SPUBLISH", "PUBLISH")
        };
        let before = attempts();
        publish(first);
        let woke = wait_until(Duration::from_secs(2), || attempts() > before);
        publish(second);
        // What does not happen needs a window: a second wake-up would
        // attempt within a few ms.
        sleep(ms(300));
        per_pair.push((first, woke, attempts() - before));
    }
    foreign_release(owner, &name);
    assert!(waiter.join().unwrap().is_some(), "not woken");
    eprintln!("sharded: acquire attempts per unlock heard on both kinds: {per_pair:?}");
    for (first, woke, n) in per_pair {
        assert!(woke, "a {first} did not wake the waiter");
        assert_eq!(
            n, 1,
            "one unlock heard twice ({first} first) woke {n} times"
        );
    }
}
