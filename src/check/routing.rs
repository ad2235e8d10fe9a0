//! Routing (Q11, Q13): new traffic stops reaching the unusable endpoint. The traffic
//! removal time is the last new request routed to the endpoint after the fault (from
//! the gateway journal, proxy observations or attribution headers); it must be within
//! `criteria.routing.traffic_removal_max` — or, when the scenario gives no bound,
//! within half the degraded interval (at most [`DEFAULT_BOUND_MAX`]), so that traffic
//! visibly stopped. Detection time is reported separately.

use std::time::Duration;

use super::timeline::{FaultTimeline, Removal, Timeline, ms};
use super::verdict::{VerdictName, conclude};
use super::{Status, Verdict};
use crate::plan::Plan;

pub const NAME: VerdictName = VerdictName::Routing;

pub const DEFAULT_BOUND_MAX: Duration = Duration::from_secs(10);

/// The removal bound for one fault, in ms, and where it comes from.
pub fn bound_ms(plan: &Plan, f: &FaultTimeline) -> (f64, String) {
    match &plan.scenario.criteria.routing {
        Some(r) => (
            r.traffic_removal_max.as_secs_f64() * 1000.0,
            "criteria.routing.traffic_removal_max".into(),
        ),
        None => {
            let half = ms(f.injected, f.degraded_until) / 2.0;
            (
                half.min(DEFAULT_BOUND_MAX.as_secs_f64() * 1000.0),
                "default: half the degraded interval, at most 10 s".into(),
            )
        }
    }
}

pub fn verdict(plan: &Plan, tl: &Timeline) -> Verdict {
    let faults: Vec<&FaultTimeline> = tl.faults.iter().filter(|f| f.removes).collect();
    if faults.is_empty() {
        return Verdict::new(
            NAME,
            Status::NotEvaluated,
            "no fault takes an endpoint out of service",
            Vec::new(),
        );
    }
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    for f in faults {
        parts.push(judge_fault(plan, f, &mut evidence));
    }
    conclude(NAME, &parts, evidence)
}

/// One removing fault: its detection and routing evidence, and its part — the
/// removal time against the bound, UNKNOWN without the evidence to tell.
fn judge_fault(plan: &Plan, f: &FaultTimeline, evidence: &mut Vec<String>) -> (Status, String) {
    let (bound, bound_src) = bound_ms(plan, f);
    evidence.push(detection_line(f));
    if !f.verified {
        return (
            Status::Unknown,
            format!(
                "{}: the fault was not verified, so there was no dead endpoint to route around",
                f.fault
            ),
        );
    }
    let Some(r) = &f.removal else {
        return (
            Status::Unknown,
            format!(
                "{}: no routing evidence (no gateway journal, proxy attribution or x-haq-worker header)",
                f.fault
            ),
        );
    };
    removal_evidence(f, r, evidence);
    let removal = ms(f.injected, r.t);
    let line = if r.until_heal {
        format!(
            "{}: {} got new traffic until the fault was healed, {:.0} ms after it (bound {:.0} ms, {bound_src}): routing never took it out",
            f.fault, f.replica, removal, bound
        )
    } else {
        format!(
            "{}: traffic removed from {} {:.0} ms after the fault (bound {:.0} ms, {bound_src})",
            f.fault, f.replica, removal, bound
        )
    };
    if removal > bound {
        (Status::Fail, line)
    } else if r.confirmed.is_none() {
        (
            Status::Unknown,
            format!(
                "{}: no request was routed elsewhere after the last one to {}: the run cannot tell that traffic stopped",
                f.fault, f.replica
            ),
        )
    } else {
        (Status::Pass, line)
    }
}

/// When the endpoint was seen unusable, and by whom (reported, not judged).
fn detection_line(f: &FaultTimeline) -> String {
    match &f.detected {
        Some(d) => format!(
            "{}: {} detected after {:.0} ms ({}: {})",
            f.fault,
            f.replica,
            ms(f.injected, d.t),
            d.source,
            d.detail
        ),
        None => format!("{}: no detection of {} observed", f.fault, f.replica),
    }
}

