//! The declared policy per stage against what happened (Q8), and the table.

use super::*;
use crate::check::fate::Observed;
use crate::scenario::Fate;

/// r1 caught before its first delta by the kill of w2; ends as `outcome`.
fn failed_before_first_delta(h: &mut Tb, outcome: Outcome) {
    h.req("r1", 0)
        .kill(20 * MS, "w2")
        .end("r1", 100 * MS, outcome);
}

#[test]
fn a_failure_before_the_first_delta_where_the_policy_says_retry_is_retry_not_made() {
    let mut h = Tb::history();
    failed_before_first_delta(&mut h, Outcome::Rejected);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::RetryNotMade);
    contains(&f.detail, "before its first delta by kill-w2 on w2");
    contains(&f.detail, "the policy says");
    let row = &j.fate_table[0];
    assert_eq!(
        (row.stage, row.observed, row.outcome),
        (Stage::BeforeFirstDelta, Observed::Failed, Outcome::Rejected)
    );
    assert_eq!(status(&j), Status::Fail);
}

#[test]
fn a_retry_that_was_made_or_impossible_is_not_retry_not_made() {
    // Two attempts, both failed: the retry was made (M2 within budget).
    let mut h = Tb::journaled();
    failed_before_first_delta(&mut h, Outcome::Rejected);
    h.attempt("r1", 1, "w2", (MS, 0), (25 * MS, "failed", 0))
        .attempt("r1", 2, "w3", (26 * MS, 0), (90 * MS, "failed", 0));
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // One attempt, then no other replica was ready.
    let mut h = Tb::journaled();
    failed_before_first_delta(&mut h, Outcome::Rejected);
    h.attempt("r1", 1, "w2", (MS, 0), (25 * MS, "failed", 0))
        .gw(
            26 * MS,
            crate::wire::journal::GatewayEntry::NoUpstream {
                req: "r1".into(),
                attempts: 1,
            },
        );
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // One attempt and nothing else: the gateway just gave up.
    let mut h = Tb::journaled();
    failed_before_first_delta(&mut h, Outcome::Rejected);
    h.attempt("r1", 1, "w2", (MS, 0), (25 * MS, "failed", 0));
    let j = h.judge(&quickstart(&[]));
    assert_eq!(kinds(&j), vec![FindingKind::RetryNotMade]);
}

#[test]
fn the_stage_comes_from_the_journal_phases_where_it_has_them() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 4);
    h.attempt("r1", 1, "w2", (MS, 0), (30 * MS, "failed", 0))
        .gw_other(
            5 * MS,
            serde_json::json!({"ev": "phase", "req": "r1", "attempt": "r1/a1", "phase": "queued"}),
        )
        .gw_other(
            15 * MS,
            serde_json::json!({"ev": "phase", "req": "r1", "attempt": "r1/a1", "phase": "prefill"}),
        )
        .attempt("r1", 2, "w1", (31 * MS, 0), (200 * MS, "finished", 4))
        .kill(20 * MS, "w2");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Prefill]);
    let row = &j.fate_table[0];
    assert_eq!(
        (row.declared, row.observed),
        (Some(Fate::Retry), Observed::Retried)
    );
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let r = &j.fate_requests[0];
    assert_eq!(r.attempts, vec!["r1/a1", "r1/a2"]);
    assert_eq!(r.workers, vec!["w2", "w1"]);
    assert_eq!(r.delivered, 4);
}

#[test]
fn a_request_not_yet_sent_when_the_fault_hit_is_new() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 4);
    h.kill(2 * MS, "w2")
        .attempt("r1", 1, "w2", (5 * MS, 0), (8 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (9 * MS, 0), (200 * MS, "finished", 4));
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::New]);
    assert_eq!(j.fate_table[0].declared, Some(Fate::Reroute));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn requests_elsewhere_or_already_done_are_not_caught() {
    let mut h = Tb::journaled();
    // r1 streams from w1 the whole time; r2 finished on w2 just before the kill.
    super::clean(&mut h, "r1", "w1", 0, 8);
    h.attempt("r1", 1, "w1", (MS, 0), (300 * MS, "finished", 8));
    super::clean(&mut h, "r2", "w2", 0, 4);
    h.attempt("r2", 1, "w2", (MS, 0), (100 * MS, "finished", 4))
        .kill(120 * MS, "w2");
    let j = h.judge(&quickstart(&[]));
    assert!(j.fate_table.is_empty(), "{:?}", j.fate_table);
    // The fault tested nothing: UNKNOWN, never PASS.
    assert_eq!(status(&j), Status::Unknown);
}

