//! The Latency verdict: p95 TTFT, ITL and E2E of every phase inside the one SLO (Q2:
//! the same envelope healthy and degraded). The measurements are in `crate::metrics`.

use super::{Status, Verdict, VerdictName};
use crate::plan::Plan;
use crate::scenario::PhaseKind;

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
        .filter(|p| {
            !matches!(
                p.kind,
                PhaseKind::Overload | PhaseKind::Capacity | PhaseKind::Settle
            )
        })
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
    Verdict::new(VerdictName::Latency, status, summary, evidence)
}

#[cfg(test)]
mod tests {
    use crate::check::Status;
    use crate::check::testkit::*;

    /// Baseline and fault phase as in the standard run; the degraded phase's requests
    /// shaped by `shape`.
    fn with_degraded(shape: impl Fn(R<'static>) -> R<'static>) -> crate::check::Judgement {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 12.7, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.removed(us(13.05), "w2", "connection failed");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        for k in 0..100 {
            let t = 21.0 + f64::from(k) * 0.1;
            let w = if k % 2 == 0 { "w1" } else { "w3" };
            tb.request(shape(R::ok(format!("d{k}"), "degraded", t, w)));
        }
        tb.run_end(us(32.0));
        tb.judge(&p)
    }

    #[test]
    fn every_phase_inside_the_one_slo_passes() {
        let j = with_degraded(|r| r);
        let v = pick(&j, "Latency");
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.summary.contains("all 3 phases"), "{}", v.summary);
        assert!(
            v.evidence
                .iter()
                .any(|e| e.starts_with("degraded: p95 TTFT 100.")),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn degraded_ttft_outside_the_healthy_envelope_fails_naming_the_phase() {
        // The survivors queue: TTFT 800 ms on the degraded topology, where the SLO —
        // the same as healthy (Q2) — allows 500 ms.
        let j = with_degraded(|r| r.ttft(800.0));
        let v = pick(&j, "Latency");
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("degraded: p95 TTFT 800.") && v.summary.contains("SLO 500 ms"),
            "{}",
            v.summary
        );
        assert!(!v.summary.contains("baseline:"), "{}", v.summary);
    }

    #[test]
    fn degraded_itl_outside_the_slo_fails() {
        let j = with_degraded(|r| r.itl(80.0));
        let v = pick(&j, "Latency");
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("degraded: p95 ITL 80."), "{}", v.summary);
    }

    #[test]
    fn a_phase_with_too_few_completed_requests_is_unknown() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 21.3, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), "Latency");
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("degraded (3 completed)"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_probe_held_at_haqs_proxy_is_not_the_services_latency() {
        // 1 request/s: ten per phase, so one slow request would be the p95.
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 1.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 21.0, 1.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 1.0, rr(&["w1", "w3"]));
        // The probe the fault's trigger held for 3 s at the proxy.
        tb.request(
            R::ok("probe-1", "fault", 12.5, "w2")
                .ttft(3000.0)
                .probe("kill-w2"),
        );
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let v = pick(&j, "Latency");
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let fault = j.phases.iter().find(|p| p.name == "fault").expect("phase");
        assert_eq!(fault.requests, 10, "{fault:?}");
        // Still a request of the run: in the per-request facts (CSV) and Request-Fate.
        assert!(
            j.facts
                .requests
                .iter()
                .any(|r| r.id == "probe-1" && r.probe.as_deref() == Some("kill-w2"))
        );
        // The same request without the probe mark is the workload's: it FAILs Latency.
        let mut tb2 = Tb::new();
        tb2.phases(&p);
        tb2.steady("baseline", 1.0, 11.0, 1.0, rr(&["w1", "w2", "w3"]));
        tb2.steady("fault", 11.0, 21.0, 1.0, rr(&["w1", "w3"]));
        tb2.steady("degraded", 21.0, 31.0, 1.0, rr(&["w1", "w3"]));
        tb2.request(R::ok("slow-1", "fault", 12.5, "w2").ttft(3000.0));
        tb2.inject("kill-w2", "w2", us(13.0), true);
        tb2.run_end(us(32.0));
        let v = pick(&tb2.judge(&p), "Latency");
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("fault: p95 TTFT 3000"), "{}", v.summary);
    }
}
