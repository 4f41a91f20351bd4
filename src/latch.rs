//! [`CountDownLatch`] (Redisson's `RCountDownLatch`): wait until a count of
//! events, counted down across processes, reaches zero.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::scripts::latch as script;
use crate::wait::{Attempt, Wake, wait_loop};

/// A count-down latch named by a Redis key (Redisson's `RCountDownLatch`):
/// set a count, let workers anywhere count it down, and wait until it
/// reaches zero. Made by [`Client::count_down_latch`]. A cheap handle
/// (`Clone + Send + Sync`).
///
/// * A latch that is not set (never set, or counted down to zero, which
///   deletes it) is open: [`CountDownLatch::wait`] returns at once.
/// * Waiters sleep until the zero message arrives on the latch's channel,
///   which wakes every waiter of every client at once; they re-check the
///   count at least every poll interval in case a message was lost.
/// * Once open, the latch can be set again for another round.
///
/// # Wire layout (Redisson's)
///
/// | key | type | content |
/// | --- | --- | --- |
/// | `name` | string | the count; deleted when it reaches zero |
/// | `redisson_countdownlatch__channel__{name}` | channel | `0` the count reached zero, or the latch was deleted; `1` a new count was set |
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let done = client.count_down_latch("batch:42:workers");
/// done.try_set_count(3)?;
/// // ... each of 3 workers, anywhere, calls `done.count_down()?` ...
/// if done.wait_for(Duration::from_secs(60))? {
///     println!("all workers finished");
/// }
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a handle does nothing by itself: call `count_down()`, `wait()`, ..."]
pub struct CountDownLatch {
    client: Client,
    name: Arc<[u8]>,
    channel: Arc<[u8]>,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &String::from_utf8_lossy(&self.name))
            .finish_non_exhaustive()
    }
}

impl CountDownLatch {
    pub(crate) fn new(client: Client, name: &[u8]) -> CountDownLatch {
        CountDownLatch {
            channel: keys::latch_channel(name).into(),
            name: name.into(),
            client,
        }
    }

