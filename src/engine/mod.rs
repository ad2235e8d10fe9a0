//! The run: start the target, offer the seeded open-loop schedule through every phase,
//! fire faults on time, collect the evidence files, record everything to the trace,
//! stop and clean up whatever happens — and stop there: judging the trace is the next
//! stage's job (`crate::run` goes on to `check` and `report`).

pub mod agents;
mod calibrate;
mod dir;
mod evidence;
mod headers;
mod load;
mod own;
mod progress;
pub mod search;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::client;
use crate::faults::HealGuard;
use crate::plan::Plan;
use crate::scenario::TargetKind;
use crate::target::{self, Running};
use crate::trace::{self, Clock, Event, TraceWriter};
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
    /// The load sent by this many agent processes (`--agents N`, N ≥ 2; `None`: by
    /// this process, as always).
    pub agents: Option<agents::Agents>,
}

/// A run recorded: its directory holds the trace and the evidence files, to be judged.
pub struct Recorded {
    pub run_dir: PathBuf,
    /// The run was stopped by SIGINT/SIGTERM (a partial trace).
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

/// What every step of a run shares.
struct Run<'a> {
    plan: &'a Plan,
    dir: PathBuf,
    clock: Clock,
    tw: TraceWriter,
    progress: Progress,
    cancel: &'a CancellationToken,
    /// Where every request body carries its marker, with this run's token.
    marker: crate::workload::BodyMarker,
}

fn fault_env(
    r: &Run,
    target: &Running,
    guard: &HealGuard,
    load_done: &CancellationToken,
    stop: &CancellationToken,
) -> anyhow::Result<crate::faults::schedule::Env> {
    let (plan, c) = (r.plan, &r.plan.scenario.client);
    let progress = r.progress.clone();
    Ok(crate::faults::schedule::Env {
        registry: target.registry.clone(),
        heals: guard.heals(),
        trace: r.tw.clone(),
        clock: r.clock,
        run_dir: r.dir.clone(),
        seed: plan.seed,
        board: target.proxies.as_ref().map(|p| p.board().clone()),
        probes: crate::faults::ProbeClient {
            http: client::Http::new(
                c.connect_timeout.0,
                &headers::request_headers(plan)?,
                c.transport,
            )?
            .with_limits(&c.limits),
            url: format!("{}/chat/completions", target.api_url),
            model: plan.scenario.target.model.clone(),
            marker: r.marker,
            attribution: load::attribution(plan, &target.replicas, target.learned.as_ref()),
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
        ledger: Arc::new(
            crate::faults::ledger::Ledger::open_listed(&r.dir, target_key(plan).as_deref())
                .context("opening the heal ledger")?,
        ),
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

/// Runs a validated plan end to end. Setup failures are [`EnvironmentError`]s.
pub async fn run(
    plan: Plan,
    opts: RunOptions,
    cancel: CancellationToken,
) -> anyhow::Result<Recorded> {
    let env = |e: anyhow::Error| anyhow::Error::new(EnvironmentError(e));
    crate::plan::budget::fit(&plan, crate::wire::fds::raise_fd_limit())
        .map_err(|e| env(anyhow::anyhow!(e)))?;
    check_agents(&plan, &opts).map_err(env)?;
    // Off the async threads: a heal command may take its time, and haq's signal
    // handling must run meanwhile (a second signal stops it).
    let (o, key) = (opts.clone(), target_key(&plan));
    let _ = tokio::task::spawn_blocking(move || heal_leftovers(&o, key.as_deref())).await;
    let dir = dir::make_run_dir(&plan, opts.out.as_deref(), &opts.reports_dir).map_err(env)?;
    dir::record_scenario(&dir, &plan).map_err(env)?;
    let clock = Clock::start();
    let (tw, th) = TraceWriter::create(&dir.join(trace::TRACE_FILE))
        .context("creating the trace")
        .map_err(env)?;
    // The run stops as soon as its trace cannot be written (a full disk): what it
    // measured after could not be kept. A stop of haq's own, not an interrupt.
    let run_cancel = cancel.child_token();
    let _trace_watch = watch_trace(tw.clone(), run_cancel.clone());
    let mut r = Run {
        plan: &plan,
        dir,
        clock,
        tw,
        progress: Progress::new(opts.quiet, plan.phases.len()),
        cancel: &run_cancel,
        marker: crate::workload::BodyMarker {
            field: plan.scenario.client.marker,
            token: crate::wire::marker::RunToken::fresh(),
        },
    };
    let target = match start_target(&r, &opts).await {
        Ok((t, field)) => {
            r.marker.field = field;
            t
        }
        Err(e) => {
            r.tw.emit(Event::RunEnd {
                t: r.clock.now_us(),
                interrupted: cancel.is_cancelled(),
                reason: Some(format!("{e:#}")),
            });
            drop(r);
            let _ = th.finish();
            return Err(env(e));
        }
    };
    let driven = drive(&r, target, &opts).await?;
    let interrupted = cancel.is_cancelled();
    load::emit_trace_stats(&r.tw, &r.clock);
    r.tw.emit(Event::RunEnd {
        t: r.clock.now_us(),
        interrupted,
        reason: match (&driven, interrupted) {
            (Err(e), _) => Some(format!("{e:#}")),
            (Ok(()), true) => Some("interrupted (SIGINT/SIGTERM)".into()),
            _ => None,
        },
    });
    let run_dir = r.dir.clone();
    let trace_failed = r.tw.failed().map(str::to_string);
    drop(r);
    let finished = th.finish();
    if let Some(e) = trace_failed {
        return Err(env(anyhow::anyhow!(
            "the trace {} could not be written ({e}): a failure of haq's host, not of the target; the run was stopped then and its faults healed, and it has no report (free space and run it again)",
            run_dir.join(trace::TRACE_FILE).display()
        )));
    }
    finished.context("writing the trace")?;
    if let Some(a) = &opts.agents {
        agents::merge_traces(&run_dir, a.count).context("merging the agents' traces")?;
    }
    driven?;
    Ok(Recorded {
        run_dir,
        interrupted,
    })
}

/// Cancels `stop` once the trace writer has failed; ends with the returned guard.
fn watch_trace(tw: TraceWriter, stop: CancellationToken) -> tokio_util::sync::DropGuard {
    let done = CancellationToken::new();
    let guard = done.clone().drop_guard();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = done.cancelled() => return,
            }
            if tw.failed().is_some() {
                stop.cancel();
                return;
            }
        }
    });
    guard
}

