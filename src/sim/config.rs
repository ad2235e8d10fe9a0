//! The embedded cluster's configuration: its gateway (policy, budgets, timeouts), its
//! engine model and its tool service. The scenario's `target` embeds these types
//! (`target.gateway`, `target.engine`, `target.tools`); each sim process receives its
//! part as JSON on its command line.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Dur;

/// Failover policy of the embedded gateway: the reference (SPEC M1–M8) or one
/// deliberately flawed deviation, so that every checker is shown to catch its bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GatewayPolicy {
    /// The seed's policy: retry only before the first delivered delta and only after the
    /// failed attempt is fenced, explicit error after it, leases, shedding, drain-aware
    /// health checks.
    #[default]
    Reference,
    /// Flawed: retries after the first delta and stitches the new attempt onto the old.
    NaiveRetry,
    /// Flawed: ends an interrupted stream with a clean `[DONE]`.
    SilentTruncate,
    /// Flawed: fails over on `soft_timeout` of silence without fencing: two attempts
    /// publish into one stream.
    SoftTimeout,
    /// Flawed: no active health checks, failed workers stay in rotation.
    NoHealthCheck,
    /// Flawed: no admission limit, requests queue without bound, never a 429.
    NoShedding,
    /// Flawed: a draining worker's in-flight streams are cut instead of finishing.
    HardDrain,
    /// Flawed: tool-call idempotency keys derive from the attempt, so a retry executes
    /// the tool again.
    NoToolIdempotency,
    /// Flawed: the health check only opens a TCP connection to the worker's port, so a
    /// worker whose process listens but whose engine is dead or hung stays in rotation.
    TcpHealthCheck,
    /// The reference, but a stream whose worker is lost after its first delta goes on
    /// on another worker (Dynamo-style migration, Q9): the prompt re-sent with the
    /// delivered output appended, the answer continued from the next token.
    Migrate,
    /// Flawed: migrates, but re-sends the delivered output without its last delta (its
    /// copy lags one event behind the stream): the new worker repeats that token.
    MigrateLossy,
}

impl GatewayPolicy {
    /// Every policy, for help texts and tests.
    pub const ALL: [GatewayPolicy; 11] = [
        GatewayPolicy::Reference,
        GatewayPolicy::NaiveRetry,
        GatewayPolicy::SilentTruncate,
        GatewayPolicy::SoftTimeout,
        GatewayPolicy::NoHealthCheck,
        GatewayPolicy::NoShedding,
        GatewayPolicy::HardDrain,
        GatewayPolicy::NoToolIdempotency,
        GatewayPolicy::TcpHealthCheck,
        GatewayPolicy::Migrate,
        GatewayPolicy::MigrateLossy,
    ];

    /// The name used in scenarios (`naive-retry`, …).
    pub fn name(self) -> &'static str {
        match self {
            GatewayPolicy::Reference => "reference",
            GatewayPolicy::NaiveRetry => "naive-retry",
            GatewayPolicy::SilentTruncate => "silent-truncate",
            GatewayPolicy::SoftTimeout => "soft-timeout",
            GatewayPolicy::NoHealthCheck => "no-health-check",
            GatewayPolicy::NoShedding => "no-shedding",
            GatewayPolicy::HardDrain => "hard-drain",
            GatewayPolicy::NoToolIdempotency => "no-tool-idempotency",
            GatewayPolicy::TcpHealthCheck => "tcp-health-check",
            GatewayPolicy::Migrate => "migrate",
            GatewayPolicy::MigrateLossy => "migrate-lossy",
        }
    }

    /// A stream cut after its first delta goes on on another worker.
    pub fn migrates(self) -> bool {
        matches!(self, GatewayPolicy::Migrate | GatewayPolicy::MigrateLossy)
    }
}

