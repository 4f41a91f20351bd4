//! Lock calls send EVALSHA directly and load the script again when the
//! server lost its script cache (restart without persistence, SCRIPT FLUSH).

use crate::support::{TestContext, unique_name};

#[test]
fn lock_and_unlock_survive_a_script_cache_flush() {
    let ctx = TestContext::new();
    let lock = ctx.client.lock(unique_name("flush"));
    lock.try_lock().unwrap().expect("free").unlock().unwrap();
    let _: () = ctx.server.cmd("SCRIPT", &[b"FLUSH"]);
    let guard = lock.try_lock().unwrap().expect("free after the flush");
    assert_eq!(lock.hold_count().unwrap(), 1);
    let _: () = ctx.server.cmd("SCRIPT", &[b"FLUSH"]);
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}
