//! `slo` and `policy`: the service objective and the expected request fate.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::{Dur, Fraction};

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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Sent to another replica before any work started.
    Reroute,
    /// Re-run from the start on another replica (legal only before the first delta).
    Retry,
    /// Continued on another replica, token-continuous (Dynamo-style: re-prefill of the
    /// prompt plus the tokens already generated, then the next token).
    Migrate,
    /// Recomputed on the same replica after preemption.
    Recompute,
    /// Ended with the explicit error event.
    Fail,
}

impl Fate {
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Reroute => "reroute",
            Fate::Retry => "retry",
            Fate::Migrate => "migrate",
            Fate::Recompute => "recompute",
            Fate::Fail => "fail",
        }
    }
}

/// The declared request-fate matrix (Q8): for each stage a request can be in when a
/// failure hits it, what must happen to it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FatePolicy {
    /// Accepted by the gateway, not yet sent to any replica.
    #[serde(default = "fate_reroute")]
    pub new: Fate,
    /// Waiting in a replica's queue.
    #[serde(default = "fate_retry")]
    pub queued: Fate,
    /// Prompt being processed; nothing generated yet.
    #[serde(default = "fate_retry")]
    pub prefill: Fate,
    /// Generating, nothing delivered to the client yet.
    #[serde(default = "fate_retry")]
    pub decode: Fate,
    /// At least one delta delivered to the client.
    #[serde(default = "fate_fail")]
    pub streaming: Fate,
    /// Shape of the explicit error event: `seed` (code `upstream_decode_interrupted`,
    /// request_id, partial_output true, delivered_output_tokens, retryable false), or a
    /// gateway's own documented shape (`{required: [...], equals: {...},
    /// delivered_tokens: path}`).
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

/// The explicit error event a stream cut after its first delta must end with (M3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "ErrorShapeRepr", into = "ErrorShapeRepr")]
pub enum ErrorShape {
    /// The seed's shape: `{"error": {"code": "upstream_decode_interrupted",
    /// "request_id": …, "partial_output": true, "delivered_output_tokens": N,
    /// "retryable": false}}`, N equal to the deltas the client received.
    #[default]
    Seed,
    /// A gateway's own documented shape.
    Custom(CustomErrorShape),
}

/// A gateway's own error shape. Paths are dotted (`error.code`, `detail.0.msg`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomErrorShape {
    /// Fields that must be present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
    /// Fields that must hold exactly these values, e.g. `{error.code: upstream_error}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub equals: BTreeMap<String, serde_json::Value>,
    /// Field holding the number of delivered output tokens; compared with the deltas
    /// the client received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_tokens: Option<String>,
}

/// How an error shape is written: `seed`, or the custom map.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ErrorShapeRepr {
    /// `seed`
    Name(String),
    Custom(CustomErrorShape),
}

impl TryFrom<ErrorShapeRepr> for ErrorShape {
    type Error = String;
    fn try_from(r: ErrorShapeRepr) -> Result<Self, String> {
        match r {
            ErrorShapeRepr::Name(n) if n == "seed" => Ok(ErrorShape::Seed),
            ErrorShapeRepr::Name(n) => Err(format!(
                "unknown error shape `{n}`: use `seed` or a map {{required: [paths], equals: {{path: value}}, delivered_tokens: path}}"
            )),
            ErrorShapeRepr::Custom(c) if c.required.is_empty() && c.equals.is_empty() => Err(
                "a custom error shape needs `required` or `equals` (else any error would pass)"
                    .into(),
            ),
            ErrorShapeRepr::Custom(c) => Ok(ErrorShape::Custom(c)),
        }
    }
}

impl From<ErrorShape> for ErrorShapeRepr {
    fn from(s: ErrorShape) -> Self {
        match s {
            ErrorShape::Seed => ErrorShapeRepr::Name("seed".into()),
            ErrorShape::Custom(c) => ErrorShapeRepr::Custom(c),
        }
    }
}
