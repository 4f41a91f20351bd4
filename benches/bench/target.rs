//! Where the driver's load goes with `--port` or `--cluster-seeds`: one
//! redis-server, or a running Redis Cluster given by seed ports
//! (`CLUSTER=1 scripts/bench` starts a 3-master one). A cluster's floor is
//! the same two-script cycle through redis-rs's blocking `ClusterConnection`
//! (each script has one key, so every call is routed by that key's slot).

use std::time::Duration;

use crate::protocol::{FLOOR_LOCK_LUA, FLOOR_UNLOCK_LUA, LOCK_TTL_MS, now_ns};
use crate::workers::{Factory, Worker};

/// The server(s) under test.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// The URL redguard's client opens (`redis://` or `redis+cluster://`).
    pub(crate) client_url: String,
    /// Plain `redis://` URLs of the nodes that hold data: the one server,
    /// or the cluster's masters.
    pub(crate) nodes: Vec<String>,
    /// `true` for a cluster.
    pub(crate) cluster: bool,
    /// The cluster floor's unlock also `PUBLISH`es, as redguard's (and
    /// Redisson's) unlock does: on a cluster that message goes to every
    /// node over the cluster bus.
    pub(crate) floor_publish: bool,
}

impl Target {
    /// One redis-server on 127.0.0.1:`port`.
    pub(crate) fn single(port: u16) -> Target {
        let url = format!("redis://127.0.0.1:{port}/");
        Target {
            client_url: url.clone(),
            nodes: vec![url],
            cluster: false,
            floor_publish: false,
        }
    }

    /// A cluster from seed ports on 127.0.0.1: every seed is asked for its
    /// role, and the masters among them hold the data.
    pub(crate) fn cluster(seeds: &[u16]) -> Result<Target, String> {
        let hosts: Vec<String> = seeds.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut masters = Vec::new();
        for host in &hosts {
            let url = format!("redis://{host}/");
            let mut con = crate::observe::admin(&url);
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut con)
                .map_err(|e| format!("ROLE on {host}: {e}"))?;
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                masters.push(url);
            }
        }
        if masters.is_empty() {
            return Err("no master among the cluster seeds".into());
        }
        Ok(Target {
            client_url: format!("redis+cluster://{}/", hosts.join(",")),
            nodes: masters,
            cluster: true,
            floor_publish: false,
        })
    }

    /// Empties every data node.
    pub(crate) fn flushall(&self) {
        for url in &self.nodes {
            let mut con = crate::observe::admin(url);
            let _: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(&mut con);
        }
    }

    /// `calls` of `cmd` summed over the data nodes.
    pub(crate) fn cmd_calls(&self, cmd: &str) -> u64 {
        self.nodes
            .iter()
            .map(|url| crate::observe::cmd_calls(&mut crate::observe::admin(url), cmd))
            .sum()
    }

    /// A connection that answers `PTTL` for any key.
    pub(crate) fn sampler(&self) -> Sampler {
        if self.cluster {
            Sampler::Cluster(Box::new(
                cluster_connection(&self.nodes).expect("cluster connection"),
            ))
        } else {
            Sampler::Single(crate::observe::admin(&self.nodes[0]))
        }
    }

    /// The raw floor's workers on this target.
    pub(crate) fn floor_factory(&self) -> Factory {
        if self.cluster {
            cluster_floor_factory(&self.nodes, self.floor_publish)
        } else {
            crate::workers::floor_factory(&self.nodes[0])
        }
    }
}

/// A connection for `PTTL` look-ups.
pub(crate) enum Sampler {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Sampler {
    /// `PTTL` of each name, in one pipeline (a cluster pipeline: one per
    /// node).
    pub(crate) fn pttls(&mut self, names: &[String]) -> redis::RedisResult<Vec<i64>> {
        match self {
            Sampler::Single(con) => {
                let mut pipe = redis::pipe();
                for name in names {
                    pipe.cmd("PTTL").arg(name);
                }
                pipe.query(con)
            }
            Sampler::Cluster(con) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for name in names {
                    pipe.cmd("PTTL").arg(name);
                }
                pipe.query(con.as_mut())
            }
        }
    }
}

fn cluster_connection(nodes: &[String]) -> redis::RedisResult<redis::cluster::ClusterConnection> {
    redis::cluster::ClusterClient::builder(nodes.to_vec())
        .connection_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_secs(10))
        .build()?
        .get_connection()
}

/// The floor on a cluster: one `ClusterConnection` per worker, two
/// `EVALSHA` round trips per cycle, each routed by its one key.
struct ClusterFloorWorker {
    con: redis::cluster::ClusterConnection,
    token: String,
    lock_sha: String,
    unlock_sha: String,
    names: Vec<String>,
}

impl ClusterFloorWorker {
    fn new(
        nodes: &[String],
        publish: bool,
        w: usize,
        names: &[String],
    ) -> Result<ClusterFloorWorker, String> {
        let unlock = if publish {
            FLOOR_UNLOCK_LUA.replace(
                "redis.call('del', KEYS[1]);",
                "redis.call('del', KEYS[1]); redis.call('publish', KEYS[1], '0');",
            )
        } else {
            FLOOR_UNLOCK_LUA.to_owned()
        };
        // The scripts are loaded on every master, as a cluster client's
        // script cache would be after its first call on each.
        let (mut lock_sha, mut unlock_sha) = (String::new(), String::new());
        for url in nodes {
            let mut con = crate::observe::admin(url);
            lock_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(FLOOR_LOCK_LUA)
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            unlock_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&unlock)
                .query(&mut con)
                .map_err(|e| e.to_string())?;
        }
        Ok(ClusterFloorWorker {
            con: cluster_connection(nodes).map_err(|e| e.to_string())?,
            token: format!("floor:{}:w{w}", std::process::id()),
            lock_sha,
            unlock_sha,
            names: names.to_vec(),
        })
    }

    fn call(&mut self, sha_lock: bool, name: &str) -> Result<Option<i64>, String> {
        let sha = if sha_lock {
            &self.lock_sha
        } else {
            &self.unlock_sha
        };
        redis::cmd("EVALSHA")
            .arg(sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())
    }

    fn try_lock_named(&mut self, name: &str) -> Result<bool, String> {
        Ok(self.call(true, name)?.is_none())
    }

    fn unlock_named(&mut self, name: &str) -> Result<(), String> {
        self.call(false, name)?
            .map(|_| ())
            .ok_or_else(|| "unlock: not owner".into())
    }

    fn name(&self, i: usize) -> String {
        self.names[i % self.names.len()].clone()
    }
}

impl Worker for ClusterFloorWorker {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        let name = self.name(i);
        self.cycle_named(&name)
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        if !self.try_lock_named(name)? {
            return Err("lock busy".into());
        }
        self.unlock_named(name)
    }

    fn contended(&mut self, hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        let name = self.name(0);
        loop {
            if self.try_lock_named(&name)? {
                break;
            }
            if now_ns() >= hard {
                return Ok(false);
            }
        }
        held();
        self.unlock_named(&name)?;
        Ok(true)
    }
}

fn cluster_floor_factory(nodes: &[String], publish: bool) -> Factory {
    let nodes = nodes.to_vec();
    std::sync::Arc::new(move |w, names| {
        ClusterFloorWorker::new(&nodes, publish, w, names).map(|f| Box::new(f) as Box<dyn Worker>)
    })
}
