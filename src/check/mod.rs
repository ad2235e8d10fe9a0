//! Judging: pure, deterministic functions over a stored trace (M10). `haq run` and
//! `haq check RUN_DIR` call the same code, so a stored run re-judges identically.
//!
//! Verdicts compose as in Jepsen: a finding FAILs; missing evidence is UNKNOWN, never
//! PASS; a verdict this version does not judge is NOT_EVALUATED with the reason.

pub mod evidence;
pub mod fate;
pub mod history;
pub mod latency;

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::scenario::Plan;
use crate::trace::Event;
use history::{FaultRec, Folder, RequestRecord, RequestSink, RunInfo};
use latency::{PhaseAcc, PhaseStats};

pub const SCENARIO_FILE: &str = "scenario.json";

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

struct Acc {
    phases: Vec<PhaseAcc>,
    fate: fate::FateAcc,
}

impl RequestSink for Acc {
    fn request(&mut self, r: &RequestRecord, faults: &[FaultRec]) {
        if let Some(p) = self.phases.iter_mut().find(|p| p.name == r.phase) {
            p.add(r);
        }
        self.fate.add(r, faults);
    }
}

/// Judges a trace (no other evidence) against the plan.
pub fn judge<I: IntoIterator<Item = Event>>(plan: &Plan, events: impl Fn() -> I) -> Judgement {
    judge_with(plan, events, evidence::Sources::none())
}

/// Judges a trace and the other evidence of the run against the plan. `events` is
/// called twice: a first pass collects the faults (their lines may follow the requests
/// they cut: a fault is written once verified) and the clock base; the second folds
/// the requests, merged in time with the gateway journal.
pub fn judge_with<I: IntoIterator<Item = Event>>(
    plan: &Plan,
    events: impl Fn() -> I,
    mut src: evidence::Sources,
) -> Judgement {
    let mut folder = Folder::default();
    let mut mono_ns = 0;
    for ev in events() {
        match ev {
            Event::Fault { .. } => folder.push(ev, &mut NoSink),
            Event::RunStart { mono_ns: m, .. } => mono_ns = m,
            _ => {}
        }
    }
    folder.faults.sort_by_key(|f| f.t);
    let mut ctx = fate::Ctx::new(plan);
    ctx.journal = src.gateway.is_some();
    if ctx.journal {
        // Wait for late journal lines past the cancel grace before judging a request.
        folder.linger = ctx.cancel_grace + 1_000_000;
    }
    let mut acc = Acc {
        phases: plan
            .phases
            .iter()
            .map(|p| PhaseAcc::new(&p.name, &format!("{:?}", p.kind).to_lowercase()))
            .collect(),
        fate: fate::FateAcc::new(ctx),
    };
    let mut gw_error = None;
    let trace = events()
        .into_iter()
        .filter(|e| !matches!(e, Event::Fault { .. }));
    for item in evidence::merge(trace, src.gateway.take(), mono_ns, |e| gw_error = Some(e)) {
        match item {
            evidence::Item::Trace(ev) => folder.push(ev, &mut acc),
            evidence::Item::Gateway(t, it) => folder.push_gateway(t, it, &mut acc),
            evidence::Item::GatewayEnd => folder.gateway_ended(),
        }
    }
    folder.finish(&mut acc);
    if let Some(e) = gw_error {
        src.report("gateway journal", evidence::SourceState::Unreadable, e);
    }
    if let Some(tools) = src.tools.take() {
        for line in tools {
            match line {
                Ok(x) => acc
                    .fate
                    .tool(x.t_ns.saturating_sub(mono_ns) / 1000, &x.entry),
                Err(e) => {
                    src.report("tool log", evidence::SourceState::Unreadable, e);
                    break;
                }
            }
        }
    }
    let phases: Vec<PhaseStats> = acc.phases.iter().map(PhaseStats::from).collect();
    let sim = plan.scenario.target.kind == crate::scenario::TargetKind::Sim;
    let mut verdicts = Vec::new();
    for name in VERDICTS {
        verdicts.push(match name {
            "Request-Fate" => fate::verdict(&acc.fate, plan.faults.len(), &src.reports, sim),
            "Latency" => latency::verdict(plan, &phases),
            "Failure-Domain" => Verdict::new(
                name,
                Status::NotEvaluated,
                "not judged in this version: faults are verified and recorded (see faults) but not yet compared with the declared domain",
                folder.faults.iter().map(|f| format!("{} on {} verified={}", f.name, f.replica, f.verified)).collect(),
            ),
            "Routing" => not_evaluated(name, "traffic-removal time from attribution headers is not judged in this version"),
            "Capacity" => not_evaluated(name, "the degraded capacity search and protected-load gate are not judged in this version"),
            "Overload" => not_evaluated(name, "the scenario has no overload phase"),
            "Recovery" => not_evaluated(name, "the scenario has no replacement (restart) step"),
            "Maintenance" => not_evaluated(name, "the scenario has no planned drain"),
            _ => not_evaluated(name, "unknown verdict"),
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
    let fate_table = acc.fate.table_rows();
    let fate = acc.fate;
    Judgement {
        run: folder.info,
        verdicts,
        phases,
        faults: folder.faults,
        findings: fate.findings,
        finding_counts: fate.counts.into_iter().collect(),
        fate_table,
        fate_requests: fate.fates,
        evidence: src.reports,
        checker_crashes: fate.crashes,
        unfinished,
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
    let sources = evidence::open(dir, &plan);
    let j = judge_with(
        &plan,
        || {
            crate::trace::read(&tp)
                .into_iter()
                .flatten()
                .map_while(Result::ok)
        },
        sources,
    );
    Ok((plan, j))
}
