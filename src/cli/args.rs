//! The command line's arguments (clap derive).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::scenario::GatewayPolicy;
use crate::wire;

/// haq — qualifies LLM inference clusters for high availability.
///
/// Replays a production-like request mix at the protected load against an
/// OpenAI-compatible streaming endpoint, breaks things at chosen points of the token
/// loop, and judges eight verdicts from what the client measured.
///
/// Exit codes: 0 every verdict PASS · 1 any FAIL (or UNKNOWN) · 2 unusable scenario or
/// environment (nothing was qualified), including an INVALID run (haq's own lateness
/// could have changed a verdict; the report is written and names why) · 3 interrupted
/// (partial report written).
#[derive(Debug, Parser)]
#[command(name = "haq", version, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a qualification scenario and write its report.
    ///
    /// Starts the target (the embedded sim, or reaches a URL), offers the seeded
    /// open-loop load through every phase, injects the faults, records every SSE event
    /// in RUN_DIR/trace.jsonl, then judges the trace and prints the verdicts.
    Run(RunArgs),
    /// Check a scenario file without running it (exit 0 if valid, 2 if not).
    Validate(ValidateArgs),
    /// Re-judge a stored run from its trace, with no network.
    Check(CheckArgs),
    /// Re-render every output of a stored run from its trace, with no network:
    /// report.json, report.md, junit.xml, report.html, requests.csv, latency.hlog.
    Report(CheckArgs),
    /// Undo what a killed run left applied (RUN_DIR/heals.jsonl): resume a process
    /// it froze — only while it is the same process — and run the heal commands of
    /// its command faults. `haq run` does the same at its start for the runs of its
    /// reports directory. Exit 0 when nothing is left applied, 1 when something is.
    Heal(CheckArgs),
    /// Compare two stored runs (or a phase of each, e.g. healthy vs degraded): latency
    /// percentiles, throughput, goodput, errors and the verdicts side by side. Exit 1
    /// when B regresses against A beyond the thresholds or a verdict got worse. The
    /// recorded scenarios are compared and every difference named with both values:
    /// other load or faults (request mix, arrival process, offered load, phases,
    /// protected load, faults) refuse the comparison, exit 2, unless
    /// --allow-different; another name, target, SLO, fate policy, criteria, client or
    /// evidence setting is a warning beside the numbers; the seed is not compared.
    Compare(CompareArgs),
    /// Print the JSON Schema of scenario files (for editors).
    Schema,
    /// Write a commented starter scenario (to scenario.yaml, or to stdout when it is
    /// not a terminal: `haq init > s.yaml`).
    Init(InitArgs),
    /// Keep haq's proxies up between runs: bind every `listen` address of the
    /// scenario's url replicas and relay to their upstreams until Ctrl-C; each `haq
    /// run` of a scenario with the same addresses borrows them for its run, so a
    /// router (vllm-router, sglang-router) can be started against them first.
    Proxy(ValidateArgs),
    /// The embedded simulated cluster.
    Sim(SimArgs),
    /// Benchmarks of haq itself.
    Bench(BenchArgs),
    /// Search the sustainable rate under the SLO (Q4, Q5, Q10), as
    /// criteria.capacity.search does inside `haq run`: bracket then bisect, each step a
    /// run of its own (warm-up discarded) kept in OUT/<topology>-NN-<rate>/, in the
    /// healthy topology and with the scenario's faults applied and held (degraded),
    /// then overload steps past C_degraded; writes OUT/capacity.json and
    /// OUT/capacity.md (docs/capacity.md). Exit 0 C_degraded ≥ L_protected · 1 below
    /// it, unknown, or the overload steps FAIL · 2 unusable · 3 interrupted.
    Capacity(CapacityArgs),
    /// One agent of `haq run --agents N` (started by the run, not by hand).
    #[command(hide = true)]
    Agent(AgentArgs),
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The scenario file the coordinator runs.
    pub scenario: PathBuf,
    /// The agent's assignment (its share, the clock epoch, the start deadline): a
    /// local agent.
    #[arg(
        long,
        required_unless_present = "coordinator",
        conflicts_with = "coordinator"
    )]
    pub assignment: Option<PathBuf>,
    /// The coordinator's endpoint: an agent pod of `agents.kubernetes`, which fetches
    /// its assignment there, sets its clock by it and returns its trace to it.
    #[arg(long)]
    pub coordinator: Option<String>,
    /// The share, with `--coordinator` (an Indexed Job's pod: its completion index).
    #[arg(long, env = "JOB_COMPLETION_INDEX")]
    pub index: Option<u64>,
    /// The coordinator endpoint's key, with `--coordinator`.
    #[arg(long, env = "HAQ_AGENT_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Where a remote agent keeps its trace until it is sent (default: a directory
    /// of the system's temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    #[command(flatten)]
    pub overrides: Overrides,
}

