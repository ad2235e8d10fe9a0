//! One agent of `haq run --agents N` (the hidden `haq agent` command): it sends its
//! share of the schedule, stamped on the coordinator's trace clock, into a trace of its
//! own, and reports back. It starts no target, fires no fault and keeps no phase clock:
//! the coordinator does (docs/agents.md).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use super::assignment::{AgentResult, Assignment, RESULT_FILE};
use crate::engine::load::{self, Aim, Part};
use crate::engine::progress::Progress;
use crate::plan::Plan;
use crate::trace::{self, Clock, Event, TraceWriter};
use crate::workload::{BodyMarker, Share};

/// Nanoseconds since the UNIX epoch, now.
pub(super) fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

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
    same_plan(&plan, &a)?;
    // The coordinator's trace clock, on this host's monotonic clock; the wall clock
    // read alongside gives the offset reported.
    let clock = Clock::resumed(a.epoch_mono_ns)
        .ok_or_else(|| anyhow!("the coordinator's clock epoch is in this host's future: agents run on the coordinator's host"))?;
    let mono_us = clock.now_us();
    let wall_us = wall_ns().saturating_sub(a.epoch_wall_ns) / 1000;
    let offset_us = wall_us as i64 - mono_us as i64;
    let token = crate::wire::marker::RunToken::parse(&a.token)
        .ok_or_else(|| anyhow!("bad run token in {}", assignment.display()))?;
    let (tw, th) =
        TraceWriter::create(&dir.join(trace::TRACE_FILE)).context("creating the agent's trace")?;
    let share = Share {
        index: a.index,
        count: a.count,
    };
    let ready_us = clock.now_us();
    let mut result = AgentResult {
        index: a.index,
        count: a.count,
        ready_us,
        late: ready_us >= a.start_us,
        sent: 0,
        left_us: 0,
        offset_us,
    };
    let driven = if result.late {
        Ok(0)
    } else {
        drive(
            &plan,
            &a,
            share,
            BodyMarker {
                field: a.marker,
                token,
            },
            (&clock, &tw),
            &cancel,
        )
        .await
    };
    load::emit_trace_stats(&tw, &clock);
    drop(tw);
    th.finish().context("writing the agent's trace")?;
    result.left_us = driven?;
    result.sent = sent_in(&dir.join(trace::TRACE_FILE))?;
    let out = serde_json::to_string_pretty(&result)?;
    std::fs::write(dir.join(RESULT_FILE), out + "\n").context("writing the agent's result")?;
    if result.late {
        bail!(
            "ready {:.3} s after the start deadline: sent nothing",
            (ready_us - a.start_us) as f64 / 1e6
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
/// scenario as the run directory records.
fn same_plan(plan: &Plan, a: &Assignment) -> anyhow::Result<()> {
    if plan.seed != a.seed {
        bail!("seed {} where the coordinator's is {}", plan.seed, a.seed);
    }
    let recorded = a.run_dir.join(trace::files::SCENARIO_FILE);
    let text = std::fs::read_to_string(&recorded)
        .with_context(|| format!("reading {}", recorded.display()))?;
    let theirs: serde_json::Value = serde_json::from_str(&text)?;
    let ours = serde_json::to_value(plan.scenario.redacted())?;
    if theirs != ours {
        bail!(
            "the scenario differs from the coordinator's ({}): the file changed since the run started?",
            recorded.display()
        );
    }
    Ok(())
}
