//! Bad input gets a clear error, never a panic, never a corrupted or leaked
//! lock (RELIABILITY I1-I9, J5).

use std::time::Duration;

use crate::support::{TestContext, ms, test_builder, unique_name};

#[test]
fn i1_zero_lease_is_rejected_before_any_io() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock("i1").with_lease(Duration::ZERO);
    let err = lock.lock().unwrap_err();
    assert!(
        matches!(err, redguard::Error::InvalidArgument(_)),
        "{err:?}"
    );
    assert!(lock.try_lock().is_err());
    assert!(!ctx.client.lock("i1").is_locked().unwrap());
}

#[test]
fn i2_absurd_and_tiny_leases_are_rejected() {
    let ctx = TestContext::new();
    for lease in [
        redguard::MAX_LEASE + ms(1),
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::from_nanos(1),
        redguard::MIN_LEASE - Duration::from_nanos(1),
    ] {
        let err = ctx
            .client
            .lock("i2")
            .with_lease(lease)
            .try_lock()
            .unwrap_err();
        assert!(
            matches!(err, redguard::Error::InvalidArgument(_)),
            "{err:?}"
        );
    }
    let name = unique_name("i2-tiny");
    let fraction = ctx
        .client
        .lock(&name)
        .with_lease(Duration::from_micros(20_500));
    assert!(
        fraction.try_lock().unwrap().is_some(),
        "fractions of a ms round up"
    );
    let long = ctx
        .client
        .lock(unique_name("i2-max"))
        .with_lease(redguard::MAX_LEASE);
    assert!(long.try_lock().unwrap().is_some());
}

#[test]
fn configuration_errors_are_invalid_argument() {
    let url = "redis://127.0.0.1:1/";
    let bad = [
        test_builder(url)
            .watchdog_timeout(ms(500))
            .response_timeout(ms(200))
            .build(),
        test_builder(url).pool_size(0).build(),
        test_builder(url).poll_interval(Duration::ZERO).build(),
        test_builder(url).renew_batch(0).build(),
        redguard::Client::builder().url("http://nope").build(),
        redguard::Client::builder().url("").build(),
    ];
    for result in bad {
        let err = result.unwrap_err();
        assert!(
            matches!(err, redguard::Error::InvalidArgument(_)),
            "{err:?}"
        );
    }
}

#[test]
fn i4_empty_name_is_rejected() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock("");
    for err in [
        lock.lock().map(|_| ()).unwrap_err(),
        lock.try_lock().map(|_| ()).unwrap_err(),
        lock.is_locked().map(|_| ()).unwrap_err(),
        lock.force_unlock().map(|_| ()).unwrap_err(),
        lock.remaining_ttl().map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(err, redguard::Error::InvalidArgument(_)),
            "{err:?}"
        );
    }
    let keys: Vec<String> = ctx.server.cmd("KEYS", &[b"*"]);
    assert!(keys.is_empty());
}

