//! Threads sharing a pool smaller than their number wait for each other's
//! connections and all finish; their lock calls share one more connection.

use std::time::Duration;

use crate::support::{TestContext, test_builder, unique_name};

#[test]
fn threads_share_a_one_connection_pool() {
    let ctx = TestContext::new();
    let client = test_builder(&ctx.server.url())
        .pool_size(1)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock(unique_name("pool"));
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let guard = lock.try_lock().unwrap().expect("free");
                    // A status call takes the pool's one connection.
                    assert!(lock.is_locked().unwrap());
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The pool's one exclusive connection and the shared one.
    assert_eq!(client.stats().pool_connections, 2);
}