/// The embedded gateway (docs/sim.md, "Gateway").
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayCfg {
    #[serde(default)]
    pub policy: GatewayPolicy,
    /// Extra attempts allowed per request (M8); 0 disables retries.
    #[serde(default = "default_retry_budget")]
    pub retry_budget: u32,
    /// Global retry budget: each admitted request adds this many retry tokens (M8: a
    /// mass failure must not become a retry storm).
    #[serde(default = "default_retry_ratio")]
    pub retry_ratio: f64,
    /// Most retry tokens the global budget holds (also its initial content).
    #[serde(default = "default_retry_burst")]
    pub retry_burst: u32,
    /// A retry whose re-prefill exceeds this many prompt tokens fails fast with a
    /// managed error instead (M8).
    #[serde(default = "default_retry_max_prompt_tokens")]
    pub retry_max_prompt_tokens: u32,
    /// Active health check (`GET /ready`) period.
    #[serde(default = "default_health_interval")]
    pub health_interval: Dur,
    /// Consecutive failed checks before a worker is taken out of rotation.
    #[serde(default = "default_health_failures")]
    pub health_failures: u32,
    /// How long one health check may take before it counts as failed (default: the
    /// larger of `health_interval` and 200 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_timeout: Option<Dur>,
    /// Publication lease of an attempt (M5); renewed every third of it while the worker
    /// answers.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: Dur,
    /// Silence after which an upstream counts as slow (journaled; the flawed
    /// `soft-timeout` policy fails over on it).
    #[serde(default = "default_soft_timeout")]
    pub soft_timeout: Dur,
    /// Silence after which a reachable upstream is given up (revoked, then retried or
    /// ended with the explicit error).
    #[serde(default = "default_upstream_timeout")]
    pub upstream_timeout: Dur,
    /// Time limit of the deep health check (`GET /health_generate`: the engine steps,
    /// or computes one token): a worker that fails it is out of rotation and its
    /// attempts are given up (a dead or hung engine behind a live process). Longer than
    /// any step a merely slow engine takes: slow is not dead (M4).
    #[serde(default = "default_stall_timeout")]
    pub stall_timeout: Dur,
    /// TCP connect timeout to a worker.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Requests in flight per ready worker before new ones wait in the gateway queue.
    #[serde(default = "default_max_inflight")]
    pub max_inflight_per_worker: u32,
    /// Queue length beyond which protected requests are shed with 429 (Q10).
    #[serde(default = "default_queue_limit")]
    pub queue_limit: u32,
    /// Queue length beyond which best-effort requests are shed; protected requests also
    /// evict queued best-effort ones.
    #[serde(default = "default_best_effort_queue_limit")]
    pub best_effort_queue_limit: u32,
    /// Longest wait in the gateway queue before a 503.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout: Dur,
    /// `Retry-After` sent with 429 and 503.
    #[serde(default = "default_retry_after")]
    pub retry_after: Dur,
}

fn default_retry_budget() -> u32 {
    1
}
fn default_retry_ratio() -> f64 {
    0.2
}
fn default_retry_burst() -> u32 {
    20
}
fn default_retry_max_prompt_tokens() -> u32 {
    32_768
}
fn default_health_interval() -> Dur {
    Dur::millis(250)
}
fn default_health_failures() -> u32 {
    2
}
fn default_lease_ttl() -> Dur {
    Dur::millis(1500)
}
fn default_soft_timeout() -> Dur {
    Dur::millis(1000)
}
fn default_upstream_timeout() -> Dur {
    Dur::secs(30)
}
fn default_stall_timeout() -> Dur {
    Dur::secs(2)
}
fn default_connect_timeout() -> Dur {
    Dur::millis(1000)
}
fn default_max_inflight() -> u32 {
    256
}
fn default_queue_limit() -> u32 {
    256
}
fn default_best_effort_queue_limit() -> u32 {
    64
}
fn default_queue_timeout() -> Dur {
    Dur::secs(10)
}
fn default_retry_after() -> Dur {
    Dur::secs(1)
}

impl GatewayCfg {
    /// One health check's time limit.
    pub fn health_timeout(&self) -> Duration {
        self.health_timeout
            .map(|d| d.0)
            .unwrap_or_else(|| self.health_interval.0.max(Duration::from_millis(200)))
    }
}

impl Default for GatewayCfg {
    fn default() -> Self {
        GatewayCfg {
            policy: GatewayPolicy::default(),
            retry_budget: default_retry_budget(),
            retry_ratio: default_retry_ratio(),
            retry_burst: default_retry_burst(),
            retry_max_prompt_tokens: default_retry_max_prompt_tokens(),
            health_interval: default_health_interval(),
            health_failures: default_health_failures(),
            health_timeout: None,
            lease_ttl: default_lease_ttl(),
            soft_timeout: default_soft_timeout(),
            upstream_timeout: default_upstream_timeout(),
            stall_timeout: default_stall_timeout(),
            connect_timeout: default_connect_timeout(),
            max_inflight_per_worker: default_max_inflight(),
            queue_limit: default_queue_limit(),
            best_effort_queue_limit: default_best_effort_queue_limit(),
            queue_timeout: default_queue_timeout(),
            retry_after: default_retry_after(),
        }
    }
}