#[derive(Debug, Args)]
pub struct Overrides {
    /// Override a scenario field, as helm does: `--set target.replicas=5`,
    /// `--set phases[1].duration=20s`. Repeatable; the value is read as YAML.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Seed for every random choice (same as `--set workload.seed=N`).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    /// Run directory (default: `reports/<scenario>-<UTC time>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where run directories go when `--out` is not given.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// No progress output (the verdict table is still printed).
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the plan — phases with their rates, faults with their targets and
    /// triggers, what each backend will do (for a `kind: kubernetes` target every API
    /// call with method, path and body), the verdicts it exercises — and start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Send the load from N local haq processes (agents), each its share of the
    /// schedule (request i: agent i mod N); this process keeps the phase clock and
    /// the faults, and merges their traces (docs/agents.md). 1: this process alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub agents: u64,
    #[command(flatten)]
    pub overrides: Overrides,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    /// Print the effective scenario (defaults filled, `--set` applied, the workload
    /// file inlined, credentials redacted) on stdout, as `helm template` does.
    #[arg(long, short, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    #[command(flatten)]
    pub overrides: Overrides,
}

/// How `haq validate -o` prints the effective scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A run directory written by `haq run`.
    pub run_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference run directory.
    pub run_a: PathBuf,
    /// The run compared against it (may be the same directory with other phases).
    pub run_b: PathBuf,
    /// Compare only this phase of run A (default: the whole run).
    #[arg(long)]
    pub phase_a: Option<String>,
    /// Compare only this phase of run B (default: the whole run).
    #[arg(long)]
    pub phase_b: Option<String>,
    /// Largest allowed relative change for the worse of p95 TTFT/ITL/E2E (up) and of
    /// throughput and goodput (down).
    #[arg(long, default_value = "10%", value_parser = wire::units::parse_fraction)]
    pub max_regression: f64,
    /// Largest allowed increase of the error or the rejection rate, in points.
    #[arg(long, default_value = "1%", value_parser = wire::units::parse_fraction)]
    pub max_error_increase: f64,
    /// Compare even when the runs offered other load or faults (request mix, arrival
    /// process, offered load, phases, protected load, faults: each is then named in a
    /// warning); without it such runs are refused (exit 2).
    #[arg(long)]
    pub allow_different: bool,
    /// Print the comparison as one JSON document (metrics, verdicts, `differences`
    /// each with `what`, `a`, `b` and `effect` refuse|warn, `refused`, `regressed`),
    /// refused runs too (exit 2).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write it. Without a path: scenario.yaml when stdout is a terminal,
    /// else the scenario on stdout and no file (`haq init > s.yaml`); `-`: stdout
    /// always.
    pub path: Option<PathBuf>,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

