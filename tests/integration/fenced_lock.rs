//! The fenced lock (`Client::fenced_lock`) and the storage-side check
//! (`Client::fenced_set`): tokens on every grant, re-entry included; a
//! holder paused past its lease cannot clobber the next holder's write
//! (H1). A server-side expiry (H3) is in watchdog.rs with every other kind.

use std::thread;
use std::time::{Duration, Instant};

use redguard::{FencedWrite, FencingToken};

use crate::support::{
    ChildTest, TEST_WATCHDOG, TestContext, child_env, child_role, hear, ms, say, sleep,
    test_builder, test_client, unique_name, wait_until,
};

fn token_key(name: &str) -> Vec<u8> {
    format!("redisson_lock_token:{{{name}}}").into_bytes()
}

#[test]
fn fenced_tokens_grow_on_every_acquisition_including_reentry() {
    let ctx = TestContext::new();
    let name = unique_name("fenced-basic");
    let lock = ctx.client.fenced_lock(&name);
    assert_eq!(
        lock.last_fencing_token().unwrap().map(FencingToken::get),
        None
    );

    let outer = lock.lock().unwrap();
    let t1 = outer.fencing_token().unwrap().get();
    assert!(t1 >= 1);
    let inner = lock.try_lock().unwrap().expect("re-entry");
    let t2 = inner.fencing_token().unwrap().get();
    assert_eq!(t2, t1 + 1, "re-entry draws a token too (as Redisson)");
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert_eq!(
        lock.last_fencing_token().unwrap().map(FencingToken::get),
        Some(t2)
    );
    let stored: u64 = ctx.server.cmd("GET", &[&token_key(&name)]);
    assert_eq!(stored, t2, "Redisson's counter key");
    let holders: Vec<(String, u64)> = ctx.server.cmd("HGETALL", &[name.as_bytes()]);
    assert_eq!(
        holders,
        vec![(ctx.client.holder_id().as_str().to_owned(), 2)]
    );

    // Busy for another client, and no token is drawn for a refusal.
    let other = ctx.other_client().fenced_lock(&name);
    assert!(other.try_lock().unwrap().is_none());
    assert_eq!(
        lock.last_fencing_token().unwrap().map(FencingToken::get),
        Some(t2)
    );
    drop(inner);
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());

    let g = other.try_lock().unwrap().expect("free now");
    assert_eq!(g.fencing_token().unwrap().get(), t2 + 1);
    assert!(g.is_renewed(), "watchdog lease through Deref");
    drop(g);

    // force_unlock keeps the counter: the next grant still gets more.
    let g = lock.lock().unwrap();
    let t4 = g.fencing_token().unwrap().get();
    std::mem::forget(g);
    assert!(other.force_unlock().unwrap());
    let g = other.lock().unwrap();
    assert_eq!(g.fencing_token().unwrap().get(), t4 + 1);
}

/// A fenced waiter sleeps until the holder's lease ends: the busy reply
/// carries the holder's remaining ttl. The holder's fixed 500 ms lease runs
/// out (no unlock message comes) and the waiter, whose poll interval is
/// 10 s, acquires right after it.
#[test]
fn fenced_waiter_sleeps_until_the_holders_lease_ends() {
    let ctx = TestContext::new();
    let name = unique_name("fenced-ttl");
    let holder = ctx.other_client();
    let _held = holder
        .fenced_lock(&name)
        .with_lease(ms(500))
        .lock()
        .unwrap();
    let waiter = test_builder(&ctx.server.url())
        .poll_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let got = waiter
        .fenced_lock(&name)
        .try_lock_for(Duration::from_secs(5))
        .unwrap();
    let waited = started.elapsed();
    assert!(got.is_some(), "never acquired");
    assert!(waited < ms(500 + 400), "acquired after {waited:?}");
}

