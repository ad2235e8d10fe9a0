//! Renderers, each a pure function of the plan and the judgement, so `haq report`
//! re-renders a stored run exactly: the terminal summary, report.json (schema in
//! `schemas/report.schema.json`), report.md, junit.xml, report.html and requests.csv.

pub mod capacity;
pub mod compare;
mod effects;
mod html;
mod junit;
pub mod look;
mod markdown;
mod requests;
mod rows;
mod svg;
mod terminal;
pub mod worksheet;

pub use capacity::capacity_md;
pub use terminal::terminal;

use std::path::Path;

use anyhow::Context;

use serde::Serialize;

use crate::check::{
    Judgement, Verdict,
    fate::{FateRow, Finding},
    history::FaultRec,
    latency::PhaseStats,
};
use crate::plan::Plan;
use crate::scenario::ReportFormat;
use crate::trace::files::HLOG_FILE;

pub const REPORT_JSON: &str = "report.json";
pub const REPORT_MD: &str = "report.md";
pub const JUNIT_XML: &str = "junit.xml";
pub const REPORT_HTML: &str = "report.html";
pub const REQUESTS_CSV: &str = "requests.csv";

#[derive(Debug, Clone, Serialize)]
pub struct Report<'a> {
    pub haq_version: &'static str,
    pub scenario: &'a str,
    pub description: &'a str,
    pub seed: u64,
    pub started: &'a str,
    /// Trace time (µs on the run's clock) at which the first phase started: subtract
    /// it from any trace time for the time since the start of load.
    pub load_start_us: Option<u64>,
    /// The run's one result: what report.md, junit.xml, the terminal and the exit
    /// code say.
    pub result: crate::check::RunResult,
    pub complete: bool,
    pub interrupted: bool,
    pub verdicts: &'a [Verdict],
    pub phases: &'a [PhaseStats],
    pub faults: &'a [FaultRec],
    pub findings: &'a [Finding],
    pub request_fate: &'a [FateRow],
    /// Each request caught by a fault: stage, declared and observed fate, attempts,
    /// workers, delivered deltas (M1).
    pub request_fates: &'a [crate::check::fate::RequestFate],
    /// Checkers that panicked (their verdict is UNKNOWN).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub checker_crashes: &'a [crate::check::fate::Crash],
    pub unfinished_requests: usize,
    /// The failure timeline (Q11).
    pub timeline: &'a crate::check::timeline::Timeline,
    /// Protected traffic of the degraded interval (Capacity).
    pub degraded: Option<&'a crate::check::capacity::Window>,
    /// False when haq's own lateness could have changed a verdict: the run is INVALID
    /// (exit code 2) and its measurements are not evidence.
    pub valid: bool,
    /// haq's own sends per phase, with the breaches that make the run INVALID.
    pub client: &'a crate::check::validity::ClientHealth,
    /// Per second of the run.
    pub seconds: &'a [crate::metrics::SecondStats],
    /// The HA worksheet (Q14).
    pub worksheet: Vec<worksheet::Section>,
    /// The capacity search (Q4), when the scenario has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<&'a crate::check::capacity::adaptive::Search>,
    /// Per fault: the engines' KV and cache metrics before it and after its reroute,
    /// next to the TTFT (Q12 step 14), when they were read.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub cache_effects: &'a [crate::check::cache_effects::CacheEffects],
    /// Every finding kind with its full count (`findings` keeps a sample of each).
    pub finding_counts: Vec<FindingCount>,
    /// Which evidence sources the judgement read, and how they stood.
    pub evidence_sources: &'a [crate::check::evidence::SourceReport],
    /// `criteria.require` and what it found unmet; warnings about verdicts the
    /// scenario exercises that were not judged.
    pub gates: &'a crate::check::gates::Gates,
    /// Each phase's offered load against the protected load (Q12).
    pub protected_load: &'a crate::check::capacity::ProtectedLoad,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingCount {
    pub kind: &'static str,
    pub count: u64,
}

