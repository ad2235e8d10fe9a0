//! End to end on the sim: real processes, real SIGKILL, real sockets on 127.0.0.1.

use haq::check::Status;
use haq::trace::{Event, FaultLine};

use crate::support::{LOOSE_SLO, plan, rejudge, run, verdict, verdict_in};

/// The quickstart with short phases: w2 is killed 2 s into the fault phase while
/// streams are running on it.
fn quick(extra: &[&str]) -> haq::plan::Plan {
    let mut sets = vec![
        "phases[0].duration=4s",
        "phases[1].duration=6s",
        "phases[2].duration=4s",
        "faults[0].at.offset=2s",
        "workload.mix.classes[0].output_tokens={uniform: [80, 120]}",
    ];
    sets.extend(LOOSE_SLO);
    sets.extend(extra);
    plan("scenarios/quickstart.yaml", &sets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_passes_on_the_reference_gateway_and_names_the_killed_worker() {
    let r = run(quick(&[]), "quickstart").await;
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(
        fate.status,
        Status::Pass,
        "{fate:?}\nfindings: {:?}",
        r.judgement.findings
    );
    assert_eq!(verdict(&r, "Latency").status, Status::Pass);
    // The kill removed exactly w2, the gateway stopped routing to it, and the two
    // survivors served the protected load in SLO (Q13).
    for name in ["Failure-Domain", "Routing", "Capacity"] {
        let v = verdict(&r, name);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }
    // What the scenario does not exercise says so, with the reason, never PASS.
    for name in ["Overload", "Recovery", "Maintenance"] {
        let v = verdict(&r, name);
        assert_eq!(v.status, Status::NotEvaluated, "{v:?}");
        assert!(!v.summary.is_empty());
    }
    // The timeline: injected, detected by the gateway, traffic removed, in-flight
    // requests settled — each with its source.
    let f = &r.judgement.timeline.faults[0];
    let detected = f.detected.as_ref().expect("detected");
    assert_eq!(detected.source, "gateway journal");
    assert!(detected.t >= f.injected);
    let removal = f.removal.as_ref().expect("removal");
    assert!(removal.confirmed.is_some(), "{removal:?}");
    assert!(
        f.in_flight.caught > 0 && f.in_flight.settled.is_some(),
        "{:?}",
        f.in_flight
    );
    assert_eq!(r.judgement.overall(), Status::Pass);

    // report.json names the killed worker, with its verification.
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(r.run_dir.join("report.json")).expect("report"),
    )
    .expect("json");
    assert_eq!(report["result"], "PASS");
    crate::report::assert_valid_report(&report);
    for f in ["report.md", "junit.xml", "requests.csv"] {
        assert!(r.run_dir.join(f).is_file(), "{f} not written");
    }
    assert_eq!(report["faults"][0]["replica"], "w2");
    assert_eq!(report["faults"][0]["verified"], true);
    assert!(report["faults"][0]["pid"].as_u64().is_some());

    // The cut streams ended with the explicit error, and only streams from w2 were cut.
    use haq::check::fate::{Observed, Stage};
    let cut: Vec<_> = r
        .judgement
        .fate_table
        .iter()
        .filter(|row| row.stage == Stage::Streaming && row.observed != Observed::Completed)
        .collect();
    assert!(
        !cut.is_empty(),
        "no stream was caught by the kill: {:?}",
        r.judgement.fate_table
    );
    for row in cut {
        assert_eq!(row.outcome, haq::trace::Outcome::ExplicitError, "{row:?}");
        assert_eq!(row.declared, Some(haq::scenario::Fate::Fail));
    }
    // The gateway journal was read: each caught request has its attempts, by id.
    assert!(
        r.judgement
            .evidence
            .iter()
            .any(|e| e.source == "gateway journal"
                && e.state == haq::check::evidence::SourceState::Used),
        "{:?}",
        r.judgement.evidence
    );
    assert!(
        r.judgement
            .fate_requests
            .iter()
            .all(|f| !f.attempts.is_empty() && f.workers.contains(&"w2".to_string())),
        "{:#?}",
        r.judgement.fate_requests
    );

    // `haq check RUN_DIR` reproduces the verdicts from the stored trace alone.
    let (_, again) = haq::check::judge_dir(&r.run_dir).expect("re-judge");
    assert_eq!(again.verdicts, r.judgement.verdicts);
    assert_eq!(
        serde_json::to_value(&again.phases).ok(),
        serde_json::to_value(&r.judgement.phases).ok()
    );

    // The same stored trace, judged against an SLO it cannot meet: Latency FAILs,
    // naming the phase and the metric.
    let mut strict = r.plan.clone();
    strict.scenario.slo.ttft_p95 = haq::wire::units::Dur(std::time::Duration::from_micros(1));
    let tp = r.run_dir.join(haq::trace::TRACE_FILE);
    let j = haq::check::judge(&strict, || {
        haq::trace::read(&tp).expect("trace").map_while(Result::ok)
    });
    let lat = verdict_in(&j, "Latency");
    assert_eq!(lat.status, Status::Fail);
    assert!(
        lat.summary.contains("baseline: p95 TTFT"),
        "{}",
        lat.summary
    );

    // The same run, all its evidence, judged as if the scenario had declared w3: the
    // test removed another replica than declared, Failure-Domain FAILs.
    let mut elsewhere = r.plan.clone();
    elsewhere.faults[0].replicas = vec!["w3".into()];
    let fd = verdict_in(&rejudge(&r, &elsewhere), "Failure-Domain");
    assert_eq!(fd.status, Status::Fail, "{fd:?}");
    assert!(
        fd.summary.contains("removed w2, but the scenario declares"),
        "{}",
        fd.summary
    );

    // The trace holds every chunk with its arrival time, and the fault.
    let events: Vec<Event> = haq::trace::read(&tp)
        .expect("trace")
        .map_while(Result::ok)
        .collect();
    assert!(matches!(
        events.first(),
        Some(Event::RunStart { seed: 42, .. })
    ));
    assert!(matches!(
        events.last(),
        Some(Event::RunEnd {
            interrupted: false,
            ..
        })
    ));
    assert!(events.iter().any(
        |e| matches!(e, Event::Fault(FaultLine { replica, verified: true, .. }) if replica == "w2")
    ));
    let chunks = events
        .iter()
        .filter(|e| matches!(e, Event::Chunk { .. }))
        .count();
    assert!(chunks > 1000, "only {chunks} chunks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_retries_after_the_first_delta_fails_request_fate() {
    let r = run(quick(&["target.gateway.policy=naive-retry"]), "naive-retry").await;
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(fate.status, Status::Fail, "{fate:?}");
    let kinds: std::collections::BTreeSet<_> =
        r.judgement.findings.iter().map(|f| f.kind).collect();
    use haq::check::fate::FindingKind::*;
    for k in [
        TwoWriters,
        DuplicatedOutput,
        StitchedOutput,
        RetryAfterFirstDelta,
    ] {
        assert!(kinds.contains(&k), "{k:?} not in {kinds:?}");
    }
    // Each restart is shown with its evidence: request, chunks, attempt ids, text.
    let d = r
        .judgement
        .findings
        .iter()
        .find(|f| f.kind == RetryAfterFirstDelta)
        .expect("finding");
    assert_eq!(d.chunks.len(), 2, "{d:?}");
    assert_eq!(d.attempts.len(), 2, "{d:?}");
    assert!(d.excerpt.is_some(), "{d:?}");
    assert_eq!(r.judgement.overall(), Status::Fail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_ends_cut_streams_with_done_fails_request_fate() {
    let r = run(
        quick(&["target.gateway.policy=silent-truncate"]),
        "silent-truncate",
    )
    .await;
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(fate.status, Status::Fail, "{fate:?}");
    assert!(
        r.judgement
            .findings
            .iter()
            .all(|f| f.kind == haq::check::fate::FindingKind::SilentTruncation)
    );
}
