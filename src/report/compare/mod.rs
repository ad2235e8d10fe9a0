//! `haq compare RUN_A RUN_B`: latency percentiles, throughput, goodput, errors and
//! rejections of two stored runs (or of one phase of each: healthy vs degraded) side
//! by side, the verdicts of each, with an exit code for regression thresholds. Two runs
//! are compared like for like only: what differs between their recorded scenarios is
//! named with both values ([`differences`]); other load or faults refuse the
//! comparison unless told to go on, another target, SLO or criterion is a warning.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::check::{Judgement, Status, VerdictName};
use crate::metrics::{Pcts, pcts};

mod differences;
pub use differences::{Difference, Effect, Of, differences, refused};

/// One side of a comparison.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Side {
    pub label: String,
    pub requests: u64,
    pub ttft_ms: Pcts,
    pub itl_ms: Pcts,
    pub e2e_ms: Pcts,
    pub throughput_rps: f64,
    pub goodput_rps: f64,
    pub tokens_per_s: f64,
    pub error_rate: f64,
    pub rejection_rate: f64,
}

/// When B counts as a regression of A.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Relative: p95 latencies up, throughput or goodput down, by more than this.
    pub max_regression: f64,
    /// Absolute: error or rejection rate up by more than this (0.01 = 1 point).
    pub max_error_increase: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub metric: String,
    pub a: String,
    pub b: String,
    pub change: String,
    /// The threshold, for metrics that have one.
    pub limit: String,
    pub regressed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    pub rows: Vec<Row>,
    /// Each verdict of A and of B, when they are two runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<VerdictRow>,
    /// What makes the two sides not like for like, each with its effect (empty:
    /// comparable).
    pub differences: Vec<Difference>,
    /// A difference refuses the comparison and `--allow-different` was not given: the
    /// figures are printed for the record only (exit 2).
    pub refused: bool,
    pub regressed: bool,
}

/// One verdict in both runs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VerdictRow {
    pub verdict: VerdictName,
    pub a: Status,
    pub b: Status,
    /// B's is worse than A's (a PASS gone FAIL or UNKNOWN, an UNKNOWN gone FAIL).
    pub worse: bool,
}

/// How bad a status is, for the verdict diff (NOT_EVALUATED: nothing judged).
fn rank(s: Status) -> u8 {
    match s {
        Status::NotEvaluated => 0,
        Status::Pass => 1,
        Status::Unknown => 2,
        Status::Fail => 3,
    }
}

/// The verdicts of two runs side by side.
pub fn verdict_diff(a: &Judgement, b: &Judgement) -> Vec<VerdictRow> {
    a.verdicts
        .iter()
        .filter_map(|va| {
            let vb = b.verdicts.iter().find(|v| v.name == va.name)?;
            Some(VerdictRow {
                verdict: va.name,
                a: va.status,
                b: vb.status,
                worse: rank(vb.status) > rank(va.status) && va.status != Status::NotEvaluated,
            })
        })
        .collect()
}

fn rel(a: f64, b: f64) -> Option<f64> {
    (a > 0.0).then(|| (b - a) / a)
}

fn signed_pct(x: Option<f64>) -> String {
    x.map(|x| format!("{:+.1}%", x * 100.0))
        .unwrap_or_else(|| "—".into())
}

/// Compares B against A (`verdicts`: [`verdict_diff`], empty for one run's phases;
/// `differences`: [`differences`]). A verdict worse in B is a regression.
pub fn compare(
    a: Side,
    b: Side,
    t: Thresholds,
    verdicts: Vec<VerdictRow>,
    differences: Vec<Difference>,
) -> Comparison {
    let mut rows = Vec::new();
    latency_rows(&mut rows, &a, &b, t);
    rate_rows(&mut rows, &a, &b, t);
    error_rows(&mut rows, &a, &b, t);
    rows.push(Row {
        metric: "requests".into(),
        a: a.requests.to_string(),
        b: b.requests.to_string(),
        change: String::new(),
        limit: String::new(),
        regressed: false,
    });
    let regressed = rows.iter().any(|r| r.regressed) || verdicts.iter().any(|v| v.worse);
    Comparison {
        a,
        b,
        rows,
        verdicts,
        differences,
        refused: false,
        regressed,
    }
}

