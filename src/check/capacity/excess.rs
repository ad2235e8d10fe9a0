//! The capacity search's overload steps (issue 19 item 5; Q10): past C_degraded, in
//! the degraded topology, a step offers a multiple of it between two stretches at the
//! protected load (or C_degraded, when lower). Each is judged by the Overload rules
//! of a run's overload phase (`check::overload`: fast explicit rejections, no cascade
//! of failures or timeouts, admitted requests inside the SLO, attempts per request —
//! from the gateway's journal and haq's proxy — within the retry budget, protected
//! traffic not shed within its protected load) and by one more: after the excess the
//! cluster is back inside the SLO at the protected load ([`super::steps`]'s rule on the
//! `after` phase, once one `slo.ttft_p95` has let the queue the excess left drain). A
//! step where haq's own client was the limit says nothing (UNKNOWN), and neither does
//! one whose faults did not all hold (applied and verified, `super::held::faults_not_held`):
//! its excess met another topology than the degraded one (UNKNOWN, the fault named).

use serde::Serialize;

use super::steps::{Step, judge_step_shed};
use crate::check::facts::Req;
use crate::check::history::FaultRec;
use crate::check::own::PhaseOwn;
use crate::check::validity::ClientHealth;
use crate::check::{Status, Verdict, VerdictName};
use crate::metrics::PhaseStats;
use crate::plan::Plan;
use crate::plan::capacity::{AFTER, OVERLOAD};
use crate::trace::Outcome;

/// One overload step, judged.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OverloadStep {
    /// The step's run directory, relative to the search's.
    pub dir: String,
    /// The rate offered as a multiple of C_degraded (when it was measured).
    pub multiple: Option<f64>,
    /// The excess (req/s).
    pub rate: f64,
    /// The rate before and after the excess (req/s).
    pub after_rate: f64,
    pub status: Status,
    pub summary: String,
    pub evidence: Vec<String>,
    /// The stretch after the excess against the SLO.
    pub after: Option<Step>,
    /// Why haq's own client was the limit (empty when it was not).
    pub load_generator: Vec<String>,
}

