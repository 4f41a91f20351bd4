//! A private Redis Cluster on loopback: 3 masters and 3 replicas, made with
//! `redis-cli --cluster create --cluster-replicas 1`, with
//! `cluster-node-timeout 1000` so that an automatic failover takes about
//! 2.5 s. One bed serves several cases in sequence.
//!
//! Besides its client port, every node listens on its cluster bus port,
//! port + 10 000: both must be free. Ports are drawn below the kernel's
//! ephemeral range (15 000 .. 22 000, bus 25 000 .. 32 000), where the
//! other servers of the suite (ports from `bind(0)`) never are.
//!
//! Helpers: the node owning a slot or key, `CLUSTER FAILOVER` on a
//! replica, `kill -9` of a master and the wait for its replica's
//! promotion, and the steps of a slot migration (`SETSLOT IMPORTING` /
//! `MIGRATING`, `MIGRATE`, `SETSLOT NODE`). Every process is killed on drop.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{ms, redis_server_bin, release_port, reserve_port, sleep, wait_until};

/// Nodes of the bed: 3 masters, each with one replica.
const NODES: usize = 6;
/// `cluster-node-timeout` of every node, in milliseconds.
pub const NODE_TIMEOUT_MS: u64 = 1000;
/// How long the bed waits for the cluster to agree after a change.
const SETTLE: Duration = Duration::from_secs(20);
/// Read/write timeout of admin connections.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts at starting the whole bed, each on new ports.
const START_ATTEMPTS: usize = 3;

/// One `redis-server` of the bed.
struct Node {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Node {
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let mut command = Command::new(redis_server_bin());
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .arg("--cluster-config-file")
            .arg(self.dir.join("nodes.conf"))
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot spawn redis-server: {e}. The cluster tests need a real redis-server \
                 (Debian package `redis-server`)"
            )
        });
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: `kill` has no memory-safety preconditions; `pid` is
                // our own child, not reaped yet.
                unsafe {
                    libc::kill(pid, libc::SIGCONT);
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A 3-master, 3-replica Redis Cluster on `127.0.0.1`, killed on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    _dir: TempDir,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("ports", &self.ports())
            .finish()
    }
}

/// One slot range of `CLUSTER SLOTS`: `start..=end` served by `master`,
/// replicated to `replicas` (ports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub master: u16,
    pub replicas: Vec<u16>,
}

/// `port` and `port + 10 000` both bindable now; both reserved for this
/// process. `None` if either is taken.
fn try_port_pair(port: u16) -> Option<u16> {
    let bus = port + 10_000;
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok()?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).ok()?;
    if !reserve_port(port) {
        return None;
    }
    if !reserve_port(bus) {
        release_port(port);
        return None;
    }
    drop((a, b));
    Some(port)
}

/// Six client ports whose bus ports are free too, from a random start.
fn free_ports() -> Vec<u16> {
    let seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos().into())
            .unwrap_or(0);
    let mut port = 15_000 + (seed % 7_000) as u16;
    let mut ports = Vec::with_capacity(NODES);
    // Bounded: at most 7 000 candidates.
    for _ in 0..7_000 {
        if ports.len() == NODES {
            break;
        }
        if let Some(p) = try_port_pair(port) {
            ports.push(p);
        }
        port = if port >= 21_999 { 15_000 } else { port + 1 };
    }
    assert_eq!(ports.len(), NODES, "no free port pairs for a cluster bed");
    ports
}

