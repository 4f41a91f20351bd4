//! The `metrics` feature: `examples/metrics.rs` run against a private
//! server prints every series the README names, labelled by kind.

#[allow(
    dead_code,
    reason = "the example's main and helpers are not called here"
)]
#[path = "../../examples/metrics.rs"]
mod example;

use std::time::Duration;

use crate::support::{ChildTest, TestContext, child_env, child_role, say};

/// The example, with the Prometheus recorder installed, in a process of its
/// own: the recorder is process-wide, and the exact counts below would
/// take in the locks of tests running beside it. Prints the scrape, each
/// line after `M `, then `END`.
#[test]
#[ignore = "child process of the_example_prints_every_named_series"]
fn metrics_child() {
    let Some(_) = child_role() else { return };
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(example::BUCKETS)
        .unwrap()
        .install_recorder()
        .unwrap();
    example::exercise(&child_env("RG_URL")).unwrap();
    for line in prometheus.render().lines() {
        say(&format!("M {line}"));
    }
    say("END");
}

#[test]
fn the_example_prints_every_named_series() {
    let ctx = TestContext::new();
    let url = ctx.server.url();
    let mut child = ChildTest::spawn("metrics::metrics_child", "metrics", &[("RG_URL", &url)]);
    child.expect_line("END", Duration::from_secs(60));
    let text: String = child
        .transcript()
        .iter()
        .filter_map(|l| l.strip_prefix("M "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        child.wait_success(Duration::from_secs(10)),
        "the child failed"
    );
    for series in [
        "redguard_leases_lost_total{kind=\"reentrant\",reason=\"renewal_refused\"}",
        "redguard_renewals_total",
        "redguard_renewal_failures_total",
        "redguard_reconnects_total",
        "redguard_held_locks{kind=\"reentrant\"}",
        "redguard_waiting_threads{kind=\"reentrant\"}",
        "redguard_pending_renewals",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    // Every kind is counted: granted, given back, and timed in both
    // histograms. The reentrant lock: three grants (the job, its waiter,
    // the doomed one) and two releases (the doomed one was lost). A latch
    // is never held: a count-down is its release, with no hold time.
    for (kind, grants, releases, holds) in [
        ("reentrant", 3.0, 2.0, Some(2.0)),
        ("fair", 1.0, 1.0, Some(1.0)),
        ("fenced", 1.0, 1.0, Some(1.0)),
        ("read", 1.0, 1.0, Some(1.0)),
        ("write", 1.0, 1.0, Some(1.0)),
        ("semaphore", 1.0, 1.0, Some(1.0)),
        ("permit", 1.0, 1.0, Some(1.0)),
        ("latch", 1.0, 1.0, None),
        ("once", 1.0, 1.0, Some(1.0)),
    ] {
        let of = |series: &str| sample(&text, &format!("{series}{{kind=\"{kind}\"}}"));
        assert_eq!(
            of("redguard_acquisitions_total"),
            Some(grants),
            "{kind}:\n{text}"
        );
        assert_eq!(
            of("redguard_wait_seconds_count"),
            Some(grants),
            "{kind}:\n{text}"
        );
        assert_eq!(
            of("redguard_releases_total"),
            Some(releases),
            "{kind}:\n{text}"
        );
        assert_eq!(of("redguard_hold_seconds_count"), holds, "{kind}:\n{text}");
    }
    // A timeout of each kind that can be busy at a deadline.
    for kind in ["reentrant", "semaphore", "permit", "latch", "once"] {
        assert_eq!(
            sample(
                &text,
                &format!("redguard_timeouts_total{{kind=\"{kind}\"}}")
            ),
            Some(1.0),
            "{kind}:\n{text}"
        );
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
    // Every name with a `_bucket` series has its buckets for every kind.
    assert!(
        text.contains("redguard_wait_seconds_bucket{kind=\"permit\",le=\"0.001\"}"),
        "{text}"
    );
    // No lock names without `metrics_lock_names(true)`.
    assert!(!text.contains("metrics:job"), "{text}");
}

/// The value of the sample `series` (name and labels, as printed) in the
/// scrape `text`; `None` when it is not there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}
