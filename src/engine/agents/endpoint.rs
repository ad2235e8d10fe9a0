//! The coordinator's HTTP endpoint for agents on other hosts (`agents.kubernetes`):
//! each agent fetches its assignment and the run's effective scenario, exchanges
//! clock readings with it (NTP-style: its trace time and UNIX time, read as late as
//! possible), and returns its trace and then its result. Every request carries the
//! run's key (`authorization: Bearer …`): an agent of another run is refused.
//!
//! Traces come back over HTTP, not through a volume or the pods' logs: a volume shared
//! by pods on several nodes needs ReadWriteMany storage most clusters lack, and a
//! container log is rotated by the kubelet (10 MiB by default) and mixes in stderr,
//! while the agents must reach this endpoint anyway for the clock.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::assignment::{self, AgentResult, Assignment, ClockReading, RESULT_FILE};
use crate::trace::{Clock, TRACE_FILE};

/// What the endpoint serves.
pub(super) struct Served {
    pub clock: Clock,
    pub key: String,
    pub run_dir: PathBuf,
    /// The run's effective scenario (`scenario.json`).
    pub scenario: String,
    pub assignments: Vec<Assignment>,
}

/// The endpoint while it runs: where it listens and the results as they come.
pub(super) struct Endpoint {
    pub addr: SocketAddr,
    pub results: mpsc::UnboundedReceiver<(u64, AgentResult)>,
    _server: tokio_util::task::AbortOnDropHandle<()>,
}

struct Shared {
    served: Served,
    results: mpsc::UnboundedSender<(u64, AgentResult)>,
}

type St = State<Arc<Shared>>;

/// Binds `listen` and serves until the returned [`Endpoint`] is dropped.
pub(super) async fn serve(listen: &str, served: Served) -> anyhow::Result<Endpoint> {
    let l = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("agents.kubernetes.listen {listen}: {e}"))?;
    let addr = l.local_addr()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        served,
        results: tx,
    });
    let app = Router::new()
        .route("/clock", get(clock))
        .route("/scenario", get(scenario))
        .route("/agents/{k}/assignment", get(assignment))
        .route("/agents/{k}/trace", put(trace))
        .route("/agents/{k}/result", put(result))
        .with_state(shared);
    let server = tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok(Endpoint {
        addr,
        results: rx,
        _server: tokio_util::task::AbortOnDropHandle::new(server),
    })
}

fn authorized(s: &Shared, h: &HeaderMap) -> Result<(), StatusCode> {
    let want = format!("Bearer {}", s.served.key);
    match h.get("authorization") {
        Some(v) if v.as_bytes() == want.as_bytes() => Ok(()),
        _ => Err(StatusCode::UNAUTHORIZED),
    }
}

fn share(s: &Shared, k: u64) -> Result<&Assignment, StatusCode> {
    s.served
        .assignments
        .get(k as usize)
        .ok_or(StatusCode::NOT_FOUND)
}

async fn clock(State(s): St, h: HeaderMap) -> Result<axum::Json<ClockReading>, StatusCode> {
    authorized(&s, &h)?;
    Ok(axum::Json(ClockReading {
        t_us: s.served.clock.now_us(),
        wall_ns: assignment::wall_ns(),
    }))
}

async fn scenario(State(s): St, h: HeaderMap) -> Result<String, StatusCode> {
    authorized(&s, &h)?;
    Ok(s.served.scenario.clone())
}

async fn assignment(
    State(s): St,
    Path(k): Path<u64>,
    h: HeaderMap,
) -> Result<axum::Json<Assignment>, StatusCode> {
    authorized(&s, &h)?;
    Ok(axum::Json(share(&s, k)?.clone()))
}

/// The agent's trace, streamed to `agents/agent-K/trace.jsonl` (through a `.part`
/// file, so a trace cut off in transit is never taken for a whole one).
async fn trace(
    State(s): St,
    Path(k): Path<u64>,
    h: HeaderMap,
    body: Body,
) -> Result<StatusCode, (StatusCode, String)> {
    authorized(&s, &h).map_err(|c| (c, String::new()))?;
    share(&s, k).map_err(|c| (c, String::new()))?;
    let fail = |e: std::io::Error| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let dir = assignment::agent_dir(&s.served.run_dir, k);
    tokio::fs::create_dir_all(&dir).await.map_err(fail)?;
    let part = dir.join(format!("{TRACE_FILE}.part"));
    let mut f = tokio::fs::File::create(&part).await.map_err(fail)?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        f.write_all(&chunk).await.map_err(fail)?;
    }
    f.sync_all().await.map_err(fail)?;
    tokio::fs::rename(&part, dir.join(TRACE_FILE))
        .await
        .map_err(fail)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The agent's result, kept in `agents/agent-K/result.json` and passed on.
async fn result(
    State(s): St,
    Path(k): Path<u64>,
    h: HeaderMap,
    body: axum::body::Bytes,
) -> Result<StatusCode, (StatusCode, String)> {
    authorized(&s, &h).map_err(|c| (c, String::new()))?;
    share(&s, k).map_err(|c| (c, String::new()))?;
    let r: AgentResult =
        serde_json::from_slice(&body).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    if r.index != k {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("the result of share {} sent as share {k}", r.index),
        ));
    }
    let dir = assignment::agent_dir(&s.served.run_dir, k);
    let text = serde_json::to_string_pretty(&r).unwrap_or_default() + "\n";
    tokio::fs::write(dir.join(RESULT_FILE), text)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let _ = s.results.send((k, r));
    Ok(StatusCode::NO_CONTENT)
}
