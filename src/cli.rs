//! The command line (clap derive). `main` parses and calls [`execute`]; tests call it
//! in-process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::check::Status;
use crate::engine::{EnvironmentError, RunOptions};
use crate::scenario::{self, GatewayPolicy};
use crate::wire;

/// haq — qualifies LLM inference clusters for high availability.
///
/// Replays a production-like request mix at the protected load against an
/// OpenAI-compatible streaming endpoint, breaks things at chosen points of the token
/// loop, and judges eight verdicts from what the client measured.
///
/// Exit codes: 0 every verdict PASS · 1 any FAIL (or UNKNOWN) · 2 unusable scenario or
/// environment (nothing was qualified), including an INVALID run (haq's own client fell
/// behind its schedule; the report is written and marked INVALID) · 3 interrupted
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
    /// Compare two stored runs (or a phase of each, e.g. healthy vs degraded): latency
    /// percentiles, throughput, goodput and errors side by side. Exit 1 when B regresses
    /// against A beyond the thresholds.
    Compare(CompareArgs),
    /// Print the JSON Schema of scenario files (for editors).
    Schema,
    /// Write a commented starter scenario.
    Init(InitArgs),
    /// The embedded simulated cluster.
    Sim(SimArgs),
    /// Benchmarks of haq itself.
    Bench(BenchArgs),
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
    #[command(flatten)]
    pub overrides: Overrides,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
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
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write it.
    #[arg(default_value = "scenario.yaml")]
    pub path: PathBuf,
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
    Up {
        /// Number of worker processes.
        #[arg(long, default_value_t = 3)]
        replicas: u32,
        /// Gateway policy: reference, naive-retry, silent-truncate, soft-timeout,
        /// no-health-check, no-shedding, hard-drain, no-tool-idempotency.
        #[arg(long, default_value = "reference", value_parser = parse_policy)]
        policy: GatewayPolicy,
        /// Directory for logs and journals (default: a new temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A scenario whose `target` (engine, gateway, tools) to start; `--replicas` and
        /// `--policy` still apply when given explicitly.
        #[arg(long)]
        scenario: Option<PathBuf>,
    },
    /// Measure the sim's timing error under load: replicas × streams concurrent
    /// streams, token events' lateness against the engine model (docs/performance.md).
    Bench {
        #[arg(long, default_value_t = 16)]
        replicas: u32,
        /// Concurrent streams per replica.
        #[arg(long, default_value_t = 64)]
        streams: u32,
        #[arg(long, default_value = "20s", value_parser = wire::units::parse_duration)]
        duration: std::time::Duration,
        #[arg(long, default_value = "5s", value_parser = wire::units::parse_duration)]
        warmup: std::time::Duration,
        /// Output tokens per request (each stream re-sends when done).
        #[arg(long, default_value_t = 512)]
        max_tokens: u32,
        #[arg(long, default_value_t = 200)]
        prompt_tokens: u32,
        /// Connect straight to the workers instead of through the gateway.
        #[arg(long)]
        direct: bool,
        /// Directory for logs and journals (default: a new temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Exit 1 when the event-lateness p99 exceeds this.
        #[arg(long, value_parser = wire::units::parse_duration)]
        max_p99: Option<std::time::Duration>,
    },
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

/// Process exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Pass = 0,
    Fail = 1,
    Unusable = 2,
    Interrupted = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

fn exit_for(status: Status) -> Exit {
    match status {
        Status::Pass | Status::NotEvaluated => Exit::Pass,
        Status::Fail | Status::Unknown => Exit::Fail,
    }
}

/// Exit code of a judged run: interrupted (3) beats INVALID (2) beats the verdicts.
pub fn exit_for_run(j: &crate::check::Judgement, interrupted: bool) -> Exit {
    if interrupted {
        Exit::Interrupted
    } else if j.invalid() {
        Exit::Unusable
    } else {
        exit_for(j.overall())
    }
}

/// Cancels `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("haq: interrupted; stopping load, healing faults, writing a partial report");
        token.cancel();
    });
}

