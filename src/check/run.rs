//! The run-level verdicts and the timeline, folded in the same pass over the trace as
//! the per-request checks: [`RunAcc`] sees every event and every finished request,
//! [`RunAcc::finish`] judges.

use serde::Serialize;

use super::capacity::{self, Window, WindowAcc};
use super::evidence::GwItem;
use super::facts::{Evidence, EvidenceAcc};
use super::fate::Finding;
use super::history::{FaultRec, RequestRecord};
use super::latency::PhaseStats;
use super::timeline::{self, Timeline};
use super::{Status, Verdict, failure_domain, maintenance, overload, recovery, routing};
use crate::metrics::{Measured, SecondStats};
use crate::plan::Plan;
use crate::trace::Event;

pub struct RunAcc {
    evidence: EvidenceAcc,
    window: WindowAcc,
}

/// What the run-level checks produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunLevel {
    #[serde(skip)]
    pub evidence: Evidence,
    pub timeline: Timeline,
    pub degraded: Option<Window>,
    /// The capacity search (Q4), when the scenario has one.
    pub capacity: Option<crate::check::capacity::search::Search>,
    #[serde(skip)]
    pub verdicts: Vec<Verdict>,
}

impl RunLevel {
    pub fn verdict(&self, name: &str) -> Option<Verdict> {
        self.verdicts.iter().find(|v| v.name == name).cloned()
    }
}

impl RunAcc {
    pub fn new(plan: &Plan, journal: bool, faults: &[FaultRec]) -> Self {
        RunAcc {
            evidence: EvidenceAcc::new(plan, journal),
            window: WindowAcc::new(plan, faults),
        }
    }

    pub fn see(&mut self, e: &Event) {
        self.evidence.see(e);
    }

    /// [`RunAcc::see`] for a chunk: only its time counts here.
    pub fn see_t(&mut self, t: u64) {
        self.evidence.see_t(t);
    }

    pub fn gateway(&mut self, t: u64, item: &GwItem) {
        self.evidence.gateway(t, item);
    }

    pub fn request(&mut self, r: &RequestRecord, m: &Measured, faults: &[FaultRec]) {
        self.evidence.request(r, faults);
        self.window.add(r, m);
    }

    pub fn finish(
        self,
        plan: &Plan,
        faults: &[FaultRec],
        phases: &[PhaseStats],
        findings: &[Finding],
        seconds: &[SecondStats],
    ) -> RunLevel {
        let ev = self.evidence.finish(faults);
        let tl = timeline::build(plan, &ev, seconds);
        let window = self.window.finish();
        let search = crate::check::capacity::search::judge(plan, phases);
        let verdicts = vec![
            failure_domain::verdict(plan, &ev),
            routing::verdict(plan, &tl),
            capacity::verdict(plan, &tl, &window, search.as_ref()),
            overload::verdict(plan, &ev, phases),
            recovery::verdict(plan, &ev, &tl, phases),
            maintenance::verdict(plan, &ev, &tl, findings),
        ];
        RunLevel {
            degraded: tl.faults.iter().any(|f| f.removes).then_some(window),
            capacity: search,
            evidence: ev,
            timeline: tl,
            verdicts,
        }
    }
}

/// FAIL beats UNKNOWN beats PASS; nothing judged is UNKNOWN.
pub fn worst(it: impl IntoIterator<Item = Status>) -> Status {
    let mut out = None;
    for s in it {
        out = Some(match (out, s) {
            (_, Status::Fail) | (Some(Status::Fail), _) => Status::Fail,
            (_, Status::Unknown) | (Some(Status::Unknown), _) => Status::Unknown,
            (_, Status::Pass) | (Some(Status::Pass), _) => Status::Pass,
            _ => Status::NotEvaluated,
        });
    }
    out.unwrap_or(Status::Unknown)
}

/// A verdict judged in parts (one per fault or phase): the worst part decides, and
/// the summary names the parts that decided it (all of them on a PASS).
pub fn conclude(name: &str, parts: &[(Status, String)], evidence: Vec<String>) -> Verdict {
    let status = worst(parts.iter().map(|p| p.0));
    let summary = judged(parts, status, || {
        parts
            .iter()
            .map(|p| p.1.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    });
    Verdict::new(name, status, summary, evidence)
}

/// The summary of a verdict judged in parts: the parts that decided a FAIL or an
/// UNKNOWN, or `pass()` when everything passed.
pub fn judged(parts: &[(Status, String)], status: Status, pass: impl FnOnce() -> String) -> String {
    match status {
        Status::Pass | Status::NotEvaluated => pass(),
        s => parts
            .iter()
            .filter(|p| p.0 == s)
            .map(|p| p.1.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    }
}
