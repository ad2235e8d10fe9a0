//! The run: start the target, offer the seeded open-loop schedule through every phase,
//! fire faults on time, record everything to the trace, stop and clean up whatever
//! happens, then judge the trace from disk.

mod load;
mod progress;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

use crate::check::{self, Judgement};
use crate::client;
use crate::faults::registry::{ProcRef, SimSpawner};
use crate::faults::{HealGuard, Registry, Replica};
use crate::proxy::{ProxySet, ProxySpec};
use crate::scenario::{Plan, TargetKind};
use crate::target::sim::SimCluster;
use crate::trace::{self, Clock, Event, ReplicaInfo, TraceWriter};
use progress::Progress;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Exact run directory; default `<reports_dir>/<scenario>-<UTC time>`.
    pub out: Option<PathBuf>,
    /// Where run directories go by default.
    pub reports_dir: PathBuf,
    pub quiet: bool,
    /// The haq executable for sim processes (default: `$HAQ_BIN` or this executable).
    pub haq_bin: Option<PathBuf>,
}

pub struct RunResult {
    pub run_dir: PathBuf,
    pub plan: Plan,
    pub judgement: Judgement,
    pub interrupted: bool,
}

/// Why a run could not qualify anything (exit code 2), as opposed to a run that ended.
#[derive(Debug)]
pub struct EnvironmentError(pub anyhow::Error);

impl std::fmt::Display for EnvironmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}
impl std::error::Error for EnvironmentError {}

fn utc_stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

fn make_run_dir(plan: &Plan, opts: &RunOptions) -> anyhow::Result<PathBuf> {
    let dir = match &opts.out {
        Some(d) => d.clone(),
        None => {
            let base = opts
                .reports_dir
                .join(format!("{}-{}", plan.scenario.name, utc_stamp()));
            let mut d = base.clone();
            let mut k = 1;
            while d.exists() {
                k += 1;
                d = PathBuf::from(format!("{}-{k}", base.display()));
            }
            d
        }
    };
    if dir.join(trace::TRACE_FILE).exists() {
        anyhow::bail!(
            "{} already holds a run; choose another --out",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn record_scenario(dir: &Path, plan: &Plan) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&plan.scenario)?;
    std::fs::write(dir.join(check::SCENARIO_FILE), json + "\n")?;
    let yaml = serde_saphyr::to_string(&plan.scenario).map_err(|e| anyhow!("{e}"))?;
    std::fs::write(
        dir.join("scenario.yaml"),
        format!("# effective scenario of this run (overrides applied, workload inlined)\n{yaml}"),
    )?;
    // The files the workload read (empirical lengths, replayed traces), kept with the
    // run so it can be replayed (M10).
    if !plan.inputs.files.is_empty() {
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs)?;
        for f in &plan.inputs.files {
            let src = Path::new(f);
            if let Some(name) = src.file_name() {
                std::fs::copy(src, inputs.join(name))
                    .with_context(|| format!("keeping a copy of {f}"))?;
            }
        }
    }
    Ok(())
}

fn request_headers(plan: &Plan) -> anyhow::Result<HeaderMap> {
    let mut h = HeaderMap::new();
    for (k, v) in &plan.scenario.target.headers {
        h.insert(
            HeaderName::from_bytes(k.as_bytes())
                .with_context(|| format!("target.headers: bad name {k:?}"))?,
            HeaderValue::from_str(v).with_context(|| format!("target.headers.{k}: bad value"))?,
        );
    }
    Ok(h)
}

/// The system under test while the run lasts.
struct Target {
    api_url: String,
    sim: Option<SimCluster>,
    replicas: Vec<ReplicaInfo>,
    /// haq's proxies in front of the replicas (every sim worker; `url` replicas with
    /// a `listen` address).
    proxies: Option<ProxySet>,
    registry: Arc<Registry>,
}

fn replica_info(r: &Replica, pid: Option<u32>) -> ReplicaInfo {
    ReplicaInfo {
        name: r.name.clone(),
        url: r.direct_url().unwrap_or_default(),
        pid,
        proxy: r.proxy.as_ref().map(|p| p.listen.to_string()),
        node: r.node.clone(),
    }
}

