//! Errors that say what happened: each misconfiguration a new user meets
//! first (wrong password, a key outside the ACL, a URL that points at the
//! wrong kind of server, an unknown scheme, a server too old) comes back as
//! its own `Error` with a message in plain words, naming the server or the
//! key, without the Redis driver's type names, and without waiting out a
//! timeout where the answer is known at once.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redguard::Error;

use crate::support::{RedisServer, ms, sleep, test_builder, unique_name};

/// Type names of the Redis driver that a message must not show.
const DRIVER_WORDS: [&str; 7] = [
    "ResponseError",
    "NoPerm",
    "AuthenticationFailed",
    "InvalidClientConfig",
    "invalid client config",
    "Extension",
    "os error 11",
];

fn assert_plain(err: &Error) {
    let text = err.to_string();
    for word in DRIVER_WORDS {
        assert!(!text.contains(word), "{word:?} in {text:?}");
    }
}

/// The first error of a `try_lock` through `url`.
fn lock_error(url: &str) -> Error {
    let client = test_builder(url).build().unwrap();
    client
        .lock(unique_name("msg"))
        .try_lock()
        .map(|_| ())
        .unwrap_err()
}

#[test]
fn wrong_password_and_acl_refusals_say_what_and_where() {
    let server = RedisServer::start();
    let () = server.cmd(
        "ACL",
        &[
            b"SETUSER",
            b"app",
            b"on",
            b">right-pw",
            b"resetkeys",
            b"~rg:*",
            b"resetchannels",
            b"&*",
            b"+@all",
        ],
    );
    let at = format!("127.0.0.1:{}", server.port());
    let wrong = lock_error(&format!("redis://app:wrong-pw@{at}/"));
    assert!(matches!(wrong, Error::Auth(_)), "{wrong:?}");
    let text = wrong.to_string();
    eprintln!("wrong password: {text}");
    assert!(
        text.contains("refused the username or password") && text.contains(&at),
        "{text}"
    );
    assert!(!text.contains("wrong-pw"), "{text}");
    assert_plain(&wrong);

    let client = test_builder(&format!("redis://app:right-pw@{at}/"))
        .build()
        .unwrap();
    let refused = client.lock("other:key").try_lock().map(|_| ()).unwrap_err();
    assert!(matches!(refused, Error::Permission(_)), "{refused:?}");
    let text = refused.to_string();
    eprintln!("NOPERM: {text}");
    assert!(text.contains("\"other:key\""), "{text}");
    assert_plain(&refused);
}

#[test]
fn a_url_pointing_at_the_wrong_kind_of_server_says_so_at_once() {
    let server = RedisServer::start();
    let at = format!("127.0.0.1:{}", server.port());
    for (url, says) in [
        (
            format!("redis+sentinel://{at}/mymaster"),
            "is not a sentinel",
        ),
        (
            format!("redis+cluster://{at}/"),
            "is not a Redis Cluster node",
        ),
    ] {
        let started = Instant::now();
        let err = lock_error(&url);
        let took = started.elapsed();
        let text = err.to_string();
        eprintln!("{url}: {text} ({took:?})");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(text.contains(says) && text.contains(&at), "{text}");
        assert!(took < ms(900), "{url}: {took:?}");
        assert_plain(&err);
    }
    let http = test_builder("http://x").build().unwrap_err();
    assert!(matches!(http, Error::InvalidArgument(_)), "{http:?}");
    assert!(
        http.to_string().contains("unsupported URL scheme \"http\""),
        "{http}"
    );
    assert_plain(&http);
}

/// `rediss://` to a plaintext port: the handshake gets no TLS answer.
/// Said as such, within the connect timeout (here 500 ms), not as an OS
/// error number.
#[cfg(feature = "tls")]
#[test]
fn rediss_to_a_plaintext_server_says_tls_is_the_problem() {
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let client = test_builder(&url).connect_timeout(ms(500)).build().unwrap();
    let started = Instant::now();
    let err = client.lock("tls").try_lock().map(|_| ()).unwrap_err();
    let took = started.elapsed();
    let text = err.to_string();
    eprintln!("rediss:// to plaintext: {text} ({took:?})");
    assert!(took < ms(1500), "{took:?}");
    assert!(text.contains("TLS") && text.contains("tls-port"), "{text}");
    assert_plain(&err);
}

