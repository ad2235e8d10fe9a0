//! The per-request record the checks and the metrics read: everything the trace (and
//! the journals merged into it) says about one request — its chunks, how it ended, its
//! upstream attempts and haq's proxy legs. Judging builds one per request
//! (`check::history`) and drops it once the request is judged.

use std::sync::Arc;

use super::{ChunkKind, InBandError, Outcome, ProxyEndKind, ToolCall, Usage};

#[derive(Debug, Clone)]
pub struct ChunkRec {
    pub t: u64,
    pub n: u32,
    pub kind: ChunkKind,
    pub text: Option<String>,
    /// Shared by the chunks of a stream that carry the same id (one allocation).
    pub cid: Option<Arc<str>>,
    pub finish: Option<String>,
    pub raw: Option<String>,
}

/// Everything the trace says about one request, while it is judged.
#[derive(Debug, Clone, Default)]
pub struct RequestRecord {
    pub id: String,
    pub class: String,
    pub phase: String,
    pub intended: u64,
    pub dispatch: u64,
    pub max_tokens: u32,
    pub protected: bool,
    /// Sent as a streaming request (default true in older traces).
    pub stream: bool,
    /// With a concurrency cap: when the request got its slot.
    pub admitted: Option<u64>,
    /// Server-reported queue time (µs).
    pub queue_us: Option<u64>,
    pub status: Option<u16>,
    pub response_t: Option<u64>,
    pub worker: Option<String>,
    pub attempt: Option<String>,
    pub chunks: Vec<ChunkRec>,
    pub end: Option<EndRec>,
    /// Attempts, from the gateway journal (empty without one).
    pub attempts: Vec<AttemptRec>,
    /// Other journal entries about this request.
    pub notes: Vec<GwNote>,
    /// What haq's interposition proxy saw of it, per upstream connection.
    pub proxy: Vec<ProxyLeg>,
    /// Trace time up to which the gateway journal is known to go on, when this record
    /// was judged (0: no journal).
    pub journal_until: u64,
    /// A probe request (issue 5): the fault whose trigger it drives. Probes are
    /// instrumentation held back at haq's proxy: judged by Request-Fate, not measured
    /// as the workload's latency (Q2).
    pub probe: Option<String>,
}

#[derive(Debug, Clone)]
pub struct EndRec {
    pub t: u64,
    pub outcome: Outcome,
    pub detail: Option<String>,
    pub tokens: u32,
    pub done: bool,
    pub finish: Option<String>,
    pub counted: Option<u32>,
    pub usage: Option<Usage>,
    pub error: Option<InBandError>,
    pub tool_calls: Vec<ToolCall>,
    pub json_valid: Option<bool>,
}

impl RequestRecord {
    pub fn deltas(&self) -> impl Iterator<Item = &ChunkRec> {
        self.chunks.iter().filter(|c| c.kind.is_delta())
    }
    pub fn first_delta_t(&self) -> Option<u64> {
        self.deltas().next().map(|c| c.t)
    }
    /// Attempt number from a `<id>/aN` attempt header, when the gateway sends one.
    pub fn attempt_number(&self) -> Option<u32> {
        self.attempt.as_deref()?.rsplit_once("/a")?.1.parse().ok()
    }
}

/// One upstream attempt of a request, as the gateway journaled it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptRec {
    pub id: String,
    pub worker: String,
    pub start: u64,
    /// Deltas already delivered to the client when the attempt started.
    pub delivered_at_start: u32,
    pub end: Option<u64>,
    /// `finished`, `failed`, `client_gone`, `relayed`, or what a newer gateway says.
    pub result: Option<String>,
    pub why: Option<String>,
    /// Deltas delivered to the client (request total) when the attempt ended.
    pub delivered_at_end: Option<u32>,
    /// Engine phases the journal reported: (time, `queued` / `prefill` / `decode`).
    pub phases: Vec<(u64, String)>,
    /// When the attempt was fenced: lease revoked or expired, cancel confirmed,
    /// confirmed dead.
    pub fenced: Option<u64>,
    /// When the gateway handed its first delta to the client (the commit, M1).
    pub first_delta: Option<u64>,
    /// When the gateway cancelled it because the client went away (M4).
    pub cancelled: Option<u64>,
    /// The engine preempted it and recomputed (worker journal).
    pub recomputed: bool,
    /// An upstream request haq's proxy saw (no gateway journal): not the gateway's word.
    pub proxy_leg: bool,
    /// What the worker's engine made of it (sim worker journals): when it was
    /// admitted, with how many prompt tokens, how many of them were the answer's own
    /// output it went on from (a migration's continuation, Q9), when its first token
    /// was computed.
    pub engine: Option<EngineRec>,
}

/// One attempt as the worker's engine journaled it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineRec {
    pub admitted: u64,
    pub prompt_tokens: u32,
    pub resumed: u32,
    pub first_token: Option<u64>,
}

impl AttemptRec {
    /// Alive at `t`: started, not ended.
    pub fn live_at(&self, t: u64) -> bool {
        self.start <= t && self.end.is_none_or(|e| e > t)
    }
    /// The engine phase the journal last reported at or before `t`.
    pub fn phase_at(&self, t: u64) -> Option<&str> {
        self.phases
            .iter()
            .rfind(|(pt, _)| *pt <= t)
            .map(|(_, p)| p.as_str())
    }
}

/// One upstream request of a client request, as haq's proxy forwarded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyLeg {
    pub replica: String,
    pub conn: u64,
    /// The gateway's attempt header, when it sends one.
    pub attempt: Option<String>,
    pub start: u64,
    pub end: Option<(u64, ProxyEndKind)>,
    /// SSE events the replica sent.
    pub events: u32,
    /// When the replica's first event passed the proxy: output was computed.
    pub first_event: Option<u64>,
}

impl ProxyLeg {
    /// Its name as an attempt: the gateway's attempt header, else `<replica>#<conn>`.
    pub fn id(&self) -> String {
        self.attempt
            .clone()
            .unwrap_or_else(|| format!("{}#{}", self.replica, self.conn))
    }

    /// The leg as an attempt, for gateways that keep no journal: ended by the gateway
    /// closing the connection is a cancel (`client_gone`), by the replica a failure.
    pub fn attempt(&self) -> AttemptRec {
        let result = self.end.map(|(_, k)| match k {
            ProxyEndKind::Completed => "finished",
            ProxyEndKind::DownstreamClosed | ProxyEndKind::DownstreamReset => "client_gone",
            ProxyEndKind::Stopped | ProxyEndKind::Local => "stopped",
            _ => "failed",
        });
        AttemptRec {
            id: self.id(),
            worker: self.replica.clone(),
            start: self.start,
            end: self.end.map(|e| e.0),
            result: result.map(str::to_string),
            why: self.end.map(|(_, k)| format!("proxy: {k:?}")),
            proxy_leg: true,
            ..Default::default()
        }
    }
}

/// A journal entry about a request that is not an attempt's start or end.
#[derive(Debug, Clone, PartialEq)]
pub struct GwNote {
    pub t: u64,
    pub ev: String,
    pub attempt: Option<String>,
    pub delivered: Option<u32>,
    pub detail: String,
}
