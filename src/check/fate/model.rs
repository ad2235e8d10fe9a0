//! The vocabulary of the request-fate checks: what a checker is handed ([`Ctx`]) and
//! says ([`Out`], [`Finding`]), the stages of a request (Q8) and what became of a
//! request caught by a fault ([`Observed`], [`RequestFate`]).

use serde::Serialize;

use super::view::View;
use crate::check::history::FaultRec;
use crate::plan::Plan;
use crate::scenario::{Fate, FatePolicy};
use crate::trace::Outcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Two attempt ids published into one stream, interleaved or overlapping in time.
    TwoWriters,
    /// A repeated run of deltas, or the answer starting over, in one stream.
    DuplicatedOutput,
    /// A second attempt's text after the first attempt's deltas (not a token-continuous
    /// migration).
    StitchedOutput,
    /// Output was delivered, then the connection broke with no explicit error.
    SilentInterruption,
    /// A clean `[DONE]` or end of body after an interruption, with no explicit error.
    SilentTruncation,
    /// A new attempt started after the first delta reached the client (M2).
    RetryAfterFirstDelta,
    /// The policy says retry before the first delta; the request failed instead.
    RetryNotMade,
    /// What happened differs from the declared fate for the stage (Q8).
    FateMismatch,
    /// The explicit error lacks fields of the expected shape, or is not JSON (M3).
    MalformedExplicitError,
    /// The client went away; the upstream attempt was not cancelled (M4).
    UpstreamNotCancelled,
    /// One logical tool action executed twice (M7).
    DuplicateToolEffect,
    /// Chunks missing or out of order between what was sent and what arrived.
    ChunkGap,
    /// Events after `[DONE]`: more output, or a body that would not end; output after
    /// `finish_reason` and the usage report (M3).
    DataAfterDone,
    /// A response haq had to cut or refuse for what the server sent: a line, event,
    /// answer or stream past `client.limits`, an encoding it did not ask for, a head it
    /// could not accept, a stream that would not end (outcomes `oversized`, `encoded`,
    /// `bad_head`, `endless`).
    ProtocolViolation,
    /// Two complete answers to one planted identical prompt at temperature 0 differ
    /// (M6: a cache, a replica or a revision that changes the answer).
    CacheDivergence,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::TwoWriters => "two_writers",
            FindingKind::DuplicatedOutput => "duplicated_output",
            FindingKind::StitchedOutput => "stitched_output",
            FindingKind::SilentInterruption => "silent_interruption",
            FindingKind::SilentTruncation => "silent_truncation",
            FindingKind::RetryAfterFirstDelta => "retry_after_first_delta",
            FindingKind::RetryNotMade => "retry_not_made",
            FindingKind::FateMismatch => "fate_mismatch",
            FindingKind::MalformedExplicitError => "malformed_explicit_error",
            FindingKind::UpstreamNotCancelled => "upstream_not_cancelled",
            FindingKind::DuplicateToolEffect => "duplicate_tool_effect",
            FindingKind::ChunkGap => "chunk_gap",
            FindingKind::DataAfterDone => "data_after_done",
            FindingKind::ProtocolViolation => "protocol_violation",
            FindingKind::CacheDivergence => "cache_divergence",
        }
    }
}

/// One anomaly with the evidence that proves it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    pub kind: FindingKind,
    /// The request id (the logical request id for tool findings).
    pub request: String,
    pub detail: String,
    /// Chunk indices that prove it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<u32>,
    /// Attempt or generation ids involved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<String>,
    /// The delivered text around the anomaly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

/// Stage of a request when a fault hit it (Q8). From the gateway journal where it
/// says; else as the client can tell: before its first delta, or streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// At the gateway, no attempt on a replica yet.
    New,
    Queued,
    Prefill,
    /// Generating, nothing delivered to the client yet.
    Decode,
    /// Sent, no delta delivered yet; which of queued/prefill/decode is not known.
    BeforeFirstDelta,
    /// At least one delta delivered.
    Streaming,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::New => "new",
            Stage::Queued => "queued",
            Stage::Prefill => "prefill",
            Stage::Decode => "decode",
            Stage::BeforeFirstDelta => "before_first_delta",
            Stage::Streaming => "streaming",
        }
    }
}

/// One row of the stage × outcome table: requests caught by a fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FateRow {
    pub stage: Stage,
    /// The declared fate for the stage (none when the stage is ambiguous and the
    /// policy differs across the stages it could be).
    pub declared: Option<Fate>,
    pub observed: Observed,
    /// How the stream ended, as the client saw it.
    pub outcome: Outcome,
    pub count: u64,
}

