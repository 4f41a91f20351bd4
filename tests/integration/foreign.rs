//! A second, independent implementation of Redisson's synchronizer
//! protocols, written as plain Redis commands in optimistic transactions
//! (`WATCH` / `MULTI` / `EXEC`, retried on conflict) instead of Lua: what a
//! Redisson (Java) process leaves in Redis and publishes, step by step as
//! Redisson's scripts do it. redguard must interoperate with it.

use std::time::Duration;

use redis::{Connection, Value};

/// A foreign client: one connection and a Redisson-style holder id
/// (`<uuid>:<thread id>`).
pub(crate) struct Foreign {
    conn: Connection,
    pub(crate) holder: String,
}

/// Runs `tx` as an optimistic transaction on the keys `watch`, until it
/// commits (bounded: 100 tries). `tx` returns `None` to give up without
/// writing (the transaction is discarded).
fn atomically<T>(
    conn: &mut Connection,
    watch: &[&[u8]],
    mut tx: impl FnMut(&mut Connection) -> Option<(redis::Pipeline, T)>,
) -> Option<T> {
    for _ in 0..100 {
        let () = redis::cmd("WATCH").arg(watch).query(conn).unwrap();
        let Some((pipe, out)) = tx(conn) else {
            let () = redis::cmd("UNWATCH").query(conn).unwrap();
            return None;
        };
        let done: Value = pipe.query(conn).unwrap();
        if done != Value::Nil {
            return Some(out);
        }
    }
    panic!("foreign transaction kept conflicting");
}

