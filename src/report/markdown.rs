//! report.md: the summary, the verdict table, the timeline, per-phase latency, the
//! findings and the HA worksheet (Q14). GitHub-flavoured Markdown, small enough for a
//! CI step summary (`cat report.md >> $GITHUB_STEP_SUMMARY`).

use std::fmt::Write;

use super::worksheet::Section;
use crate::check::{Judgement, Status};
use crate::plan::Plan;

/// Findings listed in full; the rest are counted (report.json has them all).
const FINDINGS_SHOWN: usize = 20;

pub fn mark(s: Status) -> &'static str {
    match s {
        Status::Pass => "✅ PASS",
        Status::Fail => "❌ FAIL",
        Status::Unknown => "❓ UNKNOWN",
        Status::NotEvaluated => "➖ NOT_EVALUATED",
    }
}

/// One table cell: no pipes, no line breaks.
pub fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

fn table(out: &mut String, head: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

fn section(out: &mut String, s: &Section) {
    let _ = writeln!(out, "### {}\n", s.title);
    let head: Vec<&str> = s.columns.iter().map(String::as_str).collect();
    table(out, &head, s.rows.iter().cloned());
}

/// report.md: the summary, then each section in reading order.
pub fn render(plan: &Plan, j: &Judgement, worksheet: &[Section]) -> String {
    let mut out = String::new();
    summary(&mut out, plan, j);
    gates(&mut out, j);
    verdicts(&mut out, j);
    where_to_look(&mut out, plan, j);
    timeline(&mut out, j);
    cache_effects(&mut out, j);
    out.push_str("## Latency per phase\n\n");
    table(&mut out, &super::rows::PHASE_HEAD, super::rows::phases(j));
    findings(&mut out, j);
    out.push_str("## HA worksheet (Q14)\n\n");
    for s in worksheet {
        section(&mut out, s);
    }
    evidence(&mut out, j);
    out
}

/// The title, the description, the summary table (result and tally, run, load,
/// client) and a notice when the run did not complete.
fn summary(out: &mut String, plan: &Plan, j: &Judgement) {
    let sc = &plan.scenario;
    let _ = writeln!(out, "# haq · {} · {}\n", sc.name, j.result());
    if !sc.description.is_empty() {
        let _ = writeln!(out, "> {}\n", sc.description.trim().replace('\n', " "));
    }
    let mut counts = std::collections::BTreeMap::new();
    for v in &j.verdicts {
        *counts.entry(v.status).or_insert(0) += 1;
    }
    let tally: Vec<String> = counts
        .iter()
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect();
    let phases: Vec<String> = plan
        .phases
        .iter()
        .map(|p| format!("{} {:.0}s", p.name, p.duration.as_secs_f64()))
        .collect();
    let c = &j.client;
    table(
        out,
        &["", ""],
        [
            vec![
                "result".into(),
                format!("**{}** ({})", j.result(), tally.join(", ")),
            ],
            vec![
                "run".into(),
                format!("seed {} · started {}", plan.seed, j.run.wall),
            ],
            vec![
                "load".into(),
                format!(
                    "protected {} · phases {}",
                    sc.protected_load,
                    phases.join(" → ")
                ),
            ],
            vec![
                "client".into(),
                format!(
                    "{} · sent late p99 {:.2} ms, max {:.1} ms{}",
                    crate::scenario::words::plural(c.requests, "request"),
                    c.slip_p99_ms,
                    c.slip_max_ms,
                    if j.invalid() {
                        format!(" · **INVALID**: {}", c.reasons().join("; "))
                    } else {
                        String::new()
                    }
                ),
            ],
        ]
        .into_iter()
        .chain(
            c.agents
                .as_ref()
                .map(|a| vec!["agents".into(), a.describe()]),
        ),
    );
    if !j.run.complete || j.run.interrupted {
        let _ = writeln!(
            out,
            "**The run did not complete** ({}): what it did not see is UNKNOWN.\n",
            j.run.reason.as_deref().unwrap_or("no run_end in the trace")
        );
    }
}

/// What the gates say, as a list under the summary (nothing when all is quiet).
fn gates(out: &mut String, j: &Judgement) {
    let lines = super::rows::gate_lines(j);
    if lines.is_empty() {
        return;
    }
    for l in lines {
        let l = l.replace('\n', " ");
        let _ = match l.strip_prefix("FAIL: ") {
            Some(rest) => writeln!(out, "- ❌ **{rest}**"),
            None => writeln!(out, "- ⚠️ {}", l.strip_prefix("warning: ").unwrap_or(&l)),
        };
    }
    out.push('\n');
}

/// The verdict table: name, result, why.
fn verdicts(out: &mut String, j: &Judgement) {
    out.push_str("## Verdicts (Q13)\n\n");
    table(
        out,
        &["Verdict", "Result", "Why"],
        j.verdicts
            .iter()
            .map(|v| vec![v.name.to_string(), mark(v.status).into(), v.summary.clone()]),
    );
}

/// For each verdict that did not pass: its doc, its requests, its files.
fn where_to_look(out: &mut String, plan: &Plan, j: &Judgement) {
    let looks = super::look::looks(plan, j);
    if looks.is_empty() {
        return;
    }
    out.push_str("Where to look:\n\n");
    for l in looks {
        let (path, rest) = l.doc.split_once(' ').unwrap_or((l.doc.as_str(), ""));
        let mut line = format!(
            "- **{}** ({}): see `{path}` in haq's repository{}{rest}",
            l.verdict,
            l.status.as_str(),
            if rest.is_empty() { "" } else { " " }
        );
        if !l.requests.is_empty() {
            let ids: Vec<String> = l.requests.iter().map(|r| format!("`{r}`")).collect();
            line.push_str(&format!(" · requests {}", ids.join(", ")));
        }
        line.push_str(&format!(" · {}", l.files.join(", ")));
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
}

/// The failure timeline (Q11).
fn timeline(out: &mut String, j: &Judgement) {
    out.push_str("## Timeline (Q11)\n\n");
    let entries = super::rows::timeline(j);
    if entries.is_empty() {
        out.push_str("No phase ran.\n\n");
    } else {
        table(out, &super::rows::TIMELINE_HEAD, entries);
    }
}

/// What each fault's reroute did to the engines' caches and queues (Q12 step 14),
/// when their metrics were read.
fn cache_effects(out: &mut String, j: &Judgement) {
    let tables = super::effects::tables(j);
    if tables.is_empty() {
        return;
    }
    out.push_str("## KV and cache effects (Q12 step 14)\n\n");
    for (title, rows) in tables {
        let _ = writeln!(out, "{title}\n");
        table(out, &super::effects::HEAD, rows);
    }
}

/// The first [`FINDINGS_SHOWN`] findings, then the full count of each kind when some
/// were left out.
fn findings(out: &mut String, j: &Judgement) {
    out.push_str("## Findings\n\n");
    if j.findings.is_empty() {
        out.push_str("None: no request showed a duplicate, stitched, truncated or otherwise wrong answer.\n\n");
        return;
    }
    table(
        out,
        &["kind", "request", "detail"],
        j.findings.iter().take(FINDINGS_SHOWN).map(|f| {
            vec![
                f.kind.as_str().into(),
                format!("`{}`", f.request),
                f.detail.clone(),
            ]
        }),
    );
    let total: u64 = j.finding_counts.iter().map(|(_, n)| n).sum();
    if total as usize > FINDINGS_SHOWN.min(j.findings.len()) {
        let _ = writeln!(
            out,
            "… {} findings in all ({}); report.json keeps them.\n",
            total,
            j.finding_counts
                .iter()
                .map(|(k, n)| format!("{} ×{n}", k.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// The evidence lines of each verdict, folded in a `<details>` block.
fn evidence(out: &mut String, j: &Judgement) {
    out.push_str("<details><summary>Evidence behind each verdict</summary>\n\n");
    for v in &j.verdicts {
        let _ = writeln!(out, "**{}** — {}\n", v.name, mark(v.status));
        if v.evidence.is_empty() {
            out.push_str("- (none)\n");
        }
        for e in &v.evidence {
            let _ = writeln!(out, "- {}", e.replace('\n', " "));
        }
        out.push('\n');
    }
    out.push_str("</details>\n");
}