/// The run's first lines, then the target started (sim) or reached (url) and
/// recorded, with the place its request markers go.
async fn start_target(
    r: &Run<'_>,
    opts: &RunOptions,
) -> anyhow::Result<(Running, crate::scenario::MarkerField)> {
    let plan = r.plan;
    r.tw.emit(Event::RunStart {
        t: 0,
        name: plan.scenario.name.clone(),
        seed: plan.seed,
        wall: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        mono_ns: r.clock.base_mono_ns(),
        version: env!("CARGO_PKG_VERSION").into(),
        token: Some(r.marker.token.to_string()),
    });
    r.progress.line(&format!(
        "haq: starting the {} target · run dir {}",
        crate::scenario::words::name(&plan.scenario.target.kind),
        r.dir.display()
    ));
    let headers = headers::request_headers(plan)?;
    let say = |s: &str| r.progress.line(s);
    let target = tokio::select! {
        t = target::start(plan, opts.haq_bin.as_deref(), &headers, &r.dir, &r.tw, &r.clock, &say) => t?,
        _ = r.cancel.cancelled() => anyhow::bail!("interrupted while starting the target"),
    };
    if let Some(p) = &target.proxies {
        // The proxies attribute by this run's markers only.
        p.board().set_run_token(r.marker.token);
    }
    let (field, used) =
        calibrate::marker_field(plan, &target, r.marker, &headers, r.cancel, &say).await?;
    r.tw.emit(Event::Target {
        t: r.clock.now_us(),
        url: target.api_url.clone(),
        replicas: target.replicas.clone(),
        marker: used,
    });
    Ok((target, field))
}

