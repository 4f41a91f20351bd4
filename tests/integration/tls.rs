//! TLS (`rediss://`) with a pinned CA and client certificates (RELIABILITY
//! J4): works, and every misconfiguration fails fast instead of hanging.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redguard::LockGuard;

use crate::support::{
    Cap, RedisServer, TestCerts, TlsSentinel, lacks, ms, test_builder, unique_name, wait_until,
};

/// A client of the TLS `server`, trusting the CA file `ca`, presenting the
/// client certificate when `client_cert`. The lease and the poll interval
/// are 30 s: a waiter woken within a second was woken by a message.
fn tls_client(server: &RedisServer, ca: &str, client_cert: bool) -> redguard::Client {
    tls_client_at(&server.url(), server.certs(), ca, client_cert)
}

/// As [`tls_client`], for the deployment at `url` with the files of `certs`.
fn tls_client_at(url: &str, certs: &TestCerts, ca: &str, client_cert: bool) -> redguard::Client {
    let mut b = test_builder(url)
        .connect_timeout(ms(900))
        .response_timeout(ms(500))
        .watchdog_timeout(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30))
        .tls_root_ca(certs.read(ca));
    if client_cert {
        b = b.tls_client_cert(certs.read("client.crt"), certs.read("client.key"));
    }
    b.build().unwrap()
}

/// Releases `guard` (a lock on `name`, on the data node `server`) once a
/// thread of `waiter` waits for it and is subscribed on the server, and
/// returns how long after the release that thread held the lock. Waiting
/// for the server's subscription, not only the registration: the
/// subscriber's first TLS connection takes a handshake (25–35 ms here), and
/// an unlock before it would be found by the waiter's next attempt, not
/// heard.
fn woken_after_release(
    server: &RedisServer,
    waiter: &redguard::Client,
    guard: LockGuard,
    name: &str,
) -> Duration {
    let t = std::thread::spawn({
        let lock = waiter.lock(name);
        move || {
            let got = lock.try_lock_for(Duration::from_secs(10)).unwrap();
            (got.is_some(), Instant::now())
        }
    });
    // Set-up, not the case: generous for a loaded machine.
    assert!(wait_until(Duration::from_secs(15), || {
        waiter.stats().waiters == 1 && listens(server, waiter)
    }));
    let released = Instant::now();
    guard.unlock().unwrap();
    let (got, at) = t.join().unwrap();
    assert!(got, "the waiter did not get the lock");
    at - released
}

/// Whether a connection of `client` on `server` is subscribed to a channel
/// (the waiter's client listens on one channel only). Not the channel's
/// subscriber count: the holder's client subscribes it too once the hold
/// lasted 100 ms (it listens for a force unlock).
fn listens(server: &RedisServer, client: &redguard::Client) -> bool {
    let list: String = server.cmd("CLIENT", &[b"LIST"]);
    let short = &client.id().to_string()[..8];
    list.lines()
        .any(|l| l.contains(short) && !l.contains(" sub=0 "))
}

#[test]
fn j4_tls_with_pinned_ca_and_client_certificate() {
    if lacks(Cap::Tls) {
        return;
    }
    let server = RedisServer::start_tls();
    let client = tls_client(&server, "ca.crt", true);
    let name = unique_name("tls");
    let lock = client.lock(&name);
    let t0 = Instant::now();
    let g = lock.try_lock().unwrap().expect("a free lock over TLS");
    eprintln!(
        "J4: first TLS acquire (connect + handshake) {:?}",
        t0.elapsed()
    );
    // Bounds a hang, not speed: a debug build's handshake on a loaded
    // machine has taken over a second.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(lock.hold_count().unwrap(), 1);
    // A waiter on another TLS client is woken through TLS pub/sub: with a
    // 30 s lease and a 30 s poll interval, only the unlock message can
    // wake it within the bound.
    let other = tls_client(&server, "ca.crt", true);
    let woken = woken_after_release(&server, &other, g, &name);
    eprintln!("J4: TLS waiter woken {woken:?} after the release");
    assert!(woken < ms(2_000), "woken after {woken:?}");
}

#[test]
fn j4_tls_misconfigurations_fail_fast() {
    if lacks(Cap::Tls) {
        return;
    }
    let server = RedisServer::start_tls();
    let good = tls_client(&server, "ca.crt", true);
    assert!(good.lock("warm").try_lock().unwrap().is_some());
    let cases = [
        (
            "no client certificate",
            tls_client(&server, "ca.crt", false),
        ),
        ("wrong CA", tls_client(&server, "other-ca.crt", true)),
        (
            "plaintext to the TLS port",
            crate::support::test_client(&format!("redis://127.0.0.1:{}/", server.port())),
        ),
    ];
    // A certificate refused either way is configuration: `Error::Auth`,
    // not a connection failure a wait would sit out, and said so.
    for (what, client, needle) in [
        (
            "no client certificate, waiting",
            tls_client(&server, "ca.crt", false),
            "client certificate",
        ),
        (
            "wrong CA, waiting",
            tls_client(&server, "other-ca.crt", true),
            "not trusted",
        ),
    ] {
        let t0 = Instant::now();
        let err = client
            .lock("x")
            .try_lock_for(Duration::from_secs(30))
            .map(|_| ())
            .unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{what}: {:?}",
            t0.elapsed()
        );
        assert!(matches!(err, redguard::Error::Auth(_)), "{what}: {err:?}");
        assert!(!err.is_transient(), "{what}");
        assert!(err.to_string().contains(needle), "{what}: {err}");
    }
    for (what, client) in cases {
        let t0 = Instant::now();
        let err = client.lock("x").try_lock().map(|_| ()).unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{what}: {:?}",
            t0.elapsed()
        );
        assert!(
            err.is_connection()
                || err.is_timeout()
                || matches!(
                    err,
                    redguard::Error::Redis(_)
                        | redguard::Error::Protocol(_)
                        | redguard::Error::Auth(_)
                ),
            "{what}: {err:?}"
        );
    }
}

