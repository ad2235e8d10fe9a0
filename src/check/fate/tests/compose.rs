//! Composition as in Jepsen: a finding FAILs, missing evidence is UNKNOWN (never
//! PASS), a crashing checker is UNKNOWN with its error; and the evidence loader.

use super::*;
use crate::check::evidence::{self, SourceState};
use crate::check::fate::{CHECKS, Check, Ctx, FateAcc};
use crate::check::history::{Folder, RequestRecord, RequestSink};

#[test]
fn a_clean_history_with_a_caught_request_passes() {
    let mut h = Tb::history();
    cut_properly(&mut h);
    let j = h.judge(&quickstart(&[]));
    let v = fate(&j);
    assert_eq!(v.status, Status::Pass, "{v:?}");
    contains(&v.summary, "1 requests caught");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("streaming (declared fail) → failed / explicit_error: 1")),
        "{:?}",
        v.evidence
    );
}

fn boom(
    _: &Ctx,
    _: &crate::check::fate::View,
    _: &[crate::check::history::FaultRec],
    _: &mut crate::check::fate::Out,
) {
    panic!("checker bug: index out of range");
}

struct Sink(FateAcc);
impl RequestSink for Sink {
    fn request(&mut self, r: &RequestRecord, faults: &[crate::check::history::FaultRec]) {
        self.0.add(r, faults);
    }
}

fn fold_with(h: &Tb, checks: Vec<(&'static str, Check)>) -> FateAcc {
    let p = quickstart(&[]);
    let mut sink = Sink(FateAcc::with_checks(Ctx::new(&p), checks));
    let mut folder = Folder::default();
    let mut events = h.events.clone();
    events.sort_by_key(|e| !matches!(e, Event::Fault(_)));
    for ev in events {
        folder.push(ev, &mut sink);
    }
    folder.finish(&mut sink);
    sink.0
}

#[test]
fn a_crashing_checker_is_unknown_with_its_error_and_the_others_still_run() {
    let mut h = Tb::history();
    cut_properly(&mut h);
    let mut checks = vec![("boom", boom as Check)];
    checks.extend(CHECKS);
    let acc = fold_with(&h, checks.clone());
    assert_eq!(acc.crashes.len(), 1);
    assert_eq!(acc.crashes[0].request.as_deref(), Some("r1"));
    assert!(acc.crashes[0].error.contains("index out of range"));
    assert_eq!(acc.hit, 1, "the policy checker ran after the crash");
    let p = quickstart(&[]);
    let declared = crate::check::fate::fate_faults(&p);
    let v = crate::check::fate::verdict(&acc, &declared, &[], &[], true);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "checker `boom` crashed");
    contains(&v.summary, "index out of range");

    // A finding still FAILs when another checker crashed (false beats unknown).
    let mut h2 = Tb::history();
    h2.req("r2", 0)
        .deltas("r2", "A", 10 * MS, &[" a", " b"])
        .end("r2", 100 * MS, Outcome::Reset);
    let acc = fold_with(&h2, checks);
    assert_eq!(acc.crashes[0].count, 1);
    let v = crate::check::fate::verdict(&acc, &declared, &[], &[], true);
    assert_eq!(v.status, Status::Fail, "{v:?}");
}

#[test]
fn missing_or_unreadable_evidence_is_unknown_never_pass() {
    let mut h = Tb::history();
    cut_properly(&mut h);
    let p = quickstart(&[]);
    let j = h.judge(&p);
    assert_eq!(status(&j), Status::Pass);
    let mut src = Sources::none();
    src.report(
        "gateway journal",
        SourceState::Missing,
        "the sim gateway journals every attempt, but it is absent",
    );
    let events = h.events.clone();
    let mut evs = events.clone();
    evs.push(Event::RunEnd {
        t: 200 * MS,
        interrupted: false,
        reason: None,
    });
    let j = judge_with(&p, || evs.clone(), src);
    let v = fate(&j);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "gateway journal: the sim gateway journals");
    // A journal that breaks midway.
    let mut src = Sources::none();
    src.gateway = Some(Box::new(
        vec![Err("gateway.jsonl:7: expected value".to_string())].into_iter(),
    ));
    src.report("gateway journal", SourceState::Used, "x");
    let j = judge_with(&p, || evs.clone(), src);
    assert_eq!(status(&j), Status::Unknown);
    assert!(
        fate(&j).summary.contains("gateway.jsonl:7"),
        "{}",
        fate(&j).summary
    );
}

