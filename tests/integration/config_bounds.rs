//! Every `Duration` and count the crate accepts, at the extremes: the
//! builder answers `InvalidArgument` or makes a client that works; calls
//! answer `InvalidArgument`, wait forever, or work. Never a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use redguard::{Builder, Error};

use crate::support::{RedisServer, test_client, unique_name};

const EXTREMES: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_millis(1),
    Duration::MAX,
];

type Setting = (&'static str, fn(Builder, Duration) -> Builder);

const DURATION_SETTINGS: [Setting; 5] = [
    ("watchdog_timeout", Builder::watchdog_timeout),
    ("response_timeout", Builder::response_timeout),
    ("connect_timeout", Builder::connect_timeout),
    ("poll_interval", Builder::poll_interval),
    ("fair_wait_timeout", Builder::fair_wait_timeout),
];

/// One lock/unlock cycle of each kind on `client`, from several threads at
/// once so that the pool runs out of connections and waits for one (the
/// path that once overflowed `now + connect_timeout`).
fn exercise(client: &redguard::Client) -> Result<(), Error> {
    let name = unique_name("bounds");
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|i| {
                let lock = match i % 2 {
                    0 => client.lock(&name),
                    _ => client.fair_lock(format!("{name}:fair")),
                };
                s.spawn(move || -> Result<(), Error> {
                    if let Some(g) = lock.try_lock_for(Duration::from_secs(5))? {
                        g.unlock()?;
                    }
                    Ok(())
                })
            })
            .collect();
        runs.into_iter()
            .try_for_each(|r| r.join().expect("no panic in a lock cycle"))
    })
}

#[test]
fn i3_every_builder_setting_at_the_extremes_is_refused_or_works() {
    let server = RedisServer::start();
    let url = server.url();
    let base = || Builder::default().url(&url).pool_size(2);
    let mut cases = Vec::new();
    for (what, set) in DURATION_SETTINGS {
        for d in EXTREMES {
            cases.push((format!("{what}({d:?})"), set(base(), d)));
        }
    }
    for n in [0, 1, usize::MAX] {
        cases.push((format!("pool_size({n})"), base().pool_size(n)));
        cases.push((format!("renew_batch({n})"), base().renew_batch(n)));
    }
    let mut built = 0;
    for (label, builder) in cases {
        let outcome = catch_unwind(AssertUnwindSafe(|| match builder.build() {
            Err(Error::InvalidArgument(_)) => None,
            Err(e) => panic!("{label}: build failed with {e:?}, not InvalidArgument"),
            Ok(client) => Some(exercise(&client)),
        }));
        match outcome {
            Err(_) => panic!("{label}: panicked"),
            Ok(None) => {}
            Ok(Some(Ok(()))) => built += 1,
            // A 1 ms response or connect timeout is legal; on a loaded
            // machine a reply may take longer, which must come back as a
            // timeout, nothing worse: an unlock whose reply (and its
            // retry's) did not come within it says so as `ReleasePending`
            // (retried until it goes through or the lease ends).
            Ok(Some(Err(e)))
                if (e.is_timeout() || matches!(e, Error::ReleasePending { .. }))
                    && label.contains("(1ms)") =>
            {
                built += 1;
            }
            Ok(Some(Err(e))) => panic!("{label}: the built client failed: {e:?}"),
        }
    }
    // Accepted: a 1 ms response, connect and poll setting, a pool of 1 and
    // a renew batch of 1; every other extreme is refused.
    assert_eq!(built, 5, "accepted settings");
}

#[test]
fn i3_every_call_duration_at_the_extremes_is_refused_waits_or_works() {
    let server = RedisServer::start();
    let client = test_client(&server.url());
    let lock = client.lock(unique_name("call-bounds"));
    for d in EXTREMES {
        // A wait: any length is legal (MAX means forever; the lock is free).
        let got = lock.try_lock_for(d).unwrap();
        assert!(got.is_some(), "try_lock_for({d:?}) on a free lock");
        drop(got);
        // A lease: refused outside 5 ms ..= 365 days, never a panic.
        match lock.with_lease(d).try_lock() {
            Err(Error::InvalidArgument(_)) => {}
            Ok(Some(g)) => g.unlock().unwrap(),
            other => panic!("with_lease({d:?}): {other:?}"),
        }
        let g = lock.lock().unwrap();
        match g.extend(d) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("extend({d:?}): {other:?}"),
        }
        g.unlock().unwrap();
    }
    let red = redguard::RedLock::new([lock]).retry_delay(Duration::MAX, Duration::MAX);
    assert!(matches!(red.try_lock(), Err(Error::InvalidArgument(_))));
}
