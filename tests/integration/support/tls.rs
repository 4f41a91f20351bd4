//! Certificates for TLS servers and clients, made with `openssl` in a
//! temporary directory: a CA, a server certificate for 127.0.0.1 and a
//! client certificate signed by it, and a second, unrelated CA.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// The files, by name: `ca.crt`, `ca.key`, `server.crt`, `server.key`,
/// `client.crt`, `client.key`, `other-ca.crt`, `other-ca.key`.
pub struct TestCerts {
    dir: TempDir,
}

impl fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCerts")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl TestCerts {
    /// Makes every file (RSA 2048, valid 2 days).
    ///
    /// # Panics
    ///
    /// If `openssl` is missing or fails; the message has its stderr.
    pub fn make() -> TestCerts {
        let dir = tempfile::Builder::new()
            .prefix("redguard-tls-")
            .tempdir()
            .expect("temporary directory for certificates");
        let d = dir.path();
        // Extensions make v3 certificates, which rustls (webpki) requires.
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n")
            .expect("write client.ext");
        for ca in ["ca", "other-ca"] {
            let subject = format!("/CN=redguard test {ca}");
            let key = format!("{ca}.key");
            let crt = format!("{ca}.crt");
            openssl(
                d,
                &[
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    &subject, "-keyout", &key, "-out", &crt,
                ],
            );
        }
        for who in ["server", "client"] {
            let subject = format!("/CN={who}");
            let (key, csr, crt, ext) = (
                format!("{who}.key"),
                format!("{who}.csr"),
                format!("{who}.crt"),
                format!("{who}.ext"),
            );
            openssl(
                d,
                &[
                    "req", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout", &key,
                    "-out", &csr,
                ],
            );
            openssl(
                d,
                &[
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
                ],
            );
        }
        TestCerts { dir }
    }

    /// The path of file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The contents of file `name`.
    ///
    /// # Panics
    ///
    /// If it cannot be read.
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
    }

    /// A redis-rs client of the `rediss://` `url` that trusts this CA and
    /// presents the client certificate (without `CLIENT SETINFO`, as
    /// [`admin_client`](super::admin_client)).
    pub fn client(&self, url: String) -> redis::RedisResult<redis::Client> {
        redis::Client::build_with_tls(
            super::admin_info(&url)?,
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: self.read("client.crt"),
                    client_key: self.read("client.key"),
                }),
                root_cert: Some(self.read("ca.crt")),
            },
        )
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (scripts/ensure-redis installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
