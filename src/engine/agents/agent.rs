//! One agent of `haq run --agents N` (the hidden `haq agent` command): it sends its
//! share of the schedule, stamped on the coordinator's trace clock, into a trace of its
//! own, and reports back. It starts no target, fires no fault and keeps no phase clock:
//! the coordinator does (docs/agents.md). A local agent reads its assignment from a
//! file and resumes the coordinator's clock from this host's monotonic clock; a remote
//! one (a pod) fetches its assignment from the coordinator's endpoint, sets its clock
//! by a clock exchange with it and sends its trace and result back there.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use super::assignment::{AgentResult, Assignment, RESULT_FILE, wall_ns};
use super::remote::{Remote, Synced};
use crate::engine::load::{self, Aim, Part};
use crate::engine::progress::Progress;
use crate::plan::Plan;
use crate::trace::{self, Clock, Event, TraceWriter};
use crate::workload::{BodyMarker, Share};

/// Runs the share an assignment file gives, with `plan` read by the agent itself from
/// the same scenario, overrides and seed as the coordinator's. Writes the agent's trace
/// and result next to the assignment.
pub async fn run(plan: Plan, assignment: &Path, cancel: CancellationToken) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(assignment)
        .with_context(|| format!("reading {}", assignment.display()))?;
    let a: Assignment =
        serde_json::from_str(&text).with_context(|| format!("reading {}", assignment.display()))?;
    let dir = assignment
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", assignment.display()))?;
    let recorded = a.run_dir.join(trace::files::SCENARIO_FILE);
    let text = std::fs::read_to_string(&recorded)
        .with_context(|| format!("reading {}", recorded.display()))?;
    same_plan(&plan, &a, serde_json::from_str(&text)?, &recorded.display())?;
    // The coordinator's trace clock, on this host's monotonic clock; the wall clock
    // read alongside gives the offset reported.
    let clock = Clock::resumed(a.epoch_mono_ns)
        .ok_or_else(|| anyhow!("the coordinator's clock epoch is in this host's future: agents run on the coordinator's host"))?;
    let mono_us = clock.now_us();
    let wall_us = wall_ns().saturating_sub(a.epoch_wall_ns) / 1000;
    let synced = Synced {
        clock,
        offset_us: wall_us as i64 - mono_us as i64,
        rtt_us: 0,
    };
    let (result, driven) = send_share(&plan, &a, &synced, None, dir, &cancel).await?;
    let out = serde_json::to_string_pretty(&result)?;
    std::fs::write(dir.join(RESULT_FILE), out + "\n").context("writing the agent's result")?;
    finish(&a, &result, driven)
}

/// An agent on another host: share `index` of the run whose coordinator serves at
/// `coordinator` (with `key`); its trace is kept in `work` until sent.
pub async fn run_remote(
    plan: Plan,
    (coordinator, key): (&str, &str),
    index: u64,
    work: &Path,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let remote = Remote::new(coordinator, key)?;
    let a = remote.assignment(index).await?;
    let theirs = remote.scenario().await?;
    same_plan(&plan, &a, theirs, &format!("{coordinator}/scenario"))?;
    let synced = remote.sync().await.context("the clock exchange")?;
    eprintln!(
        "haq agent {index}: clock set by an exchange of {} µs round trip; wall clock {:+} µs from the coordinator's",
        synced.rtt_us, synced.offset_us
    );
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let rtt = Some(synced.rtt_us);
    let (mut result, driven) = send_share(&plan, &a, &synced, rtt, work, &cancel).await?;
    if let Ok(end) = remote.sync().await {
        result.sync_drift_us = Some(end.clock.now_us() as i64 - synced.clock.now_us() as i64);
    }
    remote
        .send_trace(index, &work.join(trace::TRACE_FILE))
        .await
        .context("sending the trace")?;
    remote
        .send_result(&result)
        .await
        .context("sending the result")?;
    finish(&a, &result, driven)
}

