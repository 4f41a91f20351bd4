//! Basic acquire / release against a real server.

use crate::support::TestContext;

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
