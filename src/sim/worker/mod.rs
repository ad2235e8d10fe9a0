//! A simulated engine replica (`haq sim worker`): one OS process serving the OpenAI API
//! in front of a continuous-batching engine model (`crate::sim::engine`). Killed,
//! frozen and drained with real signals; fault hooks, `slow` and `hang` through its
//! admin API; publication leases from the gateway (M5). docs/sim.md describes it.
//!
//! Threads: the HTTP server runs on a current-thread tokio runtime (`main.rs`), the
//! engine loop on its own thread (precise step timing), the journal writer on a third.
//! The `after_event` hook relies on the current-thread runtime: see [`out::OutBody`].

pub mod admin;
pub mod api;
pub mod emit;
pub mod faults;
mod health;
pub mod out;
mod publish;
pub mod request;
mod state;
pub mod tool_call;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures_util::StreamExt;

use super::engine::{self, Submit};
use super::journal::Journal;
use crate::sim::config::EngineCfg;
use crate::wire::headers::{ATTEMPT_HEADER, WORKER_HEADER};
use crate::wire::journal::WorkerEntry;
use crate::wire::mono_ns;
pub use api::openai_error;
use api::{ApiError, Fmt};
use emit::{Job, WorkerPublisher};
use faults::Faults;
use out::{Ended, OpenGuard, Out, OutBody};
use state::{DRAINING, Leases, READY, STARTING, Worker};

/// Request header: CLOCK_MONOTONIC deadline (ns) of the attempt's publication lease.
pub const LEASE_HEADER: &str = "x-haq-lease-deadline-ns";
/// Request header: prefix of tool-call idempotency keys (default: the request id).
pub const TOOL_KEY_HEADER: &str = "x-haq-tool-key";
/// Response header: the weights revision that serves (M1, M6).
pub const REVISION_HEADER: &str = "x-haq-model-revision";

pub struct WorkerConfig {
    pub name: String,
    pub listen: SocketAddr,
    pub engine: EngineCfg,
    /// Served model name.
    pub model: String,
    /// Base URL of the tool service.
    pub tools_url: Option<String>,
    /// `worker-<name>.jsonl`.
    pub journal: Option<PathBuf>,
}

