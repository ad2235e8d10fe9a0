//! The scenario file as the user writes it (serde + JSON Schema). Every struct denies
//! unknown fields; defaults live here, semantic checks in `validate.rs`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::units::{Dur, Fraction, Rate};

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
    /// Bounds used by the verdicts.
    #[serde(default)]
    pub criteria: Criteria,
    /// Client timeouts.
    #[serde(default)]
    pub client: ClientCfg,
    /// Outputs.
    #[serde(default)]
    pub report: ReportCfg,
}

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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCfg {
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Longest wait for the first event after the request was sent.
    #[serde(default = "default_first_token_timeout")]
    pub first_token_timeout: Dur,
    /// Longest silence between two events of a stream.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Dur,
    /// After the last phase, how long in-flight requests may take to finish.
    #[serde(default = "default_drain")]
    pub drain_timeout: Dur,
}

fn default_connect_timeout() -> Dur {
    Dur::secs(5)
}
fn default_first_token_timeout() -> Dur {
    Dur::secs(60)
}
fn default_idle_timeout() -> Dur {
    Dur::secs(30)
}
fn default_drain() -> Dur {
    Dur::secs(60)
}

impl Default for ClientCfg {
    fn default() -> Self {
        ClientCfg {
            connect_timeout: default_connect_timeout(),
            first_token_timeout: default_first_token_timeout(),
            idle_timeout: default_idle_timeout(),
            drain_timeout: default_drain(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    Terminal,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportCfg {
    #[serde(default = "default_formats")]
    pub formats: Vec<ReportFormat>,
}

fn default_formats() -> Vec<ReportFormat> {
    vec![ReportFormat::Terminal, ReportFormat::Json]
}

impl Default for ReportCfg {
    fn default() -> Self {
        ReportCfg {
            formats: default_formats(),
        }
    }
}
