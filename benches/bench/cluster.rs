//! The Cluster row: S1/S2/S3 on a private 3-master cluster (the test bed of
//! `tests/integration/support/cluster.rs`), redguard beside a raw redis-rs
//! cluster floor (`redis::cluster::ClusterConnection` per worker, the same
//! two floor scripts), plus S1/S3 A/B ratios and W1 on the cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redguard::Client;
use serde_json::{Value, json};

use crate::ab;
use crate::protocol::{FLOOR_LOCK_LUA, FLOOR_UNLOCK_LUA, LOCK_TTL_MS, now_ns};
use crate::scenarios;
use crate::stats::{pct, quartiles};
use crate::support::RedisCluster;

/// The hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole
/// key, modulo 16 384).
fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let len = key[open + 1..].iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &key[open + 1..open + 1 + len])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % 16_384
}
use crate::workers::{Factory, Worker, guard_factory};

/// The floor on a cluster: one redis-rs `ClusterConnection` per worker,
/// two `EVALSHA` round trips per cycle, routed by redis-rs.
struct ClusterFloor {
    con: redis::cluster::ClusterConnection,
    token: String,
    lock_sha: String,
    unlock_sha: String,
    names: Vec<String>,
}

impl ClusterFloor {
    fn eval(&mut self, sha: &str, name: &str) -> Result<Option<i64>, String> {
        redis::cmd("EVALSHA")
            .arg(sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())
    }

    fn cycle_on(&mut self, name: &str) -> Result<(), String> {
        let (lock, unlock) = (self.lock_sha.clone(), self.unlock_sha.clone());
        if self.eval(&lock, name)?.is_some() {
            return Err("lock busy".into());
        }
        self.eval(&unlock, name)?
            .map(|_| ())
            .ok_or_else(|| "unlock: not owner".into())
    }
}

impl Worker for ClusterFloor {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        let name = self.names[i % self.names.len()].clone();
        self.cycle_on(&name)
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        self.cycle_on(name)
    }

    fn contended(&mut self, hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        let name = self.names[0].clone();
        let lock = self.lock_sha.clone();
        loop {
            if self.eval(&lock, &name)?.is_none() {
                break;
            }
            if now_ns() >= hard {
                return Ok(false);
            }
        }
        held();
        let unlock = self.unlock_sha.clone();
        self.eval(&unlock, &name)?;
        Ok(true)
    }
}

fn floor_factory(bed: &RedisCluster) -> Factory {
    let seeds = bed.seeds();
    // The floor scripts on every master, once.
    let mut shas = (String::new(), String::new());
    for master in bed.masters() {
        let mut con = bed.node(master).conn();
        shas = (
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(FLOOR_LOCK_LUA)
                .query(&mut con)
                .expect("SCRIPT LOAD"),
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(FLOOR_UNLOCK_LUA)
                .query(&mut con)
                .expect("SCRIPT LOAD"),
        );
    }
    Arc::new(move |w, names| {
        let con = redis::cluster::ClusterClient::new(seeds.clone())
            .and_then(|c| c.get_connection())
            .map_err(|e| e.to_string())?;
        Ok(Box::new(ClusterFloor {
            con,
            token: format!("floor:{}:w{w}", std::process::id()),
            lock_sha: shas.0.clone(),
            unlock_sha: shas.1.clone(),
            names: names.to_vec(),
        }) as Box<dyn Worker>)
    })
}

