//! The embedded gateway (`haq sim gateway`): round robin over ready workers, with the
//! seed's failover policy (M1–M3) or a deliberately flawed one.
//!
//! Reference policy: an attempt is committed when its first delta is handed to the
//! client; response headers go out with that delta, so they name the attempt that
//! really serves. Before the commit, a failed attempt is retried on another worker
//! within the retry budget (the client sees only latency). After it, the stream ends
//! with the explicit `upstream_decode_interrupted` error event.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
use crate::client::sse::{SseItem, SseParser};
use crate::client::{ATTEMPT_HEADER, WORKER_HEADER, chunk};
use crate::scenario::GatewayPolicy;
use crate::trace::ChunkKind;
use crate::trace::journal::GatewayEntry;

pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// (name, base URL without `/v1`)
    pub upstreams: Vec<(String, String)>,
    pub cfg: crate::scenario::GatewayCfg,
    pub journal: Option<PathBuf>,
}

struct Upstream {
    name: String,
    url: String,
    healthy: AtomicBool,
    fails: AtomicU32,
}

struct Gateway {
    ups: Vec<Upstream>,
    rr: AtomicUsize,
    seq: AtomicU64,
    http: reqwest::Client,
    policy: GatewayPolicy,
    retry_budget: u32,
    health_failures: u32,
    journal: Journal,
}

impl Gateway {
    /// Next ready upstream in round-robin order, skipping `avoid`.
    fn pick(&self, avoid: Option<usize>) -> Option<usize> {
        let n = self.ups.len();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| Some(i) != avoid && self.ups[i].healthy.load(Ordering::SeqCst))
    }

    fn set_health(&self, i: usize, ok: bool, why: &str) {
        let u = &self.ups[i];
        if ok {
            u.fails.store(0, Ordering::SeqCst);
        } else {
            u.fails.fetch_add(1, Ordering::SeqCst);
        }
        let now_ok = ok
            || (u.healthy.load(Ordering::SeqCst)
                && u.fails.load(Ordering::SeqCst) < self.health_failures);
        if u.healthy.swap(now_ok, Ordering::SeqCst) != now_ok {
            let (worker, why) = (u.name.clone(), why.to_string());
            self.journal.write(if now_ok {
                GatewayEntry::UpstreamReady { worker, why }
            } else {
                GatewayEntry::UpstreamRemoved {
                    worker,
                    why,
                    cause: Default::default(),
                }
            });
        }
    }

    /// A request to this upstream failed at the connection level: take it out now.
    fn mark_dead(&self, i: usize, why: &str) {
        self.ups[i]
            .fails
            .store(self.health_failures, Ordering::SeqCst);
        if self.ups[i].healthy.swap(false, Ordering::SeqCst) {
            self.journal.write(GatewayEntry::UpstreamRemoved {
                worker: self.ups[i].name.clone(),
                why: why.to_string(),
                cause: Default::default(),
            });
        }
    }
}

pub async fn serve(cfg: GatewayConfig) -> anyhow::Result<()> {
    crate::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(10))
        .build()?;
    let gw = Arc::new(Gateway {
        ups: cfg
            .upstreams
            .into_iter()
            .map(|(name, url)| Upstream {
                name,
                url,
                healthy: AtomicBool::new(false),
                fails: AtomicU32::new(0),
            })
            .collect(),
        rr: AtomicUsize::new(0),
        seq: AtomicU64::new(0),
        http,
        policy: cfg.cfg.policy,
        retry_budget: cfg.cfg.retry_budget,
        health_failures: cfg.cfg.health_failures,
        journal: Journal::open(cfg.journal.as_deref())?,
    });
    for i in 0..gw.ups.len() {
        tokio::spawn(health_loop(gw.clone(), i, cfg.cfg.health_interval.0));
    }
    super::announce(addr);
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/haq/status", get(status))
        .route("/v1/chat/completions", post(forward))
        .route("/v1/completions", post(forward))
        .route("/v1/models", get(models))
        .with_state(gw);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn health_loop(gw: Arc<Gateway>, i: usize, every: Duration) {
    let url = format!("{}/ready", gw.ups[i].url);
    let timeout = every.max(Duration::from_millis(200));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let r = gw.http.get(&url).timeout(timeout).send().await;
        match r {
            Ok(resp) if resp.status().is_success() => gw.set_health(i, true, "ready check passed"),
            Ok(resp) => gw.set_health(i, false, &format!("ready check: HTTP {}", resp.status())),
            Err(e) => gw.set_health(i, false, &format!("ready check: {e}")),
        }
    }
}

