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
