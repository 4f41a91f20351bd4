//! A private `redis-server` on a free loopback port, one per test.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

#[cfg(feature = "tls")]
use super::tls::TestCerts;
use super::{
    CommandStat, REDIS_SERVER_ENV, bind_reserved, command_calls, commandstats, ms,
    redis_server_bin, release_port, sleep,
};

/// Attempts [`RedisServer::start`] makes, each on a new port.
const START_ATTEMPTS: usize = 5;
/// How long one spawned server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`RedisServer::restart`] keeps retrying when the port is busy.
const RESTART_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server gets to exit after `SHUTDOWN NOSAVE` or `SIGKILL`.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Read and write timeout of the admin connections from [`RedisServer::conn`].
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A `redis-server` child process on `127.0.0.1`, with its own temporary
/// directory and log file.
///
/// Persistence is off (`--save "" --appendonly no`) unless `extra_args`
/// turn it on. Dropping the value resumes the process if it was frozen,
/// kills it, waits for it and removes the directory.
///
/// [`start_tls`](Self::start_tls) makes the TLS variant: the same port
/// reservation, restarts and readiness check (a real `PING` over TLS),
/// with the plaintext port closed.
pub struct RedisServer {
    /// The running process; `None` after [`kill`](Self::kill) or
    /// [`stop_nosave`](Self::stop_nosave).
    child: Option<Child>,
    port: u16,
    extra_args: Vec<String>,
    #[cfg(feature = "tls")]
    tls: Option<TestCerts>,
    dir: TempDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.child.as_ref().map(Child::id))
            .field("extra_args", &self.extra_args)
            .field("tls", &self.is_tls())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Why one spawn attempt did not produce a server that answers.
enum NotReady {
    /// The process exited, usually because it lost the race for the port.
    Exited(String),
    /// Another redis-server (this pid) answers on the port.
    Foreign(u32),
    /// The process is alive but did not answer within the deadline.
    Silent,
}