/// Runs one command to completion.
pub async fn execute(cli: Cli, cancel: CancellationToken) -> Exit {
    match cli.command {
        Command::Run(a) => run(a, cancel).await,
        Command::Validate(a) => {
            match scenario::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
                Ok(plan) => {
                    println!(
                        "{}: valid · {} phases over {:.0}s · {} req/s offered (protected {}) · {} faults · seed {}",
                        a.scenario.display(),
                        plan.phases.len(),
                        plan.total.as_secs_f64(),
                        plan.rate,
                        plan.scenario.protected_load,
                        plan.faults.len(),
                        plan.seed
                    );
                    Exit::Pass
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Exit::Unusable
                }
            }
        }
        Command::Check(a) => match crate::check::judge_dir(&a.run_dir) {
            Ok((plan, j)) => {
                print!("{}", crate::report::terminal(&plan, &j, &a.run_dir));
                exit_for_run(&j, j.run.interrupted)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                Exit::Unusable
            }
        },
        Command::Report(a) => match crate::check::judge_dir(&a.run_dir) {
            Ok((plan, j)) => {
                match crate::report::write(&a.run_dir, &plan, &j, &crate::report::EVERY) {
                    Ok(files) => {
                        print!("{}", crate::report::terminal(&plan, &j, &a.run_dir));
                        println!("wrote {} in {}", files.join(", "), a.run_dir.display());
                        exit_for_run(&j, j.run.interrupted)
                    }
                    Err(e) => {
                        eprintln!("error: writing the reports in {}: {e}", a.run_dir.display());
                        Exit::Unusable
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                Exit::Unusable
            }
        },
        Command::Compare(a) => crate::report::compare_command(
            &a.run_a,
            &a.run_b,
            a.phase_a.as_deref(),
            a.phase_b.as_deref(),
            crate::report::compare::Thresholds {
                max_regression: a.max_regression,
                max_error_increase: a.max_error_increase,
            },
        ),
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&scenario::json_schema()).unwrap_or_default()
            );
            Exit::Pass
        }
        Command::Init(a) => init(a),
        Command::Sim(s) => sim(s.command, cancel).await,
        Command::Bench(b) => bench(b.command).await,
    }
}

async fn run(a: RunArgs, cancel: CancellationToken) -> Exit {
    let plan = match scenario::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let opts = RunOptions {
        out: a.out,
        reports_dir: a.reports_dir,
        quiet: a.quiet,
        haq_bin: None,
    };
    match crate::engine::run(plan, opts, cancel).await {
        Ok(r) => {
            print!(
                "{}",
                crate::report::terminal(&r.plan, &r.judgement, &r.run_dir)
            );
            exit_for_run(&r.judgement, r.interrupted)
        }
        Err(e) if e.downcast_ref::<EnvironmentError>().is_some() => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
        Err(e) => {
            eprintln!("error: the run failed: {e:#}");
            Exit::Unusable
        }
    }
}

fn init(a: InitArgs) -> Exit {
    if a.path.exists() && !a.force {
        eprintln!(
            "error: {} exists (use --force to overwrite)",
            a.path.display()
        );
        return Exit::Unusable;
    }
    match std::fs::write(&a.path, STARTER) {
        Ok(()) => {
            println!(
                "wrote {} — try: haq validate {0} && haq run {0}",
                a.path.display()
            );
            Exit::Pass
        }
        Err(e) => {
            eprintln!("error: writing {}: {e}", a.path.display());
            Exit::Unusable
        }
    }
}

async fn bench(cmd: BenchCommand) -> Exit {
    let r = match cmd {
        BenchCommand::Server { listen, shape } => {
            crate::bench::raise_fd_limit();
            crate::bench::server::serve(crate::bench::server::ServerConfig { listen, shape }).await
        }
        BenchCommand::Client {
            streams,
            shape,
            duration,
            rate,
            out,
            json,
            bare,
            transport,
        } => {
            let cfg = crate::bench::BenchConfig {
                bare,
                transport,
                streams,
                shape,
                duration,
                rate,
                out,
            };
            crate::bench::run(cfg).await.map(|r| {
                if json {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default());
                } else {
                    println!("{r}");
                }
            })
        }
    };
    match r {
        Ok(()) => Exit::Pass,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
    }
}

/// The starter scenario `haq init` writes.
pub const STARTER: &str = include_str!("starter.yaml");