async fn start_target(
    plan: &Plan,
    opts: &RunOptions,
    dir: &Path,
    tw: &TraceWriter,
    clock: &Clock,
) -> anyhow::Result<Target> {
    let t = &plan.scenario.target;
    match t.kind {
        TargetKind::Sim => {
            let bin = match &opts.haq_bin {
                Some(b) => b.clone(),
                None => crate::target::sim::haq_binary().context("locating the haq executable")?,
            };
            // One proxy per worker, between the gateway and the worker.
            let specs: Vec<ProxySpec> = plan
                .replica_decls
                .iter()
                .map(|d| ProxySpec {
                    name: d.name.clone(),
                    listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                    upstream: None,
                })
                .collect();
            let proxies = ProxySet::start(&specs, tw, clock).await?;
            let via = |name: &str, url: &str| match proxies.get(name) {
                Some(p) => {
                    p.set_upstream(url.trim_start_matches("http://"));
                    format!("http://{}", p.listen)
                }
                None => url.to_string(),
            };
            let sim = SimCluster::start_via(t, &bin, dir, &via)
                .await
                .context("starting the sim cluster")?;
            let mut replicas = Vec::new();
            for (d, w) in plan.replica_decls.iter().zip(&sim.workers) {
                let (url, _) = {
                    let g = w.lock().await;
                    (g.url.clone(), g.pid)
                };
                replicas.push(Arc::new(Replica {
                    name: d.name.clone(),
                    node: d.node.clone(),
                    process: std::sync::Mutex::new(Some(ProcRef::Sim(w.clone()))),
                    proxy: proxies.get(&d.name).cloned(),
                    direct_url: std::sync::RwLock::new(Some(url)),
                    ready_path: "/ready".into(),
                    restart_cmd: None,
                }));
            }
            let tools_url = sim.tools_url().to_string();
            let info = replicas
                .iter()
                .zip(&sim.info)
                .map(|(r, i)| replica_info(r, i.pid))
                .collect();
            Ok(Target {
                api_url: sim.api_url.clone(),
                replicas: info,
                sim: Some(sim),
                proxies: Some(proxies),
                registry: Arc::new(Registry {
                    replicas,
                    sim: Some(SimSpawner {
                        target: t.clone(),
                        tools_url,
                        bin,
                        dir: dir.to_path_buf(),
                    }),
                }),
            })
        }
        TargetKind::Url => {
            let url = t
                .url
                .clone()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string();
            let (registry, proxies) = url_replicas(plan, tw, clock).await?;
            let http = client::http_client(Duration::from_secs(5), &request_headers(plan)?)?;
            http.get(format!("{url}/models"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .with_context(|| format!("target {url} is not reachable"))?;
            let replicas = registry
                .replicas
                .iter()
                .map(|r| {
                    let pid = r
                        .process()
                        .and_then(|p| crate::faults::process::resolve(&p).ok());
                    replica_info(r, pid)
                })
                .collect();
            Ok(Target {
                api_url: url,
                sim: None,
                replicas,
                proxies,
                registry,
            })
        }
    }
}

/// The declared replicas of a `url` target, checked before anything starts (their
/// processes exist, their upstreams accept connections) and with haq's proxy
/// listening in front of those that declare `listen`.
async fn url_replicas(
    plan: &Plan,
    tw: &TraceWriter,
    clock: &Clock,
) -> anyhow::Result<(Arc<Registry>, Option<ProxySet>)> {
    let mut specs = Vec::new();
    let mut procs = Vec::new();
    for d in &plan.replica_decls {
        let up = d.upstream.clone().unwrap_or_default();
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&up))
            .await
            .map_err(|_| {
                anyhow!(
                    "replica {}: upstream {up} did not accept a connection within 5s",
                    d.name
                )
            })?
            .with_context(|| format!("replica {}: upstream {up} is not reachable", d.name))?;
        let proc_ref = match &d.process {
            None => None,
            Some(p) => Some(match (p.pid, &p.pid_file) {
                (Some(pid), _) => {
                    let (state, start) =
                        crate::faults::process::proc_stat(pid).ok_or_else(|| {
                            anyhow!("replica {}: process {pid} does not exist", d.name)
                        })?;
                    if matches!(state, 'Z' | 'X') {
                        anyhow::bail!("replica {}: process {pid} has exited", d.name);
                    }
                    ProcRef::Pid {
                        pid,
                        start: Some(start),
                    }
                }
                (None, Some(f)) => {
                    let r = ProcRef::PidFile(f.into());
                    let pid = crate::faults::process::resolve(&r)
                        .map_err(|e| anyhow!("replica {}: {e}", d.name))?;
                    if crate::faults::process::gone(pid) {
                        anyhow::bail!(
                            "replica {}: pid file {f} names pid {pid}, which is not running",
                            d.name
                        );
                    }
                    r
                }
                (None, None) => anyhow::bail!("replica {}: process needs pid or pid_file", d.name),
            }),
        };
        procs.push(proc_ref);
        if let Some(l) = &d.listen {
            specs.push(ProxySpec {
                name: d.name.clone(),
                listen: l
                    .parse()
                    .with_context(|| format!("replica {}: listen {l}", d.name))?,
                upstream: Some(up),
            });
        }
    }
    let proxies = if specs.is_empty() {
        None
    } else {
        Some(ProxySet::start(&specs, tw, clock).await?)
    };
    let replicas = plan
        .replica_decls
        .iter()
        .zip(procs)
        .map(|(d, p)| {
            Arc::new(Replica {
                name: d.name.clone(),
                node: d.node.clone(),
                process: std::sync::Mutex::new(p),
                proxy: proxies.as_ref().and_then(|s| s.get(&d.name).cloned()),
                direct_url: std::sync::RwLock::new(
                    d.upstream.as_ref().map(|u| format!("http://{u}")),
                ),
                ready_path: d
                    .process
                    .as_ref()
                    .map_or_else(|| "/health".to_string(), |p| p.ready_path.clone()),
                restart_cmd: d.process.as_ref().and_then(|p| p.restart.clone()),
            })
        })
        .collect();
    Ok((
        Arc::new(Registry {
            replicas,
            sim: None,
        }),
        proxies,
    ))
}

