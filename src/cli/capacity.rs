//! `haq capacity SCENARIO`: the adaptive capacity search (issue 19, Q4, Q5). Each step
//! is a run of its own (`engine::run`): the scenario's target, mix and SLO at one
//! constant rate, a warm-up phase discarded, then the `step` phase judged
//! (`check::capacity::steps`); its trace stays in `OUT/<topology>-NN-<rate>/` so
//! `haq check` re-judges it. The rates come from `plan::capacity::Bracket`: up
//! geometrically until the SLO breaks, then bisection until the bracket is within
//! `--precision` or `--max-steps` is spent. In the degraded topology every step
//! applies the scenario's faults at the start of its warm-up and holds them (no
//! replacement, no trigger condition); the engine's heal guard undoes what is
//! reversible at the step's end, on error and on Ctrl-C.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::check::capacity::adaptive::{
    self, CapacityReport, Context, RanStep, Topology, TopologyResult,
};
use crate::plan::Plan;
use crate::plan::capacity::{Bisect, Bracket};
use crate::scenario::{At, Phase, PhaseKind, Scenario};
use crate::wire::units::{Dur, Rate};

/// The step phase's name in every step run (the warm-up's is `warmup`).
pub const STEP: &str = "step";
pub const WARMUP: &str = "warmup";

/// How the search runs.
#[derive(Debug, Clone)]
pub struct Opts {
    pub topologies: Vec<Topology>,
    pub bisect: Bisect,
    pub step: std::time::Duration,
    pub warmup: std::time::Duration,
    pub out: PathBuf,
    pub quiet: bool,
    pub haq_bin: Option<PathBuf>,
}

/// The plan of one step run: the scenario at `rate` through a warm-up and the step,
/// no capacity ladder, no gates; in the degraded topology the scenario's faults at
/// the start of the warm-up, held.
pub fn step_plan(plan: &Plan, rate: f64, topo: Topology, o: &Opts) -> anyhow::Result<Plan> {
    let mut s: Scenario = plan.scenario.clone();
    let phase = |name: &str, d: std::time::Duration| Phase {
        name: name.into(),
        kind: Some(PhaseKind::Capacity),
        duration: Dur(d),
        rate: Some(Rate(rate)),
        load: None,
    };
    s.phases = vec![phase(WARMUP, o.warmup), phase(STEP, o.step)];
    s.criteria.capacity = None;
    s.criteria.require.clear();
    if topo == Topology::Healthy {
        s.faults.clear();
    }
    for f in &mut s.faults {
        if f.target.is_none() {
            anyhow::bail!(
                "fault {}: the degraded search needs a named target (a probe picks its replica only in a run)",
                f.name.as_deref().unwrap_or("(unnamed)")
            );
        }
        f.at = At {
            phase: WARMUP.into(),
            offset: Dur::default(),
        };
        f.when = None;
        f.restart = None;
        f.duration = None;
    }
    let mut p = crate::plan::validate(s)
        .map_err(|i| anyhow::anyhow!("step plan at {rate:.2}/s: `{}`: {}", i.field, i.reason))?;
    p.inputs = plan.inputs.clone();
    Ok(p)
}

