//! [`RedLock`]: the Redis distlock ("Redlock") algorithm over independent
//! masters, built on one [`Lock`] per master.

use std::fmt;
use std::marker::PhantomData;

use crate::holder::NotSend;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::duration_text::Human;
use crate::error::{Error, Result};
use crate::lease::{clock_drift, lease_ms};
use crate::lock::acquire::acquire_methods;
use crate::lock::{Lock, LockGuard};
use crate::multi::members::{Held, Member, canonical, check_members};
use crate::retry::pause_until;

/// A lock over N independent Redis masters that holds when a majority of
/// them grant it: the Redis "Redlock" algorithm (Redisson's
/// `RedissonRedLock`).
///
/// Make one [`Lock`] per master, each from its own [`Client`](crate::Client)
/// (usually the same name on every master), and pass them to
/// [`RedLock::new`]. The quorum is N/2 + 1: 2 of 3, 3 of 5.
///
/// # The algorithm
///
/// One *round*:
///
/// 1. note the time t1 (monotonic clock);
/// 2. make one acquisition attempt on each master, one after another on the
///    calling thread (a holder id is per client and thread), each bounded
///    by its client's timeouts: a master that is down or hangs costs at
///    most its per-master budget (below), never more;
/// 3. note t2; the round succeeds when at least a quorum granted the lock
///    **and** the validity `lease − (t2 − t1) − drift` is positive, where
///    `drift = lease × 1 % + 2 ms` allows for clock-rate differences;
/// 4. otherwise release the lock on **every** master, including those whose
///    reply was lost (the script may have run there).
///
/// A failed round is retried after a random pause (default 50–250 ms,
/// [`RedLock::retry_delay`]) while the wait budget lasts, so that contenders
/// starting together do not keep splitting the votes. When fewer than a
/// quorum of masters *answer* at all (granted or busy), the lock cannot be
/// decided and the call fails at once with the first master's error.
///
/// The lease is the shortest lease of the locks (their explicit lease, or
/// their client's watchdog timeout). Locks without an explicit lease are
/// renewed by the watchdog on every master that granted them; the guard is
/// lost once fewer than a quorum of those leases are known valid
/// ([`RedLockGuard::check`]). [`RedLockGuard::validity`] says how long the
/// lock is known to be safe.
///
/// # Per-master timeouts
///
/// Waiting for a dead or frozen master must cost little compared with the
/// lease (the spec suggests 5–50 ms for a 10 s lease). Each attempt is
/// bounded by its client's [`Builder::connect_timeout`] and
/// [`Builder::response_timeout`]: a new connection to a frozen master costs
/// up to twice the connect timeout (the connection set-up sends two
/// commands, each waiting up to it), the script up to the response timeout,
/// so one master costs at most 2 × connect + response timeout; a master
/// that refuses connections costs next to nothing. (An attempt whose reply
/// is lost is undone in the background, off the round's clock.) Every
/// acquisition checks that a whole round, with every master at that bound,
/// fits in half the lease, and refuses the call with
/// [`Error::InvalidArgument`] otherwise. The client defaults (3 s each) do
/// not fit a 30 s lease over 3 masters: build the masters' clients with
/// short timeouts.
///
/// ```no_run
/// use std::time::Duration;
///
/// let masters = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
/// let mut locks = Vec::new();
/// for url in masters {
///     let client = redguard::Client::builder()
///         .url(url)
///         .connect_timeout(Duration::from_millis(50))
///         .response_timeout(Duration::from_millis(50))
///         .build()?;
///     locks.push(client.lock("invoices:run"));
/// }
/// let lock = redguard::RedLock::new(locks);
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
///     // The lock is safe for guard.validity() at most: check before acting.
///     guard.check()?;
///     // ... work ...
///     guard.unlock()?;
/// }
/// # Ok::<(), redguard::Error>(())
/// ```
///
/// # When RedLock helps, and when it does not
///
/// RedLock buys **availability**: the lock survives the crash or partition
/// of a minority of masters, where a single master is a single point of
/// failure and a master with asynchronously replicated failover can lose a
/// granted lock. It keeps mutual exclusion under the model of the spec:
/// bounded network delay, bounded process pauses and clocks that advance at
/// about the same rate.
///
/// It does **not** protect against what a time-based lease cannot see:
///
/// * **Process pauses.** A holder paused (GC, swapping, `SIGSTOP`, a
///   stalled VM) past its validity resumes believing it holds the lock while
///   another client holds it. Checking [`RedLockGuard::validity`] before
///   acting narrows the window but cannot close it: the pause can fall
///   between the check and the write.
/// * **Clock jumps on the masters.** Keys expire by each master's clock; an
///   operator or NTP step that moves it forward expires the key early and
///   lets another client reach a quorum. (The client side measures validity
///   with the monotonic clock, so the client's wall clock does not matter.)
/// * **Masters restarted without persistence.** A master that restarts
///   empty while the lock is held forgets its vote; another client can then
///   reach a quorum while the first still holds it (reliability case G7).
///   Keep a restarted master down for longer than the longest lease
///   ("delayed restarts"), or run the masters with `appendfsync always`.
/// * **Delayed writes.** A request sent while the lock was valid can reach
///   the protected resource after it expired.
///
/// When correctness (not just efficiency: avoiding doing work twice)
/// depends on the lock, let the protected resource reject stale holders:
/// use **fencing tokens**, a number that grows with every grant, which the
/// resource compares with the last one it saw. RedLock cannot make such a
/// number across independent masters; a single-server lock that issues
/// fencing tokens, on a server with persistence, is the safer choice.
/// Redisson itself deprecates `RedissonRedLock` for these reasons.
///
/// References:
///
/// * Redis documentation, "Distributed Locks with Redis":
///   <https://redis.io/docs/latest/develop/clients/patterns/distributed-locks/>
/// * Martin Kleppmann, "How to do distributed locking", 2016-02-08:
///   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>
/// * Salvatore Sanfilippo (antirez), "Is Redlock safe?", 2016:
///   <http://antirez.com/news/101>
///
/// [`Builder::connect_timeout`]: crate::Builder::connect_timeout
/// [`Builder::response_timeout`]: crate::Builder::response_timeout
#[derive(Clone)]
#[must_use = "a handle acquires nothing by itself: call `lock()` or `try_lock()` on it"]
pub struct RedLock {
    members: Vec<Member>,
    retry_min: Duration,
    retry_max: Duration,
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field(
                "locks",
                &self.members.iter().map(Member::label).collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum())
            .field("retry_delay", &(self.retry_min..=self.retry_max))
            .finish()
    }
}