fn admin(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
    conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
    conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
    Ok(conn)
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

impl RedisCluster {
    /// Starts six nodes and makes them a cluster; returns once every node
    /// reports `cluster_state:ok`, agrees on who serves every slot, and
    /// every replica is in sync with its master.
    ///
    /// # Panics
    ///
    /// If that does not happen after 3 attempts; the message holds the logs.
    pub fn start() -> RedisCluster {
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match Self::try_start() {
                Ok(cluster) => return cluster,
                Err(e) => failures.push(format!("attempt {attempt}: {e}")),
            }
        }
        panic!(
            "the cluster bed did not start:\n{}",
            failures.join("\n---\n")
        );
    }

    fn try_start() -> Result<RedisCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("redguard-cluster-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let nodes = free_ports()
            .into_iter()
            .map(|port| {
                let node_dir = dir.path().join(port.to_string());
                fs::create_dir_all(&node_dir).expect("node directory");
                Node {
                    child: None,
                    port,
                    dir: node_dir,
                }
            })
            .collect();
        let mut cluster = RedisCluster { nodes, _dir: dir };
        for node in &mut cluster.nodes {
            node.spawn();
        }
        for node in &cluster.nodes {
            let port = node.port;
            let up = wait_until(Duration::from_secs(5), || {
                admin(port)
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            });
            if !up {
                return Err(format!("node {port} did not answer:\n{}", node.log()));
            }
        }
        let addrs: Vec<String> = cluster
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli (Debian package `redis-tools`): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !cluster.settled(SETTLE) {
            return Err(format!("the cluster did not settle:\n{}", cluster.logs()));
        }
        Ok(cluster)
    }

    /// Client ports of every node, started or not.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Ports of the nodes that are running.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Seed URLs, `redis://127.0.0.1:<port>/`, of every running node.
    pub fn seeds(&self) -> Vec<String> {
        self.live_ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,.../` over every
    /// running node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .live_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}/", hosts.join(","))
    }

    /// An admin connection to `port` (2 s timeouts).
    ///
    /// # Panics
    ///
    /// If it cannot be made.
    pub fn conn(&self, port: u16) -> redis::Connection {
        admin(port).unwrap_or_else(|e| panic!("cannot connect to node {port}: {e}"))
    }

    /// A cluster-aware connection from redis-rs, for checks from the test.
    pub fn cluster_conn(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::builder(self.seeds())
            .connection_timeout(ADMIN_TIMEOUT)
            .response_timeout(ADMIN_TIMEOUT)
            .build()
            .and_then(|c| c.get_connection())
            .expect("cluster connection")
    }

    /// Every node's log, for panic messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = n.log();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- node {} ---\n{}", n.port, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The slot ranges, their masters and replicas, as `CLUSTER NODES` on
    /// `port` sees them (nodes flagged as failed are left out).
    pub fn slots_seen_by(&self, port: u16) -> redis::RedisResult<Vec<SlotRange>> {
        let mut conn = admin(port)?;
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn)?;
        Ok(parse_nodes(&nodes))
    }

    /// The masters of `CLUSTER SLOTS` on `port`, by range: what a client
    /// discovering the topology sees.
    pub fn client_view(&self, port: u16) -> redis::RedisResult<Vec<(u16, u16, u16)>> {
        let mut conn = admin(port)?;
        let reply: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        let mut view: Vec<(u16, u16, u16)> = parse_slots(&reply)
            .into_iter()
            .map(|r| (r.start, r.end, r.master))
            .collect();
        view.sort_unstable();
        Ok(view)
    }

    /// The slot ranges as seen by the first running node that answers.
    ///
    /// # Panics
    ///
    /// If no node answers.
    pub fn slots(&self) -> Vec<SlotRange> {
        for port in self.live_ports() {
            if let Ok(slots) = self.slots_seen_by(port) {
                return slots;
            }
        }
        panic!("no node answered CLUSTER SLOTS\n{}", self.logs());
    }

    /// Ports of the masters that serve slots, in slot order.
    pub fn masters(&self) -> Vec<u16> {
        let mut masters: Vec<u16> = Vec::new();
        for range in self.slots() {
            if !masters.contains(&range.master) {
                masters.push(range.master);
            }
        }
        masters
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let port = self.live_ports()[0];
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.conn(port))
            .expect("CLUSTER KEYSLOT")
    }

    /// The master serving `slot`.
    ///
    /// # Panics
    ///
    /// If no range covers the slot.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.slots()
            .into_iter()
            .find(|r| (r.start..=r.end).contains(&slot))
            .map(|r| r.master)
            .unwrap_or_else(|| panic!("slot {slot} is not served\n{}", self.logs()))
    }

    /// The master serving `key`.
    pub fn master_of(&self, key: &[u8]) -> u16 {
        self.master_of_slot(self.keyslot(key))
    }

    /// A replica of the master at `master`.
    ///
    /// # Panics
    ///
    /// If it has none.
    pub fn replica_of(&self, master: u16) -> u16 {
        self.slots()
            .into_iter()
            .find(|r| r.master == master && !r.replicas.is_empty())
            .map(|r| r.replicas[0])
            .unwrap_or_else(|| panic!("master {master} has no replica\n{}", self.logs()))
    }

    /// A key (`<prefix>-<n>`) whose slot `master` serves.
    pub fn key_on(&self, master: u16, prefix: &str) -> String {
        let slots = self.slots();
        for n in 0..100_000u32 {
            let key = format!("{prefix}-{n}");
            let slot = key_slot(key.as_bytes());
            if slots
                .iter()
                .any(|r| r.master == master && (r.start..=r.end).contains(&slot))
            {
                return key;
            }
        }
        panic!("no key found for master {master}");
    }

    /// The cluster has settled: every running node says `cluster_state:ok`,
    /// all give the same `CLUSTER SLOTS` covering 16 384 slots, and every
    /// replica's link to its master is up.
    pub fn settled(&self, within: Duration) -> bool {
        wait_until(within, || self.is_settled())
    }

    fn is_settled(&self) -> bool {
        let mut seen: Option<Vec<SlotRange>> = None;
        for port in self.live_ports() {
            let Ok(mut conn) = admin(port) else {
                return false;
            };
            let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut conn) else {
                return false;
            };
            if info_field(&info, "cluster_state").as_deref() != Some("ok") {
                return false;
            }
            let Ok(mut slots) = self.slots_seen_by(port) else {
                return false;
            };
            slots.sort_by_key(|r| r.start);
            let covered: u32 = slots
                .iter()
                .map(|r| u32::from(r.end) - u32::from(r.start) + 1)
                .sum();
            if covered != 16_384 {
                return false;
            }
            // Every running node is listed, as a master or as a replica.
            let mut listed: Vec<u16> = slots
                .iter()
                .flat_map(|r| std::iter::once(r.master).chain(r.replicas.iter().copied()))
                .collect();
            listed.sort_unstable();
            listed.dedup();
            let mut live = self.live_ports();
            live.sort_unstable();
            if listed != live {
                return false;
            }
            let masters = |v: &[SlotRange]| -> Vec<(u16, u16, u16)> {
                v.iter().map(|r| (r.start, r.end, r.master)).collect()
            };
            if self.client_view(port).ok().as_deref() != Some(&masters(&slots)[..]) {
                return false;
            }
            match &seen {
                None => seen = Some(slots),
                Some(first) => {
                    if first != &slots {
                        return false;
                    }
                }
            }
            let Ok(repl) = redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut conn)
            else {
                return false;
            };
            if info_field(&repl, "role").as_deref() == Some("slave")
                && info_field(&repl, "master_link_status").as_deref() != Some("up")
            {
                return false;
            }
        }
        seen.is_some()
    }

    /// `CLUSTER FAILOVER` on `replica` (a manual, coordinated failover: no
    /// write is lost); returns once the cluster has settled with `replica`
    /// serving its old master's slots.
    ///
    /// # Panics
    ///
    /// If the command fails or the cluster does not settle in 20 s.
    pub fn failover(&self, replica: u16) {
        let () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut self.conn(replica))
            .expect("CLUSTER FAILOVER");
        let done = wait_until(SETTLE, || {
            self.masters().contains(&replica) && self.is_settled()
        });
        assert!(
            done,
            "failover to {replica} did not settle\n{}",
            self.logs()
        );
    }

    /// `kill -9` of `master`; returns the port of the replica that took its
    /// slots, once the remaining nodes have settled.
    ///
    /// # Panics
    ///
    /// If no replica took over within 20 s.
    pub fn kill_master(&mut self, master: u16) -> u16 {
        let replica = self.replica_of(master);
        self.kill(master);
        let done = wait_until(SETTLE, || {
            self.slots_seen_by(replica)
                .is_ok_and(|s| s.iter().any(|r| r.master == replica))
                && self.is_settled()
        });
        assert!(
            done,
            "replica {replica} of killed master {master} was not promoted\n{}",
            self.logs()
        );
        replica
    }

    /// `kill -9` of the node at `port` (no wait).
    pub fn kill(&mut self, port: u16) {
        let node = self.node_mut(port);
        node.kill();
    }

    /// Freezes the node at `port` (`SIGSTOP`): it answers nothing, and its
    /// peers mark it failed after the node timeout.
    pub fn freeze(&self, port: u16) {
        self.signal(port, libc::SIGSTOP);
    }

    /// Resumes a node frozen by [`freeze`](Self::freeze) (`SIGCONT`).
    pub fn thaw(&self, port: u16) {
        self.signal(port, libc::SIGCONT);
    }

    fn signal(&self, port: u16, sig: libc::c_int) {
        let pid = self.pids()[&port];
        let pid = libc::pid_t::try_from(pid).expect("pid");
        // SAFETY: `kill` has no memory-safety preconditions; `pid` is our
        // own running child.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    /// Starts the killed node at `port` again with its `nodes.conf`: it
    /// rejoins, as a replica of whoever took its slots. Returns once the
    /// cluster has settled again.
    ///
    /// # Panics
    ///
    /// If the node is running or the cluster does not settle in 20 s.
    pub fn restart(&mut self, port: u16) {
        let node = self.node_mut(port);
        assert!(node.child.is_none(), "node {port} is running");
        node.spawn();
        let done = wait_until(SETTLE, || {
            self.is_settled()
                && self
                    .slots()
                    .iter()
                    .any(|r| r.replicas.contains(&port) || r.master == port)
        });
        assert!(done, "node {port} did not rejoin\n{}", self.logs());
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The node id (`CLUSTER MYID`) of the node at `port`.
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(port))
            .expect("CLUSTER MYID")
    }

    /// Migration step 1: `SETSLOT <slot> IMPORTING` on `to`, then
    /// `MIGRATING` on `from`. New keys of the slot now go to `to` with
    /// `ASK`; multi-key commands on a half-moved set get `TRYAGAIN`.
    pub fn begin_migration(&self, slot: u16, from: u16, to: u16) {
        let from_id = self.node_id(from);
        let to_id = self.node_id(to);
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query(&mut self.conn(to))
            .expect("SETSLOT IMPORTING");
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query(&mut self.conn(from))
            .expect("SETSLOT MIGRATING");
    }

    /// Migration step 2: `MIGRATE`s up to `batch` keys of `slot` from
    /// `from` to `to`; returns how many were moved (0: none left).
    pub fn migrate_keys(&self, slot: u16, from: u16, to: u16, batch: usize) -> usize {
        let mut conn = self.conn(from);
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(batch)
            .query(&mut conn)
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            return 0;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLACE")
            .arg("KEYS")
            .arg(&keys);
        // A key may expire or be deleted between GETKEYSINSLOT and MIGRATE:
        // "NOKEY" is then a fine answer.
        match migrate.query::<String>(&mut conn) {
            Ok(_) => {}
            Err(e) if e.to_string().contains("NOKEY") => {}
            Err(e) => panic!("MIGRATE failed: {e}"),
        }
        keys.len()
    }

    /// Migration step 3: `SETSLOT <slot> NODE <to>` on `to`, `from` and
    /// every other master, so that `from` answers `MOVED` from now on.
    pub fn finish_migration(&self, slot: u16, from: u16, to: u16) {
        let to_id = self.node_id(to);
        let mut order = vec![to, from];
        for m in self.masters() {
            if !order.contains(&m) {
                order.push(m);
            }
        }
        for port in order {
            let () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query(&mut self.conn(port))
                .expect("SETSLOT NODE");
        }
    }

    /// Moves `slot` from its master to `to` in one go (all three steps).
    pub fn move_slot(&self, slot: u16, to: u16) {
        let from = self.master_of_slot(slot);
        if from == to {
            return;
        }
        self.begin_migration(slot, from, to);
        // Bounded: a slot holds finitely many keys, moved 100 at a time.
        for _ in 0..10_000 {
            if self.migrate_keys(slot, from, to, 100) == 0 {
                break;
            }
        }
        self.finish_migration(slot, from, to);
        let done = wait_until(SETTLE, || {
            self.is_settled() && self.master_of_slot(slot) == to
        });
        assert!(done, "slot {slot} did not settle on {to}\n{}", self.logs());
    }

    /// Waits at most `within` for `cond`, sleeping 10 ms between checks.
    pub fn wait(&self, within: Duration, cond: impl FnMut() -> bool) -> bool {
        wait_until(within, cond)
    }

    /// A pause of `d` (bounded back-offs only).
    pub fn pause(d: Duration) {
        sleep(d);
    }

    /// Seconds since `t`, rounded to ms, for reports.
    pub fn since(t: Instant) -> Duration {
        ms(t.elapsed().as_millis() as u64)
    }

    /// Pids of the running nodes, by port.
    pub fn pids(&self) -> BTreeMap<u16, u32> {
        self.nodes
            .iter()
            .filter_map(|n| Some((n.port, n.child.as_ref()?.id())))
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
            release_port(node.port);
            release_port(node.port + 10_000);
        }
    }
}

/// The hash slot of `key`, computed locally (CRC16/XMODEM of the hash tag
/// or the whole key, modulo 16 384), as `CLUSTER KEYSLOT` would answer.
pub fn key_slot(key: &[u8]) -> u16 {
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

/// Parses `CLUSTER NODES`: one range per contiguous slot range of a master
/// (sorted by start), with the replicas that are not flagged as failed.
/// Slots being migrated (`[slot->-id]`) are ignored.
fn parse_nodes(text: &str) -> Vec<SlotRange> {
    struct Line<'a> {
        id: &'a str,
        port: u16,
        flags: &'a str,
        master: &'a str,
        slots: Vec<&'a str>,
    }
    let lines: Vec<Line<'_>> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let addr = f.get(1)?.split('@').next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            Some(Line {
                id: f.first()?,
                port,
                flags: f.get(2)?,
                master: f.get(3)?,
                slots: f.iter().skip(8).copied().collect(),
            })
        })
        .collect();
    let failed = |flags: &str| flags.contains("fail") || flags.contains("noaddr");
    let mut ranges = Vec::new();
    for m in lines
        .iter()
        .filter(|l| l.flags.contains("master") && !failed(l.flags))
    {
        let mut replicas: Vec<u16> = lines
            .iter()
            .filter(|l| l.master == m.id && l.flags.contains("slave") && !failed(l.flags))
            .map(|l| l.port)
            .collect();
        replicas.sort_unstable();
        for slot in m.slots.iter().filter(|s| !s.starts_with('[')) {
            let (start, end) = match slot.split_once('-') {
                Some((a, b)) => (a.parse().ok(), b.parse().ok()),
                None => (slot.parse().ok(), slot.parse().ok()),
            };
            if let (Some(start), Some(end)) = (start, end) {
                ranges.push(SlotRange {
                    start,
                    end,
                    master: m.port,
                    replicas: replicas.clone(),
                });
            }
        }
    }
    ranges.sort_by_key(|r| r.start);
    ranges
}

/// Parses a `CLUSTER SLOTS` reply.
fn parse_slots(reply: &redis::Value) -> Vec<SlotRange> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let port_of = |v: &Value| match v {
        Value::Array(node) => node.get(1).and_then(int),
        _ => None,
    };
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(items) = range else {
                return None;
            };
            Some(SlotRange {
                start: int(items.first()?)?,
                end: int(items.get(1)?)?,
                master: port_of(items.get(2)?)?,
                replicas: items.iter().skip(3).filter_map(port_of).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod selftest {
    use super::*;

    /// The bed comes up settled with 3 masters each replicated once, and its
    /// helpers agree with the servers: slot owners, a full migration of one
    /// slot (keys follow, the source answers MOVED) and a manual failover.
    #[test]
    fn cluster_bed_selftest() {
        let started = Instant::now();
        let cluster = RedisCluster::start();
        let boot = started.elapsed();
        let masters = cluster.masters();
        assert_eq!(masters.len(), 3, "{:?}", cluster.slots());
        for &m in &masters {
            assert_ne!(cluster.replica_of(m), m);
        }
        let key = cluster.key_on(masters[0], "selftest");
        assert_eq!(cluster.master_of(key.as_bytes()), masters[0]);
        let () = redis::cmd("SET")
            .arg(&key)
            .arg("v")
            .query(&mut cluster.conn(masters[0]))
            .unwrap();

        // Migration: the key moves with its slot; the old owner redirects.
        let slot = cluster.keyslot(key.as_bytes());
        cluster.move_slot(slot, masters[1]);
        assert_eq!(cluster.master_of_slot(slot), masters[1]);
        let got: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query(&mut cluster.conn(masters[1]))
            .unwrap();
        assert_eq!(got.as_deref(), Some("v"));
        let err = redis::cmd("GET")
            .arg(&key)
            .query::<Option<String>>(&mut cluster.conn(masters[0]))
            .unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{err}");

        // Manual failover: the replica serves the slots, the key is there.
        let replica = cluster.replica_of(masters[1]);
        cluster.failover(replica);
        assert_eq!(cluster.master_of_slot(slot), replica);
        let got: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query(&mut cluster.conn(replica))
            .unwrap();
        assert_eq!(got.as_deref(), Some("v"));
        eprintln!(
            "cluster bed: settled in {boot:?}; selftest {:?}",
            started.elapsed()
        );
    }
}
