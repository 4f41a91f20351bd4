//! Reads and writes of redguard's own sockets (the shared connections) that ride
//! out an interrupted call. On Linux a read or write with a timeout
//! (`SO_RCVTIMEO`, `SO_SNDTIMEO`) fails with EINTR when the process is
//! stopped and continued, even without a signal handler (signal(7)); the
//! connection is fine, and the call is made again within what is left of
//! the socket's timeout, so that a stop never stretches the bound.
//!
//! redis-rs's own connections cannot be helped here: its reader gives up
//! on EINTR and drops the reply when it comes. The callers settle those
//! (see [`Error::is_interrupted`](crate::Error)).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How many interruptions one call rides out before it reports the last.
const MAX_INTERRUPTIONS: u32 = 64;

/// A socket whose reads and writes are made again after EINTR.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patient<'a, S: Socket>(pub(crate) &'a S);

/// A blocking socket with read and write timeouts: TCP or a Unix socket.
pub(crate) trait Socket {
    fn read_timeout(&self) -> io::Result<Option<Duration>>;
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn write_timeout(&self) -> io::Result<Option<Duration>>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn read_once(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_once(&self, buf: &[u8]) -> io::Result<usize>;
}

macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            fn read_timeout(&self) -> io::Result<Option<Duration>> {
                <$t>::read_timeout(self)
            }
            fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
                <$t>::set_read_timeout(self, timeout)
            }
            fn write_timeout(&self) -> io::Result<Option<Duration>> {
                <$t>::write_timeout(self)
            }
            fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
                <$t>::set_write_timeout(self, timeout)
            }
            fn read_once(&self, buf: &mut [u8]) -> io::Result<usize> {
                let mut s = self;
                s.read(buf)
            }
            fn write_once(&self, buf: &[u8]) -> io::Result<usize> {
                let mut s = self;
                s.write(buf)
            }
        }
    };
}

socket!(TcpStream);
socket!(UnixStream);

/// One direction of a socket: its timeout, and one call in it.
trait Direction {
    fn timeout(&self) -> io::Result<Option<Duration>>;
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

struct Reading<'a, S: Socket>(&'a S);
struct Writing<'a, S: Socket>(&'a S);

impl<S: Socket> Direction for Reading<'_, S> {
    fn timeout(&self) -> io::Result<Option<Duration>> {
        self.0.read_timeout()
    }
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_read_timeout(timeout)
    }
}

impl<S: Socket> Direction for Writing<'_, S> {
    fn timeout(&self) -> io::Result<Option<Duration>> {
        self.0.write_timeout()
    }
    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_write_timeout(timeout)
    }
}

/// Makes `call` again after each EINTR, bounded by what is left of the
/// socket's timeout in `direction` since the first try (the timeout is
/// shortened for the retries, then put back). Out of time, the call fails
/// as a timed-out socket call does (`WouldBlock`).
fn patiently(
    direction: &dyn Direction,
    mut call: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    let start = Instant::now();
    let mut full: Option<Option<Duration>> = None;
    let mut interruptions = 0;
    let result = loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                interruptions += 1;
                if interruptions > MAX_INTERRUPTIONS {
                    break Err(e);
                }
                let timeout = match full {
                    Some(timeout) => timeout,
                    None => *full.insert(direction.timeout()?),
                };
                if let Some(timeout) = timeout {
                    let left = timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        break Err(io::ErrorKind::WouldBlock.into());
                    }
                    direction.set_timeout(Some(left))?;
                }
            }
            other => break other,
        }
    };
    if let Some(Some(timeout)) = full {
        direction.set_timeout(Some(timeout))?;
    }
    result
}

impl<S: Socket> Read for Patient<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let stream = self.0;
        patiently(&Reading(stream), || stream.read_once(buf))
    }
}

impl<S: Socket> Write for Patient<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let stream = self.0;
        patiently(&Writing(stream), || stream.write_once(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Once;
    use std::sync::mpsc;

    fn signal() -> i32 {
        libc::SIGRTMIN() + 6
    }

    extern "C" fn ignore(_: libc::c_int) {}

    /// A no-op handler without `SA_RESTART`: the signal makes a blocking
    /// socket call with a timeout fail with EINTR, as a stop and continue
    /// does.
    fn install_handler() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // SAFETY: a handler that does nothing, for a signal nothing
            // else uses.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                assert_eq!(libc::sigaction(signal(), &action, std::ptr::null_mut()), 0);
            }
        });
    }

    /// A read interrupted while it waits gets the bytes that come later,
    /// within the socket's timeout counted from its start; a plain read
    /// fails with EINTR (what redis-rs's reader meets).
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the spacing of the signals is the point: they come while the read waits"
    )]
    fn an_interrupted_read_goes_on_within_its_timeout() {
        install_handler();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        for patient in [false, true] {
            let (tx, rx) = mpsc::channel();
            let reader = {
                let client = client.try_clone().unwrap();
                std::thread::spawn(move || {
                    // SAFETY: no preconditions.
                    tx.send(unsafe { libc::pthread_self() }).unwrap();
                    let mut buf = [0u8; 8];
                    if patient {
                        Patient(&client).read(&mut buf)
                    } else {
                        (&client).read(&mut buf)
                    }
                })
            };
            let thread = rx.recv().unwrap();
            // Interrupt it while it waits (a few times: the first signal
            // may come before the read began).
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(20));
                // SAFETY: the thread is alive until joined below.
                unsafe { libc::pthread_kill(thread, signal()) };
            }
            server.write_all(b"+OK\r\n").unwrap();
            let read = reader.join().unwrap();
            if patient {
                assert_eq!(read.unwrap(), 5);
            } else {
                assert_eq!(read.unwrap_err().kind(), io::ErrorKind::Interrupted);
                // Drain what the plain read left.
                let mut buf = [0u8; 8];
                (&client).read_exact(&mut buf[..5]).unwrap();
            }
        }
        assert_eq!(client.read_timeout().unwrap(), Some(Duration::from_secs(5)));
    }

    /// Interruptions never stretch a read past its timeout: the retries get
    /// what is left of it, not a whole one each.
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the spacing of the signals is the point: they come while the read waits"
    )]
    fn interruptions_do_not_stretch_the_timeout() {
        install_handler();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _server = listener.accept().unwrap();
        let timeout = Duration::from_millis(400);
        client.set_read_timeout(Some(timeout)).unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = {
            let client = client.try_clone().unwrap();
            std::thread::spawn(move || {
                // SAFETY: no preconditions.
                tx.send(unsafe { libc::pthread_self() }).unwrap();
                let start = Instant::now();
                let mut buf = [0u8; 8];
                (Patient(&client).read(&mut buf), start.elapsed())
            })
        };
        let thread = rx.recv().unwrap();
        // Every 50 ms for 350 ms: were each retry given a whole timeout,
        // the read would end 400 ms after the last signal (750 ms).
        for _ in 0..7 {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: the thread is joined only below, so its id stays
            // valid even once it has ended.
            unsafe { libc::pthread_kill(thread, signal()) };
        }
        let (read, took) = reader.join().unwrap();
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(took < timeout + Duration::from_millis(200), "{took:?}");
        assert!(took >= timeout, "{took:?}");
        assert_eq!(client.read_timeout().unwrap(), Some(timeout));
    }
}