/// Parses a gateway policy name (`reference`, `naive-retry`, …).
pub fn parse_policy(s: &str) -> Result<GatewayPolicy, String> {
    GatewayPolicy::ALL
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| {
            let names: Vec<_> = GatewayPolicy::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy `{s}` (one of: {})", names.join(", "))
        })
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Start the embedded cluster in the foreground and print its URLs; Ctrl-C stops
    /// every process it started.
    Up(SimUpArgs),
    /// Measure the sim's timing error under load: replicas × streams concurrent
    /// streams, token events' lateness against the engine model (docs/performance.md).
    Bench(SimBenchArgs),
    /// The engine model's sustainable rate for the scenario's mix, computed from its
    /// parameters (batch limit, step times, KV blocks): the truth `haq capacity` is
    /// measured against on the sim (docs/capacity.md).
    Capacity(ValidateArgs),
    /// One simulated engine replica (started by haq).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Engine model as JSON (the scenario's `target.engine`).
        #[arg(long, default_value = "{}")]
        engine: String,
        /// Served model name.
        #[arg(long, default_value = "haq-sim-8b")]
        model: String,
        /// Base URL of the tool service.
        #[arg(long)]
        tools_url: Option<String>,
        /// Journal file (JSON lines).
        #[arg(long)]
        journal: Option<PathBuf>,
    },
    /// The simulated gateway (started by haq).
    #[command(hide = true)]
    Gateway {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// `name=http://host:port`, repeatable.
        #[arg(long = "upstream", required = true)]
        upstreams: Vec<String>,
        /// Gateway configuration as JSON (the scenario's `target.gateway`).
        #[arg(long, default_value = "{}")]
        config: String,
        #[arg(long)]
        journal: Option<PathBuf>,
    },
    /// The tool service (started by haq).
    #[command(hide = true)]
    Tools {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Execution log (`tools.jsonl`).
        #[arg(long)]
        log: Option<PathBuf>,
        /// Tool service configuration as JSON (the scenario's `target.tools`).
        #[arg(long, default_value = "{}")]
        config: String,
    },
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Measure haq's own client against a local stamping SSE server: CPU per 100k
    /// events, observation lag, TTFT against the server's truth, schedule slip, peak
    /// RSS. Runs the real `haq run` path (dispatcher, client, trace, judging).
    Client {
        /// Concurrent streams in steady state.
        #[arg(long, default_value_t = 64)]
        streams: u32,
        #[command(flatten)]
        shape: crate::bench::server::StreamShape,
        /// How long load is offered.
        #[arg(long, default_value = "40s", value_parser = wire::units::parse_duration)]
        duration: Duration,
        /// Arrival rate (req/s); default: streams / stream length (steady concurrency).
        #[arg(long)]
        rate: Option<f64>,
        /// Keep the run here (default: a temp dir).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Only read the bytes with a bare reqwest client (the floor, for comparison).
        #[arg(long)]
        bare: bool,
        /// The HTTP client haq's run uses (`client.transport`).
        #[arg(long, value_enum, default_value = "auto")]
        transport: crate::scenario::Transport,
        /// Send the load from N local agent processes (`haq run --agents N`); their
        /// CPU is counted with haq's.
        #[arg(long, default_value_t = 1)]
        agents: u64,
    },
    /// The stamping SSE server (started by `bench client`).
    #[command(hide = true)]
    Server {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        #[command(flatten)]
        shape: crate::bench::server::StreamShape,
    },
}

/// `haq sim bench`.
#[derive(Debug, Args)]
pub struct SimBenchArgs {
    #[arg(long, default_value_t = 16)]
    pub replicas: u32,
    /// Concurrent streams per replica.
    #[arg(long, default_value_t = 64)]
    pub streams: u32,
    #[arg(long, default_value = "20s", value_parser = wire::units::parse_duration)]
    pub duration: std::time::Duration,
    #[arg(long, default_value = "5s", value_parser = wire::units::parse_duration)]
    pub warmup: std::time::Duration,
    /// Output tokens per request (each stream re-sends when done).
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    #[arg(long, default_value_t = 200)]
    pub prompt_tokens: u32,
    /// Connect straight to the workers instead of through the gateway.
    #[arg(long)]
    pub direct: bool,
    /// Directory for logs and journals (default: a new temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Exit 1 when the event-lateness p99 exceeds this.
    #[arg(long, value_parser = wire::units::parse_duration)]
    pub max_p99: Option<std::time::Duration>,
}

