//! Judging: pure, deterministic functions over a stored trace (M10). `haq run` and
//! `haq check RUN_DIR` call the same code, so a stored run re-judges identically.
//!
//! Verdicts compose as in Jepsen: a finding FAILs; missing evidence is UNKNOWN, never
//! PASS; a verdict this version does not judge is NOT_EVALUATED with the reason.

pub mod capacity;
pub mod evidence;
pub mod failure_domain;
pub mod fate;
pub mod history;
pub mod latency;
pub mod maintenance;
pub mod overload;
pub mod recovery;
pub mod routing;
pub mod run;
pub mod series;
#[cfg(test)]
pub mod testkit;
pub mod timeline;

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::scenario::Plan;
use crate::trace::Event;
use crate::trace::journal::{GatewayEntry, Stamped};
use history::{FaultRec, Folder, RequestRecord, RequestSink, RunInfo};
use latency::{PhaseAcc, PhaseStats};

pub const SCENARIO_FILE: &str = "scenario.json";
/// The sim gateway's journal in a run directory.
pub const GATEWAY_JOURNAL: &str = "gateway.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pass,
    Fail,
    Unknown,
    NotEvaluated,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Unknown => "UNKNOWN",
            Status::NotEvaluated => "NOT_EVALUATED",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    pub name: String,
    pub status: Status,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

impl Verdict {
    pub fn new(
        name: &str,
        status: Status,
        summary: impl Into<String>,
        evidence: Vec<String>,
    ) -> Self {
        Verdict {
            name: name.into(),
            status,
            summary: summary.into(),
            evidence,
        }
    }
}

/// The eight verdicts of Q13, in report order.
pub const VERDICTS: [&str; 8] = [
    "Failure-Domain",
    "Routing",
    "Request-Fate",
    "Capacity",
    "Latency",
    "Overload",
    "Recovery",
    "Maintenance",
];

/// Everything judged from one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Judgement {
    pub run: RunInfo,
    pub verdicts: Vec<Verdict>,
    pub phases: Vec<PhaseStats>,
    pub faults: Vec<FaultRec>,
    pub findings: Vec<fate::Finding>,
    /// Requests caught by a fault: (stage, outcome, count).
    pub fate_table: Vec<(fate::Stage, crate::trace::Outcome, u64)>,
    /// Requests with no end in the trace (the run was killed): indeterminate.
    pub unfinished: usize,
    /// The failure timeline (Q11).
    pub timeline: timeline::Timeline,
    /// Per-second series (report.html plots).
    pub series: series::Series,
    /// Protected traffic of the degraded interval (Capacity), when a fault made one.
    pub degraded: Option<capacity::Window>,
    /// Run-level evidence the verdicts read (per-request summaries for the CSV).
    #[serde(skip)]
    pub evidence: evidence::Evidence,
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
}

struct Acc<'a> {
    plan: &'a Plan,
    phases: Vec<PhaseAcc>,
    fate: fate::FateAcc,
    run: run::RunAcc,
}

impl RequestSink for Acc<'_> {
    fn request(&mut self, r: &RequestRecord, faults: &[FaultRec]) {
        if let Some(p) = self.phases.iter_mut().find(|p| p.name == r.phase) {
            p.add(r);
        }
        self.fate.add(r, faults, &self.plan.scenario.policy);
        self.run.request(r, faults);
    }
}

/// Judges a trace against the plan. `events` is called twice: a first pass collects
/// the faults (their lines may follow the requests they cut: a fault is written once
/// verified), the second folds the requests.
pub fn judge<I: IntoIterator<Item = Event>>(plan: &Plan, events: impl Fn() -> I) -> Judgement {
    judge_with(plan, events, None)
}

/// As [`judge`], with the sim gateway's journal (`gateway.jsonl`) when the run has one.
pub fn judge_with<I: IntoIterator<Item = Event>>(
    plan: &Plan,
    events: impl Fn() -> I,
    journal: Option<Vec<Stamped<GatewayEntry>>>,
) -> Judgement {
    let mut folder = Folder::default();
    for ev in events() {
        if let Event::Fault { .. } = ev {
            folder.push(ev, &mut NoSink);
        }
    }
    folder.faults.sort_by_key(|f| f.t);
    let mut acc = Acc {
        plan,
        phases: plan
            .phases
            .iter()
            .map(|p| PhaseAcc::new(&p.name, &format!("{:?}", p.kind).to_lowercase()))
            .collect(),
        fate: fate::FateAcc::default(),
        run: run::RunAcc::new(plan, journal, &folder.faults),
    };
    for ev in events() {
        if !matches!(ev, Event::Fault { .. }) {
            acc.run.see(&ev);
            folder.push(ev, &mut acc);
        }
    }
    let phases: Vec<PhaseStats> = acc.phases.iter().map(PhaseStats::from).collect();
    let level = acc
        .run
        .finish(plan, &folder.faults, &phases, &acc.fate.findings);
    let mut verdicts = Vec::new();
    for name in VERDICTS {
        verdicts.push(match name {
            "Request-Fate" => fate::verdict(&acc.fate, plan.faults.len()),
            "Latency" => latency::verdict(plan, &phases),
            other => level
                .verdict(other)
                .unwrap_or_else(|| not_evaluated(name, "not judged in this version")),
        });
    }
    if !folder.info.complete {
        for v in &mut verdicts {
            if v.status == Status::Pass {
                v.status = Status::Unknown;
                v.summary = format!(
                    "the trace has no end (the run was cut short): {}",
                    v.summary
                );
            }
        }
    }
    let unfinished = folder.unfinished();
    Judgement {
        run: folder.info,
        verdicts,
        phases,
        faults: folder.faults,
        findings: acc.fate.findings,
        fate_table: acc
            .fate
            .table
            .into_iter()
            .map(|((s, o), n)| (s, o, n))
            .collect(),
        unfinished,
        timeline: level.timeline,
        series: level.series,
        degraded: level.degraded,
        evidence: level.evidence,
    }
}

struct NoSink;
impl RequestSink for NoSink {
    fn request(&mut self, _: &RequestRecord, _: &[FaultRec]) {}
}

fn not_evaluated(name: &str, why: &str) -> Verdict {
    Verdict::new(name, Status::NotEvaluated, why, Vec::new())
}

/// Re-reads a run directory's scenario and trace and judges them (no network).
pub fn judge_dir(dir: &Path) -> anyhow::Result<(Plan, Judgement)> {
    let sc = dir.join(SCENARIO_FILE);
    let text = std::fs::read_to_string(&sc).with_context(|| format!("reading {}", sc.display()))?;
    let plan = crate::scenario::from_recorded_json(&text).map_err(anyhow::Error::msg)?;
    let tp = dir.join(crate::trace::TRACE_FILE);
    // Fail early on an unreadable trace rather than judging part of it.
    for e in crate::trace::read(&tp).with_context(|| format!("reading {}", tp.display()))? {
        e.map_err(|msg| anyhow::anyhow!("{}: {msg}", tp.display()))?;
    }
    let jp = dir.join(GATEWAY_JOURNAL);
    let journal = if jp.exists() {
        Some(
            crate::trace::journal::read_lines(&jp)
                .with_context(|| format!("reading {}", jp.display()))?
                .map_err(anyhow::Error::msg)?,
        )
    } else {
        None
    };
    let j = judge_with(
        &plan,
        || {
            crate::trace::read(&tp)
                .into_iter()
                .flatten()
                .map_while(Result::ok)
        },
        journal,
    );
    Ok((plan, j))
}
