//! From `--url` / `$REDIS_URL` / the default to a [`redguard::Client`].
//! The URL is parsed once, here; afterwards only `host:port` is ever shown.

use redis::IntoConnectionInfo;

use crate::cli::ConnArgs;
use crate::fail::{Failure, code};
use crate::out;

/// The URL used when neither `--url` nor `$REDIS_URL` is set.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// The response timeout of a client built with defaults (`redguard::Builder`).
const LIBRARY_RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A client and the server it talks to, for messages.
pub(crate) struct Connection {
    pub(crate) client: redguard::Client,
    /// `host:port` (or the socket path): safe to print.
    pub(crate) server: String,
}

/// Builds the client. Nothing is sent to Redis yet.
pub(crate) fn connect(args: &ConnArgs) -> Result<Connection, Failure> {
    let url = args
        .url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or(DEFAULT_URL)
        .trim();
    // A cluster URL lists several hosts; its credentials and form are
    // checked on the single-server URL of its first seed.
    let cluster_seed = cluster_first_seed(url);
    let single = cluster_seed.as_deref().unwrap_or(url);
    // Register the password before anything can print it, even when the
    // URL then fails to parse.
    if let Some(parsed) = redis::parse_redis_url(single)
        && let Some(pw) = parsed.password()
    {
        out::add_secret(pw);
    }
    let info = single
        .into_connection_info()
        .map_err(|e| bad_url(single, &e))?;
    if let Some(pw) = info.redis_settings().password() {
        out::add_secret(pw);
    }
    let mut server = info.addr().to_string();

    let mut builder = redguard::Client::builder().url(url);
    if let Some(watchdog) = args.watchdog_timeout {
        builder = builder.watchdog_timeout(watchdog);
    }
    let response = match (args.response_timeout, args.watchdog_timeout) {
        (Some(r), _) => Some(r),
        // A short watchdog needs a shorter response timeout than the
        // library's 3 s (the client wants at least three tries per lease).
        (None, Some(w)) if w < LIBRARY_RESPONSE_TIMEOUT * 3 => Some(w / 3),
        (None, _) => None,
    };
    if let Some(r) = response {
        builder = builder.response_timeout(r);
    }
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| Failure::new(code::USAGE, format!("cannot read {}: {e}", path.display())))
    };
    if let Some(ca) = &args.tls_ca {
        builder = builder.tls_root_ca(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls_client_cert(read(cert)?, read(key)?);
    }
    let client = builder
        .build()
        .map_err(|e| Failure::new(code::USAGE, e.to_string()))?;
    if cluster_seed.is_some() {
        server = client.server();
    }
    Ok(Connection { client, server })
}

/// `redis://[userinfo@]FIRST-HOST/...` for a `redis+cluster://` (or
/// `rediss+cluster://`) URL; `None` for any other URL.
fn cluster_first_seed(url: &str) -> Option<String> {
    let (scheme, rest) = [
        ("redis+cluster://", "redis://"),
        ("rediss+cluster://", "rediss://"),
    ]
    .iter()
    .find_map(|(cluster, single)| url.strip_prefix(cluster).map(|rest| (*single, rest)))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => authority.split_at(i + 1),
        None => ("", authority),
    };
    let first = hosts.split(',').next().unwrap_or_default();
    Some(format!("{scheme}{userinfo}{first}{tail}"))
}

/// Registers the password of every argument that is a Redis URL, so that
/// no message can show it, even one about a misplaced argument.
pub(crate) fn register_url_secrets(args: impl Iterator<Item = std::ffi::OsString>) {
    for arg in args {
        let Some(text) = arg.to_str() else { continue };
        for word in text.split_whitespace().filter(|w| w.contains("://")) {
            let Some(url) = redis::parse_redis_url(word) else {
                continue;
            };
            match url.password() {
                Some(raw) => out::add_secret(raw),
                // redis://secret@host: a lone userinfo may be a password.
                None => out::add_secret(url.username()),
            }
            // The decoded form, when the URL is complete enough to parse.
            if let Ok(info) = word.into_connection_info()
                && let Some(pw) = info.redis_settings().password()
            {
                out::add_secret(pw);
            }
        }
    }
}

fn bad_url(url: &str, err: &redis::RedisError) -> Failure {
    let scheme = url.split("://").next().unwrap_or_default();
    let detail = if matches!(scheme, "rediss" | "valkeys") {
        "TLS URLs (rediss://) need redguard built with a TLS feature of the redis crate; \
         this build has none"
            .to_owned()
    } else {
        // redis-rs messages name the problem, never the URL itself.
        match err.detail() {
            Some(detail) => detail.to_owned(),
            None => format!(
                "{} (expected redis://HOST[:PORT][/DB], with USER:PASSWORD@ before HOST \
                 when needed, or redis+unix:///PATH)",
                err.to_string()
                    .split(" - ")
                    .next()
                    .unwrap_or("it did not parse")
            ),
        }
    };
    Failure::new(code::USAGE, format!("bad Redis URL: {detail}"))
}
