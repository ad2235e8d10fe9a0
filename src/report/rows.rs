//! Table rows shared by the Markdown and HTML reports (raw text: each renderer escapes).

use crate::check::Judgement;

pub const PHASE_HEAD: [&str; 11] = [
    "Phase",
    "kind",
    "req",
    "ok",
    "failed",
    "rejected",
    "offered/s",
    "goodput/s",
    "TTFT p50/p95/p99 ms",
    "ITL p50/p95 ms",
    "E2E p50/p95 ms",
];

pub fn phases(j: &Judgement) -> Vec<Vec<String>> {
    j.phases
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.kind.to_string(),
                p.requests.to_string(),
                p.completed.to_string(),
                p.failed.to_string(),
                p.rejected.to_string(),
                format!("{:.2}", p.offered_rps),
                format!("{:.2}", p.goodput_rps),
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    p.ttft_ms.p50, p.ttft_ms.p95, p.ttft_ms.p99
                ),
                format!("{:.1} / {:.1}", p.itl_ms.p50, p.itl_ms.p95),
                format!("{:.0} / {:.0}", p.e2e_ms.p50, p.e2e_ms.p95),
            ]
        })
        .collect()
}

pub const TIMELINE_HEAD: [&str; 5] = ["t (s)", "after fault", "event", "source", "detail"];

pub fn timeline(j: &Judgement) -> Vec<Vec<String>> {
    j.timeline
        .entries
        .iter()
        .map(|e| {
            vec![
                format!("{:.3}", e.at_s),
                e.after_fault_ms
                    .map(|m| format!("+{m:.0} ms"))
                    .unwrap_or_default(),
                e.event.clone(),
                e.source.clone(),
                e.detail.clone(),
            ]
        })
        .collect()
}
