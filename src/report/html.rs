//! report.html: one self-contained file (inline CSS and SVG, no external resource) for
//! people who would rather look than read: the verdicts, plots over time — TTFT and
//! ITL p50/p95 per second, throughput, errors and rejections, requests in flight —
//! with the phases shaded and vertical markers at the fault, its detection, the
//! traffic removal and the recovery; then the timeline, per-phase latency, findings
//! and the HA worksheet.

use std::fmt::Write;

use super::svg::{self, Band, Line, Marker, Plot, esc};
use super::worksheet::Section;
use crate::check::Judgement;
use crate::metrics::SecondStats;
use crate::plan::Plan;

const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:980px;color:#1d232a;padding:0 12px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde3e8;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;width:100%;margin:6px 0 12px;font-size:13px}th,td{border:1px solid #dde3e8;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f4f6f8}
.s{font-weight:600;white-space:nowrap}.PASS{color:#17803d}.FAIL{color:#c22}.UNKNOWN{color:#b26b00}.NOT_EVALUATED{color:#6b7580}.INVALID{color:#c22}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:700;color:#fff}.badge.PASS{background:#17803d}.badge.FAIL,.badge.INVALID{background:#c22}.badge.UNKNOWN{background:#b26b00}.badge.NOT_EVALUATED{background:#6b7580}
.muted{color:#6b7580}details{margin:2px 0}summary{cursor:pointer}
svg.plot{display:block;margin:8px 0 16px;max-width:100%;height:auto}svg .title{font-weight:600;font-size:13px}svg .tick,svg .legend,svg .band-label{font-size:10px;fill:#55606b}
svg .grid{stroke:#e3e7eb}svg .limit{stroke:#c22;stroke-dasharray:6 4}svg .limit-label{font-size:10px;fill:#c22}svg .marker-label{font-size:10px}
"#;

/// Checks in the browser that every plot rendered (non-empty geometry) and counts the
/// markers; the result is written on `<body>` (the headless-browser test reads it).
const CHECK: &str = r#"
(function(){var b=document.body,p=document.querySelectorAll('svg.plot'),ok=0,m=0,s=0;
p.forEach(function(g){var r=g.getBoundingClientRect();if(r.width>0&&r.height>0)ok++;
g.querySelectorAll('path.series').forEach(function(x){var q=x.getBBox();if(q.width>0)s++;});});
m=document.querySelectorAll('svg.plot g.marker').length;
b.setAttribute('data-plots',p.length);b.setAttribute('data-plots-rendered',ok);
b.setAttribute('data-series-drawn',s);b.setAttribute('data-markers',m);})();
"#;

fn status(s: &str) -> String {
    format!("<span class=\"s {s}\">{s}</span>")
}

fn table(o: &mut String, head: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    o.push_str("<table><tr>");
    for h in head {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr>");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{c}</td>");
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
}

fn series(
    seconds: &[SecondStats],
    f: impl Fn(&SecondStats) -> Option<f64>,
) -> Vec<(f64, Option<f64>)> {
    svg::thin(seconds.iter().map(|s| (s.t as f64, f(s))).collect())
}

fn markers(j: &Judgement) -> Vec<Marker> {
    let base = j.facts.load_start;
    let at = |t: u64| (t as f64 - base as f64) / 1e6;
    let mut out = Vec::new();
    for f in &j.timeline.faults {
        out.push(Marker {
            at_s: at(f.injected),
            kind: "fault",
            label: f.fault.clone(),
            color: "#c22",
        });
        if let Some(d) = &f.detected {
            out.push(Marker {
                at_s: at(d.t),
                kind: "detection",
                label: format!("{} detected", f.replica),
                color: "#d97706",
            });
        }
        if let Some(r) = &f.removal {
            out.push(Marker {
                at_s: at(r.t),
                kind: "removal",
                label: format!("{} removed", f.replica),
                color: "#7c3aed",
            });
        }
        if let Some(s) = &f.replacement.serving {
            out.push(Marker {
                at_s: at(s.t),
                kind: "recovery",
                label: format!("{} serving again", f.replica),
                color: "#0f766e",
            });
        }
    }
    if let Some(m) = &j.timeline.full_recovery {
        out.push(Marker {
            at_s: at(m.t),
            kind: "recovery",
            label: "full recovery".into(),
            color: "#17803d",
        });
    }
    out
}

/// p50 and p95 in ms against the SLO's p95.
fn pct_plot<'a>(
    id: &'a str,
    title: &'a str,
    p50: Vec<(f64, Option<f64>)>,
    p95: Vec<(f64, Option<f64>)>,
    slo: crate::wire::units::Dur,
) -> Plot<'a> {
    Plot {
        id,
        title,
        unit: "ms",
        lines: vec![
            Line {
                label: "p50",
                color: "#2563eb",
                points: p50,
            },
            Line {
                label: "p95",
                color: "#c2410c",
                points: p95,
            },
        ],
        limit: Some((slo.as_secs_f64() * 1000.0, format!("SLO p95 {slo}"))),
    }
}

/// Every plot over time as inline SVG, on one time axis, with the phase bands and the
/// fault markers.
fn plots(plan: &Plan, j: &Judgement) -> String {
    let sec = &j.seconds;
    let bands = phase_bands(j);
    let x_max = bands
        .iter()
        .map(|b| b.to_s)
        .fold(sec.len() as f64, f64::max);
    let marks = markers(j);
    let ps = latency_plots(plan, sec)
        .into_iter()
        .chain(rate_plots(plan, sec));
    ps.map(|p| svg::render(&p, x_max, &bands, &marks)).collect()
}

/// The phases as bands, in seconds since the start of load.
fn phase_bands(j: &Judgement) -> Vec<Band> {
    let base = j.facts.load_start;
    j.facts
        .phases
        .iter()
        .map(|p| Band {
            from_s: (p.start as f64 - base as f64) / 1e6,
            to_s: (p.end as f64 - base as f64) / 1e6,
            label: p.name.clone(),
        })
        .collect()
}

/// TTFT and ITL p50/p95 per second of dispatch, against their SLO.
fn latency_plots<'a>(plan: &Plan, sec: &[SecondStats]) -> [Plot<'a>; 2] {
    let slo = &plan.scenario.slo;
    [
        pct_plot(
            "ttft",
            "TTFT by second of dispatch",
            series(sec, |s| s.ttft_p50),
            series(sec, |s| s.ttft_p95),
            slo.ttft_p95,
        ),
        pct_plot(
            "itl",
            "ITL by second of dispatch",
            series(sec, |s| s.itl_p50),
            series(sec, |s| s.itl_p95),
            slo.itl_p95,
        ),
    ]
}

/// Counts per second: requests (against the protected load), output tokens, errors
/// and rejections, requests in flight.
fn rate_plots<'a>(plan: &Plan, sec: &[SecondStats]) -> [Plot<'a>; 4] {
    let n = |v: u64| Some(v as f64);
    [
        Plot {
            id: "throughput",
            title: "Requests per second",
            unit: "req/s",
            lines: vec![
                Line {
                    label: "offered",
                    color: "#6b7580",
                    points: series(sec, |s| n(s.offered)),
                },
                Line {
                    label: "completed",
                    color: "#2563eb",
                    points: series(sec, |s| n(s.completed)),
                },
                Line {
                    label: "in SLO",
                    color: "#17803d",
                    points: series(sec, |s| n(s.slo_met)),
                },
            ],
            limit: Some((
                plan.scenario.protected_load.0,
                format!("protected {}", plan.scenario.protected_load),
            )),
        },
        Plot {
            id: "tokens",
            title: "Output tokens per second",
            unit: "tokens/s",
            lines: vec![Line {
                label: "delivered",
                color: "#2563eb",
                points: series(sec, |s| n(s.output_deltas)),
            }],
            limit: None,
        },
        Plot {
            id: "errors",
            title: "Errors and rejections per second",
            unit: "req/s",
            lines: vec![
                Line {
                    label: "failed",
                    color: "#c22",
                    points: series(sec, |s| n(s.failed)),
                },
                Line {
                    label: "rejected",
                    color: "#d97706",
                    points: series(sec, |s| n(s.rejected)),
                },
            ],
            limit: None,
        },
        Plot {
            id: "inflight",
            title: "Requests in flight (end of each second)",
            unit: "requests",
            lines: vec![Line {
                label: "in flight",
                color: "#7c3aed",
                points: series(sec, |s| n(s.in_flight)),
            }],
            limit: None,
        },
    ]
}

