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
/// `program` goes into the client's holder record.
pub(crate) fn connect(
    args: &ConnArgs,
    program: &str,
    record_command: redguard::RecordCommand,
) -> Result<Connection, Failure> {
    let url = args
        .url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or(DEFAULT_URL)
        .trim();
    if let Some(pw) = &args.sentinel_password {
        out::add_secret(pw);
    }
    // Sentinel and Cluster URLs list several hosts: the URL crate cannot
    // parse them; the library does.
    let sentinel = is_sentinel_url(url) || is_cluster_url(url);
    // Register the password before anything can print it, even when the
    // URL then fails to parse.
    if sentinel {
        register_sentinel_url_secret(url);
    } else {
        if let Some(parsed) = redis::parse_redis_url(url)
            && let Some(pw) = parsed.password()
        {
            out::add_secret(pw);
        }
        let info = url.into_connection_info().map_err(|e| bad_url(url, &e))?;
        if let Some(pw) = info.redis_settings().password() {
            out::add_secret(pw);
        }
    }

    let mut builder = redguard::Client::builder()
        .url(url)
        .program(program)
        .record_command(record_command);
    if !url_has_password(url)
        && let Some(password) = password_elsewhere(args)?
    {
        out::add_secret(&password);
        builder = builder.password(&password);
    }
    if let Some(pw) = &args.sentinel_password {
        builder = builder.sentinel_password(pw);
    }
    if let Some(n) = args.min_replica_acks {
        builder = builder.min_replica_acks(n);
    }
    if let Some(timeout) = args.replica_ack_timeout {
        builder = builder.replica_ack_timeout(timeout);
    }
    if let Some(when) = args.classic_publish {
        builder = builder.classic_publish(when.into());
    }
    if let Some(watchdog) = args.watchdog_timeout {
        builder = builder.watchdog_timeout(watchdog);
    }
    if let Some(prefix) = &args.record_prefix {
        builder = builder.record_prefix(prefix);
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
    // `host:port` of a single server (the library's label adds the db);
    // for Sentinel, the master name and the sentinels.
    let server = if sentinel {
        client.server()
    } else {
        client
            .server()
            .rsplit_once('/')
            .map_or_else(|| client.server(), |(addr, _)| addr.to_owned())
    };
    Ok(Connection { client, server })
}

/// The variable redis-cli reads a password from; redguard reads it too,
/// after `--password-file`.
const AUTH_VARIABLE: &str = "REDISCLI_AUTH";

/// The data nodes' password from `--password-file` (its first line), else
/// from `$REDISCLI_AUTH`; `None` when neither gives one.
fn password_elsewhere(args: &ConnArgs) -> Result<Option<String>, Failure> {
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::new(
                code::USAGE,
                format!("cannot read the password file {}: {e}", path.display()),
            )
        })?;
        let line = text
            .lines()
            .next()
            .unwrap_or_default()
            .trim_end_matches('\r');
        if line.is_empty() {
            return Err(Failure::new(
                code::USAGE,
                format!("the password file {} is empty", path.display()),
            ));
        }
        return Ok(Some(line.to_owned()));
    }
    Ok(std::env::var(AUTH_VARIABLE).ok().filter(|p| !p.is_empty()))
}

/// Whether `url` carries a password (`scheme://[user]:password@…`).
fn url_has_password(url: &str) -> bool {
    url_password_span(url).is_some()
}

/// Where the password of `url` is (the text between `user:` and `@`), if
/// it has one.
fn url_password_span(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    let colon = rest[..at].find(':')?;
    (colon + 1 < at).then(|| start + colon + 1..start + at)
}

/// The variables that carry a Redis password: taken out of CMD's
/// environment, which need not know how redguard reached Redis.
/// `REDIS_URL` stays, without its password, for a CMD that uses the same
/// server with credentials of its own.
pub(crate) fn scrub_env(cmd: &mut std::process::Command) {
    for name in [
        "REDIS_SENTINEL_PASSWORD",
        AUTH_VARIABLE,
        "REDGUARD_PASSWORD_FILE",
    ] {
        cmd.env_remove(name);
    }
    if let Ok(url) = std::env::var("REDIS_URL")
        && let Some(span) = url_password_span(&url)
    {
        let mut without = url.clone();
        // `user:@host`: the user stays, the password goes.
        without.replace_range(span.start - 1..span.end, "");
        cmd.env("REDIS_URL", without);
    }
}

/// `true` for `redis+sentinel://` and `rediss+sentinel://` URLs.
fn is_sentinel_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis+sentinel")
            || scheme.eq_ignore_ascii_case("rediss+sentinel")
    })
}

/// `true` for `redis+cluster://` and `rediss+cluster://` URLs.
fn is_cluster_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis+cluster")
            || scheme.eq_ignore_ascii_case("rediss+cluster")
    })
}

/// Registers the password of a Sentinel URL (raw and decoded): the URL
/// crate cannot parse its list of hosts.
fn register_sentinel_url_secret(url: &str) {
    let Some((_, rest)) = url.split_once("://") else {
        return;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return;
    };
    let secret = userinfo.split_once(':').map_or(userinfo, |(_, pw)| pw);
    out::add_secret(secret);
    out::add_secret(&percent_decode(secret));
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Registers the password of every argument that is a Redis URL, so that
/// no message can show it, even one about a misplaced argument.
pub(crate) fn register_url_secrets(args: impl Iterator<Item = std::ffi::OsString>) {
    for arg in args {
        let Some(text) = arg.to_str() else { continue };
        for word in text.split_whitespace().filter(|w| w.contains("://")) {
            if is_sentinel_url(word) {
                register_sentinel_url_secret(word);
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_found_and_left_out() {
        let url = "redis://u:p%40w@h:1/0";
        assert_eq!(url_password_span(url).map(|r| &url[r]), Some("p%40w"));
        assert!(url_has_password("redis://:pw@h/"));
        assert!(url_has_password("redis+sentinel://:pw@a:1,b:2/m"));
        assert!(!url_has_password("redis://u@h/"));
        assert!(!url_has_password("redis://h/a:b@c"));
        assert!(!url_has_password("redis://h:6379/"));
        let mut cmd = std::process::Command::new("true");
        scrub_env(&mut cmd);
        assert!(
            cmd.get_envs()
                .any(|(k, v)| k == "REDISCLI_AUTH" && v.is_none())
        );
    }
}
