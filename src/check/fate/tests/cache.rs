//! Cache truth (M6): the answers to a planted identical prompt must be one answer.

use super::*;

const TRUTH: [&str; 2] = ["workload.cache_truth={every: 5, prompts: 1}", "faults=[]"];

/// `id` on `worker`: a complete answer of `text`.
fn answered(h: &mut Tb, id: &str, worker: &str, t0: u64, text: &[&str]) {
    let cid = format!("chatcmpl-{worker}-{id}");
    h.req(id, t0)
        .head(id, t0 + 50 * MS, worker, &format!("{id}/a1"))
        .deltas(id, &cid, t0 + 50 * MS, text)
        .finish(id, &cid, t0 + 50 * MS + text.len() as u64 * 20 * MS)
        .end(
            id,
            t0 + 60 * MS + text.len() as u64 * 20 * MS,
            Outcome::Completed,
        );
}

#[test]
fn planted_prompts_answered_alike_pass_and_one_that_differs_is_a_finding() {
    let same = [" lo", " ra", " vei", " sha"];
    let mut h = Tb::history();
    answered(&mut h, "r000004", "w1", 0, &same);
    answered(&mut h, "r000009", "w2", 300 * MS, &same);
    // Not planted (r000005): another answer is no finding.
    answered(&mut h, "r000005", "w1", 400 * MS, &[" zu"]);
    let j = h.judge(&quickstart(&TRUTH));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::Pass, "{:?}", fate(&j));
    contains(
        &fate(&j).summary,
        "M6: 1 answers to planted identical prompts matched",
    );
    contains(&fate(&j).summary, "across 2 replicas");

    // A third answer from a corrupted prefix cache: the second word differs.
    answered(
        &mut h,
        "r000014",
        "w1",
        600 * MS,
        &[" lo", " ke", " vei", " sha"],
    );
    let j = h.judge(&quickstart(&TRUTH));
    let f = finding(&j, FindingKind::CacheDivergence);
    assert_eq!(f.request, "r000014");
    assert_eq!(f.attempts, vec!["r000004", "r000014"]);
    contains(
        &f.detail,
        "r000004 on w1 in phase baseline and r000014 on w1",
    );
    contains(&f.detail, "word 1 is `ra`, then `ke`");
    assert_eq!(status(&j), Status::Fail);

    // Without `cache_truth` nothing is planted: no finding, nothing to evaluate.
    let j = h.judge(&quickstart(&["faults=[]"]));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::NotEvaluated);
}

#[test]
fn a_cut_answer_to_a_planted_prompt_is_not_compared() {
    let mut h = Tb::history();
    answered(&mut h, "r000004", "w1", 0, &[" lo", " ra"]);
    h.req("r000009", 300 * MS)
        .head("r000009", 350 * MS, "w2", "r000009/a1")
        .deltas("r000009", "B", 350 * MS, &[" lo"])
        .seed_error("r000009", 400 * MS, 1)
        .end("r000009", 410 * MS, Outcome::ExplicitError);
    let j = h.judge(&quickstart(&TRUTH));
    assert!(j.findings.is_empty(), "{:#?}", j.findings);
    assert_eq!(status(&j), Status::NotEvaluated, "{:?}", fate(&j));
}
