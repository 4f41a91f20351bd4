//! Tests of the test support itself: real servers, real sockets.

use std::collections::HashSet;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::proxy::thread_name;
use super::{FaultProxy, Mode, RedisServer, ms, unique_name, wait_until};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

/// A raw TCP connection to `127.0.0.1:port` with the given read timeout.
fn raw_connect(port: u16, read_timeout: Duration) -> TcpStream {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, ms(1000)).unwrap();
    stream.set_read_timeout(Some(read_timeout)).unwrap();
    stream.set_write_timeout(Some(ms(1000))).unwrap();
    stream
}

/// Sends a raw `PING` and reads the 7-byte reply.
fn raw_ping(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    stream.write_all(PING)?;
    let mut reply = vec![0_u8; PONG.len()];
    stream.read_exact(&mut reply)?;
    Ok(reply)
}

/// A redis-crate connection through `url` with the given read timeout.
fn redis_conn(url: &str, read_timeout: Duration) -> redis::Connection {
    let client = redis::Client::open(url).unwrap();
    let conn = client.get_connection_with_timeout(ms(1000)).unwrap();
    conn.set_read_timeout(Some(read_timeout)).unwrap();
    conn.set_write_timeout(Some(ms(1000))).unwrap();
    conn
}

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

/// Names of this process's threads whose name ends with `-<port>` and
/// starts with `fproxy-`.
fn proxy_threads(port: u16) -> Vec<String> {
    let suffix = format!("-{port}");
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .filter(|name| name.starts_with("fproxy-") && name.ends_with(&suffix))
        .collect()
}

#[test]
fn helpers_unique_name_and_wait_until() {
    let names: HashSet<String> = (0..100).map(|_| unique_name("lock")).collect();
    assert_eq!(names.len(), 100);
    let name = unique_name("x");
    assert!(
        name.starts_with(&format!("x-{}-", std::process::id())),
        "{name}"
    );

    let start = Instant::now();
    assert!(!wait_until(ms(50), || false));
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(50) && elapsed < ms(1000), "{elapsed:?}");

    let mut calls = 0;
    assert!(wait_until(ms(1000), || {
        calls += 1;
        calls == 3
    }));
    assert_eq!(calls, 3);
    assert!(wait_until(Duration::ZERO, || true));
}

#[test]
fn server_starts_and_answers_ping() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 0);
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.pid() > 0);
    assert_eq!(server.cmd::<String>("PING", &[]), "PONG");
    let mut conn = server.conn();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let mut raw = raw_connect(server.port(), ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.log()
    );
    assert!(server.dir().join("redis.log").is_file());
}

#[test]
fn server_start_with_extra_args() {
    let server = RedisServer::start_with(&["--maxclients", "77"]);
    let reply: Vec<String> = server.cmd("CONFIG", &[b"GET", b"maxclients"]);
    assert_eq!(reply, ["maxclients", "77"]);
}

#[test]
fn server_cmd_with_args() {
    let server = RedisServer::start();
    let () = server.cmd("SET", &[b"k", b"v"]);
    assert_eq!(
        server.cmd::<Option<String>>("GET", &[b"k"]).as_deref(),
        Some("v")
    );
    assert_eq!(server.cmd::<Option<String>>("GET", &[b"missing"]), None);
}

#[test]
fn server_restart_empties_data_and_keeps_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    let pid = server.pid();
    let () = server.cmd("SET", &[b"k", b"v"]);
    // Even an explicit SAVE must not leak into the restarted server.
    let () = server.cmd("SAVE", &[]);

    server.restart();

    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(server.cmd::<Option<String>>("GET", &[b"k"]), None);
    assert_eq!(server.cmd::<u64>("DBSIZE", &[]), 0);
    assert_eq!(server.cmd::<String>("PING", &[]), "PONG");
}

#[test]
fn server_kill_then_start_again() {
    let mut server = RedisServer::start();
    let port = server.port();
    server.kill();
    assert!(!server.is_running());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let err = TcpStream::connect_timeout(&addr, ms(500)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);

    server.start_again();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd::<String>("PING", &[]), "PONG");
}

#[test]
fn server_stop_nosave_then_start_again() {
    let mut server = RedisServer::start();
    let port = server.port();
    let () = server.cmd("SET", &[b"k", b"v"]);
    server.stop_nosave();
    assert!(!server.is_running());
    assert!(!server.dir().join("dump.rdb").exists());

    server.start_again();
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd::<Option<String>>("GET", &[b"k"]), None);
}

