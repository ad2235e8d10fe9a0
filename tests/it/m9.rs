//! The five token-loop fault scenarios of SPEC M9, as shipped in `scenarios/`, each run
//! on the reference gateway (PASS, with the expected outcome visible in the trace) and
//! on the flawed policy it targets (FAIL, for the right reason).

use std::collections::BTreeSet;

use haq::RunResult;
use haq::check::Status;
use haq::check::fate::FindingKind;
use haq::trace::{Event, FaultLine, Outcome, ProxyEndKind};

use crate::support::{LOOSE_SLO, events, plan, run, verdict};

/// Short phases for the tests. What is tested here is request fate, not speed: the
/// client's own schedule slip and the latency bounds are loosened for a debug build on
/// a busy 2-core machine (Latency has its own PASS/FAIL tests).
fn m9(file: &str, policy: &str) -> haq::plan::Plan {
    let p = format!("target.gateway.policy={policy}");
    let mut sets = vec![
        "phases[0].duration=3s",
        "phases[1].duration=5s",
        "phases[2].duration=3s",
        "client.max_late=3s",
        &p,
    ];
    sets.extend(LOOSE_SLO);
    plan(&format!("scenarios/{file}.yaml"), &sets)
}

fn passes(r: &RunResult) {
    let bad: Vec<_> = r
        .judgement
        .verdicts
        .iter()
        .filter(|v| !matches!(v.status, Status::Pass | Status::NotEvaluated))
        .collect();
    assert!(
        bad.is_empty(),
        "{bad:#?}\nfindings: {:#?}",
        r.judgement.findings
    );
    assert_eq!(r.judgement.overall(), Status::Pass);
}

fn findings_on(r: &RunResult, id: &str) -> BTreeSet<FindingKind> {
    r.judgement
        .findings
        .iter()
        .filter(|f| f.request == id)
        .map(|f| f.kind)
        .collect()
}

/// One attempt as the proxy saw it: replica, attempt, how it ended, events the replica
/// sent, the event haq held.
type Leg = (String, Option<String>, ProxyEndKind, u32, Option<u32>);

/// The probe's end, its delivered text and the attempts the client saw.
struct Probe {
    outcome: Outcome,
    deltas: Vec<String>,
    cids: BTreeSet<String>,
    attempt: Option<String>,
    end_detail: Option<String>,
    delivered_claim: Option<u64>,
    /// (replica, attempt, end, events, held) per attempt, from the proxy.
    path: Vec<Leg>,
}

fn probe(evs: &[Event], id: &str) -> Probe {
    let mut p = Probe {
        outcome: Outcome::Cancelled,
        deltas: Vec::new(),
        cids: BTreeSet::new(),
        attempt: None,
        end_detail: None,
        delivered_claim: None,
        path: Vec::new(),
    };
    for e in evs {
        match e {
            Event::Response { id: i, attempt, .. } if i == id => p.attempt.clone_from(attempt),
            Event::Chunk {
                id: i,
                kind,
                text,
                cid,
                raw,
                ..
            } if i == id => {
                if kind.is_delta() {
                    p.deltas.push(text.clone().unwrap_or_default());
                    p.cids.extend(cid.clone());
                }
                if let Some(v) = raw
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
                {
                    p.delivered_claim = p
                        .delivered_claim
                        .or(v["error"]["delivered_output_tokens"].as_u64());
                }
            }
            Event::End {
                id: i,
                outcome,
                detail,
                ..
            } if i == id => {
                p.outcome = *outcome;
                p.end_detail.clone_from(detail);
            }
            Event::ProxyEnd {
                id: Some(i),
                replica,
                attempt,
                end,
                events,
                held,
                ..
            } if i == id => p
                .path
                .push((replica.clone(), attempt.clone(), *end, *events, *held)),
            _ => {}
        }
    }
    p
}

