//! A dependency-free TCP fault proxy on loopback (RELIABILITY.md 3.4).
//!
//! Threads: one acceptor, and per proxied connection one thread per
//! direction. Every loop checks the stop flag at least every
//! [`TICK`], so dropping the proxy stops all of them within a bounded time.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{bind_reserved, ms, release_port, sleep};

/// How often blocked threads wake up to check the stop flag.
const TICK: Duration = Duration::from_millis(20);
/// How long the acceptor sleeps when there is nothing to accept.
const ACCEPT_IDLE: Duration = Duration::from_millis(5);
/// Timeout for connecting to the target.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`FaultProxy::set_mode`] retries re-binding the port.
const REBIND_TIMEOUT: Duration = Duration::from_secs(2);

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward bytes unchanged.
    Pass,
    /// Forward bytes, sleeping this long before each chunk, separately in
    /// each direction (a request/reply round trip pays it twice).
    Delay(Duration),
    /// Read and drop every byte in both directions; sockets stay open and
    /// no RST is sent, so peers see silence. Dropped bytes are gone for
    /// good: after switching back, discard connections that were used.
    Blackhole,
    /// Shut down (both ways) every proxied socket now, then carry on
    /// accepting in [`Mode::Pass`]. [`FaultProxy::mode`] never reports it.
    ResetAll,
    /// Close the listening socket so new connects are refused; connections
    /// already open keep forwarding. Switching to any other mode re-binds
    /// the same port.
    Refuse,
}

/// What happens to the reply of a request that matched
/// [`FaultProxy::fault_replies_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFault {
    /// The request reaches the server; its reply does not reach the client:
    /// both sockets are shut down instead (the outcome is unknown to the
    /// client, RELIABILITY C3).
    Cut,
    /// The reply is replaced by bytes that are not RESP (I9).
    Garbage,
    /// The request is lost on its way: it is not forwarded, and both
    /// sockets are shut down instead. The client cannot tell this from
    /// [`ReplyFault::Cut`]; the server never ran the request.
    LostRequest,
}

/// The bytes [`ReplyFault::Garbage`] sends instead of a reply.
pub const GARBAGE: &[u8] = b"?!garbage\x00\xff\r\n";

/// Pending reply faults: each request containing `pattern` takes the
/// next one, until none is left.
struct ReplyFaultPlan {
    pattern: Vec<u8>,
    faults: std::collections::VecDeque<ReplyFault>,
}

/// A TCP proxy on `127.0.0.1:<port>` forwarding to `127.0.0.1:<target>`,
/// whose [`Mode`] can be changed at runtime.
///
/// Dropping it closes every socket and joins every thread.
pub struct FaultProxy {
    shared: Arc<Shared>,
    port: u16,
    target_port: u16,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("port", &self.port)
            .field("target_port", &self.target_port)
            .field("mode", &self.mode())
            .field("connections", &self.connections())
            .finish()
    }
}

/// State shared by the handle and the threads.
struct Shared {
    stop: AtomicBool,
    /// Current mode; never `ResetAll`.
    mode: Mutex<Mode>,
    /// `None` while refusing.
    listener: Mutex<Option<TcpListener>>,
    /// Bumped by each reset; a connection accepted before a reset but
    /// registered after it is shut down instead of registered.
    reset_epoch: AtomicU64,
    /// Open proxied connections: (id, client socket, upstream socket).
    conns: Mutex<Vec<Conn>>,
    next_id: AtomicU64,
    open: AtomicUsize,
    /// Connection threads, joined on drop.
    threads: Mutex<Vec<JoinHandle<()>>>,
    reply_fault: Mutex<Option<ReplyFaultPlan>>,
    /// Replies cut or garbled so far.
    reply_faults_done: AtomicUsize,
    /// Chunks read from clients (a client's write of a command or a
    /// pipeline, when the client waits for replies between writes).
    requests: AtomicU64,
}

/// Which way a pump copies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server: requests.
    Up,
    /// Server to client: replies.
    Down,
}

struct Conn {
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
}

