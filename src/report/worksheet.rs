//! The HA worksheet of SPEC Q14, filled from the scenario and the measurements:
//! service objective, topology, failure budget, healthy vs degraded, recovery, and the
//! request-fate matrix. Sections of rows, rendered alike in Markdown, HTML and JSON.

use serde::Serialize;

use crate::check::Judgement;
use crate::check::timeline::{FaultTimeline, Mark, ms};
use crate::metrics::PhaseStats;
use crate::plan::Plan;
use crate::scenario::words::{human, plural};
use crate::scenario::{Criteria, Fate, PhaseKind, TargetKind};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Section {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Section {
    fn new(title: &str, columns: &[&str]) -> Self {
        Section {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.to_vec());
    }
}

pub fn dur(d: crate::wire::units::Dur) -> String {
    d.to_string()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn fate_name(f: Fate) -> String {
    f.as_str().to_string()
}

/// The worksheet as sections (with the capacity search's steps, when it ran).
pub fn build(plan: &Plan, j: &Judgement) -> Vec<Section> {
    let mut v = vec![
        objective(plan),
        topology(plan),
        budget(plan, j),
        healthy_vs_degraded(plan, j),
    ];
    if let Some(c) = &j.capacity {
        let mut o = Section::new(
            "Capacity search steps (Q4, Q10: each a run in capacity/)",
            &super::capacity::STEP_HEAD,
        );
        o.rows = super::capacity::step_rows(c);
        v.push(o);
    }
    v.push(recovery(plan, j));
    v.push(fate_matrix(plan, j));
    v
}

fn objective(plan: &Plan) -> Section {
    let s = &plan.scenario;
    let mut o = Section::new("Service objective (Q1, Q2)", &["item", "value"]);
    o.row(["protected load".into(), s.protected_load.to_string()]);
    o.row([
        "offered load".into(),
        format!(
            "{:.2}/s on average over {:.0}s",
            plan.rate,
            plan.total.as_secs_f64()
        ),
    ]);
    o.row(["p95 TTFT".into(), dur(s.slo.ttft_p95)]);
    o.row(["p95 ITL".into(), dur(s.slo.itl_p95)]);
    o.row(["p95 E2E".into(), dur(s.slo.e2e_p95)]);
    o.row([
        "error rate".into(),
        format!("≤ {}", pct(s.slo.error_rate_max.0)),
    ]);
    o.row([
        "rejection rate".into(),
        format!("≤ {}", pct(s.slo.rejection_rate_max.0)),
    ]);
    let c = &s.criteria;
    o.row([
        "traffic removal".into(),
        c.routing
            .as_ref()
            .map(|r| format!("≤ {}", dur(r.traffic_removal_max)))
            .unwrap_or_else(|| "not declared (default: half the degraded interval, ≤ 10 s)".into()),
    ]);
    o.row([
        "recovery objective".into(),
        c.recovery
            .as_ref()
            .map(|r| format!("ready and serving ≤ {}", dur(r.ready_and_serving_max)))
            .unwrap_or_else(|| "not declared".into()),
    ]);
    let classes: Vec<String> = plan
        .mix
        .classes
        .iter()
        .map(|c| format!("{} ({}, weight {})", c.name, human(&c.priority), c.weight))
        .collect();
    o.row(["request mix".into(), classes.join(", ")]);
    o
}

fn topology(plan: &Plan) -> Section {
    let t = &plan.scenario.target;
    let mut o = Section::new("Topology", &["item", "value"]);
    match t.kind {
        TargetKind::Sim => {
            o.row([
                "target".into(),
                format!(
                    "embedded sim, {} ({})",
                    plural(plan.replicas.len() as u64, "replica"),
                    plan.replicas.join(", ")
                ),
            ]);
            o.row([
                "gateway".into(),
                format!(
                    "{} policy, retry budget {}, health check every {} ({})",
                    t.gateway.policy.name(),
                    t.gateway.retry_budget,
                    t.gateway.health_interval,
                    plural(t.gateway.health_failures, "failure")
                ),
            ]);
            o.row([
                "engine".into(),
                format!(
                    "max_num_seqs {}, decode step {}, startup {}",
                    t.engine.max_num_seqs, t.engine.decode_step, t.engine.startup
                ),
            ]);
        }
        TargetKind::Url => {
            o.row(["target".into(), t.url.clone().unwrap_or_default()]);
        }
        TargetKind::Kubernetes => {
            let k = t.kubernetes.as_ref();
            o.row([
                "target".into(),
                format!(
                    "Kubernetes pods `{}` in namespace {} ({} replicas: {}), gateway {}",
                    k.map(|k| k.selector.as_str()).unwrap_or_default(),
                    k.map(|k| k.namespace.as_str()).unwrap_or_default(),
                    plan.replicas.len(),
                    plan.replicas.join(", "),
                    k.map(|k| k.gateway_url()).unwrap_or_default()
                ),
            ]);
        }
    }
    o.row(["model".into(), t.model.clone()]);
    o
}

fn budget(plan: &Plan, j: &Judgement) -> Section {
    let mut o = Section::new(
        "Failure budget (Q3)",
        &[
            "fault", "domain", "action", "target", "when", "removed", "verified",
        ],
    );
    for f in &plan.faults {
        let rec = j.faults.iter().find(|r| r.name == f.name);
        o.row([
            f.name.clone(),
            f.domain.to_string(),
            f.action.to_string(),
            f.replica.clone(),
            format!("+{:.1}s ({})", f.at.as_secs_f64(), f.phase),
            rec.map(|r| r.replica_label().to_string())
                .unwrap_or_else(|| "—".into()),
            rec.map(|r| r.verified.to_string())
                .unwrap_or_else(|| "not recorded".into()),
        ]);
    }
    if plan.faults.is_empty() {
        o.row([
            "none".into(),
            "—".into(),
            "—".into(),
            "—".into(),
            "—".into(),
            "—".into(),
            "—".into(),
        ]);
    }
    o
}

/// The first phase (with requests) of the first kind in `kinds` that has one.
fn first_of<'a>(j: &'a Judgement, plan: &Plan, kinds: &[PhaseKind]) -> Option<&'a PhaseStats> {
    kinds.iter().find_map(|k| {
        plan.phases
            .iter()
            .filter(|p| p.kind == *k)
            .find_map(|p| j.phases.iter().find(|s| s.name == p.name && s.requests > 0))
    })
}

