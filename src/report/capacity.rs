//! The capacity search in words (issue 19; Q4, Q5, Q10): capacity.md of `haq
//! capacity` — the verdict, the Q5 worksheet (C_healthy, C_degraded with their
//! brackets, L_protected, the (N−k)/N hypothesis shown beside the measurement,
//! headroom against failover reserve), every step with its intervals and the overload
//! steps — and the same step rows for the worksheet of a run's report. Pure functions
//! of the search's result.

use std::fmt::Write as _;

use crate::check::capacity::adaptive::{Search, TopologyResult};
use crate::check::capacity::steps::P95;

fn rate(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{v:.2}/s"))
}

/// The columns of [`step_rows`].
pub const STEP_HEAD: [&str; 11] = [
    "topology",
    "#",
    "rate",
    "outcome",
    "requests",
    "achieved",
    "in SLO [95% CI]",
    "p95 TTFT [CI] ms",
    "p95 E2E [CI] ms",
    "confident",
    "run",
];

/// `C = 27.33/s in [27.33, 27.93) (stopped: precise, ±2.2%)`.
pub fn bracket(t: &TopologyResult) -> String {
    let stop = serde_json::to_value(t.stop)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let width = t
        .precision
        .map(|p| format!(", {:.1}% wide", p * 100.0))
        .unwrap_or_default();
    match t.capacity {
        Some(_) => format!(
            "C = {} in [{}, {}) (stopped: {stop}{width})",
            rate(t.capacity),
            rate(t.bracket.0),
            rate(t.bracket.1)
        ),
        None => format!("{} (stopped: {stop})", t.describe()),
    }
}

/// Every step of both topologies, then the overload steps, as table rows (raw text).
pub fn step_rows(r: &Search) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for t in [&r.healthy, &r.degraded].into_iter().flatten() {
        for (i, s) in t.steps.iter().enumerate() {
            let j = &s.judged;
            let ci = |p: &Option<P95>| match p {
                Some(x) => format!("{} (SLO {:.0})", P95::describe(p), x.limit_ms),
                None => "—".into(),
            };
            rows.push(vec![
                t.topology.as_str().to_string(),
                (i + 1).to_string(),
                format!("{:.2}/s", j.step.rate),
                j.outcome_text(),
                j.step.requests.to_string(),
                format!("{:.2}/s", j.step.achieved_rps),
                j.attainment_text(),
                ci(&j.ttft_p95),
                ci(&j.e2e_p95),
                if j.confident { "yes" } else { "marginal" }.into(),
                s.dir.clone(),
            ]);
        }
    }
    for (i, o) in r.overload.iter().enumerate() {
        let after = o.after.as_ref();
        rows.push(vec![
            "overload".into(),
            (i + 1).to_string(),
            match o.multiple {
                Some(m) => format!(
                    "{:.2}/s ({m}× C_degraded), then {:.2}/s",
                    o.rate, o.after_rate
                ),
                None => format!("{:.2}/s, then {:.2}/s", o.rate, o.after_rate),
            },
            format!("Overload {}: {}", o.status.as_str(), o.summary),
            after.map_or("—".into(), |a| a.requests.to_string()),
            after.map_or("—".into(), |a| format!("{:.2}/s", a.achieved_rps)),
            "—".into(),
            after.map_or("—".into(), |a| format!("{:.0} after", a.ttft_p95_ms)),
            after.map_or("—".into(), |a| format!("{:.0} after", a.e2e_p95_ms)),
            "—".into(),
            o.dir.clone(),
        ]);
    }
    rows
}

/// The Q4/Q5 rows: (item, value).
pub fn worksheet_rows(r: &Search) -> Vec<(String, String)> {
    let c = |t: &Option<TopologyResult>| t.as_ref().map_or("not searched".into(), bracket);
    let mut rows = vec![
        ("C_healthy (measured)".to_string(), c(&r.healthy)),
        ("C_degraded (measured)".into(), c(&r.degraded)),
        ("L_protected".into(), format!("{:.2}/s", r.protected_load)),
        (
            "(N−k)/N × C_healthy (hypothesis, not used)".into(),
            format!(
                "{} (N = {}, k = {})",
                rate(r.hypothesis),
                r.replicas,
                r.lost
            ),
        ),
        (
            "normal peak (scenario phases)".into(),
            format!("{:.2}/s", r.normal_peak),
        ),
        (
            "headroom = C_healthy − normal peak".into(),
            rate(r.headroom),
        ),
        (
            "failover reserve = C_degraded − L_protected".into(),
            rate(r.failover_reserve),
        ),
        (
            "overload past C_degraded (Q10)".into(),
            format!("{}: {}", r.overload_status.as_str(), r.overload_summary),
        ),
    ];
    if let Some(m) = r.model_per_replica {
        rows.push((
            "sim engine model (computed)".into(),
            format!(
                "{:.2}/s per replica: {:.2}/s healthy, {:.2}/s with {} lost",
                m,
                m * r.replicas as f64,
                m * (r.replicas.saturating_sub(r.lost)) as f64,
                r.lost
            ),
        ));
    }
    rows
}

/// The search as markdown.
pub fn capacity_md(r: &Search) -> String {
    let mut out = format!(
        "# Capacity search: {}\n\n**{}** — {}\n\n## Worksheet (Q4, Q5)\n\n",
        r.scenario,
        r.status.as_str(),
        r.summary
    );
    out.push_str("| | |\n|---|---|\n");
    for (k, v) in worksheet_rows(r) {
        let _ = writeln!(out, "| {k} | {} |", v.replace('|', "\\|"));
    }
    let _ = writeln!(
        out,
        "\nHeadroom is not failover reserve (Q5): headroom is what the healthy cluster has above its normal peak; the reserve is what the degraded one has above the load it must protect.\n\n## Steps\n\nEach step: {:.0} s warm-up (discarded), then {:.0} s judged at a constant rate; precision asked ±{:.0}%, at most {} steps per topology. Intervals are 95%: Wilson on the share of requests inside the SLO, order statistics for the p95s (— : too few samples to bound). An overload step offers a multiple of C_degraded between two stretches at the protected load, judged by the Overload rules.\n",
        r.warmup_s,
        r.step_s,
        r.precision * 100.0,
        r.max_steps
    );
    let _ = writeln!(out, "| {} |", STEP_HEAD.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(STEP_HEAD.len()));
    for row in step_rows(r) {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}
