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
/// judges the run directory from disk ([`check`]) and writes every report the
/// scenario asks for ([`report`]). Setup failures are [`engine::EnvironmentError`]s.
pub async fn run(
    plan: plan::Plan,
    opts: engine::RunOptions,
    cancel: CancellationToken,
) -> anyhow::Result<RunResult> {
    let recorded = engine::run(plan, opts, cancel).await?;
    let (plan, judgement) = report::judge_and_write(&recorded.run_dir)?;
    Ok(RunResult {
        run_dir: recorded.run_dir,
        plan,
        judgement,
        interrupted: recorded.interrupted,
    })
}
