//! `slo` and `policy`: the service objective and the expected request fate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::units::{Dur, Fraction};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// p95 time to first token.
    pub ttft_p95: Dur,
    /// p95 inter-token latency.
    pub itl_p95: Dur,
    /// p95 end-to-end latency.
    pub e2e_p95: Dur,
    /// Largest share of failed requests (not counting rejections).
    #[serde(default = "default_error_rate")]
    pub error_rate_max: Fraction,
    /// Largest share of rejected requests (429/503).
    #[serde(default = "default_error_rate")]
    pub rejection_rate_max: Fraction,
}

fn default_error_rate() -> Fraction {
    Fraction(0.01)
}

/// What may happen to a request caught by a failure, per stage (Q8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Sent to another replica before any work started.
    Reroute,
    /// Re-run from the start on another replica (legal only before the first delta).
    Retry,
    /// Continued on another replica, token-continuous.
    Migrate,
    /// Recomputed on the same replica after preemption.
    Recompute,
    /// Ended with the explicit error event.
    Fail,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FatePolicy {
    #[serde(default = "fate_reroute")]
    pub new: Fate,
    #[serde(default = "fate_retry")]
    pub queued: Fate,
    #[serde(default = "fate_retry")]
    pub prefill: Fate,
    /// Generating, nothing delivered to the client yet.
    #[serde(default = "fate_retry")]
    pub decode: Fate,
    /// At least one delta delivered to the client.
    #[serde(default = "fate_fail")]
    pub streaming: Fate,
    /// Shape of the explicit error event: `seed` (code `upstream_decode_interrupted`,
    /// request_id, partial_output, delivered_output_tokens, retryable).
    #[serde(default)]
    pub error_shape: ErrorShape,
}

fn fate_reroute() -> Fate {
    Fate::Reroute
}
fn fate_retry() -> Fate {
    Fate::Retry
}
fn fate_fail() -> Fate {
    Fate::Fail
}

impl Default for FatePolicy {
    fn default() -> Self {
        FatePolicy {
            new: Fate::Reroute,
            queued: Fate::Retry,
            prefill: Fate::Retry,
            decode: Fate::Retry,
            streaming: Fate::Fail,
            error_shape: ErrorShape::Seed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum ErrorShape {
    #[default]
    Seed,
}