impl Conn {
    fn shutdown(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

/// Thread names carry the proxy's port so tests can find them in
/// `/proc/self/task/*/comm` (Linux keeps 15 bytes: `fproxy-a-65535` fits).
/// Roles: `a` acceptor, `c` connection (client to target), `p` pump (the
/// other direction).
pub(super) fn thread_name(role: &str, port: u16) -> String {
    format!("fproxy-{role}-{port}")
}

/// Locks ignoring poison: a panicking proxy thread must not wedge the test's
/// cleanup.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FaultProxy {
    /// Starts a proxy on a free port of `127.0.0.1`, forwarding to
    /// `127.0.0.1:target_port`, in [`Mode::Pass`].
    ///
    /// # Panics
    ///
    /// If the listener cannot be bound or the acceptor thread cannot start.
    pub fn start(target_port: u16) -> Self {
        // Reserved for the proxy's lifetime, so no other server or proxy of
        // this process takes the port while it is refusing.
        let listener = bind_reserved();
        listener
            .set_nonblocking(true)
            .expect("proxy: set_nonblocking");
        let port = listener.local_addr().expect("proxy: local_addr").port();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            mode: Mutex::new(Mode::Pass),
            listener: Mutex::new(Some(listener)),
            reset_epoch: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            threads: Mutex::new(Vec::new()),
            reply_fault: Mutex::new(None),
            reply_faults_done: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(thread_name("a", port))
                .spawn(move || accept_loop(&shared, port, target_port))
                .expect("proxy: spawn acceptor thread")
        };
        Self {
            shared,
            port,
            target_port,
            acceptor: Some(acceptor),
        }
    }

    /// The port the proxy listens on (kept across [`Mode::Refuse`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port traffic is forwarded to.
    pub fn target_port(&self) -> u16 {
        self.target_port
    }

    /// The URL to give clients: `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The current mode (never [`Mode::ResetAll`], which is a one-off
    /// action).
    pub fn mode(&self) -> Mode {
        *lock(&self.shared.mode)
    }

    /// Changes the mode; it applies to open connections and new ones alike.
    ///
    /// Takes effect before returning: after `Refuse` connects are refused,
    /// after `ResetAll` every connection that was open is shut down, and
    /// leaving `Refuse` has re-bound the port.
    ///
    /// # Panics
    ///
    /// If the port cannot be re-bound within 2 s when leaving `Refuse`, or
    /// still accepts connections 2 s after entering it.
    pub fn set_mode(&self, mode: Mode) {
        match mode {
            Mode::Refuse => {
                // Dropping the listener closes it; pending connects in its
                // backlog are reset by the kernel.
                let was_listening = lock(&self.shared.listener).take().is_some();
                *lock(&self.shared.mode) = Mode::Refuse;
                if was_listening {
                    assert!(
                        wait_refused(self.port, REBIND_TIMEOUT),
                        "proxy: 127.0.0.1:{} still accepts connections after Refuse",
                        self.port
                    );
                }
            }
            Mode::ResetAll => {
                self.ensure_listening();
                *lock(&self.shared.mode) = Mode::Pass;
                self.reset_all();
            }
            Mode::Pass | Mode::Delay(_) | Mode::Blackhole => {
                self.ensure_listening();
                *lock(&self.shared.mode) = mode;
            }
        }
    }

    /// From now on, the next `times` requests (chunks read from a client)
    /// that contain `pattern` are forwarded, and the reply to each is
    /// subjected to `fault`. Replaces any plan still pending.
    pub fn fault_replies_to(&self, pattern: &[u8], fault: ReplyFault, times: usize) {
        self.fault_replies_in_turn(pattern, &vec![fault; times]);
    }

    /// As [`FaultProxy::fault_replies_to`], the next request that contains
    /// `pattern` suffering `faults[0]`, the one after it `faults[1]`, and
    /// so on.
    pub fn fault_replies_in_turn(&self, pattern: &[u8], faults: &[ReplyFault]) {
        *lock(&self.shared.reply_fault) = Some(ReplyFaultPlan {
            pattern: pattern.to_vec(),
            faults: faults.iter().copied().collect(),
        });
    }

    /// How many replies were cut or garbled (or requests lost) so far.
    pub fn reply_faults_done(&self) -> usize {
        self.shared.reply_faults_done.load(Ordering::SeqCst)
    }

