//! The Latency verdict: p95 TTFT, ITL and E2E of every phase inside the one SLO (Q2:
//! the same envelope healthy and degraded). The measurements are in `crate::metrics`.

use super::{Status, Verdict};
use crate::scenario::Plan;

pub use crate::metrics::{Pcts, PhaseAcc, PhaseStats, pcts};

/// Fewer completed requests than this in a phase and its p95 is not evidence.
pub const MIN_SAMPLES: u64 = 5;

pub fn verdict(plan: &Plan, phases: &[PhaseStats]) -> Verdict {
    let slo = &plan.scenario.slo;
    let limits = [
        ("TTFT", slo.ttft_p95.as_secs_f64() * 1000.0),
        ("ITL", slo.itl_p95.as_secs_f64() * 1000.0),
        ("E2E", slo.e2e_p95.as_secs_f64() * 1000.0),
    ];
    let mut evidence = Vec::new();
    let mut over = Vec::new();
    let mut thin = Vec::new();
    // Overload phases are judged by the Overload verdict (Q10), capacity-search steps
    // by Capacity (Q4), not against the envelope of the protected load.
    let judged: Vec<&PhaseStats> = phases
        .iter()
        .filter(|p| !matches!(p.kind.as_str(), "overload" | "capacity" | "settle"))
        .collect();
    for p in &judged {
        if p.completed < MIN_SAMPLES {
            thin.push(format!("{} ({} completed)", p.name, p.completed));
            continue;
        }
        let got = [p.ttft_ms.p95, p.itl_ms.p95, p.e2e_ms.p95];
        for ((what, limit), v) in limits.iter().zip(got) {
            let line = format!("{}: p95 {what} {v:.1} ms (SLO {limit:.0} ms)", p.name);
            if v > *limit {
                over.push(line.clone());
            }
            evidence.push(line);
        }
    }
    let (status, summary) = if !over.is_empty() {
        (
            Status::Fail,
            format!("outside the SLO: {}", over.join("; ")),
        )
    } else if !thin.is_empty() {
        (
            Status::Unknown,
            format!(
                "too few completed requests to judge p95 in: {} (need {MIN_SAMPLES})",
                thin.join(", ")
            ),
        )
    } else {
        (
            Status::Pass,
            format!(
                "p95 TTFT, ITL and E2E inside the SLO in all {} phases",
                judged.len()
            ),
        )
    };
    Verdict::new("Latency", status, summary, evidence)
}
