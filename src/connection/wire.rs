//! The socket of a shared connection, on every transport redguard speaks:
//! TCP, a Unix socket, and TLS over TCP. A shared connection is written by
//! one thread while another reads it (see [`super::shared`]), which
//! redis-rs's blocking connection cannot do: it owns its socket, and its
//! TLS stream is one object for both directions. Here the socket is shared
//! by reference; for TLS, the session (rustls) sits behind a lock that each
//! side holds only to encrypt or decrypt, never across a blocking socket
//! call, so a read waiting for replies never holds up a write.
//!
//! Also the one-at-a-time face of such a socket ([`Link`]) that sets a new
//! connection up before it is shared (`HELLO`/`AUTH`, `SELECT`, the pool's
//! own checks).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Value};

use super::eintr::Patient;
use super::framed::keep_after;

/// The socket of one shared connection.
pub(crate) enum Wire {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: a TLS session is a kilobyte, a socket a few bytes.
    #[cfg(feature = "tls")]
    Tls(Box<tls::TlsWire>),
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wire::Tcp(_) => "Wire::Tcp",
            Wire::Unix(_) => "Wire::Unix",
            #[cfg(feature = "tls")]
            Wire::Tls(_) => "Wire::Tls",
        })
    }
}

impl Wire {
    /// Reads what the server sent (plaintext), waiting at most the read
    /// timeout; 0 at the end of the stream.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Tcp(s) => Patient(s).read(buf),
            Wire::Unix(s) => Patient(s).read(buf),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.read(buf),
        }
    }

    /// What was read from the socket already and not handed out (TLS
    /// records decrypted along with an earlier read), without waiting;
    /// `None` when there is none.
    pub(crate) fn read_buffered(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        #[cfg(not(feature = "tls"))]
        let _ = buf;
        match self {
            Wire::Tcp(_) | Wire::Unix(_) => Ok(None),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.plaintext(buf),
        }
    }

    /// Writes all of `data`, waiting at most the write timeout for each
    /// part of it.
    pub(crate) fn write_all(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Wire::Tcp(s) => Patient(s).write_all(data),
            Wire::Unix(s) => Patient(s).write_all(data),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.write_all(data),
        }
    }

    pub(crate) fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Wire::Tcp(s) => s.set_read_timeout(Some(timeout)),
            Wire::Unix(s) => s.set_read_timeout(Some(timeout)),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.tcp.set_read_timeout(Some(timeout)),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Wire::Tcp(s) => s.set_write_timeout(Some(timeout)),
            Wire::Unix(s) => s.set_write_timeout(Some(timeout)),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.tcp.set_write_timeout(Some(timeout)),
        }
    }

    /// Stops the thread reading or writing it at once: its call fails.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Wire::Tcp(s) => s.shutdown(Shutdown::Both),
            Wire::Unix(s) => s.shutdown(Shutdown::Both),
            #[cfg(feature = "tls")]
            Wire::Tls(s) => s.tcp.shutdown(Shutdown::Both),
        };
    }
}

/// A new shared connection's socket, used one request at a time while it
/// is set up.
pub(crate) struct Link {
    pub(crate) wire: Arc<Wire>,
    pub(crate) parser: redis::Parser,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("wire", &self.wire).finish()
    }
}

impl Link {
    /// A link on `wire`, with `timeout` for reads and writes.
    ///
    /// # Errors
    ///
    /// The socket's, when a timeout cannot be set.
    pub(crate) fn new(wire: Wire, timeout: Duration) -> io::Result<Link> {
        wire.set_read_timeout(timeout)?;
        wire.set_write_timeout(timeout)?;
        Ok(Link {
            wire: Arc::new(wire),
            parser: redis::Parser::new(),
        })
    }

    /// Sets the read and write timeouts.
    ///
    /// # Errors
    ///
    /// The socket's.
    pub(crate) fn set_timeouts(&self, timeout: Duration) -> io::Result<()> {
        self.wire.set_read_timeout(timeout)?;
        self.wire.set_write_timeout(timeout)
    }

    /// The next reply; RESP3 push frames are not replies and are skipped.
    fn recv(&mut self) -> RedisResult<Value> {
        loop {
            match self.parser.parse_value(WireReader(&self.wire))? {
                Value::Push { .. } => {}
                value => return Ok(value),
            }
        }
    }
}

/// A wire as [`Read`], for the parser.
pub(crate) struct WireReader<'a>(pub(crate) &'a Wire);

impl Read for WireReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl redis::ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.wire.write_all(cmd)?;
        self.recv()?.extract_error()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.wire.write_all(cmd)?;
        keep_after(
            std::iter::from_fn(|| Some(self.recv())),
            offset,
            count,
            true,
        )
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.req_packed_command(&redis::cmd("PING").get_packed_command())
            .is_ok()
    }

    fn is_open(&self) -> bool {
        true
    }
}

/// A TCP connection to `host:port` within `timeout` for each address the
/// name resolves to, tried in turn, as redis-rs connects. Small writes go
/// out at once (`TCP_NODELAY`): a write while earlier replies are unread
/// would else wait for them to be acknowledged.
///
/// # Errors
///
/// The last address's failure, or the name's when it resolves to none.
pub(crate) fn connect_tcp(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
    }))
}

#[cfg(feature = "tls")]
pub(crate) use tls::TlsSetup;

