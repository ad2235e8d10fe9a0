//! Evidence written by other processes than the client: the sim gateway's journal
//! (`gateway.jsonl`) and the tool service's execution log (`tools.jsonl`). Each line
//! is a JSON object stamped `t_ns` with CLOCK_MONOTONIC (see [`super::Clock`]);
//! writers and the checker share these types, so the schema lives in one place
//! (documented in docs/evidence.md).

use serde::{Deserialize, Serialize};

/// One line of `gateway.jsonl`: `{"t_ns": …, "ev": "<kind>", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped<T> {
    pub t_ns: u64,
    #[serde(flatten)]
    pub entry: T,
}

/// What the gateway did, per request attempt and per upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum GatewayEntry {
    /// An attempt was sent to `worker`; `delivered` deltas had reached the client.
    AttemptStart {
        req: String,
        attempt: String,
        worker: String,
        delivered: u32,
    },
    /// The attempt ended: `finished`, `failed`, `client_gone` or `relayed`.
    AttemptEnd {
        req: String,
        attempt: String,
        worker: String,
        result: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        delivered: u32,
    },
    /// The stream was ended with the explicit error event (M3).
    ExplicitError {
        req: String,
        delivered: u32,
        why: String,
    },
    /// A flawed policy retried after deltas were delivered.
    RetryAfterDelta { req: String, delivered: u32 },
    /// No ready upstream was left for the request.
    NoUpstream { req: String, attempts: u32 },
    /// The upstream (re)entered rotation.
    UpstreamReady { worker: String, why: String },
    /// The upstream was taken out of rotation.
    UpstreamRemoved { worker: String, why: String },
}

/// One line of `tools.jsonl`: a tool call the tool service executed (or deduplicated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExecution {
    /// The client's logical request id.
    pub logical_request_id: String,
    pub tool_call_id: String,
    /// `<logical_request_id>:<tool_call_id>` when the caller derives it as M7 says.
    pub idempotency_key: String,
    pub tool: String,
    pub arguments: String,
    pub result: String,
    /// True when the key was seen before and the stored result was returned instead
    /// of executing again.
    pub deduplicated: bool,
}

/// Reads a JSON-lines evidence file; a torn last line is ignored, other bad lines
/// are errors with their line number.
pub fn read_lines<T: for<'de> Deserialize<'de>>(
    path: &std::path::Path,
) -> std::io::Result<Result<Vec<T>, String>> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        match serde_json::from_str(l) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => return Ok(Err(format!("{}:{}: {e}", path.display(), i + 1))),
        }
    }
    Ok(Ok(out))
}