/// The outcome of one round.
enum Round {
    /// A quorum granted the lock in time: the granted holds, and when the
    /// round started.
    Won(Held, Instant),
    /// No quorum in time; every grant was given back. `answered` masters
    /// replied (granted or busy); the others failed with `errors`.
    Failed {
        answered: usize,
        errors: Vec<(String, Error)>,
    },
}

impl RedLock {
    /// Default shortest pause between two rounds: 50 ms.
    const DEFAULT_RETRY_DELAY_MIN: Duration = Duration::from_millis(50);
    /// Default longest pause between two rounds: 250 ms.
    const DEFAULT_RETRY_DELAY_MAX: Duration = Duration::from_millis(250);

    /// A RedLock over `locks`, one per independent master. Cheap: no I/O.
    /// The masters are tried in canonical order (sorted by server, then
    /// name), the same in every process, which makes split votes between
    /// contenders rarer. The set and the clients' timeouts are checked when
    /// the lock is acquired.
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> RedLock {
        RedLock {
            members: canonical(locks),
            retry_min: Self::DEFAULT_RETRY_DELAY_MIN,
            retry_max: Self::DEFAULT_RETRY_DELAY_MAX,
        }
    }

    /// The locks, one per master, in canonical order.
    pub fn locks(&self) -> impl ExactSizeIterator<Item = &Lock> {
        self.members.iter().map(|m| &m.lock)
    }

