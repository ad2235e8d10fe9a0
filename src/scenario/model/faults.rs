//! `phases` and `faults`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::units::{Dur, Rate};

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
    /// Load beyond the protected envelope (`rate` or `load` above `protected_load`):
    /// judged by the Overload verdict (Q10).
    Overload,
    /// The window in which a planned drain fires (Q7).
    Drain,
    /// After recovery: the healthy latency envelope must be back (Q11).
    Recovered,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    /// Defaults to the name when the name is a phase kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PhaseKind>,
    pub duration: Dur,
    /// Offered rate in this phase (default: `workload.arrival.rate`). Below
    /// `protected_load` only in no phase (Q12); above it in an `overload` phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Offered rate as a multiple of `protected_load` (e.g. `2.5`), instead of `rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
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
