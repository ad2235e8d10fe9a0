//! Request-Fate end to end: `haq check` on a stored run directory with a gateway
//! journal and a tool log, attribution headers named in the scenario, and the
//! reference gateway over several seeds (SPEC M1–M3, M5, M7, M10, Q8).

use std::time::Duration;

use haq::check::Status;
use haq::check::fate::FindingKind;
use haq::client::{self, Call, Timeouts};
use haq::trace::{Clock, Event, TraceWriter};

use crate::cli::haq;
use crate::support::{LOOSE_SLO, plan, root, run, scratch, verdict};

/// A copy of tests/data/fate-run with the quickstart's effective scenario.
fn fixture_run() -> std::path::PathBuf {
    let dir = scratch("fate-fixture");
    for f in ["trace.jsonl", "gateway.jsonl", "tools.jsonl"] {
        std::fs::copy(root().join("tests/data/fate-run").join(f), dir.join(f)).expect("copy");
    }
    let p = plan("scenarios/quickstart.yaml", &[]);
    let json = serde_json::to_string_pretty(&p.scenario).expect("json");
    std::fs::write(dir.join(haq::check::SCENARIO_FILE), json).expect("scenario");
    dir
}

#[test]
fn haq_check_finds_every_anomaly_of_a_stored_run_from_all_its_evidence() {
    let dir = fixture_run();
    let (code, out, err) = haq(&["check", dir.to_str().expect("utf8")]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("Request-Fate"), "{out}");
    let (_, j) = haq::check::judge_dir(&dir).expect("judged");
    let found = |k: FindingKind, req: &str| {
        j.findings
            .iter()
            .find(|f| f.kind == k && f.request == req)
            .unwrap_or_else(|| panic!("no {k:?} on {req}: {:#?}", j.findings))
    };
    let s = found(FindingKind::StitchedOutput, "r1");
    assert_eq!(s.chunks, vec![3, 5]);
    assert_eq!(s.excerpt.as_deref(), Some("ba de fi ‖ ba de fi"));
    found(FindingKind::DuplicatedOutput, "r1");
    found(FindingKind::TwoWriters, "r1");
    let r = found(FindingKind::RetryAfterFirstDelta, "r1");
    assert_eq!(r.attempts, vec!["chatcmpl-w2-7", "chatcmpl-w1-3"]);
    let t = found(FindingKind::DuplicateToolEffect, "r2");
    assert_eq!(t.attempts, vec!["r2/a1:call_1", "r2/a2:call_1"]);
    assert!(
        j.findings.iter().all(|f| f.request != "r3"),
        "{:#?}",
        j.findings
    );
    // r1 was caught streaming on w2, with both attempts from the journal.
    let f = &j.fate_requests[0];
    assert_eq!(
        (f.request.as_str(), f.stage, f.attempts.len()),
        ("r1", haq::check::fate::Stage::Streaming, 2)
    );
    assert_eq!(f.workers, vec!["w2", "w1"]);

    // Without the tool log the tool side effect is not seen; the rest still is.
    std::fs::remove_file(dir.join("tools.jsonl")).expect("rm");
    let (_, j) = haq::check::judge_dir(&dir).expect("judged");
    assert!(
        !j.findings
            .iter()
            .any(|f| f.kind == FindingKind::DuplicateToolEffect)
    );
    assert_eq!(
        j.verdicts
            .iter()
            .find(|v| v.name == "Request-Fate")
            .map(|v| v.status),
        Some(Status::Fail)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribution_headers_named_in_the_scenario_are_recorded() {
    haq::install_crypto_provider();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            (
                [
                    ("content-type", "text/event-stream"),
                    ("x-backend", "b7"),
                    ("x-try", "r1/a2"),
                ],
                "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().expect("addr")
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let path = scratch("attribution").join("t.jsonl");
    let (tw, th) = TraceWriter::create(&path).expect("trace");
    let http = client::http_client(Duration::from_secs(2), &Default::default()).expect("client");
    let mut c = Call::new("r1", &url, bytes::Bytes::from_static(b"{}"));
    c.attribution = Some(std::sync::Arc::new(client::Attribution {
        worker: "x-backend".into(),
        attempt: "x-try".into(),
    }));
    let timeouts = Timeouts {
        first_token: Duration::from_secs(5),
        idle: Duration::from_secs(5),
    };
    client::execute(&http, &c, timeouts, &Clock::start(), &tw).await;
    drop(tw);
    th.finish().expect("trace");
    server.abort();
    let head = haq::trace::read(&path)
        .expect("read")
        .filter_map(Result::ok)
        .find_map(|e| match e {
            Event::Response {
                worker, attempt, ..
            } => Some((worker, attempt)),
            _ => None,
        });
    assert_eq!(
        head,
        Some((Some("b7".to_string()), Some("r1/a2".to_string())))
    );
}

/// The reference gateway gives no Request-Fate finding, whatever the seed: the kill
/// lands on different requests in different stages each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_gateway_has_no_request_fate_finding_over_several_seeds() {
    for seed in ["7", "1234"] {
        let ws = format!("workload.seed={seed}");
        let mut sets = vec![
            "phases[0].duration=3s",
            "phases[1].duration=4s",
            "phases[2].duration=3s",
            "faults[0].at.offset=2s",
            "workload.mix.classes[0].output_tokens={uniform: [60, 120]}",
            ws.as_str(),
        ];
        sets.extend(LOOSE_SLO);
        let r = run(plan("scenarios/quickstart.yaml", &sets), "reference-seeds").await;
        let fate = verdict(&r, "Request-Fate");
        assert!(
            r.judgement.findings.is_empty(),
            "seed {seed}: {:#?}",
            r.judgement.findings
        );
        assert_eq!(fate.status, Status::Pass, "seed {seed}: {fate:?}");
        assert!(!r.judgement.fate_table.is_empty());
    }
}
