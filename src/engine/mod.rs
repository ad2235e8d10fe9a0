//! The run: start the target, offer the seeded open-loop schedule through every phase,
//! fire faults on time, record everything to the trace, stop and clean up whatever
//! happens, then judge the trace from disk.

mod load;
mod progress;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

use crate::check::{self, Judgement};
use crate::client;
use crate::scenario::{Plan, TargetKind};
use crate::sim::SimCluster;
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
}

async fn start_target(plan: &Plan, opts: &RunOptions, dir: &Path) -> anyhow::Result<Target> {
    let t = &plan.scenario.target;
    match t.kind {
        TargetKind::Sim => {
            let bin = match &opts.haq_bin {
                Some(b) => b.clone(),
                None => crate::sim::haq_binary().context("locating the haq executable")?,
            };
            let sim = SimCluster::start(t, &bin, dir)
                .await
                .context("starting the sim cluster")?;
            Ok(Target {
                api_url: sim.api_url.clone(),
                replicas: sim.info.clone(),
                sim: Some(sim),
            })
        }
        TargetKind::Url => {
            let url = t
                .url
                .clone()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string();
            let http = client::http_client(Duration::from_secs(5), &request_headers(plan)?)?;
            http.get(format!("{url}/models"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .with_context(|| format!("target {url} is not reachable"))?;
            Ok(Target {
                api_url: url,
                sim: None,
                replicas: Vec::new(),
            })
        }
    }
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
        t = start_target(&plan, &opts, &dir) => t,
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

    let driven = load::drive(&plan, &mut target, &clock, &tw, &cancel, &progress).await;
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
    let interrupted = cancel.is_cancelled();
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
