//! `GET /haq/requests/{id}`: one request's phase journal (M1), queryable while the
//! gateway runs — every gateway journal entry for the logical request, in order, and a
//! summary of the M1 fields: attempts (with their workers), whether the first delta
//! reached the client and from which attempt, delivered output tokens, the model
//! revision, the retry budget, the outcome. (The engine phases — queued, prefill,
//! decode — are in each worker's journal; docs/evidence.md.)

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::state::Gateway;
use crate::sim::worker::openai_error;
use crate::wire::journal::{GatewayEntry, Stamped, read_lines};

/// The M1 summary of one request's entries.
pub fn summary(rid: &str, entries: &[Stamped<GatewayEntry>]) -> Value {
    let (mut attempts, mut first_delta, mut revision) = (Vec::new(), Value::Null, Value::Null);
    let (mut budget, mut outcome, mut delivered) = (Value::Null, Value::Null, 0u32);
    for e in entries {
        match &e.entry {
            GatewayEntry::RequestStart { retry_budget, .. } => budget = json!(retry_budget),
            GatewayEntry::AttemptStart {
                attempt, worker, ..
            } => attempts.push(json!({"attempt": attempt, "worker": worker, "t_ns": e.t_ns})),
            GatewayEntry::FirstDelta {
                attempt,
                revision: r,
                ..
            } => {
                first_delta = json!({"attempt": attempt, "t_ns": e.t_ns});
                revision = json!(r);
            }
            GatewayEntry::AttemptEnd { delivered: d, .. }
            | GatewayEntry::ClientGone { delivered: d, .. }
            | GatewayEntry::ExplicitError { delivered: d, .. } => delivered = delivered.max(*d),
            GatewayEntry::RequestEnd {
                outcome: o,
                delivered: d,
                ..
            } => {
                outcome = json!(o);
                delivered = delivered.max(*d);
            }
            _ => {}
        }
    }
    json!({"request_id": rid, "outcome": outcome, "attempts": attempts,
           "first_delta": first_delta, "delivered_output_tokens": delivered,
           "model_revision": revision, "retry_budget": budget, "entries": entries})
}

pub async fn request(State(gw): State<Arc<Gateway>>, Path(rid): Path<String>) -> Response {
    let Some(path) = gw.journal_path.clone() else {
        return openai_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "this gateway keeps no journal (--journal)",
        );
    };
    let journal = gw.journal.clone();
    let read = tokio::task::spawn_blocking(move || {
        journal.flush();
        read_lines::<Stamped<GatewayEntry>>(&path)
    })
    .await;
    let read = read
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .and_then(|r| r);
    let all = match read {
        Ok(all) => all,
        Err(e) => return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "journal_error", &e),
    };
    let mine: Vec<_> = all
        .into_iter()
        .filter(|e| e.entry.req() == Some(rid.as_str()))
        .collect();
    if mine.is_empty() {
        return openai_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no request {rid} in the gateway journal"),
        );
    }
    axum::Json(summary(&rid, &mine)).into_response()
}
