//! Settings for deployments shared with Redisson (Java) clients: how unlock
//! messages reach Java waiters on a Cluster ([`ClassicPublish`]) and how much
//! clock skew the lease ends of expiring permits tolerate
//! ([`Builder::permit_clock_skew`](crate::Builder::permit_clock_skew)). See docs/REDISSON.md, "Mixing with Redisson
//! (Java)".

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// Largest permit clock skew: a day, far above any clock that is kept at all.
const MAX_PERMIT_CLOCK_SKEW: Duration = Duration::from_secs(24 * 3600);

/// When the scripts that wake waiters (unlocks, releases, a latch reaching
/// zero) send a classic `PUBLISH` on a Redis Cluster, besides `SPUBLISH`.
/// Set with [`Builder::classic_publish`](crate::Builder::classic_publish); outside a Cluster every wake-up is
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

/// The settings of this module, kept by the [`Builder`](crate::Builder) and its config.
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
