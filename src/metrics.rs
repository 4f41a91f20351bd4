//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`, off by default): whatever recorder the program
//! installs (Prometheus, StatsD, ...) gets them. Without the feature every
//! function here is empty and compiles away.
//!
//! | series | type | labels |
//! | --- | --- | --- |
//! | `redguard_acquisitions_total` | counter: holds granted (a latch: waits that saw it open) | `kind` |
//! | `redguard_timeouts_total` | counter: acquisitions given up (busy past the deadline) | `kind` |
//! | `redguard_releases_total` | counter: holds given back (a latch: count-downs) | `kind` |
//! | `redguard_leases_lost_total` | counter | `kind`, `reason` |
//! | `redguard_renewals_total` | counter: lease renewals sent | |
//! | `redguard_renewal_failures_total` | counter: renewals without an answer | |
//! | `redguard_reconnects_total` | counter: broken connections replaced | |
//! | `redguard_wait_seconds` | histogram: time to acquire | `kind` |
//! | `redguard_hold_seconds` | histogram: time held, grant to release | `kind` |
//! | `redguard_held_locks` | gauge | `kind` |
//! | `redguard_waiting_threads` | gauge: threads inside an acquire that found the lock busy | `kind` |
//! | `redguard_pending_renewals` | gauge: leases in the watchdog's schedule | |
//!
//! `kind` is a [`HoldKind`] name (`reentrant`, `fair`, `fenced`, `read`,
//! `write`, `permit`, `once`), or `semaphore` (a plain semaphore's
//! permits) or `latch`. The lock's name is a label (`name`) only with
//! [`Builder::metrics_lock_names`](crate::Builder::metrics_lock_names):
//! names are unbounded, and a series per name can swamp a metrics store.
//!
//! Without lock names, an event builds its series key from static parts:
//! no allocation, one look-up in the recorder.

use std::time::Duration;

use crate::lost::{HoldKind, LossReason};

/// What a metrics event is about: its `kind` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A hold with a lease: a lock of some kind, a permit, a `once` run.
    Hold(HoldKind),
    /// Permits of a plain [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A [`CountDownLatch`](crate::CountDownLatch).
    Latch,
}

impl Kind {
    /// Every kind, in [`Kind::index`] order.
    #[cfg_attr(not(any(test, feature = "metrics")), allow(dead_code))]
    const ALL: [Kind; 9] = [
        Kind::Hold(HoldKind::Reentrant),
        Kind::Hold(HoldKind::Fair),
        Kind::Hold(HoldKind::Fenced),
        Kind::Hold(HoldKind::Read),
        Kind::Hold(HoldKind::Write),
        Kind::Hold(HoldKind::Permit),
        Kind::Hold(HoldKind::Once),
        Kind::Semaphore,
        Kind::Latch,
    ];

    /// The `kind` label's value.
    #[cfg_attr(not(any(test, feature = "metrics")), allow(dead_code))]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Kind::Hold(HoldKind::Reentrant) => "reentrant",
            Kind::Hold(HoldKind::Fair) => "fair",
            Kind::Hold(HoldKind::Fenced) => "fenced",
            Kind::Hold(HoldKind::Read) => "read",
            Kind::Hold(HoldKind::Write) => "write",
            Kind::Hold(HoldKind::Permit) => "permit",
            Kind::Hold(HoldKind::Once) => "once",
            Kind::Semaphore => "semaphore",
            Kind::Latch => "latch",
        }
    }

    /// The position in [`Kind::ALL`].
    #[cfg_attr(not(any(test, feature = "metrics")), allow(dead_code))]
    const fn index(self) -> usize {
        match self {
            Kind::Hold(HoldKind::Reentrant) => 0,
            Kind::Hold(HoldKind::Fair) => 1,
            Kind::Hold(HoldKind::Fenced) => 2,
            Kind::Hold(HoldKind::Read) => 3,
            Kind::Hold(HoldKind::Write) => 4,
            Kind::Hold(HoldKind::Permit) => 5,
            Kind::Hold(HoldKind::Once) => 6,
            Kind::Semaphore => 7,
            Kind::Latch => 8,
        }
    }
}

