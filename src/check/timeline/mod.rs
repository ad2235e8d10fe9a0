//! The failure timeline (Q11), per fault: injected, detected, traffic removed (when new
//! requests stopped reaching the endpoint — not the same as detection), in-flight
//! requests recovered or terminated, the degraded interval, the replacement stages
//! (requested → started → ready → receiving traffic) and full recovery. Every mark
//! names the evidence it was read from.
//!
//! The vocabulary is in `types`; the routing evidence in `routed`; detection and
//! traffic removal in `detection`; the way back in `replacement` and
//! `full_recovery`; one fault's stages in `fault`; the rows people read in `entries`.

mod dead;
mod detection;
mod entries;
mod fault;
mod full_recovery;
mod replacement;
mod routed;
mod types;

pub use dead::heal_of;
pub use full_recovery::envelope_restored;
pub use routed::{routed_to, routing_sources};
pub use types::{
    BACKEND, CLIENT, Entry, FaultTimeline, HEADER, InFlight, JOURNAL, Mark, PROXY, Removal,
    Replacement, Timeline, ms,
};

use crate::check::facts::Evidence;
use crate::metrics::SecondStats;
use crate::plan::Plan;

/// The run's timeline: each fault's stages, full recovery, and the rows in time order.
pub fn build(plan: &Plan, ev: &Evidence, seconds: &[SecondStats]) -> Timeline {
    let faults: Vec<FaultTimeline> = ev
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| fault::fault_timeline(ev, i, f))
        .collect();
    let full = full_recovery::full_recovery(plan, ev, &faults, seconds);
    let entries = entries::entries(ev, &faults, full.as_ref());
    Timeline {
        faults,
        full_recovery: full,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;
    use crate::trace::Outcome;

    #[test]
    fn the_standard_kill_has_every_stage_with_its_source() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.obs(us(13.2), "endpoint watcher", "w2", "not_ready");
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        assert_eq!(f.injected, us(13.0));
        let d = f.detected.as_ref().expect("detected");
        // The earliest observer wins: the gateway at +50 ms, not the watcher at +200.
        assert_eq!((d.t, d.source.as_str()), (us(13.05), JOURNAL));
        let r = f.removal.as_ref().expect("removal");
        assert_eq!(r.routed_after_fault, 0);
        assert_eq!(r.t, f.injected);
        assert!(r.confirmed.as_ref().is_some_and(|c| c.t == us(13.1)));
        assert_eq!(f.degraded_until, us(31.0));
        assert!(j.timeline.full_recovery.is_none());
        let events: Vec<&str> = j
            .timeline
            .entries
            .iter()
            .map(|e| e.event.as_str())
            .collect();
        assert!(events.contains(&"kill-w2 injected (kill w2)"), "{events:?}");
        assert!(events.contains(&"w2 detected"), "{events:?}");
        assert!(events.contains(&"traffic removed from w2"), "{events:?}");
        assert!(events.contains(&"degraded interval ends"), "{events:?}");
        let det = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "w2 detected")
            .expect("entry");
        assert_eq!(det.after_fault_ms, Some(50.0));
        assert_eq!(det.at_s, 12.05);
        // In time order.
        assert!(j.timeline.entries.windows(2).all(|w| w[0].t <= w[1].t));
    }

    #[test]
    fn requests_in_flight_at_the_kill_are_counted_as_recovered_or_terminated() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.request(R::ok("cut", "fault", 12.95, "w2").outcome(Outcome::ExplicitError));
        tb.request(R::ok("retried", "fault", 12.99, "w1").ttft(300.0));
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        assert_eq!(f.in_flight.caught, 1, "{:?}", f.in_flight);
        assert_eq!(f.in_flight.terminated, 1);
    }

    #[test]
    fn requests_in_flight_the_client_left_are_neither_recovered_nor_terminated() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.request(R::ok("cut", "fault", 12.95, "w2").outcome(Outcome::ExplicitError));
        tb.request(R::ok("gone", "fault", 12.96, "w2").outcome(Outcome::Abandoned));
        tb.request(R::ok("mine", "fault", 12.97, "w2").outcome(Outcome::Local));
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        let i = &f.in_flight;
        assert_eq!(
            (i.caught, i.recovered, i.terminated, i.left),
            (3, 0, 1, 2),
            "{i:?}"
        );
        let row = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "in-flight requests settled")
            .expect("entry");
        contains(
            &row.detail,
            "3 caught: 0 recovered, 1 terminated, 2 left by the client or ended by haq",
        );
    }

    #[test]
    fn replacement_stages_and_full_recovery() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.removed(us(13.05), "w2", "connection failed");
        tb.obs(
            us(13.5),
            "haq fault injector",
            "w2",
            "replacement_requested",
        );
        tb.obs(us(14.0), "haq fault injector", "w2", "process_started");
        tb.ready(us(16.0), "w2");
        tb.steady("fault", 13.1, 16.5, 10.0, rr(&["w1", "w3"]));
        tb.steady("fault", 16.5, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        let rp = &f.replacement;
        assert_eq!(rp.requested.as_ref().map(|m| m.t), Some(us(13.5)));
        assert_eq!(rp.started.as_ref().map(|m| m.t), Some(us(14.0)));
        assert_eq!(
            rp.ready.as_ref().map(|m| (m.t, m.source.as_str())),
            Some((us(16.0), JOURNAL))
        );
        let s = rp.serving.as_ref().expect("serving");
        // Dated by the journal's attempt (0.1 ms after the dispatch the header dates).
        assert_eq!((s.t, s.source.as_str()), (us(16.6) + 100, JOURNAL));
        // Removal ends at readiness: traffic to the replacement is not traffic to the dead.
        assert_eq!(f.removal.as_ref().map(|r| r.routed_after_fault), Some(0));
        let full = j.timeline.full_recovery.as_ref().expect("full recovery");
        assert!(full.t >= s.t, "{full:?}");
    }

    #[test]
    fn without_a_gateway_journal_the_observers_date_detection() {
        // A `url` target: health checker, readiness and EndpointSlice watchers are the
        // detection sources (docs/evidence.md); the earliest one dates the detection.
        let p = plan(&[]);
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.obs(us(13.9), "EndpointSlice watcher", "w2", "endpoint_removed");
        tb.obs(us(13.4), "readiness probe", "w2", "not_ready");
        tb.obs(us(13.2), "health checker", "w2", "unhealthy");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        let d = f.detected.as_ref().expect("detected");
        assert_eq!((d.t, d.source.as_str()), (us(13.2), "health checker"));
        // Removal comes from the attribution headers, and says so.
        let r = f.removal.as_ref().expect("removal");
        // (With no journal and no proxy, the gateway's error answers are read too.)
        assert_eq!(r.sources, [HEADER, CLIENT]);
        let e = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "traffic removed from w2")
            .expect("removal entry");
        assert_eq!(e.source, HEADER);
    }

    #[test]
    fn haqs_readiness_watch_dates_detection_only_when_the_system_saw_nothing() {
        let watch = crate::trace::READINESS;
        let p = plan(&[]);
        // With the gateway journal: the gateway's detection (+50 ms) is the system's,
        // though haq's poll saw the replica down first.
        let mut tb = standard(&p);
        tb.obs(us(13.01), watch, "w2", "not_ready");
        let j = tb.judge(&p);
        let d = j.timeline.fault("kill-w2").and_then(|f| f.detected.clone());
        assert_eq!(d.map(|d| d.source), Some(JOURNAL.to_string()));
        // Without a journal or another observer: haq's poll, and it says so.
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.obs(us(13.1), watch, "w2", "not_ready");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let d = j.timeline.fault("kill-w2").and_then(|f| f.detected.clone());
        assert_eq!(
            d.map(|d| (d.t, d.source)),
            Some((us(13.1), watch.to_string()))
        );
    }

    /// w2 frozen at 13 s for 3 s; haq's heal at 16 s says `verified`; traffic
    /// around w2 while frozen, to all three after.
    fn frozen(verified: bool) -> crate::check::Judgement {
        let p = plan(&[
            "faults[0]={name: freeze-w2, domain: worker, action: freeze, target: {replica: w2}, at: {phase: fault, offset: 2s}}",
            "faults[0].duration=3s",
        ]);
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject_as("freeze-w2", "worker", "freeze", "w2", us(13.0), true);
        tb.steady("fault", 13.05, 16.0, 10.0, rr(&["w1", "w3"]));
        tb.ev(crate::trace::Event::Heal {
            t: us(16.0),
            name: "freeze-w2".into(),
            detail: "duration ended: SIGCONT sent; w2 still in state T".into(),
            replica: Some("w2".into()),
            verified: Some(verified),
        });
        tb.steady("fault", 16.05, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.run_end(us(32.0));
        tb.judge(&p)
    }

    #[test]
    fn a_heal_haq_could_not_verify_is_not_a_heal() {
        let events = |j: &crate::check::Judgement| -> Vec<String> {
            j.timeline.entries.iter().map(|e| e.event.clone()).collect()
        };
        let j = frozen(true);
        let f = j.timeline.fault("freeze-w2").expect("fault");
        assert!(f.healed.is_some() && f.heal_unverified.is_none(), "{f:?}");
        assert!(f.replacement.serving.is_some(), "{f:?}");
        let ev = events(&j);
        assert!(ev.contains(&"freeze-w2 healed".to_string()), "{ev:?}");
        // The same heal, unverified: the timeline says so and reads no way back.
        let j = frozen(false);
        let f = j.timeline.fault("freeze-w2").expect("fault");
        assert!(f.healed.is_none(), "{f:?}");
        let h = f.heal_unverified.as_ref().expect("the unverified heal");
        assert_eq!(h.t, us(16.0));
        assert!(f.replacement.serving.is_none(), "{f:?}");
        // Traffic after haq's undo is not blamed on the gateway either.
        let r = f.removal.as_ref().expect("removal");
        assert_eq!(r.routed_after_fault, 0, "{r:?}");
        let ev = events(&j);
        assert!(!ev.contains(&"freeze-w2 healed".to_string()), "{ev:?}");
        assert!(
            !ev.contains(&"w2 receiving traffic again".to_string()),
            "{ev:?}"
        );
        let row = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "heal of freeze-w2 not verified")
            .expect("the unverified heal's row");
        assert_eq!(
            row.detail,
            "duration ended: SIGCONT sent; w2 still in state T"
        );
        assert!(j.timeline.full_recovery.is_none());
    }
}