/// The share sent (unless the agent was late) into `dir`'s trace; the result to report
/// and how the load went.
async fn send_share(
    plan: &Plan,
    a: &Assignment,
    synced: &Synced,
    sync_rtt_us: Option<u64>,
    dir: &Path,
    cancel: &CancellationToken,
) -> anyhow::Result<(AgentResult, anyhow::Result<u64>)> {
    let clock = synced.clock;
    let token = crate::wire::marker::RunToken::parse(&a.token)
        .ok_or_else(|| anyhow!("bad run token in the assignment"))?;
    let (tw, th) =
        TraceWriter::create(&dir.join(trace::TRACE_FILE)).context("creating the agent's trace")?;
    let share = Share {
        index: a.index,
        count: a.count,
    };
    if a.index >= a.count {
        bail!("share {} of {}: no such share", a.index, a.count);
    }
    let ready_us = clock.now_us();
    let mut result = AgentResult {
        index: a.index,
        count: a.count,
        ready_us,
        late: ready_us >= a.start_us,
        sent: 0,
        left_us: 0,
        offset_us: synced.offset_us,
        sync_rtt_us,
        sync_drift_us: None,
    };
    let driven = if result.late {
        Ok(0)
    } else {
        let marker = BodyMarker {
            field: a.marker,
            token,
        };
        drive(plan, a, share, marker, (&clock, &tw), cancel).await
    };
    load::emit_trace_stats(&tw, &clock);
    drop(tw);
    th.finish().context("writing the agent's trace")?;
    result.sent = sent_in(&dir.join(trace::TRACE_FILE))?;
    if let Ok(left) = &driven {
        result.left_us = *left;
    }
    Ok((result, driven))
}

/// The agent's exit: an error when its load failed or it was late.
fn finish(a: &Assignment, r: &AgentResult, driven: anyhow::Result<u64>) -> anyhow::Result<()> {
    driven?;
    if r.late {
        bail!(
            "ready {:.3} s after the start deadline: sent nothing",
            r.ready_us.saturating_sub(a.start_us) as f64 / 1e6
        );
    }
    Ok(())
}

/// The requests its trace records sent.
fn sent_in(path: &Path) -> anyhow::Result<u64> {
    let mut n = 0;
    for ev in trace::read_only(path, &["request"])? {
        if matches!(
            ev.map_err(anyhow::Error::msg)?,
            Event::Request { probe: None, .. }
        ) {
            n += 1;
        }
    }
    Ok(n)
}

/// The agent's share, from the coordinator's start of load; when a client last went
/// away before its answer ended (trace µs, 0: never).
async fn drive(
    plan: &Plan,
    a: &Assignment,
    share: Share,
    marker: BodyMarker,
    (clock, tw): (&Clock, &TraceWriter),
    cancel: &CancellationToken,
) -> anyhow::Result<u64> {
    let (started, _) = tokio::sync::oneshot::channel();
    let left = Arc::new(AtomicU64::new(0));
    let progress = Progress::new(true, plan.phases.len());
    let aim = Aim {
        api_url: &a.api_url,
        replicas: &a.replicas,
        learned: None,
    };
    let ctx = load::Ctx {
        clock,
        tw,
        cancel,
        progress: &progress,
        left: left.clone(),
        part: Part::Share(share),
        load_start: Some(clock.instant_at(a.start_us)),
    };
    load::drive(plan, aim, marker, started, ctx).await?;
    Ok(left.load(Ordering::Relaxed))
}

/// The agent's plan is the coordinator's: the same seed and the same effective
/// scenario as the run directory records (`theirs`, read from `from`).
fn same_plan(
    plan: &Plan,
    a: &Assignment,
    theirs: serde_json::Value,
    from: &dyn std::fmt::Display,
) -> anyhow::Result<()> {
    if plan.seed != a.seed {
        bail!("seed {} where the coordinator's is {}", plan.seed, a.seed);
    }
    let ours = serde_json::to_value(plan.scenario.redacted())?;
    if theirs != ours {
        bail!(
            "the scenario differs from the coordinator's ({from}): the file changed since the run started?"
        );
    }
    Ok(())
}