impl From<HoldKind> for Kind {
    fn from(kind: HoldKind) -> Kind {
        Kind::Hold(kind)
    }
}

/// The labels of one lock event: its kind, and its name when asked for.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(feature = "metrics"),
    allow(dead_code, reason = "read only by the `metrics` feature")
)]
pub(crate) struct Labels<'a> {
    pub(crate) kind: Kind,
    /// `Some` only with `metrics_lock_names(true)`.
    pub(crate) name: Option<&'a [u8]>,
}

#[cfg(feature = "metrics")]
mod imp {
    use super::*;
    use metrics::{
        Counter, Histogram, Key, Label, Level, Metadata, Unit, counter, describe_counter,
        describe_gauge, describe_histogram, gauge, with_recorder,
    };

    /// The `kind` label of each [`Kind`], by [`Kind::index`]: a series key
    /// made of static parts, so that an event allocates nothing.
    static KIND_LABELS: [[Label; 1]; Kind::ALL.len()] = [
        [Label::from_static_parts("kind", Kind::ALL[0].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[1].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[2].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[3].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[4].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[5].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[6].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[7].as_str())],
        [Label::from_static_parts("kind", Kind::ALL[8].as_str())],
    ];

    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The key of series `series` for the event labelled `l`.
    fn key(series: &'static str, l: Labels<'_>) -> Key {
        match l.name {
            None => Key::from_static_parts(series, &KIND_LABELS[l.kind.index()]),
            Some(name) => Key::from_parts(
                series,
                vec![
                    Label::from_static_parts("kind", l.kind.as_str()),
                    Label::new("name", String::from_utf8_lossy(name).into_owned()),
                ],
            ),
        }
    }

    fn count(series: &'static str, l: Labels<'_>) -> Counter {
        with_recorder(|r| r.register_counter(&key(series, l), &METADATA))
    }

    fn histogram(series: &'static str, l: Labels<'_>) -> Histogram {
        with_recorder(|r| r.register_histogram(&key(series, l), &METADATA))
    }

    pub(crate) fn acquired(l: Labels<'_>, wait: Duration) {
        count("redguard_acquisitions_total", l).increment(1);
        histogram("redguard_wait_seconds", l).record(wait.as_secs_f64());
    }

    pub(crate) fn timed_out(l: Labels<'_>) {
        count("redguard_timeouts_total", l).increment(1);
    }

    pub(crate) fn released(l: Labels<'_>, held: Option<Duration>) {
        count("redguard_releases_total", l).increment(1);
        if let Some(held) = held {
            histogram("redguard_hold_seconds", l).record(held.as_secs_f64());
        }
    }