fn fault<'a>(evs: &'a [Event], name: &str) -> &'a Event {
    evs.iter()
        .find(|e| matches!(e, Event::Fault(FaultLine { name: n, .. }) if n == name))
        .unwrap_or_else(|| panic!("no fault {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_1_kill_in_prefill_retries_to_one_complete_answer() {
    let r = run(m9("m9-1-kill-in-prefill", "reference"), "m9-1").await;
    passes(&r);
    let evs = events(&r);
    let p = probe(&evs, "probe-kill-in-prefill");
    assert_eq!(p.outcome, Outcome::Completed, "{:?}", p.end_detail);
    assert_eq!(p.deltas.len(), 48, "one complete answer");
    assert_eq!(p.cids.len(), 1, "no fragment of the killed attempt");
    assert!(p.attempt.as_deref().is_some_and(|a| a.ends_with("/a2")));
    // The killed attempt sent nothing downstream: the worker died in its prefill.
    let first = &p.path[0];
    assert_eq!(first.3, 0, "no event left the killed replica: {:?}", p.path);
    let Event::Fault(FaultLine {
        verified, trigger, ..
    }) = fault(&evs, "kill-in-prefill")
    else {
        unreachable!()
    };
    assert!(*verified);
    assert!(
        trigger
            .as_deref()
            .is_some_and(|t| t.contains("hook prefill")),
        "{trigger:?}"
    );

    let r = run(m9("m9-1-kill-in-prefill", "no-health-check"), "m9-1-flaw").await;
    let v = verdict(&r, "Routing");
    assert_eq!(v.status, Status::Fail, "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_2_computed_not_sent_is_not_delivered_and_the_proxy_hold_lands_in_between() {
    let r = run(m9("m9-2-computed-not-sent", "reference"), "m9-2").await;
    passes(&r);
    let evs = events(&r);
    // k = 1: delta 1 computed, held, dropped with the replica; retried, one answer.
    // The replica may compute more before the SIGKILL lands (a busy machine: delta 2
    // reached the proxy, into the hold, in one full-suite run); what matters is that
    // the hold began at delta 1 and none of it reached the client.
    let p1 = probe(&evs, "probe-first-token-computed");
    assert_eq!(p1.outcome, Outcome::Completed, "{:?}", p1.end_detail);
    assert_eq!(p1.cids.len(), 1, "no fragment of the killed attempt");
    assert!(p1.attempt.as_deref().is_some_and(|a| a.ends_with("/a2")));
    assert!(
        matches!(p1.path[0], (_, _, ProxyEndKind::HeldDropped, n, Some(1)) if n >= 1),
        "{:?}",
        p1.path
    );
    // k = 3: the engine computed three deltas (the proxy received them), the client
    // got two, and the explicit error counts two.
    let p3 = probe(&evs, "probe-third-token-computed");
    assert_eq!(p3.outcome, Outcome::ExplicitError);
    assert_eq!(p3.deltas.len(), 2);
    assert_eq!(p3.delivered_claim, Some(2));
    let (replica, _, end, computed, held) = &p3.path[0];
    assert_eq!((*end, *held), (ProxyEndKind::HeldDropped, Some(3)));
    assert!(*computed >= 3, "the engine computed delta 3");
    assert_eq!(p3.path.len(), 1, "no second generation");
    // The kill came after the engine wrote delta 3 and before the gateway got it.
    let Event::Fault(FaultLine {
        t,
        triggered,
        replica: killed,
        verified,
        ..
    }) = fault(&evs, "third-token-computed")
    else {
        unreachable!()
    };
    assert!(*verified);
    assert_eq!(killed, replica);
    let first_event = evs.iter().find_map(|e| match e {
        Event::ProxyEnd {
            id: Some(i),
            first_event,
            ..
        } if i == "probe-third-token-computed" => *first_event,
        _ => None,
    });
    assert!(first_event.is_some_and(|f| f <= triggered.unwrap_or(0)));
    assert!(triggered.is_some_and(|tr| tr <= *t));

    let r = run(m9("m9-2-computed-not-sent", "silent-truncate"), "m9-2-flaw").await;
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);
    assert!(
        findings_on(&r, "probe-third-token-computed").contains(&FindingKind::SilentTruncation),
        "{:?}",
        r.judgement.findings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_3_kill_after_the_first_delta_ends_with_the_explicit_error() {
    let r = run(m9("m9-3-kill-after-first-delta", "reference"), "m9-3").await;
    passes(&r);
    let evs = events(&r);
    let p = probe(&evs, "probe-kill-after-first-delta");
    assert_eq!(p.outcome, Outcome::ExplicitError, "{:?}", p.end_detail);
    assert!(!p.deltas.is_empty());
    assert_eq!(p.delivered_claim, Some(p.deltas.len() as u64));
    assert_eq!(p.cids.len(), 1);
    assert_eq!(p.path.len(), 1, "no second generation: {:?}", p.path);

    let r = run(
        m9("m9-3-kill-after-first-delta", "naive-retry"),
        "m9-3-flaw",
    )
    .await;
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);
    let f = findings_on(&r, "probe-kill-after-first-delta");
    assert!(
        f.contains(&FindingKind::TwoWriters) || f.contains(&FindingKind::RetryAfterFirstDelta),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_4_a_cut_path_is_fenced_and_nothing_is_duplicated() {
    let r = run(m9("m9-4-network-cut", "reference"), "m9-4").await;
    passes(&r);
    let evs = events(&r);
    let p = probe(&evs, "probe-cut-path");
    assert_eq!(p.outcome, Outcome::ExplicitError, "{:?}", p.end_detail);
    assert_eq!(p.cids.len(), 1, "one writer");
    let Event::Fault(FaultLine {
        verified,
        pid,
        detail,
        ..
    }) = fault(&evs, "cut-path")
    else {
        unreachable!()
    };
    assert!(*verified && pid.is_none(), "{detail}");
    // The worker stayed alive: nothing exited, the path was healed at the end.
    assert!(
        !evs.iter().any(|e| matches!(e, Event::Exited { .. })),
        "the process must stay alive"
    );
    assert!(evs.iter().any(
        |e| matches!(e, Event::Heal { name, verified: Some(true), .. } if name == "cut-path")
    ));

    // The flaw: a spare attempt starts unfenced on a silent (cut-off) stream — the
    // probe's, or any other caught by the cut.
    let r = run(m9("m9-4-network-cut", "soft-timeout"), "m9-4-flaw").await;
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);
    assert!(
        r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::TwoWriters),
        "{:?}",
        r.judgement.findings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_5_a_tool_call_that_ran_before_the_kill_does_not_run_again() {
    let executions = |r: &RunResult| -> Vec<haq::wire::journal::ToolExecution> {
        haq::wire::journal::read_lines::<
            haq::wire::journal::Stamped<haq::wire::journal::ToolExecution>,
        >(&r.run_dir.join("tools.jsonl"))
        .expect("tools.jsonl")
        .expect("parses")
        .into_iter()
        .map(|s| s.entry)
        .filter(|e| e.logical_request_id == "probe-kill-after-tool-call")
        .collect()
    };
    let r = run(m9("m9-5-kill-after-tool-call", "reference"), "m9-5").await;
    passes(&r);
    let ex = executions(&r);
    assert_eq!(
        ex.len(),
        2,
        "asked twice (before and after the crash): {ex:?}"
    );
    assert_eq!(
        ex.iter().filter(|e| !e.deduplicated).count(),
        1,
        "executed once: {ex:?}"
    );
    let p = probe(&events(&r), "probe-kill-after-tool-call");
    assert_eq!(p.outcome, Outcome::Completed, "{:?}", p.end_detail);

    let r = run(
        m9("m9-5-kill-after-tool-call", "no-tool-idempotency"),
        "m9-5-flaw",
    )
    .await;
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);
    assert!(
        findings_on(&r, "probe-kill-after-tool-call").contains(&FindingKind::DuplicateToolEffect),
        "{:?}",
        r.judgement.findings
    );
    assert_eq!(executions(&r).iter().filter(|e| !e.deduplicated).count(), 2);
}