/// A server that says it is Redis 6.0: refused at the first connection
/// with `UnsupportedServer`, before any lock command is sent.
#[test]
fn a_server_below_redis_6_2_is_refused_at_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let commands = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let fake = std::thread::spawn({
        let (stop, commands) = (stop.clone(), commands.clone());
        move || fake_old_redis(&listener, &stop, &commands)
    });
    let err = lock_error(&format!("redis://127.0.0.1:{port}/"));
    stop.store(true, Ordering::Release);
    fake.join().unwrap();
    let text = err.to_string();
    eprintln!("old server: {text}");
    assert!(matches!(err, Error::UnsupportedServer { .. }), "{err:?}");
    assert!(
        text.contains("Redis 6.0.16") && text.contains("Redis 6.2"),
        "{text}"
    );
    let seen = commands.lock().unwrap().clone();
    assert!(
        seen.iter().all(|c| c.eq_ignore_ascii_case("info")),
        "commands after the version check: {seen:?}"
    );
}

/// Answers `INFO` as Redis 6.0.16 would (the `Server` section) and `+OK`
/// to anything else, recording each command's name; stops when `stop` is
/// set (bounded: 10 s).
fn fake_old_redis(
    listener: &TcpListener,
    stop: &AtomicBool,
    commands: &std::sync::Mutex<Vec<String>>,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conns = Vec::new();
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        if let Ok((conn, _)) = listener.accept() {
            conn.set_nonblocking(true).unwrap();
            conns.push(conn);
        }
        for conn in &mut conns {
            let mut buf = [0u8; 4096];
            let Ok(n) = conn.read(&mut buf) else {
                continue;
            };
            if n == 0 {
                continue;
            }
            // `*N\r\n$len\r\nNAME\r\n...`: the name is the fifth line's
            // start.
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let name = text.split("\r\n").nth(2).unwrap_or("").to_owned();
            let reply = if name.eq_ignore_ascii_case("info") {
                let body = "# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n";
                format!("${}\r\n{body}\r\n", body.len())
            } else {
                "+OK\r\n".to_owned()
            };
            commands.lock().unwrap().push(name);
            let _ = conn.write_all(reply.as_bytes());
        }
        sleep(ms(2));
    }
}

/// The message of `err` and of each of its sources, joined with ": " (what
/// anyhow's `{:#}` prints).
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut next = std::error::Error::source(err);
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

/// A refused connection: the chain names the server once and the OS's
/// reason once (it used to say the reason three times and the server
/// inside the reason).
#[test]
fn a_connection_error_names_its_server_and_says_its_cause_once() {
    let server = RedisServer::start();
    let url = server.url();
    let port = server.port();
    drop(server);
    let err = lock_error(&url);
    assert!(err.is_connection(), "{err:?}");
    let text = chain(&err);
    eprintln!("refused: {text}");
    let at = format!("127.0.0.1:{port}/0");
    assert!(err.to_string().contains(&at), "{text}");
    assert_eq!(text.matches(&at).count(), 1, "{text}");
    assert_eq!(text.matches("Connection refused").count(), 1, "{text}");
    assert!(
        !err.to_string().contains("Connection refused"),
        "the message repeats its source: {text}"
    );
    assert_plain(&err);
}

