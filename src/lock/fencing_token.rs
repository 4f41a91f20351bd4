//! [`FencingToken`]: the number every grant of a fenced lock carries.

use std::fmt;

/// A fencing token: the number a fenced lock's grant drew from the counter
/// `redisson_lock_token:{name}` (Redisson's `RFencedLock`). Every grant of
/// the lock, re-entries included, draws a larger one, so storage that keeps
/// the newest token it accepted can refuse a writer whose lease ran out.
///
/// The counter never expires (as in Redisson) and lives as long as Redis
/// keeps it: a restart without persistence, or a failover that loses the
/// latest `INCR`, can hand out a token again.
///
/// Tokens compare as numbers; [`FencingToken::get`] gives the number to
/// store next to your data, [`FencingToken::new`] makes one back.
///
/// # Examples
///
/// ```no_run
/// use redguard::FencedWrite;
///
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let guard = client.fenced_lock("reports").lock()?;
/// let token = guard.fencing_token().expect("a fenced lock's grant has a token");
/// match client.fenced_set("reports:latest", b"v2", token)? {
///     FencedWrite::Written => {}
///     FencedWrite::Rejected { last_token } => {
///         // Our lease ran out and a holder with `last_token` wrote
///         // meanwhile: our write was refused, nothing was overwritten.
///     }
/// }
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token numbered `n` (for tokens read back from storage).
    pub const fn new(n: u64) -> FencingToken {
        FencingToken(n)
    }

    /// The token's number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for FencingToken {
    fn from(n: u64) -> FencingToken {
        FencingToken(n)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::FencingToken;

    #[test]
    fn a_token_is_its_number() {
        for n in [1, 7, u64::MAX] {
            let token = FencingToken::from(n);
            assert_eq!(token, FencingToken::new(n));
            assert_eq!(token.get(), n);
            assert_eq!(token.to_string(), n.to_string());
        }
        assert!(FencingToken::new(2) > FencingToken::new(1));
    }
}
