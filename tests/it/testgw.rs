//! A small independent gateway for tests (axum in front, reqwest to the upstreams),
//! standing in for a router haq knows nothing of: it keeps no journal, sends its
//! upstreams the client's body and `x-request-id` and nothing else, and relays back
//! only the status, `content-type` and the body. Its flaws are switches:
//! how often it retries a failed upstream request (and whether on the same upstream),
//! whether it checks its upstreams' readiness, whether it cancels the upstream
//! request when its client goes away, and which top-level body fields it drops (as
//! sglang-router drops `user` and LiteLLM consumes `metadata`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// How the gateway behaves.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Further tries after an upstream request fails before its answer begins
    /// (connection error or a status other than 200).
    pub retries: u32,
    /// Retries go to the same upstream (else to the next one in rotation).
    pub sticky: bool,
    /// Polls each upstream's `/ready` this often; one that does not answer 200 is
    /// out of rotation. `None`: every upstream is always in rotation.
    pub health: Option<Duration>,
    /// Closes the upstream request when its client goes away (else reads it to its
    /// end and throws the rest away).
    pub cancel: bool,
    /// Top-level fields of the request body it does not pass on.
    pub drops: &'static [&'static str],
}

impl Default for Policy {
    /// No retries, no health checks, cancels: a plain round-robin relay.
    fn default() -> Self {
        Policy {
            retries: 0,
            sticky: false,
            health: None,
            cancel: true,
            drops: &[],
        }
    }
}

struct Gw {
    upstreams: Vec<String>,
    ready: Vec<AtomicBool>,
    next: AtomicUsize,
    policy: Policy,
    http: reqwest::Client,
}

/// A running test gateway; stops when dropped.
pub struct TestGw {
    /// `http://127.0.0.1:PORT/v1`
    pub url: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for TestGw {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts a gateway over `upstreams` (`host:port` each).
pub async fn start(upstreams: &[String], policy: Policy) -> TestGw {
    haq::install_crypto_provider();
    let gw = Arc::new(Gw {
        upstreams: upstreams.iter().map(|u| format!("http://{u}")).collect(),
        ready: upstreams.iter().map(|_| AtomicBool::new(true)).collect(),
        next: AtomicUsize::new(0),
        http: reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("client"),
        policy,
    });
    let mut tasks = Vec::new();
    if let Some(every) = gw.policy.health {
        tasks.push(tokio::spawn(health(gw.clone(), every)));
    }
    let app = axum::Router::new()
        .route(
            "/v1/models",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"data": []})) }),
        )
        .fallback(axum::routing::post(relay))
        .with_state(gw);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tasks.push(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }));
    TestGw {
        url: format!("http://{addr}/v1"),
        tasks,
    }
}

/// Readiness of every upstream, every `every`.
async fn health(gw: Arc<Gw>, every: Duration) {
    loop {
        for (i, u) in gw.upstreams.iter().enumerate() {
            let ok = gw
                .http
                .get(format!("{u}/ready"))
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            gw.ready[i].store(ok, Ordering::Relaxed);
        }
        tokio::time::sleep(every).await;
    }
}

impl Gw {
    /// The next upstream in rotation after `from` (round robin); every upstream when
    /// none is ready.
    fn pick(&self, from: usize) -> usize {
        let n = self.upstreams.len();
        (0..n)
            .map(|k| (from + k) % n)
            .find(|&i| self.ready[i].load(Ordering::Relaxed))
            .unwrap_or(from % n)
    }
}

async fn relay(State(gw): State<Arc<Gw>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = without(body, gw.policy.drops);
    let mut at = gw.pick(gw.next.fetch_add(1, Ordering::Relaxed));
    let mut tries = 0;
    loop {
        let url = format!("{}{}", gw.upstreams[at], uri.path());
        let sent = gw
            .http
            .post(&url)
            .header("content-type", "application/json")
            .header("x-request-id", &id)
            .body(body.clone())
            .send()
            .await;
        let failed = match sent {
            Ok(r) if r.status() == 200 => return stream(&gw.policy, r),
            Ok(r) => {
                let status =
                    StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
                let text = r.bytes().await.unwrap_or_default();
                (status, text)
            }
            Err(e) => (StatusCode::BAD_GATEWAY, Bytes::from(e.to_string())),
        };
        if tries >= gw.policy.retries {
            return (failed.0, [("content-type", "application/json")], failed.1).into_response();
        }
        tries += 1;
        if !gw.policy.sticky {
            at = gw.pick(at + 1);
        }
    }
}

/// `body` re-encoded without the top-level fields `drops` (as it is when none).
fn without(body: Bytes, drops: &[&str]) -> Bytes {
    if drops.is_empty() {
        return body;
    }
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body) {
        Ok(mut m) => {
            for k in drops {
                m.remove(*k);
            }
            Bytes::from(serde_json::Value::Object(m).to_string())
        }
        Err(_) => body,
    }
}

/// The upstream's answer relayed to the client as it comes.
fn stream(policy: &Policy, r: reqwest::Response) -> Response {
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/event-stream")
        .to_string();
    let body = if policy.cancel {
        // The client gone, hyper drops the body, and with it the upstream response.
        Body::from_stream(r.bytes_stream())
    } else {
        // Read to the end whatever becomes of the client.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
        tokio::spawn(async move {
            let mut r = r;
            while let Ok(Some(b)) = r.chunk().await {
                let _ = tx.send(Ok(b)).await;
            }
        });
        Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (b, rx))
        }))
    };
    ([("content-type", ct)], body).into_response()
}