#[test]
fn fenced_set_refuses_older_tokens_only() {
    let ctx = TestContext::new();
    let key = unique_name("fenced-data");
    let c = &ctx.client;
    assert_eq!(c.fenced_get(&key).unwrap(), None);
    assert_eq!(c.fenced_set(&key, b"a", 5).unwrap(), FencedWrite::Written);
    assert_eq!(
        c.fenced_set(&key, b"b", 5).unwrap(),
        FencedWrite::Written,
        "the same token writes twice"
    );
    assert_eq!(
        c.fenced_set(&key, b"old", 4).unwrap(),
        FencedWrite::Rejected {
            last_token: FencingToken::new(5)
        }
    );
    assert_eq!(
        c.fenced_get(&key).unwrap(),
        Some((b"b".to_vec(), FencingToken::new(5)))
    );
    // Decimal strings of different lengths compare by value, not bytes.
    assert!(c.fenced_set(&key, b"c", 10).unwrap().is_written());
    assert_eq!(
        c.fenced_set(&key, b"d", 9).unwrap(),
        FencedWrite::Rejected {
            last_token: FencingToken::new(10)
        }
    );
    assert!(c.fenced_set(&key, b"max", u64::MAX).unwrap().is_written());
    assert_eq!(
        c.fenced_set(&key, b"e", u64::MAX - 1).unwrap(),
        FencedWrite::Rejected {
            last_token: FencingToken::new(u64::MAX)
        }
    );
    assert_eq!(
        c.fenced_get(&key).unwrap(),
        Some((b"max".to_vec(), FencingToken::new(u64::MAX)))
    );

    let plain = unique_name("fenced-string");
    let () = ctx.server.cmd("SET", &[plain.as_bytes(), b"x"]);
    assert!(matches!(
        c.fenced_set(&plain, b"v", 1),
        Err(redguard::Error::WrongType { .. })
    ));
    let plain_value: String = ctx.server.cmd("GET", &[plain.as_bytes()]);
    assert_eq!(plain_value, "x");
    assert!(matches!(
        c.fenced_set("", b"v", 1),
        Err(redguard::Error::InvalidArgument(_))
    ));
}

/// H1, Kleppmann's scenario in one process: holder A, with a short fixed
/// lease, stalls past it; B acquires with a larger token and writes; A's
/// late write is rejected by token, A's guard reports the loss, and A's
/// unlock leaves B's hold alone.
#[test]
fn h1_paused_holder_write_is_rejected() {
    let ctx = TestContext::new();
    let name = unique_name("h1");
    let data = format!("{{{name}}}:data");
    let a = ctx.client.fenced_lock(&name).with_lease(ms(300));
    let b_client = ctx.other_client();
    let b = b_client.fenced_lock(&name);

    let guard_a = a.lock().unwrap();
    let token_a = guard_a.fencing_token().unwrap().get();
    assert!(!guard_a.is_renewed());
    // A stalls (GC pause, swapped out...) until its lease is gone.
    assert!(wait_until(Duration::from_secs(3), || !a
        .is_locked()
        .unwrap()));

    let b_thread = {
        let b = b.clone();
        let data = data.clone();
        thread::spawn(move || {
            let guard_b = b.lock().unwrap();
            let token_b = guard_b.fencing_token().unwrap().get();
            let written = b
                .client()
                .fenced_set(&data, b"written by B", token_b)
                .unwrap();
            // Keep holding: A's unlock must not touch this hold.
            std::mem::forget(guard_b);
            (token_b, written)
        })
    };
    let (token_b, written_b) = b_thread.join().unwrap();
    assert!(token_b > token_a, "tokens grow: {token_a} then {token_b}");
    assert_eq!(written_b, FencedWrite::Written);

    // A wakes up and writes, unaware.
    let late = ctx
        .client
        .fenced_set(&data, b"written by A", token_a)
        .unwrap();
    assert_eq!(
        late,
        FencedWrite::Rejected {
            last_token: FencingToken::new(token_b)
        }
    );
    assert_eq!(
        ctx.client.fenced_get(&data).unwrap(),
        Some((b"written by B".to_vec(), FencingToken::new(token_b)))
    );
    assert!(guard_a.is_lost());
    assert!(guard_a.check().unwrap_err().is_lock_lost());
    let unlock = guard_a.unlock();
    assert!(unlock.is_err(), "{unlock:?}");
    let holders = b.holders().unwrap();
    assert_eq!(holders.len(), 1);
    assert_ne!(holders[0].0, ctx.client.holder_id().as_str());
    assert!(b.remaining_ttl().unwrap().is_some());
}

