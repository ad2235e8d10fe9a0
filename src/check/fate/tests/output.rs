//! Duplicated, stitched and gapped output (M3, Q9).

use super::*;

#[test]
fn an_answer_that_restarts_on_a_new_attempt_is_duplicated_and_stitched() {
    let mut h = Tb::history();
    let w = words("q", 8);
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w[..4]))
        .deltas("r1", "B", 300 * MS, &refs(&w))
        .finish("r1", "B", 500 * MS)
        .end("r1", 510 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let d = finding(&j, FindingKind::DuplicatedOutput);
    contains(&d.detail, "deltas 4..8 repeat deltas 0..4");
    contains(&d.detail, "the answer restarts");
    assert_eq!(d.chunks, vec![0, 4]);
    assert_eq!(d.excerpt.as_deref(), Some("q0ka q1ka q2ka q3ka"));
    let s = finding(&j, FindingKind::StitchedOutput);
    contains(&s.detail, "4 deltas from `A`, then 8 deltas from `B`");
    assert_eq!(s.chunks, vec![3, 4]);
    assert_eq!(
        s.excerpt.as_deref(),
        Some("q1ka q2ka q3ka ‖ q0ka q1ka q2ka")
    );
}

#[test]
fn a_run_re_sent_after_a_stall_is_duplicated() {
    // One writer id throughout: the repeat is found at the stall.
    let mut h = Tb::history();
    let w = words("s", 10);
    let mut text: Vec<&str> = refs(&w);
    text.extend(refs(&w[5..8]));
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &text[..10])
        .deltas("r1", "A", 2000 * MS, &text[10..])
        .finish("r1", "A", 2100 * MS)
        .end("r1", 2110 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let d = finding(&j, FindingKind::DuplicatedOutput);
    contains(&d.detail, "deltas 10..13 repeat deltas 5..8");
    contains(&d.detail, "after a stall");
    assert_eq!(kinds(&j), vec![FindingKind::DuplicatedOutput]);
}