    /// How many masters must grant the lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The lease on which validity is computed: the shortest lease of the
    /// locks (an explicit lease, or the client's watchdog timeout).
    /// `None` for a RedLock over no locks.
    pub fn lease(&self) -> Option<Duration> {
        self.members
            .iter()
            .map(|m| {
                m.lock
                    .lease()
                    .unwrap_or_else(|| m.lock.client().watchdog_timeout())
            })
            .min()
    }

    /// The same RedLock with a fixed `lease` on every master (see
    /// [`Lock::with_lease`]): not renewed; the guard's validity runs out
    /// after at most `lease − drift`.
    pub fn with_lease(&self, lease: Duration) -> RedLock {
        RedLock {
            members: self
                .members
                .iter()
                .map(|m| Member {
                    lock: m.lock.with_lease(lease),
                    server: m.server.clone(),
                })
                .collect(),
            ..self.clone()
        }
    }

    /// Sets the range of the random pause between two rounds (uniform in
    /// `min..=max`). Default 50–250 ms. The pause never extends a call past
    /// its deadline. A range with `min > max` makes acquisitions fail with
    /// [`Error::InvalidArgument`].
    pub fn retry_delay(mut self, min: Duration, max: Duration) -> RedLock {
        self.retry_min = min;
        self.retry_max = max;
        self
    }

    acquire_methods! {
        guard: RedLockGuard,
        setup: "# let masters: Vec<redguard::Client> = Vec::new();",
        handle: "redguard::RedLock::new(masters.iter().map(|m| m.lock(\"invoices:run\")))",
        errors: "[`Error::InvalidArgument`] for an empty set, a master named twice, a \
                 bad name, lease or retry range, or client timeouts too long for the \
                 lease (see the type's docs); [`Error::Shutdown`] when a client was \
                 shut down; when fewer than a quorum of masters answer in a round, the \
                 first master's error (connection, timeout, [`Error::WrongType`], \
                 server errors). Each round tries every master without waiting; a \
                 round without a quorum is retried after a random pause while the \
                 deadline allows (`try_lock` makes one round). When no round wins, \
                 the lock is held on no master.",
    }

    /// Checks the set, the retry range and the clients' timeouts; returns
    /// the lease.
    fn validate(&self) -> Result<Duration> {
        check_members(&self.members, "RedLock")?;
        for (i, a) in self.members.iter().enumerate() {
            for b in &self.members[i + 1..] {
                if a.lock.client().server() == b.lock.client().server() {
                    return Err(Error::invalid(format!(
                        "RedLock needs independent masters, but {} and {} are on the same server",
                        a.label(),
                        b.label()
                    )));
                }
            }
        }
        if self.retry_min > self.retry_max {
            return Err(Error::invalid(format!(
                "RedLock retry delay range {} ..= {} is empty",
                Human(self.retry_min),
                Human(self.retry_max)
            )));
        }
        let lease = self
            .lease()
            .ok_or_else(|| Error::invalid("RedLock over no locks"))?;
        lease_ms(lease)?;
        let worst = worst_round(self.members.iter().map(|m| {
            let config = m.lock.client().config();
            (config.connect_timeout, config.response_timeout)
        }));
        if worst > lease / 2 {
            return Err(Error::invalid(format!(
                "RedLock: one round may take {} (2 x connect + response timeout per \
                 master), more than half the lease {}; build the masters' clients with \
                 shorter timeouts (Builder::connect_timeout, Builder::response_timeout) or use a \
                 longer lease",
                Human(worst),
                Human(lease)
            )));
        }
        Ok(lease)
    }

