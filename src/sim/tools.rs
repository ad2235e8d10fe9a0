//! The tool service (`haq sim tools`): executes the tool calls workers send it, logs
//! every execution to `tools.jsonl` (the `ToolExecution` schema of
//! `crate::wire::journal`), and deduplicates by idempotency key (M7) unless told not
//! to: a second call with a key it has seen returns the stored result and is logged
//! with `deduplicated: true`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::OnceCell;

use super::journal::Journal;
use super::worker::api::ApiError;
use crate::wire::journal::ToolExecution;

pub struct ToolsConfig {
    pub listen: SocketAddr,
    pub log: Option<PathBuf>,
    pub dedup: bool,
    pub exec_time: Duration,
}

#[derive(Deserialize)]
struct Call {
    logical_request_id: String,
    tool_call_id: String,
    idempotency_key: String,
    tool: String,
    #[serde(default)]
    arguments: String,
    #[serde(default)]
    attempt: Option<String>,
    #[serde(default)]
    worker: Option<String>,
}

struct Tools {
    dedup: bool,
    exec_time: Duration,
    done: Mutex<HashMap<String, Arc<OnceCell<String>>>>,
    executions: AtomicU64,
    log: Journal,
}

pub async fn serve(cfg: ToolsConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let t = Arc::new(Tools {
        dedup: cfg.dedup,
        exec_time: cfg.exec_time,
        done: Mutex::new(HashMap::new()),
        executions: AtomicU64::new(0),
        log: Journal::open(cfg.log.as_deref())?,
    });
    super::announce(addr);
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/v1/tools/execute", post(execute))
        .route("/haq/status", get(status))
        .with_state(t);
    super::serve_nodelay(listener, app).await?;
    Ok(())
}

async fn status(State(t): State<Arc<Tools>>) -> Response {
    let keys = t.done.lock().unwrap_or_else(|p| p.into_inner()).len();
    axum::Json(json!({"dedup": t.dedup, "keys": keys,
                      "executions": t.executions.load(Ordering::Relaxed)}))
    .into_response()
}

/// What running a tool returns: a function of the tool and its arguments.
fn run_tool(tool: &str, args: &str) -> String {
    format!("{tool}:{:016x}", super::text::fnv1a(args.as_bytes()))
}

async fn execute(State(t): State<Arc<Tools>>, body: Bytes) -> Response {
    let c: Call = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return ApiError::bad("body", format!("invalid tool call: {e}")).into_response(),
    };
    let cell = if t.dedup {
        let mut g = t.done.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(c.idempotency_key.clone()).or_default().clone()
    } else {
        Arc::new(OnceCell::new())
    };
    let mut executed = false;
    let result = cell
        .get_or_init(|| async {
            executed = true;
            t.executions.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(t.exec_time).await;
            run_tool(&c.tool, &c.arguments)
        })
        .await
        .clone();
    t.log.write(ToolExecution {
        logical_request_id: c.logical_request_id,
        tool_call_id: c.tool_call_id,
        idempotency_key: c.idempotency_key,
        tool: c.tool,
        arguments: c.arguments,
        result: result.clone(),
        deduplicated: !executed,
        attempt: c.attempt,
        worker: c.worker,
    });
    axum::Json(json!({"result": result, "deduplicated": !executed})).into_response()
}
