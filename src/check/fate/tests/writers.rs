//! Two writers and retry after the first delta (M2, M5).

use super::*;

#[test]
fn interleaved_generations_are_two_writers() {
    let mut h = Tb::history();
    h.req("r1", 0)
        .head("r1", 10 * MS, "w1", "r1/a1")
        .deltas("r1", "A", 10 * MS, &[" ba", " de"])
        .deltas("r1", "B", 60 * MS, &[" fi"])
        .deltas("r1", "A", 80 * MS, &[" go"])
        .finish("r1", "A", 100 * MS)
        .end("r1", 110 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::TwoWriters);
    assert_eq!(f.request, "r1");
    contains(&f.detail, "interleave");
    assert_eq!(f.chunks, vec![0, 2, 3]);
    assert_eq!(f.attempts, vec!["A", "B"]);
    assert_eq!(status(&j), Status::Fail);
}

#[test]
fn one_generation_is_one_writer() {
    let mut h = Tb::history();
    super::clean(&mut h, "r1", "w1", 0, 8);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn a_hand_over_between_ids_is_two_writers_unless_migration_is_declared() {
    let mut h = Tb::history();
    let w = words("x", 8);
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w[..4]))
        .deltas("r1", "B", 200 * MS, &refs(&w[4..]))
        .finish("r1", "B", 400 * MS)
        .end("r1", 410 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::TwoWriters);
    contains(&f.detail, "2 generation ids");
    assert_eq!(f.chunks, vec![0, 4]);
    // The same token-continuous hand-over under a declared `migrate`: no two writers,
    // no retry after the first delta, no stitching.
    let j = h.judge(&quickstart(&["policy.streaming=migrate"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

#[test]
fn an_attempt_started_before_the_old_one_was_fenced_is_two_writers() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w3", 0, 6);
    // a1 on w2 is still alive when a2 starts on w3 (soft timeout, no fence).
    h.attempt("r1", 1, "w2", (MS, 0), (900 * MS, "finished", 0))
        .attempt("r1", 2, "w3", (40 * MS, 0), (300 * MS, "finished", 6));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::TwoWriters);
    contains(&f.detail, "not fenced");
    assert_eq!(f.attempts, vec!["r1/a1", "r1/a2"]);
}

#[test]
fn an_attempt_started_after_the_old_one_was_fenced_is_legal() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w3", 0, 6);
    h.attempt("r1", 1, "w2", (MS, 0), (900 * MS, "failed", 0))
        .gw_other(
            30 * MS,
            serde_json::json!({"ev": "lease_revoked", "req": "r1", "attempt": "r1/a1"}),
        )
        .attempt("r1", 2, "w3", (40 * MS, 0), (300 * MS, "finished", 6));
    let j = h.judge(&quickstart(&[]));
    assert!(!has(&j, FindingKind::TwoWriters), "{:#?}", j.findings);
}

#[test]
fn a_new_attempt_after_delivery_is_a_retry_after_the_first_delta() {
    // Journal: a2 starts after 3 deltas were delivered; the client sees one id (the
    // gateway rewrote chunk ids), so only the journal tells.
    let mut h = Tb::journaled();
    let w = words("y", 6);
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w[..3]))
        .deltas("r1", "A", 200 * MS, &refs(&w[3..]))
        .finish("r1", "A", 400 * MS)
        .end("r1", 410 * MS, Outcome::Completed)
        .attempt("r1", 1, "w2", (MS, 0), (60 * MS, "failed", 3))
        .attempt("r1", 2, "w1", (61 * MS, 3), (400 * MS, "finished", 6));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::RetryAfterFirstDelta);
    contains(&f.detail, "after 3 deltas");
    assert_eq!(f.attempts, vec!["r1/a1", "r1/a2"]);
    assert_eq!(f.chunks, vec![2, 3]);
}

#[test]
fn a_retry_before_the_first_delta_is_legal() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 6);
    h.attempt("r1", 1, "w2", (MS, 0), (20 * MS, "failed", 0))
        .attempt("r1", 2, "w1", (21 * MS, 0), (300 * MS, "finished", 6))
        .kill(10 * MS, "w2");
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    assert_eq!(stages(&j), vec![Stage::BeforeFirstDelta]);
    assert_eq!(
        j.fate_table[0].observed,
        crate::check::fate::Observed::Retried
    );
}

#[test]
fn a_client_side_id_change_after_delivery_is_a_retry_after_the_first_delta() {
    let mut h = Tb::history();
    let w = words("z", 6);
    let mut again = w.clone();
    again.truncate(3);
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w[..3]))
        .deltas("r1", "B", 300 * MS, &refs(&w))
        .finish("r1", "B", 500 * MS)
        .end("r1", 510 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::RetryAfterFirstDelta);
    assert_eq!(f.attempts, vec!["A", "B"]);
    assert!(f.excerpt.is_some());
}
