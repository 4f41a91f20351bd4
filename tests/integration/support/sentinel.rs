//! A private Redis Sentinel deployment on free loopback ports: one master,
//! two replicas and three `redis-sentinel` processes (quorum 2,
//! `down-after-milliseconds 1000`, `failover-timeout 3000`,
//! `repl-diskless-sync-delay 0` on every data node).
//!
//! [`SentinelBed::start`] returns only once both replicas are `online` on
//! the master and every sentinel sees the master, both replicas and the two
//! other sentinels, so faults can be injected at once. The bed then offers
//! the faults of the Sentinel cases (RELIABILITY.md E1–E4, H5): `kill -9` of
//! the master, `SIGSTOP` of the replicas, `CLIENT KILL TYPE replica`, waits
//! for `+switch-master` and the new master, and bringing a killed node back
//! as a replica so that one bed serves several failovers in sequence.
//!
//! Everything is killed on drop (data nodes through [`RedisServer`]).

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{RedisServer, bind_reserved, ms, release_port, wait_until};

/// Environment variable naming the `redis-sentinel` binary to spawn.
pub const REDIS_SENTINEL_ENV: &str = "REDGUARD_REDIS_SENTINEL";

/// Sentinel's `down-after-milliseconds` in the bed.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// Sentinel's `failover-timeout` in the bed.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);
/// How long after a `+switch-master` the deployment counts as settled at
/// the earliest. A sentinel's fresh link to a promoted master sends its
/// first `PING` one ping period (1 s) after the link was made, which with a
/// 1 s `down-after-milliseconds` can flag the new master down and start one
/// more failover about 1 s after the switch.
const QUIET_AFTER_SWITCH: Duration = Duration::from_millis(1500);
/// How long [`SentinelBed::start`] and [`SentinelBed::heal`] wait for the
/// deployment to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts to start one sentinel, each on a new port.
const START_ATTEMPTS: usize = 5;
/// Read/write timeout of the bed's own connections.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Credentials of a bed: the data nodes' password (`requirepass` and
/// `masterauth`) and the sentinels' own password, each optional.
#[derive(Clone, Default)]
pub struct BedOptions {
    /// The Sentinel master name; default `"rgmaster"`.
    pub master_name: Option<String>,
    /// Password of the data nodes (the `default` user).
    pub data_password: Option<String>,
    /// Password of the sentinels (their `requirepass`).
    pub sentinel_password: Option<String>,
}

impl fmt::Debug for BedOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedOptions")
            .field("master_name", &self.master_name)
            .field("data_password", &self.data_password.is_some())
            .field("sentinel_password", &self.sentinel_password.is_some())
            .finish()
    }
}

/// One `redis-sentinel` process with its own directory, config and log.
struct SentinelProcess {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl SentinelProcess {
    fn log(&self) -> String {
        let path = self.dir.path().join("sentinel.log");
        fs::read_to_string(&path)
            .unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        release_port(self.port);
    }
}

/// A `+switch-master` event heard on a sentinel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// When the test process read the event.
    pub at: Instant,
    /// The master's port before the switch.
    pub old_port: u16,
    /// The promoted replica's port.
    pub new_port: u16,
}

/// Listens for `+switch-master` on one sentinel in a thread of its own.
struct SwitchListener {
    events: Mutex<Receiver<Switch>>,
    /// When the last event was heard.
    last: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for SwitchListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The deployment: data nodes (`nodes[0]` was the first master) and three
/// sentinels. See the module docs.
pub struct SentinelBed {
    master_name: String,
    options: BedOptions,
    nodes: Vec<RedisServer>,
    /// Per data node (same index), a config file it `include`s at start:
    /// its `replicaof` line, rewritten before a restart so that a node
    /// never comes back as an empty master.
    includes: Vec<PathBuf>,
    sentinels: Vec<SentinelProcess>,
    switches: SwitchListener,
    _conf_dir: TempDir,
}

impl fmt::Debug for SentinelBed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelBed")
            .field("master_name", &self.master_name)
            .field("nodes", &self.node_ports())
            .field("sentinels", &self.sentinel_ports())
            .finish_non_exhaustive()
    }
}