#[test]
fn i5_huge_names_are_capped_and_the_cap_itself_works() {
    let ctx = TestContext::new();
    let huge = vec![b'x'; 1024 * 1024];
    let err = ctx.client.lock(&huge).try_lock().unwrap_err();
    assert!(
        matches!(err, redguard::Error::InvalidArgument(_)),
        "{err:?}"
    );
    let max = vec![b'y'; redguard::MAX_NAME_LEN];
    let lock = ctx.client.lock(&max);
    let g = lock.try_lock().unwrap().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    g.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn i6_binary_names_round_trip_byte_exact() {
    let ctx = TestContext::new();
    let name: &[u8] = &[0, 0xff, 0xfe, b'{', 0x80, b'}', b'\n', 0];
    let lock = ctx.client.lock(name);
    let g = lock.lock().unwrap();
    let exists: i64 = ctx.server.cmd("EXISTS", &[name]);
    assert_eq!(exists, 1);
    assert_eq!(lock.name(), name);
    // A second client waits on the binary channel and is woken.
    let other = ctx.other_client();
    let t = std::thread::spawn(move || {
        let lock = other.lock([0, 0xff, 0xfe, b'{', 0x80, b'}', b'\n', 0]);
        lock.try_lock_for(Duration::from_secs(5)).unwrap().is_some()
    });
    crate::support::sleep(ms(100));
    g.unlock().unwrap();
    assert!(t.join().unwrap());
}

#[test]
fn i7_a_key_of_the_wrong_type_is_an_error_and_stays_untouched() {
    let ctx = TestContext::new();
    let name = unique_name("i7");
    ctx.server
        .cmd::<String>("SET", &[name.as_bytes(), b"precious"]);
    let lock = ctx.client.lock(&name);
    let start = std::time::Instant::now();
    for err in [
        lock.lock().map(|_| ()).unwrap_err(),
        lock.try_lock_for(Duration::from_secs(5))
            .map(|_| ())
            .unwrap_err(),
        lock.hold_count().map(|_| ()).unwrap_err(),
        lock.force_unlock().map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(&err, redguard::Error::WrongType { key } if *key == name),
            "{err:?}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "never waits on a wrong type"
    );
    let value: String = ctx.server.cmd("GET", &[name.as_bytes()]);
    assert_eq!(value, "precious");
    let ttl: i64 = ctx.server.cmd("PTTL", &[name.as_bytes()]);
    assert_eq!(ttl, -1);
}

#[test]
fn i8_a_foreign_hash_without_ttl_is_treated_as_held() {
    let ctx = TestContext::new();
    let name = unique_name("i8");
    ctx.server
        .cmd::<i64>("HSET", &[name.as_bytes(), b"field", b"v"]);
    let lock = ctx.client.lock(&name);
    assert!(lock.try_lock_for(ms(300)).unwrap().is_none());
    assert_eq!(lock.hold_count().unwrap(), 0);
    let field: String = ctx.server.cmd("HGET", &[name.as_bytes(), b"field"]);
    assert_eq!(field, "v");
}

#[test]
fn i9_garbage_replies_are_a_protocol_error_not_a_panic() {
    // A fake server that answers every request with bytes that are not RESP.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        listener.set_nonblocking(false).unwrap();
        for _ in 0..4 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 4096];
            if s.read(&mut buf).unwrap_or(0) > 0 {
                let _ = s.write_all(b"?!garbage\x00\xff\r\n");
            }
        }
    });
    let client = test_builder(&format!("redis://127.0.0.1:{port}/"))
        .build()
        .unwrap();
    let err = client.lock("i9").try_lock().unwrap_err();
    assert!(
        matches!(
            err,
            redguard::Error::Protocol(_) | redguard::Error::Connection(_)
        ),
        "{err:?}"
    );
    drop(client);
    // Let the fake server's loop end: connect until it has served 4 times.
    for _ in 0..4 {
        let _ = std::net::TcpStream::connect(("127.0.0.1", port)).map(|mut s| {
            use std::io::Write;
            let _ = s.write_all(b"*1\r\n$4\r\nPING\r\n");
        });
    }
    server.join().unwrap();
}

#[test]
fn j5_lua_injection_through_names_is_inert() {
    let ctx = TestContext::new();
    ctx.server.cmd::<String>("SET", &[b"canary", b"alive"]);
    let nasty = [
        "a','v') redis.call('set','canary','dead') redis.call('set','a2",
        "\"]] redis.call('del','canary') --",
        "x\nredis.call('flushall')\n",
        "\0redis.call('set','canary','0')",
        "]]--[[",
    ];
    for name in nasty {
        let lock = ctx.client.lock(name);
        let g = lock.lock().unwrap();
        let exists: i64 = ctx.server.cmd("EXISTS", &[name.as_bytes()]);
        assert_eq!(exists, 1, "stored verbatim: {name:?}");
        g.unlock().unwrap();
        assert!(lock.force_unlock().is_ok());
    }
    let canary: String = ctx.server.cmd("GET", &[b"canary"]);
    assert_eq!(canary, "alive");
}

#[test]
fn j5_every_script_is_a_constant_file() {
    // Static check: scripts come from lua/ via include_str!, never format!.
    let scripts =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/mod.rs"))
            .unwrap();
    assert!(scripts.contains("include_str!(\"../../lua/"));
    assert!(!scripts.contains("Script::new(&format!"));
    assert!(!scripts.contains("Script::new(format!"));
}
