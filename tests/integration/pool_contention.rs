//! Threads sharing a pool smaller than their number wait for each other's
//! connections and all finish.

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
                    lock.try_lock().unwrap().expect("free").unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(client.stats().pool_connections, 1);
}
