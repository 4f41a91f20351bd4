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
    // No lock names without `metrics_lock_names(true)`.
    assert!(!text.contains("metrics:job"), "{text}");
}
