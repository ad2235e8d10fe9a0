//! The one table of the eight verdicts (Q13): each judged by name in an exhaustive
//! match, in report order, from what the fold of the trace produced. A new verdict is
//! a new [`VerdictName`] and an arm here; nothing else picks verdicts by name.

use super::evidence::SourceReport;
use super::fate::{self, FateAcc};
use super::latency::PhaseStats;
use super::run::RunLevel;
use super::verdict::{Status, Verdict, VerdictName};
use super::{capacity, failure_domain, latency, maintenance, overload, recovery, routing};
use crate::plan::Plan;
use crate::scenario::TargetKind;

/// What the verdicts are judged from.
pub struct Judged<'a> {
    pub plan: &'a Plan,
    pub level: &'a RunLevel,
    pub phases: &'a [PhaseStats],
    pub fate: &'a FateAcc,
    /// Which evidence sources the judgement read (Request-Fate names the missing ones).
    pub sources: &'a [SourceReport],
    /// The trace has its last line (a run cut short passes nothing).
    pub complete: bool,
    /// Each phase's offered load against the protected load (Capacity).
    pub load: &'a capacity::ProtectedLoad,
    /// The run was interrupted (SIGINT/SIGTERM): what the interrupt cut short is not
    /// the target's doing.
    pub interrupted: bool,
}

/// The eight verdicts, in report order. A trace with no end (the run was killed)
/// turns every PASS into UNKNOWN: what it lacks might have failed.
pub fn judge(j: &Judged) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = VerdictName::ALL.iter().map(|&n| one(n, j)).collect();
    if !j.complete {
        for v in &mut out {
            if v.status == Status::Pass {
                v.status = Status::Unknown;
                v.summary = format!(
                    "the trace has no end (the run was cut short): {}",
                    v.summary
                );
            }
        }
    }
    out
}

fn one(name: VerdictName, j: &Judged) -> Verdict {
    let (plan, ev, tl) = (j.plan, &j.level.evidence, &j.level.timeline);
    match name {
        VerdictName::FailureDomain => failure_domain::verdict(plan, ev, j.interrupted),
        VerdictName::Routing => routing::verdict(plan, tl),
        VerdictName::RequestFate => {
            let sim = plan.scenario.target.kind == TargetKind::Sim;
            fate::verdict(j.fate, &fate::fate_faults(plan), &ev.faults, j.sources, sim)
        }
        VerdictName::Capacity => {
            capacity::verdict(plan, tl, &j.level.window, j.load, j.level.capacity.as_ref())
        }
        VerdictName::Latency => latency::verdict(plan, j.phases),
        VerdictName::Overload => capacity::excess::merge(
            overload::verdict(plan, ev, j.phases),
            j.level.capacity.as_ref().map(|s| {
                let evidence = s.overload.iter().flat_map(|o| o.evidence.clone()).collect();
                (s.overload_status, s.overload_summary.as_str(), evidence)
            }),
        ),
        VerdictName::Recovery => recovery::verdict(plan, ev, tl, j.phases),
        VerdictName::Maintenance => maintenance::verdict(plan, ev, tl, &j.fate.findings),
    }
}