#[test]
fn tool_calls_with_no_tool_log_on_the_sim_are_unknown() {
    let mut h = Tb::history();
    cut_properly(&mut h);
    h.req("t1", 0)
        .chunk(
            "t1",
            10 * MS,
            ChunkKind::ToolCall,
            Some("create_ticket{}"),
            Some("T"),
        )
        .finish("t1", "T", 20 * MS)
        .end("t1", 30 * MS, Outcome::Completed);
    let j = h.judge(&quickstart(&[]));
    let v = fate(&j);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "tool side effects (M7) are unchecked");
    h.tool(15 * MS, "t1", "call_1", "t1:call_1", "{}", false);
    assert_eq!(status(&h.judge(&quickstart(&[]))), Status::Pass);
}

#[test]
fn no_fault_is_not_evaluated_and_a_cut_trace_is_unknown() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "w1", 0, 4);
    let j = h.judge(&quickstart(&["faults=[]"]));
    assert_eq!(status(&j), Status::NotEvaluated, "{:?}", fate(&j));
    let mut h = Tb::history();
    cut_properly(&mut h);
    let evs = h.events.clone();
    let j = crate::check::judge(&quickstart(&[]), || evs.clone());
    assert_eq!(status(&j), Status::Unknown, "no run_end: {:?}", fate(&j));
}

#[test]
fn journal_lines_after_the_clients_end_still_reach_their_request() {
    // The journal says a1 ran to completion 1.5 s after the client gave up; the
    // line comes after the trace's end of r1 and must still be seen (linger).
    let mut h = Tb::journaled();
    h.req("r1", 0)
        .end("r1", 1000 * MS, Outcome::IdleTimeout)
        .attempt("r1", 1, "w1", (MS, 0), (2500 * MS, "finished", 0));
    let j = h.judge(&quickstart(&["evidence.cancel_grace=1s"]));
    assert!(
        has(&j, FindingKind::UpstreamNotCancelled),
        "{:#?}",
        j.findings
    );
}