fn json_arg<T: for<'de> serde::Deserialize<'de>>(flag: &str, v: &str) -> anyhow::Result<T> {
    serde_json::from_str(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

async fn sim(cmd: SimCommand, cancel: CancellationToken) -> Exit {
    let result = match cmd {
        SimCommand::Worker {
            name,
            listen,
            engine,
            model,
            tools_url,
            journal,
        } => match json_arg("--engine", &engine) {
            Ok(engine) => {
                crate::sim::worker::serve(crate::sim::worker::WorkerConfig {
                    name,
                    listen,
                    engine,
                    model,
                    tools_url,
                    journal,
                })
                .await
            }
            Err(e) => Err(e),
        },
        SimCommand::Tools {
            listen,
            log,
            config,
        } => match json_arg::<scenario::ToolsCfg>("--config", &config) {
            Ok(c) => {
                crate::sim::tools::serve(crate::sim::tools::ToolsConfig {
                    listen,
                    log,
                    dedup: c.dedup,
                    exec_time: c.exec_time.0,
                })
                .await
            }
            Err(e) => Err(e),
        },
        SimCommand::Gateway {
            listen,
            upstreams,
            config,
            journal,
        } => {
            let mut ups = Vec::new();
            for u in upstreams {
                match u.split_once('=') {
                    Some((n, url)) => {
                        ups.push((n.to_string(), url.trim_end_matches('/').to_string()))
                    }
                    None => {
                        eprintln!("error: --upstream {u:?} is not NAME=URL");
                        return Exit::Unusable;
                    }
                }
            }
            match json_arg("--config", &config) {
                Ok(cfg) => {
                    crate::sim::gateway::serve(crate::sim::gateway::GatewayConfig {
                        listen,
                        upstreams: ups,
                        cfg,
                        journal,
                    })
                    .await
                }
                Err(e) => Err(e),
            }
        }
        SimCommand::Up {
            replicas,
            policy,
            dir,
            scenario,
        } => sim_up(replicas, policy, dir, scenario, cancel).await,
        SimCommand::Bench {
            replicas,
            streams,
            duration,
            warmup,
            max_tokens,
            prompt_tokens,
            direct,
            dir,
            max_p99,
        } => {
            if replicas == 0 || replicas > scenario::validate::MAX_SIM_REPLICAS || streams == 0 {
                eprintln!(
                    "error: --replicas must be 1..={} and --streams at least 1",
                    scenario::validate::MAX_SIM_REPLICAS
                );
                return Exit::Unusable;
            }
            let opts = crate::bench::sim::BenchOpts {
                replicas,
                streams,
                warmup,
                duration,
                max_tokens,
                prompt_tokens,
                via_gateway: !direct,
                dir: dir.unwrap_or_else(|| {
                    std::env::temp_dir().join(format!("haq-bench-{}", std::process::id()))
                }),
            };
            match crate::bench::sim::run(opts).await {
                Ok(r) => {
                    print!("{}", r.render());
                    if max_p99.is_some_and(|m| r.event_lateness.p99_us > m.as_micros() as u64) {
                        eprintln!("event lateness p99 above --max-p99");
                        return Exit::Fail;
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => Exit::Pass,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
    }
}

async fn sim_up(
    replicas: u32,
    policy: GatewayPolicy,
    dir: Option<PathBuf>,
    scenario_path: Option<PathBuf>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    if replicas == 0 || replicas > scenario::validate::MAX_SIM_REPLICAS {
        anyhow::bail!(
            "--replicas must be between 1 and {}",
            scenario::validate::MAX_SIM_REPLICAS
        );
    }
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("haq-sim-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let mut target: scenario::Target = match &scenario_path {
        Some(p) => {
            let plan = scenario::load(p, &[], None).map_err(|e| anyhow::anyhow!("{e}"))?;
            plan.scenario.target
        }
        None => serde_json::from_value(serde_json::json!({"kind": "sim"}))?,
    };
    if scenario_path.is_none() || replicas != 3 {
        target.replicas = Some(scenario::Replicas::Count(replicas));
    }
    if scenario_path.is_none() || policy != GatewayPolicy::Reference {
        target.gateway.policy = policy;
    }
    let bin = crate::target::sim::haq_binary()?;
    let cluster = crate::target::sim::SimCluster::start(&target, &bin, &dir).await?;
    println!(
        "gateway   {}  (OpenAI base URL; policy {})",
        cluster.api_url,
        target.gateway.policy.name()
    );
    for r in &cluster.info {
        println!("{:<9} {}  pid {}", r.name, r.url, r.pid.unwrap_or(0));
    }
    println!("tools     {}", cluster.tools.url);
    println!("logs      {}", dir.display());
    println!("Ctrl-C stops every process.");
    cancel.cancelled().await;
    cluster.stop().await;
    Ok(())
}