impl RedisServer {
    /// Starts a server with the default arguments.
    ///
    /// # Panics
    ///
    /// If `redis-server` cannot be spawned, or no attempt produced a server
    /// that answers `PING`. The message includes the server log.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with `extra_args` appended to the default arguments,
    /// for example `&["--enable-debug-command", "yes"]`.
    ///
    /// Makes up to 5 attempts, each on a fresh free port.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::launch(Self::unstarted(extra_args))
    }

    /// Starts a master and a replica of it, and waits until the replica has
    /// synced (`master_link_status:up`). The master has no diskless-sync
    /// delay, so the replica syncs at once.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if the replica has not synced within
    /// 10 s.
    pub fn start_master_and_replica() -> (Self, Self) {
        let master = Self::start_with(&["--repl-diskless-sync-delay", "0"]);
        let port = master.port().to_string();
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &port]);
        let synced = crate::support::wait_until(Duration::from_secs(10), || {
            let info: String = replica.cmd("INFO", &[b"replication"]);
            info.contains("master_link_status:up")
        });
        assert!(synced, "the replica did not sync within 10 s");
        (master, replica)
    }

    /// Starts a TLS-only server (`--port 0 --tls-port P`) with a fresh CA,
    /// server and client certificates ([`certs`](Self::certs)); clients
    /// must present the client certificate (`tls-auth-clients` keeps its
    /// default, `yes`). Ready means a `PING` over TLS answered.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if `openssl` cannot make the
    /// certificates.
    #[cfg(feature = "tls")]
    pub fn start_tls() -> Self {
        let caps = super::caps();
        assert!(
            caps.has(super::Cap::Tls),
            "{} (`{}`) was built without TLS; a TLS test must check \
             `support::lacks(Cap::Tls)` first",
            caps.server,
            redis_server_bin()
        );
        let mut server = Self::unstarted(&[]);
        server.tls = Some(TestCerts::make());
        Self::launch(server)
    }

    /// The TLS files of a server from [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// For a plaintext server.
    #[cfg(feature = "tls")]
    pub fn certs(&self) -> &TestCerts {
        self.tls.as_ref().expect("not a TLS server")
    }

    /// Whether clients must use TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        return false;
    }

    fn unstarted(extra_args: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redguard-redis-")
            .tempdir()
            .expect("create a temporary directory for redis-server");
        Self {
            child: None,
            port: 0,
            extra_args: extra_args.iter().map(|&s| s.to_owned()).collect(),
            #[cfg(feature = "tls")]
            tls: None,
            dir,
        }
    }

    /// Starts a cluster node with `extra_args` on a port `P` whose bus
    /// port `P + 10000` is free and reserved too: for servers without
    /// `--cluster-port` (Redis 6.2), whose bus always listens there.
    /// Returns the server and its bus port, which the caller gives back
    /// with [`release_port`](super::release_port) once the node is gone.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_bus_at_offset(extra_args: &[&str]) -> (Self, u16) {
        let mut bus = 0;
        let server = Self::launch_on(Self::unstarted(extra_args), || {
            if bus != 0 {
                // The previous attempt's pair: its port was given back.
                release_port(bus);
            }
            for _ in 0..100 {
                let port = free_port();
                if let Some(b) = port.checked_add(10_000)
                    && super::reserve_port(b)
                {
                    if std::net::TcpListener::bind(("127.0.0.1", b)).is_ok() {
                        bus = b;
                        return port;
                    }
                    release_port(b);
                }
                release_port(port);
            }
            panic!("no free port P with P + 10000 free as well in 100 tries");
        });
        (server, bus)
    }

    /// Makes up to 5 attempts, each on a fresh reserved port.
    fn launch(server: Self) -> Self {
        Self::launch_on(server, free_port)
    }

    /// Makes up to 5 attempts, each on a reserved port from `pick`.
    fn launch_on(mut server: Self, mut pick: impl FnMut() -> u16) -> Self {
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = pick();
            let mut child = server.spawn(port);
            match wait_ready(&mut child, &server.admin_client(port), READY_TIMEOUT) {
                Ok(()) => {
                    server.port = port;
                    server.child = Some(child);
                    return server;
                }
                Err(not_ready) => {
                    kill_and_wait(&mut child);
                    release_port(port);
                    failures.push(format!("attempt {attempt}: port {port}: {not_ready}"));
                }
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts:\n{}\n--- {} ---\n{}",
            failures.join("\n"),
            server.log_path().display(),
            server.log(),
        );
    }

    /// The TCP port, kept across [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL, `redis://127.0.0.1:<port>/` (`rediss://` for a
    /// TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The process id of the running server.
    ///
    /// # Panics
    ///
    /// If the server is not running (after `kill` or `stop_nosave`).
    pub fn pid(&self) -> u32 {
        self.running_child().id()
    }

    /// Whether a server process is currently running (it may be frozen).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The contents of the server log (every start and restart appends to
    /// it), or a note saying why it could not be read.
    pub fn log(&self) -> String {
        let path = self.log_path();
        fs::read_to_string(&path)
            .unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()))
    }

    /// A fresh admin connection with 2 s read and write timeouts.
    ///
    /// # Panics
    ///
    /// If the connection cannot be made; the message includes the log.
    pub fn conn(&self) -> redis::Connection {
        let result = self.admin_client(self.port).and_then(|client| {
            let conn = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
            conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
            conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
            Ok(conn)
        });
        result.unwrap_or_else(|e| {
            panic!(
                "cannot connect to redis-server at {}: {e}\n--- log ---\n{}",
                self.url(),
                self.log()
            )
        })
    }

    /// Runs one command on a fresh admin connection and converts the reply,
    /// e.g. `server.cmd::<String>("GET", &[b"key"])`.
    ///
    /// # Panics
    ///
    /// If the connection or the command fails, or the reply does not convert
    /// to `T`; the message includes the log.
    pub fn cmd<T: redis::FromRedisValue>(&self, name: &str, args: &[&[u8]]) -> T {
        let mut conn = self.conn();
        let mut cmd = redis::cmd(name);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn).unwrap_or_else(|e| {
            panic!(
                "redis command {name} failed on {}: {e}\n--- log ---\n{}",
                self.url(),
                self.log()
            )
        })
    }

    /// `PTTL key` in ms: -2 when the key does not exist, -1 when it has no
    /// expiry.
    ///
    /// # Panics
    ///
    /// As [`cmd`](Self::cmd).
    pub fn pttl(&self, key: impl AsRef<[u8]>) -> i64 {
        self.cmd("PTTL", &[key.as_ref()])
    }

    /// Whether `key` exists.
    ///
    /// # Panics
    ///
    /// As [`cmd`](Self::cmd).
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        self.cmd::<i64>("EXISTS", &[key.as_ref()]) == 1
    }

    /// How many times the server ran any of `commands` (lower case, e.g.
    /// `["eval", "evalsha"]`), from `INFO commandstats`.
    ///
    /// # Panics
    ///
    /// As [`cmd`](Self::cmd).
    pub fn command_calls(&self, commands: &[&str]) -> u64 {
        let info: String = self.cmd("INFO", &[b"commandstats"]);
        command_calls(&info, commands)
    }

    /// Waits (at most 5 s) until the server has run no script for 20
    /// polls in a row (about 100 ms): every waiter has made its attempts,
    /// before and after its subscription, and sleeps. Only a message or
    /// its own timer wakes it then. `false` when scripts kept running.
    ///
    /// # Panics
    ///
    /// As [`cmd`](Self::cmd).
    pub fn wait_scripts_idle(&self) -> bool {
        let mut last = self.command_calls(&["eval", "evalsha"]);
        let mut still = 0;
        super::wait_until(Duration::from_secs(5), || {
            let now = self.command_calls(&["eval", "evalsha"]);
            still = if now == last { still + 1 } else { 0 };
            last = now;
            still >= 20
        })
    }

    /// Every line of `INFO commandstats`, parsed.
    ///
    /// # Panics
    ///
    /// As [`cmd`](Self::cmd).
    pub fn commandstats(&self) -> BTreeMap<String, CommandStat> {
        let info: String = self.cmd("INFO", &[b"commandstats"]);
        commandstats(&info)
    }

    /// Kills the server with `SIGKILL` and waits for it. The port is kept
    /// for [`restart`](Self::restart) / [`start_again`](Self::start_again).
    /// Does nothing if the server is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_wait(&mut child);
        }
    }

    /// Kills the server if it is running and starts a new one on the same
    /// port with an empty dataset, waiting until it answers `PING`.
    ///
    /// Any `dump.rdb` or AOF in the directory is removed first. If the port
    /// is briefly busy, retries for about 5 s.
    ///
    /// # Panics
    ///
    /// If no server answers on the port within that time; the message
    /// includes the log.
    pub fn restart(&mut self) {
        self.kill();
        self.remove_data();
        self.start_on_same_port();
    }

    /// Stops the server cleanly (`SHUTDOWN`, which writes what persistence
    /// is configured) and starts it again on the same port, keeping its
    /// data files: with `--appendonly yes` the dataset survives.
    ///
    /// # Panics
    ///
    /// As [`stop_nosave`](Self::stop_nosave) and [`restart`](Self::restart).
    pub fn restart_keeping_data(&mut self) {
        self.shutdown_with("SAVE");
        self.start_on_same_port();
    }

    /// Stops the server cleanly (`SHUTDOWN SAVE`), keeping its data files
    /// and its port for [`start_keeping_data`](Self::start_keeping_data):
    /// an outage of a server whose dataset comes back (with
    /// `--appendonly yes`).
    ///
    /// # Panics
    ///
    /// As [`stop_nosave`](Self::stop_nosave).
    pub fn stop_keeping_data(&mut self) {
        self.shutdown_with("SAVE");
    }

    /// Starts the server again on its port after
    /// [`stop_keeping_data`](Self::stop_keeping_data), with its data files.
    ///
    /// # Panics
    ///
    /// If the server is still running, or as [`restart`](Self::restart).
    pub fn start_keeping_data(&mut self) {
        assert!(
            self.child.is_none(),
            "start_keeping_data: redis-server is still running (pid {})",
            self.pid()
        );
        self.start_on_same_port();
    }

    /// Asks the server to exit with `SHUTDOWN NOSAVE` and waits for it.
    ///
    /// # Panics
    ///
    /// If the server is not running or does not exit within 5 s (it is then
    /// killed before the panic).
    pub fn stop_nosave(&mut self) {
        self.shutdown_with("NOSAVE");
    }

    fn shutdown_with(&mut self, how: &str) {
        let mut conn = self.conn();
        // The server closes the connection instead of replying, so the
        // result is an I/O error on success; only the exit below counts.
        let _ = redis::cmd("SHUTDOWN").arg(how).exec(&mut conn);
        drop(conn);
        let mut child = self
            .child
            .take()
            .expect("shutdown: redis-server is not running");
        if let Err(status) = wait_exit(&mut child, EXIT_TIMEOUT) {
            kill_and_wait(&mut child);
            panic!(
                "redis-server did not exit within {EXIT_TIMEOUT:?} after SHUTDOWN {how} \
                 ({status})\n--- log ---\n{}",
                self.log()
            );
        }
    }

    /// Starts the server again on the same port after
    /// [`kill`](Self::kill) or [`stop_nosave`](Self::stop_nosave), like
    /// [`restart`](Self::restart) but without killing anything.
    ///
    /// # Panics
    ///
    /// If the server is still running, or as [`restart`](Self::restart).
    pub fn start_again(&mut self) {
        assert!(
            self.child.is_none(),
            "start_again: redis-server is still running (pid {}); use restart()",
            self.pid()
        );
        self.remove_data();
        self.start_on_same_port();
    }

    /// Freezes the server with `SIGSTOP` and waits (up to 1 s) until the
    /// kernel reports it stopped. The kernel still accepts connections and
    /// buffers data for it.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn sigstop(&self) {
        let pid = self.pid();
        signal(pid, libc::SIGSTOP);
        wait_proc_state(pid, true);
    }

    /// Resumes a server frozen by [`sigstop`](Self::sigstop).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn sigcont(&self) {
        let pid = self.pid();
        signal(pid, libc::SIGCONT);
        wait_proc_state(pid, false);
    }

    /// Pauses all clients for `ms` milliseconds with `CLIENT PAUSE <ms> ALL`.
    ///
    /// # Panics
    ///
    /// If the command fails.
    pub fn client_pause(&self, ms: u64) {
        let ms = ms.to_string();
        let () = self.cmd("CLIENT", &[b"PAUSE", ms.as_bytes(), b"ALL"]);
    }

    fn running_child(&self) -> &Child {
        self.child
            .as_ref()
            .expect("redis-server is not running (killed or stopped)")
    }

    fn password(&self) -> Option<&str> {
        server_password(&self.extra_args)
    }

    /// A redis-rs client for admin connections to `port`: the server's
    /// password, and over TLS with the test client certificate.
    fn admin_client(&self, port: u16) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.tls {
            return certs.client(admin_url("rediss", port, self.password()));
        }
        super::admin_client(&admin_url("redis", port, self.password()))
    }

    /// Removes every data file, so the next start begins empty.
    fn remove_data(&self) {
        for file in ["dump.rdb", "appendonly.aof"] {
            let _ = fs::remove_file(self.dir.path().join(file));
        }
        let _ = fs::remove_dir_all(self.dir.path().join("appendonlydir"));
    }

    fn log_path(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Spawns `redis-server` on `port` without waiting for it.
    fn spawn(&self, port: u16) -> Child {
        let bin = redis_server_bin();
        let mut command = Command::new(&bin);
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.tls {
            command
                .args(["--port", "0", "--tls-port"])
                .arg(port.to_string())
                .arg("--tls-cert-file")
                .arg(certs.path("server.crt"))
                .arg("--tls-key-file")
                .arg(certs.path("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(certs.path("ca.crt"));
        } else {
            command.arg("--port").arg(port.to_string());
        }
        #[cfg(not(feature = "tls"))]
        command.arg("--port").arg(port.to_string());
        command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        super::spawn_owned(command, self.dir.path()).unwrap_or_else(|e| {
            panic!(
                "cannot spawn redis-server `{bin}`: {e}. The integration tests need a real \
                 redis-server: install the Debian package `redis-server` or set \
                 ${REDIS_SERVER_ENV} to its path. (Not skipping: a missing server is a failure.)"
            )
        })
    }

    /// Spawns on `self.port` until a server answers, for about 5 s.
    fn start_on_same_port(&mut self) {
        debug_assert!(self.child.is_none());
        let deadline = Instant::now() + RESTART_TIMEOUT;
        let mut failures = Vec::new();
        // Bounded by the deadline; the count is a second, independent bound.
        for attempt in 1..=100 {
            let mut child = self.spawn(self.port);
            let remaining = deadline.saturating_duration_since(Instant::now());
            let admin = self.admin_client(self.port);
            match wait_ready(&mut child, &admin, remaining.max(ms(500))) {
                Ok(()) => {
                    self.child = Some(child);
                    return;
                }
                Err(not_ready) => {
                    kill_and_wait(&mut child);
                    failures.push(format!("attempt {attempt}: {not_ready}"));
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            sleep(ms(50));
        }
        panic!(
            "redis-server did not restart on port {} within {RESTART_TIMEOUT:?}:\n{}\n--- log ---\n{}",
            self.port,
            failures.join("\n"),
            self.log()
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen process still dies from SIGKILL, but resume it anyway
            // so nothing is left stopped if the kill fails.
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: `kill` has no memory-safety preconditions; `pid` is
                // our own child, which has not been reaped yet.
                unsafe {
                    libc::kill(pid, libc::SIGCONT);
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.port != 0 {
            release_port(self.port);
        }
        // `self.dir` (TempDir) removes the directory when it drops.
    }
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(status) => write!(f, "exited ({status})"),
            Self::Foreign(pid) => write!(f, "port answered by another redis-server (pid {pid})"),
            Self::Silent => write!(f, "no answer within the deadline"),
        }
    }
}

/// A port that was free a moment ago and is now reserved for this process's
/// caller: bind `127.0.0.1:0`, read the port, close the listener.
fn free_port() -> u16 {
    bind_reserved().local_addr().expect("local_addr").port()
}

/// The `--requirepass` value among `args`, if any.
fn server_password<S: AsRef<str>>(args: &[S]) -> Option<&str> {
    let pos = args.iter().position(|a| a.as_ref() == "--requirepass")?;
    args.get(pos + 1).map(AsRef::as_ref)
}

/// A URL for admin connections, with the server's password when it has one.
fn admin_url(scheme: &str, port: u16, password: Option<&str>) -> String {
    match password {
        Some(pw) => {
            let pw: String = pw
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
            format!("{scheme}://:{pw}@127.0.0.1:{port}/")
        }
        None => format!("{scheme}://127.0.0.1:{port}/"),
    }
}

/// Polls `port` until the child answers, the child exits or `timeout`
/// passes.
///
/// "The child answers" means `PING` gets `PONG` and `INFO server` reports
/// the child's pid: a `PONG` alone could come from another server that won
/// the race for the port while the child was still starting.
fn wait_ready(
    child: &mut Child,
    admin: &redis::RedisResult<redis::Client>,
    timeout: Duration,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotReady::Exited(status.to_string()));
        }
        let pid = admin
            .as_ref()
            .ok()
            .and_then(|client| answering_pid(client, ms(250)));
        match pid {
            Some(pid) if pid == child.id() => return Ok(()),
            Some(pid) => return Err(NotReady::Foreign(pid)),
            None => {}
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Silent);
        }
        sleep(ms(10));
    }
}

