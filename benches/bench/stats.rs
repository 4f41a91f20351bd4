//! Statistics computed in the driver (the S1/S2/S3 rows leave theirs to the
//! analyser): nearest-rank percentiles as the protocol defines them.

use serde_json::{Value, json};

/// Median and quartiles of `v` (sorted in place).
pub(crate) fn quartiles(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    json!({"median": q(0.5), "p25": q(0.25), "p75": q(0.75), "min": v[0], "max": v[v.len() - 1], "n": v.len()})
}

/// Nearest-rank percentile `p` (0–100) of sorted samples:
/// `x[ceil(p/100*n)-1]`.
pub(crate) fn pct(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let k = ((p / 100.0 * sorted.len() as f64).ceil() as usize).max(1);
    Some(sorted[k.min(sorted.len()) - 1])
}

/// Nanoseconds as microseconds with one decimal (`null` for none).
pub(crate) fn us(ns: Option<u64>) -> Value {
    ns.map_or(Value::Null, |n| json!((n as f64 / 100.0).round() / 10.0))
}
