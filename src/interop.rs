//! Settings for deployments shared with Redisson (Java) clients: how unlock
//! messages reach Java waiters on a Cluster ([`ClassicPublish`]) and how much
//! clock skew the lease ends of expiring permits tolerate
//! ([`Builder::permit_clock_skew`]). See the README's "Mixing with Redisson
//! (Java)".

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::config::Builder;
use crate::error::{Error, Result};

/// Largest permit clock skew: a day, far above any clock that is kept at all.
const MAX_PERMIT_CLOCK_SKEW: Duration = Duration::from_secs(24 * 3600);

/// When the scripts that wake waiters (unlocks, releases, a latch reaching
/// zero) send a classic `PUBLISH` on a Redis Cluster, besides `SPUBLISH`.
/// Set with [`Builder::classic_publish`]; outside a Cluster every wake-up is
/// a classic `PUBLISH` whatever this says.
///
/// A Cluster forwards every classic `PUBLISH` to every node over its bus,
/// which costs more than the rest of an unlock; `SPUBLISH` stays on the
/// key's shard, where redguard's waiters and Redisson's since 3.22
/// (`shardedSubscriptionMode` `AUTO` on Redis 7) listen.
///
/// # Examples
///
/// ```no_run
/// use redguard::ClassicPublish;
/// // Java waiters without sharded pub/sub share these locks.
/// let client = redguard::Client::builder()
///     .cluster(["redis://10.0.0.1:7000"])
///     .classic_publish(ClassicPublish::Always)
///     .build()?;
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ClassicPublish {
    /// The default: `PUBLISH` only when the master of the channel's slot
    /// counts a classic subscriber of the channel (`PUBSUB NUMSUB`), or
    /// when the server has no sharded pub/sub (Redis < 7). A classic
    /// subscriber on a *replica* (Redisson's `subscriptionMode = SLAVE`
    /// without sharded pub/sub) is not counted there and hears nothing: its
    /// lock waiters wait out the lease, its `RSemaphore.acquire()` and
    /// `RCountDownLatch.await()` without a timeout hang.
    #[default]
    Auto,
    /// `PUBLISH` on every wake-up, listened to or not, besides `SPUBLISH`:
    /// every classic subscriber hears it, on any node. Costs a cluster-wide
    /// broadcast per wake-up (BENCHMARKS.md, "Cluster").
    Always,
}

impl ClassicPublish {
    /// The setting's name as the CLI spells it: `"auto"` or `"always"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassicPublish::Auto => "auto",
            ClassicPublish::Always => "always",
        }
    }
}

impl fmt::Display for ClassicPublish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClassicPublish {
    type Err = Error;

    /// Parses `"auto"` or `"always"` (any case).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for anything else.
    fn from_str(s: &str) -> Result<ClassicPublish> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ClassicPublish::Auto),
            "always" => Ok(ClassicPublish::Always),
            other => Err(Error::invalid(format!(
                "classic publish {other:?} is neither \"auto\" nor \"always\""
            ))),
        }
    }
}

/// The settings of this module, kept by the [`Builder`] and its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Interop {
    pub(crate) classic_publish: ClassicPublish,
    pub(crate) permit_clock_skew: Duration,
}

impl Interop {
    /// Checks the bounds the setters document.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.permit_clock_skew > MAX_PERMIT_CLOCK_SKEW {
            return Err(Error::invalid(format!(
                "permit clock skew {:?} is above {MAX_PERMIT_CLOCK_SKEW:?}",
                self.permit_clock_skew
            )));
        }
        Ok(())
    }
}

impl Builder {
    /// Whether wake-ups on a Redis Cluster also send a classic `PUBLISH`
    /// when the slot's master counts no classic listener. Default
    /// [`ClassicPublish::Auto`]. Set [`ClassicPublish::Always`] when Java
    /// clients without sharded pub/sub (Redisson before 3.22,
    /// `shardedSubscriptionMode = OFF`, Redis 6) may wait on these names with
    /// `subscriptionMode = SLAVE` (Redisson's default), so that they hear
    /// unlocks, releases and latches reaching zero. No effect outside a
    /// Cluster, where the classic message is always sent.
    pub fn classic_publish(mut self, when: ClassicPublish) -> Builder {
        self.interop.classic_publish = when;
        self
    }

    /// The largest clock skew the lease ends of expiring permits
    /// ([`Client::expiring_semaphore`](crate::Client::expiring_semaphore))
    /// tolerate between the Redis server and other clients of the same
    /// semaphores. Default 0; at most 1 day.
    ///
    /// redguard stamps lease ends with the server's clock (`TIME`); Redisson
    /// stamps them with its own `System.currentTimeMillis()`. With a skew
    /// `s`, this client stamps its permits' lease ends `s` later than their
    /// leases (so a client whose clock runs up to `s` ahead does not take
    /// them back early) and takes back a permit only `s` after its stamped
    /// end (so a permit stamped by a clock up to `s` behind is not taken
    /// back early). The holder's own lease, as
    /// [`PermitGuard`](crate::PermitGuard) reports it, is unchanged. Cost:
    /// a permit whose holder died comes back up to `2 × s` later. Set it to
    /// the bound your clock synchronisation keeps between the Redis server
    /// and every Java client when Redisson's `RPermitExpirableSemaphore`
    /// shares these names; leave it at 0 otherwise.
    pub fn permit_clock_skew(mut self, skew: Duration) -> Builder {
        self.interop.permit_clock_skew = skew;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for p in [ClassicPublish::Auto, ClassicPublish::Always] {
            assert_eq!(p.to_string().parse::<ClassicPublish>().unwrap(), p);
        }
        assert_eq!(
            " ALWAYS ".parse::<ClassicPublish>().unwrap(),
            ClassicPublish::Always
        );
        assert!(matches!(
            "sometimes".parse::<ClassicPublish>(),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(ClassicPublish::default(), ClassicPublish::Auto);
    }

    #[test]
    fn skew_bounds() {
        let skew = |d| Interop {
            permit_clock_skew: d,
            ..Interop::default()
        };
        assert!(skew(Duration::ZERO).validate().is_ok());
        assert!(skew(MAX_PERMIT_CLOCK_SKEW).validate().is_ok());
        assert!(skew(Duration::MAX).validate().is_err());
    }
}