#[test]
fn j4_cli_exec_over_tls() {
    if lacks(Cap::Tls) {
        return;
    }
    let server = RedisServer::start_tls();
    let certs = server.certs();
    let url = server.url();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_redguard"))
            .args(["exec", "--url", &url])
            .arg("--tls-ca")
            .arg(certs.path("ca.crt"))
            .arg("--tls-cert")
            .arg(certs.path("client.crt"))
            .arg("--tls-key")
            .arg(certs.path("client.key"))
            .args(["tls-job", "--", "sh", "-c", "exit 3"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The server answered a PING over TLS before this test began: no
    // retries.
    let out = run();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CLI: a wrong CA ends a `--wait` at once with exit 77; a CA, client
/// certificate or key file that holds no such PEM is a usage error (64)
/// before anything is sent.
#[test]
fn j4_cli_tls_misconfigurations_are_configuration_errors() {
    if lacks(Cap::Tls) {
        return;
    }
    let server = RedisServer::start_tls();
    let certs = server.certs();
    let url = server.url();
    let run = |ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path| {
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_redguard"))
            .env_remove("REDIS_URL")
            .args(["exec", "--url", &url, "--wait", "30s"])
            .arg("--tls-ca")
            .arg(ca)
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .args(["tls-conf", "--", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, t0.elapsed())
    };
    let (ca, cert, key) = (
        certs.path("ca.crt"),
        certs.path("client.crt"),
        certs.path("client.key"),
    );
    let (out, took) = run(&certs.path("other-ca.crt"), &cert, &key);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "wrong CA: {stderr}");
    assert!(took < Duration::from_secs(3), "wrong CA: {took:?}");
    assert!(stderr.contains("not trusted"), "{stderr}");
    for (what, ca, cert, key) in [
        ("a key as the CA", &key, &cert, &key),
        (
            "a text file as the CA",
            &std::path::PathBuf::from("/etc/hostname"),
            &cert,
            &key,
        ),
        ("a key as the certificate", &ca, &key, &key),
        ("a certificate as the key", &ca, &cert, &cert),
    ] {
        let (out, _) = run(ca, cert, key);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{what}: {stderr}");
        assert!(stderr.contains("PEM"), "{what}: {stderr}");
    }
}

#[test]
fn tls_certificates_need_a_rediss_url() {
    let err = redguard::Client::builder()
        .url("redis://127.0.0.1:1/")
        .tls_root_ca(b"not used".to_vec())
        .build()
        .unwrap_err();
    assert!(
        matches!(err, redguard::Error::InvalidArgument(_)),
        "{err:?}"
    );
}

/// `rediss+sentinel://` (RELIABILITY J4 with Sentinel): the sentinel and the
/// master both speak only TLS, with one pinned CA and client certificates.
/// The client finds the master through the sentinel, checks its `ROLE`,
/// takes and releases a lock there, and a waiter on a second client is
/// woken by the unlock message through TLS pub/sub on the master (30 s
/// lease and poll: only the message explains a wake-up within a second).
#[test]
fn j4_tls_sentinel_discovery_lock_cycle_and_wake_up() {
    if lacks(Cap::Tls) {
        return;
    }
    let master = RedisServer::start_tls();
    let sentinel = TlsSentinel::start(&master, "tls-master");
    let certs = master.certs();
    let url = format!("rediss+sentinel://127.0.0.1:{}/tls-master", sentinel.port());
    let client = || tls_client_at(&url, certs, "ca.crt", true);
    let (holder, waiter) = (client(), client());
    let name = unique_name("tls-sentinel");
    let g = holder
        .lock(&name)
        .try_lock()
        .unwrap()
        .expect("a free lock through a TLS sentinel");
    let on_master: bool = master.cmd("EXISTS", &[name.as_bytes()]);
    assert!(on_master, "the lock key is not on the TLS master");
    let woken = woken_after_release(&master, &waiter, g, &name);
    eprintln!("J4 Sentinel: waiter woken {woken:?} after the unlock, through TLS");
    assert!(woken < Duration::from_secs(1), "{woken:?}");
}

/// Lock calls of 16 threads share one connection over TLS too: the shared
/// connection has a TLS session of its own (pinned CA, client
/// certificate), read by one thread while another writes.
#[test]
fn j4_tls_lock_calls_of_16_threads_share_one_connection() {
    if lacks(Cap::Tls) {
        return;
    }
    let server = RedisServer::start_tls();
    let client = test_builder(&server.url())
        .tls_root_ca(server.certs().read("ca.crt"))
        .tls_client_cert(
            server.certs().read("client.crt"),
            server.certs().read("client.key"),
        )
        .holder_record(false)
        .build()
        .unwrap();
    let conns = crate::combining::connections_after_concurrent_cycles(&client, &server, 16);
    crate::combining::assert_one_carried_the_lock_calls(&conns);
}