#[test]
fn two_servers_get_different_ports() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.dir(), b.dir());
    let () = a.cmd("SET", &[b"k", b"a"]);
    assert_eq!(b.cmd::<Option<String>>("GET", &[b"k"]), None);
}

#[test]
fn server_drop_kills_process_and_removes_dir() {
    let server = RedisServer::start();
    let port = server.port();
    let dir = server.dir().to_path_buf();
    // Frozen on purpose: drop must still clean up.
    server.sigstop();
    drop(server);
    assert!(!dir.exists(), "{} still exists", dir.display());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    assert!(TcpStream::connect_timeout(&addr, ms(500)).is_err());
}

#[test]
fn server_sigstop_and_sigcont() {
    let server = RedisServer::start();
    let mut conn = redis_conn(&server.url(), ms(200));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    server.sigstop();
    let start = Instant::now();
    let err = ping(&mut conn).unwrap_err();
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert!(start.elapsed() >= ms(190), "{:?}", start.elapsed());

    server.sigcont();
    // The old connection has an unread reply in flight; use a fresh one.
    let mut conn = redis_conn(&server.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn server_client_pause_delays_commands() {
    let server = RedisServer::start();
    let mut conn = redis_conn(&server.url(), ms(2000));
    server.client_pause(300);
    let start = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    assert!(start.elapsed() >= ms(200), "{:?}", start.elapsed());
}

#[test]
fn proxy_pass_forwards_ping() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    assert_ne!(proxy.port(), server.port());
    assert_eq!(proxy.target_port(), server.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
    assert_eq!(proxy.mode(), Mode::Pass);

    let mut conn = redis_conn(&proxy.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        server.cmd::<Option<String>>("GET", &[b"k"]).as_deref(),
        Some("v")
    );
    assert_eq!(proxy.connections(), 1);

    let mut raw = raw_connect(proxy.port(), ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    assert_eq!(proxy.connections(), 2);

    drop(conn);
    drop(raw);
    assert!(
        wait_until(ms(2000), || proxy.connections() == 0),
        "{} connections still open",
        proxy.connections()
    );
}

#[test]
fn proxy_delay_slows_each_direction() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut conn = redis_conn(&proxy.url(), ms(3000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(Mode::Delay(ms(200)));
    assert_eq!(proxy.mode(), Mode::Delay(ms(200)));
    let start = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let elapsed = start.elapsed();
    // 200 ms for the request plus 200 ms for the reply.
    assert!(elapsed >= ms(400), "{elapsed:?}");
    assert!(elapsed < ms(2000), "{elapsed:?}");

    proxy.set_mode(Mode::Pass);
    let start = Instant::now();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    assert!(start.elapsed() < ms(200), "{:?}", start.elapsed());
}

#[test]
fn proxy_blackhole_times_out_without_closing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut raw = raw_connect(proxy.port(), ms(300));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    let mut conn = redis_conn(&proxy.url(), ms(300));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(Mode::Blackhole);

    let start = Instant::now();
    let err = raw_ping(&mut raw).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "expected a timeout, got {err:?}"
    );
    assert!(start.elapsed() >= ms(290), "{:?}", start.elapsed());

    let err = ping(&mut conn).unwrap_err();
    assert!(err.is_timeout(), "expected a timeout, got {err}");

    // Nothing was closed: no EOF, no RST.
    assert_eq!(proxy.connections(), 2);
    let mut buf = [0_u8; 1];
    let err = raw.read(&mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );

    // New connections are blackholed too, but still accepted.
    let mut fresh = raw_connect(proxy.port(), ms(300));
    assert!(raw_ping(&mut fresh).is_err());

    proxy.set_mode(Mode::Pass);
    let mut fresh = raw_connect(proxy.port(), ms(1000));
    assert_eq!(raw_ping(&mut fresh).unwrap(), PONG);
}

#[test]
fn proxy_reset_all_breaks_open_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut raw = raw_connect(proxy.port(), ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    let mut conn = redis_conn(&proxy.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    assert_eq!(proxy.connections(), 2);

    proxy.set_mode(Mode::ResetAll);
    assert_eq!(proxy.mode(), Mode::Pass);

    // The raw socket sees EOF (or a reset), well before its timeout.
    let start = Instant::now();
    let mut buf = [0_u8; 16];
    match raw.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("unexpected {n} bytes after reset"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
            ),
            "{e:?}"
        ),
    }
    assert!(start.elapsed() < ms(500), "{:?}", start.elapsed());
    assert!(raw_ping(&mut raw).is_err());

    let err = ping(&mut conn).unwrap_err();
    assert!(!err.is_timeout(), "expected a broken connection, got {err}");
    assert!(wait_until(ms(2000), || proxy.connections() == 0));

    // The proxy keeps accepting in Pass mode.
    let mut conn = redis_conn(&proxy.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn proxy_refuse_then_pass_rebinds_same_port() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let port = proxy.port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut open = raw_connect(port, ms(1000));
    assert_eq!(raw_ping(&mut open).unwrap(), PONG);

    proxy.set_mode(Mode::Refuse);
    assert_eq!(proxy.mode(), Mode::Refuse);
    let start = Instant::now();
    let err = TcpStream::connect_timeout(&addr, ms(1000)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err:?}");
    assert!(start.elapsed() < ms(200), "{:?}", start.elapsed());
    // A connection opened before keeps working.
    assert_eq!(raw_ping(&mut open).unwrap(), PONG);

    proxy.set_mode(Mode::Pass);
    assert_eq!(proxy.port(), port);
    let mut raw = raw_connect(port, ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    let mut conn = redis_conn(&proxy.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn proxy_to_dead_target_closes_client() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    server.kill();
    let mut raw = raw_connect(proxy.port(), ms(1000));
    assert!(raw_ping(&mut raw).is_err());
    assert_eq!(proxy.connections(), 0);

    server.start_again();
    let mut raw = raw_connect(proxy.port(), ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
}

#[test]
fn proxy_drop_stops_all_threads() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let port = proxy.port();
    let mut raw = raw_connect(port, ms(1000));
    assert_eq!(raw_ping(&mut raw).unwrap(), PONG);
    // Leave one connection mid-delay so drop has to interrupt it.
    let mut delayed = raw_connect(port, ms(1000));
    assert_eq!(raw_ping(&mut delayed).unwrap(), PONG);
    proxy.set_mode(Mode::Delay(ms(5000)));
    delayed.write_all(PING).unwrap();

    let mut names = proxy_threads(port);
    names.sort();
    assert_eq!(
        names,
        [
            thread_name("a", port),
            thread_name("c", port),
            thread_name("c", port),
            thread_name("p", port),
            thread_name("p", port),
        ]
    );

    let start = Instant::now();
    drop(proxy);
    assert!(
        start.elapsed() < ms(1000),
        "drop took {:?}",
        start.elapsed()
    );
    assert_eq!(proxy_threads(port), Vec::<String>::new());

    // The clients see the connection end.
    let mut buf = [0_u8; 16];
    assert!(matches!(raw.read(&mut buf), Ok(0) | Err(_)));
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    assert!(TcpStream::connect_timeout(&addr, ms(500)).is_err());
}

#[test]
fn commandstats_parses_calls_rejected_and_failed() {
    let info = "# Commandstats\r\n\
        cmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00,rejected_calls=1,failed_calls=2\r\n\
        cmdstat_client|list:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_eval:calls=5,usec=1,usec_per_call=0.20\r\n";
    let stats = super::commandstats(info);
    assert_eq!(stats["evalsha"].calls, 7);
    assert_eq!(stats["evalsha"].reached(), 10);
    assert_eq!(stats["client|list"].calls, 3);
    assert_eq!(super::command_calls(info, &["eval", "evalsha"]), 12);
    assert_eq!(super::command_calls(info, &["get"]), 0);
    let server = RedisServer::start();
    let before = server.command_calls(&["ping"]);
    let _: String = server.cmd("PING", &[]);
    assert_eq!(server.command_calls(&["ping"]), before + 1);
}

#[test]
fn server_pttl_and_exists() {
    let server = RedisServer::start();
    assert!(!server.exists("k"));
    assert_eq!(server.pttl("k"), -2);
    let () = server.cmd("SET", &[b"k", b"v"]);
    assert!(server.exists("k"));
    assert_eq!(server.pttl("k"), -1);
    let () = server.cmd("SET", &[b"k", b"v", b"PX", b"5000"]);
    assert!((4000..=5000).contains(&server.pttl("k")));
}

#[test]
fn server_restart_keeping_data_keeps_the_aof() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let () = server.cmd("SET", &[b"k", b"v"]);
    let pid = server.pid();
    server.restart_keeping_data();
    assert_ne!(server.pid(), pid);
    assert!(server.exists("k"));
    server.restart();
    assert!(!server.exists("k"), "restart() starts empty");
}

#[cfg(feature = "tls")]
#[test]
fn tls_server_answers_over_tls_only() {
    if super::lacks(super::Cap::Tls) {
        return;
    }
    let mut server = RedisServer::start_tls();
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    assert_eq!(server.cmd::<String>("PING", &[]), "PONG");
    // Plaintext to the TLS port gets no PONG.
    let mut raw = raw_connect(server.port(), ms(500));
    assert!(!matches!(raw_ping(&mut raw), Ok(reply) if reply == PONG));
    server.restart();
    assert_eq!(server.cmd::<String>("PING", &[]), "PONG");
}

#[test]
fn proxy_cuts_or_garbles_the_reply_to_a_matching_request() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut conn = redis_conn(&proxy.url(), ms(1000));
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.fault_replies_to(b"marker-1", super::ReplyFault::Cut, 1);
    let err = redis::cmd("SET")
        .arg("marker-1")
        .arg("v")
        .query::<()>(&mut conn)
        .unwrap_err();
    assert!(!err.is_timeout(), "cut, not silent: {err}");
    // The request reached the server.
    assert!(server.exists("marker-1"));
    assert_eq!(proxy.reply_faults_done(), 1);
    // Used up: the next one passes.
    let mut conn = redis_conn(&proxy.url(), ms(1000));
    let () = redis::cmd("SET")
        .arg("marker-1")
        .arg("w")
        .query(&mut conn)
        .unwrap();

    proxy.fault_replies_to(b"marker-2", super::ReplyFault::Garbage, 1);
    assert!(
        redis::cmd("SET")
            .arg("marker-2")
            .arg("v")
            .query::<()>(&mut conn)
            .is_err()
    );
    assert!(server.exists("marker-2"));
    assert_eq!(proxy.reply_faults_done(), 2);
}

/// The child half of [`servers_die_with_a_killed_test_process`]: starts a
/// server from a thread that ends at once (the parent-death signal is tied
/// to the forking thread, so this is the case that needs the spawner
/// thread), prints its pid, and waits to be killed.
#[test]
#[ignore = "child half of servers_die_with_a_killed_test_process"]
fn owned_server_child() {
    let Some(_) = super::child_role() else { return };
    let server = std::thread::spawn(RedisServer::start).join().unwrap();
    super::say(&format!("SERVER {}", server.pid()));
    // Killed by the parent long before this ends.
    super::sleep(Duration::from_secs(60));
    drop(server);
}

/// A test process killed with `SIGKILL` runs no `Drop`: its servers must
/// still go, and nothing else of the run's own may be left.
#[test]
fn servers_die_with_a_killed_test_process() {
    let mut child = super::ChildTest::spawn("support::selftest::owned_server_child", "owner", &[]);
    let pid: libc::pid_t = child
        .expect_line("SERVER ", Duration::from_secs(10))
        .parse()
        .unwrap();
    assert_eq!(
        super::owner_of(pid),
        Some(child.pid() as u32),
        "the server names its test process as its owner"
    );
    child.kill();
    let gone = wait_until(Duration::from_secs(5), || {
        // A zombie waiting for its reaper counts as gone: it runs nothing.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    });
    assert!(gone, "redis-server {pid} outlived its killed test process");
}

/// The sweep finds a server whose owner is gone (as a run killed before
/// servers died with their owner left them) and kills it; a server whose
/// owner lives is left alone.
#[test]
fn the_sweep_kills_servers_of_a_gone_owner_only() {
    // A pid that is surely gone: a child that has exited and been reaped.
    let mut done = std::process::Command::new("true").spawn().unwrap();
    done.wait().unwrap();
    let gone_owner = done.id();
    let start = |owner: u32| {
        let dir = tempfile::Builder::new()
            .prefix("redguard-sweep-")
            .tempdir()
            .unwrap();
        fs::write(dir.path().join(super::OWNER_FILE), owner.to_string()).unwrap();
        // Started by hand, not owned: it would outlive this process. It
        // listens on a socket in its directory only: with no TCP port and
        // no socket, Redis exits at once by itself, and the sweep would
        // race that exit.
        let child = std::process::Command::new(super::redis_server_bin())
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .arg("--dir")
            .arg(dir.path())
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        (dir, child)
    };
    let (_orphan_dir, mut orphan) = start(gone_owner);
    let (_kept_dir, mut kept) = start(std::process::id());
    let pid = orphan.id() as libc::pid_t;
    assert!(
        wait_until(Duration::from_secs(5), || super::owner_of(pid)
            == Some(gone_owner)),
        "the hand-started server never showed its owner"
    );
    // Another test's first spawn may sweep it first: either way it goes.
    super::sweep_leftovers();
    let status = orphan.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(
        matches!(kept.try_wait(), Ok(None)),
        "a server whose owner lives was killed"
    );
    let _ = kept.kill();
    let _ = kept.wait();
}
