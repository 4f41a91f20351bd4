//! A private server plus a client built with short test timings.

use std::time::Duration;

use super::server::RedisServer;

/// Lease of watchdog-renewed locks in tests (renewed every 300 ms).
pub const TEST_WATCHDOG: Duration = Duration::from_millis(900);
/// Response timeout in tests: short, yet long enough for a loaded 2-core
/// machine running the suite in parallel.
pub const TEST_RESPONSE: Duration = Duration::from_millis(300);

/// A builder for `url` with the test timings: 900 ms watchdog, 300 ms
/// response timeout, 1 s connect timeout, 200 ms poll interval.
pub fn test_builder(url: &str) -> redguard::Builder {
    redguard::Client::builder()
        .url(url)
        .watchdog_timeout(TEST_WATCHDOG)
        .response_timeout(TEST_RESPONSE)
        .connect_timeout(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
}

/// A client for `url` with the test timings.
pub fn test_client(url: &str) -> redguard::Client {
    test_builder(url).build().unwrap()
}

/// A client for `url` for bulk work (thousands of calls from many threads)
/// whose cases assert outcomes, not timings: a 2 s response timeout (and a
/// 6 s watchdog, at least 3 × that), so that a loaded machine's slow reply
/// is not an error there.
pub fn bulk_client(url: &str) -> redguard::Client {
    test_builder(url)
        .response_timeout(Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .unwrap()
}

/// A private server and a client on it.
#[derive(Debug)]
pub struct TestContext {
    /// The server (dropped last).
    pub server: RedisServer,
    /// A client with the test timings.
    pub client: redguard::Client,
}

impl TestContext {
    /// Starts a server and builds a client for it.
    pub fn new() -> TestContext {
        let server = RedisServer::start();
        let client = test_client(&server.url());
        TestContext { server, client }
    }

    /// Another, independent client (another client id) on the same server.
    pub fn other_client(&self) -> redguard::Client {
        test_client(&self.server.url())
    }
}
