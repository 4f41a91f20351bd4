//! Run-once keys and one-use tokens (`Client::once`, `Client::issue_token`):
//! one server for the whole area, its cases run in sequence. First the
//! scripts of `lua/once_*.lua` driven directly (claim, complete, abandon,
//! forget, lease expiry, a late complete, wrong types, binary keys), then
//! the library: waits woken by pub/sub, lost runners, bad inputs, tokens
//! (TOKEN-1), and the multi-process cases ONCE-1 and ONCE-2.

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redguard::{Error, MAX_LEASE, MAX_NAME_LEN, MAX_OUTCOME_LEN, Once, OnceStatus, Token};
use redis::{Script, Value};

use crate::reentrant::Listener;
use crate::support::{
    ChildTest, RedisServer, TEST_WATCHDOG, bulk_client, child_role, hear, ms, say, test_builder,
    test_client, unique_name, wait_until,
};

const CLAIM: &str = concat!(
    include_str!("../../lua/lock_shape.lua"),
    include_str!("../../lua/once_claim.lua")
);
const COMPLETE: &str = concat!(
    "local cluster = false\n",
    include_str!("../../lua/notify.lua"),
    include_str!("../../lua/once_complete.lua")
);
const FORGET: &str = concat!(
    include_str!("../../lua/lock_shape.lua"),
    include_str!("../../lua/once_forget.lua")
);
const ATTEMPT_END: &str = include_str!("../../lua/once_attempt_end.lua");
const UNLOCK: &str = concat!(
    "local cluster = false\n",
    include_str!("../../lua/notify.lua"),
    include_str!("../../lua/unlock.lua")
);
const LOCK: &str = concat!(
    include_str!("../../lua/lock_shape.lua"),
    include_str!("../../lua/lock.lua")
);

/// A holder id as the library writes them.
const A: &str = "0d6c1f9e-5a3b-4c2d-9e8f-1a2b3c4d5e6f:1";
const B: &str = "7e2a4b1c-9d8e-4f3a-b2c1-d4e5f6a7b8c9:4";

fn token_key(key: &[u8]) -> Vec<u8> {
    [b"redisson_lock_token:{".as_slice(), key, b"}"].concat()
}

/// The last-attempt record beside a run-once key.
fn attempt_key(key: &[u8]) -> Vec<u8> {
    [b"redguard_once_attempt:{".as_slice(), key, b"}"].concat()
}

/// The ttl the harness's claims give the last-attempt record, in ms.
const ATTEMPT_TTL_MS: u64 = 90_000;

fn channel(key: &[u8]) -> Vec<u8> {
    [b"redisson_lock__channel:{".as_slice(), key, b"}"].concat()
}

/// The claim script's reply, decoded.
#[derive(Debug, PartialEq)]
enum Claim {
    Run {
        token: i64,
    },
    Running {
        pttl: i64,
        holder: String,
    },
    Done {
        outcome: Vec<u8>,
        at: u64,
        by: String,
        pttl: i64,
    },
    Free,
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

fn text(v: &Value) -> String {
    String::from_utf8(bytes(v)).unwrap()
}

fn claim_reply(reply: Value) -> Claim {
    let Value::Array(items) = reply else {
        panic!("claim replied {reply:?}");
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(token)] => Claim::Run { token: *token },
        [Value::Int(0), Value::Int(pttl), holder] => Claim::Running {
            pttl: *pttl,
            holder: text(holder),
        },
        [Value::Int(2), outcome, at, by, Value::Int(pttl)] => Claim::Done {
            outcome: bytes(outcome),
            at: text(at).parse().unwrap(),
            by: text(by),
            pttl: *pttl,
        },
        [Value::Int(3)] => Claim::Free,
        _ => panic!("claim replied {items:?}"),
    }
}

struct Scripts {
    conn: redis::Connection,
    claim: Script,
    complete: Script,
    forget: Script,
    attempt_end: Script,
    unlock: Script,
    lock: Script,
}

impl Scripts {
    fn new(server: &RedisServer) -> Scripts {
        Scripts {
            conn: server.conn(),
            claim: Script::new(CLAIM),
            complete: Script::new(COMPLETE),
            forget: Script::new(FORGET),
            attempt_end: Script::new(ATTEMPT_END),
            unlock: Script::new(UNLOCK),
            lock: Script::new(LOCK),
        }
    }

    fn try_claim(
        &mut self,
        key: &[u8],
        holder: &str,
        lease_ms: u64,
        take: bool,
    ) -> redis::RedisResult<Claim> {
        let reply: Value = self
            .claim
            .key(key)
            .key(token_key(key))
            .key(attempt_key(key))
            .arg(lease_ms)
            .arg(holder)
            .arg(if take { "1" } else { "0" })
            .arg(ATTEMPT_TTL_MS)
            .arg("host-a")
            .arg(4242)
            .arg("prog")
            .arg(MAX_OUTCOME_LEN)
            .arg(4096)
            .invoke(&mut self.conn)?;
        Ok(claim_reply(reply))
    }

    fn claim(&mut self, key: &[u8], holder: &str, lease_ms: u64) -> Claim {
        self.try_claim(key, holder, lease_ms, true).unwrap()
    }

    fn peek(&mut self, key: &[u8]) -> Claim {
        self.try_claim(key, "", 1, false).unwrap()
    }

    fn try_complete(
        &mut self,
        key: &[u8],
        holder: &str,
        outcome: &[u8],
        ttl_ms: u64,
    ) -> redis::RedisResult<i64> {
        self.complete
            .key(key)
            .key(attempt_key(key))
            .arg(holder)
            .arg(outcome)
            .arg(ttl_ms)
            .arg("1")
            .arg(channel(key))
            .invoke(&mut self.conn)
    }

    fn complete(&mut self, key: &[u8], holder: &str, outcome: &[u8], ttl_ms: u64) -> i64 {
        self.try_complete(key, holder, outcome, ttl_ms).unwrap()
    }

    fn try_forget(&mut self, key: &[u8]) -> redis::RedisResult<i64> {
        self.forget.key(key).invoke(&mut self.conn)
    }

    fn abandon(&mut self, key: &[u8], holder: &str) -> Option<i64> {
        self.unlock
            .key(key)
            .arg("0")
            .arg(30_000)
            .arg(holder)
            .arg(channel(key))
            .invoke(&mut self.conn)
            .unwrap()
    }

    fn server_ms(&mut self) -> u64 {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut self.conn).unwrap();
        secs * 1000 + micros / 1000
    }

    fn raw<T: redis::FromRedisValue>(&mut self, name: &str, args: &[&[u8]]) -> T {
        let mut cmd = redis::cmd(name);
        for a in args {
            cmd.arg(*a);
        }
        cmd.query(&mut self.conn).unwrap()
    }
}

/// Every library case of the area on one server, in sequence.
#[test]
fn once_and_tokens() {
    let _heavy = crate::support::cpu_heavy();
    let server = RedisServer::start();
    let mut s = Scripts::new(&server);
    claim_then_complete_records_and_wakes(&server, &mut s);
    the_token_counter_expires_with_its_key(&server, &mut s);
    a_lost_runner_cannot_record(&mut s);
    abandon_lets_the_next_caller_run(&server, &mut s);
    forget_deletes_records_only(&mut s);
    wrong_types_are_errors_and_left_untouched(&mut s);
    binary_keys_and_outcomes_round_trip(&mut s);

    run_done_running_through_the_api(&server);
    waiters_are_woken_by_the_outcome_not_by_polling(&server);
    a_runner_that_lost_its_key_cannot_record(&server);
    bad_inputs_are_clear_errors(&server);
    values_past_their_bound_are_named_not_read(&server);
    tokens_are_one_use(&server);
    token_1_issued_tokens_are_distinct(&server);
    token_1_one_of_16_concurrent_consumers_wins(&server);
    once_1_two_processes_race_on_1000_keys(&server);
    once_2_killed_and_stopped_runners(&server);
}

/// A claim with the record's ttl `ttl_ms` (the harness's own claims keep
/// [`ATTEMPT_TTL_MS`]).
fn claim_for(s: &mut Scripts, key: &[u8], lease_ms: u64, ttl_ms: u64) -> i64 {
    let reply: Value = s
        .claim
        .key(key)
        .key(token_key(key))
        .key(attempt_key(key))
        .arg(lease_ms)
        .arg(A)
        .arg("1")
        .arg(ttl_ms)
        .arg("host-a")
        .arg(4242)
        .arg("prog")
        .invoke(&mut s.conn)
        .unwrap();
    match claim_reply(reply) {
        Claim::Run { token } => token,
        other => panic!("not claimed: {other:?}"),
    }
}

