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

/// Only a NOSCRIPT reply loads the script and sends the call again: any
/// other error (here WRONGTYPE, a value of another type at the key) is
/// reported after one call.
#[test]
fn only_a_noscript_reply_sends_the_call_again() {
    let ctx = TestContext::new();
    let warm = ctx.client.lock(unique_name("warm"));
    warm.try_lock().unwrap().expect("free").unlock().unwrap();
    let name = unique_name("foreign");
    let _: String = ctx.server.cmd("SET", &[name.as_bytes(), b"x"]);
    let calls = || {
        ctx.server
            .command_calls(&["eval", "evalsha", "script", "script|load"])
    };
    let before = calls();
    let err = ctx.client.lock(&name).try_lock().unwrap_err();
    assert!(matches!(err, redguard::Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        calls() - before,
        1,
        "script calls and loads for one try_lock"
    );
}
