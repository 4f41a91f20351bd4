//! Basic acquire / release against a real server.

use crate::support::{TestContext, ms};

#[test]
fn lock_and_unlock_round_trip() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock("basic");
    let guard = lock.lock().unwrap();
    let text = format!("{guard:?}");
    assert!(
        text.contains("\"basic\"") && text.contains(guard.holder_id().as_str()),
        "the guard's Debug names its lock and holder: {text}"
    );
    assert!(lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 1);
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// Each handle says what kind of lock it is: `is_fair` and `is_fenced`,
/// and its `Debug` names the lock, its kind (a fair lock's wait timeout
/// too) and its lease; a read-write lock's name and `Debug` too.
#[test]
fn handles_say_what_they_are() {
    let ctx = TestContext::new();
    let c = &ctx.client;
    let rw = c.read_write_lock("kinds-rw");
    let handles = [
        (c.lock("kinds-plain"), false, false, "Reentrant"),
        (c.fair_lock("kinds-fair"), true, false, "Fair"),
        (c.fenced_lock("kinds-fenced"), false, true, "Fenced"),
        (rw.read(), false, false, "Read"),
        (rw.write(), false, false, "Write"),
    ];
    for (lock, fair, fenced, kind) in &handles {
        let text = format!("{lock:?}");
        assert_eq!(lock.is_fair(), *fair, "{text}");
        assert_eq!(lock.is_fenced(), *fenced, "{text}");
        assert!(
            text.contains(&format!("kind: {kind}"))
                && text.contains(&*String::from_utf8_lossy(lock.name())),
            "{text}"
        );
    }
    let fair = format!("{:?}", handles[1].0);
    assert!(fair.contains("wait_timeout: "), "{fair}");
    let leased = format!("{:?}", c.lock("kinds-leased").with_lease(ms(1_500)));
    assert!(leased.contains("lease: Some(1.5s)"), "{leased}");
    assert_eq!(rw.name(), b"kinds-rw");
    assert_eq!(
        format!("{:?}", rw.with_lease(ms(2_000))),
        "ReadWriteLock { name: \"kinds-rw\", lease: Some(2s), .. }"
    );
}
