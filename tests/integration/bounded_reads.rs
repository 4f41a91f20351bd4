//! No read of a lock's or a synchronizer's data is unbounded in size: on a
//! shared Redis, another tenant may write 20 MB into any key, field, queue
//! entry or member that `inspect`, `list_locks` and `status`/`list` read.
//! Such an element is counted on the server (`lua/bounded_read.lua`), never
//! sent: each test measures the bytes the server sent
//! (`INFO stats` `total_net_output_bytes`) around the reads. The server
//! still touches such a value (a scan copies it), about 100 ms per 20 MB on
//! a loaded machine: the clients here allow 2 s a reply.

use std::time::{Duration, Instant};

use redguard::{LockKind, QueuedWaiter};

use crate::support::{RedisServer, bulk_client, unique_name};

/// 20 MB: what a hostile tenant plants.
pub(crate) const BIG: usize = 20 << 20;

/// Far below [`BIG`]: what the reads of a test may send in all.
pub(crate) const SENT_AT_MOST: u64 = 1 << 20;

/// A holder id of Redisson's shape.
pub(crate) const WAITER: &str = "5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10:7";

/// The bytes `server` has sent to its clients so far.
pub(crate) fn sent(server: &RedisServer) -> u64 {
    let info: String = server.cmd("INFO", &[b"stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_net_output_bytes")
}

/// Runs `read`, and fails when it took 5 s or more or the server sent
/// [`SENT_AT_MOST`] bytes or more meanwhile.
pub(crate) fn bounded<T>(server: &RedisServer, what: &str, read: impl FnOnce() -> T) -> T {
    let before = sent(server);
    let start = Instant::now();
    let out = read();
    let took = start.elapsed();
    let bytes = sent(server) - before;
    assert!(took < Duration::from_secs(5), "{what} took {took:?}");
    assert!(
        bytes < SENT_AT_MOST,
        "{what}: the server sent {bytes} bytes"
    );
    out
}

/// Plants `big` at the end of a held fair lock's queue `name`, between two
/// waiters of a holder id's shape (the first with a deadline).
pub(crate) fn plant_queue(server: &RedisServer, name: &str, big: &[u8]) {
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeouts = format!("redisson_lock_timeout:{{{name}}}");
    let last = format!("{}:8", &WAITER[..36]);
    let _: i64 = server.cmd(
        "RPUSH",
        &[queue.as_bytes(), WAITER.as_bytes(), big, last.as_bytes()],
    );
    let _: i64 = server.cmd(
        "ZADD",
        &[timeouts.as_bytes(), b"4102444800000", WAITER.as_bytes()],
    );
}

/// Checks the queue planted by [`plant_queue`] as read.
fn check_queue(queue: &[QueuedWaiter], big: usize) {
    assert_eq!(queue.len(), 3, "{queue:?}");
    assert_eq!(queue[0].holder.as_str(), WAITER);
    assert_eq!(queue[0].too_long(), None);
    assert!(queue[0].deadline.is_some(), "{queue:?}");
    assert_eq!(queue[1].too_long(), Some(big as u64), "{queue:?}");
    assert!(queue[1].deadline.is_none());
    assert!(
        queue[1].holder.as_str().len() < 100,
        "{:?}",
        &queue[1].holder.as_str()[..100]
    );
    assert_eq!(queue[2].holder.as_str(), format!("{}:8", &WAITER[..36]));
}

/// A 20 MB entry in a held fair lock's queue: `inspect`, `list_locks` and
/// `list_synchronizers` count it and show the rest (holder, the other
/// waiters, the first one's deadline), sending far less than it.
#[test]
fn a_huge_fair_queue_entry_is_counted_not_sent() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let name = unique_name("fair");
    let lock = client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    plant_queue(&server, &name, &vec![b'q'; BIG]);

    let info = bounded(&server, "inspect", || lock.inspect().unwrap());
    assert_eq!(info.holders.len(), 1, "{:?}", info.holders);
    assert_eq!(&info.holders[0].0, guard.holder_id());
    assert_eq!(info.queue_len, 3);
    let LockKind::Fair { queue } = &info.kind else {
        panic!("{:?}", info.kind);
    };
    check_queue(queue, BIG);

    for others in [false, true] {
        let listing = bounded(&server, "list_locks", || {
            client.list_locks(&name, others).unwrap()
        });
        let info = listing
            .iter()
            .find(|i| i.name == name.as_bytes())
            .expect("the lock listed");
        assert_eq!(info.holders.len(), 1, "{:?}", info.holders);
        let LockKind::Fair { queue } = &info.kind else {
            panic!("{:?}", info.kind);
        };
        check_queue(queue, BIG);
    }
    let listing = bounded(&server, "list_synchronizers", || {
        client.list_synchronizers(&format!("*{name}*")).unwrap()
    });
    assert!(
        listing
            .iter()
            .any(|i| i.name == name.as_bytes() && matches!(i.kind, LockKind::Fair { .. })),
        "{listing:?}"
    );
    drop(guard);
}

