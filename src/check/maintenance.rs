//! Maintenance (Q7, Q13): a planned drain completes without unacceptable disruption —
//! every request in flight on the drained endpoint finishes (none lost, none
//! truncated), the endpoint stops admitting new work, and it is taken out of rotation.

use std::collections::HashSet;

use super::facts::{Evidence, Req};
use super::fate::{Finding, FindingKind};
use super::timeline::{FaultTimeline, Timeline, ms};
use super::verdict::{VerdictName, conclude};
use super::{Status, Verdict};
use crate::plan::Plan;
use crate::trace::Outcome;
use crate::wire::journal::GatewayEntry;

pub const NAME: VerdictName = VerdictName::Maintenance;

/// A new request may still reach the endpoint this long after the drain signal (it
/// was on its way when the signal landed).
pub const ADMISSION_GRACE_US: u64 = 100_000;

pub fn verdict(plan: &Plan, ev: &Evidence, tl: &Timeline, findings: &[Finding]) -> Verdict {
    let drains: Vec<(usize, &FaultTimeline)> = tl
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.drain)
        .collect();
    if drains.is_empty() {
        return Verdict::new(
            NAME,
            Status::NotEvaluated,
            "the scenario has no planned drain",
            Vec::new(),
        );
    }
    let bound = plan
        .scenario
        .criteria
        .maintenance
        .as_ref()
        .map(|m| m.removal_max.as_secs_f64() * 1000.0);
    let flagged = damaged(findings);
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    for (i, d) in drains {
        if !d.verified {
            parts.push((
                Status::Unknown,
                format!("{}: the drain was not verified", d.fault),
            ));
            continue;
        }
        let inflight = in_flight_at(ev, i, d);
        parts.extend(in_flight_rule(d, &inflight, &flagged, &mut evidence));
        parts.extend(admission_rule(ev, d, &mut evidence));
        parts.extend(removal_rule(ev, d, bound, &mut evidence));
        // A PASS only when no part so far names this fault.
        if !parts
            .iter()
            .any(|p| p.1.starts_with(&format!("{}:", d.fault)))
        {
            parts.push((
                Status::Pass,
                format!(
                    "{}: drained {} with {} in-flight requests all completed, admission stopped, endpoint removed",
                    d.fault,
                    d.replica,
                    inflight.len()
                ),
            ));
        }
    }
    conclude(NAME, &parts, evidence)
}

/// Requests whose output the history checker found damaged (a drained stream that
/// completes is right, so its policy findings for abrupt failures do not apply here).
fn damaged(findings: &[Finding]) -> HashSet<&str> {
    findings
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::TwoWriters
                    | FindingKind::DuplicatedOutput
                    | FindingKind::SilentInterruption
            )
        })
        .map(|f| f.request.as_str())
        .collect()
}

/// Requests in flight on the endpoint when the drain (fault `i`) began.
fn in_flight_at<'e>(ev: &'e Evidence, i: usize, d: &FaultTimeline) -> Vec<&'e Req> {
    ev.requests
        .iter()
        .filter(|r| {
            r.caught.is_some_and(|c| c.1 == i)
                || (r.worker.as_deref() == Some(d.replica.as_str())
                    && r.dispatch <= d.injected
                    && r.end > d.injected)
        })
        .collect()
}