/// The first baseline phase against the first degraded (or else fault) phase, each
/// measure beside its objective, then the capacity rows.
fn healthy_vs_degraded(plan: &Plan, j: &Judgement) -> Section {
    let healthy = first_of(j, plan, &[PhaseKind::Baseline]);
    let degraded = first_of(j, plan, &[PhaseKind::Degraded, PhaseKind::Fault]);
    let name = |p: Option<&PhaseStats>| p.map(|p| p.name.clone()).unwrap_or_else(|| "—".into());
    let mut o = Section::new(
        "Healthy vs degraded (Q2, Q4)",
        &[
            "measure",
            &format!("healthy ({})", name(healthy)),
            &format!("degraded ({})", name(degraded)),
            "SLO",
        ],
    );
    phase_measures(&mut o, plan, healthy, degraded);
    capacity_rows(&mut o, plan, j);
    o
}

/// Latency, rates and error shares of the two phases ("—" for a phase that is not
/// there).
fn phase_measures(
    o: &mut Section,
    plan: &Plan,
    healthy: Option<&PhaseStats>,
    degraded: Option<&PhaseStats>,
) {
    let slo = &plan.scenario.slo;
    let cell = |p: Option<&PhaseStats>, f: &dyn Fn(&PhaseStats) -> String| {
        p.map(f).unwrap_or_else(|| "—".into())
    };
    type Measure<'a> = (&'a str, &'a dyn Fn(&PhaseStats) -> String, String);
    let rows: [Measure; 8] = [
        (
            "p95 TTFT",
            &|p| format!("{:.0} ms", p.ttft_ms.p95),
            dur(slo.ttft_p95),
        ),
        (
            "p95 ITL",
            &|p| format!("{:.1} ms", p.itl_ms.p95),
            dur(slo.itl_p95),
        ),
        (
            "p95 E2E",
            &|p| format!("{:.0} ms", p.e2e_ms.p95),
            dur(slo.e2e_p95),
        ),
        (
            "offered",
            &|p| format!("{:.2}/s", p.offered_rps),
            plan.scenario.protected_load.to_string(),
        ),
        (
            "achieved",
            &|p| format!("{:.2}/s", p.achieved_rps),
            String::new(),
        ),
        (
            "goodput (in SLO)",
            &|p| format!("{:.2}/s", p.goodput_rps),
            String::new(),
        ),
        (
            "failed",
            &|p| pct(p.failed as f64 / p.requests.max(1) as f64),
            format!("≤ {}", pct(slo.error_rate_max.0)),
        ),
        (
            "rejected",
            &|p| pct(p.rejected as f64 / p.requests.max(1) as f64),
            format!("≤ {}", pct(slo.rejection_rate_max.0)),
        ),
    ];
    for (m, f, s) in rows {
        o.row([m.into(), cell(healthy, f), cell(degraded, f), s]);
    }
}