#[allow(clippy::too_many_arguments)]
fn fault_env(
    plan: &Plan,
    target: &Target,
    dir: &Path,
    tw: &TraceWriter,
    clock: &Clock,
    guard: &HealGuard,
    progress: &Progress,
    load_done: &CancellationToken,
    stop: &CancellationToken,
) -> anyhow::Result<crate::faults::schedule::Env> {
    let c = &plan.scenario.client;
    let progress = progress.clone();
    Ok(crate::faults::schedule::Env {
        registry: target.registry.clone(),
        heals: guard.heals(),
        trace: tw.clone(),
        clock: *clock,
        run_dir: dir.to_path_buf(),
        seed: plan.seed,
        board: target.proxies.as_ref().map(|p| p.board().clone()),
        probes: crate::faults::probe::ProbeClient {
            http: client::Http::new(c.connect_timeout.0, &request_headers(plan)?, c.transport)?,
            url: format!("{}/chat/completions", target.api_url),
            model: plan.scenario.target.model.clone(),
            timeouts: client::Timeouts {
                first_token: c.first_token_timeout.0,
                idle: c.idle_timeout.0,
            },
        },
        admin: crate::faults::admin_client()?,
        say: Arc::new(move |s| progress.line(&s)),
        // Set when the load starts.
        load_start: Instant::now(),
        load_done: load_done.clone(),
        stop: stop.clone(),
    })
}

/// After the load: lets faults still running (probe requests, replacements) end
/// within the drain timeout, then stops them.
async fn finish_faults(
    mut task: tokio::task::JoinHandle<()>,
    plan: &Plan,
    stop: &CancellationToken,
) {
    let drain = plan.scenario.client.drain_timeout.0;
    tokio::select! {
        _ = &mut task => return,
        _ = tokio::time::sleep(drain) => {}
        _ = stop.cancelled() => {}
    }
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}

/// Records how the trace writer kept up (issue #4 item 5): any wait for room in its
/// bounded buffer makes the run INVALID when judged.
fn emit_trace_stats(tw: &TraceWriter, clock: &Clock) {
    let b = tw.backpressure();
    tw.emit(Event::TraceStats {
        t: clock.now_us(),
        waits: b.waits,
        waited_us: b.waited_us,
        worst_us: b.worst_us,
        peak_bytes: b.peak_bytes,
        cap_bytes: b.cap_bytes,
        lines: b.lines,
    });
}

