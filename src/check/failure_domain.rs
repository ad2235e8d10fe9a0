//! Failure-Domain (Q3, Q13): the test removed exactly the declared resource, and the
//! removal was verified. A fault whose verification failed FAILs, and so does one whose
//! heal haq could not verify (it may outlive its declared duration); a fault the trace
//! does not record, or records as never applied (its trigger never came, or haq never
//! knew the replica serving its probe), is UNKNOWN with the reason — nothing was
//! removed, so nothing is blamed; collateral damage (another replica went out of
//! service for good after an applied fault) FAILs.

use std::collections::BTreeSet;

use super::facts::{Evidence, Healed};
use super::history::FaultRec;
use super::timeline::heal_of;
use super::verdict::{VerdictName, judged, worst};
use super::{Status, Verdict};
use crate::plan::{FaultPlan, Plan};
use crate::wire::journal::GatewayEntry;

pub const NAME: VerdictName = VerdictName::FailureDomain;

/// Requests served elsewhere after the fault before a silent replica counts as lost.
const COLLATERAL_MIN_ELSEWHERE: usize = 10;

/// `interrupted`: the run was interrupted (a fault not applied says so).
pub fn verdict(plan: &Plan, ev: &Evidence, interrupted: bool) -> Verdict {
    if plan.faults.is_empty() && ev.faults.is_empty() {
        return Verdict::new(
            NAME,
            Status::NotEvaluated,
            "the scenario declares no fault",
            Vec::new(),
        );
    }
    let mut parts: Vec<(Status, String)> = Vec::new();
    let mut evidence = Vec::new();
    for d in &plan.faults {
        judge_declared(plan, ev, d, interrupted, &mut parts, &mut evidence);
    }
    parts.extend(undeclared(plan, ev));
    for c in collateral(plan, ev) {
        evidence.push(c.clone());
        parts.push((Status::Fail, c));
    }
    let status = worst(parts.iter().map(|p| p.0));
    let summary = judged(&parts, status, || {
        format!(
            "removed exactly what was declared: {}",
            parts
                .iter()
                .map(|p| p.1.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )
    });
    Verdict::new(NAME, status, summary, evidence)
}

/// One declared fault against what the trace records of it: UNKNOWN when nothing
/// is recorded, else a part per declared replica left untouched and per record.
fn judge_declared(
    plan: &Plan,
    ev: &Evidence,
    d: &FaultPlan,
    interrupted: bool,
    parts: &mut Vec<(Status, String)>,
    evidence: &mut Vec<String>,
) {
    // A node fault removes every replica of the node (one record each); a probe
    // fault removes whichever declared replica served its probe.
    let target = if d.replicas.is_empty() {
        "the replica serving its probe".to_string()
    } else {
        d.replicas.join(", ")
    };
    let declared = format!(
        "{}: declared {} of {} at +{:.1}s, in phase {} ({} domain)",
        d.name,
        d.action,
        target,
        d.at.as_secs_f64(),
        d.phase,
        d.domain
    );
    let recs: Vec<_> = ev.faults.iter().filter(|f| f.name == d.name).collect();
    if recs.is_empty() {
        evidence.push(declared);
        parts.push((Status::Unknown, unrecorded(ev, d)));
        return;
    }
    // A fault never applied removed nothing anywhere: its records say why (UNKNOWN).
    let applied = recs.iter().any(|r| r.not_applied().is_none());
    for want in &d.replicas {
        if applied && recs.iter().all(|r| &r.replica != want) {
            parts.push((
                Status::Fail,
                format!(
                    "{}: declared {want} too, but nothing was removed there",
                    d.name
                ),
            ));
        }
    }
    // A node fault that names a replica (kubernetes) hits every replica of its node.
    let nodes: Vec<&str> = if d.domain == crate::scenario::FailureDomain::Node && d.node.is_none() {
        recs.iter()
            .filter(|r| d.replicas.contains(&r.replica))
            .filter_map(|r| r.node.as_deref())
            .collect()
    } else {
        Vec::new()
    };
    for rec in recs {
        evidence.push(format!(
            "{declared}; recorded {} {} at +{:.3}s, pid {}, verified {}: {}",
            rec.action,
            rec.replica,
            ev.secs(rec.t),
            rec.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            rec.verified,
            rec.detail
        ));
        if let Some(why) = rec.not_applied() {
            let when = if interrupted {
                " before the run was interrupted"
            } else {
                ""
            };
            parts.push((
                Status::Unknown,
                format!(
                    "{}: not applied{when} ({why}): nothing was removed, the failure domain was not tested",
                    d.name
                ),
            ));
            continue;
        }
        let on_node = rec.node.as_deref().is_some_and(|n| nodes.contains(&n));
        parts.push(judge_record(plan, ev, d, &target, rec, on_node));
    }
}

/// Why a declared fault has no record: the trace ends before it was due (the run
/// ended, or was killed before its fault line was written), or not.
fn unrecorded(ev: &Evidence, d: &FaultPlan) -> String {
    let due = ev.load_start + d.at.as_micros() as u64;
    if ev.last_t < due {
        format!(
            "{}: the trace ends before the fault was due (+{:.1}s): the run ended, or was killed before the fault's line was written",
            d.name,
            d.at.as_secs_f64()
        )
    } else {
        format!(
            "{}: no record of the fault in the trace (due at +{:.1}s)",
            d.name,
            d.at.as_secs_f64()
        )
    }
}

/// One record of a declared fault: verified, on a declared replica (or, `on_node`,
/// on the node of one), in the declared domain, on the replica's pid — the first rule
/// broken FAILs it.
fn judge_record(
    plan: &Plan,
    ev: &Evidence,
    d: &FaultPlan,
    target: &str,
    rec: &FaultRec,
    on_node: bool,
) -> (Status, String) {
    let want_domain = d.domain;
    if !rec.verified {
        (
            Status::Fail,
            format!("{}: verification failed: {}", d.name, rec.detail),
        )
    } else if !(d.replicas.contains(&rec.replica)
        || on_node && plan.replicas.contains(&rec.replica)
        || d.replicas.is_empty() && plan.replicas.contains(&rec.replica))
    {
        (
            Status::Fail,
            format!(
                "{}: removed {}, but the scenario declares {target}",
                d.name, rec.replica
            ),
        )
    } else if rec.domain != want_domain {
        (
            Status::Fail,
            format!(
                "{}: recorded as a {} fault, declared {}",
                d.name, rec.domain, want_domain
            ),
        )
    } else if let Some(bad) = pid_mismatch(ev, rec) {
        (Status::Fail, format!("{}: {bad}", d.name))
    } else if let Some(h) = unverified_heal(ev, rec) {
        (
            Status::Fail,
            format!(
                "{}: heal of {} not verified: {}: the fault may still be in place, more than the scenario declares",
                d.name, rec.replica, h.detail
            ),
        )
    } else {
        (
            Status::Pass,
            format!("{}: {} {} verified", d.name, rec.action, rec.replica),
        )
    }
}

/// The heal of `rec` (its replica's, for a node fault) that haq could not verify: the
/// fault may outlive its declared duration, so the test removed more than declared.
fn unverified_heal<'a>(ev: &'a Evidence, rec: &FaultRec) -> Option<&'a Healed> {
    heal_of(ev, rec).filter(|h| !h.verified)
}