/// A run-once key leaves no fencing-token counter behind: the claim that
/// creates it gives it the longer of the record's ttl and the lease, it
/// goes with them, and the next counter starts past every token the last
/// one gave (at the server's clock in ms). A counter is never shortened,
/// and one without expiry (a fenced lock's) is left so; a fenced lock
/// takes the expiry off a counter a claim gave one.
fn the_token_counter_expires_with_its_key(server: &RedisServer, s: &mut Scripts) {
    let key = unique_name("once-counter").into_bytes();
    let counter = token_key(&key);
    let first = claim_for(s, &key, 200, 400);
    let pttl: i64 = s.raw("PTTL", &[&counter]);
    assert!((1..=400).contains(&pttl), "counter pttl {pttl}");
    let now = s.server_ms() as i64;
    assert!(
        first > now - 5_000 && first <= now + 1,
        "a new counter starts at the server's clock: {first} at {now}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || {
            s.raw::<i64>("EXISTS", &[&key, &counter, &attempt_key(&key)]) == 0
        }),
        "the key, its counter and its attempt outlived their ttl"
    );
    let second = claim_for(s, &key, 200, 400);
    assert!(second > first, "tokens went back: {first} then {second}");

    // The lease is the longer: the counter lives as long as the claim.
    let key = unique_name("once-counter-lease").into_bytes();
    claim_for(s, &key, 30_000, 100);
    let pttl: i64 = s.raw("PTTL", &[&token_key(&key)]);
    assert!(pttl > 20_000, "counter pttl {pttl} shorter than the lease");

    // Extended, never shortened.
    let key = unique_name("once-counter-keep").into_bytes();
    let counter = token_key(&key);
    let _: () = s.raw("SET", &[&counter, b"5", b"PX", b"100000"]);
    assert_eq!(claim_for(s, &key, 200, 400), 6);
    let pttl: i64 = s.raw("PTTL", &[&counter]);
    assert!(pttl > 90_000, "counter shortened to {pttl}");
    let key = unique_name("once-counter-extend").into_bytes();
    let counter = token_key(&key);
    let _: () = s.raw("SET", &[&counter, b"5", b"PX", b"100"]);
    assert_eq!(claim_for(s, &key, 200, 60_000), 6);
    let pttl: i64 = s.raw("PTTL", &[&counter]);
    assert!(pttl > 50_000, "counter not extended: {pttl}");

    // A counter without expiry stays so.
    let key = unique_name("once-counter-fenced").into_bytes();
    let counter = token_key(&key);
    let _: () = s.raw("SET", &[&counter, b"41"]);
    assert_eq!(claim_for(s, &key, 200, 400), 42);
    assert_eq!(s.raw::<i64>("PTTL", &[&counter]), -1);

    // A fenced lock makes a claim's counter its own: no expiry.
    let name = unique_name("once-counter-then-fenced");
    let counter = token_key(name.as_bytes());
    let _: () = s.raw("SET", &[&counter, b"7", b"PX", b"100000"]);
    let client = crate::support::test_builder(&server.url()).build().unwrap();
    let guard = client.fenced_lock(&name).lock().unwrap();
    assert_eq!(guard.fencing_token(), Some(redguard::FencingToken::new(8)));
    assert_eq!(s.raw::<i64>("PTTL", &[&counter]), -1);
    drop(guard);
}

fn claim_then_complete_records_and_wakes(server: &RedisServer, s: &mut Scripts) {
    let key = unique_name("once-basic").into_bytes();
    assert_eq!(s.peek(&key), Claim::Free, "look-only on a free key");
    assert_eq!(
        s.raw::<i64>("EXISTS", &[&key, &token_key(&key)]),
        0,
        "looking writes nothing"
    );

    let Claim::Run { token } = s.claim(&key, A, 30_000) else {
        panic!("the first claim runs");
    };
    assert!(token >= 1);
    // While running, the key is a Redisson lock held by the runner.
    let held: Vec<(String, i64)> = s.raw("HGETALL", &[&key]);
    assert_eq!(held, vec![(A.to_owned(), 1)]);
    let pttl: i64 = s.raw("PTTL", &[&key]);
    assert!((29_000..=30_000).contains(&pttl), "lease pttl {pttl}");
    let counter: i64 = s.raw("GET", &[&token_key(&key)]);
    assert_eq!(counter, token);
    // Beside it, the attempt: running, by whom, since when (server clock).
    let attempt: Vec<Option<String>> = s.raw(
        "HMGET",
        &[
            &attempt_key(&key),
            b"state",
            b"holder",
            b"host",
            b"pid",
            b"program",
            b"ended_at",
        ],
    );
    assert_eq!(
        attempt,
        vec![
            Some("running".to_owned()),
            Some(A.to_owned()),
            Some("host-a".to_owned()),
            Some("4242".to_owned()),
            Some("prog".to_owned()),
            None
        ]
    );
    let started: u64 = s.raw("HGET", &[&attempt_key(&key), b"started_at"]);
    assert!(
        started <= s.server_ms() && started + 5_000 >= s.server_ms(),
        "started {started}"
    );
    // Only the attempt's own runner may end it: another holder is refused
    // and changes nothing.
    let refused: i64 = s
        .attempt_end
        .key(attempt_key(&key))
        .arg(B)
        .arg("failed")
        .arg("3")
        .arg("")
        .arg(1_000)
        .invoke(&mut s.conn)
        .unwrap();
    assert_eq!(refused, 0);
    let state: Vec<Option<String>> =
        s.raw("HMGET", &[&attempt_key(&key), b"state", b"exit_status"]);
    assert_eq!(state, vec![Some("running".to_owned()), None]);
    let pttl: i64 = s.raw("PTTL", &[&attempt_key(&key)]);
    assert!(pttl > 80_000, "attempt pttl {pttl}");
    let pttl: i64 = s.raw("PTTL", &[&attempt_key(&key)]);
    assert!((80_000..=90_000).contains(&pttl), "attempt pttl {pttl}");

    // Others see it running, with the runner and its lease.
    for look in [s.claim(&key, B, 30_000), s.peek(&key)] {
        match look {
            Claim::Running { pttl, holder } => {
                assert_eq!(holder, A);
                assert!((29_000..=30_000).contains(&pttl), "pttl {pttl}");
            }
            other => panic!("expected running, got {other:?}"),
        }
    }
    // The runner itself does not re-enter: a claim is not reentrant.
    assert!(matches!(s.claim(&key, A, 30_000), Claim::Running { holder, .. } if holder == A));
    assert_eq!(s.raw::<i64>("HGET", &[&key, A.as_bytes()]), 1);
    let counter: i64 = s.raw("GET", &[&token_key(&key)]);
    assert_eq!(counter, token, "only a successful claim draws a token");

    // A caller that is not the runner cannot record.
    assert_eq!(s.complete(&key, B, b"forged", 60_000), 0);
    let held: Vec<(String, i64)> = s.raw("HGETALL", &[&key]);
    assert_eq!(held, vec![(A.to_owned(), 1)]);

    // The runner records: one wake-everyone message on the channel, the
    // record replaces the lock.
    let listener = Listener::start(server, channel(&key));
    let before = s.server_ms();
    let at = s.complete(&key, A, b"receipt-17", 60_000);
    let after = s.server_ms();
    assert!(
        at as u64 >= before && at as u64 <= after,
        "at {at} in [{before}, {after}]"
    );
    assert_eq!(listener.collect(1, ms(100)), vec![b"1".to_vec()]);
    let mut record: Vec<(String, Vec<u8>)> = s.raw("HGETALL", &[&key]);
    record.sort();
    assert_eq!(
        record,
        vec![
            ("at".to_owned(), at.to_string().into_bytes()),
            ("by".to_owned(), A.as_bytes().to_vec()),
            ("outcome".to_owned(), b"receipt-17".to_vec()),
        ]
    );
    let pttl: i64 = s.raw("PTTL", &[&key]);
    assert!((59_000..=60_000).contains(&pttl), "record ttl {pttl}");
    // The attempt ends with it: done at the record's time, kept as long,
    // and no other claim replaced it.
    let attempt: Vec<Option<String>> = s.raw(
        "HMGET",
        &[
            &attempt_key(&key),
            b"state",
            b"holder",
            b"ended_at",
            b"started_at",
        ],
    );
    assert_eq!(
        attempt[..3],
        [
            Some("done".to_owned()),
            Some(A.to_owned()),
            Some(at.to_string())
        ]
    );
    assert_eq!(attempt[3], Some(started.to_string()));
    let pttl: i64 = s.raw("PTTL", &[&attempt_key(&key)]);
    assert!((59_000..=60_000).contains(&pttl), "attempt ttl {pttl}");

    // Every later claim is told, by anyone, and nothing is drawn.
    for holder in [A, B] {
        match s.claim(&key, holder, 30_000) {
            Claim::Done {
                outcome,
                at: got,
                by,
                pttl,
            } => {
                assert_eq!(outcome, b"receipt-17");
                assert_eq!(got, at as u64);
                assert_eq!(by, A);
                assert!((59_000..=60_000).contains(&pttl));
            }
            other => panic!("expected done, got {other:?}"),
        }
    }
    assert!(matches!(s.peek(&key), Claim::Done { .. }));
    assert_eq!(s.raw::<i64>("GET", &[&token_key(&key)]), token);
    // The runner's second complete finds no hold: refused, record kept.
    assert_eq!(s.complete(&key, A, b"again", 1_000), 0);
    assert_eq!(s.raw::<Vec<u8>>("HGET", &[&key, b"outcome"]), b"receipt-17");

    // A Redisson-style lock on the same name sees the record as a busy lock.
    let lock_reply: Option<i64> = s
        .lock
        .key(&key)
        .arg(30_000)
        .arg(B)
        .invoke(&mut s.conn)
        .unwrap();
    assert!(
        matches!(lock_reply, Some(p) if p > 59_000),
        "busy: {lock_reply:?}"
    );
    // Its unlock by a foreign holder changes nothing.
    assert_eq!(s.abandon(&key, B), None);
    assert_eq!(s.raw::<Vec<u8>>("HGET", &[&key, b"outcome"]), b"receipt-17");
}

