//! `haq run --agents N`: the load of one run sent by N haq processes (agents): local
//! processes, or the pods of a Kubernetes Indexed Job (`agents.kubernetes`). The
//! seeded schedule is split by request index (request i is agent i mod N's), so the
//! union of the shares is exactly the single-process schedule. This process stays the
//! coordinator: it starts the target, fires the faults, keeps the phase clock and
//! writes the phase edges; each agent (`haq agent`, hidden) re-reads the scenario,
//! checks it is the run's, sends its share from the shared start of load on the
//! coordinator's trace clock, records its own trace and reports back. An agent not
//! ready by the start deadline, dying, exiting non-zero or never returning its result
//! is recorded (`agent` observations) and makes the run INVALID, named
//! (`check::validity`). After the run the traces are merged into one
//! (`trace::merge`). docs/agents.md.

mod agent;
mod assignment;
mod endpoint;
mod kube;
mod local;
mod pods;
mod remote;
mod setup;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Instant;

use super::load;
use crate::trace::merge;
pub use agent::{run as agent, run_remote as remote_agent};
pub(super) use setup::Coordinator;
pub use setup::{Agents, OnKube, POLL, start_within};

/// Starts the agents where they run, keeps the phase clock while they send, and
/// waits for each to end (recording how it ended); then `ctx.left` holds the last
/// client gone of any.
pub(super) async fn coordinate(
    c: Coordinator<'_>,
    agents: &Agents,
    started: tokio::sync::oneshot::Sender<Instant>,
    ctx: load::Ctx<'_>,
) -> anyhow::Result<()> {
    match &agents.kube {
        None => local::coordinate(c, agents, started, ctx).await,
        Some(on) => kube::coordinate(c, agents, on, started, ctx).await,
    }
}

/// The agents' traces merged into the run's (after the coordinator's trace is written).
pub fn merge_traces(run_dir: &Path, count: u64) -> anyhow::Result<merge::Merged> {
    let parts: Vec<merge::Part> = (0..count)
        .map(|share| merge::Part {
            share,
            count,
            trace: assignment::agent_dir(run_dir, share).join(crate::trace::TRACE_FILE),
        })
        .filter(|p| p.trace.exists())
        .collect();
    merge::merge(&run_dir.join(crate::trace::TRACE_FILE), &parts).map_err(anyhow::Error::msg)
}
