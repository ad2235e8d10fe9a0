//! Routing (Q11, Q13): new traffic stops reaching the unusable endpoint. The traffic
//! removal time is the last new request routed to the endpoint after the fault (from
//! the gateway journal, haq's proxy — its legs, and the connects its closed listener
//! refused while a request looked for an upstream — observers, attribution headers,
//! or the gateway's answers saying the upstream could not be reached: see
//! timeline/dead.rs); it must be within `criteria.routing.traffic_removal_max` — or,
//! when the scenario gives no bound, within half the degraded interval (at most
//! [`DEFAULT_BOUND_MAX`]), so that traffic visibly stopped. Where no source would have
//! seen later traffic (`Removal::unseen`) it is UNKNOWN unless what was seen already
//! exceeds the bound. Detection time is reported separately.

use std::time::Duration;

use super::timeline::{FaultTimeline, Removal, Timeline, ms};
use super::verdict::{VerdictName, conclude};
use super::{Status, Verdict};
use crate::plan::Plan;
use crate::scenario::words::{noun, plural};

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
            let until = f.planned_until.unwrap_or(f.degraded_until);
            let half = ms(f.injected, until) / 2.0;
            let what = if f.planned_until.is_some() {
                "default: half the planned degraded interval (the run was cut short), at most 10 s"
            } else {
                "default: half the degraded interval, at most 10 s"
            };
            (
                half.min(DEFAULT_BOUND_MAX.as_secs_f64() * 1000.0),
                what.into(),
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
                "{}: no routing evidence (no gateway journal, haq proxy, x-haq-worker header or error answer naming an unreachable upstream)",
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
    } else if let Some(why) = &r.unseen {
        (
            Status::Unknown,
            format!(
                "{}: {why}: the run cannot tell that traffic to {} stopped ({} reached it after the fault, the last {:.0} ms after it)",
                f.fault, f.replica, r.routed_after_fault, removal
            ),
        )
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
    let refused = if r.refused_connects > 0 {
        format!(
            " ({} of them {} refused at its proxy)",
            r.refused_connects,
            noun(r.refused_connects, "connect attempt")
        )
    } else {
        String::new()
    };
    evidence.push(format!(
        "{}: {} routed to {} after the fault{refused}{}; sources: {}",
        f.fault,
        plural(r.routed_after_fault, "request"),
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
    if r.probe_connects > 0 {
        evidence.push(format!(
            "{}: {} to {} refused at its proxy while no client request was looking for an upstream or in the cadence of those (health checks): not counted",
            f.fault,
            plural(r.probe_connects, "connect"),
            f.replica
        ));
    }
    if r.unattributed > 0 {
        evidence.push(format!(
            "{}: {} saying an upstream could not be reached came while another endpoint was down too: not counted for {}",
            f.fault,
            plural(r.unattributed, "error answer"),
            f.replica
        ));
    }
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
    use crate::check::timeline::CLIENT;
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

    /// A request the gateway journal, haq's proxy and the response header all place
    /// on w2 is one request routed there, not three (a frozen replica's requests were
    /// counted once per source); a request with two attempts there is two.
    #[test]
    fn a_request_seen_by_several_sources_counts_once_per_attempt() {
        let p = plan(&["criteria.routing.traffic_removal_max=1s"]);
        let mut tb = standard(&p);
        // R::ok journals the attempt (at +100 µs) and names w2 in its header.
        tb.proxy_req("late", us(13.5), "w2", 1);
        tb.request(R::ok("late", "fault", 13.5, "w2"));
        let removal = |tb: &Tb| {
            tb.judge(&p)
                .timeline
                .fault("kill-w2")
                .and_then(|f| f.removal.clone())
                .expect("removal")
        };
        let r = removal(&tb);
        assert_eq!(r.routed_after_fault, 1, "{r:?}");
        assert_eq!(r.t, us(13.5), "{r:?}");
        tb.proxy_req("late", us(13.6), "w2", 2);
        attempt(&mut tb, 13.6, "late", "w2");
        assert_eq!(removal(&tb).routed_after_fault, 2);
    }

    #[test]
    fn a_request_sent_before_the_replacement_was_ready_and_routed_to_it_after_is_not_traffic_to_the_dead_one()
     {
        // CI saw it (shipped::full, seed 8): a request queued at the gateway from
        // 19.9 s, routed to w2's replacement once the gateway's own check saw it ready
        // (20.0 s), at 20.01 s. Its header says w2; dated at its dispatch it fell
        // before the replacement was ready and FAILed Routing.
        let p = plan(&["criteria.routing.traffic_removal_max=1s"]);
        let mut tb = standard(&p);
        tb.gw(
            us(20.0),
            GatewayEntry::UpstreamReady {
                worker: "w2".into(),
                why: "ready check passed".into(),
            },
        );
        tb.req("late", us(19.9));
        attempt(&mut tb, 20.01, "late", "w2");
        tb.head("late", us(20.1), "w2", "late/a1")
            .deltas("late", "L", us(20.1), &["a", "b"])
            .finish("late", "L", us(20.2))
            .end("late", us(20.2), crate::trace::Outcome::Completed);
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let f = j.timeline.fault("kill-w2").expect("timeline");
        let r = f.removal.as_ref().expect("removal");
        assert_eq!(r.routed_after_fault, 0, "{r:?}");
        let serving = f.replacement.serving.as_ref().expect("serving");
        assert_eq!(serving.t, us(20.01), "{serving:?}");
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

    /// The standard kill behind haq's proxies, no journal, no headers (a `url` target):
    /// a degraded phase of 20 s; requests to w1/w3 throughout; w2's proxy listener
    /// closed at the kill. `refusals` are the connects to w2 refused after it.
    fn behind_proxies(watching: bool, refusals: &[f64]) -> (Tb, Vec<&'static str>) {
        let sets = vec!["phases[2].duration=20s"];
        let p = plan(&sets);
        let mut tb = Tb::new().behind_proxies(watching);
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.listener(13.0005, "w2", false);
        for &t in refusals {
            tb.refused(t, "w2");
        }
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 41.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(42.0));
        (tb, sets)
    }

    #[test]
    fn a_router_that_sends_to_the_dead_replica_for_18_s_fails_a_10_s_bound_and_passes_30_s() {
        // vllm-router against a SIGKILLed server: ten failed sends over ~18 s before
        // its circuit breaker opens, each a connect refused at haq's closed listener.
        // Each as a request arrives (the router picks w2 for it); the router's health
        // checks of w2 meanwhile, once a second, come with no request: not counted.
        let mut sends: Vec<f64> = (0..10).map(|k| 13.1 + k as f64 * 2.0 + 5e-5).collect();
        sends.extend((0..28).map(|k| 13.55 + k as f64));
        let (tb, sets) = behind_proxies(true, &sends);
        let mut strict = sets.clone();
        strict.push("criteria.routing.traffic_removal_max=10s");
        let p = plan(&strict);
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("removed from w2 18100 ms after")
                && v.summary.contains("bound 10000 ms"),
            "{}",
            v.summary
        );
        assert!(
            v.evidence.iter().any(|e| e.contains("10 requests routed to w2 after the fault (10 of them connect attempts refused at its proxy)")),
            "{:?}",
            v.evidence
        );
        let r = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!(
            (r.refused_connects, r.unseen.as_deref()),
            (10, None),
            "{r:?}"
        );
        let mut loose = sets.clone();
        loose.push("criteria.routing.traffic_removal_max=30s");
        let v = pick(&tb.judge(&plan(&loose)), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    /// The gateway's health checks of the dead w2 every 300 ms from 13.16 s, each a
    /// connect refused while no request was looking for an upstream, but the one at
    /// 16.16 s, which came while `during` was being routed (to w1).
    fn health_checks_with_one_during_a_request(extra: &[f64]) -> (Tb, Vec<&'static str>) {
        let mut checks: Vec<f64> = (0..60).map(|k| 13.16 + k as f64 * 0.3).collect();
        checks.extend_from_slice(extra);
        let (mut tb, mut sets) = behind_proxies(true, &checks);
        tb.request(crate::check::testkit::R::ok(
            "during", "fault", 16.15995, "w1",
        ));
        sets.push("criteria.routing.traffic_removal_max=2s");
        (tb, sets)
    }

    #[test]
    fn a_health_check_that_comes_while_a_request_is_routed_elsewhere_is_not_traffic() {
        // CI saw it: the sim gateway's reference policy FAILed Routing for one health
        // check 3.2 s after the kill that fell into a request's routing.
        let (tb, sets) = health_checks_with_one_during_a_request(&[]);
        let j = tb.judge(&plan(&sets));
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let r = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!((r.refused_connects, r.probe_connects), (0, 60), "{r:?}");
        // A send to w2 in the same hole, beside that health check: one of the two is
        // the gateway's traffic, and it fails the 2 s bound.
        let (tb, sets) = health_checks_with_one_during_a_request(&[16.16001]);
        let j = tb.judge(&plan(&sets));
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        let r = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!((r.refused_connects, r.probe_connects), (1, 60), "{r:?}");
    }

    #[test]
    fn sends_to_the_dead_replica_off_the_health_checks_cadence_are_traffic() {
        // The same health checks, and a send to w2 with each of ten requests routed
        // from 13.2 s to 17.7 s: none fills a hole in the checks' series.
        let sends: Vec<f64> = (0..10).map(|k| 13.2 + k as f64 * 0.5 + 5e-5).collect();
        let (tb, sets) = health_checks_with_one_during_a_request(&sends);
        let j = tb.judge(&plan(&sets));
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("4700 ms after"), "{}", v.summary);
        let r = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!(r.refused_connects, 10, "{r:?}");
    }

    #[test]
    fn a_gateway_that_never_removes_the_dead_upstream_fails() {
        // Round robin onto the dead w2 to the end of load: a third of the connects.
        let sends: Vec<f64> = (0..93).map(|k| 13.3 + k as f64 * 0.3 + 5e-5).collect();
        let (tb, sets) = behind_proxies(true, &sends);
        let v = pick(&tb.judge(&plan(&sets)), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("default"), "{}", v.summary);
    }

    #[test]
    fn a_proxy_that_cannot_see_refused_connects_proves_nothing_by_its_silence() {
        // No CAP_NET_RAW: the listener closed at the kill and nothing more was seen.
        let (tb, sets) = behind_proxies(false, &[]);
        let j = tb.judge(&plan(&sets));
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("could not be seen") && v.summary.contains("CAP_NET_RAW"),
            "{}",
            v.summary
        );
        // The same run with the watch on, refusing nothing after the kill: PASS.
        let (tb, sets) = behind_proxies(true, &[]);
        let v = pick(&tb.judge(&plan(&sets)), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        // A trace from before the watch (no proxy_watch line) cannot tell either.
        let (mut tb, sets) = behind_proxies(true, &[]);
        tb.events
            .retain(|e| !matches!(e, crate::trace::Event::ProxyWatch { .. }));
        let v = pick(&tb.judge(&plan(&sets)), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("before haq watched them"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_blind_proxy_still_fails_traffic_it_saw_past_the_bound() {
        // Blind to refusals, but a connection accepted 12 s after the kill (the
        // listener reopened and closed again) is traffic to the dead endpoint.
        let (mut tb, mut sets) = behind_proxies(false, &[]);
        tb.listener(24.0, "w2", true);
        tb.ev(crate::trace::Event::ProxyRefused {
            t: us(25.0),
            replica: "w2".into(),
            peer: "127.0.0.1:40001".into(),
            how: crate::trace::RefusedHow::Reset,
        });
        tb.listener(25.001, "w2", false);
        sets.push("criteria.routing.traffic_removal_max=10s");
        let v = pick(&tb.judge(&plan(&sets)), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("12000 ms after"), "{}", v.summary);
    }

    /// No journal, no header, no proxy: only the client's answers.
    fn bare(p: &Plan) -> Tb {
        let mut tb = Tb::new().without_journal();
        tb.headers = false;
        tb.phases(p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb
    }

    #[test]
    fn error_answers_naming_an_unreachable_upstream_are_traffic_to_the_dead_endpoint() {
        let p = plan(&["criteria.routing.traffic_removal_max=5s"]);
        let mut tb = bare(&p);
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        for k in 0..6 {
            let t = 13.05 + k as f64 * 3.0;
            tb.answered(
                &format!("e{k}"),
                "fault",
                t,
                502,
                "<html><head><title>502 Bad Gateway</title></head>",
            );
        }
        // A 503 that sheds load says nothing of an unreachable upstream: not counted.
        tb.answered(
            "shed",
            "degraded",
            28.0,
            503,
            r#"{"error": {"message": "overloaded, retry later"}}"#,
        );
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("15050 ms after"), "{}", v.summary);
        let r = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!(r.routed_after_fault, 6);
        assert_eq!(r.last.map(|m| m.source), Some(CLIENT.to_string()));
        // Error answers only soon after the kill: they cannot show that traffic stopped.
        let mut tb = bare(&p);
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.answered(
            "e0",
            "fault",
            13.05,
            500,
            r#"{"error":{"message":"Connection error."}}"#,
        );
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("no source sees every request"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn error_answers_are_not_pinned_on_one_of_two_dead_endpoints() {
        let p = plan(&[
            "faults=[{name: kill-w2, domain: worker, action: kill, target: {replica: w2}, at: {phase: fault, offset: 2s}}, {name: kill-w3, domain: worker, action: kill, target: {replica: w3}, at: {phase: fault, offset: 4s}}]",
            "criteria.routing.traffic_removal_max=5s",
        ]);
        let mut tb = bare(&p);
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.inject("kill-w3", "w3", us(15.0), true);
        tb.answered(
            "only-w2-down",
            "fault",
            14.0,
            502,
            "upstream connect error: connection refused",
        );
        for k in 0..5 {
            tb.answered(
                &format!("both-{k}"),
                "fault",
                16.0 + k as f64 * 2.0,
                502,
                "connection refused",
            );
        }
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let w2 = j
            .timeline
            .fault("kill-w2")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!((w2.routed_after_fault, w2.unattributed), (1, 5), "{w2:?}");
        let w3 = j
            .timeline
            .fault("kill-w3")
            .and_then(|f| f.removal.clone())
            .expect("removal");
        assert_eq!((w3.routed_after_fault, w3.unattributed), (0, 5), "{w3:?}");
        let v = pick(&j, NAME);
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("5 error answers") && e.contains("not counted for w2")),
            "{:?}",
            v.evidence
        );
    }
}