/// The runner's lease runs out (it crashed or stalled); the next caller runs
/// with a larger token; the old runner's late complete is refused and
/// overwrites nothing, before and after the new runner records.
fn a_lost_runner_cannot_record(s: &mut Scripts) {
    let key = unique_name("once-late").into_bytes();
    let Claim::Run { token: first } = s.claim(&key, A, 50) else {
        panic!("first claim runs");
    };
    assert!(wait_until(Duration::from_secs(2), || s
        .raw::<i64>("EXISTS", &[&key])
        == 0));
    let Claim::Run { token: second } = s.claim(&key, B, 30_000) else {
        panic!("the key is free again after the lease");
    };
    assert_eq!(second, first + 1);
    assert_eq!(
        s.complete(&key, A, b"late", 60_000),
        0,
        "refused while B runs"
    );
    let held: Vec<(String, i64)> = s.raw("HGETALL", &[&key]);
    assert_eq!(held, vec![(B.to_owned(), 1)], "B's hold untouched");
    assert!(s.complete(&key, B, b"fresh", 60_000) > 0);
    assert_eq!(
        s.complete(&key, A, b"late", 60_000),
        0,
        "refused after B recorded"
    );
    assert!(
        matches!(s.peek(&key), Claim::Done { outcome, by, .. } if outcome == b"fresh" && by == B)
    );

    // A lease that expires with nobody else around: still refused.
    let key = unique_name("once-expired").into_bytes();
    assert!(matches!(s.claim(&key, A, 20), Claim::Run { .. }));
    assert!(wait_until(Duration::from_secs(2), || s
        .raw::<i64>("EXISTS", &[&key])
        == 0));
    assert_eq!(s.complete(&key, A, b"late", 60_000), 0);
    assert_eq!(s.raw::<i64>("EXISTS", &[&key]), 0, "nothing recorded");
}

fn abandon_lets_the_next_caller_run(server: &RedisServer, s: &mut Scripts) {
    let key = unique_name("once-abandon").into_bytes();
    let Claim::Run { token } = s.claim(&key, A, 30_000) else {
        panic!("first claim runs");
    };
    let listener = Listener::start(server, channel(&key));
    assert_eq!(s.abandon(&key, A), Some(1), "the lock's own release");
    assert_eq!(listener.collect(1, ms(50)), vec![b"0".to_vec()]);
    assert_eq!(s.peek(&key), Claim::Free);
    assert_eq!(s.claim(&key, B, 30_000), Claim::Run { token: token + 1 });
}

fn forget_deletes_records_only(s: &mut Scripts) {
    let key = unique_name("once-forget").into_bytes();
    assert_eq!(s.try_forget(&key).unwrap(), 0, "nothing stored");
    assert!(matches!(s.claim(&key, A, 30_000), Claim::Run { .. }));
    assert_eq!(
        s.try_forget(&key).unwrap(),
        -1,
        "a running claim is not forgotten"
    );
    assert_eq!(s.raw::<i64>("HGET", &[&key, A.as_bytes()]), 1);
    assert!(s.complete(&key, A, b"done", 60_000) > 0);
    assert_eq!(s.try_forget(&key).unwrap(), 1);
    assert_eq!(s.raw::<i64>("EXISTS", &[&key]), 0);
    assert!(
        matches!(s.claim(&key, B, 30_000), Claim::Run { .. }),
        "runs again"
    );
}

fn wrong_types_are_errors_and_left_untouched(s: &mut Scripts) {
    let key = unique_name("once-string").into_bytes();
    let () = s.raw("SET", &[&key, b"not a run-once key"]);
    // Redis 6.2 wraps the code: `ERR Error running script …: WRONGTYPE …`.
    let wrongtype = |e: redis::RedisError| {
        e.code() == Some("WRONGTYPE") || e.detail().is_some_and(|d| d.contains(": WRONGTYPE "))
    };
    assert!(wrongtype(s.try_claim(&key, A, 30_000, true).unwrap_err()));
    assert!(wrongtype(s.try_claim(&key, A, 30_000, false).unwrap_err()));
    assert!(wrongtype(
        s.try_complete(&key, A, b"x", 60_000).unwrap_err()
    ));
    assert!(wrongtype(s.try_forget(&key).unwrap_err()));
    assert_eq!(s.raw::<Vec<u8>>("GET", &[&key]), b"not a run-once key");
    assert_eq!(
        s.raw::<i64>("EXISTS", &[&token_key(&key)]),
        0,
        "no token drawn"
    );

    // A token counter that is not an integer: the claim fails before writing.
    let key = unique_name("once-bad-counter").into_bytes();
    let () = s.raw("SET", &[&token_key(&key), b"abc"]);
    let err = s.try_claim(&key, A, 30_000, true).unwrap_err();
    // The server's words are the error's source (its `Debug` shows them).
    assert!(format!("{err:?}").contains("not an integer"), "{err:?}");
    assert_eq!(s.raw::<i64>("EXISTS", &[&key]), 0);
}

fn binary_keys_and_outcomes_round_trip(s: &mut Scripts) {
    let mut key = unique_name("once-bin").into_bytes();
    key.extend_from_slice(&[0, 0xff, b'\n', b'\'', b'"']);
    let outcome = [0u8, 1, 0xfe, 0xff, b'\r', b'\n'];
    assert!(matches!(s.claim(&key, A, 30_000), Claim::Run { .. }));
    assert!(s.complete(&key, A, &outcome, 60_000) > 0);
    assert!(matches!(s.claim(&key, B, 30_000), Claim::Done { outcome: o, .. } if o == outcome));

    // An empty outcome is an outcome, not "nothing recorded".
    let key = unique_name("once-empty").into_bytes();
    assert!(matches!(s.claim(&key, A, 30_000), Claim::Run { .. }));
    assert!(s.complete(&key, A, b"", 60_000) > 0);
    assert!(matches!(s.claim(&key, B, 30_000), Claim::Done { outcome, .. } if outcome.is_empty()));
}

// ---------------------------------------------------------------------------
// The library.

/// Values someone else wrote past what redguard writes, in the record at
/// the key (an outcome past MAX_OUTCOME_LEN, a `by` past 4 KiB) and in
/// the last attempt (past 4 KiB): named in `too_long`, read as empty; one
/// byte less is read whole. A claim refuses such a record, leaving it.
fn values_past_their_bound_are_named_not_read(server: &RedisServer) {
    let client = test_client(&server.url());
    let at = b"1700000000000";
    for (outcome_len, by_len, too_long) in [
        (MAX_OUTCOME_LEN, 4096, vec![]),
        (MAX_OUTCOME_LEN + 1, 4096, vec!["outcome"]),
        (MAX_OUTCOME_LEN, 4097, vec!["by"]),
    ] {
        let key = unique_name("once-huge");
        let (outcome, by) = (vec![b'o'; outcome_len], vec![b'b'; by_len]);
        let _: i64 = server.cmd(
            "HSET",
            &[key.as_bytes(), b"outcome", &outcome, b"at", at, b"by", &by],
        );
        let Ok(OnceStatus::Done(done)) = client.once_status(&key) else {
            panic!("{key}: not done");
        };
        assert_eq!(done.too_long, too_long, "{outcome_len} {by_len}");
        let read = |len, field| if too_long.contains(&field) { 0 } else { len };
        assert_eq!(done.value.len(), read(outcome_len, "outcome"));
        assert_eq!(done.by.len(), read(by_len, "by"));
        assert_eq!(
            done.at,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_000)
        );
        let claimed = client.once(&key, DAY);
        if too_long.is_empty() {
            assert!(matches!(claimed, Ok(Once::Done(_))), "{claimed:?}");
        } else {
            assert!(
                matches!(claimed, Err(Error::WrongType { .. })),
                "{claimed:?}"
            );
        }
        let len: usize = server.cmd("HSTRLEN", &[key.as_bytes(), b"outcome"]);
        assert_eq!(len, outcome_len, "the record is left as it was");
    }

    for (len, too_long) in [(4096, vec![]), (4097, vec!["program", "holder"])] {
        let key = unique_name("once-huge-attempt");
        let long = vec![b'p'; len];
        let started = b"1700000000000";
        let _: i64 = server.cmd(
            "HSET",
            &[
                &attempt_key(key.as_bytes()),
                b"state",
                b"failed",
                b"holder",
                &long,
                b"program",
                &long,
                b"started_at",
                started,
                b"exit_status",
                b"3",
            ],
        );
        let attempt = client.once_inspect(&key).unwrap().last_attempt.unwrap();
        assert_eq!(attempt.too_long, too_long, "{len}");
        assert_eq!(attempt.state, redguard::AttemptState::Failed);
        assert_eq!(attempt.exit_status, Some(3));
        let read = if too_long.is_empty() { len } else { 0 };
        assert_eq!((attempt.program.len(), attempt.holder.len()), (read, read));
    }
}

