//! Agents as a Kubernetes Indexed Job (`agents.kubernetes`, docs/agents.md): this
//! process serves the agents' endpoint, creates the Job (one pod per share), keeps the
//! phase clock while they send, and records how each ended from what it returned and
//! what its pod did (`super::pods`); then it copies their logs into the run directory
//! and deletes the Job. Interrupted, it deletes the Job at once: the pods get SIGTERM,
//! end their requests `interrupted` and still return their traces.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use tokio_util::sync::CancellationToken;

use super::assignment::{self, LOG_FILE};
use super::endpoint::{self, Served};
use super::pods::{self, Watch};
use super::setup::{self, Agents, Api, Coordinator, EXIT_GRACE, OnKube};
use crate::engine::load::{self, Part};
use crate::scenario::KubeAgents;
use crate::target::kube::cluster;
use crate::target::kube::jobs::{self, AgentJob, AgentPod};
use crate::trace::merge::{AgentNote, AgentState};

async fn api(c: &Coordinator<'_>, on: &OnKube) -> anyhow::Result<Api> {
    let client = match &on.client {
        Some(c) => c.clone(),
        None => {
            let k = c.plan.scenario.target.kubernetes.as_ref().ok_or_else(|| {
                anyhow::anyhow!("agents.kubernetes needs a kind: kubernetes target")
            })?;
            cluster::connect(k).await?.0
        }
    };
    Ok(Api {
        client,
        ns: on.namespace.clone(),
    })
}

/// The URL the pods reach the endpoint at: `advertise`, else the `listen` address
/// when it names one, else this pod's `POD_IP` (the downward API).
pub(super) fn advertised(cfg: &KubeAgents, bound: SocketAddr) -> anyhow::Result<String> {
    if let Some(a) = &cfg.advertise {
        return Ok(a.trim_end_matches('/').to_string());
    }
    if !bound.ip().is_unspecified() {
        return Ok(format!("http://{bound}"));
    }
    match std::env::var("POD_IP") {
        Ok(ip) if ip.contains(':') => Ok(format!("http://[{ip}]:{}", bound.port())),
        Ok(ip) if !ip.is_empty() => Ok(format!("http://{ip}:{}", bound.port())),
        _ => anyhow::bail!(
            "agents.kubernetes: set `advertise` (the URL the agent pods reach this process at), or run haq in a pod with POD_IP from the downward API (examples/kubernetes/coordinator.yaml)"
        ),
    }
}

/// Starts the agents' Job, keeps the phase clock while they send, and waits for each
/// to end (recording how it ended).
pub(super) async fn coordinate(
    c: Coordinator<'_>,
    agents: &Agents,
    on: &OnKube,
    started: tokio::sync::oneshot::Sender<Instant>,
    ctx: load::Ctx<'_>,
) -> anyhow::Result<()> {
    let (clock, tw, n) = (*ctx.clock, ctx.tw.clone(), agents.count);
    let api = Arc::new(api(&c, on).await?);
    let start_us = clock.us_of(Instant::now() + on.cfg.start_within.0);
    let mut assignments = Vec::new();
    for index in 0..n {
        assignments.push(setup::assign(&c, n, index, (&clock, start_us))?.0);
    }
    let key = format!("{:032x}", rand::random::<u128>());
    let scenario = std::fs::read_to_string(c.run_dir.join(crate::trace::files::SCENARIO_FILE))?;
    let ep = endpoint::serve(
        &on.cfg.listen,
        Served {
            clock,
            key: key.clone(),
            run_dir: c.run_dir.to_path_buf(),
            scenario,
            assignments,
        },
    )
    .await?;
    let url = advertised(&on.cfg, ep.addr)?;
    let token = c.marker.token.to_string();
    let file = agents
        .scenario
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let job = jobs::agent_job(&AgentJob {
        token: &token,
        count: n,
        cfg: &on.cfg,
        args: jobs::agent_args(&on.cfg, &file, &agents.sets, c.plan.seed, &url),
        key: &key,
        deadline_s: jobs::deadline_s(c.plan, &on.cfg),
    });
    let name = jobs::job_name(&token);
    api.send::<Job>(jobs::create_job(&api.ns, &job))
        .await
        .map_err(|e| anyhow::anyhow!("creating the agents' Job {name}: {e}"))?;
    let note = |k: u64| AgentNote {
        agent: assignment::name(k),
        share: k,
        of: n,
        deadline_us: Some(start_us),
        ..Default::default()
    };
    for k in 0..n {
        tw.emit(note(k).event(clock.now_us(), AgentState::Started));
    }
    // Interrupted: the Job goes at once (its pods get SIGTERM and return what they have).
    let _forward = {
        let (cancel, api, name) = (ctx.cancel.clone(), api.clone(), name.clone());
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            cancel.cancelled().await;
            let _ = api
                .send::<serde_json::Value>(jobs::delete_job(&api.ns, &name))
                .await;
        }))
    };
    let stop = CancellationToken::new();
    let w = Watch {
        api: api.clone(),
        token: token.clone(),
        notes: (0..n).map(note).collect(),
        clock,
        tw,
        poll: on.poll,
    };
    let mut watcher = tokio::spawn(pods::watch(w, ep.results, stop.clone()));
    let left = ctx.left.clone();
    let edges = load::Ctx {
        part: Part::Edges,
        load_start: Some(clock.instant_at(start_us)),
        ..ctx
    };
    let driven = load::drive(c.plan, c.aim, c.marker, started, edges).await;
    let bound = c.plan.scenario.client.drain_timeout.0 + EXIT_GRACE;
    let ended = match tokio::time::timeout(bound, &mut watcher).await {
        Ok(ended) => ended,
        Err(_) => {
            stop.cancel();
            watcher.await
        }
    }
    .context("the agents' watch")?;
    left.fetch_max(ended.left_us, std::sync::atomic::Ordering::Relaxed);
    copy_logs(&api, c.run_dir, &ended.pods).await;
    let _ = api
        .send::<serde_json::Value>(jobs::delete_job(&api.ns, &name))
        .await;
    driven
}

/// Each agent pod's log into its directory of the run (`agent.log`, as a local
/// agent's stderr).
async fn copy_logs(api: &Api, run_dir: &std::path::Path, pods: &[AgentPod]) {
    for p in pods {
        let Some(k) = p.index else { continue };
        let call = jobs::agent_log(&api.ns, &p.name);
        let text = match api.client.request_text(call.req).await {
            Ok(t) => t,
            Err(e) => format!("haq: the log of pod {} could not be read: {e}\n", p.name),
        };
        let dir = assignment::agent_dir(run_dir, k);
        let _ = std::fs::write(dir.join(LOG_FILE), text);
    }
}
