//! Failure-Domain's tests: each rule of the verdict, from a trace that breaks it.

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

#[test]
fn a_trace_cut_before_the_fault_was_due_says_so() {
    // Killed (no run_end, nothing flushed after 11 s) before kill-w2 at 12 s.
    let p = plan(&[]);
    let mut tb = standard(&p);
    let cut = us(11.0);
    tb.events
        .retain(|e| !matches!(e, Event::Fault(_) | Event::RunEnd { .. }) && e.t() < cut);
    let v = pick(&tb.judge(&p), NAME);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    assert!(
        v.summary
            .contains("the trace ends before the fault was due (+12.0s)"),
        "{}",
        v.summary
    );
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

/// w2 frozen at 13 s for 3 s, then haq's heal at 16 s, `verified` or not; traffic
/// around w2 while frozen, to all three after.
fn frozen(verified: bool) -> (crate::plan::Plan, Tb) {
    let p = plan(&[
        "faults[0]={name: freeze-w2, domain: worker, action: freeze, target: {replica: w2}, at: {phase: fault, offset: 2s}}",
        "faults[0].duration=3s",
    ]);
    let mut tb = Tb::new().without_journal();
    tb.phases(&p);
    tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
    tb.inject_as("freeze-w2", "worker", "freeze", "w2", us(13.0), true);
    tb.steady("fault", 13.05, 16.0, 10.0, rr(&["w1", "w3"]));
    tb.ev(Event::Heal {
        t: us(16.0),
        name: "freeze-w2".into(),
        detail: "duration ended: SIGCONT sent; w2 still in state T".into(),
        replica: Some("w2".into()),
        verified: Some(verified),
    });
    tb.steady("fault", 16.05, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
    tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
    tb.run_end(us(32.0));
    (p, tb)
}

#[test]
fn a_fault_whose_heal_was_not_verified_fails() {
    let (p, tb) = frozen(true);
    let v = pick(&tb.judge(&p), NAME);
    assert_eq!(v.status, Status::Pass, "{v:?}");
    // The same fault, its undo unverified: it may outlive its declared 3 s.
    let (p, tb) = frozen(false);
    let v = pick(&tb.judge(&p), NAME);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.summary.contains(
            "freeze-w2: heal of w2 not verified: duration ended: SIGCONT sent; w2 still in state T"
        ),
        "{}",
        v.summary
    );
}
