//! The verdicts a plan exercises: what its faults, phases and criteria give each
//! verdict to judge. The run's summary warns when one of them ends NOT_EVALUATED
//! (nothing gated it), and `validate` warns when `criteria.require` names one the
//! plan cannot exercise (that run always fails).

use crate::scenario::words::and_list;
use crate::scenario::{FailureDomain, FaultAction, PhaseKind, VerdictName};

use super::Plan;

/// Each verdict the plan exercises, with what exercises it, in report order.
pub fn exercised(plan: &Plan) -> Vec<(VerdictName, String)> {
    VerdictName::ALL
        .iter()
        .filter_map(|&v| why(plan, v).map(|w| (v, w)))
        .collect()
}

/// What in the plan gives verdict `v` something to judge, if anything does.
pub fn why(plan: &Plan, v: VerdictName) -> Option<String> {
    let names = |f: &dyn Fn(&super::FaultPlan) -> bool| {
        let n: Vec<&str> = plan
            .faults
            .iter()
            .filter(|x| f(x))
            .map(|x| x.name.as_str())
            .collect();
        (!n.is_empty()).then(|| and_list(&n))
    };
    let drain =
        |f: &super::FaultPlan| f.domain == FailureDomain::Drain || f.action == FaultAction::Drain;
    let removes =
        |f: &super::FaultPlan| !matches!(f.action, FaultAction::Delay | FaultAction::Throttle);
    let phase = |k: PhaseKind| plan.phases.iter().find(|p| p.kind == k);
    match v {
        VerdictName::FailureDomain => names(&|_| true).map(|n| format!("what {n} removed")),
        VerdictName::RequestFate => {
            names(&|f| !drain(f)).map(|n| format!("requests caught by {n}"))
        }
        VerdictName::Routing => names(&|f| removes(f) && !drain(f))
            .map(|n| format!("an endpoint taken out of service by {n}")),
        VerdictName::Capacity => {
            if plan.scenario.criteria.capacity.is_some() {
                return Some("criteria.capacity.search".into());
            }
            names(&removes).map(|n| format!("capacity removed by {n}"))
        }
        VerdictName::Latency => Some("every phase's load".into()),
        VerdictName::Overload => phase(PhaseKind::Overload)
            .map(|p| format!("the overload phase {}", p.name))
            .or_else(|| {
                let s = &plan.scenario.criteria.capacity.as_ref()?.search;
                (!s.overload.is_empty() && !plan.faults.is_empty())
                    .then(|| "the capacity search's overload steps".to_string())
            }),
        VerdictName::Recovery => names(&|f| f.restart.is_some())
            .map(|n| format!("a replacement asked for by {n}"))
            .or_else(|| {
                (!plan.faults.is_empty())
                    .then(|| phase(PhaseKind::Recovery).or(phase(PhaseKind::Recovered)))
                    .flatten()
                    .map(|p| format!("the {} phase {}", p.kind, p.name))
            }),
        VerdictName::Maintenance => names(&drain).map(|n| format!("the planned drain {n}")),
    }
}

/// The phases of the degraded interval a fault in phase `phase` opens: it and the
/// fault, drain and degraded phases that follow it (what Capacity judges).
pub fn degraded_phases(plan: &Plan, phase: &str) -> Vec<String> {
    let Some(i) = plan.phases.iter().position(|p| p.name == phase) else {
        return Vec::new();
    };
    let mut out = vec![plan.phases[i].name.clone()];
    out.extend(
        plan.phases[i + 1..]
            .iter()
            .take_while(|p| {
                matches!(
                    p.kind,
                    PhaseKind::Fault | PhaseKind::Degraded | PhaseKind::Drain
                )
            })
            .map(|p| p.name.clone()),
    );
    out
}
