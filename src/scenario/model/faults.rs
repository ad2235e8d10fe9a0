//! `phases` and `faults`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::{Dur, Rate};

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
    /// A step of a capacity search (its warm-up and judged step, each a run of its
    /// own): judged by the Capacity verdict, not against the Latency envelope.
    Capacity,
    /// Load that lets a backlog drain, judged by no verdict's envelope.
    Settle,
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

/// The failure domains of Q3: what one fault stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum FailureDomain {
    /// The engine process of a replica.
    Process,
    /// One GPU: the engine process serving it.
    Gpu,
    /// A whole replica (worker).
    #[default]
    Worker,
    /// Every replica declared on one node, together.
    Node,
    /// The network path between gateway and replica; the replica stays alive.
    Network,
    /// A planned drain: stop admission, finish in-flight work, then exit (Q7).
    Drain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultBackend {
    /// Signals to local processes: the sim's workers, or declared pids / pid files.
    #[default]
    Process,
    /// haq's interposition proxy between the gateway and the replica.
    Proxy,
    /// Your own shell commands (inject / verify / heal) with haq's context in env vars.
    Command,
    /// The Kubernetes API (`kind: kubernetes` targets): delete or evict pods, cordon
    /// nodes, isolate pods with a NetworkPolicy, exec commands in a pod's container (a
    /// kill, a freeze, a lost GPU, a slow replica) and their heal.
    Kubernetes,
    /// The sim worker's engine, through its admin API (`kind: sim`): a lost GPU behind
    /// a live process, a hung engine, a slow one.
    Engine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    /// process: SIGKILL, a crash (the default for the process backend).
    Kill,
    /// process: SIGTERM, a planned drain (domain `drain`).
    Drain,
    /// process: SIGSTOP, a frozen replica; healed with SIGCONT. kubernetes: the `exec`
    /// commands (e.g. SIGSTOP of the engine core only, SIGCONT to heal).
    Freeze,
    /// proxy: abort the replica's connections with RST (open ones at once, new ones
    /// while the fault lasts).
    Reset,
    /// proxy: close the replica's connections with FIN (likewise).
    Close,
    /// proxy: forward nothing either way and keep the sockets open: the replica is
    /// alive but unreachable.
    Blackhole,
    /// proxy: add `delay` to every byte, both ways.
    Delay,
    /// proxy: cap the path at `bytes_per_s`, each way.
    Throttle,
    /// command: what your `command.inject` does (the default for that backend).
    Command,
    /// engine: the GPU is lost (XID 79, ECC): the engine core dies while the API server
    /// process stays up — in-flight streams end with the engine's error, new requests
    /// get 500, `/health` fails, `/metrics` is still served. In a TP group one GPU's
    /// loss takes the whole replica. Healed by restarting the engine in place (cold
    /// prefix cache). kubernetes: the `exec` commands (e.g. a kill of the engine core
    /// with the API server kept alive).
    GpuLost,
    /// engine: the engine stops stepping (a hung GPU or NCCL collective): every stream
    /// of the replica stalls, sockets are still accepted, `/health` passes or times
    /// out (`health`). Healed by resuming it.
    GpuHang,
    /// engine: every engine step takes `factor` times as long (a throttled GPU, a noisy
    /// neighbour): slow is not dead (M4). Healed by factor 1. kubernetes: the `exec`
    /// commands (e.g. `tc qdisc add dev eth0 root netem delay 50ms`).
    Slow,
}

/// How a hung engine's health endpoints behave (`gpu_hang`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum HangHealth {
    /// `/health` and `/ready` keep answering 200: the gray failure health checks miss.
    #[default]
    Pass,
    /// `/health` and `/ready` never answer while the engine hangs (the checker's
    /// timeout fails them).
    Timeout,
}

impl HangHealth {
    pub fn as_str(self) -> &'static str {
        match self {
            HangHealth::Pass => "pass",
            HangHealth::Timeout => "timeout",
        }
    }
}

impl PhaseKind {
    /// The name scenarios, traces and reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseKind::Baseline => "baseline",
            PhaseKind::Fault => "fault",
            PhaseKind::Degraded => "degraded",
            PhaseKind::Recovery => "recovery",
            PhaseKind::Overload => "overload",
            PhaseKind::Drain => "drain",
            PhaseKind::Recovered => "recovered",
            PhaseKind::Capacity => "capacity",
            PhaseKind::Settle => "settle",
        }
    }
}

impl std::fmt::Display for PhaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FailureDomain {
    /// The name scenarios and traces use.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureDomain::Process => "process",
            FailureDomain::Gpu => "gpu",
            FailureDomain::Worker => "worker",
            FailureDomain::Node => "node",
            FailureDomain::Network => "network",
            FailureDomain::Drain => "drain",
        }
    }
}

