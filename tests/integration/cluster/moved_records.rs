//! A held lock whose slot moves to another master takes its hold's entry
//! in the holder record with it: `inspect` (what `status` and `list`
//! print) finds the record on the slot's new owner within a renewal round
//! and the record pace, and the record on the old master no longer names
//! the hold. Before, the entry stayed on the old master for the rest of
//! the hold and `status` said "no record".

use std::time::Duration;

use super::{builder, name_on, slot};
use crate::support::{RedisCluster, wait_until};

/// The client's record key on master `master` that holds `field`, if any.
fn record_with(bed: &RedisCluster, master: usize, client: &str, field: &str) -> Option<String> {
    (0..50)
        .map(|n| match n {
            0 => format!("redguard:client:{{{client}}}"),
            n => format!("redguard:client:{{{client}:{n}}}"),
        })
        .filter(|k| bed.master_of_slot(slot(k.as_bytes())) == master)
        .find(|k| {
            bed.node(master)
                .cmd::<bool>("HEXISTS", &[k.as_bytes(), field.as_bytes()])
        })
}

pub(super) fn records_follow_a_moved_slot(bed: &RedisCluster) {
    let masters = bed.masters();
    let (from, to) = (masters[0], masters[1]);
    let client = builder(&bed.url())
        .program("moved-records")
        .build()
        .unwrap();
    let name = name_on(bed, from, "moved-record");
    let guard = client.lock(&name).lock().unwrap();
    let field = format!("hold:{}|{name}", guard.holder_id());
    let id = client.id().to_string();
    let reader = builder(&bed.url()).build().unwrap();
    let recorded = |reader: &redguard::Client| {
        reader
            .lock(&name)
            .inspect()
            .ok()
            .and_then(|info| info.record_of(guard.holder_id()).map(|r| r.program.clone()))
            .is_some_and(|p| p == "moved-records")
    };
    assert!(
        wait_until(Duration::from_secs(3), || recorded(&reader)),
        "no record before the move"
    );
    assert!(record_with(bed, from, &id, &field).is_some());

    let moved = slot(name.as_bytes());
    bed.migrate_slot(moved, to);
    // The watchdog learns the move at its next renewal (every 0.5 s), and
    // writes the hold's start on the new master at the record pace (0.5 s).
    assert!(
        wait_until(Duration::from_secs(4), || record_with(bed, to, &id, &field)
            .is_some()),
        "the hold's record entry did not follow its slot to the new master"
    );
    assert!(
        wait_until(Duration::from_secs(2), || recorded(&reader)),
        "inspect finds no record after the move"
    );
    assert!(
        wait_until(Duration::from_secs(2), || record_with(
            bed, from, &id, &field
        )
        .is_none()),
        "the old master's record still names the hold"
    );
    guard.unlock().unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || record_with(bed, to, &id, &field)
            .is_none()),
        "the hold's entry outlived the hold"
    );
    client.shutdown();
}