#[test]
fn a_short_repeat_or_a_repeat_without_a_seam_is_not_evidence() {
    let mut h = Tb::history();
    let w = words("p", 6);
    // Two deltas repeat right after a stall: too short to mean anything.
    let text = [
        &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[2], &w[3], &w[0],
    ];
    let text: Vec<&str> = text.iter().map(|s| s.as_str()).collect();
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &text[..6])
        .deltas("r1", "A", 2000 * MS, &text[6..])
        .finish("r1", "A", 2100 * MS)
        .end("r1", 2110 * MS, Outcome::Completed);
    // Three deltas repeat, but no seam (no id change, no stall): a model may repeat.
    let text2: Vec<&str> = [&w[0], &w[1], &w[2], &w[3], &w[1], &w[2], &w[3], &w[4]]
        .iter()
        .map(|s| s.as_str())
        .collect();
    h.req("r2", 0)
        .deltas("r2", "B", 10 * MS, &text2)
        .finish("r2", "B", 300 * MS)
        .end("r2", 310 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

/// The answer's head again at a seam (here a 2 s stall in one attempt) is a restart;
/// the same words with no seam are the model's own (issue 21: repetition alone is no
/// finding).
#[test]
fn the_head_of_the_answer_appearing_again_is_a_restart() {
    let mut h = Tb::history();
    let w = words("h", 8);
    let mut text = refs(&w);
    text.extend(refs(&w[..7]));
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &text[..8])
        .deltas("r1", "A", 2000 * MS, &text[8..])
        .finish("r1", "A", 2400 * MS)
        .end("r1", 2410 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let d = finding(&j, FindingKind::DuplicatedOutput);
    contains(&d.detail, "the answer restarts, after a stall");
    let mut h = Tb::history();
    h.req("r2", 0)
        .deltas("r2", "A", 10 * MS, &text)
        .finish("r2", "A", 400 * MS)
        .end("r2", 410 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

/// A second attempt that starts the answer over in other pieces (its deltas are not
/// the first attempt's, its words are): the head of the answer again at the hand-over.
#[test]
fn an_answer_restarted_in_other_pieces_at_a_hand_over_is_duplicated() {
    let w = words("p", 12);
    let pairs: Vec<String> = w.chunks(2).map(|c| c.concat()).collect();
    let mut h = Tb::history();
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&pairs))
        .deltas("r1", "B", 300 * MS, &refs(&w[..8]))
        .finish("r1", "B", 500 * MS)
        .end("r1", 510 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let d = finding(&j, FindingKind::DuplicatedOutput);
    contains(&d.detail, "starts over at chunk 6, after the hand-over");
}

/// A server that answers `tok tok tok …` (and a model that repeats itself): no finding
/// with one attempt, a stall in it or not; a second attempt's text after a hand-over
/// (a new chunk id) is still one.
#[test]
fn repetitive_output_is_no_finding_without_a_hand_over() {
    let toks = vec![" tok"; 24];
    for stall in [0, 3000 * MS] {
        let mut h = Tb::history();
        h.req("r1", 0)
            .deltas("r1", "A", 10 * MS, &toks[..12])
            .deltas("r1", "A", 300 * MS + stall, &toks[12..])
            .finish("r1", "A", 700 * MS + stall)
            .end("r1", 710 * MS + stall, Outcome::Completed);
        let j = h.judge(&quickstart(&[]));
        assert!(j.findings.is_empty(), "stall {stall}: {:#?}", j.findings);
    }
    let mut h = Tb::history();
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &toks[..12])
        .deltas("r1", "B", 300 * MS, &toks[..12])
        .finish("r1", "B", 700 * MS)
        .end("r1", 710 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    assert!(has(&j, FindingKind::DuplicatedOutput), "{:#?}", j.findings);
}

/// r1: four deltas from a1 on w2 (killed at 90 ms), then `second` from a2 on w1,
/// which the journal says started after `from` delivered deltas.
fn migrated(second: &[&str], from: u32) -> Tb {
    let w = words("m", 4);
    let mut h = Tb::journaled();
    h.req("r1", 0)
        .deltas("r1", "A", 10 * MS, &refs(&w))
        .deltas("r1", "B", 300 * MS, second)
        .finish("r1", "B", 500 * MS)
        .end("r1", 510 * MS, Outcome::Completed)
        .attempt("r1", 1, "w2", (MS, 0), (100 * MS, "failed", 4))
        .attempt(
            "r1",
            2,
            "w1",
            (101 * MS, from),
            (500 * MS, "finished", 4 + second.len() as u32),
        )
        .kill(90 * MS, "w2");
    h
}

#[test]
fn a_migration_must_be_token_continuous() {
    use crate::check::fate::Observed;
    let migrate = quickstart(&["policy.streaming=migrate"]);
    let w = words("m", 8);
    // Continuous: a2 starts after 4 delivered deltas and goes on with the 5th.
    let j = migrated(&refs(&w[4..]), 4).judge(&migrate);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    let row = &j.fate_table[0];
    assert_eq!(
        (row.stage, row.declared, row.observed),
        (
            Stage::Streaming,
            Some(crate::scenario::Fate::Migrate),
            Observed::Migrated
        )
    );
    // Not continuous: a2 re-sends the last two delivered deltas.
    let j = migrated(&refs(&w[2..]), 4).judge(&migrate);
    let s = finding(&j, FindingKind::StitchedOutput);
    contains(&s.detail, "not token-continuous");
    contains(&s.detail, "re-sends 2 deltas");
    assert_eq!(j.fate_table[0].observed, Observed::Stitched);
    // Not continuous: the journal says a2 was told to continue from token 2.
    let j = migrated(&refs(&w[4..]), 2).judge(&migrate);
    let s = finding(&j, FindingKind::StitchedOutput);
    contains(&s.detail, "started after 2 delivered deltas");
}

/// The worker's engine says where a migration's continuation went on from (Q9): one
/// token short of what the client had is a duplicated token the text alone cannot
/// tell from a model repeating itself; one past it, a missing token. A whole
/// migration is measured: interruption, ITL before and after, re-prefill.
#[test]
fn the_engines_resume_point_shows_a_duplicated_or_missing_token_at_a_migration() {
    use crate::wire::journal::WorkerEntry as W;
    let migrate = quickstart(&["policy.streaming=migrate"]);
    let w = words("m", 9);
    let judged = |second: &[&str], resumed: u32| {
        let mut h = migrated(second, 4);
        h.wk(
            120 * MS,
            "w1",
            W::Admitted {
                req: "r1".into(),
                attempt: Some("r1/a2".into()),
                prompt_tokens: 104,
                resumed,
            },
        )
        .wk(
            290 * MS,
            "w1",
            W::FirstToken {
                req: "r1".into(),
                attempt: Some("r1/a2".into()),
                cached_tokens: 0,
            },
        );
        h.judge(&migrate)
    };
    let j = judged(&refs(&w[4..]), 4);
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    let m = j.fate_requests[0].migration.clone().expect("measured");
    assert_eq!(
        (m.delivered, m.resumed_at, m.reprefill_tokens),
        (4, Some(4), Some(104))
    );
    assert_eq!((m.duplicated, m.missing), (0, 0));
    assert!(
        (m.reprefill_ms.unwrap_or(0.0) - 170.0).abs() < 1e-6,
        "{m:?}"
    );
    assert!(
        m.interruption_ms > 200.0 && m.itl_before_ms.is_some(),
        "{m:?}"
    );
    let v = fate(&j);
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("migration of r1") && e.contains("re-prefill of 104 tokens")),
        "{v:?}"
    );
    // a2 re-sends delivered delta 3: one word again, no text finding — the engine's.
    let j = judged(&refs(&w[3..]), 3);
    let s = finding(&j, FindingKind::StitchedOutput);
    contains(&s.detail, "went on from token 3");
    contains(&s.detail, "1 delivered token(s) sent again");
    assert_eq!(
        j.fate_requests[0].migration.as_ref().map(|m| m.duplicated),
        Some(1)
    );
    let j = judged(&refs(&w[5..]), 5);
    contains(
        &finding(&j, FindingKind::StitchedOutput).detail,
        "1 token(s) never sent",
    );
}