fn section(o: &mut String, s: &Section) {
    let _ = write!(o, "<h3>{}</h3>", esc(&s.title));
    let head: Vec<&str> = s.columns.iter().map(String::as_str).collect();
    table(
        o,
        &head,
        s.rows
            .iter()
            .map(|r| r.iter().map(|c| esc(c)).collect::<Vec<_>>()),
    );
}

/// report.html: the head, the summary, then each section in reading order.
pub fn render(plan: &Plan, j: &Judgement, worksheet: &[Section]) -> String {
    let mut o = String::new();
    summary(&mut o, plan, j);
    verdicts(&mut o, j);
    o.push_str("<h2>Over time</h2><p class=\"muted\">Shaded: phases. Dashed verticals: <span class=\"FAIL\">fault</span>, <span class=\"UNKNOWN\">detection</span>, <span style=\"color:#7c3aed\">traffic removed</span>, <span class=\"PASS\">recovery</span>. Dashed red horizontal: the objective.</p>");
    o.push_str(&plots(plan, j));
    timeline_and_phases(&mut o, j);
    findings(&mut o, j);
    o.push_str("<h2>HA worksheet (Q14)</h2>");
    for s in worksheet {
        section(&mut o, s);
    }
    let _ = writeln!(
        o,
        "<p class=\"muted\">haq {} · result {}</p><script>{CHECK}</script></body></html>",
        env!("CARGO_PKG_VERSION"),
        status(j.result().as_str())
    );
    o
}

