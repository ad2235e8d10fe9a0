//! `criteria`: bounds the verdicts use. Every section is optional: a verdict without a
//! bound still judges what SPEC Q13 asks (traffic stopped, a replacement served, a
//! drain lost nothing) and reports the measured times.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::{Dur, Fraction, Rate};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Criteria {
    /// Verdicts the run must judge: one that ends NOT_EVALUATED or UNKNOWN fails the
    /// run (exit 1), so a CI gate cannot pass on what it never tested, e.g.
    /// `require: [Failure-Domain, Routing, Request-Fate, Capacity]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require: Vec<VerdictName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overload: Option<OverloadCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityCriteria>,
}

/// Capacity (Q4): measure C_healthy and C_degraded instead of assuming them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityCriteria {
    pub search: CapacitySearch,
}

/// The sustainable-rate search under the SLO (Q4, Q5, Q10; docs/capacity.md), run by
/// `haq run` after the scenario's phases, the same search as `haq capacity`: each
/// step a run of its own at one constant rate of the scenario's mix (a discarded
/// `warmup`, then `step` judged), in the healthy topology and with the scenario's
/// faults applied and held (degraded). Bracket — the rate multiplied by `factor`
/// until the SLO breaks — then bisect until the bracket is within `precision` or
/// `max_steps` are spent; then, past C_degraded, one step at each `overload`
/// multiple judged by the Overload rules. The gate C_degraded ≥ L_protected is
/// measured, never derived.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacitySearch {
    /// The first rate tried (default: `protected_load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Rate>,
    /// Bracketing multiplies (or divides) the rate by this until the SLO breaks (or
    /// holds).
    #[serde(default = "default_factor")]
    pub factor: f64,
    /// Done when the bracket [highest sustained, lowest broken) is at most this share
    /// of its lower end wide.
    #[serde(default = "default_precision")]
    pub precision: Fraction,
    /// Most steps per topology.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// How long each step is judged.
    #[serde(default = "default_step")]
    pub step: Dur,
    /// Load at the step's rate before it is judged (discarded: queues and batches
    /// reach their steady state).
    #[serde(default = "default_warmup")]
    pub warmup: Dur,
    /// Multiples of C_degraded offered, one step each in the degraded topology, and
    /// judged by the Overload rules (Q10): fast explicit rejections, admitted work
    /// inside the SLO, attempts per request within the retry budget, the SLO back at
    /// the protected load after the excess. `[]`: none.
    #[serde(default = "default_overload")]
    pub overload: Vec<f64>,
    /// The fixed ladder's fields, gone (issue 19): refused, naming what replaces them.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub to: Option<serde_json::Value>,
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub steps: Option<serde_json::Value>,
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub settle: Option<serde_json::Value>,
}

impl Default for CapacitySearch {
    fn default() -> Self {
        CapacitySearch {
            from: None,
            factor: default_factor(),
            precision: default_precision(),
            max_steps: default_max_steps(),
            step: default_step(),
            warmup: default_warmup(),
            overload: default_overload(),
            to: None,
            steps: None,
            settle: None,
        }
    }
}

fn default_factor() -> f64 {
    2.0
}
fn default_precision() -> Fraction {
    Fraction(0.05)
}
fn default_max_steps() -> u32 {
    8
}
fn default_step() -> Dur {
    Dur::secs(10)
}
fn default_warmup() -> Dur {
    Dur::secs(3)
}
fn default_overload() -> Vec<f64> {
    vec![1.5, 2.0]
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutingCriteria {
    /// Longest time from the fault until no new request reaches the dead endpoint.
    pub traffic_removal_max: Dur,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveryCriteria {
    /// Longest time from the fault until a replacement is ready and receiving traffic.
    pub ready_and_serving_max: Dur,
}

/// Bounds for the Overload verdict (Q10: degrade predictably, no cascade).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverloadCriteria {
    /// Most gateway attempts per request in an overload phase (1 = no retries); more
    /// is a retry cascade.
    #[serde(default = "default_amplification")]
    pub retry_amplification_max: f64,
    /// Longest p95 time to a rejection (429/503): shedding must be fast, not a queue
    /// that ends in a refusal. Default: `slo.ttft_p95`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection_p95_max: Option<Dur>,
}

fn default_amplification() -> f64 {
    1.25
}

impl Default for OverloadCriteria {
    fn default() -> Self {
        OverloadCriteria {
            retry_amplification_max: default_amplification(),
            rejection_p95_max: None,
        }
    }
}

/// Bounds for the Maintenance verdict (Q7: a planned drain).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceCriteria {
    /// Longest time from the start of the drain until the endpoint is out of rotation.
    pub removal_max: Dur,
}

/// The eight verdicts of Q13, by the names reports and `criteria.require` use. The one
/// table that runs them is `check::verdicts`: a verdict is judged by name there, in an
/// exhaustive match, never by a string. (Defined here, below `check`, so a scenario can
/// name the verdicts it requires.)
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum VerdictName {
    #[serde(rename = "Failure-Domain")]
    FailureDomain,
    Routing,
    #[serde(rename = "Request-Fate")]
    RequestFate,
    Capacity,
    Latency,
    Overload,
    Recovery,
    Maintenance,
}

impl VerdictName {
    /// Every verdict, in report order.
    pub const ALL: [VerdictName; 8] = [
        VerdictName::FailureDomain,
        VerdictName::Routing,
        VerdictName::RequestFate,
        VerdictName::Capacity,
        VerdictName::Latency,
        VerdictName::Overload,
        VerdictName::Recovery,
        VerdictName::Maintenance,
    ];

    /// The name reports and `criteria` use (`Failure-Domain`, `Request-Fate`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictName::FailureDomain => "Failure-Domain",
            VerdictName::Routing => "Routing",
            VerdictName::RequestFate => "Request-Fate",
            VerdictName::Capacity => "Capacity",
            VerdictName::Latency => "Latency",
            VerdictName::Overload => "Overload",
            VerdictName::Recovery => "Recovery",
            VerdictName::Maintenance => "Maintenance",
        }
    }
}

impl std::fmt::Display for VerdictName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for VerdictName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for VerdictName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