#[test]
fn missing_or_reordered_chunks_are_gaps() {
    let mut h = Tb::history();
    h.req("r1", 0).deltas("r1", "A", 10 * MS, &[" a1", " a2"]);
    // Skip index 2: a chunk the trace never got.
    *h.chunks.get_mut("r1").expect("n") += 1;
    h.deltas("r1", "A", 60 * MS, &[" a3"])
        .finish("r1", "A", 80 * MS)
        .end("r1", 90 * MS, Outcome::Completed);
    h.req("r2", 0)
        .deltas("r2", "B", 50 * MS, &[" b1"])
        .deltas("r2", "B", 40 * MS, &[" b2"])
        .finish("r2", "B", 80 * MS)
        .end("r2", 90 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let gaps: Vec<_> = j
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::ChunkGap)
        .collect();
    assert_eq!(gaps.len(), 2, "{gaps:#?}");
    assert!(
        gaps[0].detail.contains("jump from 1 to 3"),
        "{}",
        gaps[0].detail
    );
    assert_eq!(gaps[0].chunks, vec![1, 3]);
    assert!(gaps[1].detail.contains("reordered"), "{}", gaps[1].detail);
}

#[test]
fn fewer_deltas_than_the_gateway_delivered_is_a_gap() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 6);
    h.attempt("r1", 1, "w1", (MS, 0), (300 * MS, "finished", 8));
    super::clean(&mut h, "r2", "w1", 0, 6);
    h.attempt("r2", 1, "w1", (MS, 0), (300 * MS, "finished", 6));
    let j = h.judge(&quickstart(&[]));
    let f = finding(&j, FindingKind::ChunkGap);
    assert_eq!(f.request, "r1");
    contains(&f.detail, "8 deltas were delivered, the client received 6");
    assert_eq!(j.findings.len(), 1, "{:#?}", j.findings);
}

#[test]
fn a_non_streamed_answer_is_one_body_the_gateway_counts_no_deltas_of() {
    let mut h = Tb::journaled();
    super::clean(&mut h, "r1", "w1", 0, 1);
    h.attempt("r1", 1, "w1", (MS, 0), (300 * MS, "relayed", 0));
    for e in &mut h.events {
        if let Event::Request { stream, .. } = e {
            *stream = false;
        }
    }
    let j = h.judge(&quickstart(&[]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
}

/// Gemma 3 270M through llama.cpp repeats itself (tests/data/wire): replayed as it
/// came, with a stall where it starts over, it is no finding — one attempt, one chunk
/// id; the same words after a hand-over to another chunk id are one.
#[test]
fn a_base_models_repetitive_answer_is_no_finding_even_after_a_stall() {
    const GEMMA: &str =
        include_str!("../../../../tests/data/wire/llamacpp-gemma-base-model-repeats.sse");
    let texts: Vec<String> = GEMMA
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| crate::wire::chunk::classify(d).text.map(|t| t.into_owned()))
        .collect();
    assert!(texts.len() >= 40, "{texts:?}");
    // Where the answer says "Hello" again: a repeat the old rule took for a re-send.
    let again = texts
        .iter()
        .skip(1)
        .position(|t| t == "Hello")
        .map(|i| i + 1)
        .expect("it repeats");
    let texts = refs(&texts);
    for (cid2, want) in [("A", false), ("B", true)] {
        let mut h = Tb::history();
        h.req("r1", 0)
            .deltas("r1", "A", 10 * MS, &texts[..again])
            .deltas("r1", cid2, 3000 * MS, &texts[again..])
            .finish("r1", cid2, 4000 * MS)
            .end("r1", 4010 * MS, Outcome::Completed);
        let j = h.judge(&quickstart(&[]));
        assert_eq!(
            has(&j, FindingKind::DuplicatedOutput),
            want,
            "second chunk id {cid2}: {:#?}",
            j.findings
        );
    }
}
