//! `judge_dir` reads a stored trace in place (chunk lines folded from the read buffer
//! when no journal is merged): it must judge exactly what the event path judges from
//! the same file, and fail on the same line.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::testkit::{self, Tb, us};
use super::{evidence, judge_dir, judge_with};
use crate::plan::Plan;
use crate::trace::{Event, TraceWriter};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("haq-dir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// The standard hand-written run, plus chunk lines the fold must take as they are:
/// for a request nobody sent, with chunk ids that change and come back, without an
/// id, with escapes (the serde path), keys in another order (the struct path).
fn events(plan: &Plan) -> Vec<Event> {
    let tb = testkit::standard(plan);
    let mut evs = tb.events.clone();
    let chunk = |t: f64, id: &str, n: u32, cid: Option<&str>, text: &str| {
        testkit::event(
            serde_json::json!({"ev": "chunk", "t": us(t), "id": id, "n": n,
            "kind": "content", "text": text, "cid": cid}),
        )
    };
    evs.push(chunk(5.0, "nobody", 0, Some("c-x"), "lost"));
    // baseline-0001 starts at 1 s: more deltas from other writers, and back.
    for (k, cid) in [Some("c-b"), Some("c-b"), None, Some("c-baseline-0001")]
        .into_iter()
        .enumerate()
    {
        evs.push(chunk(
            1.2 + k as f64 * 0.01,
            "baseline-0001",
            20 + k as u32,
            cid,
            "x",
        ));
    }
    evs.push(chunk(
        1.31,
        "baseline-0001",
        30,
        Some("c-b"),
        "quote \" and \\ and \n",
    ));
    evs.sort_by_key(Event::t);
    evs
}

fn write_run(dir: &Path, plan: &Plan, evs: &[Event]) -> PathBuf {
    let json = serde_json::to_string_pretty(&plan.scenario).expect("scenario");
    std::fs::write(dir.join(super::SCENARIO_FILE), json).expect("write scenario");
    let tp = dir.join(crate::trace::TRACE_FILE);
    let (w, h) = TraceWriter::create(&tp).expect("create");
    for e in evs {
        w.emit(e.clone());
    }
    h.finish().expect("finish");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&tp)
        .expect("open");
    // Keys in another order (read by the plain struct), blank lines, a torn last line.
    f.write_all(b"{\"t\":1320000,\"ev\":\"chunk\",\"id\":\"baseline-0001\",\"n\":31,\"kind\":\"content\",\"text\":\"y\"}\n\n  \n{\"ev\":\"chunk\",\"t\":13")
        .expect("append");
    tp
}

/// The judgement as JSON, with what the report reads besides.
fn shape(j: &super::Judgement) -> serde_json::Value {
    serde_json::json!({"j": j, "requests": j.facts.requests.len()})
}

#[test]
fn a_stored_trace_judges_in_place_as_its_events_judge() {
    let plan = testkit::plan(&[]);
    for journal in [false, true] {
        let dir = temp(if journal { "journal" } else { "plain" });
        let tp = write_run(&dir, &plan, &events(&plan));
        if journal {
            // A gateway journal makes the fold merge in time: the event path.
            let mut tb = Tb::new();
            tb.steady("baseline", 1.0, 3.0, 10.0, testkit::rr(&["w1", "w2"]));
            let lines = tb.journal_lines();
            std::fs::write(dir.join(evidence::GATEWAY_FILE), lines.join("\n") + "\n")
                .expect("journal");
        }
        // Which path judge_dir takes rests on the journals it finds.
        let src = evidence::open(&dir, &plan);
        assert_eq!(src.gateway.is_some() || !src.workers.is_empty(), journal);
        let (_, in_place) = judge_dir(&dir).expect("judge_dir");
        let by_events = judge_with(
            &plan,
            || crate::trace::read(&tp).expect("read").map_while(Result::ok),
            evidence::open(&dir, &plan),
        );
        // (Not assert_eq: both sides are long; a difference shows in a diff of them.)
        assert!(
            shape(&in_place) == shape(&by_events),
            "judged in place and from events differ (journal: {journal})"
        );
        assert!(in_place.run.complete && in_place.unfinished == 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_bad_line_fails_the_judgement_at_its_number() {
    let plan = testkit::plan(&[]);
    let dir = temp("bad");
    let mut evs = events(&plan);
    evs.truncate(40);
    let tp = write_run(&dir, &plan, &evs);
    let text = std::fs::read_to_string(&tp).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(
        30,
        r#"{"ev":"chunk","t":"soon","id":"r","n":1,"kind":"content"}"#,
    );
    std::fs::write(&tp, lines.join("\n") + "\n").expect("write");
    let err = judge_dir(&dir).expect_err("a bad line fails").to_string();
    assert!(err.contains("trace.jsonl: line 31: "), "{err}");
    assert!(
        !dir.join(crate::metrics::hlog::HLOG_FILE).exists(),
        "nothing written for it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
