//! A RESP server on loopback for the unit tests of the shared connection:
//! it answers each command (`ECHO x` with `x`, anything else with `PONG`)
//! as a plan says, late, in halves, or by cutting the connection.

#![allow(
    clippy::disallowed_methods,
    reason = "the pauses are the scenario: a server that answers late"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// What the server does with one command.
#[derive(Clone, Copy)]
pub(crate) enum Act {
    Answer,
    /// Answers after this pause (the commands after it wait too, as
    /// on a slow server).
    Late(Duration),
    /// Answers in two writes, this pause between them (the caller
    /// reads half a reply).
    Split(Duration),
    /// Closes the connection without answering this command or any
    /// after it.
    Cut,
}

/// One complete command at the start of `buf` (a RESP array of bulk
/// strings) and its length in bytes.
fn parse(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    }
    let (count, mut at) = line(buf, 0)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(buf, at)?;
        if buf.len() < start + len + 2 {
            return None;
        }
        args.push(buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    Some((args, at))
}

/// Serves one connection: `plan(command index)` says what to do.
fn serve(mut conn: TcpStream, plan: &dyn Fn(usize) -> Act) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut index = 0;
    loop {
        while let Some((args, used)) = parse(&buf) {
            buf.drain(..used);
            let reply = match args.last() {
                Some(arg) if args.len() > 1 => {
                    let mut r = format!("${}\r\n", arg.len()).into_bytes();
                    r.extend_from_slice(arg);
                    r.extend_from_slice(b"\r\n");
                    r
                }
                _ => b"+PONG\r\n".to_vec(),
            };
            match plan(index) {
                Act::Answer => {}
                Act::Late(pause) => std::thread::sleep(pause),
                Act::Split(pause) => {
                    let half = reply.len() / 2;
                    if conn.write_all(&reply[..half]).is_err() {
                        return;
                    }
                    std::thread::sleep(pause);
                    index += 1;
                    if conn.write_all(&reply[half..]).is_err() {
                        return;
                    }
                    continue;
                }
                Act::Cut => {
                    let _ = conn.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
            index += 1;
            if conn.write_all(&reply).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
}

/// An echo server on a free loopback port; `plan(connection index,
/// command index)`. It accepts `connections` connections, then closes its
/// port (a reconnect is refused).
///
/// # Errors
///
/// No loopback port could be had.
pub(crate) fn echo_server(
    connections: usize,
    plan: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let plan = Arc::new(plan);
    std::thread::spawn(move || {
        for (c, conn) in listener.incoming().take(connections).enumerate() {
            let Ok(conn) = conn else { return };
            let plan = plan.clone();
            std::thread::spawn(move || serve(conn, &|i| plan(c, i)));
        }
    });
    Ok(addr)
}
