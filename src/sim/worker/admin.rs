//! The worker's control surface: fault hooks, `slow`, `hang` and state (`/admin/*`,
//! used by fault backends), publication leases (`/haq/leases/*`, used by the gateway,
//! M5) and `/metrics` in Prometheus text with vLLM's metric names.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::api::ApiError;
use super::faults::ArmRequest;
use super::state::Worker;
use crate::sim::engine::stats::Stats;
use crate::wire::journal::WorkerEntry;

fn json_body<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body)
        .map_err(|e| Box::new(ApiError::bad("body", format!("invalid body: {e}")).into_response()))
}

/// `POST /admin/faults` → `{"armed": "<id>"}`.
pub async fn arm(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let spec: ArmRequest = match json_body(&body) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let id = w.faults.arm(spec);
    axum::Json(json!({"armed": id})).into_response()
}

/// `DELETE /admin/faults` → `{"disarmed": n}`.
pub async fn disarm(State(w): State<Arc<Worker>>) -> Response {
    axum::Json(json!({"disarmed": w.faults.disarm_all()})).into_response()
}

fn degraded(w: &Worker) {
    let c = &w.engine.controls;
    let hang = c.hang.load(Ordering::Relaxed);
    w.journal.write(WorkerEntry::Degraded {
        worker: w.name.clone(),
        slow_factor: c.slow(),
        hang,
        hang_health: hang.then(|| hang_health(w).to_string()),
    });
}

