//! A private Redis Cluster on loopback: 3 masters and 3 replicas made with
//! `redis-cli --cluster create`, `cluster-node-timeout 1000`.
//!
//! Each node is a [`RedisServer`] with its own directory; its cluster bus
//! gets a free port of its own (`--cluster-port`) instead of port + 10000,
//! so that no guess about free ports is needed. A server without
//! `--cluster-port` (Redis 6.2) gets a port whose + 10000 is free and
//! reserved as well. Everything is killed on drop.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use super::{Cap, RedisServer, bind_reserved, caps, release_port, wait_until};

/// How long the cluster gets to agree on `cluster_state:ok`.
const SETTLE: Duration = Duration::from_secs(20);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    pub failed: bool,
}

/// 3 masters + 3 replicas on loopback.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    bus_ports: Vec<u16>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports: Vec<u16> = self.nodes.iter().map(RedisServer::port).collect();
        f.debug_struct("RedisCluster")
            .field("ports", &ports)
            .finish()
    }
}

impl RedisCluster {
    /// Starts six nodes and joins them into a cluster of three masters,
    /// each with a replica; returns when every node says
    /// `cluster_state:ok` and agrees on the masters.
    ///
    /// # Panics
    ///
    /// If a node does not start, `redis-cli --cluster create` fails, or the
    /// cluster does not settle within 20 s; the message includes the logs.
    pub fn start() -> RedisCluster {
        let mut nodes = Vec::new();
        let mut bus_ports = Vec::new();
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let own_bus_port = caps().has(Cap::ClusterPort);
        for _ in 0..6 {
            if own_bus_port {
                let bus = bind_reserved().local_addr().unwrap().port();
                let bus_arg = bus.to_string();
                let mut with_bus = args.to_vec();
                with_bus.extend(["--cluster-port", &bus_arg]);
                nodes.push(RedisServer::start_with(&with_bus));
                bus_ports.push(bus);
            } else {
                let (node, bus) = RedisServer::start_with_bus_at_offset(&args);
                nodes.push(node);
                bus_ports.push(bus);
            }
        }
        let cluster = RedisCluster { nodes, bus_ports };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli (Debian package redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_settled();
        // A node told to replicate is a master without slots until the
        // others hear of it: each master must see its replica.
        let paired = wait_until(SETTLE, || {
            let masters = cluster.masters();
            masters.len() == 3
                && masters
                    .iter()
                    .all(|&m| cluster.replica_seen_by(m).is_some())
        });
        assert!(paired, "the masters never saw their replicas");
        cluster
    }

    /// The `redis+cluster://` URL with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}/", hosts.join(","))
    }

