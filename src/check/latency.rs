//! Per-phase latency (hdrhistogram) and the Latency verdict: p95 TTFT, ITL and E2E of
//! every phase inside the one SLO (Q2: the same envelope healthy and degraded).

use hdrhistogram::Histogram;
use serde::Serialize;

use super::history::RequestRecord;
use super::{Status, Verdict};
use crate::scenario::Plan;
use crate::trace::Outcome;

/// Fewer completed requests than this in a phase and its p95 is not evidence.
pub const MIN_SAMPLES: u64 = 5;

pub struct PhaseAcc {
    pub name: String,
    pub kind: String,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    pub cancelled: u64,
    pub tokens: u64,
    /// µs, from the intended send time (coordinated-omission free).
    pub ttft: Histogram<u64>,
    /// µs, from the actual dispatch.
    pub ttft_dispatch: Histogram<u64>,
    pub itl: Histogram<u64>,
    pub e2e: Histogram<u64>,
}

fn hist() -> Histogram<u64> {
    // 1 µs .. 1 h, 3 significant digits; bounds are fixed so `new_with_bounds` cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("hdr"))
}

impl PhaseAcc {
    pub fn new(name: &str, kind: &str) -> Self {
        PhaseAcc {
            name: name.into(),
            kind: kind.into(),
            requests: 0,
            completed: 0,
            failed: 0,
            rejected: 0,
            cancelled: 0,
            tokens: 0,
            ttft: hist(),
            ttft_dispatch: hist(),
            itl: hist(),
            e2e: hist(),
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        let Some(end) = &r.end else { return };
        match end.outcome {
            Outcome::Completed => self.completed += 1,
            Outcome::Rejected => self.rejected += 1,
            Outcome::Cancelled => self.cancelled += 1,
            _ => self.failed += 1,
        }
        if end.outcome != Outcome::Completed {
            return;
        }
        self.tokens += u64::from(end.tokens);
        if let Some(f) = r.first_delta_t() {
            let _ = self.ttft.record(f.saturating_sub(r.intended).max(1));
            let _ = self
                .ttft_dispatch
                .record(f.saturating_sub(r.dispatch).max(1));
        }
        let _ = self.e2e.record(end.t.saturating_sub(r.intended).max(1));
        let mut prev: Option<u64> = None;
        for c in r.deltas() {
            if let Some(p) = prev {
                let _ = self.itl.record(c.t.saturating_sub(p).max(1));
            }
            prev = Some(c.t);
        }
    }
}

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pcts {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn pcts(h: &Histogram<u64>) -> Pcts {
    let ms = |v: u64| (v as f64 / 1000.0 * 1000.0).round() / 1000.0;
    Pcts {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// One phase's numbers as reported.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub name: String,
    pub kind: String,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    pub cancelled: u64,
    pub output_tokens: u64,
    pub ttft_ms: Pcts,
    pub ttft_from_dispatch_ms: Pcts,
    pub itl_ms: Pcts,
    pub e2e_ms: Pcts,
}

impl From<&PhaseAcc> for PhaseStats {
    fn from(a: &PhaseAcc) -> Self {
        PhaseStats {
            name: a.name.clone(),
            kind: a.kind.clone(),
            requests: a.requests,
            completed: a.completed,
            failed: a.failed,
            rejected: a.rejected,
            cancelled: a.cancelled,
            output_tokens: a.tokens,
            ttft_ms: pcts(&a.ttft),
            ttft_from_dispatch_ms: pcts(&a.ttft_dispatch),
            itl_ms: pcts(&a.itl),
            e2e_ms: pcts(&a.e2e),
        }
    }
}

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
    // Overload phases are judged by the Overload verdict (Q10), not against the
    // envelope of the protected load.
    for p in phases.iter().filter(|p| p.kind != "overload") {
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
                phases.len()
            ),
        )
    };
    Verdict::new("Latency", status, summary, evidence)
}