impl SentinelBed {
    /// Starts a deployment without passwords.
    ///
    /// # Panics
    ///
    /// If a process cannot be started or the deployment does not settle
    /// within 20 s; the message includes the logs.
    pub fn start() -> SentinelBed {
        SentinelBed::start_with(BedOptions::default())
    }

    /// Starts a deployment with `options`' master name and passwords.
    ///
    /// # Panics
    ///
    /// As [`SentinelBed::start`].
    pub fn start_with(options: BedOptions) -> SentinelBed {
        let master_name = options
            .master_name
            .clone()
            .unwrap_or_else(|| "rgmaster".to_owned());
        let conf_dir = tempfile::Builder::new()
            .prefix("redguard-sentinel-bed-")
            .tempdir()
            .expect("create a temporary directory for the bed");
        let mut includes = Vec::new();
        let mut start = |master: Option<u16>| {
            let include = conf_dir
                .path()
                .join(format!("node-{}.conf", includes.len()));
            write_replicaof(&include, master);
            let args = data_args(&options, &include);
            includes.push(include);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            RedisServer::start_with(&args)
        };
        let master = start(None);
        let master_port = master.port();
        let mut nodes = vec![master];
        for _ in 0..2 {
            nodes.push(start(Some(master_port)));
        }
        let replica_ports: Vec<u16> = nodes[1..].iter().map(RedisServer::port).collect();
        // Replicas first: a sentinel lists the replicas of the master's
        // first INFO reply, so it knows them at once.
        let master_ref = &nodes[0];
        let online = wait_until(SETTLE_TIMEOUT, || {
            online_replicas(master_ref, options.data_password.as_deref()) == 2
        });
        assert!(
            online,
            "replicas did not come online:\n{}",
            master_ref.log()
        );

        // Fixed sentinel ids so that each config can name the others: no
        // waiting for hello messages to find each other.
        let ports: Vec<u16> = (0..3)
            .map(|_| bind_reserved().local_addr().expect("local_addr").port())
            .collect();
        let ids: Vec<String> = (0..3).map(|i| sentinel_id(ports[i], i)).collect();
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let peers: Vec<(u16, String)> = (0..3)
                .filter(|&j| j != i)
                .map(|j| (ports[j], ids[j].clone()))
                .collect();
            sentinels.push(spawn_sentinel(
                ports[i],
                &ids[i],
                &master_name,
                master_port,
                &replica_ports,
                &peers,
                &options,
            ));
        }
        for &port in &ports {
            fast_periods(port, options.sentinel_password.as_deref());
        }
        let switches = SwitchListener::start(ports[0], options.sentinel_password.clone());
        let bed = SentinelBed {
            master_name,
            options,
            nodes,
            includes,
            sentinels,
            switches,
            _conf_dir: conf_dir,
        };
        bed.wait_settled();
        bed
    }

    /// The Sentinel master name.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The sentinels' addresses, `127.0.0.1:<port>`.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// The sentinels' URLs, `redis://127.0.0.1:<port>/`, without password.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// The deployment as one URL,
    /// `redis+sentinel://[:<data password>@]<sentinels>/<master name>`.
    pub fn url(&self) -> String {
        let auth = self
            .options
            .data_password
            .as_deref()
            .map(|pw| format!(":{}@", percent_encode(pw)))
            .unwrap_or_default();
        format!(
            "redis+sentinel://{auth}{}/{}",
            self.sentinel_addrs().join(","),
            self.master_name
        )
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The data nodes' ports (index 0 was the first master).
    pub fn node_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The data node on `port`.
    ///
    /// # Panics
    ///
    /// If no data node of the bed has that port.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The master's port as the first sentinel that answers reports it
    /// (`SENTINEL get-master-addr-by-name`).
    ///
    /// # Panics
    ///
    /// If no sentinel answers.
    pub fn master_port(&self) -> u16 {
        self.sentinel_ports()
            .into_iter()
            .find_map(|p| self.master_port_on(p))
            .expect("no sentinel reported a master")
    }

    /// The current master's server.
    ///
    /// # Panics
    ///
    /// As [`SentinelBed::master_port`].
    pub fn master(&self) -> &RedisServer {
        self.node(self.master_port())
    }

    /// The running data nodes other than the master.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let master = self.master_port();
        self.nodes
            .iter()
            .filter(|n| n.port() != master && n.is_running())
            .collect()
    }

    /// An admin connection to the data node on `port` (with the data
    /// password when there is one).
    ///
    /// # Panics
    ///
    /// If the connection cannot be made.
    pub fn data_conn(&self, port: u16) -> redis::Connection {
        admin_conn(port, self.options.data_password.as_deref())
            .unwrap_or_else(|e| panic!("cannot connect to data node {port}: {e}"))
    }

    /// An admin connection to the sentinel on `port`.
    ///
    /// # Panics
    ///
    /// If the connection cannot be made.
    pub fn sentinel_conn(&self, port: u16) -> redis::Connection {
        admin_conn(port, self.options.sentinel_password.as_deref())
            .unwrap_or_else(|e| panic!("cannot connect to sentinel {port}: {e}"))
    }

    /// `kill -9` of the current master; returns its port and the moment
    /// of the kill.
    pub fn kill_master(&mut self) -> (u16, Instant) {
        let port = self.master_port();
        self.node_mut(port).kill();
        (port, Instant::now())
    }

    /// `SIGSTOP` on every running replica (the kernel still buffers what
    /// the master sends them; cut the links with
    /// [`SentinelBed::kill_replication_links`] to lose writes).
    pub fn sigstop_replicas(&self) {
        for replica in self.replicas() {
            replica.sigstop();
        }
    }

    /// `SIGCONT` on every running data node (a no-op for those not stopped).
    pub fn sigcont_all(&self) {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            node.sigcont();
        }
    }

    /// `CLIENT KILL TYPE replica` on the master: the replication links
    /// drop; returns how many were killed.
    pub fn kill_replication_links(&self) -> u64 {
        let mut conn = self.data_conn(self.master_port());
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut conn)
            .expect("CLIENT KILL TYPE replica")
    }

    /// Consumes `+switch-master` events heard so far.
    pub fn drain_switches(&self) {
        let events = self
            .switches
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while events.try_recv().is_ok() {}
    }

    /// Waits for the next `+switch-master` event away from `old_port`, for
    /// at most `timeout`.
    pub fn wait_switch(&self, old_port: u16, timeout: Duration) -> Option<Switch> {
        let deadline = Instant::now() + timeout;
        let events = self
            .switches
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(switch) if switch.old_port == old_port => return Some(switch),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The next `+switch-master` event, whichever master it moves, waiting
    /// at most `timeout`.
    pub fn next_switch(&self, timeout: Duration) -> Option<Switch> {
        let events = self
            .switches
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        events.recv_timeout(timeout).ok()
    }

    /// Waits until every sentinel names a master other than `old_port` and
    /// that node answers `ROLE` as master; returns its port.
    pub fn wait_new_master(&self, old_port: u16, timeout: Duration) -> Option<u16> {
        let mut found = None;
        wait_until(timeout, || {
            let reported: Vec<Option<u16>> = self
                .sentinel_ports()
                .into_iter()
                .map(|p| self.master_port_on(p))
                .collect();
            let Some(Some(first)) = reported.first().copied() else {
                return false;
            };
            if first == old_port || reported.iter().any(|r| *r != Some(first)) {
                return false;
            }
            if self.role_of(first).as_deref() == Some("master") {
                found = Some(first);
                return true;
            }
            false
        });
        found
    }

    /// Starts the data node on `port` again (after [`SentinelBed::kill_master`])
    /// as a replica of the current master, empty, without waiting for it to
    /// sync. It starts with `replicaof` in its config, so it never serves
    /// as a master, not even for a moment.
    ///
    /// # Panics
    ///
    /// If the node cannot be started.
    pub fn restart_as_replica(&mut self, port: u16) {
        let master = self.master_port();
        assert_ne!(master, port, "node {port} is the master");
        let index = self
            .nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"));
        write_replicaof(&self.includes[index], Some(master));
        let node = &mut self.nodes[index];
        if node.is_running() {
            node.kill();
        }
        node.start_again();
    }

    /// Brings the bed back to one master with two online replicas, seen by
    /// every sentinel: resumes stopped nodes and restarts killed ones as
    /// replicas of the current master. Returns the master's port (which may
    /// differ from the one before, see `wait_settled`).
    ///
    /// # Panics
    ///
    /// If the deployment does not settle within 20 s.
    pub fn heal(&mut self) -> u16 {
        self.sigcont_all();
        let dead: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| !n.is_running())
            .map(RedisServer::port)
            .collect();
        for port in dead {
            self.restart_as_replica(port);
        }
        self.wait_settled()
    }

    /// The role (`master`, `slave`) the data node on `port` reports through
    /// `ROLE`, or `None` when it does not answer.
    pub fn role_of(&self, port: u16) -> Option<String> {
        let mut conn = admin_conn(port, self.options.data_password.as_deref()).ok()?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).ok()?;
        match role.first()? {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// Every sentinel's and data node's log, for panic messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            out.push_str(&format!(
                "--- data node {} ---\n{}\n",
                node.port(),
                node.log()
            ));
        }
        for s in &self.sentinels {
            out.push_str(&format!("--- sentinel {} ---\n{}\n", s.port, s.log()));
        }
        out
    }

    fn master_port_on(&self, sentinel_port: u16) -> Option<u16> {
        let mut conn = admin_conn(sentinel_port, self.options.sentinel_password.as_deref()).ok()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query(&mut conn)
            .ok()?;
        addr.map(|(_, port)| port)
    }

    /// Waits until every sentinel names the same master, that master has
    /// two online replicas, and every sentinel sees it up with both
    /// replicas and two other sentinels; returns the master's port.
    ///
    /// The master is read again on every poll: with a 1 s
    /// `down-after-milliseconds`, sentinels occasionally declare a just
    /// promoted master down and fail over once more (see
    /// [`QUIET_AFTER_SWITCH`]), and the bed must settle on whichever master
    /// comes out of that.
    fn wait_settled(&self) -> u16 {
        let pw = self.options.data_password.as_deref();
        let mut master = None;
        let settled = wait_until(SETTLE_TIMEOUT, || {
            let reported: Vec<Option<u16>> = self
                .sentinel_ports()
                .into_iter()
                .map(|p| self.master_port_on(p))
                .collect();
            let Some(Some(port)) = reported.first().copied() else {
                return false;
            };
            master = Some(port);
            let quiet = self
                .switches
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none_or(|at| at.elapsed() >= QUIET_AFTER_SWITCH);
            quiet
                && reported.iter().all(|r| *r == Some(port))
                && self
                    .nodes
                    .iter()
                    .any(|n| n.port() == port && n.is_running())
                && online_replicas(self.node(port), pw) == 2
                && self
                    .sentinel_ports()
                    .into_iter()
                    .all(|p| self.sentinel_settled(p, port))
        });
        assert!(
            settled,
            "the Sentinel deployment did not settle (last master reported: {master:?}) within \
             {SETTLE_TIMEOUT:?}\n{}",
            self.logs()
        );
        master.expect("settled on a master")
    }

    fn sentinel_settled(&self, sentinel_port: u16, master_port: u16) -> bool {
        let Ok(mut conn) = admin_conn(sentinel_port, self.options.sentinel_password.as_deref())
        else {
            return false;
        };
        let Ok(master) = redis::cmd("SENTINEL")
            .arg("master")
            .arg(&self.master_name)
            .query::<std::collections::HashMap<String, String>>(&mut conn)
        else {
            return false;
        };
        let field = |k: &str| master.get(k).map(String::as_str).unwrap_or_default();
        if field("port") != master_port.to_string()
            || field("flags") != "master"
            || field("num-slaves") != "2"
            || field("num-other-sentinels") != "2"
        {
            return false;
        }
        let Ok(replicas) = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg(&self.master_name)
            .query::<Vec<std::collections::HashMap<String, String>>>(&mut conn)
        else {
            return false;
        };
        replicas.len() == 2
            && replicas.iter().all(|r| {
                // `master-link-status` comes from the replica's own INFO,
                // which a sentinel refreshes only every 10 s while the
                // master is up; the master's `state=online` (checked by the
                // caller) is the fresher witness of the link.
                r.get("flags").map(String::as_str) == Some("slave")
            })
    }
}

