//! The capacity search driven (issue 19; Q4, Q5, Q10): one run per step, the next
//! rate picked from the outcomes so far (`plan::capacity::Bracket`), in each topology
//! asked for; then, past C_degraded, one overload step per multiple. The same driver
//! runs `haq capacity` and `criteria.capacity.search` inside `haq run`.
//!
//! Each step's run directory is `OUT/<topology>-NN-<rate>/` (`overload-NN-<rate>/`),
//! a run like any other (`haq check` judges it again). The engine judges nothing: the
//! caller passes the judge of a step's run directory (`check::judge_search_step`),
//! and the search's result is judged afterwards from the directory alone
//! (`check::judge_search_dir`), so a stored search re-judges identically.
//!
//! A step the judge says proves nothing (a degraded step whose faults did not all
//! hold: `check::capacity::steps::SearchStep::counts`) is never read into the bracket
//! and ends its topology's search — the next step would hold the same faults — and no
//! overload step runs on it: the judgement of the directory does the same.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::plan::Plan;
use crate::plan::capacity::{self, Bracket, Outcome, Params, Topology};

/// How the search runs.
#[derive(Debug, Clone)]
pub struct Opts {
    pub params: Params,
    /// The search's directory: one run directory per step in it.
    pub out: PathBuf,
    pub quiet: bool,
    /// The haq executable for sim processes (as `RunOptions::haq_bin`).
    pub haq_bin: Option<PathBuf>,
}

/// A step's outcome as its judge saw it (`None`: the step proves nothing), and its
/// line for the terminal.
pub type Judge<'a> = &'a (dyn Fn(&Path) -> anyhow::Result<(Option<Outcome>, String)> + Sync);

/// How one topology's search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The bracket said stop.
    Done,
    /// SIGINT/SIGTERM.
    Interrupted,
    /// A step proved nothing (its faults did not hold).
    ProvedNothing,
}

/// Runs one step's plan into `OUT/<name>/`; true when it was interrupted.
async fn one(
    plan: Plan,
    name: &str,
    o: &Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<(PathBuf, bool)> {
    let opts = super::RunOptions {
        out: Some(o.out.join(name)),
        reports_dir: o.out.clone(),
        quiet: true,
        haq_bin: o.haq_bin.clone(),
        agents: None,
    };
    let rec = Box::pin(super::run(plan, opts, cancel.clone())).await?;
    Ok((rec.run_dir, rec.interrupted))
}

/// One topology's bracket and bisection, and how it ended.
async fn topology(
    plan: &Plan,
    topo: Topology,
    o: &Opts,
    judge: Judge<'_>,
    cancel: &CancellationToken,
) -> anyhow::Result<(Bracket, Ended)> {
    let mut b = Bracket::default();
    while let Ok(rate) = b.next(&o.params.bisect) {
        let p = capacity::step_plan(plan, rate, topo, &o.params).map_err(anyhow::Error::msg)?;
        let name = capacity::step_dir(topo.as_str(), b.steps.len(), rate);
        let (dir, interrupted) = one(p, &name, o, cancel).await?;
        if interrupted || cancel.is_cancelled() {
            return Ok((b, Ended::Interrupted));
        }
        let (outcome, line) = judge(&dir).with_context(|| format!("judging {}", dir.display()))?;
        say(o, &format!("{} {line}", topo.as_str()));
        match outcome {
            Some(outcome) => b.record(rate, outcome),
            None => return Ok((b, Ended::ProvedNothing)),
        }
    }
    Ok((b, Ended::Done))
}

fn say(o: &Opts, s: &str) {
    if !o.quiet {
        eprintln!("haq capacity: {s}");
    }
}

/// The overload steps past C_degraded (`c`); true when interrupted.
async fn overload(
    plan: &Plan,
    c: f64,
    o: &Opts,
    cancel: &CancellationToken,
) -> anyhow::Result<bool> {
    let (rates, after) = capacity::overload_rates(&o.params, c, plan.scenario.protected_load.0);
    for (k, (m, rate)) in rates.into_iter().enumerate() {
        let p =
            capacity::overload_plan(plan, rate, after, &o.params).map_err(anyhow::Error::msg)?;
        let name = capacity::step_dir(capacity::OVERLOAD, k, rate);
        let (_, interrupted) = one(p, &name, o, cancel).await?;
        if interrupted || cancel.is_cancelled() {
            return Ok(true);
        }
        say(
            o,
            &format!("overload {m}× C_degraded = {rate:.2}/s, then {after:.2}/s ({name})"),
        );
    }
    Ok(false)
}

/// Every topology asked for, then the overload steps; true when interrupted. `Err`
/// only when a step could not run at all.
pub async fn run(
    plan: &Plan,
    o: &Opts,
    judge: Judge<'_>,
    cancel: &CancellationToken,
) -> anyhow::Result<bool> {
    if o.params.topologies.contains(&Topology::Degraded) {
        if plan.scenario.faults.is_empty() {
            anyhow::bail!(
                "the degraded topology is the scenario's faults applied and held: this scenario declares none"
            );
        }
        // Before any step runs: a fault the degraded topology cannot hold.
        capacity::step_plan(plan, o.params.bisect.start, Topology::Degraded, &o.params)
            .map_err(anyhow::Error::msg)?;
    }
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    for t in &o.params.topologies {
        let (b, ended) = topology(plan, *t, o, judge, cancel).await?;
        if ended == Ended::Interrupted {
            return Ok(true);
        }
        if let (Topology::Degraded, Ended::Done, Some(c)) = (t, ended, b.capacity())
            && overload(plan, c, o, cancel).await?
        {
            return Ok(true);
        }
    }
    Ok(false)
}
