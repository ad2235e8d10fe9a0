//! Validation of the declared replicas and the faults into [`FaultPlan`]s: every
//! target inside the declared replicas (the blast-radius guard), every backend able
//! to reach what it targets, every trigger possible — or one [`Issue`], before
//! anything starts. One fault at a time in `fault.rs`; here, what holds across faults
//! (a replica killed for good is not faulted again; fault names are unique).

mod action;
mod context;
mod exec;
mod fault;
mod kube;
mod params;
mod replicas;
mod targets;
mod trigger;
mod types;

use std::collections::BTreeMap;
use std::time::Duration;

use super::phase::PhasePlan;
use crate::scenario::{Issue, ReplicaDecl, Scenario};
use context::Ctx;

pub use replicas::validate_replicas;
pub use types::{FaultPlan, Trigger};

/// Validates every fault (in order; each fault's first issue), then, when each is
/// valid, what holds across them.
pub fn validate_faults(
    s: &Scenario,
    phases: &[PhasePlan],
    decls: &[ReplicaDecl],
) -> Result<Vec<FaultPlan>, Vec<Issue>> {
    let cx = Ctx { s, phases, decls };
    let mut out: Vec<FaultPlan> = Vec::new();
    let mut issues = Vec::new();
    for (i, f) in s.faults.iter().enumerate() {
        match fault::one(&cx, &format!("faults[{i}]"), f) {
            Ok(p) => out.push(p),
            Err(e) => issues.push(e),
        }
    }
    if !issues.is_empty() {
        return Err(issues);
    }
    not_faulted_once_gone(&out).map_err(|e| vec![e])?;
    names_unique(&out).map_err(|e| vec![e])?;
    Ok(out)
}

/// A replica removed for good cannot be faulted again later.
fn not_faulted_once_gone(out: &[FaultPlan]) -> Result<(), Issue> {
    let mut gone: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| out[i].at);
    for i in order {
        let p = &out[i];
        for r in &p.replicas {
            if gone.get(r.as_str()).is_some_and(|t| *t <= p.at) {
                return Err(Issue::new(
                    format!("faults[{i}].target.replica"),
                    r,
                    "is already killed by an earlier fault (add `restart` to it to fault its replacement)",
                ));
            }
        }
        if p.removes() && p.restart.is_none() {
            for r in &p.replicas {
                gone.insert(r, p.at);
            }
        }
    }
    Ok(())
}

/// Names identify faults in the trace: no two faults share one.
fn names_unique(out: &[FaultPlan]) -> Result<(), Issue> {
    for (i, p) in out.iter().enumerate() {
        if out[..i].iter().any(|o| o.name == p.name) {
            return Err(Issue::new(
                format!("faults[{i}].name"),
                &p.name,
                "is used by two faults (names identify faults in the trace)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