/// The bound is a holder id's longest (79 bytes): an entry of 79 bytes is
/// read whole, one of 80 only counted.
#[test]
fn a_queue_entry_is_read_up_to_a_holder_ids_length() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let name = unique_name("edge");
    let lock = client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let _: i64 = server.cmd(
        "RPUSH",
        &[queue.as_bytes(), &[b'e'; 79][..], &[b'e'; 80][..]],
    );
    let LockKind::Fair { queue } = lock.inspect().unwrap().kind else {
        panic!("not fair");
    };
    assert_eq!(queue[0].holder.as_str(), "e".repeat(79));
    assert_eq!(queue[0].too_long(), None);
    assert_eq!(queue[1].too_long(), Some(80));
    // A hash's field names are bounded alike: node-redisson's writer field
    // (two UUIDs and `:write`) is 79 bytes, and is read.
    let rw = unique_name("edge-rw");
    let writer = format!(
        "{}:0b7c3f1e-2d4a-4e6b-9c8d-7a6f5e4d3c2b:write",
        &WAITER[..36]
    );
    assert_eq!(writer.len(), 79);
    let _: i64 = server.cmd(
        "HSET",
        &[rw.as_bytes(), b"mode", b"write", writer.as_bytes(), b"1"],
    );
    let info = client.lock(&rw).inspect().unwrap();
    assert_eq!(
        info.kind,
        LockKind::ReadWrite {
            mode: "write".into()
        }
    );
    assert_eq!(info.holders.len(), 1, "{:?}", info.holders);
    assert_eq!(info.holders[0].0.as_str(), writer);
    drop(guard);
}

/// A 20 MB field name or value in a hash of a lock's shape makes it no
/// lock (an application's hash), read without it: `inspect` says
/// `Other`, `list_locks` leaves it out (lists it as `Other` with
/// `others`), and a real lock beside it still shows its holder.
#[test]
fn a_huge_field_or_value_makes_a_hash_no_lock_and_is_not_sent() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let prefix = unique_name("hashes");
    let held = client.lock(format!("{prefix}:held"));
    let guard = held.lock().unwrap();
    let big = vec![b'f'; BIG];
    let (by_name, by_value, app) = (
        format!("{prefix}:by-name"),
        format!("{prefix}:by-value"),
        format!("{prefix}:app"),
    );
    let _: i64 = server.cmd(
        "HSET",
        &[by_name.as_bytes(), WAITER.as_bytes(), b"1", &big, b"1"],
    );
    let _: i64 = server.cmd("HSET", &[by_value.as_bytes(), WAITER.as_bytes(), &big]);
    let _: i64 = server.cmd(
        "HSET",
        &[app.as_bytes(), b"sku", b"2", &big, b"x", b"note", &big],
    );

    for key in [&by_name, &by_value, &app] {
        let info = bounded(&server, key, || client.lock(key).inspect().unwrap());
        assert_eq!(
            info.kind,
            LockKind::Other {
                redis_type: "hash".into()
            },
            "{key}"
        );
        assert!(info.holders.is_empty());
    }
    let pattern = format!("{prefix}:*");
    let locks = bounded(&server, "list_locks", || {
        client.list_locks(&pattern, false).unwrap()
    });
    let names: Vec<&[u8]> = locks.iter().map(|i| &i.name[..]).collect();
    assert_eq!(names, vec![format!("{prefix}:held").as_bytes()]);
    assert_eq!(&locks.found[0].holders[0].0, guard.holder_id());
    let all = bounded(&server, "list_locks --all", || {
        client.list_locks(&pattern, true).unwrap()
    });
    assert_eq!(all.len(), 4, "{all:?}");
    for info in &all {
        if info.name != format!("{prefix}:held").as_bytes() {
            assert!(matches!(info.kind, LockKind::Other { .. }), "{info:?}");
        }
    }
    let synchronizers = bounded(&server, "list_synchronizers", || {
        client.list_synchronizers(&pattern).unwrap()
    });
    assert!(
        synchronizers
            .iter()
            .any(|i| i.name == format!("{prefix}:held").as_bytes()),
        "{synchronizers:?}"
    );
    // And a lock's own first look of a few fields (`holders`) alike.
    let holders = bounded(&server, "holders", || client.lock(&by_name).holders());
    assert!(holders.is_err() || holders.unwrap().is_empty());
    drop(guard);
}