/// Runs a validated plan end to end. Setup failures are [`EnvironmentError`]s.
pub async fn run(
    plan: Plan,
    opts: RunOptions,
    cancel: CancellationToken,
) -> anyhow::Result<RunResult> {
    let env = |e: anyhow::Error| anyhow::Error::new(EnvironmentError(e));
    let dir = make_run_dir(&plan, &opts).map_err(env)?;
    record_scenario(&dir, &plan).map_err(env)?;
    let clock = Clock::start();
    let (tw, th) = TraceWriter::create(&dir.join(trace::TRACE_FILE))
        .context("creating the trace")
        .map_err(env)?;
    tw.emit(Event::RunStart {
        t: 0,
        name: plan.scenario.name.clone(),
        seed: plan.seed,
        wall: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        mono_ns: clock.base_mono_ns(),
        version: env!("CARGO_PKG_VERSION").into(),
    });
    let progress = Progress::new(opts.quiet);
    progress.line(&format!(
        "haq: starting target ({:?}) · run dir {}",
        plan.scenario.target.kind,
        dir.display()
    ));
    let target = tokio::select! {
        t = start_target(&plan, &opts, &dir, &tw, &clock) => t,
        _ = cancel.cancelled() => Err(anyhow!("interrupted while starting the target")),
    };
    let mut target = match target {
        Ok(t) => t,
        Err(e) => {
            tw.emit(Event::RunEnd {
                t: clock.now_us(),
                interrupted: cancel.is_cancelled(),
                reason: Some(format!("{e:#}")),
            });
            drop(tw);
            let _ = th.finish();
            return Err(env(e));
        }
    };
    tw.emit(Event::Target {
        t: clock.now_us(),
        url: target.api_url.clone(),
        replicas: target.replicas.clone(),
    });

    // Faults fire in their own task on the load's clock; the guard heals whatever is
    // still applied if this function unwinds or returns early.
    let guard = HealGuard::new(tw.clone(), clock);
    let load_done = CancellationToken::new();
    let stop_faults = cancel.child_token();
    let mut env = fault_env(
        &plan,
        &target,
        &dir,
        &tw,
        &clock,
        &guard,
        &progress,
        &load_done,
        &stop_faults,
    )?;
    // The replicas' own readiness, polled while the load runs (Q11), when asked for.
    let watch = match plan.scenario.evidence.readiness_watch {
        Some(every) => Some(tokio::spawn(crate::observe::readiness(
            target.registry.clone(),
            every.0,
            crate::faults::admin_client()?,
            clock,
            tw.clone(),
            load_done.clone(),
        ))),
        None => None,
    };
    let (started, load_start) = tokio::sync::oneshot::channel();
    let fault_plans = plan.faults.clone();
    let faults = tokio::spawn(async move {
        if let Ok(t) = load_start.await {
            env.load_start = t;
            crate::faults::schedule::run(fault_plans, Arc::new(env)).await;
        }
    });
    let driven = load::drive(&plan, &target, started, &clock, &tw, &cancel, &progress).await;
    load_done.cancel();
    if let Some(w) = watch {
        let _ = w.await;
    }
    finish_faults(faults, &plan, &stop_faults).await;
    guard.heals().heal_all("the run ended").await;
    if let Some(p) = target.proxies.take() {
        p.stop();
    }
    // Evidence kept outside the run directory (a tool log) is copied in (M10).
    if let Err(e) = check::evidence::collect(&plan, &dir).await {
        progress.line(&format!("evidence: {e}"));
        tw.emit(Event::Observation {
            t: clock.now_us(),
            source: "evidence".into(),
            replica: None,
            what: "tool_log_unavailable".into(),
            detail: Some(e),
        });
    }
    if let Some(sim) = target.sim.take() {
        sim.stop().await;
    }
    drop(guard);
    let interrupted = cancel.is_cancelled();
    emit_trace_stats(&tw, &clock);
    tw.emit(Event::RunEnd {
        t: clock.now_us(),
        interrupted,
        reason: match (&driven, interrupted) {
            (Err(e), _) => Some(format!("{e:#}")),
            (Ok(()), true) => Some("interrupted (SIGINT/SIGTERM)".into()),
            _ => None,
        },
    });
    drop(tw);
    th.finish().context("writing the trace")?;
    driven?;

    let (plan, judgement) = check::judge_dir(&dir)?;
    crate::report::write_all(&dir, &plan, &judgement).context("writing the reports")?;
    Ok(RunResult {
        run_dir: dir,
        plan,
        judgement,
        interrupted,
    })
}
