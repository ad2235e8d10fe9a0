//! Evidence written by other processes than the client: the sim gateway's journal
//! (`gateway.jsonl`), each sim worker's journal (`worker-<name>.jsonl`) and the tool
//! service's execution log (`tools.jsonl`). Each line is a JSON object stamped `t_ns`
//! with CLOCK_MONOTONIC (see [`super::Clock`]); writers and checkers share these types,
//! so the schema lives in one place (documented in docs/evidence.md).
//!
//! Every field added after the first version has a serde default, so journals written
//! by an older haq read back.

use serde::{Deserialize, Serialize};

/// One line of a journal: `{"t_ns": …, "ev": "<kind>", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamped<T> {
    pub t_ns: u64,
    #[serde(flatten)]
    pub entry: T,
}

/// Request priority as the gateway read it from `x-haq-priority` (Q1, Q10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    #[default]
    Protected,
    BestEffort,
}

/// How the gateway established that an attempt can no longer publish (M2, M5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceHow {
    /// The worker's address refused the connection: nothing listens, the process is gone.
    ConfirmedDead,
    /// The worker acknowledged the revocation (`POST /haq/leases/revoke` answered 200).
    CancelConfirmed,
    /// No confirmation; the gateway waited until the attempt's lease deadline passed.
    LeaseExpired,
    /// The worker refused the attempt before starting it (HTTP 4xx/5xx before any byte).
    NotStarted,
    /// The attempt ended cleanly (nothing left to fence).
    Finished,
    /// A flawed policy went on without fencing.
    Unfenced,
}

/// Why an upstream left (or is kept out of) rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RemovalCause {
    /// `/ready` answered 503 `starting`.
    NotReady,
    /// `/ready` answered 503 `draining` (planned drain, Q7).
    Draining,
    /// Health checks failed `health_failures` times in a row (timeout, error status).
    HealthCheckFailed,
    /// A request could not connect (refused): removed at once.
    ConnectFailed,
    /// A stream broke mid-body.
    StreamBroken,
    /// The deep health check (`/health_generate`: the engine steps or computes a token)
    /// failed or timed out: a dead or hung engine behind a live process.
    EngineUnhealthy,
    #[default]
    Other,
}

