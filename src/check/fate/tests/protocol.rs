//! The stream's grammar and the response's framing (issue 15 item 6): events after
//! `[DONE]`, and responses haq had to cut or refuse, FAIL Request-Fate.

use super::*;

/// The quickstart's caught request cut properly (r1), then `id` from 1 s on w1, after
/// the kill: three deltas, a finish and `[DONE]` at 1.09 s, then `after` more deltas;
/// it ends `outcome` with `detail`.
fn answered(h: &mut Tb, id: &str, after: usize, outcome: Outcome, detail: Option<&str>) {
    cut_properly(h);
    let w = words(id, 3);
    let t0 = 1000 * MS;
    h.req(id, t0)
        .head(id, t0 + 10 * MS, "w1", &format!("{id}/a1"))
        .deltas(id, "A", t0 + 10 * MS, &refs(&w))
        .finish(id, "A", t0 + 90 * MS);
    let more = words(&format!("{id}x"), after);
    if after > 0 {
        h.deltas(id, "A", t0 + 110 * MS, &refs(&more));
    }
    match detail {
        Some(d) => h.end_saying(id, t0 + 300 * MS, outcome, d),
        None => h.end(id, t0 + 300 * MS, outcome),
    };
}

#[test]
fn deltas_after_done_fail_request_fate_with_the_chunks_that_came_after() {
    let mut h = Tb::history();
    answered(
        &mut h,
        "r3",
        5,
        Outcome::AfterDone,
        Some("5 data events (5 output deltas) after [DONE], the first chunk 5"),
    );
    let j = h.judge(&quickstart(&[]));
    assert_eq!(status(&j), Status::Fail, "{:?}", fate(&j));
    let f = finding(&j, FindingKind::DataAfterDone);
    assert_eq!(f.request, "r3");
    contains(&f.detail, "the stream went on after [DONE]: 5 data events");
    assert_eq!(f.chunks, vec![4, 5, 6, 7, 8, 9], "[DONE], then the five");
    assert!(
        f.excerpt.as_deref().is_some_and(|e| e.contains("r3x4ka")),
        "{f:?}"
    );
}

#[test]
fn output_after_the_finish_and_the_usage_report_fails_request_fate() {
    // The answer's finish, its usage report, then two more deltas before [DONE].
    let story = |late: usize| {
        let mut h = Tb::history();
        cut_properly(&mut h);
        let t0 = 1000 * MS;
        let w = words("r3", 3);
        h.req("r3", t0)
            .head("r3", t0 + 10 * MS, "w1", "r3/a1")
            .deltas("r3", "A", t0 + 10 * MS, &refs(&w));
        let finish = Piece {
            cid: Some("A"),
            finish: Some("stop"),
            ..Piece::of(ChunkKind::Finish)
        };
        h.chunk_as("r3", t0 + 80 * MS, finish).chunk(
            "r3",
            t0 + 81 * MS,
            ChunkKind::Usage,
            None,
            None,
        );
        let more = words("r3x", late);
        h.deltas("r3", "A", t0 + 90 * MS, &refs(&more))
            .chunk("r3", t0 + 200 * MS, ChunkKind::Done, None, None)
            .end("r3", t0 + 210 * MS, Outcome::Completed);
        h.judge(&quickstart(&[]))
    };
    let j = story(2);
    assert_eq!(status(&j), Status::Fail, "{:?}", fate(&j));
    let f = finding(&j, FindingKind::DataAfterDone);
    assert_eq!(f.request, "r3");
    contains(
        &f.detail,
        "output after the answer was over: 2 output deltas after finish_reason (chunk 3) and the usage report (chunk 4), the first chunk 5",
    );
    assert_eq!(f.chunks, vec![3, 4, 5, 6]);
    // Nothing after the usage report: a clean end.
    let j = story(0);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    assert!(!has(&j, FindingKind::DataAfterDone));
}

#[test]
fn a_clean_end_at_done_passes_and_a_response_cut_for_its_size_fails() {
    let mut h = Tb::history();
    answered(&mut h, "r3", 0, Outcome::Completed, None);
    let j = h.judge(&quickstart(&[]));
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    assert!(!has(&j, FindingKind::DataAfterDone));
    // The same answer, then a line past client.limits.line.
    let mut h = Tb::history();
    let d = "an SSE line longer than client.limits.line (1MiB): 1048600 bytes with no line end when haq stopped reading; it began \"data: aaaa\"";
    answered(&mut h, "r3", 0, Outcome::Oversized, Some(d));
    let j = h.judge(&quickstart(&[]));
    assert_eq!(status(&j), Status::Fail, "{:?}", fate(&j));
    let f = finding(&j, FindingKind::ProtocolViolation);
    contains(
        &f.detail,
        "oversized: an SSE line longer than client.limits.line (1MiB)",
    );
    // An encoding haq did not ask for, before any output.
    let mut h = Tb::history();
    cut_properly(&mut h);
    h.req("r2", 1000 * MS).head("r2", 1010 * MS, "w1", "r2/a1");
    h.end_saying(
        "r2",
        1020 * MS,
        Outcome::Encoded,
        "content-encoding: gzip, which haq did not ask for",
    );
    let j = h.judge(&quickstart(&[]));
    contains(
        &finding(&j, FindingKind::ProtocolViolation).detail,
        "encoded: content-encoding: gzip",
    );
}

#[test]
fn a_request_haqs_own_host_failed_is_not_judged_against_the_target() {
    // r4 was due while w2 was killed, and haq found no descriptor to send it with.
    let mut h = Tb::history();
    cut_properly(&mut h);
    h.req("r4", 60 * MS).end_saying(
        "r4",
        85 * MS,
        Outcome::Local,
        "EMFILE (haq's open-file limit ran out) nofile=160/160: connect failed",
    );
    let j = h.judge(&quickstart(&[]));
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    assert!(j.findings.is_empty(), "{:?}", j.findings);
    contains(&fate(&j).summary, "no finding on 1 request (");
}