/// `haq sim up`.
#[derive(Debug, Args)]
pub struct SimUpArgs {
    /// Number of worker processes.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Gateway policy: reference, naive-retry, silent-truncate, soft-timeout,
    /// no-health-check, no-shedding, hard-drain, no-tool-idempotency.
    #[arg(long, default_value = "reference", value_parser = parse_policy)]
    pub policy: GatewayPolicy,
    /// Directory for logs and journals (default: a new temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A scenario whose `target` (engine, gateway, tools) to start; `--replicas` and
    /// `--policy` still apply when given explicitly.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// The gateway's port on 127.0.0.1 (default: any free port). The workers and
    /// the tool service always take free ports.
    #[arg(long)]
    pub port: Option<u16>,
    /// Print the URLs and pids as one JSON line on stdout, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Multiples of C_degraded (`--overload 1.5,2`).
#[derive(Debug, Clone, PartialEq)]
pub struct Multiples(pub Vec<f64>);

/// `1.5,2` (or `none`): multiples of C_degraded, each above 1.
fn parse_multiples(s: &str) -> Result<Multiples, String> {
    if s.trim() == "none" {
        return Ok(Multiples(Vec::new()));
    }
    s.split(',')
        .map(|x| match x.trim().parse::<f64>() {
            Ok(m) if m.is_finite() && m > 1.0 && m <= 10.0 => Ok(m),
            _ => Err(format!(
                "`{x}` is not a multiple of C_degraded above 1 and at most 10 (e.g. 1.5,2 or none)"
            )),
        })
        .collect::<Result<Vec<f64>, String>>()
        .map(Multiples)
}

/// Which topologies `haq capacity` searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopologyArg {
    Healthy,
    Degraded,
    Both,
}

/// `haq capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// The scenario file (YAML): its target, mix, SLO, protected load and faults.
    pub scenario: PathBuf,
    #[arg(long, value_enum, default_value = "both")]
    pub topology: TopologyArg,
    /// Print capacity.json on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// The search's directory (default: `reports/<scenario>-capacity-<UTC time>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the search's directory goes when `--out` is not given.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// Stop when the bracket is at most this share of its lower end wide (default:
    /// `criteria.capacity.search.precision`, else 5%).
    #[arg(long, value_parser = wire::units::parse_fraction)]
    pub precision: Option<f64>,
    /// Most steps per topology (default: `criteria.capacity.search.max_steps`, else 8).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// The first rate (default: `criteria.capacity.search.from`, else the protected
    /// load).
    #[arg(long, value_parser = wire::units::parse_rate)]
    pub from: Option<f64>,
    /// Bracketing multiplies the rate by this until the SLO breaks (default:
    /// `criteria.capacity.search.factor`, else 2).
    #[arg(long)]
    pub factor: Option<f64>,
    /// How long each step is judged (default: `criteria.capacity.search.step`, else
    /// 10s).
    #[arg(long, value_parser = wire::units::parse_duration)]
    pub step: Option<Duration>,
    /// Load at the step's rate before it is judged, discarded (default:
    /// `criteria.capacity.search.warmup`, else 3s).
    #[arg(long, value_parser = wire::units::parse_duration)]
    pub warmup: Option<Duration>,
    /// Multiples of C_degraded offered after the degraded search, one overload step
    /// each, judged by the Overload rules (default: `criteria.capacity.search.overload`,
    /// else 1.5,2; `--overload none` for none).
    #[arg(long, value_parser = parse_multiples)]
    pub overload: Option<Multiples>,
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub overrides: Overrides,
}