async fn status(State(gw): State<Arc<Gateway>>) -> Response {
    let ups: Vec<_> = gw
        .ups
        .iter()
        .map(|u| json!({"name": u.name, "url": u.url, "ready": u.healthy.load(Ordering::SeqCst)}))
        .collect();
    axum::Json(json!({"policy": gw.policy, "upstreams": ups})).into_response()
}

async fn models(State(gw): State<Arc<Gateway>>) -> Response {
    match gw.pick(None) {
        Some(i) => match gw
            .http
            .get(format!("{}/v1/models", gw.ups[i].url))
            .send()
            .await
        {
            Ok(r) => match r.bytes().await {
                Ok(b) => ([("content-type", "application/json")], b).into_response(),
                Err(_) => {
                    openai_error(StatusCode::BAD_GATEWAY, "upstream_error", "upstream failed")
                }
            },
            Err(_) => openai_error(StatusCode::BAD_GATEWAY, "upstream_error", "upstream failed"),
        },
        None => openai_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_upstream",
            "no ready upstream",
        ),
    }
}

/// What the request task tells the handler before any body byte.
enum Head {
    /// Stream committed to this attempt; body follows on the channel.
    Stream { worker: String, attempt: String },
    /// A complete non-stream answer (status, content type, body).
    Whole {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
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
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, mut body_rx) = mpsc::channel::<Bytes>(32);
    tokio::spawn(run_request(
        gw.clone(),
        rid.clone(),
        uri.path().to_string(),
        body,
        head_tx,
        body_tx,
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

fn sse(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// How one upstream attempt ended.
enum AttemptEnd {
    /// `[DONE]` or finish_reason seen and the body ended.
    Finished,
    /// The client went away.
    ClientGone,
    /// The upstream failed (connection, status or body) — with the reason.
    Failed(String),
    /// Not a stream: the whole answer was relayed.
    Relayed,
}

async fn run_request(
    gw: Arc<Gateway>,
    rid: String,
    path: String,
    body: Bytes,
    head_tx: oneshot::Sender<Head>,
    body_tx: mpsc::Sender<Bytes>,
) {
    let mut head_tx = Some(head_tx);
    let mut attempts: u32 = 0;
    let mut delivered: u32 = 0;
    let mut last: Option<usize> = None;
    loop {
        attempts += 1;
        let Some(i) = gw.pick(last) else {
            gw.journal.write(GatewayEntry::NoUpstream {
                req: rid.clone(),
                attempts: attempts - 1,
            });
            finish_failed(
                &gw,
                &rid,
                &mut head_tx,
                &body_tx,
                delivered,
                "no ready upstream",
            )
            .await;
            return;
        };
        last = Some(i);
        let attempt = format!("{rid}/a{attempts}");
        gw.journal.write(GatewayEntry::AttemptStart {
            req: rid.clone(),
            attempt: attempt.clone(),
            worker: gw.ups[i].name.clone(),
            delivered,
        });
        let end = run_attempt(
            &gw,
            i,
            &attempt,
            &path,
            &body,
            &mut head_tx,
            &body_tx,
            &mut delivered,
        )
        .await;
        let (result, why) = match &end {
            AttemptEnd::Finished => ("finished", None),
            AttemptEnd::ClientGone => ("client_gone", None),
            AttemptEnd::Relayed => ("relayed", None),
            AttemptEnd::Failed(w) => ("failed", Some(w.clone())),
        };
        gw.journal.write(GatewayEntry::AttemptEnd {
            req: rid.clone(),
            attempt: attempt.clone(),
            worker: gw.ups[i].name.clone(),
            result: result.into(),
            why,
            delivered,
        });
        let AttemptEnd::Failed(why) = end else { return };
        let budget_left = attempts <= gw.retry_budget;
        match (head_tx.is_none(), gw.policy) {
            // Nothing reached the client yet: a retry costs only latency (M2).
            (false, _) if budget_left => continue,
            (false, _) => {
                finish_failed(&gw, &rid, &mut head_tx, &body_tx, delivered, &why).await;
                return;
            }
            (true, GatewayPolicy::NaiveRetry) if budget_left => {
                gw.journal.write(GatewayEntry::RetryAfterDelta {
                    req: rid.clone(),
                    delivered,
                });
                continue;
            }
            (true, GatewayPolicy::SilentTruncate) => {
                let _ = body_tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                return;
            }
            (true, _) => {
                finish_failed(&gw, &rid, &mut head_tx, &body_tx, delivered, &why).await;
                return;
            }
        }
    }
}

/// Ends a request that cannot be served: an HTTP error if nothing was committed, the
/// explicit error event (M3) otherwise.
async fn finish_failed(
    gw: &Gateway,
    rid: &str,
    head_tx: &mut Option<oneshot::Sender<Head>>,
    body_tx: &mpsc::Sender<Bytes>,
    delivered: u32,
    why: &str,
) {
    if let Some(h) = head_tx.take() {
        let body = json!({"error": {"message": format!("no upstream could serve the request: {why}"),
                                    "type": "upstream_unavailable", "param": null, "code": 503}});
        let _ = h.send(Head::Whole {
            status: 503,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("retry-after".into(), "1".into()),
            ],
            body: Bytes::from(body.to_string()),
        });
        return;
    }
    let ev = json!({"error": {
        "code": "upstream_decode_interrupted",
        "message": "generation was interrupted after part of the answer was sent",
        "request_id": rid,
        "partial_output": true,
        "delivered_output_tokens": delivered,
        "retryable": false,
    }});
    gw.journal.write(GatewayEntry::ExplicitError {
        req: rid.to_string(),
        delivered,
        why: why.to_string(),
    });
    let _ = body_tx.send(sse(&ev.to_string())).await;
}

#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    gw: &Gateway,
    i: usize,
    attempt: &str,
    path: &str,
    body: &Bytes,
    head_tx: &mut Option<oneshot::Sender<Head>>,
    body_tx: &mpsc::Sender<Bytes>,
    delivered: &mut u32,
) -> AttemptEnd {
    let up = &gw.ups[i];
    let sent = gw
        .http
        .post(format!("{}{}", up.url, path))
        .header("content-type", "application/json")
        .header("x-request-id", attempt.split('/').next().unwrap_or(attempt))
        .header(ATTEMPT_HEADER, attempt)
        .body(body.clone())
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            gw.mark_dead(i, "connection failed");
            return AttemptEnd::Failed(format!("connect: {e}"));
        }
    };
    let status = resp.status().as_u16();
    let is_stream = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    if status >= 500 {
        return AttemptEnd::Failed(format!("upstream HTTP {status}"));
    }
    if !is_stream || status != 200 {
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        return match resp.bytes().await {
            Ok(b) => {
                if let Some(h) = head_tx.take() {
                    let _ = h.send(Head::Whole {
                        status,
                        headers: vec![
                            ("content-type".into(), ct),
                            (WORKER_HEADER.into(), up.name.clone()),
                            (ATTEMPT_HEADER.into(), attempt.into()),
                        ],
                        body: b,
                    });
                }
                AttemptEnd::Relayed
            }
            Err(e) => AttemptEnd::Failed(format!("body: {e}")),
        };
    }

