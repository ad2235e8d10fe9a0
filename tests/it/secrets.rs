//! Secrets never reach a file (issue 15 item 4): a key planted in the environment, sent
//! as `authorization: {env: …}`, and a literal `x-api-key`, against a server that echoes
//! both in its response headers and in an error body: no byte of any output of the
//! run — every file of the run directory, stdout, stderr — holds either.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;

use crate::support::{haq_bin, scratch};

/// An OpenAI-ish server that echoes the credentials it is sent: in a header of every
/// answer, and in the body of every third (a 401).
fn echo_server(n: Arc<AtomicU64>) -> axum::Router {
    let chat = move |h: HeaderMap| {
        let n = n.fetch_add(1, Ordering::Relaxed);
        async move {
            let auth = h
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let key = h
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            if n % 3 == 2 {
                let body =
                    format!(r#"{{"error":{{"message":"invalid credentials {auth} / {key}"}}}}"#);
                return (StatusCode::UNAUTHORIZED, body).into_response();
            }
            let ev = |t: &str| {
                format!(
                    "data: {{\"id\":\"c{n}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n"
                )
            };
            let body = format!(
                "{}{}data: {{\"id\":\"c{n}\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n",
                ev(" a"),
                ev(" b")
            );
            (
                [
                    ("content-type", "text/event-stream".to_string()),
                    ("x-echo-auth", auth),
                    ("x-echo-key", key),
                ],
                body,
            )
                .into_response()
        }
    };
    axum::Router::new()
        .route(
            "/v1/models",
            axum::routing::get(|| async { r#"{"data":[]}"# }),
        )
        .route("/v1/chat/completions", axum::routing::post(chat))
}

fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_key_appears_in_no_output() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = Arc::new(AtomicU64::new(0));
    let server = tokio::spawn(axum::serve(listener, echo_server(served.clone())).into_future());
    // Straight to the server, then through haq's proxy in front of it (the client
    // talks to the proxy's listen address as it would to a gateway).
    let port = crate::simkit::free_port();
    for (name, target) in [
        ("direct", format!("url: http://{addr}/v1")),
        (
            "proxied",
            format!(
                "url: http://127.0.0.1:{port}/v1\n  replicas: [{{name: a, upstream: \"{addr}\", listen: \"127.0.0.1:{port}\"}}]"
            ),
        ),
    ] {
        let before = served.load(Ordering::Relaxed);
        planted_and_grepped(name, &target).await;
        assert!(
            served.load(Ordering::Relaxed) >= before + 6,
            "{name}: the server was asked"
        );
    }
    server.abort();
}

/// A run against `target` (the `target:` mapping's lines after `kind: url`) with a key
/// planted in the environment and a literal one; then `haq report` of it: no output of
/// either holds a key.
async fn planted_and_grepped(name: &str, target: &str) {
    let dir = scratch(&format!("secrets-{name}"));
    let key = format!("sk-planted-{:016x}", rand::random::<u64>());
    let literal = format!("literal-planted-{:016x}", rand::random::<u64>());
    let scenario = format!(
        r#"name: secrets
target:
  kind: url
  {target}
  headers:
    authorization: {{env: HAQ_PLANTED_KEY, prefix: "Bearer "}}
    x-api-key: {literal}
workload:
  seed: 3
  mix: {{classes: [{{name: chat, prompt_tokens: 10, output_tokens: 4}}]}}
  arrival: {{process: constant, rate: 6/s}}
protected_load: 6/s
slo: {{ttft_p95: 2s, itl_p95: 1s, e2e_p95: 5s, error_rate_max: 50%}}
phases:
  - {{name: baseline, duration: 2s}}
"#
    );
    let f = dir.join("secrets.yaml");
    std::fs::write(&f, scenario).expect("write");
    let out_dir = dir.join("run");
    let out = tokio::process::Command::new(haq_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out_dir)
        .arg(&f)
        .env("HAQ_PLANTED_KEY", &key)
        .output()
        .await
        .expect("haq run");
    // Every output re-rendered from the stored run, as a later `haq report` does.
    let report = tokio::process::Command::new(haq_bin())
        .arg("report")
        .arg(&out_dir)
        .output()
        .await
        .expect("haq report");
    let mut all = files_of(&out_dir);
    for (what, o) in [("run", &out), ("report", &report)] {
        all.push((format!("{what} stdout"), o.stdout.clone()));
        all.push((format!("{what} stderr"), o.stderr.clone()));
    }
    for (file, bytes) in &all {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains(&key), "{name}: {file} holds the planted key");
        assert!(
            !text.contains(&literal),
            "{name}: {file} holds the literal key"
        );
    }
    // The echo reached the trace, redacted: the test saw what it guards against.
    let trace = std::fs::read_to_string(out_dir.join("trace.jsonl")).expect("trace");
    assert!(
        trace.contains(r#"["x-echo-auth","[redacted]"]"#),
        "{name}: no echoed header in the trace"
    );
    assert!(
        trace.contains("invalid credentials"),
        "{name}: no echoed error body"
    );
    assert_eq!(
        trace.contains(r#""ev":"proxy_request""#),
        name == "proxied",
        "{name}: through haq's proxy or not"
    );
}

fn files_of(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut ps = Vec::new();
    files(dir, &mut ps);
    assert!(ps.len() >= 5, "{ps:?}");
    ps.into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read")))
        .collect()
}
