//! A waiting thread's entry in its client's holder record: `wait:<holder
//! id>|<name>` → `<since ms> <kind>`, so that `redguard status` can say who
//! waits, on which host, since when.
//!
//! The entry costs no round trip of its own while the wait lasts: its
//! commands (`HSET` of the record's fixed fields and the entry, `HSETNX
//! started`, `PEXPIRE`) are packed ahead of the wait's next attempt and go
//! out in the same write (see [`Riding`]); they go again every third of the
//! record's lifetime, which keeps the record alive through a long wait.
//! When the wait ends, the entry is deleted: for a wait that ends in a
//! recorded hold, by the very watchdog write that records the hold
//! ([`hand_over`]); otherwise (a timeout, an error, a panic, a latch that
//! opened, a permit of a plain semaphore) by one `HDEL` as the wait
//! returns, or, when that fails, by the watchdog's next record write on
//! that server.
//!
//! One wait per thread at a time: the state lives in a thread local, and
//! only the commands of this thread's next call to the wait's server carry
//! the entry (the transport's prelude, `connection::prelude`). This module
//! owns the entry's field and commands; the wait engine's `WaitEntry`
//! (`wait::record_entry`) drives them.

use std::cell::RefCell;

use crate::connection::{NodeId, Source, prelude};

use super::RecordSpec;

thread_local! {
    /// The field of this thread's recorded wait, while one is claimed.
    static FIELD: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Claims this thread's recorded wait, of field `field`, on node `node` of
/// `source`; `false` when a wait of this thread is recorded already (a wait
/// inside a wait: only the outer one is recorded).
pub(crate) fn claim(source: &Source, node: NodeId, field: Vec<u8>) -> bool {
    if !prelude::claim(source, node) {
        return false;
    }
    let _ = FIELD.try_with(|f| *f.borrow_mut() = Some(field));
    true
}

/// Arms the entry's commands for `key` (the record key on the wait's node),
/// to ride on the wait's next attempt: the record's fixed fields and the
/// entry (`<since ms> <kind>`), `HSETNX started`, and `PEXPIRE` of the
/// record's lifetime.
pub(crate) fn arm(spec: &RecordSpec, key: &[u8], since_ms: u128, kind: &str) {
    let Some(field) = FIELD.try_with(|f| f.borrow().clone()).ok().flatten() else {
        return;
    };
    let ttl_ms = spec.ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
    let mut set = redis::cmd("HSET");
    set.arg(key)
        .arg("host")
        .arg(spec.host())
        .arg("pid")
        .arg(spec.pid())
        .arg("program")
        .arg(spec.program())
        .arg("version")
        .arg(env!("CARGO_PKG_VERSION"))
        .arg(&field[..])
        .arg(format!("{since_ms} {kind}"));
    let mut bytes = set.get_packed_command();
    bytes.extend(
        redis::cmd("HSETNX")
            .arg(key)
            .arg("started")
            .arg(since_ms as u64)
            .get_packed_command(),
    );
    bytes.extend(
        redis::cmd("PEXPIRE")
            .arg(key)
            .arg(ttl_ms)
            .get_packed_command(),
    );
    prelude::arm(bytes, 3);
}

/// This thread's wait ends in a hold on node `node` of `source`, being
/// handed to the watchdog: the wait's field, when an entry went out, to be
/// deleted by the write that records the hold (and not again when the wait
/// ends).
pub(crate) fn hand_over(source: &Source, node: NodeId) -> Option<Vec<u8>> {
    if !prelude::hand_over(source, node) {
        return None;
    }
    FIELD.try_with(|f| f.borrow().clone()).ok().flatten()
}

/// Ends this thread's recorded wait: its field when an entry of it went
/// out (and must be deleted).
pub(crate) fn end() -> Option<Vec<u8>> {
    let sent = prelude::release();
    let field = FIELD.try_with(|f| f.borrow_mut().take()).ok().flatten();
    field.filter(|_| sent)
}
