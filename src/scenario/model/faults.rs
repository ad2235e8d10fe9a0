//! `phases` and `faults`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::units::Dur;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// Healthy topology, before any fault.
    Baseline,
    /// The window in which faults fire.
    Fault,
    /// Failed topology, load unchanged.
    Degraded,
    /// Replacement coming back.
    Recovery,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    /// Defaults to the name when the name is a phase kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PhaseKind>,
    pub duration: Dur,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum FailureDomain {
    Process,
    Gpu,
    #[default]
    Worker,
    Node,
    Network,
    Drain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultBackend {
    /// Signals to local processes (the sim's workers, or declared pids).
    #[default]
    Process,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    /// SIGKILL: a crash.
    #[default]
    Kill,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Name used in the trace and the report; defaults to `<action>-<replica>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The failure domain this fault stands for (Q3).
    #[serde(default)]
    pub domain: FailureDomain,
    #[serde(default)]
    pub backend: FaultBackend,
    #[serde(default)]
    pub action: FaultAction,
    /// Which replica (`w1`, `w2`, ... for the sim).
    pub target: FaultTarget,
    /// When: a phase and an offset into it.
    pub at: At,
    /// Check that the fault took effect (default true).
    #[serde(default = "yes")]
    pub verify: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultTarget {
    pub replica: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct At {
    pub phase: String,
    #[serde(default)]
    pub offset: Dur,
}
