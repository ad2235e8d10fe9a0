//! Silent truncation, silent interruption, the explicit error's shape (M3).

use super::*;

fn cut(h: &mut Tb, id: &str, n: usize) {
    let w = words(id, n);
    h.req(id, 0)
        .head(id, 10 * MS, "w2", &format!("{id}/a1"))
        .deltas(id, "A", 10 * MS, &refs(&w));
}

#[test]
fn done_without_finish_reason_after_output_is_silent_truncation() {
    let mut h = Tb::history();
    cut(&mut h, "r1", 5);
    h.chunk("r1", 200 * MS, ChunkKind::Done, None, None)
        .end("r1", 210 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::SilentTruncation);
    contains(&f.detail, "[DONE] after 5 deltas");
    assert_eq!(f.chunks, vec![5]);
    assert_eq!(f.excerpt.as_deref(), Some("r12ka r13ka r14ka"));
}

#[test]
fn end_of_body_after_output_is_silent_truncation() {
    let mut h = Tb::history();
    cut(&mut h, "r1", 3);
    h.end("r1", 210 * MS, Outcome::Truncated);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::SilentTruncation);
    contains(&f.detail, "body ended after 3 deltas");
}

#[test]
fn a_clean_end_after_a_failed_attempt_is_silent_truncation() {
    // The gateway even made up a finish_reason; only its journal tells.
    let mut h = Tb::journaled();
    cut(&mut h, "r1", 3);
    h.finish("r1", "A", 200 * MS)
        .end("r1", 210 * MS, Outcome::Completed)
        .attempt("r1", 1, "w2", (MS, 0), (100 * MS, "failed", 3));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::SilentTruncation);
    contains(&f.detail, "`r1/a1` on w2 failed");
    assert_eq!(f.attempts, vec!["r1/a1"]);
}

#[test]
fn a_finished_answer_or_a_retry_before_output_is_no_truncation() {
    // finish_reason then [DONE]: a clean end.
    let mut h = Tb::history();
    cut(&mut h, "r1", 4);
    h.finish("r1", "A", 200 * MS)
        .end("r1", 210 * MS, Outcome::Completed);
    // A failed first attempt, retried before any delta; the retry finished cleanly.
    let mut j = Tb::journaled();
    cut(&mut j, "r2", 4);
    j.finish("r2", "A", 200 * MS)
        .end("r2", 210 * MS, Outcome::Completed)
        .attempt("r2", 1, "w3", (MS, 0), (5 * MS, "failed", 0))
        .attempt("r2", 2, "w2", (6 * MS, 0), (200 * MS, "finished", 4));
    for h in [h, j] {
        let j = h.judge(&quickstart(&["faults=[]"]));
        assert!(j.findings.is_empty(), "{:#?}", j.findings);
    }
}

#[test]
fn a_reset_after_output_is_a_silent_interruption_and_before_output_is_not() {
    let mut h = Tb::history();
    cut(&mut h, "r1", 3);
    h.end("r1", 210 * MS, Outcome::Reset);
    h.req("r2", 0).end("r2", 50 * MS, Outcome::Reset);
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::SilentInterruption);
    assert_eq!(f.request, "r1");
    assert!(
        f.detail
            .contains("3 deltas delivered, then the stream ended as reset")
    );
    assert_eq!(j.findings.len(), 1, "{:#?}", j.findings);
}

#[test]
fn the_seed_error_passes_and_each_missing_field_is_named() {
    let mut h = Tb::history();
    cut(&mut h, "ok", 3);
    h.seed_error("ok", 200 * MS, 3)
        .end("ok", 210 * MS, Outcome::ExplicitError);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);

    let mut h = Tb::history();
    cut(&mut h, "bad", 3);
    h.error_event(
        "bad",
        200 * MS,
        r#"{"error":{"code":"500","message":"upstream died","delivered_output_tokens":2}}"#,
    )
    .end("bad", 210 * MS, Outcome::ExplicitError);
    cut(&mut h, "junk", 2);
    h.error_event("junk", 200 * MS, "upstream died")
        .end("junk", 210 * MS, Outcome::ExplicitError);
    let j = h.judge(&quickstart(&[]));
    let f = &j.findings[0];
    assert_eq!(
        (f.kind, f.request.as_str()),
        (FindingKind::MalformedExplicitError, "bad")
    );
    for want in [
        "code is \"500\" not \"upstream_decode_interrupted\"",
        "partial_output is not true",
        "retryable is not false",
        "no request_id",
        "delivered_output_tokens is 2 but the client received 3 deltas",
    ] {
        assert!(f.detail.contains(want), "{want} not in {}", f.detail);
    }
    assert_eq!(f.chunks, vec![3]);
    let g = &j.findings[1];
    assert_eq!(g.request, "junk");
    contains(&g.detail, "not JSON");
}

#[test]
fn a_gateways_own_error_shape_is_checked_when_declared() {
    let shape = "policy.error_shape={required: [error.message], equals: {error.type: upstream_error}, delivered_tokens: error.tokens}";
    let litellm = r#"{"error":{"message":"upstream died","type":"upstream_error","tokens":3}}"#;
    let mut h = Tb::history();
    cut(&mut h, "r1", 3);
    h.error_event("r1", 200 * MS, litellm)
        .end("r1", 210 * MS, Outcome::ExplicitError);
    let j = h.judge(&quickstart(&[shape]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    // The seed's shape is not this one.
    let j = h.judge(&quickstart(&[]));
    assert!(has(&j, FindingKind::MalformedExplicitError));
    // A wrong type and count under the declared shape.
    let mut h = Tb::history();
    cut(&mut h, "r1", 3);
    h.error_event(
        "r1",
        200 * MS,
        r#"{"error":{"message":"x","type":null,"tokens":1}}"#,
    )
    .end("r1", 210 * MS, Outcome::ExplicitError);
    let j = h.judge(&quickstart(&[shape]));
    let f = finding(&j, FindingKind::MalformedExplicitError);
    contains(&f.detail, "error.type is null not \"upstream_error\"");
    contains(&f.detail, "error.tokens is 1 but the client received 3");
}