/// Performance model of a simulated engine replica: a continuous-batching engine
/// calibrated to an 8B dense model in BF16 on one H100-class GPU (docs/sim.md has the
/// numbers and their sources).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineCfg {
    /// Prefill throughput in prompt tokens per second.
    #[serde(default = "default_prefill_tps")]
    pub prefill_tokens_per_s: f64,
    /// Speed scale of the modelled GPU: every step time below is divided by it and the
    /// prefill throughput multiplied (2: twice as fast, twice the capacity; 0.1: a
    /// model whose capacity fits a laptop's load generator). Start-up times and the
    /// limits (sequences, tokens, KV cache) are not scaled.
    #[serde(default = "default_speed")]
    pub speed: f64,
    /// Fixed cost of one engine step (weights read, launch overhead).
    #[serde(default = "default_step_base")]
    pub decode_step: Dur,
    /// Added step time per sequence decoding in the batch.
    #[serde(default = "default_step_per_seq")]
    pub decode_step_per_seq: Dur,
    /// Added step time per 1000 tokens of context read by the decoding sequences
    /// (attention over the KV cache).
    #[serde(default = "default_step_per_1k_ctx")]
    pub decode_step_per_1k_context: Dur,
    /// Most sequences scheduled at once; more wait in the queue.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: u32,
    /// Token budget of one step (decode tokens + prefill chunks: chunked prefill).
    #[serde(default = "default_max_batched_tokens")]
    pub max_num_batched_tokens: u32,
    /// KV cache capacity in tokens (rounded down to whole blocks).
    #[serde(default = "default_kv_tokens")]
    pub kv_cache_tokens: u32,
    /// Tokens per KV block (the prefix cache hashes whole blocks).
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// Longest prompt + output accepted; longer requests get HTTP 400.
    #[serde(default = "default_max_model_len")]
    pub max_model_len: u32,
    /// Automatic prefix caching (M6).
    #[serde(default = "yes")]
    pub prefix_caching: bool,
    /// Model load time at first start, before the worker is ready.
    #[serde(default = "default_startup")]
    pub startup: Dur,
    /// Model load time of a replacement worker (a restart after a failure): the cost of
    /// a cold replacement (Q6, Q11).
    #[serde(default = "default_cold_start")]
    pub cold_start: Dur,
    /// Longest SIGTERM drain before the worker exits anyway.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: Dur,
    /// Weights revision reported in `x-haq-model-revision` and `/v1/models` (M1, M6).
    #[serde(default = "default_revision")]
    pub revision: String,
    /// Argument tokens of a tool call (requests with `tools`).
    #[serde(default = "default_tool_call_tokens")]
    pub tool_call_tokens: u32,
    /// GPUs of one replica's tensor-parallel group: the failure domain of a `gpu`
    /// fault (one GPU's loss takes the whole replica). The step-time model is the
    /// calibrated one whatever the size (set its knobs to your TP group's figures).
    #[serde(default = "default_tp")]
    pub tensor_parallel_size: u32,
    /// Flawed (M6): a request whose prompt hit the prefix cache is answered from a
    /// corrupted cache — another answer than the same prompt computed afresh.
    #[serde(default)]
    pub corrupt_prefix_cache: bool,
}

fn yes() -> bool {
    true
}
fn default_speed() -> f64 {
    1.0
}
fn default_prefill_tps() -> f64 {
    20_000.0
}
fn default_step_base() -> Dur {
    Dur(Duration::from_micros(6_500))
}
fn default_step_per_seq() -> Dur {
    Dur(Duration::from_micros(40))
}
fn default_step_per_1k_ctx() -> Dur {
    Dur(Duration::from_micros(55))
}
fn default_max_num_seqs() -> u32 {
    1024
}
fn default_max_batched_tokens() -> u32 {
    8192
}
fn default_kv_tokens() -> u32 {
    400_000
}
fn default_block_size() -> u32 {
    16
}
fn default_max_model_len() -> u32 {
    131_072
}
fn default_startup() -> Dur {
    Dur::millis(200)
}
fn default_cold_start() -> Dur {
    Dur::secs(30)
}
fn default_drain_timeout() -> Dur {
    Dur::secs(30)
}
fn default_revision() -> String {
    "haq-sim-8b-bf16-r1".into()
}
fn default_tool_call_tokens() -> u32 {
    12
}
fn default_tp() -> u32 {
    1
}

impl Default for EngineCfg {
    fn default() -> Self {
        EngineCfg {
            prefill_tokens_per_s: default_prefill_tps(),
            speed: default_speed(),
            decode_step: default_step_base(),
            decode_step_per_seq: default_step_per_seq(),
            decode_step_per_1k_context: default_step_per_1k_ctx(),
            max_num_seqs: default_max_num_seqs(),
            max_num_batched_tokens: default_max_batched_tokens(),
            kv_cache_tokens: default_kv_tokens(),
            block_size: default_block_size(),
            max_model_len: default_max_model_len(),
            prefix_caching: true,
            startup: default_startup(),
            cold_start: default_cold_start(),
            drain_timeout: default_drain_timeout(),
            revision: default_revision(),
            tool_call_tokens: default_tool_call_tokens(),
            tensor_parallel_size: default_tp(),
            corrupt_prefix_cache: false,
        }
    }
}

impl EngineCfg {
    /// The configuration a replacement worker starts with: `startup` is the cold start.
    pub fn for_replacement(&self) -> EngineCfg {
        EngineCfg {
            startup: self.cold_start,
            ..self.clone()
        }
    }
}

/// The tool service (`haq sim tools`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsCfg {
    /// Deduplicate executions by idempotency key (M7). `false` is a flawed tool service.
    #[serde(default = "yes")]
    pub dedup: bool,
    /// How long one execution takes.
    #[serde(default = "default_tool_exec")]
    pub exec_time: Dur,
}

fn default_tool_exec() -> Dur {
    Dur::millis(20)
}

impl Default for ToolsCfg {
    fn default() -> Self {
        ToolsCfg {
            dedup: true,
            exec_time: default_tool_exec(),
        }
    }
}
