//! The terminal summary: per-phase latency, faults, the failure timeline, the top
//! findings and the verdict table.

use std::path::Path;

use comfy_table::{Cell, Color, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use crate::check::{Judgement, Status};
use crate::plan::Plan;

fn status_cell(s: Status) -> Cell {
    let c = Cell::new(s.as_str());
    match s {
        Status::Pass => c.fg(Color::Green),
        Status::Fail => c.fg(Color::Red),
        Status::Unknown => c.fg(Color::Yellow),
        Status::NotEvaluated => c.fg(Color::DarkGrey),
    }
}

fn table() -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(110);
    t
}

/// The terminal summary: verdicts, per-phase latency, faults, top findings.
pub fn terminal(plan: &Plan, j: &Judgement, run_dir: &Path) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "haq · scenario {} · seed {} · {}\n",
        plan.scenario.name, plan.seed, j.run.wall
    ));
    out.push_str(&phase_table(j).to_string());
    out.push('\n');
    faults(&mut out, j);
    timeline(&mut out, j);
    findings(&mut out, j);
    out.push_str(&verdict_table(j).to_string());
    out.push('\n');
    for g in super::rows::gate_lines(j) {
        out.push_str(&g);
        out.push('\n');
    }
    for l in super::look::looks(plan, j) {
        out.push_str(&format!("look: {}\n", l.describe()));
    }
    client(&mut out, j);
    out.push_str(&format!("result: {} · {}\n", j.result(), run_dir.display()));
    out
}

/// One row per verdict: name, coloured result, why.
fn verdict_table(j: &Judgement) -> Table {
    let mut v = table();
    v.set_header(vec!["Verdict", "Result", "Why"]);
    for x in &j.verdicts {
        v.add_row(vec![
            Cell::new(x.name),
            status_cell(x.status),
            Cell::new(&x.summary),
        ]);
    }
    v
}

/// One row per phase: request counts and the p50/p95 latencies.
fn phase_table(j: &Judgement) -> Table {
    let rows = super::rows::phases(j);
    let mut p = table();
    p.set_header(vec![
        "Phase",
        "Req",
        "OK",
        "Fail",
        "Rej",
        "Offered/s (planned)",
        "TTFT p50/p95 ms",
        "ITL p50/p95 ms",
        "E2E p50/p95 ms",
    ]);
    for (s, r) in j.phases.iter().zip(&rows) {
        p.add_row(vec![
            s.name.clone(),
            s.requests.to_string(),
            s.completed.to_string(),
            s.failed.to_string(),
            s.rejected.to_string(),
            r[6].clone(),
            format!("{:.0} / {:.0}", s.ttft_ms.p50, s.ttft_ms.p95),
            format!("{:.1} / {:.1}", s.itl_ms.p50, s.itl_ms.p95),
            format!("{:.0} / {:.0}", s.e2e_ms.p50, s.e2e_ms.p95),
        ]);
    }
    p
}

/// One line per recorded fault: when, what, on which replica, verified.
fn faults(out: &mut String, j: &Judgement) {
    for f in &j.faults {
        out.push_str(&format!(
            "fault {} at +{:.1}s: {} {} (pid {}), verified: {} — {}\n",
            f.name,
            j.run
                .load_start
                .map(|l| f.t.saturating_sub(l) as f64 / 1e6)
                .unwrap_or(0.0),
            f.action,
            f.replica_label(),
            f.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            f.verified,
            f.detail
        ));
    }
}

/// The timeline entries relative to a fault (Q11).
fn timeline(out: &mut String, j: &Judgement) {
    let tl: Vec<_> = j
        .timeline
        .entries
        .iter()
        .filter(|e| e.after_fault_ms.is_some())
        .collect();
    if tl.is_empty() {
        return;
    }
    out.push_str("timeline (Q11):\n");
    for e in tl {
        out.push_str(&format!(
            "  +{:>8.3}s {:>10}  {} — {}: {}\n",
            e.at_s,
            e.after_fault_ms
                .map(|m| format!("(+{m:.0} ms)"))
                .unwrap_or_default(),
            e.event,
            e.source,
            e.detail
        ));
    }
}

/// The first five findings and how many more report.json has.
fn findings(out: &mut String, j: &Judgement) {
    for f in j.findings.iter().take(5) {
        out.push_str(&format!(
            "finding {} {}: {}\n",
            f.kind.as_str(),
            f.request,
            f.detail
        ));
    }
    if j.findings.len() > 5 {
        out.push_str(&format!(
            "… {} more findings in report.json\n",
            j.findings.len() - 5
        ));
    }
}

/// haq's own sends, and what made the run INVALID when it is: the rule, the phase,
/// the measured effect.
fn client(out: &mut String, j: &Judgement) {
    let c = &j.client;
    out.push_str(&format!(
        "client: sends late p50 {:.2} ms · p99 {:.2} ms · max {:.1} ms over {}\n",
        c.slip_p50_ms,
        c.slip_p99_ms,
        c.slip_max_ms,
        crate::scenario::words::plural(c.requests, "request")
    ));
    if let Some(a) = &c.agents {
        out.push_str(&format!("client: {}\n", a.describe()));
    }
    if j.invalid() {
        for r in c.reasons() {
            out.push_str(&format!("INVALID {r}\n"));
        }
        out.push_str(&format!(
            "INVALID: haq itself (its lateness, or its host out of resources) could have changed a verdict — the verdicts above (would be {}) are not evidence\n",
            j.overall().as_str()
        ));
    }
}
