//! The embedded gateway (`haq sim gateway`): admission and load shedding, least-loaded
//! routing over ready workers, attempts with publication leases and fencing, and the
//! failover policy of SPEC M1–M8 — or one deliberately flawed deviation (docs/sim.md).
//!
//! Client-facing contract: the request's `x-request-id` (or a generated `gw-N`) is the
//! logical request id, forwarded unchanged to the worker with `x-haq-attempt:
//! <id>/a<N>`; `x-haq-priority: best_effort` marks traffic that may be shed first.
//! Response headers `x-haq-worker` and `x-haq-attempt` name the serving worker and
//! attempt; for streams they go out with the first delta (the commit point).

mod admission;
mod fence;
mod health;
mod lease;
mod migrate;
mod net;
mod peek;
mod query;
mod relay;
mod request;
mod state;
mod upstream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::journal::Journal;
use super::worker::openai_error;
use crate::sim::config::{GatewayCfg, GatewayPolicy};
use crate::wire::headers::{ATTEMPT_HEADER, WORKER_HEADER};
use crate::wire::journal::Priority;
use admission::Admission;
use relay::{Client, Forward, Head};
use state::Gateway;
use upstream::Upstream;

/// Request header marking a request's priority (`x-haq-priority`, sent by haq's client
/// for each class): `best_effort` (or `best-effort`) may be shed first; anything else,
/// or none, is protected traffic.
pub use crate::wire::headers::PRIORITY_HEADER;
/// Request header naming the worker the first attempt should go to, when it is
/// routable (manual experiments and tests; retries still go elsewhere).
pub const ROUTE_HEADER: &str = "x-haq-route";

pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// (name, base URL without `/v1`)
    pub upstreams: Vec<(String, String)>,
    pub cfg: GatewayCfg,
    pub journal: Option<PathBuf>,
}

pub async fn serve(c: GatewayConfig) -> anyhow::Result<()> {
    crate::wire::tls::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind(c.listen).await?;
    let addr = listener.local_addr()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(c.cfg.connect_timeout.0)
        .pool_idle_timeout(Duration::from_secs(10))
        .build()?;
    let control = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(c.cfg.connect_timeout.0)
        .pool_max_idle_per_host(0)
        .build()?;
    let blind = c.cfg.policy == GatewayPolicy::NoHealthCheck;
    let gw = Arc::new(Gateway {
        ups: c
            .upstreams
            .into_iter()
            .map(|(name, url)| Upstream::new(name, url, blind))
            .collect(),
        admission: Admission::new(
            c.cfg.policy != GatewayPolicy::NoShedding,
            c.cfg.queue_limit,
            c.cfg.best_effort_queue_limit,
            c.cfg.queue_timeout.0,
        ),
        retry_tokens: Mutex::new(f64::from(c.cfg.retry_burst)),
        cfg: c.cfg,
        http,
        control,
        journal: Journal::open(c.journal.as_deref())?,
        journal_path: c.journal.clone(),
        rr: AtomicUsize::new(0),
        seq: AtomicU64::new(0),
    });
    gw.admission.set_capacity(gw.capacity());
    for i in 0..gw.ups.len() {
        if !blind {
            // FLAW no-health-check: no active health checks at all.
            tokio::spawn(health::run(gw.clone(), i));
        }
        tokio::spawn(fence::renew_loop(gw.clone(), i));
    }
    super::announce(addr);
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/haq/status", get(status))
        .route("/haq/requests/{id}", get(query::request))
        .route("/v1/chat/completions", post(forward))
        .route("/v1/completions", post(forward))
        .route("/v1/models", get(models))
        .with_state(gw);
    super::serve_nodelay(listener, app).await?;
    Ok(())
}

/// `GET /haq/status`: policy, upstreams with their state, queue and in-flight counts.
async fn status(State(gw): State<Arc<Gateway>>) -> Response {
    let ups: Vec<_> = gw
        .ups
        .iter()
        .map(|u| {
            json!({"name": u.name, "url": u.url, "ready": u.routable(),
                   "state": u.health().as_str(),
                   "inflight": u.inflight.load(Ordering::Relaxed)})
        })
        .collect();
    let tokens = *gw.retry_tokens.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(json!({"policy": gw.cfg.policy.name(), "upstreams": ups,
                      "queue": gw.admission.queue_len(), "inflight": gw.admission.inflight(),
                      "retry_tokens": tokens}))
    .into_response()
}

async fn models(State(gw): State<Arc<Gateway>>) -> Response {
    let Some(i) = gw.pick(&[]) else {
        return openai_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "no ready upstream",
        );
    };
    let r = gw
        .http
        .get(format!("{}/v1/models", gw.ups[i].url))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    match r {
        Ok(r) => match r.bytes().await {
            Ok(b) => ([("content-type", "application/json")], b).into_response(),
            Err(_) => openai_error(StatusCode::BAD_GATEWAY, "upstream_error", "upstream failed"),
        },
        Err(_) => openai_error(StatusCode::BAD_GATEWAY, "upstream_error", "upstream failed"),
    }
}

fn priority_of(h: &HeaderMap) -> Priority {
    match h.get(PRIORITY_HEADER).and_then(|v| v.to_str().ok()) {
        Some("best_effort" | "best-effort") => Priority::BestEffort,
        _ => Priority::Protected,
    }
}

async fn forward(
    State(gw): State<Arc<Gateway>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let rid = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| format!("gw-{}", gw.seq.fetch_add(1, Ordering::Relaxed)));
    let stream = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["stream"].as_bool())
        .unwrap_or(false);
    let route = headers
        .get(ROUTE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|n| gw.ups.iter().position(|u| u.name == n));
    let incoming = request::Incoming {
        route,
        priority: priority_of(&headers),
        stream,
        prompt_tokens: super::worker::request::prompt_tokens_of(&body),
        f: Forward {
            rid: rid.clone(),
            path: uri.path().to_string(),
            body,
            resumed: None,
        },
    };
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, mut body_rx) = mpsc::channel::<Bytes>(32);
    tokio::spawn(request::run(
        gw.clone(),
        incoming,
        Client::new(head_tx, body_tx),
    ));
    let Ok(head) = head_rx.await else {
        return openai_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "gateway_error",
            "request task ended",
        );
    };
    match head {
        Head::Whole {
            status,
            headers,
            body,
        } => {
            let mut b = Response::builder()
                .status(status)
                .header("x-request-id", &rid);
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Head::Stream { worker, attempt } => {
            let stream = futures_util::stream::poll_fn(move |cx| {
                body_rx.poll_recv(cx).map(|o| o.map(Ok::<_, Infallible>))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .header("x-request-id", &rid)
                .header(WORKER_HEADER, worker)
                .header(ATTEMPT_HEADER, attempt)
                .body(Body::from_stream(stream))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}