    /// Seed URLs (`redis://`) of the first two nodes.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes[..2].iter().map(RedisServer::url).collect()
    }

    /// Node `i` (0..6).
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The index of the node listening on `port`.
    pub fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn alive(&self) -> impl Iterator<Item = (usize, &RedisServer)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_running())
    }

    /// `CLUSTER NODES` as seen by node `i`.
    pub fn nodes_seen_by(&self, i: usize) -> Vec<NodeInfo> {
        let text: String = self.nodes[i].cmd("CLUSTER", &[b"NODES"]);
        text.lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                Some(NodeInfo {
                    id: f[0].to_owned(),
                    port,
                    master: f[2].contains("master"),
                    master_id: (f[3] != "-").then(|| f[3].to_owned()),
                    failed: f[2].contains("fail"),
                })
            })
            .collect()
    }

    /// The index of the master of `slot`, as node `asked` sees it.
    fn owner_seen_by(&self, asked: usize, slot: u16) -> Option<usize> {
        let reply: redis::Value = self.nodes[asked].cmd("CLUSTER", &[b"SLOTS"]);
        let redis::Value::Array(ranges) = reply else {
            return None;
        };
        for range in ranges {
            let redis::Value::Array(f) = range else {
                continue;
            };
            if let (redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(m)) =
                (&f[0], &f[1], &f[2])
                && (*a..=*b).contains(&i64::from(slot))
                && let Some(redis::Value::Int(port)) = m.get(1)
            {
                return Some(self.index_of_port(*port as u16));
            }
        }
        None
    }

    /// The index of the master that owns `slot`, agreed by every live node.
    ///
    /// # Panics
    ///
    /// If the live nodes do not agree within 20 s.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let mut owner = None;
        let agreed = wait_until(SETTLE, || {
            let seen: Vec<Option<usize>> = self
                .alive()
                .map(|(i, _)| self.owner_seen_by(i, slot))
                .collect();
            owner = seen[0];
            owner.is_some() && seen.iter().all(|s| *s == owner)
        });
        assert!(agreed, "nodes do not agree on the owner of slot {slot}");
        owner.unwrap()
    }

    /// The indexes of the live nodes that say they are masters.
    pub fn masters(&self) -> Vec<usize> {
        self.alive()
            .filter(|(i, n)| {
                self.nodes_seen_by(*i)
                    .iter()
                    .any(|v| v.port == n.port() && v.master)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The index of a replica of master `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        self.replica_seen_by(master)
            .unwrap_or_else(|| panic!("master {master} has no replica"))
    }

    /// The index of a replica of master `master`, as the master sees it.
    fn replica_seen_by(&self, master: usize) -> Option<usize> {
        let view = self.nodes_seen_by(master);
        let id = view
            .iter()
            .find(|n| n.port == self.nodes[master].port())
            .map(|n| n.id.clone())
            .expect("the master sees itself");
        let replica = view
            .iter()
            .find(|n| n.master_id.as_deref() == Some(&id) && !n.failed)?;
        Some(self.index_of_port(replica.port))
    }

    /// `CLUSTER FAILOVER` on replica `replica`; returns when every live
    /// node sees it as a master of the cluster in state ok.
    ///
    /// # Panics
    ///
    /// If the failover does not complete within 20 s.
    pub fn failover(&self, replica: usize) {
        let () = self.nodes[replica].cmd("CLUSTER", &[b"FAILOVER"]);
        let port = self.nodes[replica].port();
        let done = wait_until(SETTLE, || {
            self.alive().all(|(i, _)| {
                self.nodes_seen_by(i)
                    .iter()
                    .any(|n| n.port == port && n.master)
            })
        });
        assert!(done, "CLUSTER FAILOVER on node {replica} did not complete");
        self.wait_settled();
    }

    /// `kill -9` master `master`; returns the index of its replica once it
    /// is promoted and the live nodes say `cluster_state:ok`.
    ///
    /// # Panics
    ///
    /// If no promotion happens within 20 s.
    pub fn kill_master(&mut self, master: usize) -> usize {
        self.kill_master_then(master, |_| {})
    }

    /// [`kill_master`](Self::kill_master), running `after_kill` between the
    /// kill and the wait for the promotion (e.g. to resume a replica that
    /// was frozen so that it missed the master's last writes).
    ///
    /// # Panics
    ///
    /// As [`kill_master`](Self::kill_master).
    pub fn kill_master_then(
        &mut self,
        master: usize,
        after_kill: impl FnOnce(&RedisCluster),
    ) -> usize {
        let replica = self.replica_of(master);
        self.nodes[master].kill();
        after_kill(self);
        let port = self.nodes[replica].port();
        let promoted = wait_until(SETTLE, || {
            self.alive().all(|(i, _)| {
                self.nodes_seen_by(i)
                    .iter()
                    .any(|n| n.port == port && n.master)
            })
        });
        assert!(
            promoted,
            "replica {replica} of killed master {master} was not promoted"
        );
        self.wait_settled();
        replica
    }

    /// Node `i`'s own id.
    pub fn id_of(&self, i: usize) -> String {
        self.nodes[i].cmd("CLUSTER", &[b"MYID"])
    }

    /// Step 1 of a slot migration: `SETSLOT IMPORTING` on `to`, `SETSLOT
    /// MIGRATING` on `from`.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let s = slot.to_string();
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let () = self.nodes[to].cmd(
            "CLUSTER",
            &[b"SETSLOT", s.as_bytes(), b"IMPORTING", from_id.as_bytes()],
        );
        let () = self.nodes[from].cmd(
            "CLUSTER",
            &[b"SETSLOT", s.as_bytes(), b"MIGRATING", to_id.as_bytes()],
        );
    }

    /// Step 2: `MIGRATE` every key of `slot` from `from` to `to` (bounded:
    /// 1,000 batches of 100).
    pub fn move_keys(&self, slot: u16, from: usize, to: usize) -> usize {
        let s = slot.to_string();
        let port = self.nodes[to].port().to_string();
        let mut moved = 0;
        for _ in 0..1_000 {
            let keys: Vec<Vec<u8>> =
                self.nodes[from].cmd("CLUSTER", &[b"GETKEYSINSLOT", s.as_bytes(), b"100"]);
            if keys.is_empty() {
                return moved;
            }
            let mut args: Vec<&[u8]> =
                vec![b"127.0.0.1", port.as_bytes(), b"", b"0", b"5000", b"KEYS"];
            args.extend(keys.iter().map(Vec::as_slice));
            let _: redis::Value = self.nodes[from].cmd("MIGRATE", &args);
            moved += keys.len();
        }
        panic!("slot {slot} kept having keys to migrate");
    }

    /// Step 3: `SETSLOT NODE` to `to`, on `to` first, then on `from` (the
    /// other masters learn it by gossip).
    pub fn end_migration(&self, slot: u16, from: usize, to: usize) {
        let s = slot.to_string();
        let to_id = self.id_of(to);
        for i in [to, from] {
            let () = self.nodes[i].cmd(
                "CLUSTER",
                &[b"SETSLOT", s.as_bytes(), b"NODE", to_id.as_bytes()],
            );
        }
    }

    /// Moves `slot` from its master to `to`, all three steps.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let from = self.master_of_slot(slot);
        self.begin_migration(slot, from, to);
        self.move_keys(slot, from, to);
        self.end_migration(slot, from, to);
    }

    /// Waits until every live node says `cluster_state:ok`, sees three
    /// healthy masters and owns its slots as the others think.
    ///
    /// # Panics
    ///
    /// After 20 s, with every node's `CLUSTER INFO`.
    pub fn wait_settled(&self) {
        let settled = wait_until(SETTLE, || {
            let ok = self.alive().all(|(i, n)| {
                let info: String = n.cmd("CLUSTER", &[b"INFO"]);
                let view = self.nodes_seen_by(i);
                let masters = view.iter().filter(|v| v.master && !v.failed).count();
                // Every live replica is known as one, with its master.
                let replicas = view
                    .iter()
                    .filter(|v| !v.master && !v.failed && v.master_id.is_some())
                    .count();
                info.contains("cluster_state:ok")
                    && masters >= 3
                    && replicas + masters == self.alive().count()
            });
            ok && {
                // Every live node names the same owner for a sample of slots.
                [0_u16, 5_461, 10_923, 16_383].iter().all(|&slot| {
                    let seen: Vec<_> = self
                        .alive()
                        .map(|(i, _)| self.owner_seen_by(i, slot))
                        .collect();
                    seen[0].is_some() && seen.iter().all(|s| *s == seen[0])
                })
            }
        });
        if !settled {
            let infos: HashMap<u16, String> = self
                .alive()
                .map(|(_, n)| (n.port(), n.cmd::<String>("CLUSTER", &[b"NODES"])))
                .collect();
            panic!("the cluster did not settle within {SETTLE:?}: {infos:#?}");
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        for port in &self.bus_ports {
            release_port(*port);
        }
    }
}