/// An overload step's run: its Overload verdict (of its `overload` phase), its phases,
/// requests and fault records, haq's own health.
pub fn judge(
    plan: &Plan,
    overload: &Verdict,
    phases: &[PhaseStats],
    (requests, faults): (&[Req], &[FaultRec]),
    (client, own): (&ClientHealth, &[PhaseOwn]),
) -> OverloadStep {
    let rate = |name: &str| {
        plan.phases
            .iter()
            .find(|p| p.name == name)
            .map_or(0.0, |p| p.rate)
    };
    let (rate, after_rate) = (rate(OVERLOAD), rate(AFTER));
    let after = phases.iter().find(|p| p.name == AFTER).map(|s| {
        let prot: Vec<&Req> = requests
            .iter()
            .filter(|r| r.phase == AFTER && r.probe.is_none() && r.protected)
            .collect();
        let rej = prot
            .iter()
            .filter(|r| r.outcome == Outcome::Rejected)
            .count() as u64;
        judge_step_shed(plan, s, after_rate, (rej, prot.len() as u64))
    });
    let mut load_generator: Vec<String> = client
        .breaches
        .iter()
        .filter(|b| {
            b.phase
                .as_deref()
                .is_none_or(|p| p != crate::plan::capacity::WARMUP)
        })
        .map(|b| b.message.clone())
        .collect();
    let held = overload.status == Status::Pass && after.as_ref().is_some_and(|a| a.pass);
    for p in [OVERLOAD, AFTER] {
        load_generator.extend(super::steps::own_limits(own, p, held));
    }
    load_generator.dedup();
    let mut parts = vec![(overload.status, overload.summary.clone())];
    match &after {
        Some(a) if !a.pass => parts.push((
            Status::Fail,
            format!(
                "after the excess (and one slo.ttft_p95 for its queue to drain), at {after_rate:.2}/s the SLO was not back: {}",
                a.why
            ),
        )),
        Some(a) => parts.push((
            Status::Pass,
            format!(
                "back inside the SLO at {after_rate:.2}/s after it (p95 TTFT {:.0} ms, E2E {:.0} ms)",
                a.ttft_p95_ms, a.e2e_p95_ms
            ),
        )),
        None => parts.push((
            Status::Unknown,
            format!("the `{AFTER}` phase after the excess was not measured"),
        )),
    }
    let mut status = crate::check::worst(parts.iter().map(|p| p.0));
    let mut summary = crate::check::judged(&parts, status, || {
        parts
            .iter()
            .map(|p| p.1.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    });
    if !load_generator.is_empty() {
        status = Status::Unknown;
        summary = format!(
            "limit is the load generator: {} ({summary})",
            load_generator.join("; ")
        );
    }
    let not_held = super::held::faults_not_held(plan, faults);
    if !not_held.is_empty() {
        status = Status::Unknown;
        summary = format!("proves nothing: {} ({summary})", not_held.join("; "));
    }
    OverloadStep {
        dir: String::new(),
        multiple: None,
        rate,
        after_rate,
        status,
        summary,
        evidence: overload.evidence.clone(),
        after,
        load_generator,
    }
}

/// The search's Overload verdict from its steps; `none`: why there is none.
pub fn conclude(steps: &[OverloadStep], none: Option<String>) -> (Status, String) {
    if steps.is_empty() {
        return match none {
            Some(why) => (Status::NotEvaluated, why),
            None => (
                Status::Unknown,
                "the overload steps past C_degraded did not run (the search ended first)".into(),
            ),
        };
    }
    let parts: Vec<(Status, String)> = steps
        .iter()
        .map(|s| (s.status, format!("{}: {}", label(s), s.summary)))
        .collect();
    let status = crate::check::worst(parts.iter().map(|p| p.0));
    let summary = crate::check::judged(&parts, status, || {
        let at: Vec<String> = steps.iter().map(label).collect();
        format!(
            "past C_degraded ({}) the degraded cluster shed with fast explicit rejections, kept admitted work inside the SLO with no retry cascade, and was back inside it after each excess",
            at.join(", ")
        )
    });
    (status, summary)
}

/// `1.5× C_degraded (42.00/s)`.
fn label(s: &OverloadStep) -> String {
    match s.multiple {
        Some(m) => format!("{m}× C_degraded ({:.2}/s)", s.rate),
        None => format!("{:.2}/s", s.rate),
    }
}

/// The run's Overload verdict with the search's overload steps: either alone when the
/// other judged nothing, else the worst of both, each named.
pub fn merge(run: Verdict, search: Option<(Status, &str, Vec<String>)>) -> Verdict {
    let Some((status, summary, evidence)) = search.filter(|s| s.0 != Status::NotEvaluated) else {
        return run;
    };
    let searched = format!("capacity search: {summary}");
    if run.status == Status::NotEvaluated {
        return Verdict::new(VerdictName::Overload, status, searched, evidence);
    }
    let parts = [
        (run.status, format!("run: {}", run.summary)),
        (status, searched),
    ];
    let mut all = run.evidence;
    all.extend(evidence);
    crate::check::conclude(VerdictName::Overload, &parts, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(status: Status, summary: &str) -> OverloadStep {
        OverloadStep {
            dir: "overload-01-42.00".into(),
            multiple: Some(1.5),
            rate: 42.0,
            after_rate: 8.0,
            status,
            summary: summary.into(),
            evidence: vec!["e".into()],
            after: None,
            load_generator: Vec::new(),
        }
    }

    #[test]
    fn the_worst_step_decides_and_none_says_why() {
        let (s, why) = conclude(&[], Some("no overload multiples asked".into()));
        assert_eq!(
            (s, why.as_str()),
            (Status::NotEvaluated, "no overload multiples asked")
        );
        assert_eq!(conclude(&[], None).0, Status::Unknown);
        let ok = step(Status::Pass, "fine");
        let (s, why) = conclude(std::slice::from_ref(&ok), None);
        assert_eq!(s, Status::Pass);
        assert!(why.contains("1.5× C_degraded (42.00/s)"), "{why}");
        let bad = step(Status::Fail, "queued instead of shedding");
        let (s, why) = conclude(&[ok, bad], None);
        assert_eq!(s, Status::Fail);
        assert_eq!(why, "1.5× C_degraded (42.00/s): queued instead of shedding");
    }

    #[test]
    fn the_search_joins_the_runs_overload_verdict() {
        let none = Verdict::new(
            VerdictName::Overload,
            Status::NotEvaluated,
            "no phase",
            vec![],
        );
        let v = merge(
            none.clone(),
            Some((Status::Fail, "queued", vec!["x".into()])),
        );
        assert_eq!(
            (v.status, v.summary.as_str()),
            (Status::Fail, "capacity search: queued")
        );
        assert_eq!(merge(none.clone(), None), none);
        let run = Verdict::new(
            VerdictName::Overload,
            Status::Pass,
            "shed",
            vec!["a".into()],
        );
        let v = merge(run, Some((Status::Fail, "queued", vec!["b".into()])));
        assert_eq!(v.status, Status::Fail);
        assert_eq!(v.summary, "capacity search: queued");
        assert_eq!(v.evidence, ["a", "b"]);
    }
}
