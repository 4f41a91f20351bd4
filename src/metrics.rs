//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`, off by default): whatever recorder the program
//! installs (Prometheus, StatsD, ...) gets them. Without the feature every
//! function here is empty and compiles away.
//!
//! | series | type | labels |
//! | --- | --- | --- |
//! | `redguard_acquisitions_total` | counter | `kind` |
//! | `redguard_timeouts_total` | counter: acquisitions given up (busy past the deadline) | `kind` |
//! | `redguard_releases_total` | counter | `kind` |
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
//! `kind` is a [`HoldKind`] name. The lock's name is a label (`name`) only
//! with [`Builder::metrics_lock_names`](crate::Builder::metrics_lock_names):
//! names are unbounded, and a series per name can swamp a metrics store.

use std::time::Duration;

use crate::lost::{HoldKind, LossReason};

/// The labels of one lock event: its kind, and its name when asked for.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(feature = "metrics"),
    allow(dead_code, reason = "read only by the `metrics` feature")
)]
pub(crate) struct Labels<'a> {
    pub(crate) kind: HoldKind,
    /// `Some` only with `metrics_lock_names(true)`.
    pub(crate) name: Option<&'a [u8]>,
}

#[cfg(feature = "metrics")]
mod imp {
    use super::*;
    use metrics::{
        Label, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
        histogram,
    };

    fn labels(l: Labels<'_>) -> Vec<Label> {
        let mut out = vec![Label::new("kind", l.kind.as_str())];
        if let Some(name) = l.name {
            out.push(Label::new(
                "name",
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        out
    }

    pub(crate) fn acquired(l: Labels<'_>, wait: Duration) {
        counter!("redguard_acquisitions_total", labels(l)).increment(1);
        histogram!("redguard_wait_seconds", labels(l)).record(wait.as_secs_f64());
    }

    pub(crate) fn timed_out(l: Labels<'_>) {
        counter!("redguard_timeouts_total", labels(l)).increment(1);
    }

    pub(crate) fn released(l: Labels<'_>, held: Duration) {
        counter!("redguard_releases_total", labels(l)).increment(1);
        histogram!("redguard_hold_seconds", labels(l)).record(held.as_secs_f64());
    }

    pub(crate) fn lost(l: Labels<'_>, reason: LossReason) {
        let mut labels = labels(l);
        labels.push(Label::new("reason", reason.as_str()));
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
        gauge!("redguard_held_locks", "kind" => kind.as_str()).increment(delta);
    }

    pub(crate) fn waiting(kind: HoldKind, delta: f64) {
        gauge!("redguard_waiting_threads", "kind" => kind.as_str()).increment(delta);
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
            ("redguard_acquisitions_total", "Holds granted, by kind"),
            (
                "redguard_timeouts_total",
                "Acquisitions given up: still busy at the caller's deadline",
            ),
            ("redguard_releases_total", "Holds released by their holder"),
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
            "Time from the acquire call to the grant"
        );
        describe_histogram!(
            "redguard_hold_seconds",
            Unit::Seconds,
            "Time a hold was held, from grant to release"
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
    pub(crate) fn released(_: Labels<'_>, _: Duration) {}
    pub(crate) fn lost(_: Labels<'_>, _: LossReason) {}
    pub(crate) fn renewals(_: u64) {}
    pub(crate) fn renewal_failures(_: u64) {}
    pub(crate) fn reconnect() {}
    pub(crate) fn held(_: HoldKind, _: f64) {}
    pub(crate) fn waiting(_: HoldKind, _: f64) {}
    pub(crate) fn pending_renewals(_: usize) {}
    pub(crate) fn register() {}
}

pub(crate) use imp::*;

/// Counts a thread waiting for a busy lock while it lives.
pub(crate) struct Waiting(Option<HoldKind>);

impl Waiting {
    /// Not waiting yet.
    pub(crate) fn none() -> Waiting {
        Waiting(None)
    }

    /// Counts the thread as waiting for a lock of `kind` (once).
    pub(crate) fn start(&mut self, kind: HoldKind) {
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