#[cfg(feature = "tls")]
mod tls {
    //! TLS through rustls, configured as redis-rs configures its own
    //! connections (`tls-rustls`): the system's roots, or only the pinned
    //! CA when one is given; a client certificate when one is given; the
    //! server's name checked against its certificate.

    use std::io::{self, Read, Write};
    use std::net::TcpStream;
    use std::panic::AssertUnwindSafe;
    use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    use super::super::Tls;
    use super::super::eintr::Patient;
    use crate::error::{Error, Result};

    /// A TLS session over a TCP socket, read by one thread while another
    /// writes. The session's lock is held only to encrypt or decrypt.
    pub(crate) struct TlsWire {
        pub(super) tcp: TcpStream,
        session: Mutex<rustls::ClientConnection>,
    }

    fn lock(m: &Mutex<rustls::ClientConnection>) -> MutexGuard<'_, rustls::ClientConnection> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn invalid(e: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    impl TlsWire {
        /// Plaintext decrypted already, without reading the socket.
        pub(super) fn plaintext(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            match lock(&self.session).reader().read(buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            }
        }

        /// Plaintext, reading and decrypting records until there is some.
        /// The socket is read without the session's lock.
        pub(super) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
            let mut raw = [0u8; 16 * 1024];
            loop {
                if let Some(n) = self.plaintext(buf)? {
                    return Ok(n);
                }
                let n = Patient(&self.tcp).read(&mut raw)?;
                if n == 0 {
                    return Ok(0);
                }
                let mut session = lock(&self.session);
                let mut fed = &raw[..n];
                while !fed.is_empty() {
                    session.read_tls(&mut fed)?;
                    session.process_new_packets().map_err(invalid)?;
                }
            }
        }

        /// Encrypts `data` (with anything the session has to send, such as
        /// an answer to a key update) under the lock, then writes the
        /// records without it. Only one thread writes at a time, so the
        /// records go out in the order they were made.
        pub(super) fn write_all(&self, data: &[u8]) -> io::Result<()> {
            let records = {
                let mut session = lock(&self.session);
                session.writer().write_all(data)?;
                let mut out = Vec::with_capacity(data.len() + 64);
                while session.wants_write() {
                    session.write_tls(&mut out)?;
                }
                out
            };
            Patient(&self.tcp).write_all(&records)
        }
    }

    /// The TLS settings of one server's connections, made when first
    /// needed (loading the system's roots takes a while) and kept.
    /// (The configuration is made once and only read after: no panic can
    /// leave it half changed, hence `AssertUnwindSafe`, which the client's
    /// own unwind safety needs.)
    #[derive(Default)]
    pub(crate) struct TlsSetup {
        tls: Tls,
        config: OnceLock<std::result::Result<Config, String>>,
    }

    type Config = AssertUnwindSafe<Arc<rustls::ClientConfig>>;

    impl TlsSetup {
        pub(crate) fn new(tls: &Tls) -> TlsSetup {
            TlsSetup {
                tls: tls.clone(),
                config: OnceLock::new(),
            }
        }

        fn config(&self) -> Result<Arc<rustls::ClientConfig>> {
            self.config
                .get_or_init(|| client_config(&self.tls).map(|c| AssertUnwindSafe(Arc::new(c))))
                .as_ref()
                .map(|c| Arc::clone(&c.0))
                .map_err(|e| Error::invalid(e.clone()))
        }

        /// A TLS session with `host` over `tcp`, its handshake done within
        /// the socket's timeouts. `insecure` (a URL's `#insecure`) is
        /// refused, as redis-rs refuses it without `tls-rustls-insecure`.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidArgument`] for unusable certificates or host
        /// name; the handshake's failure as a connection error.
        pub(crate) fn connect(
            &self,
            tcp: TcpStream,
            host: &str,
            insecure: bool,
        ) -> Result<super::Wire> {
            if insecure {
                return Err(Error::invalid(
                    "Cannot create insecure client without tls-rustls-insecure feature",
                ));
            }
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| Error::invalid(format!("bad TLS server name: {e}")))?;
            let mut session = rustls::ClientConnection::new(self.config()?, name)
                .map_err(|e| Error::redis(redis::RedisError::from(invalid(e))))?;
            // Every command is encrypted at once: no bound on what waits.
            session.set_buffer_limit(None);
            let mut io = Patient(&tcp);
            while session.is_handshaking() {
                session
                    .complete_io(&mut io)
                    .map_err(|e| Error::redis(redis::RedisError::from(e)))?;
            }
            Ok(super::Wire::Tls(Box::new(TlsWire {
                tcp,
                session: Mutex::new(session),
            })))
        }
    }

    /// The client configuration for `tls`, as redis-rs builds its own.
    fn client_config(tls: &Tls) -> std::result::Result<rustls::ClientConfig, String> {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.root_ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("bad TLS certificates: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("bad TLS certificates: {e}"))?;
                }
            }
            None => {
                let mut found = rustls_native_certs::load_native_certs();
                if let Some(e) = found.errors.pop() {
                    return Err(format!("the system's TLS roots: {e}"));
                }
                for cert in found.certs {
                    roots
                        .add(cert)
                        .map_err(|e| format!("the system's TLS roots: {e}"))?;
                }
            }
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        match &tls.client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| format!("bad TLS certificates: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| format!("bad TLS certificates: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("bad TLS certificates: {e}"))
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }
}