#[test]
fn a_stream_cut_with_the_explicit_error_passes_the_default_policy() {
    let mut h = Tb::journaled();
    cut_properly(&mut h)
        .attempt("r1", 1, "w2", (MS, 0), (95 * MS, "failed", 3))
        .gw(
            96 * MS,
            crate::wire::journal::GatewayEntry::ExplicitError {
                req: "r1".into(),
                delivered: 3,
                why: "stream: reset".into(),
            },
        );
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let row = &j.fate_table[0];
    assert_eq!(
        (
            row.stage,
            row.declared,
            row.observed,
            row.outcome,
            row.count
        ),
        (
            Stage::Streaming,
            Some(Fate::Fail),
            Observed::Failed,
            Outcome::ExplicitError,
            1
        )
    );
    // Where the policy declares migrate, the same explicit error is a mismatch.
    let j = h.judge(&quickstart(&["policy.streaming=migrate"]));
    let f = finding(&j, FindingKind::FateMismatch);
    contains(&f.detail, "the policy says migrate, it was failed");
}

#[test]
fn a_retry_where_the_policy_says_fail_is_a_mismatch() {
    let fail = quickstart(&[
        "policy.queued=fail",
        "policy.prefill=fail",
        "policy.decode=fail",
    ]);
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 4);
    h.attempt("r1", 1, "w2", (MS, 0), (30 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (31 * MS, 0), (200 * MS, "finished", 4))
        .kill(20 * MS, "w2");
    let j = h.judge(&fail);
    let f = finding(&j, FindingKind::FateMismatch);
    contains(&f.detail, "the policy says fail, it was retried");
    // A 503 instead: what the policy says.
    let mut h = Tb::journaled();
    h.req("r1", 0)
        .end("r1", 40 * MS, Outcome::Rejected)
        .attempt("r1", 1, "w2", (MS, 0), (30 * MS, "failed", 0))
        .kill(20 * MS, "w2");
    let j = h.judge(&fail);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass);
}

#[test]
fn an_unknown_stage_under_a_policy_that_differs_by_stage_is_unknown() {
    // Client-side only: before the first delta, it could be new (reroute) or queued /
    // prefill / decode (fail) — and it was retried. Not decidable: UNKNOWN.
    let p = quickstart(&[
        "policy.queued=fail",
        "policy.prefill=fail",
        "policy.decode=fail",
    ]);
    let mut h = Tb::history();
    let w = words("u", 4);
    h.req("r1", 0)
        .head("r1", 60 * MS, "w1", "r1/a2")
        .deltas("r1", "A", 60 * MS, &refs(&w))
        .finish("r1", "A", 200 * MS)
        .end("r1", 210 * MS, Outcome::Completed)
        .kill(20 * MS, "w2");
    let j = h.judge(&p);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    let v = fate(&j);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "its stage is not known");
    assert_eq!(j.fate_table[0].declared, None);
    // Under the default policy every candidate says retry or reroute: decidable.
    let j = h.judge(&quickstart(&[]));
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    assert_eq!(j.fate_table[0].observed, Observed::Retried);
}

#[test]
fn a_planned_drain_is_not_judged_as_a_request_fate_fault() {
    let mut h = Tb::history();
    failed_before_first_delta(&mut h, Outcome::Rejected);
    for e in &mut h.events {
        if let Event::Fault(FaultLine { action, .. }) = e {
            *action = crate::scenario::FaultAction::Drain;
        }
    }
    let j = h.judge(&quickstart(&[]));
    assert!(j.fate_table.is_empty());
    assert!(!has(&j, FindingKind::RetryNotMade));
    // A scenario whose only fault is a planned drain tests no request fate: not
    // evaluated (Maintenance judges it), not UNKNOWN for want of a caught request.
    let drain = quickstart(&[
        "faults[0]={name: drain-w2, domain: drain, action: drain, target: {replica: w2}, at: {phase: fault, offset: 1s}}",
    ]);
    let v = fate(&h.judge(&drain)).clone();
    assert_eq!(v.status, Status::NotEvaluated, "{v:?}");
    contains(&v.summary, "a planned drain is judged by Maintenance");
    // Output that no healthy stream could produce still fails it.
    let mut h = Tb::history();
    let w = words("d", 3);
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w))
        .end("r1", 210 * MS, Outcome::Reset);
    assert_eq!(status(&h.judge(&drain)), Status::Fail);
}

