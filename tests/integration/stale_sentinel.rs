//! A sentinel whose answer is stale: it names a node that is a replica (a
//! demoted master that still takes writes, `replica-read-only no`, or a
//! plain read-only replica). The client checks `ROLE` on every new
//! connection to the master it was given, refuses to write there, and
//! finds the real master through the next sentinel.
//!
//! A sentinel may also name a master that is down and not replaced (the
//! sentinels in TILT, or no replica to promote): a waiting call keeps its
//! deadline and asks at its own backoff's pace, not at the connection
//! layer's.
//!
//! The sentinels here are small fakes on loopback that answer only what a
//! client asks (`SENTINEL get-master-addr-by-name`, `PING`, `SUBSCRIBE`):
//! a real Sentinel bed cannot be made to lie on cue.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{RedisServer, unique_name};

/// A fake sentinel that names `master_port` as the master of any name.
struct FakeSentinel {
    port: u16,
    asked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl FakeSentinel {
    fn naming(master_port: u16) -> FakeSentinel {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (asked, stop) = (asked.clone(), stop.clone());
            std::thread::spawn(move || {
                // Bounded by the test's life: the flag is set on drop.
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let asked = asked.clone();
                            std::thread::spawn(move || serve(stream, master_port, &asked));
                        }
                        Err(_) => crate::support::sleep(Duration::from_millis(5)),
                    }
                }
            });
        }
        FakeSentinel { port, asked, stop }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for FakeSentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers one client connection until it closes: RESP arrays of bulk
/// strings in, the few replies a Sentinel client needs out.
fn serve(stream: TcpStream, master_port: u16, asked: &AtomicU64) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut out = stream.try_clone().unwrap();
    let mut input = BufReader::new(stream);
    let mut line = String::new();
    let mut read_line = |input: &mut BufReader<TcpStream>| -> Option<String> {
        line.clear();
        (input.read_line(&mut line).ok()? > 0).then(|| line.trim_end().to_owned())
    };
    // Bounded: each round reads at least one line; a closed or idle
    // connection ends it.
    while let Some(header) = read_line(&mut input) {
        let Some(n) = header
            .strip_prefix('*')
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return;
        };
        let mut words = Vec::with_capacity(n);
        for _ in 0..n {
            let (Some(_len), Some(word)) = (read_line(&mut input), read_line(&mut input)) else {
                return;
            };
            words.push(word.to_ascii_lowercase());
        }
        let reply = match words.first().map(String::as_str) {
            Some("sentinel")
                if words.get(1).map(String::as_str) == Some("get-master-addr-by-name") =>
            {
                asked.fetch_add(1, Ordering::Relaxed);
                let port = master_port.to_string();
                format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
            }
            Some("ping") => "+PONG\r\n".to_owned(),
            Some("subscribe") => {
                let channel = words.get(1).cloned().unwrap_or_default();
                format!(
                    "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
                    channel.len()
                )
            }
            _ => "+OK\r\n".to_owned(),
        };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Starts a master and a replica of it; `writable`: the replica takes
/// writes (`replica-read-only no`), as a demoted master may.
fn master_and_replica(writable: bool) -> (RedisServer, RedisServer) {
    let (master, replica) = RedisServer::start_master_and_replica();
    if writable {
        let _: () = replica.cmd("CONFIG", &[b"SET", b"replica-read-only", b"no"]);
    }
    (master, replica)
}

/// The first sentinel names the replica, the second the master: the lock
/// lands on the master, and nothing is written on the replica.
fn stale_first_answer_is_refused(writable: bool) {
    let (master, replica) = master_and_replica(writable);
    let liar = FakeSentinel::naming(replica.port());
    let honest = FakeSentinel::naming(master.port());
    let client = redguard::Client::builder()
        .sentinel([liar.url(), honest.url()], "rgmaster")
        .sentinel_switch_listener(false)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let name = unique_name("stale-sentinel");
    let guard = client
        .lock(&name)
        .lock()
        .expect("the lock, on the real master");
    assert!(
        liar.asked.load(Ordering::Relaxed) >= 1,
        "the stale sentinel was never asked: the case tests nothing"
    );
    let on_master: bool = master.cmd("EXISTS", &[name.as_bytes()]);
    assert!(on_master, "the lock is not on the master");
    // Writes reach a replica only through replication: a script run there
    // means the client wrote to it.
    let stats: String = replica.cmd("INFO", &[b"commandstats"]);
    assert!(
        !stats.contains("cmdstat_evalsha") && !stats.contains("cmdstat_eval:"),
        "the client ran a script on the replica: {stats}"
    );
    guard.unlock().unwrap();
    let gone: bool = master.cmd("EXISTS", &[name.as_bytes()]);
    assert!(!gone, "the release did not reach the master");
}

#[test]
fn a_sentinel_naming_a_demoted_master_that_takes_writes_is_not_believed() {
    stale_first_answer_is_refused(true);
}

#[test]
fn a_sentinel_naming_a_read_only_replica_is_not_believed() {
    stale_first_answer_is_refused(false);
}

/// A port with nothing listening on it: connections are refused.
fn dead_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

fn client_of(sentinel: &FakeSentinel, connect_timeout: Duration) -> redguard::Client {
    redguard::Client::builder()
        .sentinel([sentinel.url()], "rgmaster")
        .sentinel_switch_listener(false)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(connect_timeout)
        .build()
        .unwrap()
}

/// A wait of 1 s while the sentinel names a master that is down: it ends
/// within its deadline, not a connect timeout (3 s) later, as the first
/// attempt's own rediscovery ended at the deadline.
#[test]
fn a_wait_keeps_its_deadline_while_the_named_master_is_down() {
    let sentinel = FakeSentinel::naming(dead_port());
    let client = client_of(&sentinel, Duration::from_secs(3));
    let started = Instant::now();
    let err = client
        .lock(unique_name("down-master"))
        .try_lock_for(Duration::from_secs(1))
        .unwrap_err();
    let took = started.elapsed();
    eprintln!(
        "master down: {err} after {took:?}, {} asks",
        sentinel.asked.load(Ordering::Relaxed)
    );
    assert!(err.is_transient() || err.is_timeout(), "{err:?}");
    assert!(took < Duration::from_millis(1_700), "took {took:?}");
}

/// The same over 3 s with a 300 ms connect timeout: after the first failed
/// attempt, each retry asks the sentinel once, at the waiting call's pace
/// (10 ms doubling to 500 ms: about 10 retries in 3 s), instead of re-asking
/// it every 10 to 100 ms for a connect timeout each time (about 60 asks).
#[test]
fn a_waiting_call_asks_a_sentinel_at_its_own_pace_while_the_master_is_down() {
    let sentinel = FakeSentinel::naming(dead_port());
    let client = client_of(&sentinel, Duration::from_millis(300));
    let started = Instant::now();
    let err = client
        .lock(unique_name("down-master-pace"))
        .try_lock_for(Duration::from_secs(3))
        .unwrap_err();
    let took = started.elapsed();
    let asks = sentinel.asked.load(Ordering::Relaxed);
    eprintln!("master down for 3 s: {err} after {took:?}, {asks} asks");
    assert!(err.is_timeout(), "{err:?}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(3_500),
        "took {took:?}"
    );
    assert!(asks <= 30, "{asks} asks of the sentinel in 3 s");
}