impl FaultBackend {
    /// The name scenarios and traces use.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultBackend::Process => "process",
            FaultBackend::Proxy => "proxy",
            FaultBackend::Command => "command",
            FaultBackend::Kubernetes => "kubernetes",
            FaultBackend::Engine => "engine",
        }
    }
}

impl std::fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for FaultAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for FaultBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FaultAction {
    /// The name scenarios and traces use.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultAction::Kill => "kill",
            FaultAction::Drain => "drain",
            FaultAction::Freeze => "freeze",
            FaultAction::Reset => "reset",
            FaultAction::Close => "close",
            FaultAction::Blackhole => "blackhole",
            FaultAction::Delay => "delay",
            FaultAction::Throttle => "throttle",
            FaultAction::Command => "command",
            FaultAction::GpuLost => "gpu_lost",
            FaultAction::GpuHang => "gpu_hang",
            FaultAction::Slow => "slow",
        }
    }

    /// The backend that applies this action.
    pub fn backend(self) -> FaultBackend {
        match self {
            FaultAction::Kill | FaultAction::Drain | FaultAction::Freeze => FaultBackend::Process,
            FaultAction::Command => FaultBackend::Command,
            FaultAction::GpuLost | FaultAction::GpuHang | FaultAction::Slow => FaultBackend::Engine,
            _ => FaultBackend::Proxy,
        }
    }

    /// Undone by haq when the fault's `duration` ends (or at the end of the run).
    pub fn reversible(self) -> bool {
        !matches!(self, FaultAction::Kill | FaultAction::Drain)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Name used in the trace and the report; defaults to `<action>-<target>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The failure domain this fault stands for (Q3).
    #[serde(default)]
    pub domain: FailureDomain,
    #[serde(default)]
    pub backend: FaultBackend,
    /// Defaults to `kill` (process backend) or `command` (command backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<FaultAction>,
    /// Which replica, or which node (all its replicas). With a probe trigger it may be
    /// left out: the fault then hits the replica serving the probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<FaultTarget>,
    /// When: a phase and an offset into it. With `when`, the condition is awaited
    /// from this point on.
    pub at: At,
    /// A condition that fires the fault: a point of a probe request's token loop, or
    /// a load level on the target replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    /// How long a reversible fault (freeze, proxy rules, a command with `heal`) lasts
    /// before haq heals it; default: until the end of the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
    /// `delay`: latency added to every byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Dur>,
    /// `throttle`: bytes per second allowed each way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_s: Option<u64>,
    /// `slow` of the engine backend: how many times as long every engine step takes
    /// (above 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// `gpu_hang`: whether the hung replica's health endpoints still pass (default) or
    /// time out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HangHealth>,
    /// Start a replacement after a kill or drain (Q6, Q11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    /// `command` backend: the commands to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSpec>,
    /// `kubernetes` backend, domain `process` or `gpu` `kill`: the command exec'd in
    /// the engine's container to kill the engine (one GPU's engine, or the whole TP
    /// group), e.g. `[pkill, -KILL, -f, llama-server]`. A container's PID 1 ignores a
    /// SIGKILL sent from inside its own PID namespace: kill a child of it, or share
    /// the pod's process namespace (docs/kubernetes.md). `freeze`, `gpu_lost` and
    /// `slow` (and a `kill` with a verify of its own) take `{inject, verify, heal,
    /// container, timeout}`: e.g. a hung engine core, `inject: [pkill, -STOP, -f,
    /// EngineCore]`, `heal: [pkill, -CONT, -f, EngineCore]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<super::kubernetes::KubeExec>,
    /// `kubernetes` backend, domain `network`: also reset the connections established
    /// before the NetworkPolicy, which many CNIs let live on (conntrack): `proxy`
    /// (haq's proxy in front of the replica resets its connections of it) or
    /// `{exec: [ss, -K, …], container: C}` (a command exec'd in the pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_connections: Option<super::kubernetes::ResetConnections>,
    /// `kubernetes` backend, `worker` kill: the pod's grace period — `pod` (its own
    /// `terminationGracePeriodSeconds`: SIGTERM first) or seconds. Default 0 (SIGKILL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<super::kubernetes::KubeGrace>,
    /// Check that the fault took effect (default true). Unverified faults make
    /// Failure-Domain fail.
    #[serde(default = "yes")]
    pub verify: bool,
}

fn yes() -> bool {
    true
}

/// Exactly one of `replica` or `node`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// Every replica declared on this node (domain `node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Domain `gpu`: which GPU of the replica's tensor-parallel group (from 0, below
    /// `target.engine.tensor_parallel_size`); its loss takes the whole replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct At {
    pub phase: String,
    #[serde(default)]
    pub offset: Dur,
}

