//! A simulated engine replica (`haq sim worker`): one OS process serving the OpenAI
//! API with a prefill/decode timing model. Killed with real signals by the fault
//! injector.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use super::text;
use crate::scenario::EngineCfg;

pub struct WorkerConfig {
    pub name: String,
    pub listen: SocketAddr,
    pub engine: EngineCfg,
}

struct Worker {
    name: String,
    cfg: EngineCfg,
    ready: AtomicBool,
    running: AtomicU32,
    seq: AtomicU64,
    slots: Semaphore,
    served: AtomicU64,
}

#[derive(Deserialize)]
struct GenRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    prompt: Option<serde_json::Value>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    seed: Option<u64>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

fn content_text(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::String(s) => {
            out.push_str(s);
            out.push(' ');
        }
        serde_json::Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(|t| t.as_str()) {
                    out.push_str(t);
                    out.push(' ');
                }
            }
        }
        _ => {}
    }
}

/// OpenAI-shaped error response.
pub fn openai_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": status.as_u16()}});
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub async fn serve(cfg: WorkerConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let w = Arc::new(Worker {
        name: cfg.name,
        slots: Semaphore::new(cfg.engine.max_num_seqs as usize),
        cfg: cfg.engine,
        ready: AtomicBool::new(false),
        running: AtomicU32::new(0),
        seq: AtomicU64::new(0),
        served: AtomicU64::new(0),
    });
    super::announce(addr);
    {
        let w = w.clone();
        tokio::spawn(async move {
            tokio::time::sleep(w.cfg.startup.0).await;
            w.ready.store(true, Ordering::SeqCst);
        });
    }
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .with_state(w);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn ready(State(w): State<Arc<Worker>>) -> Response {
    if w.ready.load(Ordering::SeqCst) {
        "ready".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting").into_response()
    }
}

async fn metrics(State(w): State<Arc<Worker>>) -> String {
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{worker=\"{n}\"}} {}\n# TYPE vllm:request_success_total counter\nvllm:request_success_total{{worker=\"{n}\"}} {}\n",
        w.running.load(Ordering::Relaxed),
        w.served.load(Ordering::Relaxed),
        n = w.name
    )
}

async fn models() -> Response {
    let body = json!({"object": "list", "data": [{"id": "haq-sim-8b", "object": "model", "owned_by": "haq"}]});
    axum::Json(body).into_response()
}

async fn chat(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    generate(w, headers, body, true).await
}

async fn completions(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    generate(w, headers, body, false).await
}

/// Everything one generation needs, moved into its task.
struct Job {
    chat: bool,
    cid: String,
    model: String,
    created: u64,
    prompt_hash: u64,
    prompt_tokens: u32,
    max_tokens: u32,
    seed: u64,
    include_usage: bool,
}

impl Job {
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> String {
        let choice = if self.chat {
            let mut delta = serde_json::Map::new();
            if role {
                delta.insert("role".into(), "assistant".into());
            }
            if let Some(t) = text {
                delta.insert("content".into(), t.into());
            }
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
        };
        let object = if self.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        json!({"id": self.cid, "object": object, "created": self.created, "model": self.model, "choices": [choice]})
            .to_string()
    }

    fn usage(&self, completion: u32) -> serde_json::Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
               "total_tokens": self.prompt_tokens + completion})
    }
}