pub fn build<'a>(plan: &'a Plan, j: &'a Judgement) -> Report<'a> {
    Report {
        haq_version: env!("CARGO_PKG_VERSION"),
        scenario: &plan.scenario.name,
        description: &plan.scenario.description,
        seed: plan.seed,
        started: &j.run.wall,
        load_start_us: j.run.load_start,
        result: j.result(),
        complete: j.run.complete,
        interrupted: j.run.interrupted,
        verdicts: &j.verdicts,
        phases: &j.phases,
        faults: &j.faults,
        findings: &j.findings,
        request_fate: &j.fate_table,
        request_fates: &j.fate_requests,
        checker_crashes: &j.checker_crashes,
        unfinished_requests: j.unfinished,
        timeline: &j.timeline,
        degraded: j.degraded.as_ref(),
        valid: !j.invalid(),
        client: &j.client,
        seconds: &j.seconds,
        worksheet: worksheet::build(plan, j),
        capacity: j.capacity.as_ref(),
        cache_effects: &j.cache_effects,
        finding_counts: j
            .finding_counts
            .iter()
            .map(|(k, n)| FindingCount {
                kind: k.as_str(),
                count: *n,
            })
            .collect(),
        evidence_sources: &j.evidence,
        gates: &j.gates,
        protected_load: &j.protected_load,
    }
}

pub fn json(plan: &Plan, j: &Judgement) -> serde_json::Result<String> {
    Ok(serde_json::to_string_pretty(&build(plan, j))? + "\n")
}

pub fn markdown(plan: &Plan, j: &Judgement) -> String {
    markdown::render(plan, j, &worksheet::build(plan, j))
}

pub fn html(plan: &Plan, j: &Judgement) -> String {
    html::render(plan, j, &worksheet::build(plan, j))
}

pub fn junit(plan: &Plan, j: &Judgement) -> String {
    junit::render(plan, j)
}

pub fn requests_csv(j: &Judgement) -> Result<String, csv::Error> {
    requests::render(j)
}

/// Judges a recorded run from its directory ([`crate::check::judge_dir_with`]) and
/// writes its interval log (`latency.hlog`) and the outputs the scenario's
/// `report.formats` asks for into it.
pub fn judge_and_write(dir: &Path) -> anyhow::Result<(Plan, Judgement)> {
    let (plan, j) = judge_writing_hlog(dir)?;
    write_all(dir, &plan, &j).context("writing the reports")?;
    Ok((plan, j))
}

/// Judges a run directory and (re)writes its interval log; nothing is left written
/// when the judgement fails (an unreadable trace line).
pub fn judge_writing_hlog(dir: &Path) -> anyhow::Result<(Plan, Judgement)> {
    let hp = dir.join(HLOG_FILE);
    let mut hlog = Vec::new();
    let judged = crate::check::judge_dir_with(dir, Some(&mut hlog))?;
    std::fs::write(&hp, hlog).with_context(|| format!("writing {}", hp.display()))?;
    Ok(judged)
}

/// Writes the file outputs the scenario's `report.formats` asks for into `dir`;
/// returns the names written.
pub fn write_all(dir: &Path, plan: &Plan, j: &Judgement) -> std::io::Result<Vec<&'static str>> {
    write(dir, plan, j, &plan.scenario.report.formats)
}

/// Every file output, whatever the scenario asked for (`haq report`).
pub const EVERY: [ReportFormat; 5] = [
    ReportFormat::Json,
    ReportFormat::Markdown,
    ReportFormat::Junit,
    ReportFormat::Html,
    ReportFormat::Csv,
];

/// Writes the outputs in `formats` into `dir`; returns the names written.
pub fn write(
    dir: &Path,
    plan: &Plan,
    j: &Judgement,
    formats: &[ReportFormat],
) -> std::io::Result<Vec<&'static str>> {
    let mut written = Vec::new();
    for f in formats {
        let (name, text) = match f {
            ReportFormat::Terminal => continue,
            ReportFormat::Json => (REPORT_JSON, json(plan, j).map_err(std::io::Error::other)?),
            ReportFormat::Markdown => (REPORT_MD, markdown(plan, j)),
            ReportFormat::Junit => (JUNIT_XML, junit(plan, j)),
            ReportFormat::Html => (REPORT_HTML, html(plan, j)),
            ReportFormat::Csv => (
                REQUESTS_CSV,
                requests_csv(j).map_err(std::io::Error::other)?,
            ),
        };
        std::fs::write(dir.join(name), text)?;
        written.push(name);
    }
    Ok(written)
}

/// As [`write_all`], for report.json alone.
pub fn write_json(dir: &Path, plan: &Plan, j: &Judgement) -> std::io::Result<()> {
    let text = json(plan, j).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(REPORT_JSON), text)
}
