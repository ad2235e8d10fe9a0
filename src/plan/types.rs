//! The run plan: a scenario validated and resolved — phases with their start times and
//! rates, the faults with their targets and triggers, the replicas, the offered rate
//! over time and the workload's data files.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::faults::FaultPlan;
use super::inputs::Inputs;
pub use super::phase::PhasePlan;
use super::rate::RateProfile;
use crate::scenario::{Mix, ReplicaDecl, Scenario};

/// Largest prompt and output lengths a distribution may draw.
pub const MAX_PROMPT_TOKENS: u32 = 1_000_000;
pub const MAX_OUTPUT_TOKENS: u32 = 100_000;

/// Hard upper bounds that keep every load loop bounded.
pub const MAX_RATE: f64 = 10_000.0;
pub const MAX_TOTAL: Duration = Duration::from_secs(24 * 3600);
pub const MAX_SIM_REPLICAS: u32 = 64;

/// A validated, resolved scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The effective scenario (overrides applied, workload file inlined).
    pub scenario: Scenario,
    pub mix: Mix,
    pub seed: u64,
    /// Mean offered arrival rate over the run (req/s).
    pub rate: f64,
    /// The offered rate over time (constant, ramp or stages).
    pub profile: RateProfile,
    /// Data read from the workload's files (empirical lengths, replayed traces); empty
    /// for a plan rebuilt from a recorded scenario (checking needs none of it).
    #[serde(skip)]
    pub inputs: Arc<Inputs>,
    pub phases: Vec<PhasePlan>,
    pub faults: Vec<FaultPlan>,
    /// Sum of phase durations: how long load is offered.
    pub total: Duration,
    /// Replica names faults may target (`w1`..`wN` for the sim).
    pub replicas: Vec<String>,
    /// Every declared replica (name, node, and for `url` targets upstream, proxy
    /// listen address and process).
    pub replica_decls: Vec<ReplicaDecl>,
}

impl Plan {
    /// The phase an offset (from the start of load) falls in.
    pub fn phase_at(&self, t: Duration) -> Option<&PhasePlan> {
        self.phases
            .iter()
            .find(|p| t >= p.start && t < p.end())
            .or_else(|| self.phases.last().filter(|p| t >= p.end()))
    }
}

/// Most connections `client.warm_connections` may open before load.
pub const MAX_WARM_CONNECTIONS: u32 = 10_000;
