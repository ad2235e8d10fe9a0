//! capacity.md: the adaptive capacity search (`haq capacity`) in words — the verdict,
//! the Q5 worksheet (C_healthy, C_degraded with their brackets, L_protected, the
//! (N−k)/N hypothesis shown beside the measurement, headroom against failover
//! reserve) and every step with its intervals. A pure function of the search's
//! result.

use std::fmt::Write as _;

use crate::check::capacity::adaptive::{CapacityReport, TopologyResult};
use crate::check::capacity::steps::P95;

fn rate(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{v:.2}/s"))
}

fn steps(out: &mut String, t: &TopologyResult) {
    let _ = writeln!(
        out,
        "\n### {} topology: {} (stopped: {:?})\n",
        t.topology.as_str(),
        match t.capacity {
            Some(_) => format!(
                "C = {} in [{}, {})",
                rate(t.capacity),
                rate(t.bracket.0),
                rate(t.bracket.1)
            ),
            None => "no capacity measured".into(),
        },
        t.stop
    );
    out.push_str("| # | rate | outcome | requests | achieved | in SLO [95% CI] | p95 TTFT [CI] | p95 E2E [CI] | confident | run |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for (i, s) in t.steps.iter().enumerate() {
        let j = &s.judged;
        let ci = |p: &Option<P95>| match p {
            Some(x) => format!("{} (SLO {:.0})", P95::describe(p), x.limit_ms),
            None => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {:.2}/s | {} | {} | {:.2}/s | {} | {} | {} | {} | `{}` |",
            i + 1,
            j.step.rate,
            j.outcome_text(),
            j.step.requests,
            j.step.achieved_rps,
            j.attainment_text(),
            ci(&j.ttft_p95),
            ci(&j.e2e_p95),
            if j.confident { "yes" } else { "marginal" },
            s.dir
        );
    }
}

/// The search as markdown.
pub fn capacity_md(r: &CapacityReport) -> String {
    let mut out = format!(
        "# Capacity search: {}\n\n**{}** — {}\n\n## Worksheet (Q4, Q5)\n\n",
        r.scenario,
        r.status.as_str(),
        r.summary
    );
    let c = |t: &Option<TopologyResult>| t.as_ref().map_or("not searched".into(), |t| t.describe());
    let rows = [
        ("C_healthy (measured)", c(&r.healthy)),
        ("C_degraded (measured)", c(&r.degraded)),
        ("L_protected", format!("{:.2}/s", r.protected_load)),
        (
            "(N−k)/N × C_healthy (hypothesis, not used)",
            format!(
                "{} (N = {}, k = {})",
                rate(r.hypothesis),
                r.replicas,
                r.lost
            ),
        ),
        (
            "normal peak (scenario phases)",
            format!("{:.2}/s", r.normal_peak),
        ),
        ("headroom = C_healthy − normal peak", rate(r.headroom)),
        (
            "failover reserve = C_degraded − L_protected",
            rate(r.failover_reserve),
        ),
    ];
    out.push_str("| | |\n|---|---|\n");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    if let Some(m) = r.model_per_replica {
        let _ = writeln!(
            out,
            "| sim engine model (computed) | {:.2}/s per replica: {:.2}/s healthy, {:.2}/s with {} lost |",
            m,
            m * r.replicas as f64,
            m * (r.replicas.saturating_sub(r.lost)) as f64,
            r.lost
        );
    }
    let _ = writeln!(
        out,
        "\nHeadroom is not failover reserve (Q5): headroom is what the healthy cluster has above its normal peak; the reserve is what the degraded one has above the load it must protect.\n\n## Steps\n\nEach step: {:.0} s warm-up (discarded), then {:.0} s judged at a constant rate; precision asked ±{:.0}%, at most {} steps per topology. Intervals are 95%: Wilson on the share of requests inside the SLO, order statistics for the p95s (— : too few samples to bound).",
        r.warmup_s,
        r.step_s,
        r.precision * 100.0,
        r.max_steps
    );
    for t in [&r.healthy, &r.degraded].into_iter().flatten() {
        steps(&mut out, t);
    }
    out
}