/// The Capacity verdict (C_degraded ≥ L_protected) and the measured capacities of the
/// search, when there is one (with the (N−k)/N hypothesis beside it).
fn capacity_rows(o: &mut Section, plan: &Plan, j: &Judgement) {
    let cap = j
        .verdicts
        .iter()
        .find(|v| v.name == "Capacity")
        .map(|v| format!("{} (Capacity verdict)", v.status.as_str()))
        .unwrap_or_default();
    o.row([
        "C_degraded ≥ L_protected".into(),
        "—".into(),
        cap,
        plan.scenario.protected_load.to_string(),
    ]);
    match &j.capacity {
        Some(c) => {
            let b = |t: &Option<crate::check::capacity::adaptive::TopologyResult>| {
                t.as_ref()
                    .map_or("not searched".into(), super::capacity::bracket)
            };
            o.row([
                "capacity, measured (search)".into(),
                b(&c.healthy),
                b(&c.degraded),
                format!("≥ {}", plan.scenario.protected_load),
            ]);
            let precision = |t: &Option<crate::check::capacity::adaptive::TopologyResult>| {
                t.as_ref()
                    .and_then(|t| t.precision)
                    .map_or("—".into(), |p| format!("{:.1}%", p * 100.0))
            };
            o.row([
                "bracket width (the search's precision)".into(),
                precision(&c.healthy),
                precision(&c.degraded),
                format!("asked ≤ {:.1}%", c.precision * 100.0),
            ]);
            let signed = |x: Option<f64>| x.map_or("—".into(), |v| format!("{v:+.2}/s"));
            o.row([
                "headroom = C_healthy − normal peak (Q5)".into(),
                signed(c.headroom),
                String::new(),
                format!("normal peak {:.2}/s", c.normal_peak),
            ]);
            o.row([
                "failover reserve = C_degraded − L_protected (Q5)".into(),
                String::new(),
                signed(c.failover_reserve),
                "≥ 0: headroom is not failover reserve".into(),
            ]);
            if let Some(h) = c.hypothesis {
                o.row([
                    "(N−k)/N × C_healthy (a hypothesis, never the measure, Q4)".into(),
                    String::new(),
                    format!("{h:.2}/s"),
                    String::new(),
                ]);
            }
            o.row([
                "overload past C_degraded (Q10)".into(),
                String::new(),
                format!("{}: {}", c.overload_status.as_str(), c.overload_summary),
                "fast explicit rejections, admitted work in SLO, no retry cascade, back in SLO after".into(),
            ]);
        }
        None => o.row([
            "capacity, measured (search)".into(),
            "not searched".into(),
            "not searched (criteria.capacity.search)".into(),
            String::new(),
        ]),
    }
}

fn since(f: &FaultTimeline, m: &Option<Mark>) -> (String, String) {
    match m {
        Some(m) => (format!("+{:.0} ms", ms(f.injected, m.t)), m.source.clone()),
        None => ("—".into(), "not observed".into()),
    }
}

/// One row of the recovery section: the fault, what was measured, `v` (the time after
/// the fault and its source) and the objective.
fn put(o: &mut Section, f: &FaultTimeline, what: &str, v: (String, String), obj: String) {
    o.rows
        .push(vec![f.fault.clone(), what.into(), v.0, obj, v.1]);
}

/// Per fault, the response then the replacement; last the full recovery of all.
fn recovery(plan: &Plan, j: &Judgement) -> Section {
    let mut o = Section::new(
        "Recovery (Q11)",
        &[
            "fault",
            "measurement",
            "after the fault",
            "objective",
            "source",
        ],
    );
    let c = &plan.scenario.criteria;
    for f in &j.timeline.faults {
        response_rows(&mut o, c, f);
        replacement_rows(&mut o, c, f);
    }
    let full = j.timeline.full_recovery.as_ref();
    let first = j.timeline.faults.first().map(|f| f.injected);
    o.row([
        "all".into(),
        "full recovery".into(),
        match (full, first) {
            (Some(m), Some(t0)) => format!("+{:.0} ms", ms(t0, m.t)),
            _ => "—".into(),
        },
        String::new(),
        full.map(|m| m.source.clone())
            .unwrap_or_else(|| "not observed".into()),
    ]);
    o
}

