//! Run-once keys: the scripts of `lua/once_*.lua` driven directly, one
//! server for every case (run in sequence): claim, complete, abandon,
//! forget, lease expiry, a late complete, wrong types, binary keys.

use std::time::Duration;

use redis::{Script, Value};

use crate::reentrant::Listener;
use crate::support::{RedisServer, ms, unique_name, wait_until};

const CLAIM: &str = include_str!("../../lua/once_claim.lua");
const COMPLETE: &str = include_str!("../../lua/once_complete.lua");
const FORGET: &str = include_str!("../../lua/once_forget.lua");
const UNLOCK: &str = include_str!("../../lua/unlock.lua");
const LOCK: &str = include_str!("../../lua/lock.lua");

/// A holder id as the library writes them.
const A: &str = "0d6c1f9e-5a3b-4c2d-9e8f-1a2b3c4d5e6f:1";
const B: &str = "7e2a4b1c-9d8e-4f3a-b2c1-d4e5f6a7b8c9:4";

fn token_key(key: &[u8]) -> Vec<u8> {
    [b"redisson_lock_token:{".as_slice(), key, b"}"].concat()
}

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
            .arg(lease_ms)
            .arg(holder)
            .arg(if take { "1" } else { "0" })
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
            .key(channel(key))
            .arg(holder)
            .arg(outcome)
            .arg(ttl_ms)
            .arg("0")
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
            .key(channel(key))
            .arg("0")
            .arg(30_000)
            .arg(holder)
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

/// Every case of the scripts on one server, in sequence.
#[test]
fn once_scripts() {
    let server = RedisServer::start();
    let mut s = Scripts::new(&server);
    claim_then_complete_records_and_wakes(&server, &mut s);
    a_lost_runner_cannot_record(&mut s);
    abandon_lets_the_next_caller_run(&server, &mut s);
    forget_deletes_records_only(&mut s);
    wrong_types_are_errors_and_left_untouched(&mut s);
    binary_keys_and_outcomes_round_trip(&mut s);
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

    // The runner records: one message on the channel, the record replaces the lock.
    let listener = Listener::start(server, channel(&key));
    let before = s.server_ms();
    let at = s.complete(&key, A, b"receipt-17", 60_000);
    let after = s.server_ms();
    assert!(
        at as u64 >= before && at as u64 <= after,
        "at {at} in [{before}, {after}]"
    );
    assert_eq!(listener.collect(1, ms(100)), vec![b"0".to_vec()]);
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
    let wrongtype = |e: redis::RedisError| e.code() == Some("WRONGTYPE");
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
    assert!(err.to_string().contains("not an integer"), "{err}");
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