#[test]
fn journal_lines_parse_forward_compatibly_and_map_to_trace_time() {
    let l = evidence::GwLine::parse(
        r#"{"t_ns":5000000,"ev":"attempt_start","req":"r1","attempt":"r1/a1","worker":"w1","delivered":0}"#,
    )
    .expect("known");
    assert_eq!(l.trace_t(1_000_000), 4000);
    assert_eq!(l.item.req(), Some("r1"));
    let l = evidence::GwLine::parse(
        r#"{"t_ns":9,"ev":"lease_renewed_v9","req":"r1","attempt":"r1/a1","until_ns":99}"#,
    )
    .expect("unknown kinds are kept");
    assert!(matches!(l.item, evidence::GwItem::Other { ref ev, .. } if ev == "lease_renewed_v9"));
    let e = evidence::GwLine::parse(r#"{"t_ns":9,"ev":"attempt_start","req":"r1"}"#)
        .expect_err("a known kind with missing fields is an error");
    assert!(e.contains("attempt_start"), "{e}");
    assert!(evidence::GwLine::parse(r#"{"ev":"x"}"#).is_err());
}

#[test]
fn evidence_files_stream_with_a_torn_last_line_ignored() {
    let dir = std::env::temp_dir().join(format!("haq-evidence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("gateway.jsonl");
    std::fs::write(
        &f,
        "{\"t_ns\":1,\"ev\":\"no_upstream\",\"req\":\"r\",\"attempts\":1}\n\n{\"t_ns\":2,\"ev\":\"no_up",
    )
    .expect("write");
    let lines: Vec<_> = evidence::stream(&f, evidence::GwLine::parse)
        .expect("open")
        .collect();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].is_ok());
    std::fs::write(
        &f,
        "{\"t_ns\":1,\"ev\":\"no_upstream\",\"req\":\"r\",\"attempts\":1}\nnot json\n{}\n",
    )
    .expect("write");
    let lines: Vec<_> = evidence::stream(&f, evidence::GwLine::parse)
        .expect("open")
        .collect();
    assert!(
        lines[1]
            .as_ref()
            .is_err_and(|e| e.contains("gateway.jsonl:2")),
        "{lines:?}"
    );
    // A run directory: the sim's journal is expected, a tool log is not (unless set).
    let p = quickstart(&[]);
    std::fs::remove_file(&f).expect("rm");
    let src = evidence::open(&dir, &p);
    assert_eq!(src.state("gateway journal"), Some(SourceState::Missing));
    assert_eq!(src.state("tool log"), Some(SourceState::NotExpected));
    let p = quickstart(&["evidence.tool_log=/nonexistent/tools.jsonl"]);
    let src = evidence::open(&dir, &p);
    assert_eq!(src.state("tool log"), Some(SourceState::Missing));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tool log a run copied in (engine::evidence, tested there) is judged from the
/// run directory.
#[test]
fn a_tool_log_in_the_run_directory_is_judged() {
    let dir = std::env::temp_dir().join(format!("haq-collect-{}", std::process::id()));
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("dir");
    let line = r#"{"t_ns":1,"logical_request_id":"r1","tool_call_id":"c1","idempotency_key":"r1:c1","tool":"t","arguments":"{}","result":"ok","deduplicated":false}"#;
    std::fs::write(run.join(evidence::TOOLS_FILE), format!("{line}\n{line}\n")).expect("write");
    let set = format!(
        "evidence.tool_log={}",
        run.join(evidence::TOOLS_FILE).display()
    );
    let p = quickstart(&[&set]);
    // Judged from the run directory: the key ran twice.
    let s = evidence::open(&run, &p);
    assert_eq!(s.state("tool log"), Some(SourceState::Used));
    let mut h = Tb::history();
    cut_properly(&mut h);
    let evs = h.events.clone();
    let j = judge_with(&p, || evs.clone(), s);
    assert_eq!(kinds(&j), vec![FindingKind::DuplicateToolEffect]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fault that never fired (a probe whose serving replica was never known: recorded
/// not applied, on no replica) caught no request: Request-Fate is UNKNOWN saying why,
/// never "N requests caught by the fault behaved as the policy says"; the timeline
/// names no empty replica (issue 21 item 6).
#[test]
fn a_fault_that_never_fired_leaves_request_fate_unknown_and_names_no_empty_replica() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "w1", 0, 4);
    // As the engine records a probe that never reached its point (faults::fire::missed).
    h.fault_as(crate::trace::FaultLine {
        t: 50 * MS,
        name: "kill-w2".into(),
        domain: crate::scenario::FailureDomain::Worker,
        action: crate::scenario::FaultAction::Kill,
        replica: String::new(),
        pid: None,
        verified: false,
        detail: "not applied: 3 deltas delivered but no replica is known to serve the probe".into(),
        backend: Some(crate::scenario::FaultBackend::Process),
        node: None,
        trigger: Some("probe first_delta".into()),
        triggered: None,
        probe: Some("probe-kill-w2".into()),
    });
    let j = h.judge(&quickstart(&[]));
    let v = fate(&j);
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "kill-w2 was not applied");
    assert!(j.fate_table.is_empty(), "{:?}", j.fate_table);
    let rows: Vec<&str> = j
        .timeline
        .entries
        .iter()
        .map(|e| e.event.as_str())
        .collect();
    assert!(
        rows.iter()
            .any(|e| e.contains("kill-w2 not applied (kill no replica)")),
        "{rows:?}"
    );
    assert!(
        !rows.iter().any(|e| e.contains("  ") || e.ends_with(' ')),
        "{rows:?}"
    );
    // The same run with the fault applied on w2 (r1 was on w1: not caught) is no PASS
    // either: the fault tested no request fate.
    let mut h = Tb::history();
    clean(&mut h, "r1", "w1", 0, 4);
    h.kill(50 * MS, "w2");
    let v = fate(&h.judge(&quickstart(&[]))).clone();
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(&v.summary, "tested no request fate");
}

/// A declared fault with no record at all in the trace (the run ended first) is not
/// applied either.
#[test]
fn a_declared_fault_missing_from_the_trace_leaves_request_fate_unknown() {
    let mut h = Tb::history();
    clean(&mut h, "r1", "w1", 0, 4);
    let v = fate(&h.judge(&quickstart(&[]))).clone();
    assert_eq!(v.status, Status::Unknown, "{v:?}");
    contains(
        &v.summary,
        "kill-w2 was not applied (no record of it in the trace)",
    );
}