/// How the cluster answered one fault: detection, traffic removal, the requests in
/// flight and the degraded interval.
fn response_rows(o: &mut Section, c: &Criteria, f: &FaultTimeline) {
    put(o, f, "detection", since(f, &f.detected), String::new());
    let removal = f.removal.as_ref().map(|r| {
        (
            format!("+{:.0} ms", ms(f.injected, r.t)),
            r.last
                .as_ref()
                .map(|l| l.source.clone())
                .unwrap_or_else(|| r.sources.join(", ")),
        )
    });
    put(
        o,
        f,
        "traffic removal",
        removal.unwrap_or(("—".into(), "no routing evidence".into())),
        c.routing
            .as_ref()
            .map(|r| format!("≤ {}", dur(r.traffic_removal_max)))
            .unwrap_or_default(),
    );
    let req = f.in_flight.settled.map(|s| {
        let left = if f.in_flight.left > 0 {
            format!(", {} left by the client or haq", f.in_flight.left)
        } else {
            String::new()
        };
        (
            format!(
                "+{:.0} ms ({} caught: {} recovered, {} terminated{left})",
                ms(f.injected, s),
                f.in_flight.caught,
                f.in_flight.recovered,
                f.in_flight.terminated
            ),
            "client trace".to_string(),
        )
    });
    put(
        o,
        f,
        "request recovery",
        req.unwrap_or(("—".into(), "no request was in flight".into())),
        String::new(),
    );
    put(
        o,
        f,
        "degraded interval",
        (
            format!("{:.1} s", ms(f.injected, f.degraded_until) / 1000.0),
            "phases".into(),
        ),
        String::new(),
    );
}

/// The way back from one fault: the replacement requested, started, ready and
/// receiving traffic — or, for a healed fault with no replacement, the endpoint
/// healed, ready again and receiving traffic again.
fn replacement_rows(o: &mut Section, c: &Criteria, f: &FaultTimeline) {
    let r = &f.replacement;
    // A healed fault's endpoint comes back by itself: no replacement to wait for.
    let healed_back = f.healed.is_some() && r.requested.is_none();
    if healed_back {
        put(o, f, "healed", since(f, &f.healed), String::new());
    } else {
        put(
            o,
            f,
            "replacement requested",
            since(f, &r.requested),
            String::new(),
        );
        put(
            o,
            f,
            "replacement started",
            since(f, &r.started),
            String::new(),
        );
    }
    let (ready, serving) = if healed_back {
        ("ready again", "receiving traffic again")
    } else {
        ("replacement ready", "replacement receiving traffic")
    };
    put(o, f, ready, since(f, &r.ready), String::new());
    put(
        o,
        f,
        serving,
        since(f, &r.serving),
        c.recovery
            .as_ref()
            .map(|r| format!("≤ {}", dur(r.ready_and_serving_max)))
            .unwrap_or_default(),
    );
}

fn fate_matrix(plan: &Plan, j: &Judgement) -> Section {
    let p = &plan.scenario.policy;
    let mut o = Section::new(
        "Request-fate matrix (Q8)",
        &["stage", "declared", "observed (count)"],
    );
    let stages = [
        ("new", Some(p.new)),
        ("queued", Some(p.queued)),
        ("prefill", Some(p.prefill)),
        ("decode", Some(p.decode)),
        ("before_first_delta", None),
        ("streaming", Some(p.streaming)),
    ];
    for (stage, declared) in stages {
        let seen: Vec<String> = j
            .fate_table
            .iter()
            .filter(|r| r.stage.as_str() == stage)
            .map(|r| {
                format!(
                    "{} as {} ({})",
                    r.observed.as_str(),
                    r.outcome.as_str(),
                    r.count
                )
            })
            .collect();
        if declared.is_none() && seen.is_empty() {
            continue;
        }
        o.row([
            stage.into(),
            declared
                .map(fate_name)
                .unwrap_or_else(|| "(queued, prefill or decode)".into()),
            if seen.is_empty() {
                "—".into()
            } else {
                seen.join(", ")
            },
        ]);
    }
    o
}

#[cfg(test)]
mod tests {
    use crate::check::capacity::adaptive::{Context, RanStep, Search, TopologyResult, conclude};
    use crate::check::capacity::steps::fake;
    use crate::check::testkit::*;
    use crate::plan::capacity::{Bracket, Outcome, Stop, Topology};

