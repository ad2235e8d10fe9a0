//! The scenario file as the user writes it (serde + JSON Schema), one file per section.
//! Every struct denies unknown fields; defaults live here, semantic checks in
//! `validate.rs`.

mod agents;
mod client;
mod criteria;
mod evidence;
mod faults;
mod kubernetes;
mod limits;
mod slo;
mod target;
mod workload;

pub use agents::*;
pub use client::*;
pub use criteria::*;
pub use evidence::*;
pub use faults::*;
pub use kubernetes::*;
pub use limits::*;
pub use slo::*;
pub use target::*;
pub use workload::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Rate;

/// A qualification scenario: what to load, what to break, what to judge.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, used in the run directory name (`reports/<name>-<UTC time>/`).
    pub name: String,
    /// What this scenario qualifies and what outcome is expected.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The system under test.
    pub target: Target,
    /// The request mix and its arrival process.
    pub workload: Workload,
    /// Offered load that must still be served within SLO after the declared failure
    /// (Q1). Never lowered during the fault (Q12).
    pub protected_load: Rate,
    /// Service objective, identical for healthy and degraded topology (Q2).
    pub slo: Slo,
    /// Expected request fate per stage (Q8).
    #[serde(default)]
    pub policy: FatePolicy,
    /// The run as a sequence of phases; load runs through all of them.
    pub phases: Vec<Phase>,
    /// Faults to inject, each at a point of a phase.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Where the Request-Fate checker finds evidence beyond the chunk trace.
    #[serde(default)]
    pub evidence: EvidenceCfg,
    /// Bounds used by the verdicts.
    #[serde(default)]
    pub criteria: Criteria,
    /// Client timeouts.
    #[serde(default)]
    pub client: ClientCfg,
    /// Outputs.
    #[serde(default)]
    pub report: ReportCfg,
    /// Where the agents of `haq run --agents N` run (default: local processes).
    #[serde(default, skip_serializing_if = "AgentsCfg::is_default")]
    pub agents: AgentsCfg,
}