    /// Chunks read from clients so far: one per write of a client that
    /// waits for its replies before writing again (a round trip).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// The number of proxied connections currently open.
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Shuts down every proxied socket, including connects still waiting in
    /// the listener's backlog.
    fn reset_all(&self) {
        {
            let guard = lock(&self.shared.listener);
            self.shared.reset_epoch.fetch_add(1, Ordering::SeqCst);
            if let Some(listener) = guard.as_ref() {
                // Clients whose connect already returned may not have been
                // accepted yet; they count as open too. Bounded drain.
                for _ in 0..1024 {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let _ = stream.shutdown(Shutdown::Both);
                        }
                        Err(_) => break,
                    }
                }
            }
        }
        for conn in lock(&self.shared.conns).iter() {
            conn.shutdown();
        }
    }

    /// Re-binds the listening port if it was closed by `Refuse`.
    fn ensure_listening(&self) {
        let mut guard = lock(&self.shared.listener);
        if guard.is_some() {
            return;
        }
        let deadline = Instant::now() + REBIND_TIMEOUT;
        let listener = loop {
            match TcpListener::bind((Ipv4Addr::LOCALHOST, self.port)) {
                Ok(listener) => break listener,
                Err(e) if Instant::now() >= deadline => {
                    panic!("proxy: cannot re-bind 127.0.0.1:{}: {e}", self.port)
                }
                Err(_) => sleep(ms(10)),
            }
        };
        listener
            .set_nonblocking(true)
            .expect("proxy: set_nonblocking");
        *guard = Some(listener);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let was_listening = lock(&self.shared.listener).take().is_some();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // The acceptor has exited, so no new connection threads appear.
        // Shutting the sockets down wakes any blocked read or write.
        for conn in lock(&self.shared.conns).iter() {
            conn.shutdown();
        }
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
        if was_listening {
            // Best effort and bounded; see `wait_refused`.
            let _ = wait_refused(self.port, ms(1000));
        }
        release_port(self.port);
    }
}

/// Waits until connecting to `127.0.0.1:port` is refused, probing every
/// few milliseconds for at most `timeout`.
///
/// Closing our listener does not close the socket at once if another test
/// thread is forking a child at that moment: until the child `exec`s, its
/// copy of the descriptor keeps the socket listening. Probing makes "closed"
/// mean "refuses connects" by the time the caller continues.
fn wait_refused(port: u16, timeout: Duration) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    super::wait_until(timeout, || {
        matches!(
            TcpStream::connect_timeout(&addr, ms(100)),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused
        )
    })
}

/// Accepts connections until the stop flag is set, spawning a connection
/// thread for each.
fn accept_loop(shared: &Arc<Shared>, port: u16, target_port: u16) {
    while !shared.stop.load(Ordering::SeqCst) {
        let accepted = {
            let guard = lock(&shared.listener);
            match guard.as_ref().map(TcpListener::accept) {
                Some(Ok((stream, _))) => Some((stream, shared.reset_epoch.load(Ordering::SeqCst))),
                Some(Err(_)) | None => None,
            }
        };
        let Some((client, epoch)) = accepted else {
            sleep(ACCEPT_IDLE);
            continue;
        };
        let worker = {
            let shared = Arc::clone(shared);
            thread::Builder::new()
                .name(thread_name("c", port))
                .spawn(move || run_connection(&shared, client, target_port, epoch, port))
        };
        let mut threads = lock(&shared.threads);
        // Reap finished threads so a long test does not accumulate handles.
        threads.retain(|t| !t.is_finished());
        if let Ok(worker) = worker {
            threads.push(worker);
        }
    }
}