    fn topo(t: Topology, steps: &[(f64, Outcome)]) -> TopologyResult {
        let mut b = Bracket::default();
        let mut ran = Vec::new();
        for (i, (r, o)) in steps.iter().enumerate() {
            b.record(*r, *o);
            ran.push(RanStep {
                dir: crate::plan::capacity::step_dir(t.as_str(), i, *r),
                judged: fake(*r, *o),
            });
        }
        TopologyResult::new(t, &b, Stop::Precise, ran)
    }

    /// report.md of the standard run with a search of `h` and `d` (L_protected and
    /// the normal peak 10/s, 3 replicas, 1 lost).
    fn markdown_with(h: TopologyResult, d: TopologyResult) -> String {
        let p = plan(&[]);
        let mut j = standard(&p).judge(&p);
        let c = Context {
            protected_load: 10.0,
            normal_peak: 10.0,
            replicas: 3,
            lost: 1,
        };
        let (status, summary, [hypothesis, headroom, failover_reserve]) =
            conclude(&c, Some(&h), Some(&d));
        j.capacity = Some(Search {
            scenario: "t".into(),
            precision: 0.05,
            max_steps: 8,
            step_s: 3.0,
            warmup_s: 3.0,
            protected_load: 10.0,
            normal_peak: 10.0,
            replicas: 3,
            lost: 1,
            healthy: Some(h),
            degraded: Some(d),
            hypothesis,
            headroom,
            failover_reserve,
            gate: status == crate::check::Status::Pass,
            status,
            summary,
            overload: Vec::new(),
            overload_status: crate::check::Status::NotEvaluated,
            overload_summary: "the search asked for no overload step (`overload: []`)".into(),
            model_per_replica: None,
        });
        super::super::markdown(&p, &j)
    }

    /// The Q5 rows of report.md's worksheet with a capacity search (issue 19 item 5):
    /// headroom from the normal peak beside failover reserve above L_protected, the
    /// brackets and their width, and every step in a section of its own.
    #[test]
    fn the_worksheet_shows_headroom_and_failover_reserve_of_a_search() {
        use Outcome::*;
        let h = topo(
            Topology::Healthy,
            &[(10.0, Sustained), (20.0, Broken), (19.5, Sustained)],
        );
        let d = topo(
            Topology::Degraded,
            &[
                (10.0, Sustained),
                (20.0, Broken),
                (13.0, Sustained),
                (13.5, Broken),
            ],
        );
        let md = markdown_with(h, d);
        for row in [
            "| headroom = C_healthy − normal peak (Q5) | +9.50/s |  | normal peak 10.00/s |",
            "| failover reserve = C_degraded − L_protected (Q5) |  | +3.00/s | ≥ 0: headroom is not failover reserve |",
            "| capacity, measured (search) | C = 19.50/s in [19.50/s, 20.00/s) (stopped: precise, 2.6% wide) | C = 13.00/s in [13.00/s, 13.50/s) (stopped: precise, 3.8% wide) |",
            "| bracket width (the search's precision) | 2.6% | 3.8% | asked ≤ 5.0% |",
            "| (N−k)/N × C_healthy (a hypothesis, never the measure, Q4) |  | 13.00/s |  |",
            "Capacity search steps",
            "| degraded | 4 | 13.50/s | not sustained",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
    }

    /// A degraded step whose fault did not hold: the worksheet names it where the
    /// steps are listed and where C_degraded is, and shows no capacity for it.
    #[test]
    fn the_worksheet_names_a_degraded_step_that_proves_nothing() {
        use Outcome::*;
        let h = topo(Topology::Healthy, &[(10.0, Sustained), (20.0, Broken)]);
        let mut b = Bracket::default();
        b.record(5.0, Sustained);
        let mut unproven = fake(10.0, Sustained);
        unproven.proves_nothing = vec![
            "kill-w2 on w2 was not verified: the degraded topology is not the declared one".into(),
        ];
        let ran = vec![
            RanStep {
                dir: "degraded-01-5.00".into(),
                judged: fake(5.0, Sustained),
            },
            RanStep {
                dir: "degraded-02-10.00".into(),
                judged: unproven,
            },
        ];
        let d = TopologyResult::new(Topology::Degraded, &b, Stop::Unfinished, ran);
        assert_eq!(d.capacity, None);
        let md = markdown_with(h, d);
        for row in [
            "| degraded | 2 | 10.00/s | proves nothing: kill-w2 on w2 was not verified",
            "C_degraded ≥ L_protected",
            "not measured: step degraded-02-10.00 proves nothing — kill-w2 on w2 was not verified",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
        assert!(
            !md.contains("| failover reserve = C_degraded − L_protected (Q5) |  | +"),
            "{md}"
        );
    }
}
