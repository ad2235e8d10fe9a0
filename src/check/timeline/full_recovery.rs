//! Full recovery (Q11): every removed endpoint back (replaced or healed), ready and
//! receiving traffic, and the healthy latency envelope restored.

use super::types::{FaultTimeline, Mark, mark};
use crate::check::facts::Evidence;
use crate::metrics::SecondStats;
use crate::plan::Plan;

/// A second with fewer requests dispatched has no percentile worth judging.
const MIN_SECOND_SAMPLES: u64 = 3;

/// The earliest second `>= from_s` after which every second up to `until_s` with
/// enough samples has p95 TTFT and ITL inside the SLO (ms), if any measured.
pub fn envelope_restored(
    seconds: &[SecondStats],
    from_s: f64,
    until_s: f64,
    ttft_ms: f64,
    itl_ms: f64,
) -> Option<f64> {
    let mut start = None;
    let mut measured = false;
    for s in seconds
        .iter()
        .filter(|s| s.t as f64 + 1.0 > from_s && (s.t as f64) < until_s)
    {
        if s.dispatched < MIN_SECOND_SAMPLES {
            continue;
        }
        let ok = s.ttft_p95.is_none_or(|v| v <= ttft_ms) && s.itl_p95.is_none_or(|v| v <= itl_ms);
        if ok {
            start.get_or_insert((s.t as f64).max(from_s));
            measured |= s.ttft_p95.is_some();
        } else {
            start = None;
            measured = false;
        }
    }
    start.filter(|_| measured)
}

/// When the last removed endpoint serves again and the latency envelope is back.
pub(super) fn full_recovery(
    plan: &Plan,
    ev: &Evidence,
    faults: &[FaultTimeline],
    s: &[SecondStats],
) -> Option<Mark> {
    let removing: Vec<&FaultTimeline> = faults.iter().filter(|f| f.removes).collect();
    if removing.is_empty() {
        return None;
    }
    let serving = removing
        .iter()
        .map(|f| f.replacement.serving.as_ref().map(|m| m.t))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()?;
    let slo = &plan.scenario.slo;
    let from = ev.secs(serving);
    let back = envelope_restored(
        s,
        from,
        ev.secs(ev.load_end()),
        slo.ttft_p95.as_secs_f64() * 1000.0,
        slo.itl_p95.as_secs_f64() * 1000.0,
    )?;
    let t = serving.max(ev.load_start + (back * 1e6) as u64);
    Some(mark(
        t,
        "gateway journal + client latency series",
        format!(
            "{} endpoint(s) back (replaced or healed), ready and receiving traffic; p95 TTFT and ITL inside the SLO from +{:.1}s",
            removing.len(),
            back
        ),
    ))
}