async fn generate(w: Arc<Worker>, headers: HeaderMap, body: Bytes, chat: bool) -> Response {
    if !w.ready.load(Ordering::SeqCst) {
        return openai_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "worker is not ready",
        );
    }
    let req: GenRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return openai_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("invalid JSON body: {e}"),
            );
        }
    };
    let mut prompt = String::new();
    if chat {
        for m in req.messages.iter().flatten() {
            if let Some(c) = &m.content {
                content_text(c, &mut prompt);
            }
        }
    } else if let Some(p) = &req.prompt {
        content_text(p, &mut prompt);
    }
    let n = w.seq.fetch_add(1, Ordering::Relaxed);
    let job = Job {
        chat,
        cid: format!("{}-{}-{n}", if chat { "chatcmpl" } else { "cmpl" }, w.name),
        model: req.model.unwrap_or_else(|| "haq-sim-8b".into()),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        prompt_hash: text::fnv1a(prompt.trim().as_bytes()),
        prompt_tokens: text::count_tokens(&prompt),
        max_tokens: req
            .max_completion_tokens
            .or(req.max_tokens)
            .unwrap_or(16)
            .max(1),
        seed: req.seed.unwrap_or(0),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
    };
    let mut resp = if req.stream.unwrap_or(false) {
        let (tx, mut rx) = mpsc::channel::<Bytes>(16);
        tokio::spawn(run_stream(w.clone(), job, tx));
        let stream = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|o| o.map(Ok::<_, Infallible>))
        });
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Body::from_stream(stream))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    } else {
        run_whole(w.clone(), job).await
    };
    if let Some(id) = headers.get("x-request-id") {
        resp.headers_mut().insert("x-request-id", id.clone());
    }
    if let Ok(v) = w.name.parse() {
        resp.headers_mut().insert(crate::client::WORKER_HEADER, v);
    }
    resp
}

/// Holds a batch slot and the running count for one sequence.
struct Running<'a> {
    w: &'a Worker,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl<'a> Running<'a> {
    async fn admit(w: &'a Worker) -> Option<Running<'a>> {
        let permit = w.slots.acquire().await.ok()?;
        w.running.fetch_add(1, Ordering::SeqCst);
        Some(Running { w, _permit: permit })
    }

    fn step(&self) -> Duration {
        let n = self.w.running.load(Ordering::Relaxed).max(1);
        self.w.cfg.decode_step.0 + self.w.cfg.decode_step_per_seq.0 * (n - 1)
    }

    fn prefill(&self, tokens: u32) -> Duration {
        Duration::from_secs_f64(f64::from(tokens) / self.w.cfg.prefill_tokens_per_s)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.w.running.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run_stream(w: Arc<Worker>, job: Job, tx: mpsc::Sender<Bytes>) {
    let Some(run) = Running::admit(&w).await else {
        return;
    };
    let mut next = Instant::now() + run.prefill(job.prompt_tokens);
    let send = |s: String| {
        let tx = tx.clone();
        async move { tx.send(Bytes::from(format!("data: {s}\n\n"))).await.is_ok() }
    };
    for i in 0..job.max_tokens {
        tokio::time::sleep_until(next.into()).await;
        let tok = text::token(job.prompt_hash, job.seed, i);
        if !send(job.chunk(Some(&tok), i == 0, None)).await {
            return; // client went away: free the slot
        }
        next += run.step();
    }
    tokio::time::sleep_until(next.into()).await;
    if !send(job.chunk(None, false, Some("length"))).await {
        return;
    }
    if job.include_usage {
        let u = json!({"id": job.cid, "object": "chat.completion.chunk", "created": job.created,
                       "model": job.model, "choices": [], "usage": job.usage(job.max_tokens)});
        if !send(u.to_string()).await {
            return;
        }
    }
    if tx
        .send(Bytes::from_static(b"data: [DONE]\n\n"))
        .await
        .is_ok()
    {
        w.served.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run_whole(w: Arc<Worker>, job: Job) -> Response {
    let Some(run) = Running::admit(&w).await else {
        return openai_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "shutting down",
        );
    };
    let mut total = run.prefill(job.prompt_tokens);
    let mut text_out = String::new();
    for i in 0..job.max_tokens {
        text_out.push_str(&text::token(job.prompt_hash, job.seed, i));
        total += run.step();
    }
    tokio::time::sleep(total).await;
    drop(run);
    w.served.fetch_add(1, Ordering::Relaxed);
    let choice = if job.chat {
        json!({"index": 0, "message": {"role": "assistant", "content": text_out}, "finish_reason": "length"})
    } else {
        json!({"index": 0, "text": text_out, "finish_reason": "length"})
    };
    let object = if job.chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    axum::Json(
        json!({"id": job.cid, "object": object, "created": job.created, "model": job.model,
                      "choices": [choice], "usage": job.usage(job.max_tokens)}),
    )
    .into_response()
}