/// Cycles per second and median latency of an S1 or S3 document.
fn summary(doc: &Value) -> Value {
    let mut lat: Vec<u64> = doc["lat_ns"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    lat.sort_unstable();
    let elapsed = doc["elapsed_ns"]
        .as_u64()
        .or_else(|| Some(doc["t_end_ns"].as_u64()? - doc["t_start_ns"].as_u64()?))
        .unwrap_or(1)
        .max(1);
    json!({"cycles": lat.len(), "cycles_per_s": lat.len() as f64 / (elapsed as f64 / 1e9),
           "p50_us": pct(&lat, 0.50).map(|n| n as f64 / 1000.0),
           "p99_us": pct(&lat, 0.99).map(|n| n as f64 / 1000.0),
           "errors": doc["errors"]})
}

/// Acquisitions per second of an S2 document.
fn s2_summary(doc: &Value) -> Value {
    let events = doc["events"].as_array().map_or(0, Vec::len);
    let span = doc["t_end_ns"].as_u64().unwrap_or(1) - doc["t_start_ns"].as_u64().unwrap_or(0);
    json!({"acquisitions": events, "per_s": events as f64 / (span.max(1) as f64 / 1e9),
           "errors": doc["errors"], "acquire_failures": doc["acquire_failures"]})
}

/// W1 on the cluster: one client holds `n` locks spread over the masters
/// with a `lease` watchdog for three renewal periods; the lowest PTTL seen
/// per master and the renewal round trips per master per tick.
fn w1(bed: &RedisCluster, n: usize, lease: Duration) -> Value {
    let client = Client::builder()
        .url(&bed.url())
        .watchdog_timeout(lease)
        .response_timeout((lease / 3).min(Duration::from_secs(3)))
        .build()
        .expect("client");
    let names: Vec<String> = (0..n).map(|i| format!("bench:cw1:k{i}")).collect();
    let t0 = Instant::now();
    let guards: Vec<_> = names
        .iter()
        .filter_map(|n| client.lock(n).lock().ok())
        .collect();
    let acquire_s = t0.elapsed().as_secs_f64();
    let held = guards.len();
    // Names by master (port), for per-master PTTL sampling.
    let mut by_master: HashMap<u16, Vec<&String>> = HashMap::new();
    for name in &names {
        let master = bed.master_of_slot(key_slot(name.as_bytes()));
        by_master
            .entry(bed.node(master).port())
            .or_default()
            .push(name);
    }
    let stats0 = client.stats();
    let hold = lease; // three renewal periods
    let until = Instant::now() + hold;
    let mut lowest: HashMap<u16, i64> = HashMap::new();
    let mut missing = 0u64;
    let mut conns: HashMap<u16, redis::Connection> = by_master
        .keys()
        .map(|&port| (port, bed.node(bed.index_of_port(port)).conn()))
        .collect();
    while Instant::now() < until {
        for (master, keys) in &by_master {
            let con = conns.get_mut(master).expect("connection");
            for chunk in keys.chunks(500) {
                let mut pipe = redis::pipe();
                for k in chunk {
                    pipe.cmd("PTTL").arg(k.as_str());
                }
                let replies: Vec<i64> = pipe.query(con).unwrap_or_default();
                for ms in replies {
                    if ms < 0 {
                        missing += 1;
                    } else {
                        let low = lowest.entry(*master).or_insert(i64::MAX);
                        *low = (*low).min(ms);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats1 = client.stats();
    let ticks = (stats1.renewal_ticks - stats0.renewal_ticks).max(1);
    let trips = stats1.renewal_round_trips - stats0.renewal_round_trips;
    let masters = by_master.len().max(1);
    let lease_ms = lease.as_millis() as f64;
    let min_ratio = lowest
        .values()
        .map(|&l| l as f64 / lease_ms)
        .fold(f64::INFINITY, f64::min);
    drop(guards);
    json!({"n": n, "held": held, "lease_ms": lease.as_millis() as u64, "acquire_s": acquire_s,
           "masters": masters,
           "keys_per_master": by_master.iter().map(|(m, k)| (m.to_string(), k.len())).collect::<HashMap<_, _>>(),
           "lowest_pttl_ms_per_master": lowest.iter().map(|(m, l)| (m.to_string(), *l)).collect::<HashMap<_, _>>(),
           "min_pttl_over_lease": min_ratio, "missing_samples": missing,
           "renewals": stats1.renewals - stats0.renewals, "renewal_ticks": ticks,
           "renewal_round_trips": trips,
           "round_trips_per_master_per_tick": trips as f64 / ticks as f64 / masters as f64})
}

/// Runs the whole Cluster row on a private bed.
pub(crate) fn run(ab_rounds: usize, w1_n: usize) -> Value {
    let bed = RedisCluster::start();
    let url = bed.url();
    let client = Client::open(&url).expect("cluster client");
    let (sut, floor) = (guard_factory(&client), floor_factory(&bed));
    let row = |f: &Factory| {
        json!({"s1": summary(&scenarios::run_s1(f)),
               "s2": s2_summary(&scenarios::run_s2(f)),
               "s3": summary(&scenarios::run_s3(f))})
    };
    let redguard = row(&sut);
    let raw = row(&floor);
    let ab = json!({
        "s1": ab::run_ab_s1(&sut, &floor, "bench:ab:s1", ab_rounds, 1000),
        "s3": ab::run_ab_s3(&sut, &floor, ab_rounds / 2, Duration::from_millis(500)),
    });
    let pubsub = client.stats().pubsub_connections;
    let mut ratios = Vec::new();
    for s in ["s1", "s3"] {
        if let (Some(a), Some(b)) = (
            redguard[s]["cycles_per_s"].as_f64(),
            raw[s]["cycles_per_s"].as_f64(),
        ) {
            ratios.push((s, a / b));
        }
    }
    let mut r: Vec<f64> = ratios.iter().map(|(_, r)| *r).collect();
    let w1 = w1(&bed, w1_n, Duration::from_secs(3));
    json!({"cluster": {
        "masters": bed.masters().len(), "redguard": redguard, "floor": raw,
        "separate_run_ratios": ratios.into_iter().collect::<HashMap<_, _>>(),
        "separate_run_ratio_quartiles": quartiles(&mut r),
        "ab": ab, "pubsub_connections": pubsub, "w1": w1,
    }})
}
