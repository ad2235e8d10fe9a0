//! Request fate (M1–M3, Q8): what happened to each request, read from its chunks.
//!
//! Findings on every request: two attempts publishing into one stream, an answer that
//! restarts, a malformed explicit error, partial output with no explicit error, a
//! stream completed with no finish_reason. For requests caught by a fault, the stage
//! they were in (before the first delivered delta, or streaming) is compared with the
//! declared policy.

use std::collections::BTreeMap;

use serde::Serialize;

use super::history::{FaultRec, RequestRecord};
use super::{Status, Verdict};
use crate::scenario::{Fate, FatePolicy};
use crate::trace::{ChunkKind, Outcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Chunks from two generation attempts in one stream.
    TwoWriters,
    /// The answer starts over inside one stream.
    DuplicatedOutput,
    /// Output was delivered, then the stream ended with no explicit error.
    SilentInterruption,
    /// A clean end after the serving replica died mid-stream, or with no finish_reason.
    SilentTruncation,
    /// The explicit error lacks the seed's fields.
    MalformedExplicitError,
    /// The policy says retry before the first delta; the request failed instead.
    RetryNotMade,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub request: String,
    pub detail: String,
    /// Chunk indices that prove it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<u32>,
}

/// Stage of a request when a fault hit it (as the client can tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Sent, no delta delivered yet (queued, prefill or decode upstream).
    BeforeFirstDelta,
    /// At least one delta delivered.
    Streaming,
}

#[derive(Default)]
pub struct FateAcc {
    pub findings: Vec<Finding>,
    /// (stage, outcome) → count, for requests caught by a fault.
    pub table: BTreeMap<(Stage, Outcome), u64>,
    pub hit: u64,
}

fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_string()
    }
}

impl FateAcc {
    fn find(&mut self, kind: FindingKind, r: &RequestRecord, detail: String, chunks: Vec<u32>) {
        self.findings.push(Finding {
            kind,
            request: r.id.clone(),
            detail,
            chunks,
        });
    }

    pub fn add(&mut self, r: &RequestRecord, faults: &[FaultRec], policy: &FatePolicy) {
        let Some(end) = &r.end else { return };
        self.two_writers(r);
        self.restart(r);
        let delivered = r.deltas().count() as u32;
        match end.outcome {
            Outcome::ExplicitError => self.error_shape(r, delivered),
            Outcome::Completed
                if delivered > 0
                    && end.finish.is_none()
                    && r.chunks.iter().all(|c| c.finish.is_none()) =>
            {
                let last = r.chunks.last().map(|c| c.n).into_iter().collect();
                self.find(
                    FindingKind::SilentTruncation,
                    r,
                    format!("completed after {delivered} deltas with [DONE] but no finish_reason"),
                    last,
                );
            }
            Outcome::Completed | Outcome::Cancelled | Outcome::Rejected => {}
            other if delivered > 0 => {
                let last = r.chunks.last().map(|c| c.n).into_iter().collect();
                self.find(
                    FindingKind::SilentInterruption,
                    r,
                    format!(
                        "{delivered} deltas delivered, then the stream ended as {} with no explicit error ({})",
                        other.as_str(),
                        end.detail.as_deref().map(excerpt).unwrap_or_default()
                    ),
                    last,
                );
            }
            _ => {}
        }
        for f in faults {
            if let Some(stage) = caught(r, f) {
                self.hit += 1;
                *self.table.entry((stage, end.outcome)).or_default() += 1;
                self.against_policy(r, f, stage, policy);
            }
        }
    }

    fn two_writers(&mut self, r: &RequestRecord) {
        let mut first: Option<(&str, u32)> = None;
        for c in r
            .chunks
            .iter()
            .filter(|c| c.kind.is_delta() || c.kind == ChunkKind::Role)
        {
            let Some(cid) = c.cid.as_deref() else {
                continue;
            };
            match first {
                None => first = Some((cid, c.n)),
                Some((a, an)) if a != cid => {
                    self.find(
                        FindingKind::TwoWriters,
                        r,
                        format!(
                            "chunk {an} came from generation `{a}`, chunk {} from `{cid}`",
                            c.n
                        ),
                        vec![an, c.n],
                    );
                    return;
                }
                _ => {}
            }
        }
    }

    /// The first words of the answer appear again later: the answer restarted.
    fn restart(&mut self, r: &RequestRecord) {
        const K: usize = 6;
        let deltas: Vec<_> = r.deltas().collect();
        let words: Vec<(&str, u32)> = deltas
            .iter()
            .flat_map(|c| {
                c.text
                    .as_deref()
                    .unwrap_or("")
                    .split_whitespace()
                    .map(move |w| (w, c.n))
            })
            .collect();
        if words.len() < 2 * K {
            return;
        }
        let head: Vec<&str> = words[..K].iter().map(|w| w.0).collect();
        for start in 1..=words.len() - K {
            if words[start..start + K]
                .iter()
                .map(|w| w.0)
                .eq(head.iter().copied())
            {
                self.find(
                    FindingKind::DuplicatedOutput,
                    r,
                    format!(
                        "the answer starts over at chunk {}: `{}` repeats",
                        words[start].1,
                        head.join(" ")
                    ),
                    vec![words[0].1, words[start].1],
                );
                return;
            }
        }
    }

