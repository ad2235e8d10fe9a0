//! `haq sim …`: the embedded cluster's processes (started by haq) and `sim up` /
//! `sim bench` for people.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::exit::Exit;
use super::{SimBenchArgs, SimCommand, SimUpArgs};
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
            Ok(engine) => crate::sim::worker::serve(crate::sim::worker::WorkerConfig {
                name,
                listen,
                engine,
                model,
                tools_url,
                journal,
            })
            .await
            .map(|()| Exit::Pass),
            Err(e) => Err(e),
        },
        SimCommand::Tools {
            listen,
            log,
            config,
        } => tools(listen, log, &config).await,
        SimCommand::Gateway {
            listen,
            upstreams,
            config,
            journal,
        } => gateway(listen, upstreams, &config, journal).await,
        SimCommand::Up(a) => sim_up(a, cancel).await.map(|()| Exit::Pass),
        SimCommand::Bench(a) => bench(a).await,
        SimCommand::Capacity(a) => super::capacity::sim_model(&a),
    };
    match result {
        Ok(exit) => exit,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
    }
}

/// `haq sim tools`: the tool service.
async fn tools(listen: SocketAddr, log: Option<PathBuf>, config: &str) -> anyhow::Result<Exit> {
    let c = json_arg::<scenario::ToolsCfg>("--config", config)?;
    crate::sim::tools::serve(crate::sim::tools::ToolsConfig {
        listen,
        log,
        dedup: c.dedup,
        exec_time: c.exec_time.0,
    })
    .await?;
    Ok(Exit::Pass)
}

/// `haq sim gateway`: the gateway in front of `NAME=URL` upstreams.
async fn gateway(
    listen: SocketAddr,
    upstreams: Vec<String>,
    config: &str,
    journal: Option<PathBuf>,
) -> anyhow::Result<Exit> {
    let mut ups = Vec::new();
    for u in upstreams {
        match u.split_once('=') {
            Some((n, url)) => ups.push((n.to_string(), url.trim_end_matches('/').to_string())),
            None => anyhow::bail!("--upstream {u:?} is not NAME=URL"),
        }
    }
    let cfg = json_arg("--config", config)?;
    crate::sim::gateway::serve(crate::sim::gateway::GatewayConfig {
        listen,
        upstreams: ups,
        cfg,
        journal,
    })
    .await?;
    Ok(Exit::Pass)
}

/// `haq sim bench`: exit 1 when the event-lateness p99 exceeds `--max-p99`.
async fn bench(a: SimBenchArgs) -> anyhow::Result<Exit> {
    if a.replicas == 0 || a.replicas > crate::plan::MAX_SIM_REPLICAS || a.streams == 0 {
        anyhow::bail!(
            "--replicas must be 1..={} and --streams at least 1",
            crate::plan::MAX_SIM_REPLICAS
        );
    }
    let opts = crate::bench::sim::BenchOpts {
        replicas: a.replicas,
        streams: a.streams,
        warmup: a.warmup,
        duration: a.duration,
        max_tokens: a.max_tokens,
        prompt_tokens: a.prompt_tokens,
        via_gateway: !a.direct,
        dir: a.dir.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("haq-bench-{}", std::process::id()))
        }),
    };
    let r = crate::bench::sim::run(opts).await?;
    print!("{}", r.render());
    if a.max_p99
        .is_some_and(|m| r.event_lateness.p99_us > m.as_micros() as u64)
    {
        eprintln!("event lateness p99 above --max-p99");
        return Ok(Exit::Fail);
    }
    Ok(Exit::Pass)
}

/// `haq sim up`: the embedded cluster in the foreground until Ctrl-C.
async fn sim_up(a: SimUpArgs, cancel: CancellationToken) -> anyhow::Result<()> {
    if a.replicas == 0 || a.replicas > crate::plan::MAX_SIM_REPLICAS {
        anyhow::bail!(
            "--replicas must be between 1 and {}",
            crate::plan::MAX_SIM_REPLICAS
        );
    }
    let dir = match a.dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("haq-sim-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let mut target: scenario::Target = match &a.scenario {
        Some(p) => {
            let plan = crate::plan::load(p, &[], None).map_err(|e| anyhow::anyhow!("{e}"))?;
            plan.scenario.target
        }
        None => serde_json::from_value(serde_json::json!({"kind": "sim"}))?,
    };
    if a.scenario.is_none() || a.replicas != 3 {
        target.replicas = Some(scenario::Replicas::Count(a.replicas));
    }
    if a.scenario.is_none() || a.policy != GatewayPolicy::Reference {
        target.gateway.policy = a.policy;
    }
    let listen = format!("127.0.0.1:{}", a.port.unwrap_or(0));
    let bin = crate::target::sim::haq_binary()?;
    let cluster = crate::target::sim::SimCluster::start_on(
        &target,
        &bin,
        &dir,
        &|_, url| url.to_string(),
        &listen,
    )
    .await
    .map_err(|e| match a.port {
        Some(p) => e.context(format!("starting the gateway on port {p} (--port)")),
        None => e,
    })?;
    if a.json {
        let line = serde_json::json!({
            "api_url": cluster.api_url,
            "gateway": {"url": cluster.gateway.url, "pid": cluster.gateway.pid, "policy": target.gateway.policy.name()},
            "workers": cluster.info.iter().map(|r| serde_json::json!({"name": r.name, "url": r.url, "pid": r.pid})).collect::<Vec<_>>(),
            "tools": {"url": cluster.tools.url, "pid": cluster.tools.pid},
            "logs": dir.display().to_string(),
            "pid": std::process::id(),
        });
        println!("{line}");
    } else {
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
    }
    cancel.cancelled().await;
    cluster.stop().await;
    Ok(())
}
