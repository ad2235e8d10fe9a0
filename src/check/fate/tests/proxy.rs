//! haq's proxy as evidence where the gateway keeps no journal (a url target with the
//! proxy between the gateway and its replicas): its upstream legs are the attempts.

use super::*;
use crate::check::fate::Observed;
use crate::trace::ProxyEndKind as K;

#[test]
fn a_gateway_that_closes_the_upstream_when_the_client_leaves_cancels_it() {
    let mut h = H::new();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .end("r1", 1000 * MS, Outcome::Cancelled)
        .proxy_end("r1", 1050 * MS, ("b1", 1), K::DownstreamClosed);
    let j = h.judge(&plan(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn an_upstream_the_proxy_sees_run_to_completion_after_the_client_left_is_not_cancelled() {
    let mut h = H::new();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .end("r1", 1000 * MS, Outcome::IdleTimeout)
        .proxy_end("r1", 3500 * MS, ("b1", 1), K::Completed);
    let j = h.judge(&plan(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "`b1#1` on b1: kept running 2500 ms");
    contains(&f.detail, "ended as finished");
}

#[test]
fn proxy_legs_are_the_attempts_of_a_request_retried_before_its_first_delta() {
    let mut h = H::new();
    clean(&mut h, "r1", "b2", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_end("r1", 25 * MS, ("b1", 1), K::UpstreamReset)
        .proxy_req("r1", 26 * MS, "b2", 4)
        .proxy_end("r1", 200 * MS, ("b2", 4), K::Completed)
        .kill(20 * MS, "b1");
    let j = h.judge(&plan(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let r = &j.fate_requests[0];
    assert_eq!(r.attempts, vec!["b1#1", "b2#4"]);
    assert_eq!(r.observed, Observed::Retried);
    // A failure after one leg only: nobody retried it.
    let mut h = H::new();
    h.req("r1", 0)
        .proxy_req("r1", MS, "b1", 1)
        .proxy_end("r1", 25 * MS, ("b1", 1), K::UpstreamReset)
        .end("r1", 30 * MS, Outcome::Rejected)
        .kill(20 * MS, "b1");
    let j = h.judge(&plan(&[]));
    assert_eq!(kinds(&j), vec![FindingKind::RetryNotMade]);
}

#[test]
fn output_the_proxy_saw_computed_but_the_client_never_got_is_the_decode_stage() {
    // M9 case 2: the replica sent its first event at 18 ms, the proxy held it, the
    // replica died at 20 ms; the gateway retried.
    let mut h = H::new();
    clean(&mut h, "r1", "b2", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_end_after("r1", 25 * MS, ("b1", 1), K::HeldDropped, Some(18 * MS))
        .proxy_req("r1", 26 * MS, "b2", 4)
        .proxy_end("r1", 200 * MS, ("b2", 4), K::Completed)
        .kill(20 * MS, "b1");
    let j = h.judge(&plan(&[]));
    assert_eq!(stages(&j), vec![Stage::Decode]);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
}

/// A gateway that re-sends the request to another replica after the first delta and
/// splices the rest on under the original chunk ids: the client's stream is clean and
/// byte-identical to one answer, but haq's proxy saw two upstream requests for it —
/// a retry after the first delta (M2) and stitched output (M3). The same stream with
/// one upstream request is clean.
#[test]
fn a_second_upstream_request_after_the_first_delta_is_a_finding_though_the_stream_is_clean() {
    let splice = |h: &mut H| {
        clean(h, "r1", "a", 0, 8);
        h.proxy_req("r1", MS, "a", 1)
            .leg_end("r1", 60 * MS, ("a", 1), K::DownstreamClosed, 45 * MS)
            .proxy_req("r1", 61 * MS, "b", 3)
            .leg_end("r1", 205 * MS, ("b", 3), K::Completed, 80 * MS);
    };
    let mut h = H::new();
    splice(&mut h);
    let j = h.judge(&plan(&[]));
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
    let mut h = H::new();
    clean(&mut h, "r1", "a", 0, 8);
    h.proxy_req("r1", MS, "a", 1)
        .leg_end("r1", 205 * MS, ("a", 1), K::Completed, 45 * MS);
    let j = h.judge(&plan(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // Declared migration: a token-continuous hand-over the proxy saw is legal.
    let mut h = H::new();
    splice(&mut h);
    let j = h.judge(&plan(&["policy.streaming=migrate"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

/// A duplicate request after the first delta whose answer the gateway dropped (the
/// first upstream request wrote the whole stream): a retry after the first delta, not
/// stitched output. Both alive at once is two writers only when the first outlives
/// the second's start by more than the cancel grace.
#[test]
fn a_second_upstream_request_whose_answer_was_dropped_is_a_retry_not_a_stitch() {
    let mut h = H::new();
    clean(&mut h, "r1", "a", 0, 8);
    h.proxy_req("r1", MS, "a", 1)
        .proxy_req("r1", 61 * MS, "b", 3)
        .leg_end("r1", 100 * MS, ("b", 3), K::DownstreamClosed, 80 * MS)
        .leg_end("r1", 205 * MS, ("a", 1), K::Completed, 45 * MS);
    let j = h.judge(&plan(&[]));
    assert_eq!(
        kinds(&j),
        vec![FindingKind::RetryAfterFirstDelta],
        "{:#?}",
        j.findings
    );
    let j = h.judge(&plan(&["evidence.cancel_grace=100ms"]));
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
    let mut h = H::new();
    clean(&mut h, "r1", "b1", 0, 4);
    h.proxy_req("r1", MS, "b1", 1)
        .proxy_req("someone-else", 2 * MS, "b2", 2);
    h.events.push(Event::ProxyRequest {
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
    let j = h.judge(&plan(&[]));
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
