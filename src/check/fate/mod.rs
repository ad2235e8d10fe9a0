//! Request fate (M1–M3, M5, M7, Q8, Q9): a Jepsen-style history checker over the
//! stored evidence of a run. Every finished request goes through each checker (one
//! file per finding family); requests caught by a fault are also placed in the
//! stage × outcome table and compared with the declared policy.
//!
//! Composition: any finding FAILs the verdict; evidence that is missing or too weak to
//! decide gives UNKNOWN (shown as such, never PASS); a checker that panics gives
//! UNKNOWN with its error, and the other checkers still run.

mod cache;
mod cancel;
mod ending;
pub mod migrate;
mod model;
mod output;
mod policy;
mod protocol;
mod tools;
mod view;
mod writers;

use crate::scenario::words::plural;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::Serialize;

use super::evidence::{SourceReport, SourceState};
use super::history::{FaultRec, RequestRecord};
use super::{Status, Verdict, VerdictName};
use crate::plan::Plan;
use crate::scenario::Fate;
use crate::trace::{ChunkKind, Outcome};
use crate::wire::journal::ToolExecution;

pub use model::{Check, Ctx, FateRow, Finding, FindingKind, Observed, Out, RequestFate, Stage};
pub use policy::stage_at;
pub use view::{Seam, SeamSource, View, excerpt};

/// Every per-request checker, by name.
pub const CHECKS: [(&str, Check); 10] = [
    ("two-writers", writers::two_writers),
    ("retry-after-first-delta", writers::retry_after_first_delta),
    ("duplicated-output", output::duplicated),
    ("stitched-output", output::stitched),
    ("chunk-order", output::chunk_order),
    ("silent-end", ending::silent_end),
    ("error-shape", ending::error_shape),
    ("stream-grammar", protocol::stream_grammar),
    ("upstream-cancel", cancel::upstream_cancel),
    ("policy", policy::against_policy),
];

/// Findings kept per kind (the rest are counted): a broken gateway flags every
/// request, and the report needs examples, not all of them.
pub const KEEP_PER_KIND: usize = 500;
/// Caught requests kept with their full fate (the table counts all).
pub const KEEP_FATES: usize = 2000;

/// A checker that panicked.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Crash {
    pub checker: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    pub error: String,
    /// How many times it crashed in this run.
    pub count: u64,
}

pub struct FateAcc {
    pub ctx: Ctx,
    checks: Vec<(&'static str, Check)>,
    pub findings: Vec<Finding>,
    pub counts: BTreeMap<FindingKind, u64>,
    /// (stage, declared, observed, outcome) → count, for requests caught by a fault.
    pub table: BTreeMap<(Stage, Option<Fate>, Observed, Outcome), u64>,
    pub fates: Vec<RequestFate>,
    /// Requests caught by a fault.
    pub hit: u64,
    /// Requests judged.
    pub judged: u64,
    pub unknown: Vec<String>,
    pub unknown_count: u64,
    pub crashes: Vec<Crash>,
    /// Requests whose stream carried tool-call deltas.
    pub tool_call_requests: u64,
    /// Requests whose client left on purpose (workload abandonment), their upstream
    /// cancel judged from the journal or haq's proxy (M4).
    pub left: u64,
    tools: tools::ToolCheck,
    /// The planted prompts' answers (M6).
    pub cache: cache::CacheCheck,
}

impl FateAcc {
    pub fn new(ctx: Ctx) -> FateAcc {
        FateAcc::with_checks(ctx, CHECKS.to_vec())
    }