/// The load through every phase with the faults on its clock; then every fault
/// healed, the evidence collected and the target stopped. The outer error is a setup
/// failure of the faults' environment; the inner one is the load's.
async fn drive(
    r: &Run<'_>,
    mut target: Running,
    opts: &RunOptions,
) -> anyhow::Result<anyhow::Result<()>> {
    let plan = r.plan;
    // Faults fire in their own task on the load's clock; the guard heals whatever is
    // still applied if this function unwinds or returns early.
    let guard = HealGuard::new(r.tw.clone(), r.clock);
    let load_done = CancellationToken::new();
    let stop_faults = r.cancel.child_token();
    let mut env = fault_env(r, &target, &guard, &load_done, &stop_faults)?;
    let ledger = env.ledger.clone();
    // The replicas' own readiness, polled while the load runs (Q11), when asked for.
    let watch = match plan.scenario.evidence.readiness_watch {
        Some(every) => Some(tokio::spawn(crate::target::readiness::readiness(
            target.registry.clone(),
            every.0,
            crate::faults::admin_client()?,
            r.clock,
            r.tw.clone(),
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
    let left = Arc::new(AtomicU64::new(0));
    let aim = load::Aim {
        api_url: &target.api_url,
        replicas: &target.replicas,
        learned: target.learned.as_ref(),
    };
    let ctx = load::Ctx {
        clock: &r.clock,
        tw: &r.tw,
        cancel: r.cancel,
        progress: &r.progress,
        left: left.clone(),
        part: load::Part::Whole,
        load_start: None,
    };
    let driven = match &opts.agents {
        None => load::drive(plan, aim, r.marker, started, ctx).await,
        Some(a) => {
            let bin = match &opts.haq_bin {
                Some(b) => b.clone(),
                None => target::sim::haq_binary().context("locating the haq executable")?,
            };
            let c = agents::Coordinator {
                plan,
                aim,
                marker: r.marker,
                run_dir: &r.dir,
                bin: &bin,
            };
            agents::coordinate(c, a, started, ctx).await
        }
    };
    load_done.cancel();
    if let Some(w) = watch {
        let _ = w.await;
    }
    finish_faults(faults, plan, &stop_faults).await;
    guard.heals().heal_all("the run ended").await;
    ledger.settle();
    if target.proxies.is_some() {
        observe_cancel_grace(r, left.load(Ordering::Relaxed)).await;
    }
    target.stop_proxies();
    collect_evidence(r).await;
    target.stop().await;
    drop(guard);
    Ok(driven)
}

/// What agents cannot do: a closed loop (`workload.arrival.max_concurrency`) caps the
/// sends of one process, not of N.
fn check_agents(plan: &Plan, opts: &RunOptions) -> anyhow::Result<()> {
    let Some(a) = &opts.agents else {
        return Ok(());
    };
    if a.count < 2 {
        anyhow::bail!(
            "--agents {}: agents are 2 or more (1 is this process alone)",
            a.count
        );
    }
    if plan.scenario.workload.arrival.max_concurrency.is_some() {
        anyhow::bail!(
            "--agents {}: workload.arrival.max_concurrency is a closed loop over all sends, which N processes cannot share; run it with one",
            a.count
        );
    }
    Ok(())
}

/// How much longer than the cancel grace the proxies observe: an upstream still
/// running when they stop has then clearly outlived the grace.
const GRACE_MARGIN: Duration = Duration::from_millis(250);

/// The proxies keep observing until `evidence.cancel_grace` (and [`GRACE_MARGIN`])
/// has passed since a client last went away (`left_us`, trace µs; 0: none did): an
/// upstream the gateway keeps running after its client left then shows in the trace
/// (M4), instead of being cut short by haq stopping its proxies. Not after an
/// interrupt.
async fn observe_cancel_grace(r: &Run<'_>, left_us: u64) {
    if left_us == 0 || r.cancel.is_cancelled() {
        return;
    }
    let grace = r.plan.scenario.evidence.cancel_grace.0;
    let until = r.clock.instant_at(left_us) + grace + GRACE_MARGIN;
    let wait = until.saturating_duration_since(Instant::now());
    if wait.is_zero() {
        return;
    }
    r.progress.line(&format!(
        "observing upstreams for {:.1} s more (evidence.cancel_grace after the last client left)",
        wait.as_secs_f64()
    ));
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = r.cancel.cancelled() => {}
    }
}

/// Evidence kept outside the run directory (a tool log) is copied in (M10).
async fn collect_evidence(r: &Run<'_>) {
    if let Err(e) = evidence::collect(r.plan, &r.dir).await {
        r.progress.line(&format!("evidence: {e}"));
        r.tw.emit(Event::Observation {
            t: r.clock.now_us(),
            source: "evidence".into(),
            replica: None,
            what: "tool_log_unavailable".into(),
            detail: Some(e),
        });
    }
}

/// Before a run: what earlier runs in the same reports directory (and the run
/// directory asked for), and runs anywhere against the same `target`
/// ([`crate::faults::open_runs`]), left applied when they were killed is undone first
/// (`haq heal` on each), so no replica stays frozen from one run into the next.
fn heal_leftovers(opts: &RunOptions, target: Option<&str>) {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&opts.reports_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(trace::files::HEALS_FILE).exists())
        .collect();
    dirs.extend(
        opts.out
            .clone()
            .filter(|d| d.join(trace::files::HEALS_FILE).exists()),
    );
    dirs.extend(
        target
            .map(crate::faults::open_runs::of_target)
            .unwrap_or_default(),
    );
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())));
    for d in dirs {
        // A run still alive heals its own (heal_dir refuses it).
        if let Ok(done) = crate::faults::ledger::heal_dir(&d) {
            for x in done {
                eprintln!(
                    "haq: {} {} on {} left by the run in {}: {}",
                    if x.ok { "healed" } else { "could NOT heal" },
                    x.entry.fault,
                    x.entry.replica,
                    d.display(),
                    x.detail
                );
            }
        }
    }
}

/// The identity of the plan's target, the key of the runs listed with open faults:
/// the gateway URL without credentials, query or fragment; the kubernetes context and
/// namespace (never a secret: no header, no user or password). `None` for the sim: a
/// cluster of the run's own, gone with it.
fn target_key(plan: &Plan) -> Option<String> {
    let t = &plan.scenario.target;
    match t.kind {
        TargetKind::Sim => None,
        TargetKind::Kubernetes => t.kubernetes.as_ref().map(|k| {
            format!(
                "kubernetes {}/{}",
                k.context.as_deref().unwrap_or("(current context)"),
                k.namespace
            )
        }),
        TargetKind::Url => {
            let mut u = reqwest::Url::parse(t.url.as_deref()?).ok()?;
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            Some(format!("url {u}"))
        }
    }
}