/// Connects upstream, registers the pair and pumps both directions until
/// both are done.
fn run_connection(
    shared: &Arc<Shared>,
    client: TcpStream,
    target_port: u16,
    epoch: u64,
    port: u16,
) {
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
    let Ok(upstream) = TcpStream::connect_timeout(&target, UPSTREAM_CONNECT_TIMEOUT) else {
        // The target is down: the client sees the connection close.
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let setup = || -> io::Result<[TcpStream; 4]> {
        for s in [&client, &upstream] {
            s.set_nonblocking(false)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TICK))?;
            s.set_write_timeout(Some(TICK))?;
        }
        Ok([
            client.try_clone()?,
            upstream.try_clone()?,
            client.try_clone()?,
            upstream.try_clone()?,
        ])
    };
    let Ok([c_read, u_write, c_track, u_track]) = setup() else {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    {
        let mut conns = lock(&shared.conns);
        let conn = Conn {
            id,
            client: c_track,
            upstream: u_track,
        };
        if shared.reset_epoch.load(Ordering::SeqCst) != epoch || shared.stop.load(Ordering::SeqCst)
        {
            // A reset (or drop) happened after this connection was
            // accepted: it counts as open at that moment, so it dies.
            conn.shutdown();
            return;
        }
        conns.push(conn);
        shared.open.fetch_add(1, Ordering::SeqCst);
    }

    // The fault the next reply on this connection gets, armed by a
    // matching request.
    let armed = Arc::new(Mutex::new(None));
    let up = {
        let shared = Arc::clone(shared);
        let armed = Arc::clone(&armed);
        thread::Builder::new()
            .name(thread_name("p", port))
            .spawn(move || pump(&shared, c_read, u_write, Direction::Up, &armed))
    };
    pump(shared, upstream, client, Direction::Down, &armed);
    if let Ok(up) = up {
        let _ = up.join();
    }

    let mut conns = lock(&shared.conns);
    if let Some(i) = conns.iter().position(|c| c.id == id) {
        conns.swap_remove(i).shutdown();
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}

/// Arms `armed` when `chunk` (a request) matches the pending reply fault;
/// `true` when the request is to be lost instead of forwarded.
fn arm_reply_fault(shared: &Shared, chunk: &[u8], armed: &Mutex<Option<ReplyFault>>) -> bool {
    let mut plan = lock(&shared.reply_fault);
    let Some(p) = plan.as_mut() else { return false };
    if p.faults.is_empty() || p.pattern.is_empty() {
        return false;
    }
    if !chunk.windows(p.pattern.len()).any(|w| w == p.pattern) {
        return false;
    }
    match p.faults.pop_front() {
        Some(ReplyFault::LostRequest) => {
            shared.reply_faults_done.fetch_add(1, Ordering::SeqCst);
            true
        }
        fault => {
            *lock(armed) = fault;
            false
        }
    }
}

/// Copies `from` to `to` according to the current mode until EOF, an error
/// or the stop flag. On EOF the write half of `to` is closed so the peer
/// sees it; on error both sockets are shut down. Requests going up may arm
/// a reply fault, which the next reply coming down then suffers.
fn pump(
    shared: &Shared,
    mut from: TcpStream,
    mut to: TcpStream,
    direction: Direction,
    armed: &Mutex<Option<ReplyFault>>,
) {
    let mut buf = vec![0_u8; 16 * 1024];
    while !shared.stop.load(Ordering::SeqCst) {
        let n = match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mode = *lock(&shared.mode);
        match mode {
            Mode::Blackhole => continue,
            Mode::Delay(d) => {
                if !sleep_unless_stopped(shared, d) {
                    break;
                }
            }
            Mode::Pass | Mode::Refuse | Mode::ResetAll => {}
        }
        let mut chunk = &buf[..n];
        match direction {
            Direction::Up => {
                shared.requests.fetch_add(1, Ordering::SeqCst);
                if arm_reply_fault(shared, chunk, armed) {
                    break;
                }
            }
            Direction::Down => match lock(armed).take() {
                Some(ReplyFault::Cut) => {
                    shared.reply_faults_done.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                Some(ReplyFault::Garbage) => {
                    shared.reply_faults_done.fetch_add(1, Ordering::SeqCst);
                    chunk = GARBAGE;
                }
                Some(ReplyFault::LostRequest) | None => {}
            },
        }
        if write_all(shared, &mut to, chunk).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// `write_all` that retries on the socket's write timeout until the stop
/// flag is set.
fn write_all(shared: &Shared, to: &mut TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        if shared.stop.load(Ordering::SeqCst) {
            return Err(io::Error::other("proxy stopped"));
        }
        match to.write(data) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sleeps `d` in slices of at most [`TICK`]; returns `false` if the proxy
/// was stopped meanwhile.
fn sleep_unless_stopped(shared: &Shared, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        sleep(TICK.min(deadline - now));
    }
}

/// A socket timeout: `WouldBlock` on Linux, `TimedOut` elsewhere.
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