/// p50, p95 and p99 of TTFT, ITL and E2E; only p95 is judged (relative rise, when
/// both sides have samples).
fn latency_rows(rows: &mut Vec<Row>, a: &Side, b: &Side, t: Thresholds) {
    let lim = format!("{:.0}%", t.max_regression * 100.0);
    let mut lat = |what: &str, pa: &Pcts, pb: &Pcts| {
        for (q, va, vb, judged) in [
            ("p50", pa.p50, pb.p50, false),
            ("p95", pa.p95, pb.p95, true),
            ("p99", pa.p99, pb.p99, false),
        ] {
            let r = rel(va, vb);
            let bad =
                judged && pa.count > 0 && pb.count > 0 && r.is_some_and(|r| r > t.max_regression);
            rows.push(Row {
                metric: format!("{what} {q} (ms)"),
                a: format!("{va:.1}"),
                b: format!("{vb:.1}"),
                change: signed_pct(r),
                limit: if judged {
                    format!("+{lim}")
                } else {
                    String::new()
                },
                regressed: bad,
            });
        }
    };
    lat("TTFT", &a.ttft_ms, &b.ttft_ms);
    lat("ITL", &a.itl_ms, &b.itl_ms);
    lat("E2E", &a.e2e_ms, &b.e2e_ms);
}

/// Throughput and goodput (judged: relative fall) and output tokens per second.
fn rate_rows(rows: &mut Vec<Row>, a: &Side, b: &Side, t: Thresholds) {
    let lim = format!("{:.0}%", t.max_regression * 100.0);
    for (what, va, vb, judged) in [
        (
            "throughput (req/s)",
            a.throughput_rps,
            b.throughput_rps,
            true,
        ),
        ("goodput (req/s in SLO)", a.goodput_rps, b.goodput_rps, true),
        ("output tokens/s", a.tokens_per_s, b.tokens_per_s, false),
    ] {
        let r = rel(va, vb);
        rows.push(Row {
            metric: what.into(),
            a: format!("{va:.2}"),
            b: format!("{vb:.2}"),
            change: signed_pct(r),
            limit: if judged {
                format!("-{lim}")
            } else {
                String::new()
            },
            regressed: judged && r.is_some_and(|r| r < -t.max_regression),
        });
    }
}

/// The error and rejection rates (judged: absolute rise in points).
fn error_rows(rows: &mut Vec<Row>, a: &Side, b: &Side, t: Thresholds) {
    for (what, va, vb) in [
        ("error rate", a.error_rate, b.error_rate),
        ("rejection rate", a.rejection_rate, b.rejection_rate),
    ] {
        let d = vb - va;
        rows.push(Row {
            metric: what.into(),
            a: format!("{:.2}%", va * 100.0),
            b: format!("{:.2}%", vb * 100.0),
            change: format!("{:+.2} pt", d * 100.0),
            limit: format!("+{:.2} pt", t.max_error_increase * 100.0),
            regressed: d > t.max_error_increase,
        });
    }
}