/// What the checkers need besides the request.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub policy: FatePolicy,
    /// A gateway journal was read: attempts are known, not guessed.
    pub journal: bool,
    /// µs the gateway may take to cancel upstream after the client left.
    pub cancel_grace: u64,
    /// `workload.cache_truth` and each class's API: which requests carry a planted
    /// prompt, compared for one answer (M6).
    pub cache_truth: Option<(
        crate::scenario::CacheTruth,
        Vec<(String, crate::scenario::Api)>,
    )>,
}

impl Ctx {
    pub fn new(plan: &Plan) -> Ctx {
        let s = &plan.scenario;
        Ctx {
            policy: s.policy.clone(),
            journal: false,
            cancel_grace: s.evidence.cancel_grace.0.as_micros() as u64,
            cache_truth: s.workload.cache_truth.clone().map(|t| {
                let apis = plan.mix.classes.iter().map(|c| (c.name.clone(), c.api));
                (t, apis.collect())
            }),
        }
    }
}

/// What one checker says about one request.
#[derive(Default)]
pub struct Out {
    pub findings: Vec<Finding>,
    /// Questions the evidence could not decide.
    pub unknown: Vec<String>,
    pub fates: Vec<RequestFate>,
    /// Requests whose client left on purpose (workload abandonment) whose upstream
    /// the evidence shows: the M4 cancel was judged.
    pub left: u64,
}

impl Out {
    pub fn find(&mut self, kind: FindingKind, request: &str, detail: String) -> &mut Finding {
        self.findings.push(Finding {
            kind,
            request: request.to_string(),
            detail,
            chunks: Vec::new(),
            attempts: Vec::new(),
            excerpt: None,
        });
        let last = self.findings.len() - 1;
        &mut self.findings[last]
    }
}

impl Finding {
    pub fn chunks(&mut self, c: impl IntoIterator<Item = u32>) -> &mut Self {
        self.chunks.extend(c);
        self
    }
    pub fn attempts<S: Into<String>>(&mut self, a: impl IntoIterator<Item = S>) -> &mut Self {
        self.attempts.extend(a.into_iter().map(Into::into));
        self
    }
    pub fn excerpt(&mut self, e: String) -> &mut Self {
        if !e.is_empty() {
            self.excerpt = Some(e);
        }
        self
    }
}

/// A per-request checker.
pub type Check = fn(&Ctx, &View, &[FaultRec], &mut Out);

/// What became of a request caught by a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    /// Completed with one attempt and no hand-over: the fault did not cut it.
    Completed,
    /// Completed on another replica; no attempt ran on the faulted one.
    Rerouted,
    /// Completed after another attempt started from the beginning.
    Retried,
    /// Completed after a token-continuous hand-over between attempts.
    Migrated,
    /// Completed by its one attempt on the faulted replica, which the engine preempted
    /// and recomputed (worker journal): the fault did not cut it.
    Recomputed,
    /// Completed after a hand-over that is not token-continuous.
    Stitched,
    /// Ended as if complete, but it was cut: no finish_reason, or the journal shows
    /// the serving attempt failed.
    Truncated,
    /// Ended with an explicit error: an in-band error event, an HTTP error, a rejection.
    Failed,
    /// Ended with no explicit error: reset, truncated, timed out, malformed.
    Interrupted,
    /// haq stopped it (drain timeout or interrupt): not judged against the policy.
    ClientGone,
}

impl Observed {
    pub fn as_str(self) -> &'static str {
        match self {
            Observed::Completed => "completed",
            Observed::Rerouted => "rerouted",
            Observed::Retried => "retried",
            Observed::Migrated => "migrated",
            Observed::Recomputed => "recomputed",
            Observed::Stitched => "stitched",
            Observed::Truncated => "truncated",
            Observed::Failed => "failed",
            Observed::Interrupted => "interrupted",
            Observed::ClientGone => "client_gone",
        }
    }
}

/// One request caught by one fault: its history in brief (M1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestFate {
    pub request: String,
    pub fault: String,
    pub stage: Stage,
    pub declared: Option<Fate>,
    pub observed: Observed,
    pub outcome: Outcome,
    /// Attempt ids (journal) or the attempt header.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
    /// Deltas delivered to the client.
    pub delivered: u32,
    /// Why this is allowed or not, when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A hand-over after delivered output, measured (Q9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<super::migrate::Migration>,
}