/// The child half of the H1 process test: takes the fenced lock (watchdog
/// lease), reports its token, and on "GO" writes, then reports what
/// happened.
#[test]
#[ignore = "child process of h1_sigstopped_holder_write_is_rejected"]
fn h1_child_holder() {
    let Some(role) = child_role() else { return };
    assert_eq!(role, "h1");
    let url = std::env::var("H1_URL").unwrap();
    let name = std::env::var("H1_LOCK").unwrap();
    let data = std::env::var("H1_DATA").unwrap();
    let client = test_client(&url);
    let lock = client.fenced_lock(&name);
    let guard = lock.lock().unwrap();
    let token = guard.fencing_token().unwrap().get();
    say(&format!("TOKEN {token}"));
    assert_eq!(hear(), "GO");
    let write = match client.fenced_set(&data, b"written by the paused holder", token) {
        Ok(FencedWrite::Written) => "written".to_owned(),
        Ok(FencedWrite::Rejected { last_token }) => format!("rejected {last_token}"),
        Err(e) => format!("error {e}"),
    };
    say(&format!("WRITE {write}"));
    say(&format!("LOST {}", guard.is_lost()));
    let unlock = match guard.unlock() {
        Ok(()) => "ok".to_owned(),
        Err(e) if e.is_lock_lost() => "lost".to_owned(),
        Err(e) if e.is_not_held() => "not-held".to_owned(),
        Err(e) => format!("error {e}"),
    };
    say(&format!("UNLOCK {unlock}"));
}

/// H1 as catalogued: the holder is another process, frozen with SIGSTOP for
/// longer than its lease (its watchdog thread freezes with it), then
/// resumed. The other client acquires with a larger token and writes; the
/// resumed holder's write is rejected by token, its guard reports the loss,
/// its unlock does not touch the new holder's key.
#[test]
fn h1_sigstopped_holder_write_is_rejected() {
    let ctx = TestContext::new();
    let name = unique_name("h1-proc");
    let data = format!("{{{name}}}:data");
    let url = ctx.server.url();
    let mut child = ChildTest::spawn(
        "fenced_lock::h1_child_holder",
        "h1",
        &[("H1_URL", &url), ("H1_LOCK", &name), ("H1_DATA", &data)],
    );
    let token_a: u64 = child
        .expect_line("TOKEN ", Duration::from_secs(10))
        .parse()
        .unwrap();
    child.signal(libc::SIGSTOP);
    let stopped = Instant::now();

    let b = ctx.client.fenced_lock(&name);
    let guard_b = b
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("acquired once the frozen holder's lease ran out");
    let token_b = guard_b.fencing_token().unwrap().get();
    assert!(token_b > token_a);
    assert!(stopped.elapsed() >= TEST_WATCHDOG / 2, "acquired too early");
    assert!(
        ctx.client
            .fenced_set(&data, b"written by B", token_b)
            .unwrap()
            .is_written()
    );
    // Frozen for at least 2 x L in all.
    let frozen_for = TEST_WATCHDOG * 2;
    if let Some(rest) = frozen_for.checked_sub(stopped.elapsed()) {
        sleep(rest); // the fault's duration, not a synchronisation
    }
    child.signal(libc::SIGCONT);
    child.send_line("GO");
    let write = child.expect_line("WRITE ", Duration::from_secs(5));
    assert_eq!(write, format!("rejected {token_b}"));
    assert_eq!(child.expect_line("LOST ", Duration::from_secs(5)), "true");
    let unlock = child.expect_line("UNLOCK ", Duration::from_secs(5));
    assert!(unlock == "lost" || unlock == "not-held", "{unlock}");
    assert!(child.wait_success(Duration::from_secs(5)));

    assert_eq!(
        ctx.client.fenced_get(&data).unwrap(),
        Some((b"written by B".to_vec(), FencingToken::new(token_b)))
    );
    assert_eq!(b.hold_count().unwrap(), 1, "B's hold survived");
    guard_b.unlock().unwrap();
}