/// One side from a judged run: the named phase, or the whole run (latency histograms
/// merged losslessly from the run's interval log).
/// One side of a comparison: a whole run (its interval log `hlog`, merged) or one of
/// its phases.
pub fn side(dir: &Path, j: &Judgement, hlog: &[u8], phase: Option<&str>) -> anyhow::Result<Side> {
    let label = match phase {
        Some(p) => format!("{} [{p}]", dir.display()),
        None => dir.display().to_string(),
    };
    if let Some(name) = phase {
        let p = j.phases.iter().find(|p| p.name == name).with_context(|| {
            format!(
                "{}: no phase `{name}` (phases: {})",
                dir.display(),
                j.phases
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        let n = p.requests.max(1) as f64;
        return Ok(Side {
            label,
            requests: p.requests,
            ttft_ms: p.ttft_ms.clone(),
            itl_ms: p.itl_ms.clone(),
            e2e_ms: p.e2e_ms.clone(),
            throughput_rps: p.achieved_rps,
            goodput_rps: p.goodput_rps,
            tokens_per_s: p.output_tokens_per_s,
            error_rate: p.failed as f64 / n,
            rejection_rate: p.rejected as f64 / n,
        });
    }
    let mut merged: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for (_, tag, h) in crate::metrics::hlog::read(hlog).map_err(anyhow::Error::msg)? {
        match merged.get_mut(&tag) {
            Some(acc) => acc.add(&h).map_err(|e| anyhow::anyhow!("{e:?}"))?,
            None => {
                merged.insert(tag, h);
            }
        }
    }
    let get = |tag: &str| {
        merged
            .get(tag)
            .map(pcts)
            .unwrap_or_else(|| pcts(&Histogram::<u64>::new(2).expect("hdr")))
    };
    let secs: f64 = j.phases.iter().map(|p| p.duration_s).sum::<f64>().max(1e-9);
    let sum = |f: &dyn Fn(&crate::metrics::PhaseStats) -> f64| j.phases.iter().map(f).sum::<f64>();
    let requests = j.phases.iter().map(|p| p.requests).sum::<u64>();
    let n = requests.max(1) as f64;
    Ok(Side {
        label,
        requests,
        ttft_ms: get("ttft"),
        itl_ms: get("itl"),
        e2e_ms: get("e2e"),
        throughput_rps: sum(&|p| p.achieved_rps * p.duration_s) / secs,
        goodput_rps: sum(&|p| p.goodput_rps * p.duration_s) / secs,
        tokens_per_s: sum(&|p| p.output_tokens_per_s * p.duration_s) / secs,
        error_rate: sum(&|p| p.failed as f64) / n,
        rejection_rate: sum(&|p| p.rejected as f64) / n,
    })
}

/// How a difference is introduced in the text: refusing ones (shown only with
/// `--allow-different`, or as errors) and the ones that only warn.
pub fn said(e: Effect) -> &'static str {
    match e {
        Effect::Refuse => "not like for like",
        Effect::Warn => "the runs differ",
    }
}

/// The comparison as a terminal table: what differs first, the metrics, the verdicts.
pub fn render(c: &Comparison) -> String {
    let table = || {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
            .set_width(110);
        t
    };
    let mut t = table();
    t.set_header(vec!["metric", "A", "B", "B vs A", "limit", ""]);
    for r in &c.rows {
        t.add_row(vec![
            r.metric.clone(),
            r.a.clone(),
            r.b.clone(),
            r.change.clone(),
            r.limit.clone(),
            if r.regressed {
                "REGRESSED".into()
            } else {
                String::new()
            },
        ]);
    }
    let mut out = format!("A: {}\nB: {}\n", c.a.label, c.b.label);
    for d in &c.differences {
        out.push_str(&format!("warning: {}: {d}\n", said(d.effect)));
    }
    out.push_str(&format!("{t}\n"));
    if !c.verdicts.is_empty() {
        let mut v = table();
        v.set_header(vec!["verdict", "A", "B", ""]);
        for r in &c.verdicts {
            v.add_row(vec![
                r.verdict.to_string(),
                r.a.as_str().to_string(),
                r.b.as_str().to_string(),
                match (r.worse, r.a == r.b) {
                    (true, _) => "WORSE".to_string(),
                    (false, true) => String::new(),
                    (false, false) => "changed".to_string(),
                },
            ]);
        }
        out.push_str(&format!("{v}\n"));
    }
    let worse: Vec<String> = c
        .verdicts
        .iter()
        .filter(|v| v.worse)
        .map(|v| format!("{} {} → {}", v.verdict, v.a.as_str(), v.b.as_str()))
        .collect();
    let result = match (c.regressed, worse.is_empty()) {
        (false, _) => "result: no regression beyond the thresholds".to_string(),
        (true, true) => "result: B regressed against A".to_string(),
        (true, false) => format!("result: B regressed against A ({})", worse.join(", ")),
    };
    out.push_str(&result);
    if refused(&c.differences) {
        out.push_str(" — but the runs are not like for like (see the warnings)");
    } else if !c.differences.is_empty() {
        out.push_str(" — with the differences warned about above");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(p50: f64, p95: f64) -> Pcts {
        Pcts {
            count: 100,
            p50,
            p95,
            p99: p95 * 1.2,
            max: p95 * 2.0,
        }
    }

    fn s(ttft95: f64, goodput: f64, err: f64) -> Side {
        Side {
            label: "x".into(),
            requests: 100,
            ttft_ms: p(50.0, ttft95),
            itl_ms: p(10.0, 20.0),
            e2e_ms: p(500.0, 900.0),
            throughput_rps: 10.0,
            goodput_rps: goodput,
            tokens_per_s: 900.0,
            error_rate: err,
            rejection_rate: 0.0,
        }
    }

    const T: Thresholds = Thresholds {
        max_regression: 0.1,
        max_error_increase: 0.01,
    };

    #[test]
    fn a_verdict_worse_in_b_is_a_regression() {
        use crate::check::Verdict;
        let j = |s: Status| {
            let mut j = crate::check::testkit::standard(&crate::check::testkit::plan(&[]))
                .judge(&crate::check::testkit::plan(&[]));
            j.verdicts = vec![
                Verdict::new(VerdictName::Routing, Status::Pass, "", Vec::new()),
                Verdict::new(VerdictName::Latency, s, "", Vec::new()),
            ];
            j
        };
        let rows = verdict_diff(&j(Status::Pass), &j(Status::Fail));
        assert_eq!(rows.iter().filter(|r| r.worse).count(), 1);
        assert_eq!(rows[1].verdict, VerdictName::Latency);
        let c = compare(
            s(100.0, 10.0, 0.0),
            s(100.0, 10.0, 0.0),
            T,
            rows,
            Vec::new(),
        );
        assert!(c.regressed);
        assert!(render(&c).contains("result: B regressed against A (Latency PASS → FAIL)"));
        // Better is not worse; nothing judged before is not worse either.
        assert!(
            !verdict_diff(&j(Status::Fail), &j(Status::Pass))
                .iter()
                .any(|r| r.worse)
        );
        assert!(
            !verdict_diff(&j(Status::NotEvaluated), &j(Status::Unknown))
                .iter()
                .any(|r| r.worse)
        );
    }

    #[test]
    fn within_the_thresholds_is_no_regression() {
        let c = compare(
            s(100.0, 10.0, 0.0),
            s(109.0, 9.5, 0.005),
            T,
            Vec::new(),
            Vec::new(),
        );
        assert!(!c.regressed, "{:?}", c.rows);
    }

    #[test]
    fn slower_p95_less_goodput_or_more_errors_regress() {
        let c = compare(
            s(100.0, 10.0, 0.0),
            s(130.0, 10.0, 0.0),
            T,
            Vec::new(),
            Vec::new(),
        );
        assert!(c.regressed);
        let r = c.rows.iter().find(|r| r.regressed).expect("row");
        assert_eq!(
            (r.metric.as_str(), r.change.as_str()),
            ("TTFT p95 (ms)", "+30.0%")
        );
        assert!(
            compare(
                s(100.0, 10.0, 0.0),
                s(100.0, 8.0, 0.0),
                T,
                Vec::new(),
                Vec::new()
            )
            .regressed
        );
        assert!(
            compare(
                s(100.0, 10.0, 0.0),
                s(100.0, 10.0, 0.05),
                T,
                Vec::new(),
                Vec::new()
            )
            .regressed
        );
        // Faster is never a regression.
        assert!(
            !compare(
                s(100.0, 10.0, 0.0),
                s(50.0, 12.0, 0.0),
                T,
                Vec::new(),
                Vec::new()
            )
            .regressed
        );
    }
}