    /// With another set of checkers (tests add one that panics).
    pub fn with_checks(ctx: Ctx, checks: Vec<(&'static str, Check)>) -> FateAcc {
        FateAcc {
            ctx,
            checks,
            findings: Vec::new(),
            counts: BTreeMap::new(),
            table: BTreeMap::new(),
            fates: Vec::new(),
            hit: 0,
            judged: 0,
            unknown: Vec::new(),
            unknown_count: 0,
            crashes: Vec::new(),
            tool_call_requests: 0,
            left: 0,
            tools: tools::ToolCheck::default(),
            cache: cache::CacheCheck::default(),
        }
    }

    /// Judges one finished request with every checker, each isolated; true when a
    /// fault caught it (in flight on the replica the fault hit). A request haq's own
    /// host failed (`local`) says nothing of the target's: it is not judged (the run is
    /// INVALID for it).
    pub fn add(&mut self, r: &RequestRecord, faults: &[FaultRec]) -> bool {
        let Some(v) = View::new(r) else { return false };
        // Stopped by haq's interrupt (what it would have become is not known), or
        // failed by haq's own host: not the target's doing.
        if matches!(v.end.outcome, Outcome::Interrupted | Outcome::Local) {
            return false;
        }
        let hit = self.hit;
        self.judged += 1;
        if r.chunks.iter().any(|c| c.kind == ChunkKind::ToolCall) {
            self.tool_call_requests += 1;
        }
        for (name, check) in self.checks.clone() {
            let mut out = Out::default();
            let ctx = &self.ctx;
            match catch_unwind(AssertUnwindSafe(|| check(ctx, &v, faults, &mut out))) {
                Ok(()) => self.merge(out),
                Err(p) => self.crashed(name, Some(&r.id), panic_text(p.as_ref())),
            }
        }
        let (cache, ctx) = (&mut self.cache, &self.ctx);
        let mut out = Out::default();
        match catch_unwind(AssertUnwindSafe(|| cache.add(ctx, &v, &mut out))) {
            Ok(()) => self.merge(out),
            Err(p) => self.crashed("cache-truth", Some(&r.id), panic_text(p.as_ref())),
        }
        self.hit > hit
    }

    /// One line of the tool log.
    pub fn tool(&mut self, t: u64, x: &ToolExecution) {
        let tools = &mut self.tools;
        let mut out = Out::default();
        match catch_unwind(AssertUnwindSafe(|| tools.add(t, x, &mut out))) {
            Ok(()) => self.merge(out),
            Err(p) => self.crashed("duplicate-tool-effect", None, panic_text(p.as_ref())),
        }
    }

    fn merge(&mut self, out: Out) {
        self.left += out.left;
        for f in out.findings {
            let n = self.counts.entry(f.kind).or_default();
            *n += 1;
            if *n as usize <= KEEP_PER_KIND {
                self.findings.push(f);
            }
        }
        for u in out.unknown {
            self.unknown_count += 1;
            if self.unknown.len() < 20 {
                self.unknown.push(u);
            }
        }
        for f in out.fates {
            self.hit += 1;
            *self
                .table
                .entry((f.stage, f.declared, f.observed, f.outcome))
                .or_default() += 1;
            if self.fates.len() < KEEP_FATES {
                self.fates.push(f);
            }
        }
    }

    fn crashed(&mut self, checker: &str, request: Option<&str>, error: String) {
        match self.crashes.iter_mut().find(|c| c.checker == checker) {
            Some(c) => c.count += 1,
            None => self.crashes.push(Crash {
                checker: checker.into(),
                request: request.map(str::to_string),
                error,
                count: 1,
            }),
        }
    }

    pub fn table_rows(&self) -> Vec<FateRow> {
        self.table
            .iter()
            .map(|(&(stage, declared, observed, outcome), &count)| FateRow {
                stage,
                declared,
                observed,
                outcome,
                count,
            })
            .collect()
    }
}

/// The scenario's faults that test request fate: all but planned drains, which must
/// let in-flight work finish and are judged by Maintenance (Q7).
/// The declared faults that test request fate (all but planned drains, Q7).
pub fn fate_faults(plan: &Plan) -> Vec<&crate::plan::FaultPlan> {
    use crate::scenario::{FailureDomain, FaultAction};
    plan.faults
        .iter()
        .filter(|f| f.domain != FailureDomain::Drain && f.action != FaultAction::Drain)
        .collect()
}

/// The request-fate faults that were not applied (no verified record): what each
/// would have tested was not tested.
fn not_applied(declared: &[&crate::plan::FaultPlan], recorded: &[FaultRec]) -> Vec<String> {
    declared
        .iter()
        .filter(|d| !recorded.iter().any(|r| r.name == d.name && r.verified))
        .map(|d| {
            let why = recorded
                .iter()
                .find(|r| r.name == d.name)
                .map_or("no record of it in the trace".to_string(), |r| {
                    r.detail.clone()
                });
            format!(
                "{} was not applied ({why}): the request fate it was declared to test was not tested",
                d.name
            )
        })
        .collect()
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-text payload".into())
}

/// The Request-Fate verdict, composed as in Jepsen: FAIL on any finding; else UNKNOWN
/// when a checker crashed or evidence was missing; else PASS when some request was
/// caught by a fault, or when, with no fault, requests whose client left early were
/// judged for the upstream cancel (M4); NOT_EVALUATED otherwise when the scenario
/// injects none.
pub fn verdict(
    acc: &FateAcc,
    declared: &[&crate::plan::FaultPlan],
    recorded: &[FaultRec],
    sources: &[SourceReport],
    sim: bool,
) -> Verdict {
    let name = VerdictName::RequestFate;
    let mut evidence = verdict_evidence(acc, sources);
    if !acc.counts.is_empty() {
        let s = acc
            .counts
            .iter()
            .map(|(k, n)| format!("{} ×{n}", k.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        return Verdict::new(name, Status::Fail, format!("findings: {s}"), evidence);
    }
    let mut unknown = undecided(acc, sources, sim);
    unknown.extend(not_applied(declared, recorded));
    if !unknown.is_empty() {
        evidence.extend(acc.unknown.iter().cloned());
        return Verdict::new(name, Status::Unknown, unknown.join("; "), evidence);
    }
    let truth = cache_truth_line(acc);
    if declared.is_empty() && acc.cache.compared > 0 {
        return Verdict::new(
            name,
            Status::Pass,
            format!("{truth}; no finding on {} requests", acc.judged),
            evidence,
        );
    }
    if declared.is_empty() && acc.left > 0 {
        return Verdict::new(
            name,
            Status::Pass,
            format!(
                "{} whose client left early (workload abandonment) had their upstream cancelled within the grace, with no spare attempt (M4); no finding on {}",
                plural(acc.left, "request"),
                plural(acc.judged, "request")
            ),
            evidence,
        );
    }
    if declared.is_empty() {
        return Verdict::new(
            name,
            Status::NotEvaluated,
            format!(
                "the scenario injects no fault that tests request fate (a planned drain is judged by Maintenance, Q7); no findings on {}",
                plural(acc.judged, "request")
            ),
            evidence,
        );
    }
    if acc.hit == 0 {
        return Verdict::new(
            name,
            Status::Unknown,
            "no request was in flight on the faulted replica: the fault tested no request fate",
            evidence,
        );
    }
    Verdict::new(
        name,
        Status::Pass,
        format!(
            "{} caught by the fault behaved as the policy says; no finding on {} (no duplicate, stitched or silently truncated output){}",
            plural(acc.hit, "request"),
            plural(acc.judged, "request"),
            if acc.cache.compared > 0 {
                format!("; {truth}")
            } else {
                String::new()
            }
        ),
        evidence,
    )
}

/// What the planted prompts showed (M6), for a passing verdict.
fn cache_truth_line(acc: &FateAcc) -> String {
    let c = &acc.cache;
    format!(
        "M6: {} answers to planted identical prompts matched the first answer to each, across {} replicas and {} phases",
        c.compared,
        c.replicas.len(),
        c.phases.len()
    )
}

/// The verdict's evidence: the stage × outcome table, the evidence sources, and the
/// first findings.
fn verdict_evidence(acc: &FateAcc, sources: &[SourceReport]) -> Vec<String> {
    let mut evidence: Vec<String> = acc
        .table_rows()
        .iter()
        .map(|r| {
            format!(
                "{} (declared {}) → {} / {}: {}",
                r.stage.as_str(),
                r.declared.map(Fate::as_str).unwrap_or("ambiguous"),
                r.observed.as_str(),
                r.outcome.as_str(),
                r.count
            )
        })
        .collect();
    evidence.extend(
        acc.fates
            .iter()
            .filter_map(|f| Some(migrate::describe(&f.request, f.migration.as_ref()?)))
            .take(20),
    );
    evidence.extend(
        sources
            .iter()
            .map(|s| format!("evidence {}: {:?} — {}", s.source, s.state, s.detail)),
    );
    evidence.extend(
        acc.findings
            .iter()
            .take(20)
            .map(|f| format!("{} {}: {}", f.kind.as_str(), f.request, f.detail)),
    );
    evidence
}

/// What keeps the verdict from a PASS without a finding: crashed checkers, missing
/// or unreadable evidence, unchecked tool calls, questions left open.
fn undecided(acc: &FateAcc, sources: &[SourceReport], sim: bool) -> Vec<String> {
    let mut unknown: Vec<String> = acc
        .crashes
        .iter()
        .map(|c| {
            format!(
                "checker `{}` crashed ({}×{}): {}",
                c.checker,
                c.count,
                c.request
                    .as_deref()
                    .map(|r| format!(", first on {r}"))
                    .unwrap_or_default(),
                c.error
            )
        })
        .collect();
    for s in sources {
        if matches!(s.state, SourceState::Missing | SourceState::Unreadable) {
            unknown.push(format!("{}: {}", s.source, s.detail));
        }
    }
    let tools_used = sources
        .iter()
        .any(|s| s.source == "tool log" && s.state == SourceState::Used);
    if acc.tool_call_requests > 0 && !tools_used && sim {
        unknown.push(format!(
            "{} streamed tool calls but the run has no tool log: tool side effects (M7) are unchecked",
            plural(acc.tool_call_requests, "request")
        ));
    }
    if acc.unknown_count > 0 {
        unknown.push(format!(
            "{} questions the evidence could not decide, e.g. {}",
            acc.unknown_count,
            acc.unknown.first().map(String::as_str).unwrap_or("")
        ));
    }
    unknown
}

#[cfg(test)]
mod tests;
