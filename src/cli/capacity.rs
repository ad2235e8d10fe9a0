//! `haq capacity SCENARIO` and `haq sim capacity SCENARIO` (issue 19; Q4, Q5, Q10):
//! the adaptive capacity search — the one `criteria.capacity.search` runs inside `haq
//! run` — with its parameters from the command line over the scenario's over the
//! defaults, driven by `engine::search` (each step a run of its own in
//! `OUT/<topology>-NN-<rate>/`, then the overload steps past C_degraded) and judged
//! from `OUT/` alone (`check::judge_search_dir`) into capacity.json and capacity.md;
//! and the sim engine model's computed rate, the truth a search of the sim is
//! measured against.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::check::capacity::adaptive::{RanStep, Search};
use crate::check::capacity::search::Judged;
use crate::plan::Plan;
use crate::plan::capacity::{Bisect, Outcome, Params, Topology};

/// A search step's outcome and its line, judged from its run directory (the judge
/// `engine::search` is given, by `haq capacity` and by `haq run`); `None`: the step
/// proves nothing (a degraded step whose faults did not all hold).
pub fn step_outcome(dir: &Path) -> anyhow::Result<(Option<Outcome>, String)> {
    match crate::check::judge_search_step(dir)? {
        Judged::Step(s) => {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let ran = RanStep {
                dir: name.unwrap_or_default(),
                judged: *s,
            };
            Ok((ran.judged.counts(), ran.describe()))
        }
        Judged::Overload(_) => {
            anyhow::bail!("{}: an overload step, not a search step", dir.display())
        }
    }
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

/// The whole search: every topology asked for, then the overload steps, each step a
/// run in `o.out`, judged again from that directory at the end; true when interrupted.
pub async fn search(
    plan: &Plan,
    o: &crate::engine::search::Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<(Search, bool)> {
    let interrupted = crate::engine::search::run(plan, o, &step_outcome, cancel).await?;
    let mut r = crate::check::judge_search_dir(&o.out, plan, &o.params);
    r.model_per_replica = model_rate(plan);
    Ok((r, interrupted || cancel.is_cancelled()))
}

/// capacity.json and capacity.md in the search's directory.
pub fn write(dir: &Path, r: &Search) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(dir.join("capacity.json"), json + "\n")?;
    std::fs::write(dir.join("capacity.md"), crate::report::capacity_md(r))?;
    Ok(())
}

/// The search's parameters: the command line over `criteria.capacity.search` over
/// the defaults (the first rate: the protected load).
pub fn params(a: &super::CapacityArgs, plan: &Plan) -> Result<Params, String> {
    use super::TopologyArg;
    let d = crate::scenario::CapacitySearch::default();
    let s = plan
        .scenario
        .criteria
        .capacity
        .as_ref()
        .map_or(&d, |c| &c.search);
    let start = a
        .from
        .or(s.from.map(|r| r.0))
        .unwrap_or(plan.scenario.protected_load.0);
    let factor = a.factor.unwrap_or(s.factor);
    let precision = a.precision.unwrap_or(s.precision.0);
    let max_steps = a.max_steps.unwrap_or(s.max_steps as usize);
    if !(start > 0.0 && start.is_finite()) {
        return Err(format!("--from {start}: the first rate must be above 0"));
    }
    if !(factor > 1.0 && factor <= 16.0) {
        return Err(format!("--factor {factor}: must be above 1 and at most 16"));
    }
    if precision.is_nan() || precision <= 0.0 {
        return Err("--precision 0%: the bracket can never be that narrow (give e.g. 5%)".into());
    }
    if !(1..=50).contains(&max_steps) {
        return Err(format!("--max-steps {max_steps}: must be between 1 and 50"));
    }
    let step = a.step.unwrap_or(s.step.0);
    let warmup = a.warmup.unwrap_or(s.warmup.0);
    if step.is_zero() {
        return Err("--step 0s: a step must last".into());
    }
    Ok(Params {
        topologies: match a.topology {
            TopologyArg::Healthy => vec![Topology::Healthy],
            TopologyArg::Degraded => vec![Topology::Degraded],
            TopologyArg::Both => vec![Topology::Healthy, Topology::Degraded],
        },
        bisect: Bisect {
            start,
            factor,
            precision,
            max_steps,
            floor: crate::plan::capacity::floor(start),
        },
        step,
        warmup,
        overload: a
            .overload
            .clone()
            .map_or_else(|| s.overload.clone(), |m| m.0),
    })
}

/// `haq capacity`: the plan, the search, its files, its exit code.
pub async fn command(a: super::CapacityArgs, cancel: CancellationToken) -> super::Exit {
    use super::Exit;
    let plan = match crate::plan::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let params = match params(&a, &plan) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let o = crate::engine::search::Opts {
        params,
        out: a.out.clone().unwrap_or_else(|| {
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
        if r.overload_status != crate::check::Status::NotEvaluated || !r.overload.is_empty() {
            println!(
                "Overload {}: {}",
                r.overload_status.as_str(),
                r.overload_summary
            );
        }
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
        _ if r.overload_status == Status::Fail => Exit::Fail,
        (_, Status::Pass) => Exit::Pass,
        // Only the healthy topology asked for: its capacity is the answer.
        (_, Status::NotEvaluated) if r.healthy.as_ref().is_some_and(|h| h.capacity.is_some()) => {
            Exit::Pass
        }
        _ => Exit::Fail,
    }
}
