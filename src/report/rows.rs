//! Table rows shared by the Markdown and HTML reports (raw text: each renderer escapes).

use crate::check::Judgement;

pub const PHASE_HEAD: [&str; 11] = [
    "Phase",
    "kind",
    "req",
    "ok",
    "failed",
    "rejected",
    "offered/s (planned)",
    "goodput/s",
    "TTFT p50/p95/p99 ms",
    "ITL p50/p95 ms",
    "E2E p50/p95 ms",
];

pub fn phases(j: &Judgement) -> Vec<Vec<String>> {
    j.phases
        .iter()
        .map(|p| {
            let load = j.protected_load.phases.iter().find(|l| l.phase == p.name);
            let offered = match load {
                Some(l) => format!(
                    "{:.2} ({:.2}){}",
                    p.offered_rps,
                    l.planned_rps,
                    if l.short { " ⚠ short" } else { "" }
                ),
                None => format!("{:.2}", p.offered_rps),
            };
            vec![
                p.name.clone(),
                p.kind.to_string(),
                p.requests.to_string(),
                p.completed.to_string(),
                p.failed.to_string(),
                p.rejected.to_string(),
                offered,
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

/// What the gates say, one line each: a required verdict not judged (it fails the
/// run), a verdict exercised but not judged, a phase short of the protected load.
pub fn gate_lines(j: &Judgement) -> Vec<String> {
    let mut out: Vec<String> = j
        .gates
        .unmet
        .iter()
        .map(|u| format!("FAIL: {}", u.describe()))
        .collect();
    out.extend(j.gates.warnings.iter().map(|w| format!("warning: {w}")));
    let short: Vec<String> = j
        .protected_load
        .phases
        .iter()
        .filter(|p| p.short)
        .map(|p| p.describe())
        .collect();
    if !short.is_empty() {
        out.push(format!(
            "warning: {} offered less than the protected load {}/s: {}",
            crate::scenario::words::plural(short.len() as u64, "phase"),
            j.protected_load.rps,
            short.join("; ")
        ));
    }
    out
}
