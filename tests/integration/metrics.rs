//! The `metrics` feature: `examples/metrics.rs` run against a private
//! server prints every series the README names, labelled by kind.

#[allow(
    dead_code,
    reason = "the example's main and helpers are not called here"
)]
#[path = "../../examples/metrics.rs"]
mod example;

use crate::support::TestContext;

#[test]
fn the_example_prints_every_named_series() {
    let ctx = TestContext::new();
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(example::BUCKETS)
        .unwrap()
        .install_recorder()
        .unwrap();
    example::exercise(&ctx.server.url()).unwrap();
    let text = prometheus.render();
    for series in [
        "redguard_acquisitions_total{kind=\"reentrant\"}",
        "redguard_acquisitions_total{kind=\"fair\"}",
        "redguard_acquisitions_total{kind=\"read\"}",
        "redguard_timeouts_total{kind=\"reentrant\"}",
        "redguard_releases_total{kind=\"reentrant\"}",
        "redguard_leases_lost_total{kind=\"reentrant\",reason=\"renewal_refused\"}",
        "redguard_renewals_total",
        "redguard_renewal_failures_total",
        "redguard_reconnects_total",
        "redguard_wait_seconds",
        "redguard_hold_seconds",
        "redguard_held_locks{kind=\"reentrant\"}",
        "redguard_waiting_threads{kind=\"reentrant\"}",
        "redguard_pending_renewals",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    // Every series is described, with its type, and the two histograms
    // are histograms (buckets), which aggregate across instances.
    for name in [
        "redguard_acquisitions_total",
        "redguard_timeouts_total",
        "redguard_releases_total",
        "redguard_leases_lost_total",
        "redguard_renewals_total",
        "redguard_renewal_failures_total",
        "redguard_reconnects_total",
        "redguard_wait_seconds",
        "redguard_hold_seconds",
        "redguard_held_locks",
        "redguard_waiting_threads",
        "redguard_pending_renewals",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
    }
    for name in ["redguard_wait_seconds", "redguard_hold_seconds"] {
        assert!(
            text.contains(&format!("# TYPE {name} histogram")),
            "{name}:\n{text}"
        );
        assert!(
            text.contains(&format!("{name}_bucket{{")),
            "{name}:\n{text}"
        );
    }
    // No lock names without `metrics_lock_names(true)`.
    assert!(!text.contains("metrics:job"), "{text}");
}