/// A point of a probe request's token loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbePoint {
    /// The probe reached the replica's path but the engine has not seen it yet (the
    /// proxy holds it while the fault is applied).
    Queued,
    /// The engine has the whole request; nothing of its response has left the
    /// replica's path (the proxy holds the response from its first byte).
    Prefill,
    /// Event k (1-based) was computed and written by the engine but not yet received
    /// by the gateway (the proxy holds it, the fault is applied, the event is dropped).
    ComputedNotSent(u32),
    /// Right after the first delta reached the client.
    FirstDelta,
    /// Right after k deltas reached the client.
    AfterDeltas(u32),
    /// Right after a tool call ran: the probe offers a tool; the engine streams the
    /// call once the tool service executed it, and the proxy holds that first
    /// tool-call delta while the fault is applied.
    ToolCall,
}

/// How a probe point is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// haq's proxy holds the probe at the point while the fault is applied (any engine).
    #[default]
    Proxy,
    /// The sim worker's own fault hook crashes it at the exact engine point
    /// (`prefill`, `computed_not_sent`, `tool_call`; action `kill`).
    Hook,
}

impl ProbePoint {
    pub fn describe(self) -> String {
        match self {
            ProbePoint::Queued => "queued".into(),
            ProbePoint::Prefill => "prefill".into(),
            ProbePoint::ComputedNotSent(k) => format!("computed_not_sent k={k}"),
            ProbePoint::FirstDelta => "first_delta".into(),
            ProbePoint::AfterDeltas(k) => format!("after_deltas k={k}"),
            ProbePoint::ToolCall => "tool_call".into(),
        }
    }
}

/// What fires a fault after `at` (one of `probe` or `in_flight`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// Send a probe request at `at` and fire when it reaches this point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbePoint>,
    /// Fire when at least this many requests are in flight on the target replica
    /// (counted by haq's proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u32>,
    /// Longest wait for the condition; if it never comes the fault is recorded as not
    /// applied (Failure-Domain fails). Default 30s.
    #[serde(default = "default_within")]
    pub within: Dur,
    /// Probe prompt length in tokens (a long prompt makes a long prefill). Default: the
    /// typical prompt of the workload's first class (1024 when its lengths come from a
    /// file), so a probe fits the engine the workload fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Probe output length in tokens. Default: the typical output of the workload's
    /// first class (64 when its lengths come from a file), at least the probe point's
    /// delta count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// How the probe point is reached: `proxy` (default) or the sim worker's `hook`.
    #[serde(default)]
    pub via: Via,
}

fn default_within() -> Dur {
    Dur::secs(30)
}
/// Probe lengths when the workload gives no typical one (lengths read from a file).
pub const PROBE_PROMPT_FALLBACK: u32 = 1024;
pub const PROBE_OUTPUT_FALLBACK: u32 = 64;

/// A replacement for a removed replica.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Restart {
    /// Wait this long after the removal before asking for the replacement.
    #[serde(default)]
    pub after: Dur,
    /// sim: the replacement's model-load time (default: `target.engine.startup`);
    /// command: passed as `HAQ_COLD_START_MS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<Dur>,
    /// url targets: the shell command that starts the replacement (default: the
    /// replica's `process.restart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Longest wait for the replacement to become ready.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout: Dur,
}

fn default_ready_timeout() -> Dur {
    Dur::secs(120)
}

/// `command` backend. Each runs with `sh -c` and these variables: `HAQ_FAULT`,
/// `HAQ_DOMAIN`, `HAQ_REPLICA`, `HAQ_NODE`, `HAQ_PID`, `HAQ_UPSTREAM`, `HAQ_LISTEN`,
/// `HAQ_PROBE_ID`, `HAQ_RUN_DIR`, `HAQ_SEED`, `HAQ_T_US` (trace time); for a kubernetes
/// replica also `HAQ_POD`, `HAQ_NAMESPACE`, `HAQ_CONTAINER`, `HAQ_KUBE_CONTEXT`,
/// `HAQ_GPU_IDS`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    /// Applies the fault (exit 0 = applied).
    pub inject: String,
    /// Proves it took effect (exit 0 = verified); its output goes in the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// Undoes it; run when `duration` ends, at the end of the run, on error and on
    /// interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal: Option<String>,
    /// Longest time each command may take.
    #[serde(default = "default_command_timeout")]
    pub timeout: Dur,
}

fn default_command_timeout() -> Dur {
    Dur::secs(30)
}
