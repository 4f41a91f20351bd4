//! [`RecordSpec`]: what one client writes into its holder records, and
//! [`RecordWrite`], one write of it to one server: its commands and what
//! their replies say. No I/O.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::{Error, Result};
use crate::holder::ClientId;
use crate::lease::{Counters, LeaseState};

/// Longest `program` text kept, in bytes.
const MAX_PROGRAM: usize = 256;

/// A client's record content that does not change.
#[derive(Debug)]
pub(crate) struct RecordSpec {
    /// The client id's text.
    pub(crate) client: String,
    /// The prefix of the record's keys.
    pub(crate) prefix: std::sync::Arc<str>,
    host: String,
    pid: u32,
    program: String,
    /// When the client was made (this machine's clock).
    started: Instant,
    /// The record's lifetime: the client's watchdog timeout.
    pub(crate) ttl: Duration,
    /// The record keys a wait wrote (with their node): deleted at
    /// shutdown, as the watchdog deletes those of the holds.
    waited_on: Mutex<Vec<(crate::connection::NodeId, Vec<u8>)>>,
}

impl RecordSpec {
    /// The record of client `id`: this host and process, `program` (or
    /// `argv[0]`) as `how` keeps it, made now, living `ttl` unless
    /// refreshed.
    pub(crate) fn new(
        id: &ClientId,
        program: Option<&str>,
        how: super::RecordCommand,
        ttl: Duration,
    ) -> RecordSpec {
        let program = match program {
            Some(p) => p.to_owned(),
            None => std::env::args_os()
                .next()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        RecordSpec {
            client: super::client_text(id),
            prefix: std::sync::Arc::from(super::DEFAULT_PREFIX),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            pid: std::process::id(),
            // Masked before it is cut: a cut never shows more.
            program: truncate(&super::mask::recorded(&program, how), MAX_PROGRAM),
            started: Instant::now(),
            ttl,
            waited_on: Mutex::new(Vec::new()),
        }
    }

    /// A wait wrote the record `key` on `node`.
    pub(crate) fn note_wait_record(&self, node: crate::connection::NodeId, key: &[u8]) {
        let mut keys = self
            .waited_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !keys.iter().any(|(n, k)| *n == node && k == key) {
            keys.push((node, key.to_vec()));
        }
    }

    /// The record keys waits wrote, each once.
    pub(crate) fn take_wait_records(&self) -> Vec<(crate::connection::NodeId, Vec<u8>)> {
        std::mem::take(
            &mut *self
                .waited_on
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Keeps the record under `prefix` (checked by the caller) instead of
    /// the default.
    pub(crate) fn set_prefix(&mut self, prefix: std::sync::Arc<str>) {
        self.prefix = prefix;
    }

    /// Records `host` as the host name instead of this machine's.
    pub(crate) fn set_host(&mut self, host: &str) {
        self.host = truncate(host, MAX_PROGRAM);
    }

    /// The host name recorded.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The process id recorded.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The program recorded (masked as the client asked, cut to 256 bytes).
    pub(crate) fn program(&self) -> &str {
        &self.program
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().clamp(1, u64::MAX as u128) as u64
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One write of a client's record to one server.
#[derive(Debug)]
pub(crate) struct RecordWrite {
    pub(crate) spec: Arc<RecordSpec>,
    /// The client's counters (round trips of record writes alone).
    pub(crate) counters: Arc<Counters>,
    /// The record key on that server.
    pub(crate) key: Arc<[u8]>,
    /// Whether the fixed fields (host, pid, ...) go along: when the record
    /// is new, or was found gone.
    pub(crate) statics: bool,
    /// Hold fields to set: the field and the hold (for its start).
    pub(crate) adds: Vec<(Vec<u8>, Arc<LeaseState>)>,
    /// Hold fields to delete.
    pub(crate) dels: Vec<Vec<u8>>,
}

impl RecordWrite {
    /// Whether the write carries times, which need the server's clock.
    pub(crate) fn needs_clock(&self) -> bool {
        self.statics || !self.adds.is_empty()
    }

    /// The commands of this write; `offset_ms` is the server's clock minus
    /// this machine's, in ms. The first is a `PEXPIRE` whose reply says
    /// whether the record was there ([`RecordWrite::existed`]).
    pub(crate) fn commands(&self, offset_ms: i64) -> Vec<redis::Cmd> {
        let key = &self.key[..];
        let ttl = self.spec.ttl_ms();
        let server_ms = |at: SystemTime| {
            let local = at
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as i64;
            (local + offset_ms).max(0)
        };
        let ago = |since: Instant| SystemTime::now() - since.elapsed();
        let mut cmds = Vec::with_capacity(5);
        cmds.push(redis::cmd("PEXPIRE").arg(key).arg(ttl).clone());
        let mut set = redis::cmd("HSET");
        set.arg(key);
        let mut any = false;
        if self.statics {
            set.arg("host")
                .arg(&self.spec.host)
                .arg("pid")
                .arg(self.spec.pid)
                .arg("program")
                .arg(&self.spec.program)
                .arg("version")
                .arg(env!("CARGO_PKG_VERSION"));
            any = true;
        }
        for (field, state) in &self.adds {
            let since = server_ms(ago(state.held_since()));
            set.arg(&field[..])
                .arg(format!("{since} {}", state.kind().as_str()));
            any = true;
        }
        if any {
            cmds.push(set);
        }
        if self.statics {
            cmds.push(
                redis::cmd("HSETNX")
                    .arg(key)
                    .arg("started")
                    .arg(server_ms(ago(self.spec.started)))
                    .clone(),
            );
        }
        if !self.dels.is_empty() {
            let mut del = redis::cmd("HDEL");
            del.arg(key);
            for field in &self.dels {
                del.arg(&field[..]);
            }
            cmds.push(del);
        }
        if cmds.len() > 1 {
            // A record made by this write has no expiry yet.
            cmds.push(redis::cmd("PEXPIRE").arg(key).arg(ttl).clone());
        }
        cmds
    }

    /// Whether the record existed before the write, from the replies of
    /// [`RecordWrite::commands`].
    ///
    /// # Errors
    ///
    /// The first error reply among them (the write may be partly done).
    pub(crate) fn existed(replies: &[Value]) -> Result<bool> {
        for reply in replies {
            if let Value::ServerError(e) = reply {
                return Err(Error::redis(redis::RedisError::from(e.clone())));
            }
        }
        match replies.first() {
            Some(Value::Int(n)) => Ok(*n == 1),
            other => Err(Error::Protocol(format!(
                "unexpected record reply {other:?}"
            ))),
        }
    }
}

/// The server's clock minus this machine's, in ms, from a `TIME` reply
/// read between `before` and `after` (this machine's clock).
pub(crate) fn clock_offset(time: &Value, before: SystemTime, after: SystemTime) -> Result<i64> {
    let server = super::server_time(time)?;
    let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
    Ok(ms(server) - (ms(before) + ms(after)) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_cut_at_a_character() {
        assert_eq!(truncate("job", 256), "job");
        let long = "é".repeat(200);
        let cut = truncate(&long, MAX_PROGRAM);
        assert!(cut.len() <= MAX_PROGRAM && cut.len() >= MAX_PROGRAM - 1);
        assert!(long.starts_with(&cut));
    }

    /// The record holds the program as the client's `RecordCommand` keeps
    /// it: masked by default.
    #[test]
    fn the_recorded_program_is_masked_before_it_is_cut() {
        let id = ClientId::new_random();
        let ttl = Duration::from_secs(30);
        let text = format!("job {} --token=abc123TOKEN", "x".repeat(300));
        let masked = RecordSpec::new(&id, Some(&text), super::super::RecordCommand::Masked, ttl);
        assert!(!masked.program.contains("abc"), "{}", masked.program);
        let spec = RecordSpec::new(
            &id,
            Some("job --token=abc123TOKEN"),
            super::super::RecordCommand::Masked,
            ttl,
        );
        assert_eq!(spec.program, "job --token=***");
        let full = RecordSpec::new(
            &id,
            Some("job --token=abc123TOKEN"),
            super::super::RecordCommand::Full,
            ttl,
        );
        assert_eq!(full.program, "job --token=abc123TOKEN");
    }

    #[test]
    fn a_refresh_is_one_pexpire_and_a_write_ends_with_one() {
        let spec = Arc::new(RecordSpec::new(
            &ClientId::new_random(),
            Some("job.sh --x"),
            super::super::RecordCommand::Masked,
            Duration::from_secs(30),
        ));
        let mut write = RecordWrite {
            spec,
            counters: Arc::new(Counters::default()),
            key: Arc::from(&b"k"[..]),
            statics: false,
            adds: Vec::new(),
            dels: Vec::new(),
        };
        let packed = |cmds: &[redis::Cmd]| {
            cmds.iter()
                .map(|c| String::from_utf8_lossy(&c.get_packed_command()).into_owned())
                .collect::<Vec<_>>()
        };
        let refresh = packed(&write.commands(0));
        assert_eq!(refresh.len(), 1);
        assert!(refresh[0].contains("PEXPIRE") && refresh[0].contains("30000"));
        assert!(!write.needs_clock());

        let state = Arc::new(LeaseState::since(
            Instant::now() - Duration::from_secs(5),
            Instant::now() + Duration::from_secs(25),
            Arc::new(Counters::default()),
            crate::lost::HoldKind::Reentrant,
        ));
        write.statics = true;
        write.adds.push((b"hold:h|n".to_vec(), state));
        write.dels.push(b"hold:h|old".to_vec());
        assert!(write.needs_clock());
        let full = packed(&write.commands(-1000));
        assert_eq!(full.len(), 5, "{full:?}");
        assert!(full[1].contains("job.sh --x") && full[1].contains("hold:h|n"));
        assert!(full[1].contains(" reentrant\r\n"), "{full:?}");
        assert!(full[2].contains("HSETNX") && full[2].contains("started"));
        assert!(full[3].contains("HDEL") && full[3].contains("hold:h|old"));
        assert!(full[4].contains("PEXPIRE"));
        assert!(!RecordWrite::existed(&[Value::Int(0), Value::Okay]).unwrap());
        assert!(RecordWrite::existed(&[Value::Int(1)]).unwrap());
    }
}
