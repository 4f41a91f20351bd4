//! Where the examples find Redis: `REDIS_URL` when set, otherwise a private
//! `redis-server` started on a free loopback port for the run and stopped
//! after it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private `redis-server`, stopped on drop.
pub(crate) struct EmbeddedRedis {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for EmbeddedRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Redis URL to use, and the private server to keep alive meanwhile.
pub(crate) fn redis_url() -> Result<(String, Option<EmbeddedRedis>), String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok((url, None));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let dir = std::env::temp_dir().join(format!("redguard-example-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let bin = std::env::var("REDGUARD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(&bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start `{bin}` ({e}). Set REDIS_URL to use a running Redis, or install \
                 redis-server (Debian/Ubuntu: sudo apt-get install redis-server)."
            )
        })?;
    let server = EmbeddedRedis { child, dir };
    let url = format!("redis://127.0.0.1:{port}/");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ping = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        if ping.is_ok() {
            return Ok((url, Some(server)));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "redis-server on port {port} did not answer PING within 5 s"
            ));
        }
        #[allow(
            clippy::disallowed_methods,
            reason = "polling a child process's port; there is nothing to wait on"
        )]
        std::thread::sleep(Duration::from_millis(20));
    }
}
