//! `criteria`: bounds the verdicts use. Every section is optional: a verdict without a
//! bound still judges what SPEC Q13 asks (traffic stopped, a replacement served, a
//! drain lost nothing) and reports the measured times.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::units::Dur;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Criteria {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overload: Option<OverloadCriteria>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceCriteria>,
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
