//! TLS (`rediss://`) with a pinned CA and client certificates (RELIABILITY
//! J4): works, and every misconfiguration fails fast instead of hanging.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{ms, unique_name, wait_until};

struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, plus
/// a second, unrelated CA.
fn make_certs() -> Certs {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Extensions make v3 certificates, which rustls (webpki) requires.
    std::fs::write(
        d.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for ca in ["ca", "other-ca"] {
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=redguard test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ],
        );
    }
    for who in ["server", "client"] {
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={who}"),
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
            ],
        );
        let csr = format!("{who}.csr");
        let crt = format!("{who}.crt");
        let ext = format!("{who}.ext");
        let args = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &crt,
            "-extfile",
            &ext,
        ];
        openssl(d, &args);
    }
    Certs { dir }
}

struct TlsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_tls_server(certs: &Certs) -> TlsServer {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(crate::support::redis_server_bin())
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--tls-cert-file")
        .arg(certs.path("server.crt"))
        .arg("--tls-key-file")
        .arg(certs.path("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(certs.path("ca.crt"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = TlsServer {
        child,
        port,
        _dir: dir,
    };
    assert!(wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    server
}

fn tls_client(server: &TlsServer, certs: &Certs, ca: &str, client_cert: bool) -> redguard::Client {
    let mut b = crate::support::test_builder(&format!("rediss://127.0.0.1:{}/", server.port))
        .connect_timeout(ms(900))
        .response_timeout(ms(500))
        .watchdog_timeout(Duration::from_secs(3))
        .tls_root_ca(certs.read(ca));
    if client_cert {
        b = b.tls_client_cert(certs.read("client.crt"), certs.read("client.key"));
    }
    b.build().unwrap()
}

#[test]
fn j4_tls_with_pinned_ca_and_client_certificate() {
    let certs = make_certs();
    let server = start_tls_server(&certs);
    let client = tls_client(&server, &certs, "ca.crt", true);
    let name = unique_name("tls");
    let lock = client.lock(&name);
    // The server may need a moment before its TLS port serves.
    assert!(wait_until(Duration::from_secs(5), || lock
        .try_lock()
        .is_ok()));
    let g = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    // A waiter on another TLS client is woken through TLS pub/sub.
    let other = tls_client(&server, &certs, "ca.crt", true);
    let t = std::thread::spawn(move || {
        let lock = other.lock(&name);
        lock.try_lock_for(Duration::from_secs(5)).unwrap().is_some()
    });
    crate::support::sleep(ms(200));
    g.unlock().unwrap();
    assert!(t.join().unwrap());
}

#[test]
fn j4_tls_misconfigurations_fail_fast() {
    let certs = make_certs();
    let server = start_tls_server(&certs);
    let good = tls_client(&server, &certs, "ca.crt", true);
    assert!(wait_until(Duration::from_secs(5), || good
        .lock("warm")
        .try_lock()
        .is_ok()));
    let cases = [
        (
            "no client certificate",
            tls_client(&server, &certs, "ca.crt", false),
        ),
        (
            "wrong CA",
            tls_client(&server, &certs, "other-ca.crt", true),
        ),
        (
            "plaintext to the TLS port",
            crate::support::test_client(&format!("redis://127.0.0.1:{}/", server.port)),
        ),
    ];
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
                    redguard::Error::Redis(_) | redguard::Error::Protocol(_)
                ),
            "{what}: {err:?}"
        );
    }
}

#[test]
fn j4_cli_exec_over_tls() {
    let certs = make_certs();
    let server = start_tls_server(&certs);
    let url = format!("rediss://127.0.0.1:{}/", server.port);
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
    let mut out = run();
    for _ in 0..10 {
        if out.status.code() == Some(3) {
            break;
        }
        crate::support::sleep(ms(200));
        out = run();
    }
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
