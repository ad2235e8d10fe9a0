//! Upstream cancel after the client left (M4) and tool side effects (M7).

use super::*;

/// r1: the client gives up at 1 s (first-token timeout) while a1 runs on w1.
fn gave_up(h: &mut Tb) {
    h.req("r1", 0)
        .end("r1", 1000 * MS, Outcome::FirstTokenTimeout);
}

#[test]
fn an_upstream_that_runs_on_after_the_client_left_is_not_cancelled() {
    let mut h = Tb::journaled();
    gave_up(&mut h);
    h.attempt("r1", 1, "w1", (MS, 0), (3500 * MS, "finished", 0));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(
        &f.detail,
        "kept running 2500 ms after the client went away and ended as finished",
    );
    assert_eq!(f.attempts, vec!["r1/a1"]);
}

#[test]
fn an_upstream_cancelled_within_the_grace_is_fine_and_a_late_cancel_is_not() {
    let mut h = Tb::journaled();
    gave_up(&mut h);
    h.attempt("r1", 1, "w1", (MS, 0), (1300 * MS, "client_gone", 0));
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    let mut h = Tb::journaled();
    gave_up(&mut h);
    h.attempt("r1", 1, "w1", (MS, 0), (3800 * MS, "client_gone", 0));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "cancelled only 2800 ms after");
    // A longer declared grace accepts it.
    let j = h.judge(&quickstart(&["evidence.cancel_grace=5s"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn a_spare_attempt_after_the_client_left_is_not_cancelling() {
    let mut h = Tb::journaled();
    gave_up(&mut h);
    h.attempt("r1", 1, "w1", (MS, 0), (1001 * MS, "client_gone", 0))
        .attempt("r1", 2, "w2", (1100 * MS, 0), (1200 * MS, "client_gone", 0));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "`r1/a2` on w2 started 100 ms after");
}

#[test]
fn an_attempt_never_ended_is_judged_only_if_the_journal_goes_on() {
    let mut h = Tb::journaled();
    gave_up(&mut h);
    h.gw(
        MS,
        crate::wire::journal::GatewayEntry::AttemptStart {
            req: "r1".into(),
            attempt: "r1/a1".into(),
            worker: "w1".into(),
            delivered: 0,
        },
    );
    // The journal stops right after: the run ended, nothing to say.
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // It goes on for 10 s more with other requests: never cancelled.
    clean(&mut h, "later", "w3", 10_000 * MS, 2);
    h.attempt(
        "later",
        1,
        "w3",
        (10_001 * MS, 0),
        (11_000 * MS, "finished", 2),
    );
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::UpstreamNotCancelled);
    contains(&f.detail, "still running at least 9000 ms after");
}

#[test]
fn the_same_idempotency_key_executed_twice_is_a_duplicate_side_effect() {
    let mut h = Tb::history();
    h.tool(10 * MS, "r1", "call_1", "r1:call_1", r#"{"a":1}"#, false)
        .tool(900 * MS, "r1", "call_1", "r1:call_1", r#"{"a":1}"#, false);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::DuplicateToolEffect);
    assert_eq!(f.request, "r1");
    contains(
        &f.detail,
        "idempotency key `r1:call_1` executed twice: the tool service did not deduplicate (890 ms apart)",
    );
    assert_eq!(f.excerpt.as_deref(), Some(r#"create_ticket({"a":1})"#));
}

#[test]
fn a_deduplicated_repeat_is_no_side_effect() {
    let mut h = Tb::history();
    h.tool(10 * MS, "r1", "call_1", "r1:call_1", r#"{"a":1}"#, false)
        .tool(900 * MS, "r1", "call_1", "r1:call_1", r#"{"a":1}"#, true)
        .tool(950 * MS, "r1", "call_2", "r1:call_2", r#"{"a":2}"#, false)
        .tool(990 * MS, "r2", "call_1", "r2:call_1", r#"{"a":1}"#, false);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn one_logical_action_under_two_keys_is_a_duplicate_side_effect() {
    // Keys from the GPU attempt, not the logical action (no-tool-idempotency).
    let mut h = Tb::history();
    h.tool(10 * MS, "r1", "call_1", "r1/a1:call_1", r#"{"a":1}"#, false)
        .tool(
            900 * MS,
            "r1",
            "call_1",
            "r1/a2:call_1",
            r#"{"a":1}"#,
            false,
        );
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::DuplicateToolEffect);
    contains(
        &f.detail,
        "under different keys `r1/a1:call_1` and `r1/a2:call_1`",
    );
    assert_eq!(f.attempts, vec!["r1/a1:call_1", "r1/a2:call_1"]);
    // The re-generated call got a new id too: same tool, same arguments.
    let mut h = Tb::history();
    h.tool(10 * MS, "r1", "call_1", "r1:call_1", r#"{"a":1}"#, false)
        .tool(900 * MS, "r1", "call_9", "r1:call_9", r#"{"a":1}"#, false);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::DuplicateToolEffect);
    contains(&f.detail, "same arguments executed twice for `r1`");
}