/// The `process_id` of the redis-server answering `PING` through
/// `client`, or `None` if nothing answers.
fn answering_pid(client: &redis::Client, timeout: Duration) -> Option<u32> {
    let mut conn = client.get_connection_with_timeout(timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    let pong: String = redis::cmd("PING").query(&mut conn).ok()?;
    if pong != "PONG" {
        return None;
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))?
        .trim()
        .parse()
        .ok()
}

/// Waits up to `timeout` for `child` to exit, polling `try_wait`.
fn wait_exit(child: &mut Child, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if Instant::now() >= deadline {
            return Err("still running".to_owned());
        }
        sleep(ms(5));
    }
}

/// `SIGKILL` and reap; errors are ignored (the process may be gone).
fn kill_and_wait(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `sig` to `pid`, panicking on failure.
fn signal(pid: u32, sig: libc::c_int) {
    let pid_t = libc::pid_t::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: `kill` has no memory-safety preconditions; `pid` is our own
    // unreaped child, so it cannot have been recycled.
    let rc = unsafe { libc::kill(pid_t, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}) failed: {}",
        io::Error::last_os_error()
    );
}

/// Waits up to 1 s until `/proc/<pid>/stat` shows the process stopped
/// (`stopped == true`) or not stopped. Returns quietly where `/proc` is
/// unavailable.
fn wait_proc_state(pid: u32, stopped: bool) {
    let path = format!("/proc/{pid}/stat");
    let is_stopped = || -> Option<bool> {
        let stat = fs::read_to_string(&path).ok()?;
        // The state letter follows the parenthesised command name.
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        Some(matches!(state, 'T' | 't'))
    };
    if is_stopped().is_none() {
        return;
    }
    let reached = super::wait_until(Duration::from_secs(1), || {
        is_stopped().is_none_or(|s| s == stopped)
    });
    assert!(
        reached,
        "process {pid} did not become {} within 1 s",
        if stopped { "stopped" } else { "running" }
    );
}