/// What the gateway did, per request, per attempt and per upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum GatewayEntry {
    /// A client request arrived (M1: the logical request).
    RequestStart {
        req: String,
        #[serde(default)]
        priority: Priority,
        /// Prompt tokens as the gateway counted them (whitespace words).
        #[serde(default)]
        prompt_tokens: u32,
        #[serde(default)]
        stream: bool,
        /// Extra attempts this request may use (M8).
        #[serde(default)]
        retry_budget: u32,
    },
    /// The request waits in the gateway queue (all upstream slots busy).
    Queued {
        req: String,
        #[serde(default)]
        priority: Priority,
        /// Queue length including this request.
        queue_len: u32,
    },
    /// Refused with 429 + Retry-After (Q10), or evicted from the queue by protected traffic.
    Shed {
        req: String,
        #[serde(default)]
        priority: Priority,
        status: u16,
        retry_after_s: u32,
        queue_len: u32,
        why: String,
    },
    /// An attempt was sent to `worker`; `delivered` deltas had reached the client.
    AttemptStart {
        req: String,
        attempt: String,
        worker: String,
        delivered: u32,
    },
    /// The attempt received a publication lease valid until `deadline_ns` (M5).
    LeaseGranted {
        req: String,
        attempt: String,
        worker: String,
        deadline_ns: u64,
    },
    /// Renewals to `worker` failed: its attempts' leases are no longer extended.
    LeaseRenewFailed {
        worker: String,
        attempts: Vec<String>,
        why: String,
    },
    /// The gateway saw the attempt's last lease deadline pass without confirmation.
    LeaseExpired {
        req: String,
        attempt: String,
        worker: String,
        deadline_ns: u64,
    },
    /// A revocation (upstream cancel) was sent. Not a confirmation (M5).
    CancelSent {
        req: String,
        attempt: String,
        worker: String,
        why: String,
    },
    /// The worker acknowledged the revocation: the attempt publishes nothing more.
    CancelConfirmed {
        req: String,
        attempt: String,
        worker: String,
    },
    /// The revocation got no acknowledgement (timeout, reset, HTTP error).
    CancelUnconfirmed {
        req: String,
        attempt: String,
        worker: String,
        why: String,
    },
    /// The attempt is fenced: it can no longer publish (M2: only then may a retry start).
    Fence {
        req: String,
        attempt: String,
        worker: String,
        how: FenceHow,
        /// How long fencing took (waiting for a lease to expire, a revoke round trip).
        waited_ms: u64,
    },
    /// The first delta of the request was handed to the client connection: the attempt
    /// is committed, no retry is legal from now on (M1–M3).
    FirstDelta {
        req: String,
        attempt: String,
        worker: String,
        /// The worker's `x-haq-model-revision`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
    },
    /// The upstream was silent longer than `soft_timeout` but is alive: slow is not
    /// dead, the reference policy keeps waiting (M4).
    SlowUpstream {
        req: String,
        attempt: String,
        worker: String,
        silent_ms: u64,
    },
    /// Flawed `soft-timeout`: a spare attempt was started without fencing the first.
    SoftTimeoutFailover {
        req: String,
        attempt: String,
        worker: String,
        silent_ms: u64,
    },
    /// Flawed `hard-drain`: an in-flight attempt on a draining worker was cut.
    HardDrainAbort {
        req: String,
        attempt: String,
        worker: String,
    },
    /// The client went away; the upstream is cancelled, no spare attempt starts (M4).
    ClientGone {
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
    /// A retry was started after the previous attempt was fenced (M2).
    Retry {
        req: String,
        /// The attempt that failed.
        after: String,
        delivered: u32,
        why: String,
    },
    /// A retry was not made: per-request budget, global retry budget or re-prefill cost
    /// (M8).
    RetryDenied { req: String, why: String },
    /// The stream was ended with the explicit error event (M3).
    ExplicitError {
        req: String,
        delivered: u32,
        why: String,
    },
    /// A flawed policy retried after deltas were delivered.
    RetryAfterDelta { req: String, delivered: u32 },
    /// The stream goes on on another worker (policy `migrate`, Q9): the prompt re-sent
    /// with `resent` output tokens appended (`prompt_tokens` in all) after `after`
    /// failed with `delivered` deltas at the client.
    Migrate {
        req: String,
        after: String,
        worker: String,
        delivered: u32,
        resent: u32,
        prompt_tokens: u32,
    },
    /// No ready upstream was left for the request.
    NoUpstream { req: String, attempts: u32 },
    /// The request is over, as the gateway saw it.
    RequestEnd {
        req: String,
        /// `completed`, `explicit_error`, `rejected`, `failed`, `client_gone`,
        /// `truncated` (flawed `silent-truncate`).
        outcome: String,
        attempts: u32,
        delivered: u32,
    },
    /// The upstream (re)entered rotation.
    UpstreamReady { worker: String, why: String },
    /// The upstream was taken out of rotation.
    UpstreamRemoved {
        worker: String,
        why: String,
        #[serde(default)]
        cause: RemovalCause,
    },
}

impl GatewayEntry {
    /// The logical request the entry is about (`None` for per-upstream entries).
    pub fn req(&self) -> Option<&str> {
        use GatewayEntry::*;
        match self {
            RequestStart { req, .. }
            | Queued { req, .. }
            | Shed { req, .. }
            | AttemptStart { req, .. }
            | LeaseGranted { req, .. }
            | LeaseExpired { req, .. }
            | CancelSent { req, .. }
            | CancelConfirmed { req, .. }
            | CancelUnconfirmed { req, .. }
            | Fence { req, .. }
            | FirstDelta { req, .. }
            | SlowUpstream { req, .. }
            | SoftTimeoutFailover { req, .. }
            | HardDrainAbort { req, .. }
            | ClientGone { req, .. }
            | AttemptEnd { req, .. }
            | Retry { req, .. }
            | RetryDenied { req, .. }
            | ExplicitError { req, .. }
            | RetryAfterDelta { req, .. }
            | Migrate { req, .. }
            | NoUpstream { req, .. }
            | RequestEnd { req, .. } => Some(req),
            LeaseRenewFailed { .. } | UpstreamReady { .. } | UpstreamRemoved { .. } => None,
        }
    }
}

