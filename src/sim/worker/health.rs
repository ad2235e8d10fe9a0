//! The worker's health endpoints, as a vLLM/SGLang server has them, with the engine
//! failure modes behind a live process (issue 18): `/health` (liveness: 503 once the
//! engine is dead), `/ready` (readiness: starting, draining, engine dead) and
//! `/health_generate` (SGLang's deep check: the engine is stepping). While the engine
//! hangs with `health: timeout` the first two never answer; with `health: pass` they
//! answer as if nothing were wrong — the gray failure only the deep check sees.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::api::Fmt;
use super::emit::Job;
use super::out::{Out, OutBody};
use super::request::GenRequest;
use super::state::{READY, Worker};
use crate::sim::engine::Submit;

/// Holds a health answer while the engine hangs with `health: timeout`.
async fn hung(w: &Worker) {
    let c = &w.engine.controls;
    while c.hang.load(Ordering::Relaxed) && c.hang_timeout.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn dead(w: &Worker) -> bool {
    w.engine.controls.dead.load(Ordering::SeqCst)
}

/// `GET /health`: 200 while the process lives and its engine does (vLLM answers 503
/// once the engine core is dead).
pub async fn health(State(w): State<Arc<Worker>>) -> Response {
    hung(&w).await;
    if dead(&w) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "engine_dead", "worker": w.name})),
        )
            .into_response();
    }
    "ok".into_response()
}

/// `GET /ready`: 200 `ready`; 503 `starting`, `draining` or `engine_dead`.
pub async fn ready(State(w): State<Arc<Worker>>) -> Response {
    hung(&w).await;
    let s = if dead(&w) {
        "engine_dead"
    } else {
        w.state_name()
    };
    let body = axum::Json(json!({"status": s, "worker": w.name}));
    if s == "ready" {
        body.into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// `GET /health_generate`: 200 once the engine has computed one token for a probe of
/// its own, or has completed two steps since the check arrived (a busy engine is a
/// stepping one, whatever its queue); 503 when the engine is dead or the worker not
/// ready. A hung engine does neither: the caller's timeout fails the check.
pub async fn generate(State(w): State<Arc<Worker>>) -> Response {
    let unavailable = |s: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": s, "worker": w.name})),
        )
            .into_response()
    };
    if dead(&w) {
        return unavailable("engine_dead");
    }
    if w.state.load(Ordering::SeqCst) != READY {
        return unavailable(w.state_name());
    }
    let started = Instant::now();
    let steps = || w.engine.stats.c.steps.load(Ordering::Relaxed);
    let at = steps();
    let n = w.seq.fetch_add(1, Ordering::Relaxed);
    let out = Out::new(format!("{}-health-{n}", w.name), None, None);
    // Dropped with this handler (the caller gave up): the engine drops the probe.
    let _body = OutBody::new(out.clone(), None);
    if !w.engine.submit(probe(&w, out.clone(), n)) {
        return unavailable("engine_stopped");
    }
    loop {
        if dead(&w) {
            return unavailable("engine_dead");
        }
        if !out.live() || steps() >= at + 2 {
            return axum::Json(json!({"status": "ok", "worker": w.name,
                "ms": started.elapsed().as_millis() as u64}))
            .into_response();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The deep check's one-token request: two prompt words, no prefix-cache block, not
/// journaled.
fn probe(w: &Worker, out: Arc<Out>, n: u64) -> Submit<Job> {
    let fmt = Fmt::new(
        false,
        format!("health-{}-{n}", w.name),
        w.model.clone(),
        false,
        2,
    );
    let req = GenRequest {
        chat: false,
        stream: false,
        model: w.model.clone(),
        prompt: String::new(),
        prompt_tokens: 2,
        prompt_hash: n,
        max_tokens: 1,
        seed: 0,
        include_usage: false,
        stop: Vec::new(),
        tool: None,
        resumed: 0,
    };
    Submit {
        job: Job {
            out,
            fmt,
            req,
            tool_key: None,
            tool_tokens: w.cfg.tool_call_tokens,
            events: 0,
            text: String::new(),
            cached_tokens: 0,
            quiet: true,
        },
        prompt_tokens: 2,
        hashes: Vec::new(),
        arrived: Instant::now(),
    }
}