    fn error_shape(&mut self, r: &RequestRecord, delivered: u32) {
        if delivered == 0 {
            return;
        }
        let Some(c) = r.chunks.iter().rev().find(|c| c.kind == ChunkKind::Error) else {
            return;
        };
        let v: serde_json::Value = c
            .raw
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let e = &v["error"];
        let mut missing = Vec::new();
        if e["code"] != "upstream_decode_interrupted" {
            missing.push(format!(
                "code is {} not \"upstream_decode_interrupted\"",
                e["code"]
            ));
        }
        if e["partial_output"] != true {
            missing.push("partial_output is not true".into());
        }
        if e["retryable"] != false {
            missing.push("retryable is not false".into());
        }
        if !e["request_id"].is_string() {
            missing.push("no request_id".into());
        }
        match e["delivered_output_tokens"].as_u64() {
            None => missing.push("no delivered_output_tokens".into()),
            Some(n) if n != u64::from(delivered) => missing.push(format!(
                "delivered_output_tokens is {n} but the client received {delivered} deltas"
            )),
            _ => {}
        }
        if !missing.is_empty() {
            self.find(
                FindingKind::MalformedExplicitError,
                r,
                format!(
                    "{} in {}",
                    missing.join(", "),
                    excerpt(c.raw.as_deref().unwrap_or(""))
                ),
                vec![c.n],
            );
        }
    }

    fn against_policy(
        &mut self,
        r: &RequestRecord,
        f: &FaultRec,
        stage: Stage,
        policy: &FatePolicy,
    ) {
        let Some(end) = &r.end else { return };
        match stage {
            Stage::BeforeFirstDelta => {
                let retry = matches!(policy.prefill, Fate::Retry | Fate::Reroute)
                    || matches!(policy.decode, Fate::Retry);
                if retry && !end.outcome.is_success() && end.outcome != Outcome::Cancelled {
                    self.find(
                        FindingKind::RetryNotMade,
                        r,
                        format!(
                            "in flight before its first delta when {} hit {}; the policy says retry, but it ended as {}",
                            f.name,
                            f.replica,
                            end.outcome.as_str()
                        ),
                        Vec::new(),
                    );
                }
            }
            Stage::Streaming => {
                if policy.streaming == Fate::Fail && end.outcome == Outcome::Completed {
                    self.find(
                        FindingKind::SilentTruncation,
                        r,
                        format!(
                            "streaming from {} when {} killed it, yet the stream completed cleanly",
                            f.replica, f.name
                        ),
                        r.chunks.last().map(|c| c.n).into_iter().collect(),
                    );
                }
            }
        }
    }
}

/// Was `r` caught by fault `f`, and in which stage?
pub fn caught(r: &RequestRecord, f: &FaultRec) -> Option<Stage> {
    let end = r.end_t()?;
    if !(r.dispatch <= f.t && f.t < end) {
        return None;
    }
    let first = r.first_delta_t().filter(|t| *t <= f.t);
    match (&r.worker, first) {
        // Streaming from the faulted replica.
        (Some(w), Some(_)) if *w == f.replica => Some(Stage::Streaming),
        (Some(_), Some(_)) => None,
        // Not streaming yet: caught if it never got a head, or its head shows a retry.
        (None, _) => Some(Stage::BeforeFirstDelta),
        (Some(w), None) if *w == f.replica || r.attempt_number().is_some_and(|n| n > 1) => {
            Some(Stage::BeforeFirstDelta)
        }
        (Some(_), None) => None,
    }
}

pub fn verdict(acc: &FateAcc, faults: usize) -> Verdict {
    let mut evidence: Vec<String> = acc
        .table
        .iter()
        .map(|((s, o), n)| format!("{s:?} → {}: {n}", o.as_str()))
        .collect();
    evidence.extend(
        acc.findings
            .iter()
            .take(20)
            .map(|f| format!("{:?} {}: {}", f.kind, f.request, f.detail)),
    );
    if !acc.findings.is_empty() {
        let mut kinds: BTreeMap<FindingKind, usize> = BTreeMap::new();
        for f in &acc.findings {
            *kinds.entry(f.kind).or_default() += 1;
        }
        let s = kinds
            .iter()
            .map(|(k, n)| format!("{k:?} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Verdict::new(
            "Request-Fate",
            Status::Fail,
            format!("findings: {s}"),
            evidence,
        );
    }
    if faults == 0 {
        return Verdict::new(
            "Request-Fate",
            Status::NotEvaluated,
            "the scenario injects no fault; no request fate was tested (no findings on any request)",
            evidence,
        );
    }
    if acc.hit == 0 {
        return Verdict::new(
            "Request-Fate",
            Status::Unknown,
            "no request was in flight on the faulted replica: the fault tested no request fate",
            evidence,
        );
    }
    Verdict::new(
        "Request-Fate",
        Status::Pass,
        format!(
            "{} requests caught by the fault behaved as the policy says; no duplicate, stitched or silently truncated output",
            acc.hit
        ),
        evidence,
    )
}