    pub(crate) fn lost(l: Labels<'_>, reason: LossReason) {
        // Rare (a lease lost): built each time.
        let mut labels = vec![
            Label::from_static_parts("kind", l.kind.as_str()),
            Label::from_static_parts("reason", reason.as_str()),
        ];
        if let Some(name) = l.name {
            labels.push(Label::new(
                "name",
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        counter!("redguard_leases_lost_total", labels).increment(1);
    }

    pub(crate) fn renewals(n: u64) {
        counter!("redguard_renewals_total").increment(n);
    }

    pub(crate) fn renewal_failures(n: u64) {
        counter!("redguard_renewal_failures_total").increment(n);
    }

    pub(crate) fn reconnect() {
        counter!("redguard_reconnects_total").increment(1);
    }

    pub(crate) fn held(kind: HoldKind, delta: f64) {
        let key = key(
            "redguard_held_locks",
            Labels {
                kind: kind.into(),
                name: None,
            },
        );
        with_recorder(|r| r.register_gauge(&key, &METADATA)).increment(delta);
    }

    pub(crate) fn waiting(kind: Kind, delta: f64) {
        let key = key("redguard_waiting_threads", Labels { kind, name: None });
        with_recorder(|r| r.register_gauge(&key, &METADATA)).increment(delta);
    }

    pub(crate) fn pending_renewals(n: usize) {
        gauge!("redguard_pending_renewals").set(n as f64);
    }

    /// Describes every series (a recorder turns it into Prometheus's
    /// `# HELP` and `# TYPE` lines, with the unit) and makes the unlabeled
    /// ones exist at 0. Called at each client's start: a recorder
    /// installed before the first client sees it.
    pub(crate) fn register() {
        let counters = [
            (
                "redguard_acquisitions_total",
                "Holds granted, by kind (a latch: waits that saw it open)",
            ),
            (
                "redguard_timeouts_total",
                "Acquisitions given up: still busy at the caller's deadline",
            ),
            (
                "redguard_releases_total",
                "Holds given back by their holder (a latch: count-downs)",
            ),
            (
                "redguard_leases_lost_total",
                "Holds whose lease was lost while held, by reason",
            ),
            (
                "redguard_renewals_total",
                "Lease renewals sent by the watchdog",
            ),
            (
                "redguard_renewal_failures_total",
                "Lease renewals that got no answer",
            ),
            ("redguard_reconnects_total", "Broken connections replaced"),
        ];
        for (name, help) in counters {
            describe_counter!(name, Unit::Count, help);
        }
        describe_histogram!(
            "redguard_wait_seconds",
            Unit::Seconds,
            "Seconds from the acquire call to the grant"
        );
        describe_histogram!(
            "redguard_hold_seconds",
            Unit::Seconds,
            "Seconds a hold was held, from grant to release"
        );
        describe_gauge!("redguard_held_locks", Unit::Count, "Holds held now");
        describe_gauge!(
            "redguard_waiting_threads",
            Unit::Count,
            "Threads inside an acquire that found the lock busy"
        );
        describe_gauge!(
            "redguard_pending_renewals",
            Unit::Count,
            "Leases in the watchdog's schedule"
        );
        counter!("redguard_renewals_total").increment(0);
        counter!("redguard_renewal_failures_total").increment(0);
        counter!("redguard_reconnects_total").increment(0);
        gauge!("redguard_pending_renewals").increment(0.0);
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(
    clippy::missing_const_for_fn,
    reason = "the same signatures as with the feature"
)]
mod imp {
    use super::*;

    pub(crate) fn acquired(_: Labels<'_>, _: Duration) {}
    pub(crate) fn timed_out(_: Labels<'_>) {}
    pub(crate) fn released(_: Labels<'_>, _: Option<Duration>) {}
    pub(crate) fn lost(_: Labels<'_>, _: LossReason) {}
    pub(crate) fn renewals(_: u64) {}
    pub(crate) fn renewal_failures(_: u64) {}
    pub(crate) fn reconnect() {}
    pub(crate) fn held(_: HoldKind, _: f64) {}
    pub(crate) fn waiting(_: Kind, _: f64) {}
    pub(crate) fn pending_renewals(_: usize) {}
    pub(crate) fn register() {}
}

pub(crate) use imp::*;

/// Counts a thread waiting for a busy lock while it lives.
pub(crate) struct Waiting(Option<Kind>);

impl Waiting {
    /// Not waiting yet.
    pub(crate) fn none() -> Waiting {
        Waiting(None)
    }

    /// Counts the thread as waiting for a lock of `kind` (once).
    pub(crate) fn start(&mut self, kind: impl Into<Kind>) {
        let kind = kind.into();
        if self.0.is_none() {
            self.0 = Some(kind);
            waiting(kind, 1.0);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(kind) = self.0 {
            waiting(kind, -1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_listed_in_index_order() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
            if let Kind::Hold(hold) = kind {
                assert_eq!(kind.as_str(), hold.as_str());
            }
        }
    }
}
