//! `workload`: the request mix and its arrival process.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::scenario::units::Rate;

/// The request mix and its arrival process.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Seed of every random choice (arrivals, classes, lengths). Same seed, same requests.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Request classes: inline, or a path to a workload file (relative to the scenario).
    pub mix: MixRef,
    #[serde(default)]
    pub arrival: Arrival,
}

fn default_seed() -> u64 {
    1
}

/// A mix written inline or the path of a `workloads/*.yaml` file holding one.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum MixRef {
    Inline(Mix),
    File(String),
}

impl<'de> Deserialize<'de> for MixRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The loader inlines files before typed deserialization; both shapes stay
        // accepted so a recorded effective scenario reads back.
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(MixRef::File(s)),
            v @ serde_json::Value::Object(_) => serde_json::from_value(v)
                .map(MixRef::Inline)
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "expected a mix (a map with `classes`) or a workload file path, got {other}"
            ))),
        }
    }
}

/// A request mix: weighted classes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub classes: Vec<RequestClass>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    #[default]
    Chat,
    Completions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Counts toward the protected load: must be served through the fault.
    #[default]
    Protected,
    /// May be shed first under overload.
    BestEffort,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestClass {
    pub name: String,
    #[serde(default = "default_weight")]
    pub weight: f64,
    #[serde(default)]
    pub api: Api,
    /// Prompt length in tokens.
    pub prompt_tokens: Dist,
    /// Output length in tokens (sent as `max_tokens`).
    pub output_tokens: Dist,
    #[serde(default)]
    pub priority: Priority,
}

fn default_weight() -> f64 {
    1.0
}

/// A length distribution: a number (fixed) or one of `{uniform: [min, max]}`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Fixed(u32),
    Uniform([u32; 2]),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum DistSpec {
    Fixed(u32),
    Uniform([u32; 2]),
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if let Some(n) = v.as_u64() {
            return u32::try_from(n)
                .map(Dist::Fixed)
                .map_err(|_| serde::de::Error::custom(format!("{n} is too large")));
        }
        let spec: DistSpec = serde_json::from_value(v.clone()).map_err(|e| {
            serde::de::Error::custom(format!(
                "expected a token count or one of {{fixed: N}}, {{uniform: [min, max]}}; got {v} ({e})"
            ))
        })?;
        Ok(match spec {
            DistSpec::Fixed(n) => Dist::Fixed(n),
            DistSpec::Uniform(r) => Dist::Uniform(r),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times (open loop).
    #[default]
    Poisson,
    /// Evenly spaced arrivals.
    Constant,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    #[serde(default)]
    pub process: ArrivalProcess,
    /// Offered rate; defaults to `protected_load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
}