    let mut parser = SseParser::new();
    let mut items = Vec::new();
    // Events held back until the first delta commits the attempt (role-only chunks).
    let mut held: Vec<Bytes> = Vec::new();
    let mut finished = false;
    loop {
        let next = resp.chunk().await;
        let eof = matches!(next, Ok(None));
        match next {
            Ok(Some(b)) => parser.push(&b, &mut items),
            Ok(None) => parser.finish(&mut items),
            Err(e) => {
                gw.mark_dead(i, "stream broken");
                return AttemptEnd::Failed(format!("stream: {e}"));
            }
        }
        for it in items.drain(..) {
            let SseItem::Event(ev) = it else { continue };
            if ev.unterminated {
                continue;
            }
            let info = chunk::classify(&ev.data);
            let kind = info.kind.unwrap_or(ChunkKind::Other);
            if matches!(kind, ChunkKind::Done) || info.finish.is_some() {
                finished = true;
            }
            let bytes = sse(&ev.data);
            if head_tx.is_some() {
                if !kind.is_delta() {
                    held.push(bytes);
                    continue;
                }
                // First delta: commit this attempt and send the head with it.
                if let Some(h) = head_tx.take() {
                    let _ = h.send(Head::Stream {
                        worker: up.name.clone(),
                        attempt: attempt.to_string(),
                    });
                }
                for hb in held.drain(..) {
                    if body_tx.send(hb).await.is_err() {
                        return AttemptEnd::ClientGone;
                    }
                }
            }
            if kind.is_delta() {
                *delivered += 1;
            }
            if body_tx.send(bytes).await.is_err() {
                return AttemptEnd::ClientGone;
            }
        }
        if eof {
            break;
        }
    }
    if finished {
        if let Some(h) = head_tx.take() {
            // A stream with no delta at all (max_tokens 0): commit now, flush what was held.
            let _ = h.send(Head::Stream {
                worker: up.name.clone(),
                attempt: attempt.to_string(),
            });
            for hb in held.drain(..) {
                let _ = body_tx.send(hb).await;
            }
        }
        AttemptEnd::Finished
    } else {
        AttemptEnd::Failed("upstream stream ended without [DONE] or finish_reason".into())
    }
}