/// Contenders of one process in the H1 token test: `CLIENTS` clients of
/// `THREADS` threads each take the fenced lock `grants` times in all,
/// re-entering once every 8th grant, and push every token they get onto
/// the list `order` while they hold the lock. Mutual exclusion makes the
/// list the order of the grants.
fn h1_contend(url: &str, name: &str, order: &str, grants: usize) {
    const CLIENTS: usize = 2;
    const THREADS: usize = 2;
    let per_thread = grants / (CLIENTS * THREADS);
    let threads: Vec<_> = (0..CLIENTS)
        .flat_map(|_| {
            // Not a timing test: roomy timeouts, so that a loaded machine
            // cannot turn a slow reply into a failed grant.
            let client = test_builder(url)
                .response_timeout(Duration::from_secs(2))
                .watchdog_timeout(Duration::from_secs(6))
                .build()
                .unwrap();
            (0..THREADS).map(move |t| (client.clone(), t))
        })
        .map(|(client, t)| {
            let lock = client.fenced_lock(name);
            let order = order.to_owned();
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            thread::spawn(move || {
                let mut push = |token: FencingToken| {
                    let _: i64 = redis::cmd("RPUSH")
                        .arg(&order)
                        .arg(token.get())
                        .query(&mut conn)
                        .unwrap();
                };
                let mut i = 0;
                while i < per_thread {
                    let outer = lock.lock().unwrap();
                    push(outer.fencing_token().unwrap());
                    i += 1;
                    // Every 8th grant re-enters once: another token.
                    if (i + t) % 8 == 0 && i < per_thread {
                        let inner = lock.lock().unwrap();
                        push(inner.fencing_token().unwrap());
                        i += 1;
                        inner.unlock().unwrap();
                    }
                    outer.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The child half of the H1 token test: its process's contenders.
#[test]
#[ignore = "child process of h1_tokens_strictly_increase_over_10000_grants"]
fn h1_child_contenders() {
    let Some(_) = child_role() else { return };
    let grants: usize = child_env("RG_GRANTS").parse().unwrap();
    say("READY");
    assert_eq!(hear(), "GO");
    h1_contend(
        &child_env("RG_URL"),
        &child_env("RG_NAME"),
        &child_env("RG_ORDER"),
        grants,
    );
    say("DONE");
}

/// H1's guarantee is about competing holders: 10,000 grants of one fenced
/// lock to 4 clients (2 threads each) in 2 processes, re-entries included.
/// Listed in grant order (each holder pushes its token while it holds the
/// lock), the tokens strictly increase. Threads of one client would not
/// show it: the client's local queue serialises them.
#[test]
fn h1_tokens_strictly_increase_over_10000_grants() {
    const GRANTS: usize = 10_000;
    const PROCESSES: usize = 2;
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let name = unique_name("h1-tokens");
    let order = format!("{{{name}}}:order");
    let per_process = GRANTS / PROCESSES;
    let mut child = ChildTest::spawn(
        "fenced_lock::h1_child_contenders",
        "h1-tokens",
        &[
            ("RG_URL", &url),
            ("RG_NAME", &name),
            ("RG_ORDER", &order),
            ("RG_GRANTS", &per_process.to_string()),
        ],
    );
    child.expect_line("READY", Duration::from_secs(30));
    let started = Instant::now();
    child.send_line("GO");
    h1_contend(&url, &name, &order, per_process);
    child.expect_line("DONE", Duration::from_secs(120));
    assert!(
        child.wait_success(Duration::from_secs(10)),
        "the child failed"
    );
    let elapsed = started.elapsed();
    let seen: Vec<u64> = ctx.server.cmd("LRANGE", &[order.as_bytes(), b"0", b"-1"]);
    let out_of_order = seen.windows(2).filter(|p| p[0] >= p[1]).count();
    eprintln!(
        "H1: {} grants to 4 clients in {PROCESSES} processes in {elapsed:?}; {out_of_order} \
         tokens not above the one before",
        seen.len()
    );
    assert_eq!(seen.len(), GRANTS);
    assert_eq!(out_of_order, 0, "tokens out of grant order");
    let last = ctx.client.fenced_lock(&name).last_fencing_token().unwrap();
    assert_eq!(last.map(FencingToken::get), seen.last().copied());
}

#[test]
fn fenced_handles_are_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<redguard::Lock>();
    assert_send_sync::<FencedWrite>();
}