/// Runs one step and judges it from its run directory.
async fn one_step(
    plan: &Plan,
    rate: f64,
    topo: Topology,
    k: usize,
    o: &Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<(RanStep, bool)> {
    let p = step_plan(plan, rate, topo, o)?;
    let name = format!("{}-{:02}-{rate:.2}", topo.as_str(), k + 1);
    let dir = o.out.join(&name);
    let opts = crate::engine::RunOptions {
        out: Some(dir.clone()),
        reports_dir: o.out.clone(),
        quiet: true,
        haq_bin: o.haq_bin.clone(),
        agents: None,
    };
    let rec = crate::engine::run(p, opts, cancel.clone()).await?;
    let (p, j) = crate::check::judge_dir(&rec.run_dir)?;
    let stats = j
        .phases
        .iter()
        .find(|s| s.name == STEP)
        .with_context(|| format!("{}: no `{STEP}` phase measured", dir.display()))?;
    let judged =
        crate::check::capacity::steps::judge(&p, stats, &j.facts.requests, &j.client, rate);
    Ok((RanStep { dir: name, judged }, rec.interrupted))
}

/// One topology's search; `Err` only when a step could not run at all.
async fn topology(
    plan: &Plan,
    topo: Topology,
    o: &Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<(TopologyResult, bool)> {
    let mut b = Bracket::default();
    let mut steps = Vec::new();
    loop {
        let rate = match b.next(&o.bisect) {
            Ok(r) => r,
            Err(stop) => return Ok((TopologyResult::new(topo, &b, stop, steps), false)),
        };
        let (s, interrupted) = one_step(plan, rate, topo, steps.len(), o, cancel).await?;
        if !o.quiet {
            eprintln!("haq capacity: {}", line(topo, &s));
        }
        if interrupted {
            steps.push(s);
            let stop = crate::plan::capacity::Stop::Budget;
            return Ok((TopologyResult::new(topo, &b, stop, steps), true));
        }
        b.record(rate, s.judged.outcome);
        steps.push(s);
    }
}

/// `degraded 12.40/s: sustained — 74 requests, achieved …, p95 TTFT 40 ms [38, 45] …`.
pub fn line(topo: Topology, s: &RanStep) -> String {
    use crate::check::capacity::steps::P95;
    let j = &s.judged;
    format!(
        "{} {:.2}/s: {} — {}, achieved {:.2}/s, in SLO {}, p95 TTFT {}, E2E {}{} ({})",
        topo.as_str(),
        j.step.rate,
        j.outcome_text(),
        crate::scenario::words::plural(j.step.requests, "request"),
        j.step.achieved_rps,
        j.attainment_text(),
        P95::describe(&j.ttft_p95),
        P95::describe(&j.e2e_p95),
        if j.confident { "" } else { ", marginal" },
        s.dir
    )
}

/// The sim model's sustainable rate per replica for the scenario's mix, when the
/// target is the sim and every class has a known typical length.
pub fn model_rate(plan: &Plan) -> Option<f64> {
    model(plan).map(|m| m.per_replica)
}

/// The sim engine model's saturation for the scenario's mix (`sim::engine::capacity`).
pub fn model(plan: &Plan) -> Option<crate::sim::engine::capacity::Sustainable> {
    let s = &plan.scenario;
    if s.target.kind != crate::scenario::TargetKind::Sim {
        return None;
    }
    let mix = plan.mix.classes.iter().map(|c| {
        Some(crate::sim::engine::capacity::ClassLen {
            weight: c.weight,
            prompt: f64::from(c.prompt_tokens.typical()?),
            output: f64::from(c.output_tokens.typical()?),
        })
    });
    let mix: Option<Vec<_>> = mix.collect();
    let g = Some(s.target.gateway.max_inflight_per_worker);
    crate::sim::engine::capacity::sustainable(&s.target.engine, g, &mix?)
}

/// `haq sim capacity SCENARIO`: the engine model's sustainable rate for the mix.
pub fn sim_model(a: &super::ValidateArgs) -> anyhow::Result<super::Exit> {
    let plan = crate::plan::load(&a.scenario, &a.overrides.set, a.overrides.seed)?;
    let m = model(&plan).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: the model needs a `kind: sim` target and every class's lengths known before the run (no empirical lengths)",
            a.scenario.display()
        )
    })?;
    let n = plan.replicas.len() as u32;
    println!(
        "{}: the sim engine model sustains {:.2}/s per replica ({} slots, bound by {}, step {:.1} ms at saturation): {:.2}/s with {n} replicas, {:.2}/s with {}",
        plan.scenario.name,
        m.per_replica,
        m.slots,
        m.bound,
        m.step_ms,
        m.total(n),
        m.total(n.saturating_sub(1)),
        n.saturating_sub(1)
    );
    Ok(super::Exit::Pass)
}