    /// The latch's name: the Redis key of its count.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client this handle belongs to.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    fn check(&self) -> Result<()> {
        keys::validate_name(&self.name).map_err(Error::InvalidArgument)?;
        self.client.source().check_latch_name(&self.name)?;
        self.client.check_open()
    }

    /// Sets the count to `count` if the latch is not set (Redisson's
    /// `trySetCount`): `true` when this call set it, `false` when it was
    /// set already (nothing changed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or a count of zero (a latch
    /// at zero is open: there would be nothing to wait for),
    /// [`Error::WrongType`] when the name holds something that is not a
    /// count (left untouched), [`Error::Shutdown`], connection, timeout and
    /// server errors.
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.check()?;
        if count == 0 {
            return Err(Error::invalid(
                "a latch count must be at least 1 (a latch at zero is open)",
            ));
        }
        if count > i64::MAX as u64 {
            return Err(Error::invalid(format!(
                "a latch count of {count} does not fit a Redis integer"
            )));
        }
        self.client.with_conn(&self.name, |conn| {
            script::try_set(
                conn,
                self.client.publish(&self.name),
                &self.name,
                &self.channel,
                count,
            )
        })
    }

    /// Sets the count to `count`, refusing a latch that is set already.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the latch is set already (naming its
    /// count), and as [`CountDownLatch::try_set_count`].
    pub fn set_count(&self, count: u64) -> Result<()> {
        if self.try_set_count(count)? {
            return Ok(());
        }
        let now = self.count()?;
        Err(Error::invalid(format!(
            "latch {:?} is set already (count {now}); wait for it to open or delete it first",
            String::from_utf8_lossy(&self.name)
        )))
    }

    /// Counts down by one (Redisson's `countDown`); at zero the latch opens
    /// (its key is deleted) and every waiter is woken. Returns the count
    /// left. A latch that is not set stays open (0).
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::count`].
    pub fn count_down(&self) -> Result<u64> {
        self.check()?;
        let left = self.client.with_conn(&self.name, |conn| {
            script::count_down(
                conn,
                self.client.publish(&self.name),
                &self.name,
                &self.channel,
            )
        })?;
        // A count-down is a latch's release (no hold time: it was never
        // acquired).
        crate::metrics::released(self.labels(), None);
        Ok(left)
    }

    /// The metrics labels of this latch's events.
    fn labels(&self) -> crate::metrics::Labels<'_> {
        self.client
            .context()
            .labels(crate::metrics::Kind::Latch, &self.name)
    }

    /// The current count (Redisson's `getCount`): 0 when the latch is open.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the name holds something that is not a count, [`Error::Shutdown`],
    /// connection, timeout and server errors.
    pub fn count(&self) -> Result<u64> {
        self.check()?;
        let raw: Option<Vec<u8>> = self.client.with_conn(&self.name, |conn| {
            // A waiting thread's record entry rides on its next read.
            crate::connection::prelude::ride_plain(conn, self.client.source(), &self.name, |conn| {
                // Bounded: another tenant's 20 MB string is not read whole.
                crate::snapshot::counter(conn, &self.name)
            })
        })?;
        match raw {
            None => Ok(0),
            Some(raw) => std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map(|n| n.max(0) as u64)
                .ok_or_else(|| Error::WrongType {
                    key: String::from_utf8_lossy(&self.name).into_owned(),
                }),
        }
    }

    /// Deletes the latch (Redisson's `delete`): it is open afterwards.
    /// `true` when it was set. Every waiter, redguard's or Redisson's, is
    /// woken by the zero message (`0`) and finds it open; Redisson's own
    /// `delete` publishes the new-count message (`1`) instead, on which a
    /// Java `await` keeps sleeping until its timeout (or for ever).
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::count`].
    pub fn delete(&self) -> Result<bool> {
        self.check()?;
        self.client.with_conn(&self.name, |conn| {
            script::delete(
                conn,
                self.client.publish(&self.name),
                &self.name,
                &self.channel,
            )
        })
    }

    /// Waits until the latch is open (Redisson's `await`). Reads that fail
    /// with an error retrying can fix ([`Error::is_transient`]: a Redis
    /// restart, a freeze, a failover) are tried again, with the watchdog's
    /// backoff (10 ms doubling to 500 ms, jittered), for as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] when the client shuts down meanwhile, and the
    /// errors of [`CountDownLatch::count`] that retrying cannot fix
    /// ([`Error::WrongType`], [`Error::Permission`], [`Error::Auth`], ...),
    /// at once.
    pub fn wait(&self) -> Result<()> {
        self.wait_deadline(None).map(|_| ())
    }

    /// Waits at most `timeout` until the latch is open (Redisson's
    /// `await(time, unit)`): `true` when it opened, `false` on timeout. A
    /// timeout too large to represent waits forever. Failed reads are
    /// retried until the timeout, as [`CountDownLatch::wait`] says.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::wait`]; and [`Error::Timeout`] naming the last
    /// failure when the timeout ran out while Redis could not answer.
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_deadline(Instant::now().checked_add(timeout))
    }

    /// Waits until `deadline` at most for the latch to open: `true` when it
    /// opened.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::wait`].
    pub fn wait_until(&self, deadline: Instant) -> Result<bool> {
        self.wait_deadline(Some(deadline))
    }

    /// Waits as [`CountDownLatch::wait_until`] says, counted in the
    /// metrics: a wait that saw the latch open is an acquisition (with its
    /// wait time), one that ran out a timeout.
    fn wait_deadline(&self, deadline: Option<Instant>) -> Result<bool> {
        let started = Instant::now();
        let mut waiting = crate::metrics::Waiting::none();
        let opened = self.wait_open(deadline, &mut waiting);
        drop(waiting);
        match opened {
            Ok(true) => crate::metrics::acquired(self.labels(), started.elapsed()),
            Ok(false) => crate::metrics::timed_out(self.labels()),
            Err(_) => {}
        }
        opened
    }

    /// The wait itself: the engine's loop ([`wait_loop`]) with every
    /// waiter of the channel woken at once. Each attempt reads the count;
    /// the read after registering catches a zero message sent after the
    /// read before it.
    fn wait_open(
        &self,
        deadline: Option<Instant>,
        waiting: &mut crate::metrics::Waiting,
    ) -> Result<bool> {
        let what = (&self.name[..], "latch");
        let opened = wait_loop(
            &self.client,
            &self.channel,
            what,
            deadline,
            Wake::All,
            || {
                let count = self.count()?;
                if count == 0 {
                    return Ok(Attempt::Acquired(()));
                }
                waiting.start(crate::metrics::Kind::Latch);
                Ok(Attempt::Busy(None))
            },
        )?;
        Ok(opened.is_some())
    }
}

/// The count-down latch handle of a client.
impl Client {
    /// A count-down latch named `name` (Redisson's `RCountDownLatch`).
    /// Cheap: no I/O.
    pub fn count_down_latch(&self, name: impl AsRef<[u8]>) -> CountDownLatch {
        CountDownLatch::new(self.clone(), name.as_ref())
    }
}