impl SwitchListener {
    /// Subscribes to `+switch-master` on the sentinel at `port`; returns once
    /// the subscription is in place.
    fn start(port: u16, password: Option<String>) -> SwitchListener {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let last = Arc::new(Mutex::new(None));
        let thread_last = last.clone();
        let thread = std::thread::Builder::new()
            .name(format!("bed-switch-{port}"))
            .spawn(move || {
                let Ok(mut conn) = admin_conn(port, password.as_deref()) else {
                    let _ = ready_tx.send(false);
                    return;
                };
                let mut pubsub = conn.as_pubsub();
                if pubsub.subscribe("+switch-master").is_err() {
                    let _ = ready_tx.send(false);
                    return;
                }
                let _ = ready_tx.send(true);
                let _ = pubsub.set_read_timeout(Some(ms(100)));
                while !thread_stop.load(Ordering::Acquire) {
                    match pubsub.get_message() {
                        Ok(msg) => {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            if let Some(switch) = parse_switch(&payload) {
                                *thread_last.lock().unwrap_or_else(PoisonError::into_inner) =
                                    Some(switch.at);
                                let _ = tx.send(switch);
                            }
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => return,
                    }
                }
            })
            .expect("spawn the +switch-master listener");
        let ready = ready_rx.recv_timeout(ADMIN_TIMEOUT * 2).unwrap_or(false);
        assert!(
            ready,
            "cannot subscribe to +switch-master on sentinel {port}"
        );
        SwitchListener {
            events: Mutex::new(rx),
            last,
            stop,
            thread: Some(thread),
        }
    }
}

/// `<name> <old ip> <old port> <new ip> <new port>`.
fn parse_switch(payload: &str) -> Option<Switch> {
    let parts: Vec<&str> = payload.split_whitespace().collect();
    if parts.len() != 5 {
        return None;
    }
    Some(Switch {
        at: Instant::now(),
        old_port: parts[2].parse().ok()?,
        new_port: parts[4].parse().ok()?,
    })
}

/// A data node's extra arguments: replication settings, passwords and
/// the file with its `replicaof` line.
fn data_args(options: &BedOptions, include: &Path) -> Vec<String> {
    let mut args: Vec<String> = ["--repl-diskless-sync-delay", "0"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    if let Some(pw) = &options.data_password {
        args.extend(["--requirepass".to_owned(), pw.clone()]);
        args.extend(["--masterauth".to_owned(), pw.clone()]);
    }
    args.extend(["--include".to_owned(), include.display().to_string()]);
    args
}

/// Writes the `include` file of a data node: `replicaof` of `master`, or
/// nothing for a master.
fn write_replicaof(path: &Path, master: Option<u16>) {
    let line = master.map_or_else(String::new, |p| format!("replicaof 127.0.0.1 {p}\n"));
    fs::write(path, line).expect("write a data node's include file");
}

/// A 40-hex-digit sentinel id, unique per port and index.
fn sentinel_id(port: u16, index: usize) -> String {
    format!("{:08x}{:04x}{:028x}", std::process::id(), port, index + 1)
}

/// Writes `conf` to `dir`/sentinel.conf and starts a sentinel with it.
///
/// # Panics
///
/// When the file cannot be written or `redis-sentinel` cannot be spawned.
fn spawn_sentinel_conf(conf: &str, dir: &Path) -> Child {
    let conf_path = dir.join("sentinel.conf");
    fs::write(&conf_path, conf).expect("write sentinel.conf");
    let bin = redis_sentinel_bin();
    let mut command = Command::new(&bin);
    command
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    super::spawn_owned(command, dir).unwrap_or_else(|e| {
        panic!(
            "cannot spawn redis-sentinel `{bin}`: {e}. The Sentinel tests need a real \
                 redis-sentinel: install the Debian package `redis-sentinel` or set \
                 ${REDIS_SENTINEL_ENV} to its path. (Not skipping: a missing binary is a \
                 failure.)"
        )
    })
}

/// Spawns one sentinel on `port` (on a fresh port if it loses that one)
/// and waits until it answers `PING`.
fn spawn_sentinel(
    port: u16,
    id: &str,
    master_name: &str,
    master_port: u16,
    replica_ports: &[u16],
    peers: &[(u16, String)],
    options: &BedOptions,
) -> SentinelProcess {
    let mut failures = Vec::new();
    let mut port = port;
    for attempt in 1..=START_ATTEMPTS {
        let dir = tempfile::Builder::new()
            .prefix("redguard-sentinel-")
            .tempdir()
            .expect("create a temporary directory for redis-sentinel");
        let conf = sentinel_conf(
            port,
            id,
            master_name,
            master_port,
            replica_ports,
            peers,
            options,
            dir.path(),
        );
        let child = spawn_sentinel_conf(&conf, dir.path());
        // Dropping `process` kills the child and gives the port back.
        let mut process = SentinelProcess {
            child: Some(child),
            port,
            dir,
        };
        let password = options.sentinel_password.as_deref();
        let mut exited = false;
        let answered = wait_until(ms(5000), || {
            exited = process
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            exited || sentinel_answers(port, password)
        });
        if answered && !exited {
            return process;
        }
        failures.push(format!(
            "attempt {attempt}: port {port}: {}\n{}",
            if exited { "exited" } else { "no answer" },
            process.log()
        ));
        drop(process);
        // The peers' configs name the old port: a sentinel that had to move
        // is found through hello messages instead, which only takes longer.
        port = bind_reserved().local_addr().expect("local_addr").port();
    }
    panic!(
        "redis-sentinel did not start after {START_ATTEMPTS} attempts:\n{}",
        failures.join("\n")
    );
}

#[allow(
    clippy::too_many_arguments,
    reason = "a flat list of what one config file holds"
)]
fn sentinel_conf(
    port: u16,
    id: &str,
    name: &str,
    master_port: u16,
    replica_ports: &[u16],
    peers: &[(u16, String)],
    options: &BedOptions,
    dir: &std::path::Path,
) -> String {
    let mut conf = format!(
        "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
         sentinel myid {id}\n\
         sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
         sentinel down-after-milliseconds {name} {down}\n\
         sentinel failover-timeout {name} {failover}\n\
         sentinel parallel-syncs {name} 1\n",
        dir = dir.display(),
        log = dir.join("sentinel.log").display(),
        down = DOWN_AFTER.as_millis(),
        failover = FAILOVER_TIMEOUT.as_millis(),
    );
    if let Some(pw) = &options.data_password {
        conf.push_str(&format!("sentinel auth-pass {name} {pw}\n"));
    }
    if let Some(pw) = &options.sentinel_password {
        // Sentinels authenticate to each other with their own requirepass.
        conf.push_str(&format!("requirepass {pw}\n"));
    }
    for p in replica_ports {
        conf.push_str(&format!("sentinel known-replica {name} 127.0.0.1 {p}\n"));
    }
    for (p, peer_id) in peers {
        conf.push_str(&format!(
            "sentinel known-sentinel {name} 127.0.0.1 {p} {peer_id}\n"
        ));
    }
    conf
}