    /// The one acquire path: rounds until one wins or the deadline passes.
    fn acquire(&self, deadline: Option<Instant>) -> Result<Option<RedLockGuard>> {
        let lease = self.validate()?;
        let quorum = self.quorum();
        // Bounded by the deadline: every failed round is followed by a
        // pause that consumes the budget, or ends the call.
        loop {
            match self.round(lease, quorum)? {
                Round::Won(guards, started) => {
                    return Ok(Some(RedLockGuard {
                        red: self.clone(),
                        guards,
                        quorum,
                        acquired_at: started,
                        _not_send: PhantomData,
                    }));
                }
                Round::Failed { answered, errors } if answered < quorum => {
                    log::warn!(
                        "redguard: RedLock: only {answered} of {} masters answered: {}",
                        self.members.len(),
                        errors
                            .iter()
                            .map(|(label, e)| format!("{label}: {e}"))
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                    return Err(errors.into_iter().next().map_or_else(
                        || Error::Protocol("RedLock round failed without an error".into()),
                        |(_, e)| e,
                    ));
                }
                Round::Failed { .. } => {}
            }
            let now = Instant::now();
            let mut resume = now + retry_pause(&mut rand::rng(), self.retry_min, self.retry_max);
            if let Some(deadline) = deadline {
                if deadline <= now {
                    return Ok(None);
                }
                resume = resume.min(deadline);
            }
            pause_until(resume);
        }
    }

    /// One round of the algorithm (see the type's docs).
    fn round(&self, lease: Duration, quorum: usize) -> Result<Round> {
        let started = Instant::now();
        let mut granted = Held::default();
        let mut answered = 0;
        let mut errors = Vec::new();
        for member in &self.members {
            match member.lock.try_lock() {
                Ok(Some(guard)) => {
                    answered += 1;
                    granted.push(guard);
                }
                Ok(None) => answered += 1,
                Err(e) if matches!(e, Error::InvalidArgument(_) | Error::Shutdown) => {
                    drop(granted);
                    return Err(e);
                }
                // The attempt already undid a grant whose reply was lost.
                Err(e) => errors.push((member.label(), e)),
            }
        }
        let elapsed = started.elapsed();
        if granted.len() >= quorum && round_validity(lease, elapsed).is_some() {
            return Ok(Round::Won(granted, started));
        }
        if granted.len() >= quorum {
            log::debug!(
                "redguard: RedLock round took {elapsed:?}, no validity left of the lease {lease:?}"
            );
        }
        drop(granted);
        Ok(Round::Failed { answered, errors })
    }
}

/// The validity of a round that took `elapsed`: `lease − elapsed − drift`
/// with `drift = lease × 1 % + 2 ms`; `None` when that is not positive.
fn round_validity(lease: Duration, elapsed: Duration) -> Option<Duration> {
    lease
        .checked_sub(elapsed)?
        .checked_sub(clock_drift(lease))
        .filter(|v| !v.is_zero())
}

/// The longest one round can take when every master answers at its
/// timeouts: per master, a new connection (whose set-up pipeline of two
/// commands may wait the connect timeout twice) plus the script (the
/// response timeout).
fn worst_round(timeouts: impl Iterator<Item = (Duration, Duration)>) -> Duration {
    timeouts
        .map(|(connect, response)| connect.saturating_mul(2).saturating_add(response))
        .fold(Duration::ZERO, Duration::saturating_add)
}

/// A pause uniform in `min..=max`.
fn retry_pause(rng: &mut impl Rng, min: Duration, max: Duration) -> Duration {
    if min >= max {
        return min;
    }
    rng.random_range(min..=max)
}

/// A [`RedLock`] held on a quorum of masters; dropping it releases every
/// master.
///
/// Dropping is best effort: each release is bounded by its client's
/// timeouts and its failure logged; the leases are the backstop. Call
/// [`RedLockGuard::unlock`] to see the failures. `!Send`, like
/// [`LockGuard`].
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// let client = redguard::Client::open("redis://127.0.0.1/").unwrap();
/// let redlock = redguard::RedLock::new([client.lock("x")]);
/// let guard = redlock.lock().unwrap();
/// assert_send(guard);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RedLockGuard {
    red: RedLock,
    /// The holds on the masters that granted the lock, in canonical order.
    guards: Held,
    quorum: usize,
    acquired_at: Instant,
    _not_send: NotSend,
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("red_lock", &self.red)
            .field("granted", &self.guards.len())
            .field("validity", &self.validity())
            .finish()
    }
}