/// What a sim worker did (`worker-<name>.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum WorkerEntry {
    /// The process started and listens (liveness), model loading begins (Q11).
    Started { worker: String, pid: u32 },
    /// Model loaded and engine initialised: readiness turns true (Q6, Q11).
    Ready { worker: String },
    /// SIGTERM: readiness false, new requests refused, in-flight ones finish (Q7).
    Draining {
        worker: String,
        running: u32,
        waiting: u32,
    },
    /// Drain finished (or timed out); the process exits now.
    Drained { worker: String, timed_out: bool },
    /// A fault hook was armed through `POST /admin/faults`.
    FaultArmed {
        worker: String,
        id: String,
        point: String,
        k: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// A fault hook fired; the process SIGKILLs itself right after this line.
    FaultFired {
        worker: String,
        id: String,
        point: String,
        k: u32,
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
    },
    /// `slow` or `hang` changed.
    Degraded {
        worker: String,
        slow_factor: f64,
        hang: bool,
        /// While hung: whether `/health` and `/ready` still pass (`pass`) or hang
        /// (`timeout`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hang_health: Option<String>,
    },
    /// The engine died with the process alive (a lost GPU: `gpu` of a tensor-parallel
    /// group of `tp`): every request in it ended with the engine's error.
    EngineDead {
        worker: String,
        gpu: u32,
        tp: u32,
        /// Requests that were in the engine (running or waiting).
        failed: u32,
    },
    /// The engine was started again in the same process (cold prefix cache).
    EngineRestarted { worker: String },
    /// The engine's step clock restarted after a stall longer than a step: `lost_us`
    /// of modelled time the machine did not give it (the sim ran slower than its model
    /// then: a capacity measured meanwhile is the machine's, not the model's).
    Stalled { worker: String, lost_us: u64 },
    /// A request entered the engine's waiting queue.
    Admitted {
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        prompt_tokens: u32,
        /// The prompt ends with this many tokens of the engine's own answer to the rest
        /// of it (a migrated stream re-sent with its delivered output, Q9): the answer
        /// goes on from that token.
        #[serde(default, skip_serializing_if = "is_zero")]
        resumed: u32,
    },
    /// The request was scheduled (left the queue); `cached_tokens` came from the prefix
    /// cache and skip prefill (M6).
    Scheduled {
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        cached_tokens: u32,
        recompute: bool,
    },
    /// Prefill done, the first output token sampled: the request is decoding (M1 phase).
    FirstToken {
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        /// Prompt tokens served from the prefix cache at its last scheduling.
        #[serde(default)]
        cached_tokens: u32,
    },
    /// KV cache ran out: the sequence was preempted and will be recomputed.
    Preempted {
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        generated: u32,
    },
    /// The attempt stopped publishing because its lease expired (M5).
    LeaseExpired { req: String, attempt: String },
    /// The attempt was revoked by the gateway; nothing more is published (M5).
    LeaseRevoked { req: String, attempt: String },
    /// A renewal or a request came for an attempt whose lease had already ended.
    LeaseRefused { attempt: String, why: String },
    /// The request finished: `length`, `stop`, `tool_calls`, or `aborted` (client gone,
    /// lease ended, revoked) with `why`.
    Finished {
        req: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        /// Output events published.
        events: u32,
        generated: u32,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// The inference attempt that asked (`x-haq-attempt`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<String>,
    /// The worker that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_lines_read_back() {
        let old = r#"{"t_ns":5,"ev":"upstream_removed","worker":"w1","why":"x"}"#;
        let e: Stamped<GatewayEntry> = serde_json::from_str(old).expect("reads");
        assert!(matches!(
            e.entry,
            GatewayEntry::UpstreamRemoved {
                cause: RemovalCause::Other,
                ..
            }
        ));
        let tool = r#"{"t_ns":1,"logical_request_id":"r1","tool_call_id":"c","idempotency_key":"r1:c","tool":"t","arguments":"{}","result":"ok","deduplicated":false}"#;
        let t: Stamped<ToolExecution> = serde_json::from_str(tool).expect("reads");
        assert_eq!(t.entry.attempt, None);
    }

    #[test]
    fn entries_round_trip() {
        let e = Stamped {
            t_ns: 7,
            entry: GatewayEntry::Fence {
                req: "r".into(),
                attempt: "r/a1".into(),
                worker: "w2".into(),
                how: FenceHow::LeaseExpired,
                waited_ms: 3,
            },
        };
        let s = serde_json::to_string(&e).expect("json");
        assert!(s.contains(r#""ev":"fence""#) && s.contains(r#""how":"lease_expired""#));
        assert_eq!(
            serde_json::from_str::<Stamped<GatewayEntry>>(&s).ok(),
            Some(e)
        );
    }
}
