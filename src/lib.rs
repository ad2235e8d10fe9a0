//! haq: qualifies LLM inference clusters for high availability.
//!
//! Data flow (one direction, docs/architecture.md): scenario → plan → run (target,
//! workload, faults) → trace → check → report. Each stage is a module that imports
//! only the stages below it (tests/it/layers.rs fails on an upward import):
//!
//! ```text
//! cli · bench                       the commands
//! report                            renderers, files written
//! check                             pure judging of a run directory
//! engine                            the run, up to the trace
//! faults                            fault backends, triggers, heal guard
//! target                            sim launcher, url replicas, registry, replacement
//! client · proxy                    haq's HTTP client, its interposition proxy
//! metrics                           latency accumulators, per second, interval log
//! workload                          schedule, prompts, request bodies
//! plan                              validation into the run plan
//! trace                             events, writer, reader, per-request record
//! scenario                          the file's model, positions, overrides
//! sim                               the embedded cluster (system under test)
//! wire · priority                   SSE, chunk classes, headers, clock, units
//! ```

pub mod bench;

pub mod check;
pub mod cli;
pub mod client;
pub mod engine;
pub mod faults;
pub mod metrics;
pub mod plan;
pub mod priority;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod target;
pub mod trace;
pub mod wire;
pub mod workload;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use wire::tls::install_crypto_provider;

/// A qualification run, recorded, judged and written.
pub struct RunResult {
    pub run_dir: PathBuf,
    pub plan: plan::Plan,
    pub judgement: check::Judgement,
    pub interrupted: bool,
}

/// Record → judge → write: runs a validated plan ([`engine::run`], up to the trace),
/// then its capacity search when it has one ([`search`]), judges the run directory
/// from disk ([`check`]) and writes every report the scenario asks for ([`report`]).
/// Setup failures are [`engine::EnvironmentError`]s.
pub async fn run(
    plan: plan::Plan,
    opts: engine::RunOptions,
    cancel: CancellationToken,
) -> anyhow::Result<RunResult> {
    let params = plan::capacity::Params::of(&plan);
    let searched = params
        .as_ref()
        .map(|p| (plan.clone(), p.clone(), opts.clone()));
    let recorded = engine::run(plan, opts, cancel.clone()).await?;
    let mut interrupted = recorded.interrupted;
    if let Some((plan, params, opts)) = searched.filter(|_| !interrupted) {
        interrupted = search(&plan, params, &recorded.run_dir, &opts, &cancel).await;
    }
    let (plan, judgement) = report::judge_and_write(&recorded.run_dir)?;
    Ok(RunResult {
        run_dir: recorded.run_dir,
        plan,
        judgement,
        interrupted,
    })
}

/// The capacity search of a run (`criteria.capacity.search`, issue 19): the same
/// driver as `haq capacity` ([`engine::search`]), its steps in `RUN_DIR/capacity/`;
/// true when it was interrupted. A step that could not run ends the search with its
/// reason in `capacity/stopped.txt` (the judgement reads it: Capacity is then not
/// measured), and the run is judged and reported all the same.
async fn search(
    plan: &plan::Plan,
    params: plan::capacity::Params,
    run_dir: &std::path::Path,
    opts: &engine::RunOptions,
    cancel: &CancellationToken,
) -> bool {
    let o = engine::search::Opts {
        params,
        out: run_dir.join(plan::capacity::DIR),
        quiet: opts.quiet,
        haq_bin: opts.haq_bin.clone(),
    };
    if !o.quiet {
        eprintln!(
            "haq: the capacity search (criteria.capacity.search), each step a run in {}",
            o.out.display()
        );
    }
    let (interrupted, why) =
        match engine::search::run(plan, &o, &cli::capacity::step_outcome, cancel).await {
            Ok(false) => return false,
            Ok(true) => (true, None),
            Err(e) => (cancel.is_cancelled(), Some(format!("{e:#}"))),
        };
    let why = match (interrupted, why) {
        (true, _) => format!(
            "{} (SIGINT/SIGTERM) during the search",
            plan::capacity::INTERRUPTED
        ),
        (false, Some(why)) => why,
        (false, None) => return false,
    };
    eprintln!("haq: the capacity search stopped: {why}");
    let _ = std::fs::create_dir_all(&o.out);
    let _ = std::fs::write(o.out.join(plan::capacity::STOPPED), why + "\n");
    interrupted
}