/// Big members in an expiring semaphore's lease set, and a 20 MB string
/// at a semaphore's and a latch's name: `inspect` and `leases` show the
/// permit held and leave the members out; a counter that big is a wrong
/// type, read in its first bytes only.
#[test]
fn big_values_in_a_semaphores_keys_are_not_sent() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let name = unique_name("sem");
    let sem = client.expiring_semaphore(&name);
    assert!(sem.try_set_permits(2).unwrap());
    let permit = sem.acquire().unwrap();
    let timeouts = format!("{{{name}}}:timeout");
    let big = vec![b'm'; BIG];
    let _: i64 = server.cmd("ZADD", &[timeouts.as_bytes(), b"1", &big]);
    let _: i64 = server.cmd("ZADD", &[timeouts.as_bytes(), b"2", &[b'n'; 17][..]]);

    let info = bounded(&server, "semaphore inspect", || sem.inspect().unwrap());
    let ids: Vec<_> = info.permits.iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![*permit.id()]);
    assert_eq!(info.available, 1);
    let leases = bounded(&server, "leases", || sem.leases().unwrap());
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].0, *permit.id());

    for counter in [format!("{name}:counter"), format!("{name}:latch")] {
        let _: () = server.cmd("SET", &[counter.as_bytes(), &big]);
    }
    let semaphore = client.semaphore(format!("{name}:counter"));
    let err = bounded(&server, "semaphore on a big string", || {
        semaphore.inspect().unwrap_err()
    });
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    let err = bounded(&server, "available_permits", || {
        semaphore.available_permits().unwrap_err()
    });
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    let latch = client.count_down_latch(format!("{name}:latch"));
    let err = bounded(&server, "latch inspect", || latch.inspect().unwrap_err());
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    let err = bounded(&server, "latch count", || latch.count().unwrap_err());
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    // A counter of an integer's size still reads.
    let _: () = server.cmd("SET", &[format!("{name}:latch").as_bytes(), b"3"]);
    assert_eq!(latch.count().unwrap(), 3);
    drop(permit);
}

/// The bounded reads run a script: a server that lost it (`SCRIPT FLUSH`,
/// a restart) is sent it again, and each read answers as before.
#[test]
fn the_bounded_reads_survive_a_script_flush() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let name = unique_name("flush");
    let lock = client.fair_lock(&name);
    let guard = lock.lock().unwrap();
    plant_queue(&server, &name, b"short");
    let sem = client.expiring_semaphore(unique_name("flush-sem"));
    assert!(sem.try_set_permits(1).unwrap());
    let permit = sem.acquire().unwrap();
    let flush = || {
        let () = server.cmd("SCRIPT", &[b"FLUSH"]);
    };
    flush();
    assert_eq!(lock.holders().unwrap().len(), 1);
    flush();
    let info = lock.inspect().unwrap();
    assert!(
        matches!(&info.kind, LockKind::Fair { queue } if queue.len() == 3),
        "{:?}",
        info.kind
    );
    flush();
    assert_eq!(sem.leases().unwrap().len(), 1);
    flush();
    assert_eq!(sem.inspect().unwrap().permits.len(), 1);
    flush();
    let listing = client.list_locks(&name, false).unwrap();
    assert_eq!(listing.len(), 1, "{listing:?}");
    assert!(matches!(listing.found[0].kind, LockKind::Fair { .. }));
    drop((guard, permit));
}

/// A fair queue or a lease set of another type is still told as one: the
/// script hands the server's `WRONGTYPE` back as it is.
#[test]
fn a_queue_or_lease_set_of_another_type_is_a_wrong_type() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let name = unique_name("wrong");
    let _: () = server.cmd(
        "SET",
        &[format!("redisson_lock_queue:{{{name}}}").as_bytes(), b"x"],
    );
    let err = client.fair_lock(&name).inspect().unwrap_err();
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    let _: () = server.cmd("SET", &[format!("{{{name}}}:timeout").as_bytes(), b"x"]);
    let err = client.expiring_semaphore(&name).leases().unwrap_err();
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    let err = client.expiring_semaphore(&name).inspect().unwrap_err();
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
}

#[cfg(feature = "cli")]
mod cli {
    use std::time::{Duration, Instant};

    use super::{BIG, SENT_AT_MOST, WAITER, plant_queue, sent};
    use crate::cli::{redguard, run};
    use crate::support::{RedisServer, bulk_client, unique_name};