fn server_now(server: &RedisServer) -> SystemTime {
    let (secs, micros): (u64, u64) = server.cmd("TIME", &[]);
    UNIX_EPOCH + Duration::from_micros(secs * 1_000_000 + micros)
}

const DAY: Duration = Duration::from_secs(86_400);

fn run_done_running_through_the_api(server: &RedisServer) {
    let a = test_client(&server.url());
    let b = test_client(&server.url());
    let key = unique_name("once-api");
    assert_eq!(a.once_status(&key).unwrap(), OnceStatus::NotRun);

    let Once::Run(run) = a.once(&key, DAY).unwrap() else {
        panic!("the first caller runs");
    };
    let first_token = run.fencing_token().get();
    assert!(first_token >= 1);
    assert_eq!(run.key(), key.as_bytes());
    assert_eq!(run.ttl(), DAY);
    let holder = a.holder_id().as_str().to_owned();
    assert_eq!(run.holder_id().as_str(), holder);
    // The claim is a lock in Redisson's layout, held with the watchdog lease.
    let held: Vec<(String, u64)> = server.cmd("HGETALL", &[key.as_bytes()]);
    assert_eq!(held, vec![(holder.clone(), 1)]);
    let info = a.lock(&key).inspect().unwrap();
    assert_eq!(
        info.holders,
        vec![(run.holder_id().clone(), 1)],
        "a lock to `status`"
    );

    match b.once(&key, DAY).unwrap() {
        Once::Running {
            holder: h,
            expires_in,
            ..
        } => {
            assert_eq!(h, holder);
            assert!(expires_in.is_some_and(|e| e <= TEST_WATCHDOG));
        }
        other => panic!("expected running, got {other:?}"),
    }
    assert!(
        matches!(a.once(&key, DAY).unwrap(), Once::Running { holder: h, .. } if h == holder),
        "not reentrant: the runner's own thread is told it is running"
    );
    assert!(matches!(
        b.once_status(&key).unwrap(),
        OnceStatus::Running { .. }
    ));

    // The watchdog renews the claim past its lease.
    let renewals = a.stats().renewals;
    assert!(wait_until(TEST_WATCHDOG * 3, || a.stats().renewals >= renewals + 4));
    assert!(!run.is_lost());
    run.check().unwrap();
    assert!(matches!(b.once(&key, DAY).unwrap(), Once::Running { .. }));

    let before = server_now(server) - ms(1);
    let recorded = run.complete(b"receipt-1").unwrap();
    let after = server_now(server) + ms(1);
    assert_eq!(recorded.value, b"receipt-1");
    assert_eq!(recorded.by, holder);
    assert!(recorded.at >= before && recorded.at <= after);
    assert_eq!(recorded.expires_in, Some(DAY));
    assert_eq!(a.stats().held_locks, 0, "the hold ended with the record");

    for c in [&a, &b] {
        match c.once(&key, DAY).unwrap() {
            Once::Done(o) => {
                assert_eq!(
                    (&o.value, o.at, &o.by),
                    (&recorded.value, recorded.at, &recorded.by)
                );
                assert!(
                    o.expires_in
                        .is_some_and(|e| e <= DAY && e > DAY - ms(5_000))
                );
            }
            other => panic!("expected done, got {other:?}"),
        }
    }
    assert!(matches!(
        b.once_wait(&key, DAY, Duration::MAX).unwrap(),
        Once::Done(_)
    ));
    assert!(matches!(b.once_status(&key).unwrap(), OnceStatus::Done(o) if o.value == b"receipt-1"));

    // Forget: runs again, with a larger token; dropping the guard abandons.
    assert!(b.forget_once(&key).unwrap());
    assert!(!b.forget_once(&key).unwrap(), "nothing left");
    let Once::Run(run) = b.once(&key, DAY).unwrap() else {
        panic!("runs again after forget");
    };
    assert!(run.fencing_token().get() > first_token);
    assert!(
        !a.forget_once(&key).unwrap(),
        "a running claim is not forgotten"
    );
    drop(run);
    assert_eq!(a.once_status(&key).unwrap(), OnceStatus::NotRun);
    let Once::Run(run) = a.once(&key, DAY).unwrap() else {
        panic!("runs after a dropped guard");
    };
    run.abandon().unwrap();
    let Once::Run(run) = b.once(&key, DAY).unwrap() else {
        panic!("runs after an abandon");
    };
    drop(run);
}