impl RedLockGuard {
    /// The RedLock this guard holds.
    pub fn red_lock(&self) -> &RedLock {
        &self.red
    }

    /// The holds on the masters that granted the lock (at least a quorum),
    /// in canonical order.
    pub fn guards(&self) -> &[LockGuard] {
        self.guards.guards()
    }

    /// When the round that acquired the lock started (t1 of the algorithm).
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// How much longer the lock is known to be safe on this process's
    /// (monotonic) clock: the time until fewer than a quorum of the
    /// masters' leases are known valid. Each master's lease counts from
    /// the send time of its last successful acquire or renewal, minus the
    /// drift, so right after acquisition this is at least
    /// `lease − elapsed − drift` of the algorithm. Zero once lost.
    pub fn validity(&self) -> Duration {
        let mut left: Vec<Duration> = self
            .guards
            .guards()
            .iter()
            .map(LockGuard::valid_for)
            .collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        left.get(self.quorum - 1).copied().unwrap_or(Duration::ZERO)
    }

    /// `true` when fewer than a quorum of the masters' leases are known
    /// valid: renewals found the lock gone or taken, or could not reach
    /// enough masters before the leases ran out.
    pub fn is_lost(&self) -> bool {
        self.guards.guards().iter().filter(|g| !g.is_lost()).count() < self.quorum
    }