    /// `status` (text and `--json`), `list` and `list --all` over a fair
    /// lock with a 20 MB queue entry, a lock-shaped hash with a 20 MB
    /// field, an app hash with a 20 MB value and an expiring semaphore
    /// with a 20 MB member: each ends within 5 s, prints under 16 KB, the
    /// server sends far less than 20 MB, and the sane holder and waiters
    /// still show.
    #[test]
    fn status_and_list_neither_move_nor_print_huge_values() {
        let server = RedisServer::start();
        let url = server.url();
        let client = bulk_client(&url);
        let prefix = unique_name("cli");
        let fair = format!("{prefix}:fair");
        let guard = client.fair_lock(&fair).lock().unwrap();
        let holder = guard.holder_id().to_string();
        let big = vec![b'\x1b'; BIG];
        plant_queue(&server, &fair, &big);
        let _: i64 = server.cmd(
            "HSET",
            &[
                format!("{prefix}:shaped").as_bytes(),
                WAITER.as_bytes(),
                b"1",
                &big,
                b"1",
            ],
        );
        let _: i64 = server.cmd("HSET", &[format!("{prefix}:app").as_bytes(), b"note", &big]);
        let sem = client.expiring_semaphore(format!("{prefix}:sem"));
        assert!(sem.try_set_permits(1).unwrap());
        let permit = sem.acquire().unwrap();
        let _: i64 = server.cmd(
            "ZADD",
            &[format!("{{{prefix}:sem}}:timeout").as_bytes(), b"1", &big],
        );

        let pattern = format!("{prefix}:*");
        let (shaped, semaphore) = (format!("{prefix}:shaped"), format!("{prefix}:sem"));
        let cases: [(&str, Vec<&str>); 7] = [
            ("status", vec!["status", &fair]),
            ("status --json", vec!["status", &fair, "--json"]),
            ("status of a shaped hash", vec!["status", &shaped]),
            ("status of a semaphore", vec!["status", &semaphore]),
            ("list", vec!["list", &pattern]),
            ("list --all", vec!["list", "--all", &pattern]),
            ("list --json", vec!["list", "--json", &pattern]),
        ];
        for (what, args) in cases {
            let before = sent(&server);
            let start = Instant::now();
            let mut cmd = redguard(&url);
            cmd.args(&args);
            let out = run(cmd);
            let took = start.elapsed();
            let bytes = sent(&server) - before;
            let printed = out.stdout.len() + out.stderr.len();
            assert!(took < Duration::from_secs(5), "{what} took {took:?}");
            assert!(
                bytes < SENT_AT_MOST,
                "{what}: the server sent {bytes} bytes"
            );
            assert!(printed < 16 << 10, "{what}: printed {printed} bytes");
            assert!(!out.stdout.contains('\x1b'), "{what}: printed raw");
            if what.starts_with("status") && args[1] == fair || what.starts_with("list") {
                assert!(out.stdout.contains(&holder), "{what}: {out:?}");
                assert!(out.stdout.contains(WAITER), "{what}: {out:?}");
                assert!(
                    out.stdout.contains(&BIG.to_string()),
                    "{what}: the long entry's length: {out:?}"
                );
            }
            if what == "status of a semaphore" {
                assert!(
                    out.stdout.contains(&permit.id().to_string()),
                    "{what}: {out:?}"
                );
            }
        }
        drop((guard, permit));
    }

    /// A queue entry of a holder id's length or less is printed escaped:
    /// a terminal escape in it cannot reach the terminal.
    #[test]
    fn a_queue_entry_is_printed_escaped() {
        let server = RedisServer::start();
        let url = server.url();
        let client = bulk_client(&url);
        let fair = unique_name("esc");
        let guard = client.fair_lock(&fair).lock().unwrap();
        let queue = format!("redisson_lock_queue:{{{fair}}}");
        let _: i64 = server.cmd("RPUSH", &[queue.as_bytes(), b"x\x1b[2J\nqueued #9: forged"]);
        for args in [vec!["status", &fair], vec!["list", &fair]] {
            let mut cmd = redguard(&url);
            cmd.args(&args);
            let out = run(cmd);
            assert!(!out.stdout.contains('\x1b'), "{args:?}: {out:?}");
            assert!(!out.stdout.contains("\nqueued #9"), "{args:?}: {out:?}");
            assert!(
                out.stdout.contains("x\\x1b[2J\\x0aqueued #9: forged"),
                "{args:?}: {out:?}"
            );
        }
        drop(guard);
    }
}

/// A fencing token counter overwritten with 20 MB: `last_fencing_token` says
/// it holds no token, having read no more of it than a number's length.
#[test]
fn a_huge_fencing_token_counter_is_not_sent() {
    let server = RedisServer::start();
    let client = bulk_client(&server.url());
    let lock = client.fenced_lock(unique_name("token"));
    drop(lock.lock().unwrap());
    assert!(lock.last_fencing_token().unwrap().is_some());
    let counter = format!(
        "redisson_lock_token:{{{}}}",
        String::from_utf8_lossy(lock.name())
    );
    let _: () = server.cmd("SET", &[counter.as_bytes(), &vec![b'7'; BIG][..]]);
    let err = bounded(&server, "last_fencing_token", || {
        lock.last_fencing_token().unwrap_err()
    });
    assert!(matches!(err, redguard::Error::Protocol(_)), "{err:?}");
}