/// Shortens two of the sentinel's fixed periods (`SENTINEL DEBUG`, Redis
/// 7.0 and Valkey; Redis 6.2 refuses the command and keeps its own):
/// * `INFO` of its nodes every second instead of every 10 s, so that a node
///   [`SentinelBed::heal`] restarted as a replica, or a demoted master to
///   turn into one, is seen within a second;
/// * `PING` every 500 ms instead of every second. A sentinel's fresh link
///   to a promoted master sends its first `PING` one period after the link
///   was made: with the bed's 1 s `down-after-milliseconds`, a 1 s period
///   flags the new master down now and then, and a second failover
///   follows (with its 8–12 s of settling).
fn fast_periods(port: u16, password: Option<&str>) {
    if let Ok(mut conn) = admin_conn(port, password) {
        let _: redis::RedisResult<()> = redis::cmd("SENTINEL")
            .arg("DEBUG")
            .arg("INFO-PERIOD")
            .arg(1000)
            .arg("PING-PERIOD")
            .arg(500)
            .query(&mut conn);
    }
}

/// The `redis-sentinel` binary: `$REDGUARD_REDIS_SENTINEL`, or
/// `redis-sentinel` from `PATH`.
pub fn redis_sentinel_bin() -> String {
    std::env::var(REDIS_SENTINEL_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-sentinel".to_owned())
}

fn sentinel_answers(port: u16, password: Option<&str>) -> bool {
    let Ok(mut conn) = admin_conn(port, password) else {
        return false;
    };
    redis::cmd("PING")
        .query::<String>(&mut conn)
        .is_ok_and(|p| p == "PONG")
}

/// Replicas the master on `master` reports with `state=online`.
fn online_replicas(master: &RedisServer, password: Option<&str>) -> usize {
    let Ok(mut conn) = admin_conn(master.port(), password) else {
        return 0;
    };
    let Ok(info) = redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut conn)
    else {
        return 0;
    };
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

/// A connection to `127.0.0.1:port`, authenticated with `password`, with
/// 2 s timeouts.
fn admin_conn(port: u16, password: Option<&str>) -> redis::RedisResult<redis::Connection> {
    let url = match password {
        Some(pw) => format!("redis://:{}@127.0.0.1:{port}/", percent_encode(pw)),
        None => format!("redis://127.0.0.1:{port}/"),
    };
    let client = super::admin_client(&url)?;
    let conn = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
    conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
    conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
    Ok(conn)
}

/// Percent-encodes everything but ASCII letters, digits, `-` and `_`.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One sentinel that speaks only TLS, watching a TLS master (from
/// [`RedisServer::start_tls`], whose certificates it shares): it accepts
/// clients on a TLS port and reaches the master over TLS with the client
/// certificate (`tls-replication yes`). Dropping it kills the process.
#[cfg(feature = "tls")]
pub struct TlsSentinel {
    process: SentinelProcess,
}

#[cfg(feature = "tls")]
impl TlsSentinel {
    /// Starts it with `sentinel monitor <master_name> <master> 1` and waits
    /// until it answers `PING` over TLS.
    ///
    /// # Panics
    ///
    /// When no sentinel answers after a few attempts on fresh ports.
    pub fn start(master: &RedisServer, master_name: &str) -> TlsSentinel {
        let certs = master.certs();
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = bind_reserved().local_addr().expect("local_addr").port();
            let dir = tempfile::Builder::new()
                .prefix("redguard-tls-sentinel-")
                .tempdir()
                .expect("create a temporary directory for redis-sentinel");
            let path = |name: &str| certs.path(name).display().to_string();
            let conf = format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                 logfile {dir}/sentinel.log\ntls-cert-file {server_crt}\n\
                 tls-key-file {server_key}\ntls-ca-cert-file {ca}\n\
                 tls-client-cert-file {client_crt}\ntls-client-key-file {client_key}\n\
                 tls-replication yes\nsentinel monitor {master_name} 127.0.0.1 {master_port} 1\n",
                dir = dir.path().display(),
                server_crt = path("server.crt"),
                server_key = path("server.key"),
                ca = path("ca.crt"),
                client_crt = path("client.crt"),
                client_key = path("client.key"),
                master_port = master.port(),
            );
            let child = spawn_sentinel_conf(&conf, dir.path());
            let process = SentinelProcess {
                child: Some(child),
                port,
                dir,
            };
            let client = certs
                .client(format!("rediss://127.0.0.1:{port}/"))
                .expect("a TLS client for the sentinel");
            let answered = wait_until(ms(5000), || {
                client
                    .get_connection_with_timeout(ms(500))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            });
            if answered {
                return TlsSentinel { process };
            }
            failures.push(format!("attempt {attempt}: port {port}"));
        }
        panic!("no TLS sentinel answered: {failures:?}");
    }

    /// Its TLS port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port
    }
}