/// Faults the trace records that the scenario does not declare.
fn undeclared(plan: &Plan, ev: &Evidence) -> Vec<(Status, String)> {
    ev.faults
        .iter()
        .filter(|rec| !plan.faults.iter().any(|d| d.name == rec.name))
        .map(|rec| {
            (
                Status::Fail,
                format!(
                    "{}: the trace records a fault on {} the scenario does not declare",
                    rec.name, rec.replica
                ),
            )
        })
        .collect()
}

/// The recorded pid is not the replica's pid when the fault fired: the one the target
/// reported at the start, or the latest replacement's (a replica killed, replaced and
/// killed again has the replacement's pid).
fn pid_mismatch(ev: &Evidence, rec: &FaultRec) -> Option<String> {
    let replica = rec.replica.as_str();
    let started = ev.replicas.iter().find(|r| r.name == replica)?.pid;
    let replaced = ev
        .replacements
        .iter()
        .rfind(|r| r.replica == replica && r.t <= rec.t && r.pid.is_some())
        .and_then(|r| r.pid);
    let known = replaced.or(started)?;
    let got = rec.pid?;
    (got != known).then(|| {
        let whose = if replaced.is_some() {
            format!("{replica}'s replacement")
        } else {
            replica.to_string()
        };
        format!("signalled pid {got}, but {whose} is pid {known}")
    })
}

/// Undeclared replicas that went out of service after the first applied fault and
/// never came back: the test removed more than it declared.
fn collateral(plan: &Plan, ev: &Evidence) -> Vec<String> {
    let applied = ev.faults.iter().filter(|f| f.not_applied().is_none());
    let Some(first) = applied.map(|f| f.t).min() else {
        return Vec::new();
    };
    let declared: BTreeSet<&str> = ev
        .faults
        .iter()
        .map(|f| f.replica.as_str())
        .chain(
            plan.faults
                .iter()
                .flat_map(|f| f.replicas.iter().map(String::as_str)),
        )
        .collect();
    let names: BTreeSet<&str> = ev
        .replicas
        .iter()
        .map(|r| r.name.as_str())
        .chain(plan.replicas.iter().map(String::as_str))
        .filter(|n| !declared.contains(n))
        .collect();
    let end = ev.load_end();
    let mut out = Vec::new();
    for w in names {
        if let Some(j) = &ev.gateway {
            let last = j
                .iter()
                .rev()
                .filter(|g| g.t >= first && g.t <= end)
                .filter_map(|g| match &g.entry {
                    GatewayEntry::UpstreamRemoved { worker, why, .. } if worker == w => {
                        Some((g.t, Some(why)))
                    }
                    GatewayEntry::UpstreamReady { worker, .. } if worker == w => Some((g.t, None)),
                    _ => None,
                })
                .next();
            if let Some((t, Some(why))) = last {
                out.push(format!(
                    "collateral: the gateway removed {w} at +{:.3}s ({why}) and it never came back",
                    ev.secs(t)
                ));
                continue;
            }
        }
        // Every request's part is in the summary (the fold keeps no record of each).
        let served = ev.summary.served.get(w);
        let before = served.is_some_and(|s| s.0 < first);
        let after = ev.summary.attributed_after_first;
        if before && after >= COLLATERAL_MIN_ELSEWHERE as u64 && served.is_none_or(|s| s.1 < first)
        {
            out.push(format!(
                "collateral: {w} served requests before the fault and none of the {after} served after it"
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "failure_domain_tests.rs"]
mod tests;
