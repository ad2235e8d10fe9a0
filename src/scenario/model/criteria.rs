//! `criteria`: bounds the verdicts use.

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
