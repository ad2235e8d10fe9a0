//! `target`: the system under test (the sim, or a URL).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scenario::units::Dur;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// haq's embedded simulated cluster (worker processes + gateway on loopback).
    Sim,
    /// Any OpenAI-compatible endpoint.
    Url,
}

/// The system under test.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub kind: TargetKind,
    /// `sim`: number of worker processes to start.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// `url`: base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:8000/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Model name sent in requests.
    #[serde(default = "default_model")]
    pub model: String,
    /// Extra request headers (e.g. an API key for staging).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `sim`: the gateway in front of the workers.
    #[serde(default)]
    pub gateway: GatewayCfg,
    /// `sim`: the workers' performance model.
    #[serde(default)]
    pub engine: EngineCfg,
}

fn default_replicas() -> u32 {
    3
}
fn default_model() -> String {
    "haq-sim-8b".into()
}

/// Failover policy of the embedded gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GatewayPolicy {
    /// The seed's policy: retry only before the first delivered delta, explicit error after.
    #[default]
    Reference,
    /// Flawed: retries after the first delta and stitches the new attempt onto the old.
    NaiveRetry,
    /// Flawed: ends an interrupted stream with a clean `[DONE]`.
    SilentTruncate,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayCfg {
    #[serde(default)]
    pub policy: GatewayPolicy,
    /// Extra attempts allowed per request (M8); 0 disables retries.
    #[serde(default = "default_retry_budget")]
    pub retry_budget: u32,
    /// Active health check period.
    #[serde(default = "default_health_interval")]
    pub health_interval: Dur,
    /// Consecutive failed checks before a worker is taken out of rotation.
    #[serde(default = "default_health_failures")]
    pub health_failures: u32,
}

fn default_retry_budget() -> u32 {
    1
}
fn default_health_interval() -> Dur {
    Dur::millis(250)
}
fn default_health_failures() -> u32 {
    2
}

impl Default for GatewayCfg {
    fn default() -> Self {
        GatewayCfg {
            policy: GatewayPolicy::default(),
            retry_budget: default_retry_budget(),
            health_interval: default_health_interval(),
            health_failures: default_health_failures(),
        }
    }
}

/// Performance model of a simulated engine replica.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineCfg {
    /// Prefill throughput in prompt tokens per second.
    #[serde(default = "default_prefill_tps")]
    pub prefill_tokens_per_s: f64,
    /// Decode step time with one running sequence.
    #[serde(default = "default_step_base")]
    pub decode_step: Dur,
    /// Added step time per additional running sequence.
    #[serde(default = "default_step_per_seq")]
    pub decode_step_per_seq: Dur,
    /// Most sequences decoded at once; more wait in the queue.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: u32,
    /// Model load time before the worker is ready.
    #[serde(default = "default_startup")]
    pub startup: Dur,
}

fn default_prefill_tps() -> f64 {
    12_000.0
}
fn default_step_base() -> Dur {
    Dur::millis(15)
}
fn default_step_per_seq() -> Dur {
    Dur(std::time::Duration::from_micros(150))
}
fn default_max_num_seqs() -> u32 {
    64
}
fn default_startup() -> Dur {
    Dur::millis(200)
}

impl Default for EngineCfg {
    fn default() -> Self {
        EngineCfg {
            prefill_tokens_per_s: default_prefill_tps(),
            decode_step: default_step_base(),
            decode_step_per_seq: default_step_per_seq(),
            max_num_seqs: default_max_num_seqs(),
            startup: default_startup(),
        }
    }
}
