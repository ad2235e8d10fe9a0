//! Failure-Domain (Q3, Q13): the test removed exactly the declared resource, and the
//! removal was verified. A fault whose verification failed FAILs; a fault the trace
//! does not record, or records as never applied (its trigger never came, or haq never
//! knew the replica serving its probe), is UNKNOWN with the reason — nothing was
//! removed, so nothing is blamed; collateral damage (another replica went out of
//! service for good after an applied fault) FAILs.

use std::collections::BTreeSet;

use super::facts::Evidence;
use super::history::FaultRec;
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

/// Why a declared fault has no record: the run ended before it was due, or not.
fn unrecorded(ev: &Evidence, d: &FaultPlan) -> String {
    let due = ev.load_start + d.at.as_micros() as u64;
    if ev.last_t < due {
        format!(
            "{}: the run ended before the fault was due (+{:.1}s)",
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
    } else {
        (
            Status::Pass,
            format!("{}: {} {} verified", d.name, rec.action, rec.replica),
        )
    }
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
mod tests {
    use super::*;
    use crate::check::testkit::*;
    use crate::trace::{Event, FaultLine};

    #[test]
    fn passes_when_the_declared_worker_was_killed_and_verified() {
        let p = plan(&[]);
        let v = pick(&standard(&p).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.summary.contains("kill w2 verified"), "{}", v.summary);
        assert!(v.evidence[0].contains("pid 102"), "{:?}", v.evidence);
    }

    #[test]
    fn a_fault_whose_verification_failed_fails() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.events.retain(|e| !matches!(e, Event::Fault(_)));
        tb.inject("kill-w2", "w2", us(13.0), false);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail);
        assert!(v.summary.contains("verification failed"), "{}", v.summary);
    }

    #[test]
    fn removing_another_replica_than_declared_fails() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.events.retain(|e| !matches!(e, Event::Fault(_)));
        tb.inject("kill-w2", "w3", us(13.0), true);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.summary
                .contains("removed w3, but the scenario declares w2"),
            "{}",
            v.summary
        );
    }

    /// A kubernetes node fault names a replica; every replica recorded on that
    /// replica's node is inside the declared domain, one on another node is not.
    #[test]
    fn a_node_fault_naming_a_replica_covers_the_replicas_of_its_node() {
        let yaml = crate::plan::kubernetes::tests::kube_scenario();
        let p = plan_from(&yaml, &["faults[0].domain=node", "faults[0].name=node-w2"]);
        let line = |replica: &str, node: &str| FaultLine {
            t: us(6.0),
            name: "node-w2".into(),
            domain: crate::scenario::FailureDomain::Node,
            action: crate::scenario::FaultAction::Kill,
            replica: replica.into(),
            pid: None,
            verified: true,
            detail: "deleted".into(),
            backend: Some(crate::scenario::FaultBackend::Kubernetes),
            node: Some(node.into()),
            trigger: Some("time".into()),
            triggered: Some(us(6.0)),
            probe: None,
        };
        let judge = |lines: &[(&str, &str)]| {
            let mut tb = Tb::new();
            tb.phases(&p);
            for (r, n) in lines {
                tb.fault_as(line(r, n));
            }
            tb.run_end(us(12.0));
            pick(&tb.judge(&p), NAME)
        };
        let v = judge(&[("w2", "node-a"), ("w1", "node-a")]);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let v = judge(&[("w2", "node-a"), ("w3", "node-b")]);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary
                .contains("removed w3, but the scenario declares w2"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn signalling_a_pid_that_is_not_the_replicas_fails() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        for e in &mut tb.events {
            if let Event::Fault(FaultLine { pid, .. }) = e {
                *pid = Some(4242);
            }
        }
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.summary.contains("pid 4242, but w2 is pid 102"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn collateral_damage_to_an_undeclared_replica_fails() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.removed(us(15.0), "w3", "ready check: connection refused");
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.summary.contains("collateral: the gateway removed w3"),
            "{}",
            v.summary
        );
        // A flap that came back is not collateral.
        tb.ready(us(16.0), "w3");
        assert_eq!(pick(&tb.judge(&p), NAME).status, Status::Pass);
    }

    #[test]
    fn collateral_is_seen_from_headers_without_a_journal() {
        let p = plan(&[]);
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1"]));
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail);
        assert!(
            v.summary
                .contains("w3 served requests before the fault and none"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_fault_missing_from_the_trace_is_unknown_and_no_fault_is_not_evaluated() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.events.retain(|e| !matches!(e, Event::Fault(_)));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown);
        assert!(
            v.summary.contains("no record of the fault"),
            "{}",
            v.summary
        );
        let p = plan(&["faults=[]"]);
        assert_eq!(pick(&tb.judge(&p), NAME).status, Status::NotEvaluated);
    }

    /// A probe fault recorded as `faults::fire::missed` writes it when the replica
    /// serving the probe was never known: on no replica, no pid, not verified.
    fn never_applied(name: &str) -> FaultLine {
        FaultLine {
            t: us(13.0),
            name: name.into(),
            domain: crate::scenario::FailureDomain::Worker,
            action: crate::scenario::FaultAction::Kill,
            replica: String::new(),
            pid: None,
            verified: false,
            detail: format!(
                "{}3 deltas delivered but no replica is known to serve the probe",
                crate::trace::NOT_APPLIED
            ),
            backend: Some(crate::scenario::FaultBackend::Process),
            node: None,
            trigger: Some("probe first_delta".into()),
            triggered: None,
            probe: Some(format!("probe-{name}")),
        }
    }

    /// Missing evidence is UNKNOWN with the reason: a probe point whose replica was
    /// never known removed nothing, so the verdict neither PASSes nor FAILs blaming a
    /// target (before: FAIL "verification failed"); a replica the gateway dropped
    /// later is not the test's collateral damage, nothing having been applied.
    #[test]
    fn a_probe_whose_serving_replica_was_never_known_is_unknown_with_the_reason() {
        for target in ["", ", target: {replica: w2}"] {
            let p = plan(&[&format!(
                "faults=[{{name: kill-probe, domain: worker, action: kill, at: {{phase: fault, offset: 2s}}, when: {{probe: first_delta}}{target}}}]"
            )]);
            let mut tb = Tb::new();
            tb.phases(&p);
            tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
            tb.fault_as(never_applied("kill-probe"));
            tb.steady("fault", 11.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
            tb.removed(us(20.0), "w3", "ready check: connection refused");
            tb.run_end(us(32.0));
            let v = pick(&tb.judge(&p), NAME);
            assert_eq!(v.status, Status::Unknown, "{target}: {v:?}");
            for want in [
                "kill-probe: not applied (3 deltas delivered but no replica is known to serve the probe)",
                "nothing was removed",
            ] {
                assert!(v.summary.contains(want), "{target}: {}", v.summary);
            }
            for never in [
                "verification failed",
                "nothing was removed there",
                "collateral",
            ] {
                assert!(!v.summary.contains(never), "{target}: {}", v.summary);
            }
        }
        // The same fault applied and verified on w2 PASSes: the rule reads the
        // record, not the trigger.
        let p = plan(&[
            "faults=[{name: kill-probe, domain: worker, action: kill, at: {phase: fault, offset: 2s}, when: {probe: first_delta}}]",
        ]);
        let mut tb = standard(&p);
        for e in &mut tb.events {
            if let Event::Fault(FaultLine { name, .. }) = e {
                *name = "kill-probe".into();
            }
        }
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    /// w2 killed at 13 s, replaced (pid 555) at 14 s, killed again at 22 s with `pid`.
    fn killed_twice(pid: u32) -> (Plan, Tb) {
        let p = plan(&[
            "faults=[{name: kill-w2, domain: worker, action: kill, target: {replica: w2}, at: {phase: fault, offset: 2s}, restart: {after: 500ms, cold_start: 500ms}}, {name: kill-w2-again, domain: worker, action: kill, target: {replica: w2}, at: {phase: degraded, offset: 1s}}]",
        ]);
        let mut tb = standard(&p);
        tb.ev(Event::Replacement {
            t: us(14.0),
            fault: "kill-w2".into(),
            replica: "w2".into(),
            stage: crate::trace::ReplacementStage::ProcessStarted,
            pid: Some(555),
            detail: None,
        });
        tb.inject("kill-w2-again", "w2", us(22.0), true);
        for e in &mut tb.events {
            if let Event::Fault(FaultLine { name, pid: p, .. }) = e
                && name == "kill-w2-again"
            {
                *p = Some(pid);
            }
        }
        (p, tb)
    }

    #[test]
    fn a_replaced_replica_killed_again_is_checked_against_the_replacements_pid() {
        let (p, tb) = killed_twice(555);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        // The old process's pid, signalled after the replacement took over, is the
        // wrong process.
        let (p, tb) = killed_twice(102);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary
                .contains("signalled pid 102, but w2's replacement is pid 555"),
            "{}",
            v.summary
        );
    }
}