    /// `Ok(())` while a quorum of the masters' leases is known valid.
    /// Purely local: no round trip.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] (naming the lock of the first master) when fewer
    /// than a quorum of the leases are known valid.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::lost(self.name()));
        }
        Ok(())
    }

    /// Sets the lease to `lease` from now on every master that granted the
    /// lock (see [`LockGuard::extend`]); succeeds when a quorum extended it
    /// with validity left, as an acquisition round does. Meant for
    /// RedLocks with a fixed lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero or too long lease;
    /// [`Error::LockLost`] when fewer than a quorum extended it in time.
    pub fn extend(&self, lease: Duration) -> Result<()> {
        lease_ms(lease)?;
        let started = Instant::now();
        let mut extended = 0;
        for guard in self.guards.guards() {
            match guard.extend(lease) {
                Ok(()) => extended += 1,
                Err(e) => log::debug!(
                    "redguard: RedLock: extending {:?} failed: {e}",
                    String::from_utf8_lossy(guard.lock().name()),
                    e = e.chain()
                ),
            }
        }
        if extended >= self.quorum && round_validity(lease, started.elapsed()).is_some() {
            return Ok(());
        }
        Err(Error::lost(self.name()))
    }

    /// The name of the lock on the first master, for errors.
    fn name(&self) -> &[u8] {
        self.red.members.first().map_or(&[][..], |m| m.lock.name())
    }

    /// Releases the lock on every master that granted it, and reports the
    /// outcome. A failure on one master does not stop the others.
    ///
    /// # Errors
    ///
    /// [`Error::Unlock`] listing each master whose release failed, with its
    /// error as [`LockGuard::unlock`] reports it ([`Error::LockLost`],
    /// [`Error::NotHeld`], connection, timeout and server errors): expected
    /// for masters that are down; their keys expire with the lease.
    pub fn unlock(self) -> Result<()> {
        self.guards.unlock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn g5_validity_arithmetic() {
        // Exact for random (lease, elapsed) pairs, in whole microseconds.
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..1000 {
            let lease = Duration::from_micros(rng.random_range(1..=60_000_000));
            let elapsed = Duration::from_micros(rng.random_range(0..=60_000_000));
            let drift = lease / 100 + ms(2);
            let expected = lease
                .as_nanos()
                .checked_sub(elapsed.as_nanos())
                .and_then(|v| v.checked_sub(drift.as_nanos()))
                .filter(|v| *v > 0);
            assert_eq!(
                round_validity(lease, elapsed).map(|v| v.as_nanos()),
                expected,
                "lease {lease:?}, elapsed {elapsed:?}"
            );
        }
        assert_eq!(round_validity(ms(10_000), ms(100)), Some(ms(9_798)));
        // Exactly zero left fails: 1000 − 988 − (10 + 2) = 0.
        assert_eq!(round_validity(ms(1000), ms(988)), None);
        assert_eq!(round_validity(ms(1000), ms(987)), Some(ms(1)));
        assert_eq!(round_validity(ms(1000), ms(5000)), None);
    }

    #[test]
    fn g6_retry_jitter_is_uniform_within_bounds() {
        let (min, max) = (ms(50), ms(250));
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let samples: Vec<f64> = (0..1000)
            .map(|_| retry_pause(&mut rng, min, max))
            .inspect(|d| assert!((min..=max).contains(d), "{d:?}"))
            .map(|d| d.as_secs_f64())
            .collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64;
        let spread = (max - min).as_secs_f64();
        assert!(
            var.sqrt() > 0.2 * spread,
            "std dev {} too small",
            var.sqrt()
        );
        assert!((mean - 0.15).abs() < 0.02, "mean {mean}");
        assert_eq!(retry_pause(&mut rng, ms(7), ms(7)), ms(7));
        assert_eq!(retry_pause(&mut rng, ms(9), ms(7)), ms(9));
    }

    #[test]
    fn worst_round_sums_every_master() {
        let t = [(ms(50), ms(100)); 5];
        assert_eq!(worst_round(t.into_iter()), ms(1000));
        assert_eq!(worst_round(std::iter::empty()), Duration::ZERO);
    }

    #[test]
    fn validation() {
        let quick = |port: u16| {
            crate::client::Client::builder()
                .url(&format!("redis://127.0.0.1:{port}/"))
                .connect_timeout(ms(50))
                .response_timeout(ms(50))
                .build()
                .unwrap()
        };
        let ok = RedLock::new([
            quick(7000).lock("x"),
            quick(7001).lock("x"),
            quick(7002).lock("x"),
        ]);
        assert_eq!(ok.quorum(), 2);
        assert_eq!(ok.lease(), Some(crate::config::DEFAULT_WATCHDOG_TIMEOUT));
        assert!(ok.validate().is_ok());
        assert_eq!(ok.with_lease(ms(900)).lease(), Some(ms(900)));
        // 3 × (2 × 50 + 50) ms = 450 ms > 880 ms / 2.
        assert!(ok.with_lease(ms(900)).validate().is_ok());
        assert!(matches!(
            ok.with_lease(ms(880)).validate(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(ok.retry_delay(ms(5), ms(1)).validate().is_err());

        let defaults =
            |port: u16| crate::client::Client::open(&format!("redis://127.0.0.1:{port}/")).unwrap();
        let slow = RedLock::new([
            defaults(7000).lock("x"),
            defaults(7001).lock("x"),
            defaults(7002).lock("x"),
        ]);
        assert!(matches!(slow.validate(), Err(Error::InvalidArgument(_))));

        let same_server = RedLock::new([quick(7000).lock("x"), quick(7000).lock("y")]);
        assert!(matches!(
            same_server.validate(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(RedLock::new(Vec::new()).validate().is_err());
        assert_eq!(RedLock::new([quick(7000).lock("x")]).quorum(), 1);
        assert_eq!(
            RedLock::new((0..5).map(|i| quick(7000 + i).lock("x"))).quorum(),
            3
        );
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<RedLock>();
    }
}
