//! Repetitive model output is no finding (issue 21 item 5), end to end: `haq run` on a
//! url target whose server (axum, loopback) streams an OpenAI `chat.completion.chunk`
//! answer one SSE event at a time — `tok tok tok …`, one delta per token, or the
//! captured Gemma 3 270M base-model answer that repeats itself
//! (tests/data/wire/llamacpp-gemma-base-model-repeats.sse) — through haq's client. One
//! attempt, one chunk id, no hand-over: no `duplicated_output` nor any other finding,
//! Request-Fate not FAIL. The same Gemma answer with its chunk id changed where it
//! starts over (a hand-over to another writer) is still found.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use haq::check::Status;
use haq::check::fate::FindingKind;
use haq::trace::{Event, Outcome};

use crate::support::{events, plan_text, run, verdict};

const GEMMA: &str = include_str!("../data/wire/llamacpp-gemma-base-model-repeats.sse");

/// Serves `answer` (whole SSE events, each `data: …\n\n`) to every chat completion,
/// one event per write, 2 ms apart. Returns the API URL.
async fn server(answer: Vec<String>) -> String {
    let app = axum::Router::new()
        .route(
            "/v1/models",
            axum::routing::get(|| async { r#"{"object":"list","data":[]}"# }),
        )
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(Arc::new(answer));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}/v1")
}

async fn chat(State(answer): State<Arc<Vec<String>>>) -> Response {
    let events = futures_util::stream::unfold(0, move |i| {
        let answer = answer.clone();
        async move {
            let ev = answer.get(i)?.clone();
            tokio::time::sleep(Duration::from_millis(2)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from(ev)), i + 1))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(events))
        .unwrap_or_default()
}

/// `tok tok tok …`: `n` deltas of one token each under one chunk id, then the
/// finish and `[DONE]`, as an OpenAI-compatible server sends them.
fn tok_answer(n: usize) -> Vec<String> {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-tok\",\"object\":\"chat.completion.chunk\",\"created\":1796159619,\"model\":\"tok\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let mut out = vec![chunk(r#"{"role":"assistant","content":""}"#, "null")];
    for i in 0..n {
        let t = if i == 0 { "tok" } else { " tok" };
        out.push(chunk(&format!(r#"{{"content":"{t}"}}"#), "null"));
    }
    out.push(chunk("{}", r#""length""#));
    out.push("data: [DONE]\n\n".into());
    out
}

/// The captured Gemma answer, event by event; from the event where it says "Hello"
/// again on, under chunk id `then` when given (a hand-over).
fn gemma_answer(then: Option<&str>) -> Vec<String> {
    let events: Vec<String> = GEMMA
        .split_inclusive("\n\n")
        .filter(|e| e.starts_with("data: "))
        .map(str::to_string)
        .collect();
    let again = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.contains(r#""content":"Hello""#))
        .nth(1)
        .map(|(i, _)| i)
        .expect("the answer says Hello twice");
    let id = "chatcmpl-xIezHRLQzHVmLAOPKw8bD4lIUuAfXlVo";
    assert!(events[0].contains(id), "{}", events[0]);
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| match then {
            Some(other) if i >= again => e.replace(id, other),
            _ => e,
        })
        .collect()
}

/// `haq run` against `url`: 4/s for 4 s of one class asking for `tokens`, no fault.
async fn haq_run(name: &'static str, url: &str, tokens: usize) -> haq::RunResult {
    let text = format!(
        r#"name: {name}
target: {{kind: url, url: "{url}"}}
workload:
  seed: 21
  mix: {{classes: [{{name: chat, prompt_tokens: 8, output_tokens: {tokens}}}]}}
  arrival: {{process: constant, rate: 4/s}}
protected_load: 4/s
slo: {{ttft_p95: 10s, itl_p95: 2s, e2e_p95: 30s}}
client: {{max_late: 3s}}
phases: [{{name: baseline, duration: 4s}}]
"#
    );
    run(plan_text(&text, &[]), name).await
}

/// Every request completed with `tokens` output tokens (the answers were read whole),
/// and no finding; Request-Fate is not FAIL.
fn clean(r: &haq::RunResult, tokens: u32) {
    let ends: Vec<(Outcome, u32)> = events(r)
        .into_iter()
        .filter_map(|e| match e {
            Event::End {
                outcome, tokens, ..
            } => Some((outcome, tokens)),
            _ => None,
        })
        .collect();
    assert!(ends.len() >= 12, "{} requests", ends.len());
    assert!(
        ends.iter().all(|e| *e == (Outcome::Completed, tokens)),
        "{ends:?}"
    );
    assert!(
        r.judgement.findings.is_empty(),
        "repetition alone is no finding (duplicated_output): {:#?}",
        r.judgement.findings
    );
    let fate = verdict(r, "Request-Fate");
    assert_ne!(fate.status, Status::Fail, "{fate:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_tok_tok_tok_gives_no_finding() {
    let url = server(tok_answer(64)).await;
    let r = haq_run("repeats-tok", &url, 64).await;
    clean(&r, 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_models_captured_repetitive_answer_gives_no_finding_unless_handed_over() {
    let url = server(gemma_answer(None)).await;
    let r = haq_run("repeats-gemma", &url, 48).await;
    clean(&r, 48);
    // The control: another writer's chunk id where the answer starts over.
    let url = server(gemma_answer(Some("chatcmpl-other"))).await;
    let r = haq_run("repeats-gemma-handed-over", &url, 48).await;
    assert!(
        r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::DuplicatedOutput),
        "{:#?}",
        r.judgement.findings
    );
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);
}