/// The requests routed to the endpoint after the fault, and the first routed elsewhere.
fn removal_evidence(f: &FaultTimeline, r: &Removal, evidence: &mut Vec<String>) {
    evidence.push(format!(
        "{}: {} requests routed to {} after the fault{}; sources: {}",
        f.fault,
        r.routed_after_fault,
        f.replica,
        r.last
            .as_ref()
            .map(|l| format!(
                ", the last at +{:.0} ms ({}: {})",
                ms(f.injected, l.t),
                l.source,
                l.detail
            ))
            .unwrap_or_default(),
        r.sources.join(", ")
    ));
    if let Some(c) = &r.confirmed {
        evidence.push(format!(
            "{}: traffic went on elsewhere: +{:.0} ms {} ({})",
            f.fault,
            ms(f.injected, c.t),
            c.detail,
            c.source
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;
    use crate::wire::journal::GatewayEntry;

    fn attempt(tb: &mut Tb, t: f64, id: &str, w: &str) {
        tb.gw(
            us(t),
            GatewayEntry::AttemptStart {
                req: id.into(),
                attempt: format!("{id}/a1"),
                worker: w.into(),
                delivered: 0,
            },
        );
    }

    #[test]
    fn passes_when_traffic_leaves_the_dead_worker_within_the_bound() {
        let p = plan(&["criteria.routing.traffic_removal_max=1s"]);
        let mut tb = standard(&p);
        // One request still went to w2 right after the kill (refused, retried).
        attempt(&mut tb, 13.02, "fault-0099", "w2");
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary.contains("removed from w2 20 ms after"),
            "{}",
            v.summary
        );
        assert!(
            v.evidence[0].contains("detected after 50 ms"),
            "{:?}",
            v.evidence
        );
        let f = j.timeline.fault("kill-w2").expect("timeline");
        assert_eq!(f.removal.as_ref().map(|r| r.routed_after_fault), Some(1));
    }

    #[test]
    fn a_gateway_that_keeps_routing_to_the_dead_worker_fails() {
        let p = plan(&["criteria.routing.traffic_removal_max=1s"]);
        let mut tb = standard(&p);
        for k in 0..30 {
            attempt(&mut tb, 13.2 + k as f64 * 0.5, &format!("x{k}"), "w2");
        }
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("bound 1000 ms"), "{}", v.summary);
        // Without a declared bound the default (half the degraded interval) fails it too.
        let p = plan(&[]);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("default"), "{}", v.summary);
    }

    #[test]
    fn attribution_headers_alone_show_traffic_still_reaching_the_endpoint() {
        let p = plan(&["criteria.routing.traffic_removal_max=1s"]);
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.evidence.iter().any(|e| e.contains("x-haq-worker header")),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn no_routing_evidence_is_unknown_and_no_fault_is_not_evaluated() {
        let p = plan(&[]);
        let mut t2 = Tb::new().without_journal();
        t2.headers = false;
        t2.phases(&p);
        t2.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        t2.inject("kill-w2", "w2", us(13.0), true);
        t2.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        t2.run_end(us(32.0));
        let v = pick(&t2.judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(v.summary.contains("no routing evidence"), "{}", v.summary);
        let p = plan(&["faults=[]"]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.run_end(us(32.0));
        assert_eq!(pick(&tb.judge(&p), NAME).status, Status::NotEvaluated);
    }

    #[test]
    fn traffic_that_never_resumes_elsewhere_is_unknown() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        attempt(&mut tb, 13.5, "late", "w2");
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("cannot tell that traffic stopped"),
            "{}",
            v.summary
        );
    }

    /// w2 frozen at 13 s for `secs`, healed; headers only (no journal). Traffic goes
    /// to `during` while frozen, to all three after the heal.
    fn freeze(secs: f64, during: &'static [&'static str]) -> (Plan, Tb) {
        let p = plan(&[
            "faults[0]={name: freeze-w2, domain: worker, action: freeze, target: {replica: w2}, at: {phase: fault, offset: 2s}}",
            &format!("faults[0].duration={}ms", (secs * 1000.0) as u64),
            "criteria.routing.traffic_removal_max=1s",
        ]);
        let heal = 13.0 + secs;
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 13.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject_as("freeze-w2", "worker", "freeze", "w2", us(13.0), true);
        tb.steady("fault", 13.05, heal, 10.0, rr(during));
        tb.heal("freeze-w2", "w2", us(heal));
        tb.steady("fault", heal + 0.05, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.run_end(us(32.0));
        (p, tb)
    }

    #[test]
    fn traffic_to_a_healed_freeze_after_its_heal_is_not_traffic_to_a_dead_endpoint() {
        // Routed around while frozen, back in the rotation once healed: PASS. (Before
        // the heal bounded the window, the traffic after it FAILed Routing.)
        let (p, tb) = freeze(3.0, &["w1", "w3"]);
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let f = j.timeline.fault("freeze-w2").expect("timeline");
        let r = f.removal.as_ref().expect("removal");
        assert_eq!((r.routed_after_fault, r.until_heal), (0, false), "{r:?}");
        // The endpoint came back by itself: ready again and serving, from the headers.
        let back = f.replacement.serving.as_ref().expect("serving again");
        assert!(
            back.t > us(16.0) && back.source == "x-haq-worker header",
            "{back:?}"
        );
        assert!(
            j.timeline
                .entries
                .iter()
                .any(|e| e.event == "w2 receiving traffic again")
        );
        // A healed freeze is no replacement step: Recovery is not evaluated.
        assert_eq!(pick(&j, "Recovery").status, Status::NotEvaluated);
    }

    #[test]
    fn a_short_freeze_healed_before_the_bound_passes_though_never_routed_around() {
        let (p, tb) = freeze(0.6, &["w1", "w2", "w3"]);
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary
                .contains("got new traffic until the fault was healed"),
            "{}",
            v.summary
        );
        let r = j
            .timeline
            .fault("freeze-w2")
            .and_then(|f| f.removal.clone());
        assert!(r.is_some_and(|r| r.until_heal));
    }

    #[test]
    fn a_long_freeze_the_gateway_keeps_routing_to_fails() {
        let (p, tb) = freeze(4.0, &["w1", "w2", "w3"]);
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("until the fault was healed") && v.summary.contains("bound 1000 ms"),
            "{}",
            v.summary
        );
    }
}
