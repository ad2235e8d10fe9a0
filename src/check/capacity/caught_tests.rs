//! Requests a later fault caught in flight are Request-Fate's, not Capacity's.

use super::*;
use crate::check::testkit::*;
use crate::trace::Outcome;

/// [`BASE`] with a second kill, of w1, 5 s into the fault phase (16 s): the degraded
/// interval is kill-w2's, from 13 s to the end of degraded (31 s).
fn two_kills() -> Plan {
    plan_from(
        &format!(
            "{BASE}  - {{name: kill-w1, domain: worker, action: kill, target: {{replica: w1}}, at: {{phase: fault, offset: 5s}}}}\n"
        ),
        &[],
    )
}

/// The base run with kill-w2 at 13 s, kill-w1 at 16 s, and twelve protected streams
/// on w1 sent at `at` s that end in the explicit error 1 s later: caught by kill-w1
/// when sent before it, sent into the dead w1 when after.
fn judged(at: f64) -> crate::check::Judgement {
    let p = two_kills();
    let mut tb = Tb::new();
    tb.phases(&p);
    tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
    tb.steady("fault", 11.0, 21.0, 10.0, rr(&["w1", "w3"]));
    tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w3"]));
    tb.inject("kill-w2", "w2", us(13.0), true);
    for k in 0..12 {
        let r = R::ok(format!("cut{k}"), "fault", at + f64::from(k) * 0.01, "w1")
            .itl(100.0)
            .outcome(Outcome::ExplicitError);
        tb.request(r);
    }
    tb.inject("kill-w1", "w1", us(16.0), true);
    tb.run_end(us(32.0));
    tb.judge(&p)
}

#[test]
fn streams_a_later_fault_cut_are_not_counted_as_the_degraded_topologys_failures() {
    // Twelve of ~190 protected requests (6%, SLO ≤ 5%) cut by kill-w1: its doing,
    // judged by Request-Fate as the first fault's catch is.
    let j = judged(15.5);
    let v = pick(&j, NAME);
    assert_eq!(v.status, Status::Pass, "{v:?}");
    let w = j.degraded.as_ref().expect("window");
    // The twelve, and the steady load's streams on w1 at 16 s.
    assert!(w.caught >= 12 && w.failed == 0, "{w:?}");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("caught in flight by a later fault")),
        "{:?}",
        v.evidence
    );
}

#[test]
fn streams_sent_into_a_dead_replica_after_the_fault_still_count() {
    // The same twelve sent after kill-w1 into the dead w1: the gateway failed them,
    // nothing caught them in flight — the degraded topology's failures.
    let j = judged(16.5);
    let v = pick(&j, NAME);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.summary.contains("failed"), "{}", v.summary);
    let w = j.degraded.as_ref().expect("window");
    assert_eq!(w.failed, 12, "{w:?}");
}
