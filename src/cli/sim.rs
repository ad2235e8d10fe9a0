//! `haq sim …`: the embedded cluster's processes (started by haq) and `sim up` /
//! `sim bench` for people.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::SimCommand;
use super::exit::Exit;
use crate::scenario::{self, GatewayPolicy};

fn json_arg<T: for<'de> serde::Deserialize<'de>>(flag: &str, v: &str) -> anyhow::Result<T> {
    serde_json::from_str(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

pub async fn sim(cmd: SimCommand, cancel: CancellationToken) -> Exit {
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
            if replicas == 0 || replicas > crate::plan::MAX_SIM_REPLICAS || streams == 0 {
                eprintln!(
                    "error: --replicas must be 1..={} and --streams at least 1",
                    crate::plan::MAX_SIM_REPLICAS
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
    if replicas == 0 || replicas > crate::plan::MAX_SIM_REPLICAS {
        anyhow::bail!(
            "--replicas must be between 1 and {}",
            crate::plan::MAX_SIM_REPLICAS
        );
    }
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("haq-sim-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let mut target: scenario::Target = match &scenario_path {
        Some(p) => {
            let plan = crate::plan::load(p, &[], None).map_err(|e| anyhow::anyhow!("{e}"))?;
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
