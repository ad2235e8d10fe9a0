//! Everything judged from one trace: the verdicts and what they were judged from, as
//! the reports render it.

use serde::Serialize;

use super::history::{FaultRec, RunInfo};
use super::latency::PhaseStats;
use super::verdict::{Status, Verdict};
use super::{capacity, evidence, facts, fate, timeline};

/// Everything judged from one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Judgement {
    pub run: RunInfo,
    pub verdicts: Vec<Verdict>,
    pub phases: Vec<PhaseStats>,
    pub faults: Vec<FaultRec>,
    /// Request-Fate findings (up to `fate::KEEP_PER_KIND` of each kind).
    pub findings: Vec<fate::Finding>,
    /// Every finding kind with its full count.
    pub finding_counts: Vec<(fate::FindingKind, u64)>,
    /// Requests caught by a fault: the stage × outcome table (Q8).
    pub fate_table: Vec<fate::FateRow>,
    /// The requests behind the table, each with its attempts and delivered deltas (M1).
    pub fate_requests: Vec<fate::RequestFate>,
    /// Which evidence sources the judgement read.
    pub evidence: Vec<evidence::SourceReport>,
    /// Checkers that panicked (their verdict is UNKNOWN).
    pub checker_crashes: Vec<fate::Crash>,
    /// Requests with no end in the trace (the run was killed): indeterminate.
    pub unfinished: usize,
    /// The failure timeline (Q11).
    pub timeline: timeline::Timeline,
    /// Protected traffic of the degraded interval (Capacity), when a fault made one.
    pub degraded: Option<capacity::Window>,
    /// The capacity search (Q4), when the scenario has one.
    pub capacity: Option<crate::check::capacity::adaptive::Search>,
    /// Per fault: the engines' KV and cache metrics before it and after its reroute,
    /// with the TTFT next to them (Q12 step 14); empty when none were read.
    pub cache_effects: Vec<super::cache_effects::CacheEffects>,
    /// What the run-level verdicts read (per-request summaries for the CSV).
    #[serde(skip)]
    pub facts: facts::Evidence,
    /// Per second of the run (latencies by dispatch second, from intended time).
    pub seconds: Vec<crate::metrics::SecondStats>,
    /// haq's own sends per phase; `valid: false` makes the run INVALID.
    pub client: super::validity::ClientHealth,
    /// haq's own load per phase (CPU; the sim's stalls when haq runs it): a
    /// capacity-search step where it was the limit is the load generator's.
    pub own: Vec<super::own::PhaseOwn>,
    /// `criteria.require` and the warnings about verdicts exercised but not judged.
    pub gates: super::gates::Gates,
    /// Each phase's offered load against the protected load (Q12, Capacity).
    pub protected_load: capacity::ProtectedLoad,
}

impl Judgement {
    /// FAIL beats UNKNOWN beats PASS; NOT_EVALUATED is neutral.
    pub fn overall(&self) -> Status {
        let judged = self.verdicts.iter().map(|v| v.status);
        if judged.clone().any(|s| s == Status::Fail) {
            Status::Fail
        } else if judged.clone().any(|s| s == Status::Unknown) {
            Status::Unknown
        } else if judged.clone().any(|s| s == Status::Pass) {
            Status::Pass
        } else {
            Status::Unknown
        }
    }

    /// haq's own lateness could have changed a verdict: the measurements are not
    /// evidence and the run qualifies nothing, whatever the verdicts say.
    pub fn invalid(&self) -> bool {
        !self.client.valid
    }

    /// The run's one result, which every renderer prints and the exit code follows:
    /// INTERRUPTED beats INVALID beats a required verdict not judged (FAIL) beats the
    /// verdicts' overall status.
    pub fn result(&self) -> RunResult {
        if self.run.interrupted {
            // A partial report, whatever the verdicts of the part say.
            RunResult::Interrupted
        } else if self.invalid() {
            RunResult::Invalid
        } else if !self.gates.unmet.is_empty() {
            RunResult::Fail
        } else {
            match self.overall() {
                Status::Pass | Status::NotEvaluated => RunResult::Pass,
                Status::Fail => RunResult::Fail,
                Status::Unknown => RunResult::Unknown,
            }
        }
    }
}

/// The result of a run (README: exit codes 0 PASS · 1 FAIL or UNKNOWN · 2 INVALID · 3
/// INTERRUPTED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunResult {
    Pass,
    Fail,
    Unknown,
    Invalid,
    Interrupted,
}

impl RunResult {
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Pass => "PASS",
            RunResult::Fail => "FAIL",
            RunResult::Unknown => "UNKNOWN",
            RunResult::Invalid => "INVALID",
            RunResult::Interrupted => "INTERRUPTED",
        }
    }
}

impl std::fmt::Display for RunResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