/// Every request in flight at the drain completes, untruncated and undamaged.
fn in_flight_rule(
    d: &FaultTimeline,
    inflight: &[&Req],
    flagged: &HashSet<&str>,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    let lost: Vec<&&Req> = inflight
        .iter()
        .filter(|r| {
            r.outcome != Outcome::Completed || r.truncated() || flagged.contains(r.id.as_str())
        })
        .collect();
    evidence.push(format!(
        "{}: {} requests in flight on {} at the drain, {} lost or truncated{}",
        d.fault,
        inflight.len(),
        d.replica,
        lost.len(),
        if lost.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                lost.iter()
                    .take(5)
                    .map(|r| format!("{} ({})", r.id, r.outcome.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    (!lost.is_empty()).then(|| {
        (
            Status::Fail,
            format!(
                "{}: the drain lost or truncated {} of {} in-flight requests",
                d.fault,
                lost.len(),
                inflight.len()
            ),
        )
    })
}

/// The drained endpoint admits no new request once the drain began.
fn admission_rule(
    ev: &Evidence,
    d: &FaultTimeline,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    let admitted = admitted_after(ev, d);
    let a = admitted.first()?;
    evidence.push(format!(
        "{}: {} new requests served by {} after the drain began, first: {a}",
        d.fault,
        admitted.len(),
        d.replica
    ));
    Some((
        Status::Fail,
        format!(
            "{}: {} kept admitting new requests after the drain began ({} served)",
            d.fault,
            d.replica,
            admitted.len()
        ),
    ))
}

/// The drained endpoint leaves rotation (within `bound` ms, when the scenario sets one).
fn removal_rule(
    ev: &Evidence,
    d: &FaultTimeline,
    bound: Option<f64>,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    match (&d.detected, bound) {
        (Some(m), b) => {
            let took = ms(d.injected, m.t);
            evidence.push(format!(
                "{}: {} out of rotation after {took:.0} ms ({}: {})",
                d.fault, d.replica, m.source, m.detail
            ));
            b.filter(|b| took > *b).map(|b| {
                (
                    Status::Fail,
                    format!(
                        "{}: {} left rotation {took:.0} ms after the drain began (bound {b:.0} ms)",
                        d.fault, d.replica
                    ),
                )
            })
        }
        (None, _) if ev.gateway.is_some() => Some((
            Status::Fail,
            format!(
                "{}: the gateway never took the drained {} out of rotation",
                d.fault, d.replica
            ),
        )),
        (None, _) => Some((
            Status::Unknown,
            format!(
                "{}: no gateway journal or observer shows {} leaving rotation",
                d.fault, d.replica
            ),
        )),
    }
}

/// New requests served by the drained endpoint after the drain began (grace aside).
fn admitted_after(ev: &Evidence, d: &FaultTimeline) -> Vec<String> {
    let from = d.injected + ADMISSION_GRACE_US;
    let until = d
        .replacement
        .ready
        .as_ref()
        .map(|m| m.t)
        .unwrap_or(u64::MAX);
    if let Some(j) = &ev.gateway {
        let started: HashSet<&str> = j
            .iter()
            .filter_map(|g| match &g.entry {
                GatewayEntry::AttemptStart {
                    attempt, worker, ..
                } if worker == &d.replica && g.t >= from && g.t < until => Some(attempt.as_str()),
                _ => None,
            })
            .collect();
        return j
            .iter()
            .filter_map(|g| match &g.entry {
                GatewayEntry::AttemptEnd {
                    attempt, result, ..
                } if started.contains(attempt.as_str()) && result == "finished" => {
                    Some(format!("attempt {attempt} (gateway journal)"))
                }
                _ => None,
            })
            .collect();
    }
    ev.requests
        .iter()
        .filter(|r| {
            r.worker.as_deref() == Some(d.replica.as_str())
                && r.dispatch >= from
                && r.dispatch < until
                && r.outcome == Outcome::Completed
        })
        .map(|r| format!("{} (x-haq-worker header)", r.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    fn dplan() -> Plan {
        plan(&[
            "faults[0].domain=drain",
            "faults[0].action=drain",
            "faults[0].name=drain-w2",
        ])
    }

    /// w2 drained at 13 s with two requests in flight on it.
    fn run(inflight: Outcome, removed: bool, late: bool) -> Tb {
        let p = dplan();
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.request(R::ok("in1", "fault", 12.8, "w2"));
        tb.request(R::ok("in2", "fault", 12.9, "w2").outcome(inflight));
        tb.inject_as("drain-w2", "drain", "drain", "w2", us(13.0), true);
        if removed {
            tb.removed(us(13.3), "w2", "ready check: HTTP 503");
        }
        if late {
            tb.request(R::ok("late", "fault", 14.0, "w2"));
        }
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        tb
    }

    #[test]
    fn a_clean_drain_passes() {
        let p = dplan();
        let v = pick(&run(Outcome::Completed, true, false).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary.contains("2 in-flight requests all completed"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_drain_that_cuts_in_flight_streams_fails() {
        let p = dplan();
        let v = pick(&run(Outcome::Reset, true, false).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("lost or truncated 1 of 2"),
            "{}",
            v.summary
        );
        assert!(v.evidence[0].contains("in2 (reset)"), "{:?}", v.evidence);
    }

    #[test]
    fn a_drained_endpoint_still_admitting_work_fails() {
        let p = dplan();
        let v = pick(&run(Outcome::Completed, true, true).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("kept admitting new requests"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_drained_endpoint_never_removed_fails_or_is_unknown_without_evidence() {
        let p = dplan();
        let v = pick(&run(Outcome::Completed, false, false).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("never took the drained w2 out"),
            "{}",
            v.summary
        );
        let v = pick(
            &run(Outcome::Completed, false, false)
                .without_journal()
                .judge(&p),
            NAME,
        );
        assert_eq!(v.status, Status::Unknown, "{v:?}");
    }

    #[test]
    fn no_drain_is_not_evaluated() {
        let p = plan(&[]);
        let v = pick(&standard(&p).judge(&p), NAME);
        assert_eq!(v.status, Status::NotEvaluated);
    }
}