fn braced(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

impl Foreign {
    pub(crate) fn new(server: &crate::support::RedisServer, thread: u64) -> Foreign {
        Foreign {
            conn: server.conn(),
            holder: format!("5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10:{thread}"),
        }
    }

    /// Redisson's read lock: `true` when taken (or re-entered).
    pub(crate) fn read_lock(&mut self, name: &str, lease: Duration) -> bool {
        let holder = self.holder.clone();
        let write_field = format!("{holder}:write");
        let ms = lease.as_millis() as u64;
        let prefix = format!("{}:{holder}:rwlock_timeout", braced(name));
        atomically(&mut self.conn, &[name.as_bytes()], |conn| {
            let mode: Option<String> = redis::cmd("HGET")
                .arg(name)
                .arg("mode")
                .query(conn)
                .unwrap();
            let mine: Option<i64> = redis::cmd("HGET")
                .arg(name)
                .arg(&holder)
                .query(conn)
                .unwrap();
            let writer: bool = redis::cmd("HEXISTS")
                .arg(name)
                .arg(&write_field)
                .query(conn)
                .unwrap();
            let pttl: i64 = redis::cmd("PTTL").arg(name).query(conn).unwrap();
            let mut pipe = redis::pipe();
            pipe.atomic();
            match mode.as_deref() {
                None => {
                    pipe.cmd("HSET").arg(name).arg("mode").arg("read").ignore();
                    pipe.cmd("HSET").arg(name).arg(&holder).arg(1).ignore();
                    pipe.cmd("SET")
                        .arg(format!("{prefix}:1"))
                        .arg(1)
                        .arg("PX")
                        .arg(ms)
                        .ignore();
                    pipe.cmd("PEXPIRE").arg(name).arg(ms).ignore();
                }
                Some(m) if m == "read" || (m == "write" && writer) => {
                    let n = mine.unwrap_or(0) + 1;
                    pipe.cmd("HINCRBY").arg(name).arg(&holder).arg(1).ignore();
                    pipe.cmd("SET")
                        .arg(format!("{prefix}:{n}"))
                        .arg(1)
                        .arg("PX")
                        .arg(ms)
                        .ignore();
                    pipe.cmd("PEXPIRE")
                        .arg(name)
                        .arg((pttl.max(0) as u64).max(ms))
                        .ignore();
                }
                _ => return None,
            }
            Some((pipe, ()))
        })
        .is_some()
    }

    /// Redisson's read unlock (one hold): publishes `0` on
    /// `redisson_rwlock:{name}` when the lock becomes free.
    pub(crate) fn read_unlock(&mut self, name: &str) {
        let holder = self.holder.clone();
        let prefix = format!("{}:{holder}:rwlock_timeout", braced(name));
        let channel = format!("redisson_rwlock:{}", braced(name));
        atomically(&mut self.conn, &[name.as_bytes()], |conn| {
            let mine: Option<i64> = redis::cmd("HGET")
                .arg(name)
                .arg(&holder)
                .query(conn)
                .unwrap();
            let n = mine?;
            let fields: Vec<(String, String)> =
                redis::cmd("HGETALL").arg(name).query(conn).unwrap();
            let mode = fields
                .iter()
                .find(|(f, _)| f == "mode")
                .map(|(_, v)| v.clone());
            let others = fields
                .iter()
                .filter(|(f, _)| f != "mode" && (f != &holder || n > 1))
                .count();
            let mut pipe = redis::pipe();
            pipe.atomic();
            if n > 1 {
                pipe.cmd("HINCRBY").arg(name).arg(&holder).arg(-1).ignore();
            } else {
                pipe.cmd("HDEL").arg(name).arg(&holder).ignore();
            }
            pipe.cmd("DEL").arg(format!("{prefix}:{n}")).ignore();
            if others == 0 && mode.as_deref() == Some("read") {
                pipe.cmd("DEL").arg(name).ignore();
                pipe.cmd("PUBLISH").arg(&channel).arg("0").ignore();
            }
            Some((pipe, ()))
        })
        .expect("the foreign reader held the lock");
    }

    /// Redisson's write lock: `true` when taken (or re-entered).
    pub(crate) fn write_lock(&mut self, name: &str, lease: Duration) -> bool {
        let field = format!("{}:write", self.holder);
        let ms = lease.as_millis() as u64;
        atomically(&mut self.conn, &[name.as_bytes()], |conn| {
            let mode: Option<String> = redis::cmd("HGET")
                .arg(name)
                .arg("mode")
                .query(conn)
                .unwrap();
            let mine: bool = redis::cmd("HEXISTS")
                .arg(name)
                .arg(&field)
                .query(conn)
                .unwrap();
            let mut pipe = redis::pipe();
            pipe.atomic();
            match mode.as_deref() {
                None => {
                    pipe.cmd("HSET").arg(name).arg("mode").arg("write").ignore();
                    pipe.cmd("HSET").arg(name).arg(&field).arg(1).ignore();
                    pipe.cmd("PEXPIRE").arg(name).arg(ms).ignore();
                }
                Some("write") if mine => {
                    pipe.cmd("HINCRBY").arg(name).arg(&field).arg(1).ignore();
                }
                _ => return None,
            }
            Some((pipe, ()))
        })
        .is_some()
    }

    /// Redisson's write unlock (one hold): publishes `1` when the write
    /// side is released.
    pub(crate) fn write_unlock(&mut self, name: &str) {
        let field = format!("{}:write", self.holder);
        let channel = format!("redisson_rwlock:{}", braced(name));
        atomically(&mut self.conn, &[name.as_bytes()], |conn| {
            let n: Option<i64> = redis::cmd("HGET")
                .arg(name)
                .arg(&field)
                .query(conn)
                .unwrap();
            let n = n?;
            let len: i64 = redis::cmd("HLEN").arg(name).query(conn).unwrap();
            let mut pipe = redis::pipe();
            pipe.atomic();
            if n > 1 {
                pipe.cmd("HINCRBY").arg(name).arg(&field).arg(-1).ignore();
            } else if len <= 2 {
                pipe.cmd("DEL").arg(name).ignore();
                pipe.cmd("PUBLISH").arg(&channel).arg("1").ignore();
            } else {
                pipe.cmd("HDEL").arg(name).arg(&field).ignore();
                pipe.cmd("HSET").arg(name).arg("mode").arg("read").ignore();
            }
            Some((pipe, ()))
        })
        .expect("the foreign writer held the lock");
    }

    /// Redisson's `trySetPermits`.
    pub(crate) fn set_permits(&mut self, name: &str, permits: i64) -> bool {
        let set: bool = redis::cmd("SET")
            .arg(name)
            .arg(permits)
            .arg("NX")
            .query(&mut self.conn)
            .unwrap();
        if set {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(format!("redisson_sc:{}", braced(name)))
                .arg(permits)
                .query(&mut self.conn)
                .unwrap();
        }
        set
    }

    /// Redisson's semaphore `tryAcquire(permits)`.
    pub(crate) fn try_acquire(&mut self, name: &str, permits: i64) -> bool {
        atomically(&mut self.conn, &[name.as_bytes()], |conn| {
            let value: Option<i64> = redis::cmd("GET").arg(name).query(conn).unwrap();
            if value? < permits {
                return None;
            }
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("DECRBY").arg(name).arg(permits).ignore();
            Some((pipe, ()))
        })
        .is_some()
    }

    /// Redisson's semaphore `release(permits)`: publishes the new count.
    pub(crate) fn release(&mut self, name: &str, permits: i64) {
        let now: i64 = redis::cmd("INCRBY")
            .arg(name)
            .arg(permits)
            .query(&mut self.conn)
            .unwrap();
        let _: i64 = redis::cmd("PUBLISH")
            .arg(format!("redisson_sc:{}", braced(name)))
            .arg(now)
            .query(&mut self.conn)
            .unwrap();
    }

    /// Redisson's expiring-permit `tryAcquire(waitTime 0, leaseTime)`: one
    /// permit under a random 16-byte id, its lease end on this client's
    /// clock, as Redisson writes it.
    pub(crate) fn try_acquire_permit(&mut self, name: &str, lease: Duration) -> Option<[u8; 16]> {
        let id: [u8; 16] = rand::random();
        let timeouts = format!("{}:timeout", braced(name));
        let ends = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + lease.as_millis() as u64;
        atomically(
            &mut self.conn,
            &[name.as_bytes(), timeouts.as_bytes()],
            |conn| {
                let value: Option<i64> = redis::cmd("GET").arg(name).query(conn).unwrap();
                if value? < 1 {
                    return None;
                }
                let mut pipe = redis::pipe();
                pipe.atomic().cmd("DECRBY").arg(name).arg(1).ignore();
                pipe.cmd("ZADD")
                    .arg(&timeouts)
                    .arg(ends)
                    .arg(&id[..])
                    .ignore();
                Some((pipe, ()))
            },
        )
        .map(|()| id)
    }

    /// Redisson's latch `countDown`: publishes `0` on
    /// `redisson_countdownlatch__channel__{name}` at zero.
    pub(crate) fn count_down(&mut self, name: &str) {
        let left: i64 = redis::cmd("DECR").arg(name).query(&mut self.conn).unwrap();
        if left <= 0 {
            let _: i64 = redis::cmd("DEL").arg(name).query(&mut self.conn).unwrap();
        }
        if left == 0 {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(format!("redisson_countdownlatch__channel__{{{name}}}"))
                .arg("0")
                .query(&mut self.conn)
                .unwrap();
        }
    }
}

/// Milliseconds since the Unix epoch, for comparing moments across
/// processes on this machine.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