/// The whole search: every topology asked for, concluded.
pub async fn search(
    plan: &Plan,
    o: &Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<(CapacityReport, bool)> {
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    if o.topologies.contains(&Topology::Degraded) && plan.scenario.faults.is_empty() {
        anyhow::bail!(
            "the degraded topology is the scenario's faults applied and held: this scenario declares none"
        );
    }
    let (mut healthy, mut degraded, mut interrupted) = (None, None, false);
    for t in &o.topologies {
        let (r, stopped) = topology(plan, *t, o, cancel).await?;
        match t {
            Topology::Healthy => healthy = Some(r),
            Topology::Degraded => degraded = Some(r),
        }
        if stopped || cancel.is_cancelled() {
            interrupted = true;
            break;
        }
    }
    let lost: usize = plan.faults.iter().map(|f| f.replicas.len().max(1)).sum();
    let c = Context {
        protected_load: plan.scenario.protected_load.0,
        normal_peak: crate::plan::capacity::normal_peak(plan),
        replicas: plan.replicas.len(),
        lost,
    };
    let (status, summary, [hypothesis, headroom, failover_reserve]) =
        adaptive::conclude(&c, healthy.as_ref(), degraded.as_ref());
    Ok((
        CapacityReport {
            scenario: plan.scenario.name.clone(),
            precision: o.bisect.precision,
            max_steps: o.bisect.max_steps,
            step_s: o.step.as_secs_f64(),
            warmup_s: o.warmup.as_secs_f64(),
            protected_load: c.protected_load,
            normal_peak: c.normal_peak,
            replicas: c.replicas,
            lost,
            healthy,
            degraded,
            hypothesis,
            headroom,
            failover_reserve,
            status,
            summary,
            model_per_replica: model_rate(plan),
        },
        interrupted,
    ))
}

/// capacity.json and capacity.md in the search's directory.
pub fn write(dir: &Path, r: &CapacityReport) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(dir.join("capacity.json"), json + "\n")?;
    std::fs::write(dir.join("capacity.md"), crate::report::capacity_md(r))?;
    Ok(())
}

/// `haq capacity`: the plan, the search, its files, its exit code.
pub async fn command(a: super::CapacityArgs, cancel: CancellationToken) -> super::Exit {
    use super::{Exit, TopologyArg};
    let plan = match crate::plan::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let ladder = plan.scenario.criteria.capacity.as_ref().map(|c| &c.search);
    let start = a
        .from
        .or(ladder.map(|l| l.from.0))
        .unwrap_or(plan.scenario.protected_load.0);
    let ok = start > 0.0 && a.factor > 1.0 && a.precision > 0.0 && a.max_steps > 0;
    if !ok {
        eprintln!(
            "error: --from, --precision and --max-steps must be above 0 and --factor above 1"
        );
        return Exit::Unusable;
    }
    let o = Opts {
        topologies: match a.topology {
            TopologyArg::Healthy => vec![Topology::Healthy],
            TopologyArg::Degraded => vec![Topology::Degraded],
            TopologyArg::Both => vec![Topology::Healthy, Topology::Degraded],
        },
        bisect: Bisect {
            start,
            factor: a.factor,
            precision: a.precision,
            max_steps: a.max_steps,
            floor: (start / 64.0).max(0.01),
        },
        step: a
            .step
            .or(ladder.map(|l| l.step.0))
            .unwrap_or(std::time::Duration::from_secs(10)),
        warmup: a.warmup,
        out: a.out.unwrap_or_else(|| {
            let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
            a.reports_dir
                .join(format!("{}-capacity-{stamp}", plan.scenario.name))
        }),
        quiet: a.quiet || a.json,
        haq_bin: None,
    };
    let (r, interrupted) = match search(&plan, &o, &cancel).await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: the capacity search failed: {e:#}");
            return if cancel.is_cancelled() {
                Exit::Interrupted
            } else {
                Exit::Unusable
            };
        }
    };
    if let Err(e) = write(&o.out, &r) {
        eprintln!("error: writing {}: {e:#}", o.out.display());
        return Exit::Unusable;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    } else {
        println!("Capacity {}: {}", r.status.as_str(), r.summary);
        println!(
            "headroom {} · failover reserve {} · wrote capacity.json, capacity.md in {}",
            r.headroom.map_or("—".into(), |v| format!("{v:.2}/s")),
            r.failover_reserve
                .map_or("—".into(), |v| format!("{v:.2}/s")),
            o.out.display()
        );
    }
    use crate::check::Status;
    match (interrupted, r.status) {
        (true, _) => Exit::Interrupted,
        (_, Status::Pass) => Exit::Pass,
        // Only the healthy topology asked for: its capacity is the answer.
        (_, Status::NotEvaluated) if r.healthy.as_ref().is_some_and(|h| h.capacity.is_some()) => {
            Exit::Pass
        }
        _ => Exit::Fail,
    }
}