#[cfg(test)]
mod selftest {
    use super::*;

    /// The bed comes up settled, one `kill -9` of the master is followed by
    /// `+switch-master` and a new master, and `heal` brings the old master
    /// back as a replica. Prints Sentinel's promotion time.
    #[test]
    fn sentinel_bed_failover_and_heal() {
        let started = Instant::now();
        let mut bed = SentinelBed::start();
        let up = started.elapsed();
        let old = bed.master_port();
        assert_eq!(old, bed.node_ports()[0]);
        assert_eq!(bed.replicas().len(), 2);
        assert_eq!(bed.role_of(old).as_deref(), Some("master"));

        // WAIT counts the acknowledgements of its own connection's writes.
        let mut conn = bed.data_conn(old);
        let () = redis::cmd("SET")
            .arg("bed:k")
            .arg("v")
            .query(&mut conn)
            .unwrap();
        let acked: u64 = redis::cmd("WAIT")
            .arg(2)
            .arg(1000)
            .query(&mut conn)
            .unwrap();
        assert_eq!(acked, 2);

        bed.drain_switches();
        let (killed, at) = bed.kill_master();
        assert_eq!(killed, old);
        let switch = bed
            .wait_switch(old, ms(15_000))
            .unwrap_or_else(|| panic!("no +switch-master within 15 s\n{}", bed.logs()));
        let promotion = switch.at - at;
        let new = bed
            .wait_new_master(old, ms(10_000))
            .unwrap_or_else(|| panic!("sentinels did not agree\n{}", bed.logs()));
        assert_eq!(new, switch.new_port);
        assert_ne!(new, old);
        let value: Option<String> = redis::cmd("GET")
            .arg("bed:k")
            .query(&mut bed.data_conn(new))
            .unwrap();
        assert_eq!(value.as_deref(), Some("v"), "a replicated write survives");

        let healed_at = Instant::now();
        // Healed: one master, every other node its replica. Not
        // necessarily `new`: sentinels sometimes fail a just promoted
        // master over once more (`QUIET_AFTER_SWITCH`), and the restarted
        // old node may then be the one promoted.
        let master = bed.heal();
        for port in bed.node_ports() {
            let role = if port == master { "master" } else { "slave" };
            assert_eq!(bed.role_of(port).as_deref(), Some(role), "node {port}");
        }
        eprintln!(
            "sentinel bed: up in {up:?}; promotion (+switch-master after kill -9) {promotion:?}; \
             healed in {:?}",
            healed_at.elapsed()
        );
        assert!(
            promotion < ms(10_000),
            "promotion took {promotion:?}\n{}",
            bed.logs()
        );
    }
}