fn hang_health(w: &Worker) -> &'static str {
    if w.engine.controls.hang_timeout.load(Ordering::Relaxed) {
        "timeout"
    } else {
        "pass"
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Slow {
    factor: f64,
}

/// `POST /admin/slow {"factor": f}`: every step takes f times as long.
pub async fn slow(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let s: Slow = match json_body(&body) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if !(s.factor.is_finite() && s.factor > 0.0 && s.factor <= 10_000.0) {
        return ApiError::bad(
            "factor",
            format!("factor must be in (0, 10000], got {}", s.factor),
        )
        .into_response();
    }
    w.engine.controls.set_slow(s.factor);
    degraded(&w);
    axum::Json(json!({"slow_factor": s.factor})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Hang {
    on: bool,
    /// `pass` (default): `/health` and `/ready` answer as usual; `timeout`: they hang.
    #[serde(default)]
    health: Option<String>,
}

/// `POST /admin/hang {"on": bool, "health": "pass"|"timeout"}`: the engine stops
/// stepping (no stream is written), sockets stay open, the admin and lease endpoints
/// keep answering; `/health` and `/ready` too, unless `health` is `timeout`.
pub async fn hang(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let h: Hang = match json_body(&body) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let timeout = match h.health.as_deref() {
        None | Some("pass") => false,
        Some("timeout") => true,
        Some(other) => {
            return ApiError::bad(
                "health",
                format!("health must be `pass` or `timeout`, got {other:?}"),
            )
            .into_response();
        }
    };
    let c = &w.engine.controls;
    c.hang_timeout.store(h.on && timeout, Ordering::Relaxed);
    c.hang.store(h.on, Ordering::Relaxed);
    degraded(&w);
    axum::Json(json!({"hang": h.on, "health": hang_health(&w)})).into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GpuLost {
    #[serde(default)]
    gpu: u32,
}

/// `POST /admin/gpu_lost {"gpu": k}`: GPU k of the tensor-parallel group is lost, the
/// engine dies with every request in it (streams get vLLM's engine error and
/// `[DONE]`), new requests get 500, `/health` and `/ready` 503, `/metrics` is served.
pub async fn gpu_lost(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let g: GpuLost = if body.is_empty() {
        GpuLost::default()
    } else {
        match json_body(&body) {
            Ok(g) => g,
            Err(r) => return *r,
        }
    };
    let tp = w.cfg.tensor_parallel_size.max(1);
    if g.gpu >= tp {
        return ApiError::bad(
            "gpu",
            format!(
                "gpu must be below the tensor-parallel size {tp}, got {}",
                g.gpu
            ),
        )
        .into_response();
    }
    let c = &w.engine.controls;
    let st = &w.engine.stats.c;
    let failed = st.running.load(Ordering::Relaxed) + st.waiting.load(Ordering::Relaxed);
    c.dead_gpu.store(g.gpu, Ordering::SeqCst);
    if !c.dead.swap(true, Ordering::SeqCst) {
        w.journal.write(WorkerEntry::EngineDead {
            worker: w.name.clone(),
            gpu: g.gpu,
            tp,
            failed,
        });
        eprintln!(
            "haq sim worker {}: GPU {} of {tp} lost; the engine is dead, the process stays up",
            w.name, g.gpu
        );
    }
    c.kick.notify_one();
    axum::Json(json!({"engine": "dead", "gpu": g.gpu, "tensor_parallel_size": tp})).into_response()
}

/// `DELETE /admin/gpu_lost`: the engine is started again in the same process, with an
/// empty prefix cache.
pub async fn gpu_restored(State(w): State<Arc<Worker>>) -> Response {
    let c = &w.engine.controls;
    if c.dead.swap(false, Ordering::SeqCst) {
        w.journal.write(WorkerEntry::EngineRestarted {
            worker: w.name.clone(),
        });
    }
    c.kick.notify_one();
    axum::Json(json!({"engine": "ok"})).into_response()
}

/// `GET /admin/state`.
pub async fn state(State(w): State<Arc<Worker>>) -> Response {
    let c = &w.engine.stats.c;
    let state = w.state_name();
    axum::Json(json!({
        "worker": w.name,
        "pid": std::process::id(),
        "state": state,
        "ready": state == "ready",
        "draining": state == "draining",
        "armed": w.faults.list(),
        "slow_factor": w.engine.controls.slow(),
        "hang": w.engine.controls.hang.load(Ordering::Relaxed),
        "hang_health": hang_health(&w),
        "engine": if w.engine.controls.dead.load(Ordering::SeqCst) { "dead" } else { "ok" },
        "dead_gpu": w.engine.controls.dead_gpu.load(Ordering::SeqCst),
        "tensor_parallel_size": w.cfg.tensor_parallel_size.max(1),
        "running": c.running.load(Ordering::Relaxed),
        "waiting": c.waiting.load(Ordering::Relaxed),
        "open_responses": w.open.load(Ordering::SeqCst),
        "kv_cache_usage": w.engine.stats.kv_usage(),
        "kv_cache_blocks": c.kv_total_blocks.load(Ordering::Relaxed),
        "prefix_cache_queries": c.prefix_queries.load(Ordering::Relaxed),
        "prefix_cache_hits": c.prefix_hits.load(Ordering::Relaxed),
        "preemptions": c.preemptions.load(Ordering::Relaxed),
        "steps": c.steps.load(Ordering::Relaxed),
        "model": w.model,
        "revision": w.cfg.revision,
    }))
    .into_response()
}

fn recorded(h: &hdrhistogram::Histogram<u64>) -> Vec<[u64; 2]> {
    h.iter_recorded()
        .map(|v| [v.value_iterated_to(), v.count_at_value()])
        .collect()
}

/// `GET /admin/timing`: the sim's own timing error as `[value_us, count]` pairs —
/// `step_lateness_us` (engine step published after its modelled deadline) and
/// `event_lateness_us` (token event handed to the socket writer after its deadline).
pub async fn timing(State(w): State<Arc<Worker>>) -> Response {
    axum::Json(json!({
        "worker": w.name,
        "step_lateness_us": recorded(&w.engine.stats.step_lateness.snapshot()),
        "event_lateness_us": recorded(&super::out::event_lateness().snapshot()),
        "steps": w.engine.stats.c.steps.load(Ordering::Relaxed),
        "lost_us": w.engine.stats.c.lost_us.load(Ordering::Relaxed),
    }))
    .into_response()
}

/// `POST /admin/timing/reset`: forget timing recorded so far (benchmark warm-up).
pub async fn timing_reset(State(w): State<Arc<Worker>>) -> Response {
    w.engine.stats.step_lateness.reset();
    super::out::event_lateness().reset();
    axum::Json(json!({"reset": true})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Renew {
    deadline_ns: u64,
    attempts: Vec<String>,
}

/// `POST /haq/leases/renew {"deadline_ns", "attempts": [...]}` →
/// `{"renewed": [...], "refused": [...]}`. A lease that already ended is never renewed.
pub async fn renew(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let r: Renew = match json_body(&body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let (mut renewed, mut refused) = (Vec::new(), Vec::new());
    for a in r.attempts {
        let ok =
            !w.leases.is_revoked(&a) && w.leases.get(&a).is_some_and(|o| o.renew(r.deadline_ns));
        if ok {
            renewed.push(a);
        } else {
            refused.push(a);
        }
    }
    axum::Json(json!({"renewed": renewed, "refused": refused})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Revoke {
    attempt: String,
    #[serde(default)]
    why: Option<String>,
}

fn do_revoke(w: &Worker, attempt: &str) -> Response {
    w.leases.mark_revoked(attempt);
    let out = w.leases.get(attempt);
    let was_live = out.as_ref().is_some_and(|o| o.revoke());
    if let (true, Some(o)) = (was_live, out) {
        w.journal.write(WorkerEntry::LeaseRevoked {
            req: o.rid.clone(),
            attempt: attempt.to_string(),
        });
    }
    // The gate is shut under its lock: from here on the attempt publishes nothing, so
    // this answer is the confirmation the gateway fences on.
    axum::Json(json!({"revoked": attempt, "was_live": was_live})).into_response()
}

/// `POST /haq/leases/revoke {"attempt", "why"}` → 200 `{"revoked", "was_live"}`.
pub async fn revoke(State(w): State<Arc<Worker>>, body: Bytes) -> Response {
    let r: Revoke = match json_body(&body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let _ = r.why;
    do_revoke(&w, &r.attempt)
}

/// `DELETE /haq/leases/{attempt}`: the same as revoke.
pub async fn revoke_path(State(w): State<Arc<Worker>>, Path(attempt): Path<String>) -> Response {
    do_revoke(&w, &attempt)
}

/// Prometheus buckets (seconds) of the latency histograms, as vLLM uses for TTFT.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];

/// One histogram in Prometheus text: cumulative buckets, sum and count, from one pass
/// over its recorded values. (Summing the counts below each bucket bound instead walks
/// every HdrHistogram slot below it: in a debug build that held the worker's one thread
/// — the engine's too — for ~100 ms per scrape, a stall of the modelled GPU every time
/// haq read `/metrics`.)
fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    labels: &str,
    h: &hdrhistogram::Histogram<u64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let bounds: Vec<u64> = BUCKETS
        .iter()
        .map(|le| h.highest_equivalent((le * 1e6) as u64))
        .collect();
    let mut counts = vec![0u64; BUCKETS.len()];
    let mut sum = 0.0;
    for v in h.iter_recorded() {
        let (value, n) = (v.value_iterated_to(), v.count_at_value());
        sum += value as f64 * n as f64;
        if let Some(i) = bounds.iter().position(|b| value <= *b) {
            counts[i] += n;
        }
    }
    let mut below = 0;
    for (le, n) in BUCKETS.iter().zip(counts) {
        below += n;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {below}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.len());
    let _ = writeln!(
        out,
        "{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
        sum / 1e6,
        h.len()
    );
}

/// One Prometheus sample without extra labels: name, type, help, value.
type Row = (&'static str, &'static str, &'static str, String);

/// The engine's gauges and counters, under vLLM's names.
fn engine_rows(s: &Stats) -> [Row; 9] {
    let c = &s.c;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed).to_string();
    let l32 = |a: &std::sync::atomic::AtomicU32| a.load(Ordering::Relaxed).to_string();
    [
        (
            "vllm:num_requests_running",
            "gauge",
            "Requests in the running batch.",
            l32(&c.running),
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting to be scheduled.",
            l32(&c.waiting),
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV cache usage (1 = full).",
            s.kv_usage().to_string(),
        ),
        (
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "KV cache usage, pre-V1 name.",
            s.kv_usage().to_string(),
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache.",
            ld(&c.prefix_queries),
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache.",
            ld(&c.prefix_hits),
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Preemptions (recompute).",
            ld(&c.preemptions),
        ),
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Prompt tokens received.",
            ld(&c.prompt_tokens),
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Tokens generated.",
            ld(&c.generation_tokens),
        ),
    ]
}

/// The sim's own gauges and counters (`haq_sim_*`).
fn sim_rows(w: &Worker) -> [Row; 7] {
    let c = &w.engine.stats.c;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed).to_string();
    let state = w.state_name();
    [
        (
            "haq_sim_ready",
            "gauge",
            "1 when /ready answers 200.",
            u8::from(state == "ready").to_string(),
        ),
        (
            "haq_sim_draining",
            "gauge",
            "1 while draining after SIGTERM.",
            u8::from(state == "draining").to_string(),
        ),
        (
            "haq_sim_slow_factor",
            "gauge",
            "Step time multiplier (/admin/slow).",
            w.engine.controls.slow().to_string(),
        ),
        (
            "haq_sim_engine_steps_total",
            "counter",
            "Engine steps run.",
            ld(&c.steps),
        ),
        (
            "haq_sim_step_lost_seconds_total",
            "counter",
            "Modelled engine time not made up after stalls longer than a step (the machine, not the model, set the pace).",
            (c.lost_us.load(Ordering::Relaxed) as f64 / 1e6).to_string(),
        ),
        (
            "haq_sim_engine_dead",
            "gauge",
            "1 while the engine is dead behind a live process (/admin/gpu_lost).",
            u8::from(w.engine.controls.dead.load(Ordering::SeqCst)).to_string(),
        ),
        (
            "haq_sim_engine_hung",
            "gauge",
            "1 while the engine does not step (/admin/hang).",
            u8::from(w.engine.controls.hang.load(Ordering::Relaxed)).to_string(),
        ),
    ]
}

/// `vllm:request_success_total` by finish reason.
fn finish_reasons(o: &mut String, labels: &str, s: &Stats) {
    let c = &s.c;
    let _ = writeln!(
        o,
        "# HELP vllm:request_success_total Finished requests by reason.\n# TYPE vllm:request_success_total counter"
    );
    for (reason, a) in [
        ("length", &c.finished_length),
        ("stop", &c.finished_stop),
        ("tool_calls", &c.finished_tool_calls),
        ("abort", &c.finished_abort),
    ] {
        let _ = writeln!(
            o,
            "vllm:request_success_total{{{labels},finished_reason=\"{reason}\"}} {}",
            a.load(Ordering::Relaxed)
        );
    }
}

/// The latency histograms: vLLM's, and the sim's step lateness.
fn latency_histograms(o: &mut String, labels: &str, s: &Stats) {
    histogram(
        o,
        "vllm:time_to_first_token_seconds",
        "Time to first token (engine side).",
        labels,
        &s.ttft.snapshot(),
    );
    histogram(
        o,
        "vllm:inter_token_latency_seconds",
        "Time between tokens of one request.",
        labels,
        &s.itl.snapshot(),
    );
    histogram(
        o,
        "vllm:e2e_request_latency_seconds",
        "Arrival to finish.",
        labels,
        &s.e2e.snapshot(),
    );
    histogram(
        o,
        "vllm:request_queue_time_seconds",
        "Time in the waiting queue.",
        labels,
        &s.queue.snapshot(),
    );
    histogram(
        o,
        "haq_sim_step_lateness_seconds",
        "How late each engine step published against the model (sim timing error).",
        labels,
        &s.step_lateness.snapshot(),
    );
}

/// `GET /metrics`.
pub async fn metrics(State(w): State<Arc<Worker>>) -> Response {
    let s = &w.engine.stats;
    let labels = format!("model_name=\"{}\",worker=\"{}\"", w.model, w.name);
    let mut o = String::with_capacity(8192);
    for (name, kind, help, v) in engine_rows(s).into_iter().chain(sim_rows(&w)) {
        let _ = writeln!(
            o,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v}"
        );
    }
    finish_reasons(&mut o, &labels, s);
    latency_histograms(&mut o, &labels, s);
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        o,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    /// The buckets from one pass agree with summing every slot below each bound.
    #[test]
    fn histogram_buckets_from_one_pass_match_the_counts_below_each_bound() {
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for (i, v) in [
            1u64, 999, 1000, 1001, 4_999, 5_000, 70_000, 100_003, 2_500_000,
        ]
        .iter()
        .enumerate()
        {
            h.record_n(*v, i as u64 + 1).expect("record");
        }
        let mut out = String::new();
        super::histogram(&mut out, "x", "help", "w=\"1\"", &h);
        for le in super::BUCKETS {
            let want = h.count_between(0, (le * 1e6) as u64);
            let line = format!("x_bucket{{w=\"1\",le=\"{le}\"}} {want}\n");
            assert!(out.contains(&line), "{line}{out}");
        }
        assert!(
            out.contains(&format!("x_count{{w=\"1\"}} {}", h.len())),
            "{out}"
        );
    }
}