/// `once_wait` callers are woken by the runner's completion or abandon on
/// pub/sub: the runner's lease and the waiters' poll interval are 10 s, so
/// a wake-up within 1 s cannot come from polling.
fn waiters_are_woken_by_the_outcome_not_by_polling(server: &RedisServer) {
    let slow = |url: &str| {
        test_builder(url)
            .watchdog_timeout(Duration::from_secs(10))
            .poll_interval(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let runner = slow(&server.url());
    let waiter = slow(&server.url());
    let key = unique_name("once-wake");

    let Once::Run(run) = runner.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (waiter, key) = (waiter.clone(), key.clone());
            thread::spawn(move || {
                let got = waiter
                    .once_wait(&key, DAY, Duration::from_secs(20))
                    .unwrap();
                let at = Instant::now();
                match got {
                    Once::Done(o) => (o.value, at),
                    other => panic!("expected done, got {other:?}"),
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || waiter
        .stats()
        .waiters
        == 3));
    let completed = Instant::now();
    run.complete(b"woken").unwrap();
    for w in waiters {
        let (value, at) = w.join().unwrap();
        assert_eq!(value, b"woken");
        let took = at.saturating_duration_since(completed);
        assert!(took < Duration::from_secs(1), "woken after {took:?}");
    }

    // An abandon wakes a waiter too, and it becomes the runner.
    let key = unique_name("once-wake-abandon");
    let Once::Run(run) = runner.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    let w = {
        let (waiter, key) = (waiter.clone(), key.clone());
        thread::spawn(move || {
            let got = waiter
                .once_wait(&key, DAY, Duration::from_secs(20))
                .unwrap();
            let at = Instant::now();
            match got {
                Once::Run(run) => {
                    run.complete(b"second runner").unwrap();
                    at
                }
                other => panic!("expected to run after the abandon, got {other:?}"),
            }
        })
    };
    assert!(wait_until(Duration::from_secs(5), || waiter
        .stats()
        .waiters
        == 1));
    let abandoned = Instant::now();
    run.abandon().unwrap();
    let took = w.join().unwrap().saturating_duration_since(abandoned);
    assert!(took < Duration::from_secs(1), "woken after {took:?}");
    assert!(
        matches!(runner.once(&key, DAY).unwrap(), Once::Done(o) if o.value == b"second runner")
    );

    // A wait that runs out reports the runner.
    let key = unique_name("once-wait-out");
    let Once::Run(run) = runner.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    let started = Instant::now();
    let got = waiter.once_wait(&key, DAY, ms(300)).unwrap();
    assert!(started.elapsed() >= ms(300));
    assert!(
        matches!(got, Once::Running { ref holder, .. } if holder == run.holder_id().as_str()),
        "{got:?}"
    );
    drop(run);
}

/// A runner whose key was taken from it (here deleted, as an expiry or an
/// eviction would) cannot record, neither before nor after the next runner
/// records; the next runner's outcome stays.
fn a_runner_that_lost_its_key_cannot_record(server: &RedisServer) {
    let a = test_client(&server.url());
    let b = test_client(&server.url());
    let key = unique_name("once-lost");
    let Once::Run(late) = a.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    let _: i64 = server.cmd("DEL", &[key.as_bytes()]);
    // The next renewal tells the runner; its guard says so.
    assert!(wait_until(TEST_WATCHDOG, || late.is_lost()), "never told");
    assert!(late.check().unwrap_err().is_lock_lost());
    let shown = format!("{late:?}");
    assert!(
        shown.starts_with("OnceGuard") && shown.contains(&key) && shown.contains("lost: true"),
        "{shown}"
    );
    let Once::Run(fresh) = b.once(&key, DAY).unwrap() else {
        panic!("the key is free again");
    };
    assert!(fresh.fencing_token() > late.fencing_token());
    fresh.complete(b"fresh").unwrap();
    let err = late.complete(b"late").unwrap_err();
    assert!(err.is_lock_lost(), "{err:?}");
    assert!(
        matches!(a.once(&key, DAY).unwrap(), Once::Done(o) if o.value == b"fresh" && o.by == b.holder_id().as_str())
    );

    // Lost with nobody after it: nothing is recorded.
    let key = unique_name("once-lost-alone");
    let Once::Run(late) = a.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    let _: i64 = server.cmd("DEL", &[key.as_bytes()]);
    assert!(late.complete(b"late").unwrap_err().is_lock_lost());
    assert_eq!(b.once_status(&key).unwrap(), OnceStatus::NotRun);
}

fn bad_inputs_are_clear_errors(server: &RedisServer) {
    let c = test_client(&server.url());
    let invalid = |r: redguard::Result<Once>| match r {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    // Keys.
    let msg = invalid(c.once("", DAY));
    assert!(msg.contains("empty"), "{msg}");
    invalid(c.once(vec![b'k'; MAX_NAME_LEN + 1], DAY));
    invalid(c.once_wait("", DAY, ms(10)));
    assert!(matches!(c.once_status(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.forget_once(""), Err(Error::InvalidArgument(_))));
    // Ttls: zero, under a millisecond, under the 5 ms minimum, too long.
    let key = unique_name("once-bad");
    for ttl in [
        Duration::ZERO,
        Duration::from_nanos(1),
        ms(4),
        MAX_LEASE + ms(1),
        Duration::MAX,
    ] {
        let msg = invalid(c.once(&key, ttl));
        assert!(msg.contains("ttl"), "{msg}");
        invalid(c.once_wait(&key, ttl, ms(10)));
    }
    assert_eq!(
        c.once_status(&key).unwrap(),
        OnceStatus::NotRun,
        "nothing written"
    );

    // A huge outcome is refused and the run abandoned; the limit itself (1
    // MiB, as documented) is fine.
    assert_eq!(MAX_OUTCOME_LEN, 1 << 20);
    let Once::Run(run) = c.once(&key, DAY).unwrap() else {
        panic!("first caller runs");
    };
    match run.complete(vec![0u8; MAX_OUTCOME_LEN + 1]) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("maximum"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let Once::Run(run) = c.once(&key, DAY).unwrap() else {
        panic!("the refused run was abandoned");
    };
    run.complete(vec![7u8; MAX_OUTCOME_LEN]).unwrap();
    assert!(
        matches!(c.once(&key, DAY).unwrap(), Once::Done(o) if o.value.len() == MAX_OUTCOME_LEN)
    );

    // Wrong types: an error, never "running" or a loop; the value stays.
    let string = unique_name("once-string");
    let () = server.cmd("SET", &[string.as_bytes(), b"v"]);
    let list = unique_name("once-list");
    let _: i64 = server.cmd("RPUSH", &[list.as_bytes(), b"v"]);
    for key in [&string, &list] {
        let wrong = |e: Error| matches!(e, Error::WrongType { key: ref k } if k == key);
        assert!(wrong(c.once(key, DAY).unwrap_err()));
        let started = Instant::now();
        assert!(wrong(
            c.once_wait(key, DAY, Duration::from_secs(5)).unwrap_err()
        ));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no waiting on a wrong type"
        );
        assert!(wrong(c.once_status(key).unwrap_err()));
        assert!(wrong(c.forget_once(key).unwrap_err()));
    }
    let kept: String = server.cmd("GET", &[string.as_bytes()]);
    assert_eq!(kept, "v");

    // Binary keys round-trip.
    let mut binary = unique_name("once-bin").into_bytes();
    binary.extend_from_slice(&[0, 0xff, b'{', b'}']);
    let Once::Run(run) = c.once(&binary, DAY).unwrap() else {
        panic!("first caller runs");
    };
    run.complete([0xfe, 0]).unwrap();
    let exists: i64 = server.cmd("EXISTS", &[&binary]);
    assert_eq!(exists, 1);
    assert!(matches!(c.once(&binary, DAY).unwrap(), Once::Done(o) if o.value == [0xfe, 0]));

    // Tokens.
    let token_invalid =
        |r: redguard::Result<Token>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    token_invalid(c.issue_token("", DAY));
    token_invalid(c.issue_token(vec![b's'; MAX_NAME_LEN + 1], DAY));
    token_invalid(c.issue_token("scope", Duration::ZERO));
    token_invalid(c.issue_token("scope", Duration::MAX));
    let t = c.issue_token("scope", DAY).unwrap();
    assert!(matches!(
        c.consume_token("", &t),
        Err(Error::InvalidArgument(_))
    ));

    // A shut-down client refuses, it does not panic.
    c.shutdown();
    assert!(matches!(c.once(&key, DAY), Err(Error::Shutdown)));
    assert!(matches!(c.issue_token("scope", DAY), Err(Error::Shutdown)));
    assert!(matches!(c.consume_token("scope", &t), Err(Error::Shutdown)));
}

fn one_use_key(scope: &str, token: &Token) -> Vec<u8> {
    format!("redguard_token:{{{scope}}}:{token}").into_bytes()
}

fn tokens_are_one_use(server: &RedisServer) {
    let c = test_client(&server.url());
    let other = test_client(&server.url());
    let scope = unique_name("checkout");
    let t = c.issue_token(&scope, Duration::from_secs(600)).unwrap();
    let key = one_use_key(&scope, &t);
    let pttl: i64 = server.cmd("PTTL", &[&key]);
    assert!((599_000..=600_000).contains(&pttl), "pttl {pttl}");
    // The text form goes to a client and comes back.
    let back: Token = t.to_string().parse().unwrap();
    assert_eq!(back, t);
    assert!(!other.consume_token("elsewhere", &back).unwrap(), "scoped");
    assert!(other.consume_token(&scope, &back).unwrap());
    assert!(!c.consume_token(&scope, &t).unwrap(), "used up");
    let exists: i64 = server.cmd("EXISTS", &[&key]);
    assert_eq!(exists, 0);
    // Never issued: false, not an error.
    let unknown: Token = "0123456789abcdef0123456789abcdef".parse().unwrap();
    assert!(!c.consume_token(&scope, &unknown).unwrap());
    // Expired: false.
    let t = c.issue_token(&scope, ms(20)).unwrap();
    assert!(wait_until(Duration::from_secs(2), || {
        server.cmd::<i64>("EXISTS", &[&one_use_key(&scope, &t)]) == 0
    }));
    assert!(!c.consume_token(&scope, &t).unwrap());
}

/// TOKEN-1 (J6), first half: issued tokens never repeat. 10,000 tokens
/// issued from 4 threads are all distinct and all stored (the 10^6 draw of
/// the random source is a unit test of `Token`).
fn token_1_issued_tokens_are_distinct(server: &RedisServer) {
    let c = bulk_client(&server.url());
    let scope = unique_name("bulk");
    let all: Vec<Vec<Token>> = (0..4)
        .map(|_| {
            let (c, scope) = (c.clone(), scope.clone());
            thread::spawn(move || {
                (0..2_500)
                    .map(|_| c.issue_token(&scope, Duration::from_secs(60)).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let distinct: HashSet<Token> = all.iter().flatten().copied().collect();
    assert_eq!(distinct.len(), 10_000);
    let stored: Vec<Vec<u8>> = server.cmd(
        "KEYS",
        &[format!("redguard_token:{{{scope}}}:*").as_bytes()],
    );
    assert_eq!(stored.len(), 10_000);
}

/// TOKEN-1, second half: 16 threads (of two clients) consume one token at
/// the same instant; exactly one gets `true`, over 1,000 trials.
fn token_1_one_of_16_concurrent_consumers_wins(server: &RedisServer) {
    const THREADS: usize = 16;
    const TRIALS: usize = 1_000;
    let clients = [bulk_client(&server.url()), bulk_client(&server.url())];
    let scope = unique_name("race");
    let current: Arc<Mutex<Option<Token>>> = Arc::new(Mutex::new(None));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let end = Arc::new(Barrier::new(THREADS + 1));
    let wins = Arc::new(Mutex::new(vec![0usize; TRIALS]));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let c = clients[i % 2].clone();
            let (scope, current, start, end, wins) = (
                scope.clone(),
                current.clone(),
                start.clone(),
                end.clone(),
                wins.clone(),
            );
            thread::spawn(move || {
                for trial in 0..TRIALS {
                    start.wait();
                    let token = current.lock().unwrap().expect("a token per trial");
                    if c.consume_token(&scope, &token).unwrap() {
                        wins.lock().unwrap()[trial] += 1;
                    }
                    end.wait();
                }
            })
        })
        .collect();
    let issuer = &clients[0];
    let started = Instant::now();
    for _ in 0..TRIALS {
        *current.lock().unwrap() =
            Some(issuer.issue_token(&scope, Duration::from_secs(60)).unwrap());
        start.wait();
        end.wait();
    }
    for h in handles {
        h.join().unwrap();
    }
    let wins = wins.lock().unwrap();
    let bad: Vec<_> = wins.iter().enumerate().filter(|(_, w)| **w != 1).collect();
    assert!(bad.is_empty(), "trials without exactly one winner: {bad:?}");
    eprintln!(
        "TOKEN-1: {TRIALS} trials x {THREADS} consumers, exactly one true in each, in {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Processes: ONCE-1 and ONCE-2.

const ONCE_1_KEYS: usize = 1_000;
const ONCE_1_THREADS: usize = 8;

/// The child half of ONCE-1: 8 threads go through the same 1,000 keys. The
/// winner of a key does its work (counts a run in `<prefix>:runs`, notes
/// its outcome in `<prefix>:winners`) and records the outcome; a loser that
/// finds it done, or waits for it, checks it got the winner's outcome.
#[test]
#[ignore = "child process of once_and_tokens (ONCE-1)"]
fn once_1_child() {
    let Some(role) = child_role() else { return };
    assert_eq!(role, "once1");
    let url = std::env::var("ONCE_URL").unwrap();
    let prefix = std::env::var("ONCE_PREFIX").unwrap();
    let client = bulk_client(&url);
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    say("READY");
    assert_eq!(hear(), "GO");
    let threads: Vec<_> = (0..ONCE_1_THREADS)
        .map(|_| {
            let (client, url, prefix) = (client.clone(), url.clone(), prefix.clone());
            let first_error = first_error.clone();
            thread::spawn(move || {
                let note = |what: String| {
                    first_error.lock().unwrap().get_or_insert(what);
                };
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                let (mut runs, mut done, mut waited, mut mismatches, mut errors) = (0, 0, 0, 0, 0);
                let mut check = |i: usize, o: &redguard::Outcome, conn: &mut redis::Connection| {
                    let winner: Option<Vec<u8>> = redis::cmd("HGET")
                        .arg(format!("{prefix}:winners"))
                        .arg(i)
                        .query(conn)
                        .unwrap();
                    let by_ok =
                        String::from_utf8_lossy(&o.value).ends_with(&format!("/{}/{i}", o.by));
                    if winner.as_deref() != Some(&o.value[..]) || !by_ok {
                        mismatches += 1;
                    }
                };
                let run = |i: usize, guard: redguard::OnceGuard, conn: &mut redis::Connection| {
                    let () = redis::cmd("HINCRBY")
                        .arg(format!("{prefix}:runs"))
                        .arg(i)
                        .arg(1)
                        .query::<i64>(conn)
                        .map(|_| ())
                        .unwrap();
                    let outcome = format!("{}/{}/{i}", std::process::id(), guard.holder_id());
                    let () = redis::cmd("HSET")
                        .arg(format!("{prefix}:winners"))
                        .arg(i)
                        .arg(&outcome)
                        .query::<i64>(conn)
                        .map(|_| ())
                        .unwrap();
                    guard
                        .complete(outcome)
                        .map_err(|e| note(format!("complete: {e}")))
                        .is_ok()
                };
                for i in 0..ONCE_1_KEYS {
                    let key = format!("{prefix}:{i}");
                    match client.once(&key, DAY) {
                        Ok(Once::Run(guard)) => {
                            runs += 1;
                            if !run(i, guard, &mut conn) {
                                errors += 1;
                            }
                        }
                        Ok(Once::Done(o)) => {
                            done += 1;
                            check(i, &o, &mut conn);
                        }
                        Ok(Once::Running { .. }) => {
                            waited += 1;
                            match client.once_wait(&key, DAY, Duration::from_secs(30)) {
                                Ok(Once::Done(o)) => check(i, &o, &mut conn),
                                Ok(Once::Run(guard)) => {
                                    // The runner gave up: not expected here,
                                    // and counted as a run of its own.
                                    runs += 1;
                                    errors += 1;
                                    run(i, guard, &mut conn);
                                }
                                other => {
                                    note(format!("once_wait: {other:?}"));
                                    errors += 1;
                                }
                            }
                        }
                        Err(e) => {
                            note(format!("once: {e}"));
                            errors += 1;
                        }
                    }
                }
                [runs, done, waited, mismatches, errors]
            })
        })
        .collect();
    let mut total = [0usize; 5];
    for t in threads {
        for (sum, n) in total.iter_mut().zip(t.join().unwrap()) {
            *sum += n;
        }
    }
    let [runs, done, waited, mismatches, errors] = total;
    let first_error = first_error.lock().unwrap().take().unwrap_or_default();
    say(&format!(
        "RESULT {runs} {done} {waited} {mismatches} {errors} first error: {first_error}"
    ));
}

/// ONCE-1: 2 processes x 8 threads race on each of 1,000 keys. Every key's
/// work runs exactly once; every loser gets `Done` with the winner's
/// outcome, at once or after waiting.
fn once_1_two_processes_race_on_1000_keys(server: &RedisServer) {
    let url = server.url();
    let prefix = unique_name("once1");
    let env = [("ONCE_URL", url.as_str()), ("ONCE_PREFIX", prefix.as_str())];
    let mut children: Vec<ChildTest> = (0..2)
        .map(|_| ChildTest::spawn("once::once_1_child", "once1", &env))
        .collect();
    for child in &children {
        child.expect_line("READY", Duration::from_secs(10));
    }
    let started = Instant::now();
    for child in &mut children {
        child.send_line("GO");
    }
    let mut total = [0usize; 5];
    let mut lines = Vec::new();
    for child in &children {
        let line = child.expect_line("RESULT ", Duration::from_secs(60));
        for (sum, n) in total.iter_mut().zip(line.split(' ')) {
            *sum += n.parse::<usize>().unwrap();
        }
        lines.push(line);
    }
    let took = started.elapsed();
    for child in &mut children {
        assert!(child.wait_success(Duration::from_secs(10)));
    }
    let [runs, done, waited, mismatches, errors] = total;
    assert_eq!(errors, 0, "{lines:?}");
    assert_eq!(mismatches, 0, "every loser saw the winner's outcome");
    assert_eq!(runs, ONCE_1_KEYS, "one run per key");
    assert_eq!(runs + done + waited, 2 * ONCE_1_THREADS * ONCE_1_KEYS);
    let per_key: Vec<(usize, u64)> = server.cmd("HGETALL", &[format!("{prefix}:runs").as_bytes()]);
    assert_eq!(per_key.len(), ONCE_1_KEYS);
    assert!(per_key.iter().all(|(_, n)| *n == 1), "a key ran twice");
    let c = test_client(&url);
    let winners: Vec<(usize, Vec<u8>)> =
        server.cmd("HGETALL", &[format!("{prefix}:winners").as_bytes()]);
    for (i, winner) in winners {
        match c.once_status(format!("{prefix}:{i}")).unwrap() {
            OnceStatus::Done(o) => assert_eq!(o.value, winner),
            other => panic!("key {i}: {other:?}"),
        }
    }
    eprintln!(
        "ONCE-1: 2 processes x {ONCE_1_THREADS} threads x {ONCE_1_KEYS} keys in {took:?}: \
         {runs} runs (1 per key), {done} found done, {waited} waited for the outcome, \
         0 mismatches"
    );
}

/// The child half of ONCE-2: claims the key, reports, then either waits to
/// be killed or, on "GO", tries to complete late and reports the answer.
#[test]
#[ignore = "child process of once_and_tokens (ONCE-2)"]
fn once_2_child() {
    let Some(role) = child_role() else { return };
    let url = std::env::var("ONCE_URL").unwrap();
    let key = std::env::var("ONCE_KEY").unwrap();
    let client = test_client(&url);
    let Once::Run(run) = client.once(&key, DAY).unwrap() else {
        panic!("the child claims first");
    };
    say(&format!("CLAIMED {}", run.fencing_token()));
    match role.as_str() {
        "kill" => {
            // Mid-work until SIGKILL.
            let _ = hear();
        }
        "stop" => {
            assert_eq!(hear(), "GO");
            let answer = match run.complete(b"late") {
                Ok(_) => "recorded".to_owned(),
                Err(e) if e.is_lock_lost() => "lost".to_owned(),
                Err(e) => format!("error {e}"),
            };
            say(&format!("COMPLETE {answer}"));
        }
        other => panic!("unknown role {other}"),
    }
}

/// ONCE-2: a runner SIGKILLed mid-work frees the key within its lease; the
/// next caller runs within lease + 250 ms (3 runs). A runner frozen with
/// SIGSTOP past its lease, resumed after the next runner recorded, has its
/// late complete refused; the new outcome stays.
fn once_2_killed_and_stopped_runners(server: &RedisServer) {
    let url = server.url();
    let next = test_client(&url);
    let (mut worst, mut worst_late) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..3 {
        let key = unique_name("once2-kill");
        let env = [("ONCE_URL", url.as_str()), ("ONCE_KEY", key.as_str())];
        let mut child = ChildTest::spawn("once::once_2_child", "kill", &env);
        let token: u64 = child
            .expect_line("CLAIMED ", Duration::from_secs(10))
            .parse()
            .unwrap();
        child.kill();
        let killed = Instant::now();
        let pttl: i64 = server.cmd("PTTL", &[key.as_bytes()]);
        let left = ms(u64::try_from(pttl).expect("the dead runner's claim is still there"));
        let Once::Run(run) = next.once_wait(&key, DAY, Duration::from_secs(10)).unwrap() else {
            panic!("the next caller runs once the dead runner's lease is over");
        };
        let took = killed.elapsed();
        assert!(run.fencing_token().get() > token);
        assert!(
            took <= TEST_WATCHDOG + ms(250),
            "ran {took:?} after the kill"
        );
        let late = took.saturating_sub(left);
        assert!(late <= ms(250), "ran {late:?} after the lease ran out");
        worst = worst.max(took);
        worst_late = worst_late.max(late);
        run.complete(b"after the crash").unwrap();
    }

    let key = unique_name("once2-stop");
    let env = [("ONCE_URL", url.as_str()), ("ONCE_KEY", key.as_str())];
    let mut child = ChildTest::spawn("once::once_2_child", "stop", &env);
    child.expect_line("CLAIMED ", Duration::from_secs(10));
    child.signal(libc::SIGSTOP);
    let Once::Run(run) = next.once_wait(&key, DAY, Duration::from_secs(10)).unwrap() else {
        panic!("the next caller runs once the frozen runner's lease is over");
    };
    run.complete(b"fresh").unwrap();
    child.signal(libc::SIGCONT);
    child.send_line("GO");
    assert_eq!(
        child.expect_line("COMPLETE ", Duration::from_secs(10)),
        "lost"
    );
    assert!(child.wait_success(Duration::from_secs(10)));
    match next.once_status(&key).unwrap() {
        OnceStatus::Done(o) => {
            assert_eq!(o.value, b"fresh");
            assert_eq!(o.by, next.holder_id().as_str());
        }
        other => panic!("{other:?}"),
    }
    eprintln!(
        "ONCE-2: next caller ran at most {worst:?} after a SIGKILL (lease {TEST_WATCHDOG:?}), \
         at most {worst_late:?} after the dead runner's lease ran out; the SIGSTOPped \
         runner's late complete was refused"
    );
}

// ---------------------------------------------------------------------------
// The CLI: `redguard once`.

#[cfg(feature = "cli")]
mod cli {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::Duration;

    use crate::cli::{Outcome, Proc, redguard, run};
    use crate::support::{RedisServer, unique_name, wait_until};

    const RUN_TIMEOUT: Duration = Duration::from_secs(20);

    /// A job that appends the pid of the redguard that ran it (its parent's
    /// parent: on Linux redguard runs CMD under a supervisor) to
    /// `$RUNS_FILE`, waits for `$GO_FILE` to appear when that is set
    /// (bounded: 20 s), and exits with `$JOB_EXIT` (0).
    const JOB: &str = r#"#!/bin/sh
sed -e 's/.*) //' "/proc/$PPID/stat" | cut -d' ' -f2 >> "$RUNS_FILE"
if [ -n "$GO_FILE" ]; then
    i=0
    while [ ! -e "$GO_FILE" ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
fi
exit "${JOB_EXIT:-0}"
"#;

    struct Bed {
        server: RedisServer,
        dir: tempfile::TempDir,
        job: PathBuf,
    }

    impl Bed {
        fn new() -> Bed {
            let server = RedisServer::start();
            let dir = tempfile::Builder::new()
                .prefix("redguard-once-")
                .tempdir()
                .unwrap();
            let job = dir.path().join("job.sh");
            fs::write(&job, JOB).unwrap();
            fs::set_permissions(&job, fs::Permissions::from_mode(0o755)).unwrap();
            Bed { server, dir, job }
        }

        fn file(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        /// `redguard once [flags] KEY -- job.sh`, counting runs in `runs`
        /// and gated by `go` when given.
        fn once(
            &self,
            key: &str,
            flags: &[&str],
            runs: &Path,
            go: Option<&Path>,
            exit: u8,
        ) -> Command {
            let mut cmd = redguard(&self.server.url());
            cmd.arg("once")
                .args(flags)
                .arg(key)
                .arg("--")
                .arg(&self.job);
            cmd.env("RUNS_FILE", runs).env("JOB_EXIT", exit.to_string());
            match go {
                Some(go) => cmd.env("GO_FILE", go),
                None => cmd.env_remove("GO_FILE"),
            };
            cmd
        }

        /// `redguard once --status|--forget KEY`.
        fn admin(&self, flag: &str, key: &str) -> Outcome {
            let mut cmd = redguard(&self.server.url());
            cmd.args(["once", flag, key]);
            run(cmd)
        }

        /// Processes subscribed to KEY's channel: one per waiting redguard,
        /// and the runner's, listening for a force unlock.
        fn waiting(&self, key: &str) -> i64 {
            let channel = format!("redisson_lock__channel:{{{key}}}");
            let (_, n): (String, i64) = self.server.cmd("PUBSUB", &[b"NUMSUB", channel.as_bytes()]);
            n
        }
    }

    fn runs(file: &Path) -> Vec<i32> {
        fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }

    /// Five concurrent `redguard once --wait` on one key: the job runs once;
    /// the four others wait and exit like the runner did, naming it. With
    /// `--record-failure` that is the job's failing status.
    fn five_concurrent_waiting_callers_run_the_job_once(bed: &Bed, exit: u8, flags: &[&str]) {
        let key = unique_name("nightly");
        let (runs_file, go) = (
            bed.file(&format!("{key}.runs")),
            bed.file(&format!("{key}.go")),
        );
        let mut procs: Vec<Proc> = (0..5)
            .map(|_| Proc::spawn(bed.once(&key, flags, &runs_file, Some(&go), exit)))
            .collect();
        assert!(wait_until(Duration::from_secs(10), || runs(&runs_file)
            .len()
            == 1));
        // Four waiters, and the runner itself: a hold that lasted 100 ms
        // listens on its channel for a force unlock.
        assert!(
            wait_until(Duration::from_secs(10), || bed.waiting(&key) == 5),
            "the four others wait for the outcome"
        );
        fs::write(&go, "").unwrap();
        let outs: Vec<(i32, Outcome)> = procs
            .iter_mut()
            .map(|p| (p.pid(), p.wait(RUN_TIMEOUT)))
            .collect();
        let ran = runs(&runs_file);
        assert_eq!(ran.len(), 1, "the job ran once");
        let runner = ran[0];
        for (pid, out) in &outs {
            assert_eq!(out.code, Some(i32::from(exit)), "pid {pid}: {}", out.stderr);
            if *pid != runner {
                assert!(out.stderr.contains("already ran"), "{}", out.stderr);
                assert!(
                    out.stderr.contains(&format!("(pid {runner})")),
                    "names the runner: {}",
                    out.stderr
                );
                assert!(
                    out.stderr.contains(&format!("exit status {exit}")),
                    "{}",
                    out.stderr
                );
            }
        }
        assert!(outs.iter().any(|(pid, _)| *pid == runner));
    }

    #[test]
    fn once_cli() {
        let bed = Bed::new();
        five_concurrent_waiting_callers_run_the_job_once(&bed, 0, &["--wait", "30s"]);
        five_concurrent_waiting_callers_run_the_job_once(
            &bed,
            3,
            &["--wait", "30s", "--record-failure"],
        );

        // Without --wait: callers that find it running exit 75 naming the
        // holder; once it is done, they exit 0 naming the runner.
        let key = unique_name("nightly");
        let (runs_file, go) = (
            bed.file(&format!("{key}.runs")),
            bed.file(&format!("{key}.go")),
        );
        let mut runner = Proc::spawn(bed.once(&key, &[], &runs_file, Some(&go), 0));
        assert!(wait_until(Duration::from_secs(10), || runs(&runs_file)
            .len()
            == 1));
        for _ in 0..2 {
            let out = run(bed.once(&key, &[], &runs_file, None, 0));
            assert_eq!(out.code, Some(75), "{}", out.stderr);
            assert!(
                out.stderr.contains("is running") && out.stderr.contains("holder"),
                "{}",
                out.stderr
            );
        }
        let status = bed.admin("--status", &key);
        assert_eq!(status.code, Some(0));
        assert!(
            status.stdout.contains("running: holder"),
            "{}",
            status.stdout
        );
        let forget = bed.admin("--forget", &key);
        assert_eq!(
            forget.code,
            Some(75),
            "a run in progress is not forgotten: {}",
            forget.stderr
        );
        fs::write(&go, "").unwrap();
        let out = runner.wait(RUN_TIMEOUT);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let runner_pid = runs(&runs_file)[0];
        let later: Vec<Proc> = (0..4)
            .map(|_| Proc::spawn(bed.once(&key, &[], &runs_file, None, 0)))
            .collect();
        for mut p in later {
            let out = p.wait(RUN_TIMEOUT);
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            assert!(
                out.stderr.contains(&format!("(pid {runner_pid})")),
                "{}",
                out.stderr
            );
        }
        let quiet = run(bed.once(&key, &["-q"], &runs_file, None, 0));
        assert_eq!((quiet.code, quiet.stderr.as_str()), (Some(0), ""));
        assert_eq!(runs(&runs_file).len(), 1);
        let status = bed.admin("--status", &key);
        assert!(
            status.stdout.contains(&format!("(pid {runner_pid})"))
                && status.stdout.contains("exit status 0"),
            "{}",
            status.stdout
        );
        // --forget: the job runs again.
        let forget = bed.admin("--forget", &key);
        assert_eq!(forget.code, Some(0));
        assert!(
            forget.stdout.contains("record deleted"),
            "{}",
            forget.stdout
        );
        assert!(bed.admin("--status", &key).stdout.contains("not run"));
        let again = run(bed.once(&key, &[], &runs_file, None, 0));
        assert_eq!(again.code, Some(0), "{}", again.stderr);
        assert_eq!(runs(&runs_file).len(), 2, "ran again after --forget");
        let nothing = bed.admin("--forget", &unique_name("never"));
        assert_eq!(nothing.code, Some(0));

        // A failing job is not recorded: the next caller runs it again.
        let key = unique_name("flaky");
        let runs_file = bed.file(&format!("{key}.runs"));
        let failed = run(bed.once(&key, &[], &runs_file, None, 5));
        assert_eq!(failed.code, Some(5));
        assert!(failed.stderr.contains("not recorded"), "{}", failed.stderr);
        // Not recorded, but its attempt is kept: how it ended, and where.
        let status = bed.admin("--status", &key).stdout;
        assert!(
            status.contains("not recorded: last attempt failed")
                && status.contains("exit status 5"),
            "{status}"
        );
        let fixed = run(bed.once(&key, &[], &runs_file, None, 0));
        assert_eq!(fixed.code, Some(0), "{}", fixed.stderr);
        assert_eq!(runs(&runs_file).len(), 2);

        // Bad input: one line, distinct codes, nothing run.
        let runs_file = bed.file("bad.runs");
        let empty = run(bed.once("", &[], &runs_file, None, 0));
        assert_eq!(empty.code, Some(64), "{}", empty.stderr);
        let zero = run(bed.once(&unique_name("zero"), &["--ttl", "0s"], &runs_file, None, 0));
        assert_eq!(zero.code, Some(64), "{}", zero.stderr);
        assert!(zero.stderr.contains("ttl"), "{}", zero.stderr);
        let string = unique_name("string");
        let () = bed.server.cmd("SET", &[string.as_bytes(), b"v"]);
        let wrong = run(bed.once(&string, &[], &runs_file, None, 0));
        assert_eq!(wrong.code, Some(65), "{}", wrong.stderr);
        assert!(
            wrong.stderr.contains("not a run-once record"),
            "{}",
            wrong.stderr
        );
        assert_eq!(bed.admin("--status", &string).code, Some(65));
        let mut no_cmd = redguard(&bed.server.url());
        no_cmd.args(["once", "k"]);
        assert_eq!(run(no_cmd).code, Some(64));
        assert!(runs(&runs_file).is_empty(), "nothing ran");
    }
}

/// A claim asking for replica acknowledgement: with one replica, a claim
/// that needs one acknowledgement runs; one that needs two is undone (the
/// key is free again) and reported as `NotReplicated`.
#[test]
fn a_claim_runs_only_when_enough_replicas_acknowledged_it() {
    let (master, _replica) = RedisServer::start_master_and_replica();
    // A lease well above the `WAIT` timeout (1 s): with the test's 900 ms
    // one, a slow acknowledgement on a loaded machine makes the grant come
    // after its lease ran out, and it is given back.
    let one = test_builder(&master.url())
        .watchdog_timeout(Duration::from_secs(10))
        .min_replica_acks(1)
        // A replica slow to acknowledge on a loaded machine (seen: none
        // within the default 1 s at load average 17).
        .replica_ack_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let key = unique_name("once-acked");
    let claim = one.once(&key, DAY).unwrap();
    let Once::Run(run) = claim else {
        panic!("one replica acknowledged the claim: {claim:?}");
    };
    run.complete(b"acked").unwrap();

    let two = test_builder(&master.url())
        .min_replica_acks(2)
        .replica_ack_timeout(ms(100))
        .build()
        .unwrap();
    let key = unique_name("once-short");
    let err = two.once(&key, DAY).unwrap_err();
    assert!(err.is_not_replicated(), "{err:?}");
    assert!(!master.exists(&key), "the claim was undone");
}

/// A completion whose reply is lost (the connection cut after the server
/// ran the script) still reports the outcome it recorded: the call, sent
/// again, finds the key no longer held but this runner's record there.
#[test]
fn a_completion_whose_reply_was_lost_counts_as_recorded() {
    use crate::support::{FaultProxy, ReplyFault};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = test_client(&proxy.url());
    // The scripts loaded first: the cut must meet the completion's reply,
    // not a NOSCRIPT.
    let warm = unique_name("once-cut-warm");
    let Once::Run(run) = client.once(&warm, Duration::from_secs(60)).unwrap() else {
        panic!("a fresh key runs");
    };
    run.complete("warm").unwrap();
    let key = unique_name("once-cut");
    let Once::Run(run) = client.once(&key, Duration::from_secs(60)).unwrap() else {
        panic!("a fresh key runs");
    };
    proxy.fault_replies_to(b"cut-outcome", ReplyFault::Cut, 1);
    let outcome = run.complete("cut-outcome").unwrap();
    assert_eq!(proxy.reply_faults_done(), 1, "no reply was cut");
    assert_eq!(outcome.value, b"cut-outcome");
    let by: String = server.cmd("HGET", &[key.as_bytes(), b"by"]);
    assert_eq!(by, client.holder_id().to_string());
}

/// A claim granted only after its lease ran out is given back, and the
/// caller hears why: an error, not a `Running` naming nobody. The grant is
/// made late by its replica acknowledgement: the replica is stopped when
/// the claim is made and resumed after the claim's lease (the watchdog
/// timeout, 2 s) has run out, within the 6 s `WAIT`. The key is free
/// again, so the next call runs the work.
#[test]
fn a_claim_granted_after_its_lease_is_given_back_and_is_an_error() {
    let (master, replica) = RedisServer::start_master_and_replica();
    let client = test_builder(&master.url())
        .watchdog_timeout(Duration::from_secs(2))
        .response_timeout(ms(600))
        .min_replica_acks(1)
        .replica_ack_timeout(Duration::from_secs(6))
        .holder_record(false)
        .build()
        .unwrap();
    // The script loaded and the connection open before the replica stops.
    let warm = unique_name("once-late-warm");
    let Once::Run(run) = client.once(&warm, Duration::from_secs(60)).unwrap() else {
        panic!("a fresh key runs");
    };
    run.complete("warm").unwrap();
    let key = unique_name("once-late");
    let (result, took) = thread::scope(|s| {
        replica.sigstop();
        let resume = s.spawn(|| {
            // The fault's schedule: resume the replica after the lease.
            crate::support::sleep(ms(3000));
            replica.sigcont();
        });
        let t0 = Instant::now();
        let result = client.once(&key, Duration::from_secs(60));
        let took = t0.elapsed();
        resume.join().unwrap();
        (result, took)
    });
    let err = result.unwrap_err();
    assert!(err.is_timeout(), "after {took:?}: {err:?}");
    assert!(err.to_string().contains("given back"), "{err}");
    assert!(
        took >= ms(3000),
        "the grant waited for the replica: {took:?}"
    );
    assert!(!master.exists(&key), "the late claim was left on the key");
    let again = client.once(&key, Duration::from_secs(60)).unwrap();
    let Once::Run(run) = again else {
        panic!("the given-back key runs on the next call: {again:?}");
    };
    run.complete("ran").unwrap();
}
