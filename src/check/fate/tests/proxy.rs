//! haq's proxy as evidence where the gateway keeps no journal (a url target with the
//! proxy between the gateway and its replicas): its upstream legs are the attempts.

use super::*;
use crate::check::fate::Observed;
use crate::trace::ProxyEndKind as K;

#[test]
fn a_gateway_that_closes_the_upstream_when_the_client_leaves_cancels_it() {
    let mut h = Tb::history();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .end("r1", 1000 * MS, Outcome::Cancelled)
        .proxy_end("r1", 1050 * MS, ("b1", 1), K::DownstreamClosed);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn an_upstream_the_proxy_sees_run_to_completion_after_the_client_left_is_not_cancelled() {
    let mut h = Tb::history();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .end("r1", 1000 * MS, Outcome::IdleTimeout)
        .proxy_end("r1", 3500 * MS, ("b1", 1), K::Completed);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "`b1#1` on b1: kept running 2500 ms");
    contains(&f.detail, "ended as finished");
}

#[test]
fn proxy_legs_are_the_attempts_of_a_request_retried_before_its_first_delta() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "b2", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_end("r1", 25 * MS, ("b1", 1), K::UpstreamReset)
        .proxy_req("r1", 26 * MS, "b2", 4)
        .proxy_end("r1", 200 * MS, ("b2", 4), K::Completed)
        .kill(20 * MS, "b1");
    // The trace's fault (a kill of b1) is the declared one.
    let j = h.judge(&quickstart(&["faults[0].name=kill-b1"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let r = &j.fate_requests[0];
    assert_eq!(r.attempts, vec!["b1#1", "b2#4"]);
    assert_eq!(r.observed, Observed::Retried);
    // A failure after one leg only: nobody retried it.
    let mut h = Tb::history();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .proxy_end("r1", 25 * MS, ("b1", 1), K::UpstreamReset)
        .end("r1", 30 * MS, Outcome::Rejected)
        .kill(20 * MS, "b1");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(kinds(&j), vec![FindingKind::RetryNotMade]);
}

#[test]
fn output_the_proxy_saw_computed_but_the_client_never_got_is_the_decode_stage() {
    // M9 case 2: the replica sent its first event at 18 ms, the proxy held it, the
    // replica died at 20 ms; the gateway retried.
    let mut h = Tb::history();
    clean(&mut h, "r1", "b2", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_end_after("r1", 25 * MS, ("b1", 1), K::HeldDropped, Some(18 * MS))
        .proxy_req("r1", 26 * MS, "b2", 4)
        .proxy_end("r1", 200 * MS, ("b2", 4), K::Completed)
        .kill(20 * MS, "b1");
    // The trace's fault (a kill of b1) is the declared one.
    let j = h.judge(&quickstart(&["faults[0].name=kill-b1"]));
    assert_eq!(stages(&j), vec![Stage::Decode]);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
}

/// r1's client leaves after two deltas (workload abandonment) at 100 ms while its one
/// upstream request runs on b1 (through haq's proxy, no gateway journal).
fn left_after_two(h: &mut Tb) {
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .deltas("r1", "c1", 40 * MS, &["a ", "b "])
        .end("r1", 100 * MS, Outcome::Abandoned);
}

/// No fault: abandonment alone is what Request-Fate judges.
fn no_fault() -> crate::plan::Plan {
    plan(&["faults=[]"])
}

#[test]
fn a_client_that_leaves_with_its_upstream_cancelled_passes_request_fate() {
    let mut h = Tb::history();
    left_after_two(&mut h);
    h.proxy_end("r1", 104 * MS, ("b1", 1), K::DownstreamClosed);
    let j = h.judge(&no_fault());
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    let v = fate(&j);
    assert_eq!(v.status, Status::Pass, "{v:?}");
    contains(&v.summary, "1 requests whose client left early");
}

#[test]
fn an_upstream_that_runs_on_after_the_client_left_fails_request_fate() {
    let mut h = Tb::history();
    left_after_two(&mut h);
    h.proxy_end("r1", 2600 * MS, ("b1", 1), K::Completed);
    let j = h.judge(&no_fault());
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(
        &f.detail,
        "`b1#1` on b1: kept running 2500 ms after the client went away and ended as finished (grace 2000 ms) (abandoned)",
    );
    assert_eq!(fate(&j).status, Status::Fail);
}

#[test]
fn an_upstream_request_the_proxy_never_saw_end_while_it_went_on_is_not_cancelled() {
    let mut h = Tb::history();
    left_after_two(&mut h);
    // Nothing more of b1#1; the proxy keeps seeing other traffic for 5 s.
    clean(&mut h, "later", "b2", 5000 * MS, 2);
    h.proxy_req("later", 5001 * MS, "b2", 2)
        .proxy_end("later", 5200 * MS, ("b2", 2), K::Completed);
    let j = h.judge(&no_fault());
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "haq's proxy saw no end of the upstream request");
    // The trace stops right after the client left: nothing to say.
    let mut h = Tb::history();
    left_after_two(&mut h);
    let j = h.judge(&no_fault());
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn an_upstream_request_sent_after_the_client_left_is_held_to_the_grace_and_a_second_is_a_spare() {
    // The client leaves before its first token; the gateway only then sends the
    // request upstream, and closes it at once: cancelled.
    let mut h = Tb::history();
    h.req("r1", 0)
        .end("r1", 10 * MS, Outcome::Abandoned)
        .proxy_req("r1", 12 * MS, "b1", 1)
        .proxy_end("r1", 20 * MS, ("b1", 1), K::DownstreamClosed);
    let j = h.judge(&no_fault());
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // Then it tries another replica for nobody.
    h.proxy_req("r1", 30 * MS, "b2", 7)
        .proxy_end("r1", 40 * MS, ("b2", 7), K::DownstreamClosed);
    let j = h.judge(&no_fault());
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(
        &f.detail,
        "`b2#7` on b2 started 20 ms after the client went away (abandoned): a spare attempt for nobody",
    );
}

#[test]
fn a_client_that_leaves_with_no_upstream_evidence_leaves_request_fate_not_evaluated() {
    let mut h = Tb::history();
    h.req("r1", 0)
        .deltas("r1", "c1", 40 * MS, &["a ", "b "])
        .end("r1", 100 * MS, Outcome::Abandoned);
    let j = h.judge(&no_fault());
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(fate(&j).status, Status::NotEvaluated, "{:?}", fate(&j));
}

/// A gateway that re-sends the request to another replica after the first delta and
/// splices the rest on under the original chunk ids: the client's stream is clean and
/// byte-identical to one answer, but haq's proxy saw two upstream requests for it —
/// a retry after the first delta (M2) and stitched output (M3). The same stream with
/// one upstream request is clean.
#[test]
fn a_second_upstream_request_after_the_first_delta_is_a_finding_though_the_stream_is_clean() {
    let splice = |h: &mut Tb| {
        clean(h, "r1", "a", 0, 8);
        h.proxy_req("r1", MS, "a", 1)
            .leg_end("r1", 60 * MS, ("a", 1), K::DownstreamClosed, 45 * MS)
            .proxy_req("r1", 61 * MS, "b", 3)
            .leg_end("r1", 205 * MS, ("b", 3), K::Completed, 80 * MS);
    };
    let mut h = Tb::history();
    splice(&mut h);
    let j = h.judge(&quickstart(&[]));
    assert_eq!(
        kinds(&j),
        vec![
            FindingKind::RetryAfterFirstDelta,
            FindingKind::StitchedOutput
        ],
        "{:#?}",
        j.findings
    );
    assert_eq!(status(&j), Status::Fail);
    for f in &j.findings {
        assert_eq!(f.attempts, vec!["a#1", "b#3"], "{f:?}");
    }
    let retry = finding(&j, FindingKind::RetryAfterFirstDelta);
    contains(
        &retry.detail,
        "haq's proxy saw a second upstream request, `b#3` after 1 deltas of `a#1`",
    );
    contains(
        &finding(&j, FindingKind::StitchedOutput).detail,
        "the client's chunk ids do not change",
    );
    // One upstream request for the same stream: nothing to find.
    let mut h = Tb::history();
    clean(&mut h, "r1", "a", 0, 8);
    h.proxy_req("r1", MS, "a", 1)
        .leg_end("r1", 205 * MS, ("a", 1), K::Completed, 45 * MS);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // Declared migration: a token-continuous hand-over the proxy saw is legal.
    let mut h = Tb::history();
    splice(&mut h);
    let j = h.judge(&quickstart(&["policy.streaming=migrate"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

/// A duplicate request after the first delta whose answer the gateway dropped (the
/// first upstream request wrote the whole stream): a retry after the first delta, not
/// stitched output. Both alive at once is two writers only when the first outlives
/// the second's start by more than the cancel grace.
#[test]
fn a_second_upstream_request_whose_answer_was_dropped_is_a_retry_not_a_stitch() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "a", 0, 8);
    h.proxy_req("r1", MS, "a", 1)
        .proxy_req("r1", 61 * MS, "b", 3)
        .leg_end("r1", 100 * MS, ("b", 3), K::DownstreamClosed, 80 * MS)
        .leg_end("r1", 205 * MS, ("a", 1), K::Completed, 45 * MS);
    let j = h.judge(&quickstart(&[]));
    assert_eq!(
        kinds(&j),
        vec![FindingKind::RetryAfterFirstDelta],
        "{:#?}",
        j.findings
    );
    let j = h.judge(&quickstart(&["evidence.cancel_grace=100ms"]));
    assert_eq!(
        kinds(&j),
        vec![FindingKind::TwoWriters, FindingKind::RetryAfterFirstDelta],
        "{:#?}",
        j.findings
    );
}

/// Upstream requests tied to no request of the trace are counted per replica, with
/// why, in the evidence the verdicts were judged from — not dropped.
#[test]
fn upstream_requests_of_unknown_requests_are_counted_per_replica() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "b1", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_req("someone-else", 2 * MS, "b2", 2);
    h.ev(Event::ProxyRequest {
        t: 3 * MS,
        replica: "b2".into(),
        conn: 3,
        id: None,
        by: None,
        unattributed: Some(crate::trace::Unattributed::NoMarker),
        attempt: None,
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
    });
    let j = h.judge(&quickstart(&[]));
    let src = j
        .evidence
        .iter()
        .find(|s| s.source == "haq's proxy")
        .expect("the proxy's evidence");
    assert_eq!(
        src.detail,
        "3 upstream requests: 1 tied to their client request by the body's marker, 0 by x-request-id, 2 of unknown requests (b2: 2); unattributed: no marker ×1"
    );
}
