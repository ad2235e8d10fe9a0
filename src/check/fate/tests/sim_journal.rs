//! The sim's typed journals: worker phases and fault hooks give the stage; fences,
//! cancels and denied retries decide what is legal (M1, M2, M4, M5, M8).

use super::*;
use crate::check::fate::Observed;
use crate::wire::journal::{FenceHow, GatewayEntry as G, WorkerEntry as W};

fn admitted(h: &mut Tb, t: u64, w: &str, attempt: &str) {
    h.wk(
        t,
        w,
        W::Admitted {
            req: "r1".into(),
            attempt: Some(attempt.into()),
            prompt_tokens: 100,
            resumed: 0,
        },
    );
}

fn scheduled(h: &mut Tb, t: u64, w: &str, attempt: &str) {
    h.wk(
        t,
        w,
        W::Scheduled {
            req: "r1".into(),
            attempt: Some(attempt.into()),
            cached_tokens: 0,
            recompute: false,
        },
    );
}

/// r1: a1 on w2 dies at 30 ms (killed at `kill`), a2 on w1 completes it.
fn retried(kill: u64) -> Tb {
    let mut h = Tb::journaled();
    clean(&mut h, "r1", "w1", 0, 4);
    h.attempt("r1", 1, "w2", (MS, 0), (30 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (31 * MS, 0), (200 * MS, "finished", 4))
        .kill(kill, "w2");
    h
}

#[test]
fn the_worker_journal_tells_queued_from_prefill() {
    let mut h = retried(8 * MS);
    admitted(&mut h, 2 * MS, "w2", "r1/a1");
    scheduled(&mut h, 10 * MS, "w2", "r1/a1");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Queued]);
    let mut h = retried(20 * MS);
    admitted(&mut h, 2 * MS, "w2", "r1/a1");
    scheduled(&mut h, 10 * MS, "w2", "r1/a1");
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Prefill]);
    assert_eq!(j.fate_table[0].observed, Observed::Retried);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
}

#[test]
fn a_fault_hook_between_compute_and_send_is_the_decode_stage() {
    // M9 case 2: the token was computed, its event not written; a retry is legal.
    let mut h = retried(26 * MS);
    scheduled(&mut h, 10 * MS, "w2", "r1/a1");
    h.wk(
        25 * MS,
        "w2",
        W::FaultFired {
            worker: "w2".into(),
            id: "f1".into(),
            point: "before_event".into(),
            k: 0,
            req: "r1".into(),
            attempt: Some("r1/a1".into()),
        },
    );
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Decode]);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // Where the policy says decode: fail, the retry is a mismatch.
    let j = h.judge(&quickstart(&["policy.decode=fail"]));
    assert_eq!(kinds(&j), vec![FindingKind::FateMismatch]);
}

#[test]
fn a_request_waiting_in_the_gateway_queue_is_queued() {
    let mut h = Tb::journaled();
    clean(&mut h, "r1", "w1", 0, 4);
    h.gw(
        MS,
        G::Queued {
            req: "r1".into(),
            priority: Default::default(),
            queue_len: 3,
        },
    )
    .kill(5 * MS, "w2")
    .attempt("r1", 1, "w2", (10 * MS, 0), (12 * MS, "failed", 0))
    .attempt("r1", 2, "w1", (13 * MS, 0), (200 * MS, "finished", 4));
    let j = h.judge(&quickstart(&[]));
    assert_eq!(stages(&j), vec![Stage::Queued]);
}

fn fence(h: &mut Tb, t: u64, how: FenceHow) {
    h.gw(
        t,
        G::Fence {
            req: "r1".into(),
            attempt: "r1/a1".into(),
            worker: "w2".into(),
            how,
            waited_ms: 0,
        },
    );
}

#[test]
fn a_failover_without_a_fence_is_two_writers_and_a_confirmed_one_is_not() {
    // soft-timeout: a1 on w2 is slow, a2 starts on w1 at 40 ms; a1 ends at 900 ms.
    let mut h = Tb::journaled();
    clean(&mut h, "r1", "w1", 0, 6);
    h.attempt("r1", 1, "w2", (MS, 0), (900 * MS, "finished", 0))
        .attempt("r1", 2, "w1", (40 * MS, 0), (300 * MS, "finished", 6));
    fence(&mut h, 39 * MS, FenceHow::Unfenced);
    let j = h.judge(&quickstart(&[]));
    contains(&finding(&j, FindingKind::TwoWriters).detail, "not fenced");
    let mut h = Tb::journaled();
    clean(&mut h, "r1", "w1", 0, 6);
    h.attempt("r1", 1, "w2", (MS, 0), (900 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (40 * MS, 0), (300 * MS, "finished", 6));
    fence(&mut h, 39 * MS, FenceHow::ConfirmedDead);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn the_gateway_dropping_the_upstream_when_the_client_left_is_a_cancel() {
    let mut h = Tb::journaled();
    h.req("r1", 0)
        .end("r1", 1000 * MS, Outcome::IdleTimeout)
        .attempt("r1", 1, "w1", (MS, 0), (3900 * MS, "client_gone", 0))
        .gw(
            1100 * MS,
            G::ClientGone {
                req: "r1".into(),
                attempt: "r1/a1".into(),
                worker: "w1".into(),
                delivered: 0,
            },
        );
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn a_retry_the_gateway_denied_for_its_budget_is_not_retry_not_made() {
    let mut h = Tb::journaled();
    h.req("r1", 0)
        .kill(20 * MS, "w2")
        .end("r1", 100 * MS, Outcome::Rejected)
        .attempt("r1", 1, "w2", (MS, 0), (25 * MS, "failed", 0))
        .gw(
            26 * MS,
            G::RetryDenied {
                req: "r1".into(),
                why: "global retry budget spent".into(),
            },
        );
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(j.fate_table[0].observed, Observed::Failed);
}

#[test]
fn tool_findings_name_the_attempts_that_asked() {
    let mut h = Tb::history();
    h.tool(10 * MS, "r1", "call_1", "r1/a1:call_1", "{}", false)
        .tool(900 * MS, "r1", "call_1", "r1/a2:call_1", "{}", false);
    for (x, a) in h.tools.iter_mut().flatten().zip(["r1/a1", "r1/a2"]) {
        x.entry.attempt = Some(a.into());
    }
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::DuplicateToolEffect);
    assert_eq!(f.attempts, vec!["r1/a1", "r1/a2"]);
    contains(&f.detail, "asked by attempts `r1/a1` and `r1/a2`");
}