/// The document head (title, CSS), the heading with the result badge, the run line,
/// the description and, for an INVALID run, why.
fn summary(o: &mut String, plan: &Plan, j: &Judgement) {
    let sc = &plan.scenario;
    let label = j.result().as_str();
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>haq · {} · {}</title><style>{CSS}</style></head><body>",
        esc(&sc.name),
        label
    );
    let _ = write!(
        o,
        "<h1>haq · {} <span class=\"badge {label}\">{label}</span></h1><p class=\"muted\">seed {} · started {} · protected load {} · {}</p>",
        esc(&sc.name),
        plan.seed,
        esc(&j.run.wall),
        esc(&sc.protected_load.to_string()),
        esc(&plan
            .phases
            .iter()
            .map(|p| format!("{} {:.0}s", p.name, p.duration.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(" → "))
    );
    if !sc.description.is_empty() {
        let _ = write!(o, "<p>{}</p>", esc(sc.description.trim()));
    }
    if j.invalid() {
        let _ = write!(
            o,
            "<p class=\"INVALID\"><b>INVALID</b>: {} — nothing measured is evidence.</p>",
            esc(&j.client.reasons().join("; "))
        );
    }
}

/// The verdict table, each verdict's evidence folded under its reason.
fn verdicts(o: &mut String, j: &Judgement) {
    o.push_str("<h2>Verdicts (Q13)</h2>");
    table(
        o,
        &["Verdict", "Result", "Why"],
        j.verdicts.iter().map(|v| {
            let ev = if v.evidence.is_empty() {
                String::new()
            } else {
                format!(
                    "<details><summary>evidence</summary><ul>{}</ul></details>",
                    v.evidence
                        .iter()
                        .map(|e| format!("<li>{}</li>", esc(e)))
                        .collect::<String>()
                )
            };
            vec![
                esc(v.name.as_str()),
                status(v.status.as_str()),
                format!("{}{ev}", esc(&v.summary)),
            ]
        }),
    );
}

/// The failure timeline (Q11) and the per-phase latency table.
fn timeline_and_phases(o: &mut String, j: &Judgement) {
    let escaped = |rows: Vec<Vec<String>>| {
        rows.into_iter()
            .map(|r| r.iter().map(|c| esc(c)).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    o.push_str("<h2>Timeline (Q11)</h2>");
    table(
        o,
        &super::rows::TIMELINE_HEAD,
        escaped(super::rows::timeline(j)),
    );
    o.push_str("<h2>Latency per phase</h2>");
    table(o, &super::rows::PHASE_HEAD, escaped(super::rows::phases(j)));
}

/// The first 50 findings.
fn findings(o: &mut String, j: &Judgement) {
    o.push_str("<h2>Findings</h2>");
    if j.findings.is_empty() {
        o.push_str("<p>None.</p>");
        return;
    }
    table(
        o,
        &["kind", "request", "detail"],
        j.findings.iter().take(50).map(|f| {
            vec![
                esc(f.kind.as_str()),
                format!("<code>{}</code>", esc(&f.request)),
                esc(&f.detail),
            ]
        }),
    );
}