/// A connection that breaks under a call (the server is killed after it
/// was made): the error names the server, the OS's reason said once.
#[test]
fn a_connection_broken_under_a_call_names_its_server() {
    let mut server = RedisServer::start();
    let at = format!("127.0.0.1:{}/0", server.port());
    let client = test_builder(&server.url()).build().unwrap();
    let lock = client.lock(unique_name("broken"));
    assert!(!lock.is_locked().unwrap());
    server.kill();
    let err = lock.is_locked().unwrap_err();
    let text = chain(&err);
    eprintln!("broken: {text}");
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains(&at), "{text}");
    let levels: Vec<String> =
        std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect();
    assert!(levels.len() >= 2, "no cause: {levels:?}");
    for pair in levels.windows(2) {
        assert!(!pair[0].contains(&pair[1]), "{pair:?} repeats its source");
    }
}

/// A reply that never comes (the server is stopped after the connection
/// was made): a `Timeout` of kind `Reply` with the response timeout as its
/// limit and the server, on the shared connection and on a pooled one (a
/// status call); a new connection to the stopped server: kind `Connect`.
#[test]
fn a_reply_timeout_names_its_kind_limit_and_server() {
    let server = RedisServer::start();
    let response = Duration::from_millis(400);
    let at = format!("127.0.0.1:{}/0", server.port());
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(9))
        .response_timeout(response)
        .build()
        .unwrap();
    let lock = client.lock(unique_name("timeout"));
    assert!(!lock.is_locked().unwrap());
    assert!(lock.try_lock().unwrap().unwrap().unlock().is_ok());
    server.sigstop();
    let calls: [(&str, &dyn Fn() -> redguard::Result<()>); 2] = [
        ("pooled", &|| lock.is_locked().map(drop)),
        ("shared", &|| lock.try_lock().map(drop)),
    ];
    for (mode, call) in calls {
        let err = call().unwrap_err();
        eprintln!("{mode:?}: {}", chain(&err));
        assert!(err.is_timeout() && err.is_transient(), "{err:?}");
        match &err {
            Error::Timeout {
                kind: redguard::TimeoutKind::Reply,
                limit,
                server: Some(s),
                ..
            } => {
                assert_eq!(*limit, response, "{mode:?}: {err:?}");
                assert_eq!(*s, at, "{mode:?}: {err:?}");
            }
            other => panic!("{mode:?}: not a reply timeout: {other:?}"),
        }
    }
    let fresh = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(9))
        .response_timeout(response)
        .build()
        .unwrap();
    let err = fresh.lock(unique_name("timeout")).is_locked().unwrap_err();
    eprintln!("new connection: {}", chain(&err));
    assert!(
        matches!(
            &err,
            Error::Timeout {
                kind: redguard::TimeoutKind::Connect,
                server: Some(s),
                ..
            } if *s == at
        ),
        "{err:?}"
    );
    server.sigcont();
}

/// Two calls on a one-connection pool while the server is stopped: one
/// waits for its reply (`Reply`, the response timeout), the other for the
/// connection (`Pool`, the connect timeout).
#[test]
fn a_busy_pool_gives_a_pool_timeout() {
    let server = RedisServer::start();
    let client = test_builder(&server.url())
        .watchdog_timeout(Duration::from_secs(9))
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(300))
        .pool_size(1)
        .build()
        .unwrap();
    let name = unique_name("pool");
    assert!(!client.lock(&name).is_locked().unwrap());
    server.sigstop();
    let errors: Vec<Error> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..2)
            .map(|_| s.spawn(|| client.lock(&name).is_locked().unwrap_err()))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    server.sigcont();
    let kinds: Vec<_> = errors
        .iter()
        .map(|e| match e {
            Error::Timeout {
                kind,
                limit,
                server,
                ..
            } => {
                assert!(server.is_some(), "{e:?}");
                (*kind, *limit)
            }
            other => panic!("not a timeout: {other:?}"),
        })
        .collect();
    eprintln!("{kinds:?}");
    assert!(
        kinds.contains(&(redguard::TimeoutKind::Reply, Duration::from_secs(2)))
            && kinds.contains(&(redguard::TimeoutKind::Pool, Duration::from_millis(300))),
        "{errors:?}"
    );
}
