//! Maintenance (Q7, Q13): a planned drain completes without unacceptable disruption —
//! every request in flight on the drained endpoint finishes (none lost, none
//! truncated), the endpoint stops admitting new work, no client is refused because
//! the gateway kept sending it there, and it is taken out of rotation: when new
//! requests stopped reaching it (haq's proxy, the gateway journal, observers), not
//! when haq's own readiness poll saw it draining.

use crate::scenario::words::plural;
use std::collections::HashSet;

use super::facts::{Evidence, Req};
use super::fate::{Finding, FindingKind};
use super::timeline::{FaultTimeline, Timeline, ms, routed_to};
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
        parts.extend(rejection_rule(ev, d, &mut evidence));
        parts.extend(removal_rule(plan, ev, d, &mut evidence));
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
            // A client that left on purpose lost nothing to the drain, nor one haq's own
            // host failed (`local`: the run is INVALID for it).
            !matches!(
                r.outcome,
                Outcome::Completed | Outcome::Abandoned | Outcome::Local
            ) || r.truncated()
                || flagged.contains(r.id.as_str())
        })
        .collect();
    evidence.push(format!(
        "{}: {} in flight on {} at the drain, {} lost or truncated{}",
        d.fault,
        plural(inflight.len() as u64, "request"),
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

/// The window in which new traffic to the drained endpoint is traffic to a draining
/// one: from the drain (grace aside) until a replacement is ready.
fn window(d: &FaultTimeline) -> (u64, u64) {
    let from = d.injected + ADMISSION_GRACE_US;
    let until = d
        .replacement
        .ready
        .as_ref()
        .map(|m| m.t)
        .unwrap_or(u64::MAX);
    (from, until)
}

/// No client is refused because the gateway sent its new request to the draining
/// endpoint: a drain the gateway handles is invisible to clients (Q7). The requests
/// that reached it come from haq's proxy (request ids of its upstream requests), the
/// gateway journal's attempts and the attribution header.
fn rejection_rule(
    ev: &Evidence,
    d: &FaultTimeline,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    let (from, until) = window(d);
    let within = |t: u64| t >= from && t < until;
    let mut reached: HashSet<&str> = ev
        .proxied
        .iter()
        .filter(|p| p.replica == d.replica && within(p.t))
        .filter_map(|p| p.id.as_deref())
        .collect();
    reached.extend(ev.attempts_to(&d.replica, from, until).map(|(_, req)| req));
    let refused: Vec<&Req> = ev
        .requests
        .iter()
        .filter(|r| {
            reached.contains(r.id.as_str())
                || (r.worker.as_deref() == Some(d.replica.as_str()) && within(r.dispatch))
        })
        .filter(|r| r.outcome == Outcome::Rejected || r.failed())
        .collect();
    let first = refused.first()?;
    evidence.push(format!(
        "{}: {} routed to the draining {} after the drain began {} refused to the client, first: {} ({}{})",
        d.fault,
        plural(refused.len() as u64, "new request"),
        d.replica,
        if refused.len() == 1 { "was" } else { "were" },
        first.id,
        first.outcome.as_str(),
        first.status.map(|s| format!(", HTTP {s}")).unwrap_or_default()
    ));
    Some((
        Status::Fail,
        format!(
            "{}: the drain reached clients: {} the gateway routed to the draining {} {} refused to the client ({}): it kept routing to a draining replica",
            d.fault,
            plural(refused.len() as u64, "new request"),
            d.replica,
            if refused.len() == 1 { "was" } else { "were" },
            outcomes(&refused)
        ),
    ))
}

/// `3 rejected, 1 http_error`: how the requests ended, most common first.
fn outcomes(reqs: &[&Req]) -> String {
    let mut n: Vec<(Outcome, usize)> = Vec::new();
    for r in reqs {
        match n.iter_mut().find(|(o, _)| *o == r.outcome) {
            Some(e) => e.1 += 1,
            None => n.push((r.outcome, 1)),
        }
    }
    n.sort_by_key(|e| std::cmp::Reverse(e.1));
    n.iter()
        .map(|(o, k)| format!("{k} {}", o.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The removal bound in ms and where it comes from: `criteria.maintenance.removal_max`,
/// else half the degraded interval (at most 10 s), as Routing's default.
fn bound_ms(plan: &Plan, d: &FaultTimeline) -> (f64, String) {
    match &plan.scenario.criteria.maintenance {
        Some(m) => (
            m.removal_max.as_secs_f64() * 1000.0,
            "criteria.maintenance.removal_max".into(),
        ),
        None => (
            (ms(d.injected, d.planned_until.unwrap_or(d.degraded_until)) / 2.0)
                .min(super::routing::DEFAULT_BOUND_MAX.as_secs_f64() * 1000.0),
            "default: half the degraded interval, at most 10 s".into(),
        ),
    }
}

/// The drained endpoint leaves rotation within the bound: the last new request
/// routed to it after the drain began (gateway journal, haq's proxy, observers,
/// attribution header) and the gateway's own word (journal, observers). haq's own
/// readiness poll says when the replica could be seen draining, not that the gateway
/// took it out: alone, it decides nothing.
fn removal_rule(
    plan: &Plan,
    ev: &Evidence,
    d: &FaultTimeline,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    let (bound, bound_src) = bound_ms(plan, d);
    let (from, until) = window(d);
    let routed = routed_to(ev, &d.replica, from, until);
    let said = d
        .detected
        .as_ref()
        .filter(|m| m.source != crate::trace::READINESS);
    if let Some(m) = &d.detected {
        evidence.push(format!(
            "{}: {} seen draining after {:.0} ms ({}: {})",
            d.fault,
            d.replica,
            ms(d.injected, m.t),
            m.source,
            m.detail
        ));
    }
    let out_at = match (routed.last(), said) {
        (Some(last), s) => {
            evidence.push(format!(
                "{}: {} routed to the draining {} after the drain began, the last at +{:.0} ms ({}: {})",
                d.fault,
                plural(routed.len() as u64, "new request"),
                d.replica,
                ms(d.injected, last.t),
                last.source,
                last.detail
            ));
            let t = s.map_or(last.t, |m| m.t.max(last.t));
            if t == last.t {
                let took = ms(d.injected, t);
                return (took > bound).then(|| {
                    (
                        Status::Fail,
                        format!(
                            "{}: the gateway kept routing new requests to the draining {} for {took:.0} ms ({} after the drain began; bound {bound:.0} ms, {bound_src})",
                            d.fault,
                            d.replica,
                            routed.len()
                        ),
                    )
                });
            }
            t
        }
        (None, Some(m)) => m.t,
        (None, None) => return never_removed(ev, d, evidence),
    };
    let took = ms(d.injected, out_at);
    evidence.push(format!(
        "{}: {} out of rotation after {took:.0} ms",
        d.fault, d.replica
    ));
    (took > bound).then(|| {
        (
            Status::Fail,
            format!(
                "{}: {} left rotation {took:.0} ms after the drain began (bound {bound:.0} ms, {bound_src})",
                d.fault, d.replica
            ),
        )
    })
}

/// Nothing was routed to the drained endpoint after the drain began and no observer
/// of the system said it left rotation: out of rotation at once when haq's proxy
/// (which sees every request that reaches the endpoint, refused or not) saw traffic
/// go on elsewhere; else a FAIL by the journal (it never said so), UNKNOWN without it.
/// Attribution headers alone cannot tell: a refusal carries none.
fn never_removed(
    ev: &Evidence,
    d: &FaultTimeline,
    evidence: &mut Vec<String>,
) -> Option<(Status, String)> {
    if ev.gateway.is_some() {
        return Some((
            Status::Fail,
            format!(
                "{}: the gateway never took the drained {} out of rotation",
                d.fault, d.replica
            ),
        ));
    }
    let confirmed = d.removal.as_ref().and_then(|r| r.confirmed.as_ref());
    if let Some(c) = confirmed.filter(|_| ev.has_proxy) {
        evidence.push(format!(
            "{}: no new request reached the draining {} after the drain began; traffic went on elsewhere (+{:.0} ms, {}: {})",
            d.fault,
            d.replica,
            ms(d.injected, c.t),
            c.source,
            c.detail
        ));
        return None;
    }
    Some((
        Status::Unknown,
        format!(
            "{}: no gateway journal, proxy attribution or observer of the system shows {} leaving rotation",
            d.fault, d.replica
        ),
    ))
}

/// New requests served by the drained endpoint after the drain began (grace aside).
fn admitted_after(ev: &Evidence, d: &FaultTimeline) -> Vec<String> {
    let (from, until) = window(d);
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
    if ev.has_proxy {
        return ev
            .proxied
            .iter()
            .filter(|p| p.replica == d.replica && p.t >= from && p.t < until && p.served())
            .map(|p| {
                format!(
                    "{} (haq proxy: answered in full by {})",
                    p.id.as_deref().unwrap_or("a request"),
                    d.replica
                )
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
    use crate::trace::ProxyEndKind;

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

    /// A `url` target behind haq's proxy, no gateway journal: w2 drained at 13 s with
    /// two requests in flight (both complete); every request's upstream request is
    /// on the trace. `to_w2` new requests after the drain go to w2, which refuses
    /// them (503), and the gateway hands the refusal to the client.
    fn behind_the_proxy(to_w2: usize) -> Tb {
        let p = dplan();
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.request(R::ok("in1", "fault", 12.8, "w2"));
        tb.request(R::ok("in2", "fault", 12.9, "w2"));
        tb.inject_as("drain-w2", "drain", "drain", "w2", us(13.0), true);
        tb.obs(us(13.1), crate::trace::READINESS, "w2", "not_ready");
        for k in 0..to_w2 {
            let t = 13.2 + k as f64 * 0.3;
            let id = format!("refused{k}");
            tb.request(R::ok(id.as_str(), "fault", t, "w2").rejected());
            tb.proxy_req(&id, us(t) + MS, "w2", 900 + k as u64);
            tb.ev(crate::trace::Event::ProxyEnd {
                t: us(t) + 3 * MS,
                replica: "w2".into(),
                conn: 900 + k as u64,
                id: Some(id.clone()),
                attempt: None,
                status: Some(503),
                events: 0,
                first_event: None,
                end: ProxyEndKind::Completed,
                held: None,
            });
        }
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        legs(&mut tb);
        tb
    }

    /// An upstream request at haq's proxy for every request a worker answered.
    fn legs(tb: &mut Tb) {
        let served: Vec<(String, u64, String)> = tb
            .events
            .iter()
            .filter_map(|e| match e {
                crate::trace::Event::Response {
                    t,
                    id,
                    worker: Some(w),
                    ..
                } => Some((id.clone(), *t, w.clone())),
                _ => None,
            })
            .collect();
        for (k, (id, t, w)) in served.into_iter().enumerate() {
            let start = t.saturating_sub(50 * MS);
            tb.proxy_req(&id, start, &w, k as u64);
            tb.proxy_end(&id, t + 300 * MS, (&w, k as u64), ProxyEndKind::Completed);
        }
    }

    #[test]
    fn a_gateway_that_keeps_routing_to_a_draining_replica_fails_without_a_journal() {
        let p = dplan();
        let v = pick(&behind_the_proxy(8).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains(
                "the drain reached clients: 8 new requests the gateway routed to the draining w2 were refused to the client (8 rejected)"
            ),
            "{}",
            v.summary
        );
        // Out of rotation is when traffic stopped reaching it, not when haq's poll saw
        // it draining: 8 requests over 2.1 s are beyond a 1 s bound.
        let p = plan(&[
            "faults[0].domain=drain",
            "faults[0].action=drain",
            "faults[0].name=drain-w2",
            "criteria.maintenance.removal_max=1s",
        ]);
        let v = pick(&behind_the_proxy(8).judge(&p), NAME);
        assert!(
            v.summary
                .contains("the gateway kept routing new requests to the draining w2 for 2301 ms"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_gateway_that_stops_routing_to_a_draining_replica_passes_without_a_journal() {
        let p = dplan();
        let v = pick(&behind_the_proxy(0).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("no new request reached the draining w2 after the drain began")),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn a_drained_replica_that_still_serves_new_requests_at_the_proxy_fails() {
        let p = dplan();
        let mut tb = behind_the_proxy(0);
        tb.proxy_req("late", us(14.0), "w2", 999);
        tb.proxy_end("late", us(14.5), ("w2", 999), ProxyEndKind::Completed);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary
                .contains("w2 kept admitting new requests after the drain began (1 served)"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn haqs_readiness_poll_alone_does_not_take_the_replica_out_of_rotation() {
        // No journal, no proxy: only haq's own poll saw w2 draining, and the headers
        // of the answers (a refusal carries none) cannot show nothing reached it.
        let p = dplan();
        let mut tb = run(Outcome::Completed, false, false).without_journal();
        tb.obs(us(13.1), crate::trace::READINESS, "w2", "not_ready");
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(v.summary.contains("leaving rotation"), "{}", v.summary);
    }

    #[test]
    fn a_client_that_left_a_draining_replica_on_purpose_lost_nothing() {
        let p = dplan();
        let v = pick(&run(Outcome::Abandoned, true, false).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn no_drain_is_not_evaluated() {
        let p = plan(&[]);
        let v = pick(&standard(&p).judge(&p), NAME);
        assert_eq!(v.status, Status::NotEvaluated);
    }
}