pub async fn serve(cfg: WorkerConfig) -> anyhow::Result<()> {
    crate::wire::tls::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let journal = Journal::open(cfg.journal.as_deref())?;
    let faults = Arc::new(Faults::new(cfg.name.clone(), journal.clone()));
    let stats = Arc::new(engine::stats::Stats::default());
    let (tool_tx, tool_rx) = tokio::sync::mpsc::unbounded_channel();
    let publisher = WorkerPublisher {
        worker: cfg.name.clone(),
        faults: faults.clone(),
        journal: journal.clone(),
        stats: stats.clone(),
        tools: tool_tx,
        corrupt_cache: cfg.engine.corrupt_prefix_cache,
    };
    let engine = engine::spawn(&cfg.engine, publisher, stats)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .build()?;
    let exec = Arc::new(tool_call::ToolExec {
        worker: cfg.name.clone(),
        url: cfg.tools_url.map(|u| u.trim_end_matches('/').to_string()),
        http,
        faults: faults.clone(),
    });
    tokio::spawn(exec.serve(tool_rx));
    let w = Arc::new(Worker {
        name: cfg.name,
        model: cfg.model,
        cfg: cfg.engine,
        state: AtomicU8::new(STARTING),
        engine,
        faults,
        leases: Leases::default(),
        journal,
        open: Arc::new(AtomicU32::new(0)),
        seq: AtomicU64::new(0),
    });
    w.journal.write(WorkerEntry::Started {
        worker: w.name.clone(),
        pid: std::process::id(),
    });
    super::announce(addr);
    {
        let w = w.clone();
        tokio::spawn(async move {
            tokio::time::sleep(w.cfg.startup.0).await;
            if w.state
                .compare_exchange(STARTING, READY, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                w.journal.write(WorkerEntry::Ready {
                    worker: w.name.clone(),
                });
            }
        });
    }
    tokio::spawn(drain_on_sigterm(w.clone())?);
    let app = Router::new()
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/health_generate", get(health::generate))
        .route("/metrics", get(admin::metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/admin/faults", post(admin::arm).delete(admin::disarm))
        .route("/admin/slow", post(admin::slow))
        .route("/admin/hang", post(admin::hang))
        .route(
            "/admin/gpu_lost",
            post(admin::gpu_lost).delete(admin::gpu_restored),
        )
        .route("/admin/state", get(admin::state))
        .route("/admin/timing", get(admin::timing))
        .route("/admin/timing/reset", post(admin::timing_reset))
        .route("/haq/leases/renew", post(admin::renew))
        .route("/haq/leases/revoke", post(admin::revoke))
        .route("/haq/leases/{attempt}", delete(admin::revoke_path))
        .with_state(w);
    super::serve_nodelay(listener, app).await?;
    Ok(())
}

/// SIGTERM is a planned drain (Q7): not ready at once, new requests get 503, in-flight
/// ones finish, then the process exits (or after `drain_timeout`).
fn drain_on_sigterm(
    w: Arc<Worker>,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        term.recv().await;
        w.state.store(DRAINING, Ordering::SeqCst);
        let c = &w.engine.stats.c;
        w.journal.write(WorkerEntry::Draining {
            worker: w.name.clone(),
            running: c.running.load(Ordering::Relaxed),
            waiting: c.waiting.load(Ordering::Relaxed),
        });
        let deadline = Instant::now() + w.cfg.drain_timeout.0;
        let timed_out = loop {
            if w.open.load(Ordering::SeqCst) == 0 {
                break false;
            }
            if Instant::now() >= deadline {
                break true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Let the last bytes reach the sockets.
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.journal.write(WorkerEntry::Drained {
            worker: w.name.clone(),
            timed_out,
        });
        w.journal.flush();
        eprintln!(
            "haq sim worker {}: drained (timed out: {timed_out}); exiting",
            w.name
        );
        std::process::exit(0);
    })
}

async fn models(State(w): State<Arc<Worker>>) -> Response {
    let body = serde_json::json!({"object": "list", "data": [{
        "id": w.model, "object": "model", "created": 0, "owned_by": "haq",
        "root": w.model, "max_model_len": w.cfg.max_model_len, "revision": w.cfg.revision}]});
    axum::Json(body).into_response()
}

async fn chat(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    generate(w, headers, body, true).await
}

async fn completions(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    generate(w, headers, body, false).await
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn lease_refused(w: &Worker, attempt: &str, why: &str) -> Response {
    w.journal.write(WorkerEntry::LeaseRefused {
        attempt: attempt.into(),
        why: why.into(),
    });
    ApiError::new(
        StatusCode::CONFLICT,
        "lease_error",
        format!("attempt {attempt}: {why}"),
    )
    .code("lease_refused")
    .into_response()
}

async fn generate(w: Arc<Worker>, headers: HeaderMap, body: Bytes, chat: bool) -> Response {
    if let Some(refusal) = not_serving(&w) {
        return refusal;
    }
    if w.engine.controls.dead.load(Ordering::SeqCst) {
        return api::engine_dead_response();
    }
    let req = match request::parse(&body, chat, &w.model, w.cfg.max_model_len) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let n = w.seq.fetch_add(1, Ordering::Relaxed);
    let rid = header(&headers, "x-request-id").unwrap_or_else(|| format!("{}-{n}", w.name));
    let attempt = header(&headers, ATTEMPT_HEADER);
    let lease = header(&headers, LEASE_HEADER).and_then(|v| v.parse::<u64>().ok());
    if let Some(a) = &attempt {
        if w.leases.is_revoked(a) {
            return lease_refused(&w, a, "the attempt was revoked");
        }
        if lease.is_some_and(|d| d <= mono_ns()) {
            return lease_refused(&w, a, "the lease expired before the request arrived");
        }
    }
    let out = Out::new(rid.clone(), attempt.clone(), lease);
    w.leases.register(&out);
    let guard = OpenGuard::new(w.open.clone());
    let stream = req.stream;
    let submit = submission(
        &w,
        req,
        out.clone(),
        header(&headers, TOOL_KEY_HEADER),
        n,
        false,
    );
    if !w.engine.submit(submit) {
        return openai_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the engine stopped",
        );
    }
    let mut resp = if stream {
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Body::from_stream(OutBody::new(out, Some(guard))))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    } else {
        match whole_body(out, guard).await {
            Ok(buf) => ([("content-type", "application/json")], buf).into_response(),
            Err(Some(Ended::EngineDead)) => return api::engine_dead_response(),
            Err(why) => {
                return openai_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service_unavailable",
                    &format!(
                        "the request was aborted: {}",
                        why.map(|e| e.as_str()).unwrap_or("no answer")
                    ),
                );
            }
        }
    };
    let h = resp.headers_mut();
    for (k, v) in [
        ("x-request-id", Some(rid)),
        (WORKER_HEADER, Some(w.name.clone())),
        (ATTEMPT_HEADER, attempt),
        (REVISION_HEADER, Some(w.cfg.revision.clone())),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_str(&v).ok()) {
            h.insert(k, v);
        }
    }
    resp
}

/// The 503 of a worker that is starting or draining; `None` when it is ready.
fn not_serving(w: &Worker) -> Option<Response> {
    let why = match w.state.load(Ordering::SeqCst) {
        STARTING => "worker is starting (model loading)",
        DRAINING => "worker is draining",
        _ => return None,
    };
    Some(openai_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        why,
    ))
}

/// The engine's job for request `n` (`req`, answering on `out`): its prompt's block
/// hashes for the prefix cache (the prompt text itself is dropped) and its formatter.
fn submission(
    w: &Worker,
    mut req: request::GenRequest,
    out: Arc<Out>,
    tool_key: Option<String>,
    n: u64,
    quiet: bool,
) -> Submit<Job> {
    let hashes = if w.cfg.prefix_caching {
        super::text::block_hashes(&req.prompt, w.cfg.block_size)
    } else {
        Vec::new()
    };
    req.prompt = String::new();
    let prompt_tokens = req.prompt_tokens;
    let chat = req.chat;
    let cid = format!("{}-{}-{n}", if chat { "chatcmpl" } else { "cmpl" }, w.name);
    let fmt = Fmt::new(
        chat,
        cid,
        req.model.clone(),
        req.include_usage,
        prompt_tokens,
    );
    let job = Job {
        out,
        fmt,
        req,
        tool_key,
        tool_tokens: w.cfg.tool_call_tokens,
        events: 0,
        text: String::new(),
        cached_tokens: 0,
        quiet,
    };
    Submit {
        job,
        prompt_tokens,
        hashes,
        arrived: Instant::now(),
    }
}

/// A non-streaming answer's whole body once the engine has written it; why not when
/// the request was aborted before any byte.
async fn whole_body(out: Arc<Out>, guard: OpenGuard) -> Result<Vec<u8>, Option<Ended>> {
    let mut body = OutBody::new(out.clone(), Some(guard));
    let mut buf = Vec::new();
    while let Some(Ok(b)) = body.next().await {
        buf.extend_from_slice(&b);
    }
    if buf.is_empty() {
        return Err(out.ended());
    }
    Ok(buf)
}
