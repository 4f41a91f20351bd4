//! A single-server URL (`redis://`) at a Redis Cluster node is refused
//! with the `redis+cluster://` hint, in the library and the CLI: through it
//! only the node's own slots work, every other name fails with `MOVED`,
//! and `list` would show one node's locks as if they were all. The node
//! says what it is in `INFO server` (`redis_mode:cluster`, Valkey's
//! `server_mode`); an ACL user without `INFO` learns it from the first
//! `MOVED`.

use std::process::Command;

use redguard::{Client, Error};

use super::name_on;
use crate::support::RedisCluster;

/// `redguard --url url ARGS`.
fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_redguard"))
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .env_remove("REDGUARD_LOG")
        .args(["--url", url])
        .args(args)
        .output()
        .unwrap()
}

fn assert_refused(what: &str, result: redguard::Result<()>) {
    match result {
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("redis+cluster://"), "{what}: {why}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

pub(super) fn plain_url_at_a_cluster_node_is_refused(bed: &RedisCluster) {
    let masters = bed.masters();
    let (node, other) = (masters[0], masters[1]);
    let url = bed.node(node).url();
    // A name the node serves, and one it does not: both refused, so that
    // a deployment never half-works.
    for name in [
        name_on(bed, node, "plain-own"),
        name_on(bed, other, "plain-away"),
    ] {
        let client = Client::open(&url).unwrap();
        assert_refused(
            "lock through redis://",
            client.lock(&name).try_lock().map(drop),
        );
    }
    let out = cli(&url, &["list"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("redis+cluster://"));
    let away = name_on(bed, other, "plain-cli");
    let out = cli(&url, &["exec", "-n", &away, "--", "true"]);
    assert_eq!(out.status.code(), Some(64));

    // Without INFO, the first MOVED tells.
    let () = bed.node(node).cmd(
        "ACL",
        &[
            b"SETUSER",
            b"noinfo",
            b"on",
            b">noinfo-pw",
            b"~*",
            b"&*",
            b"+@all",
            b"-info",
        ],
    );
    let port = bed.node(node).port();
    let client = Client::open(&format!("redis://noinfo:noinfo-pw@127.0.0.1:{port}/")).unwrap();
    assert_refused(
        "lock through redis:// without INFO",
        client.lock(&away).try_lock().map(drop),
    );
    let _: i64 = bed.node(node).cmd("ACL", &[b"DELUSER", b"noinfo"]);
}