/// r1's one attempt on w2: scheduled, preempted at 15 ms, recomputed at 40 ms, finished;
/// a fault hit w2 at 20 ms, while r1 waited to be recomputed.
fn preempted_and_recomputed() -> Tb {
    use crate::wire::journal::WorkerEntry as W;
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w2", 0, 4);
    h.attempt("r1", 1, "w2", (MS, 0), (200 * MS, "finished", 4))
        .fault(20 * MS, "w2", "command");
    let attempt = Some("r1/a1".to_string());
    let scheduled = |recompute| W::Scheduled {
        req: "r1".into(),
        attempt: attempt.clone(),
        cached_tokens: 0,
        recompute,
    };
    h.wk(2 * MS, "w2", scheduled(false))
        .wk(
            15 * MS,
            "w2",
            W::Preempted {
                req: "r1".into(),
                attempt: attempt.clone(),
                generated: 0,
            },
        )
        .wk(40 * MS, "w2", scheduled(true));
    h
}

#[test]
fn a_recompute_on_the_same_replica_matches_a_declared_recompute() {
    let j = preempted_and_recomputed().judge(&quickstart(&[
        "policy.queued=recompute",
        // the trace's fault (a command on w2) is the declared one
        "faults[0].name=command-w2",
    ]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let row = &j.fate_table[0];
    assert_eq!(
        (row.stage, row.declared, row.observed),
        (Stage::Queued, Some(Fate::Recompute), Observed::Recomputed)
    );
    // The engine's own recovery gives one complete answer: no finding under retry either.
    let j = preempted_and_recomputed().judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(j.fate_table[0].observed, Observed::Recomputed);
    // Where the policy says recompute, a retry on another replica is a mismatch.
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 4);
    h.attempt("r1", 1, "w2", (MS, 0), (30 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (31 * MS, 0), (200 * MS, "finished", 4))
        .kill(20 * MS, "w2");
    let j = h.judge(&quickstart(&[
        "policy.queued=recompute",
        "policy.prefill=recompute",
        "policy.decode=recompute",
    ]));
    let f = finding(&j, FindingKind::FateMismatch);
    contains(&f.detail, "the policy says recompute, it was retried");
}

/// r1 on w2, no gateway journal: w2 is hit at 80 ms and the client stamps its
/// first deltas at 83 ms; the stream ends with the seed's explicit error.
fn output_stamped_just_after_the_fault(h: &mut Tb, action: &str) {
    let w = words("k", 2);
    h.req("r1", 0)
        .head("r1", 83 * MS, "w2", "r1/a1")
        .deltas("r1", "A", 83 * MS, &refs(&w))
        .seed_error("r1", 150 * MS, 2)
        .end("r1", 151 * MS, Outcome::ExplicitError)
        .fault(80 * MS, "w2", action);
}

#[test]
fn output_that_left_a_killed_replica_before_the_kill_was_delivered_even_if_stamped_after() {
    // A dead process sends nothing: what the client got from w2 left it before the kill.
    let mut h = Tb::history();
    output_stamped_just_after_the_fault(&mut h, "kill");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Streaming]);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);

    // A freeze keeps the replica alive: without other evidence the client's stamps
    // decide (nothing was delivered by 80 ms: the policy's retry was not made).
    let mut h = Tb::history();
    output_stamped_just_after_the_fault(&mut h, "freeze");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::BeforeFirstDelta]);
    assert!(has(&j, FindingKind::RetryNotMade), "{:#?}", j.findings);

    // The proxy saw w2 send r1's first event before the freeze: delivered output.
    let mut h = Tb::history();
    output_stamped_just_after_the_fault(&mut h, "freeze");
    h.proxy_req("r1", 5 * MS, "w2", 1).proxy_end_after(
        "r1",
        101 * MS,
        ("w2", 1),
        crate::trace::ProxyEndKind::UpstreamReset,
        Some(79 * MS),
    );
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Streaming]);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}
