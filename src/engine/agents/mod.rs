//! `haq run --agents N`: the load of one run sent by N local haq processes (agents).
//! The seeded schedule is split by request index (request i is agent i mod N's), so the
//! union of the shares is exactly the single-process schedule. This process stays the
//! coordinator: it starts the target, fires the faults, keeps the phase clock and
//! writes the phase edges; each agent (`haq agent`, hidden, spawned from the same
//! executable) re-reads the scenario, checks it is the run's, sends its share from the
//! shared start of load on the coordinator's trace clock, records its own trace and
//! reports back. An agent not ready by the start deadline, dying or exiting non-zero
//! is recorded (`agent` observations) and makes the run INVALID, named
//! (`check::validity`). After the run the traces are merged into one
//! (`trace::merge`). docs/agents.md.

mod agent;
mod assignment;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::Command;

use super::load::{self, Aim, Part};
use crate::plan::Plan;
use crate::trace::merge::{self, AgentNote, AgentState};
use crate::trace::{Clock, TraceWriter};
use crate::workload::BodyMarker;
pub use agent::run as agent;
use assignment::{AgentResult, Assignment, LOG_FILE, RESULT_FILE};

/// How the agents of a run are started: how many, and the scenario file and overrides
/// each re-reads (the coordinator's own command line).
#[derive(Debug, Clone)]
pub struct Agents {
    pub count: u64,
    pub scenario: PathBuf,
    pub sets: Vec<String>,
}

/// How long the agents have, from their spawn, to be ready before the load starts: an
/// agent reads the scenario and builds its client in well under a second; the rest is
/// room for a busy host.
pub fn start_within(count: u64) -> Duration {
    Duration::from_millis(2_000 + 250 * count)
}

/// How long past the end of load and the drain timeout an agent may take to write its
/// trace and exit before it is killed (and counted lost).
const EXIT_GRACE: Duration = Duration::from_secs(30);

/// What the load shares with the coordinator.
pub(super) struct Coordinator<'a> {
    pub plan: &'a Plan,
    pub aim: Aim<'a>,
    pub marker: BodyMarker,
    pub run_dir: &'a Path,
    pub bin: &'a Path,
}

/// One agent running.
struct Running {
    pid: Option<u32>,
    waiter: tokio::task::JoinHandle<()>,
}

/// Starts the agents, keeps the phase clock while they send, and waits for each to
/// end (recording how it ended); then `ctx.left` holds the last client gone of any.
pub(super) async fn coordinate(
    c: Coordinator<'_>,
    agents: &Agents,
    started: tokio::sync::oneshot::Sender<Instant>,
    ctx: load::Ctx<'_>,
) -> anyhow::Result<()> {
    let (clock, tw) = (*ctx.clock, ctx.tw.clone());
    // On a whole µs of the trace clock: the agents' start of load is the same instant.
    let start_us = clock.us_of(Instant::now() + start_within(agents.count));
    let start = clock.instant_at(start_us);
    let lefts = Arc::new(AtomicU64::new(0));
    let mut running = Vec::new();
    for index in 0..agents.count {
        let a = assign(&c, agents, index, (&clock, start_us))?;
        running.push(spawn(&c, agents, a, (&clock, &tw), lefts.clone()).await?);
    }
    // Stops the agents on an interrupt, as this process's own sends would be.
    let pids: Vec<u32> = running.iter().filter_map(|r| r.pid).collect();
    let _forward = {
        let cancel = ctx.cancel.clone();
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            cancel.cancelled().await;
            signal_all(&pids, libc::SIGTERM);
        }))
    };
    let left = ctx.left.clone();
    let edges = load::Ctx {
        part: Part::Edges,
        load_start: Some(start),
        ..ctx
    };
    let driven = load::drive(c.plan, c.aim, c.marker, started, edges).await;
    let bound = c.plan.scenario.client.drain_timeout.0 + EXIT_GRACE;
    for r in running {
        let mut waiter = r.waiter;
        if tokio::time::timeout(bound, &mut waiter).await.is_err() {
            signal_all(&r.pid.into_iter().collect::<Vec<_>>(), libc::SIGKILL);
            let _ = waiter.await;
        }
    }
    left.fetch_max(lefts.load(Ordering::Relaxed), Ordering::Relaxed);
    driven
}

fn signal_all(pids: &[u32], sig: libc::c_int) {
    for &pid in pids {
        // SAFETY: kill(2) on a child this process spawned and has not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Writes agent `index`'s assignment file; returns its path.
fn assign(
    c: &Coordinator<'_>,
    agents: &Agents,
    index: u64,
    (clock, start_us): (&Clock, u64),
) -> anyhow::Result<PathBuf> {
    let dir = assignment::agent_dir(c.run_dir, index);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let a = Assignment {
        index,
        count: agents.count,
        seed: c.plan.seed,
        epoch_mono_ns: clock.base_mono_ns(),
        epoch_wall_ns: agent::wall_ns().saturating_sub(clock.now_us() * 1000),
        start_us,
        api_url: c.aim.api_url.to_string(),
        replicas: c.aim.replicas.to_vec(),
        marker: c.marker.field,
        token: c.marker.token.to_string(),
        run_dir: c.run_dir.to_path_buf(),
    };
    let path = dir.join(assignment::ASSIGNMENT_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&a)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Starts one agent; a task waits for its end and records it.
async fn spawn(
    c: &Coordinator<'_>,
    agents: &Agents,
    path: PathBuf,
    (clock, tw): (&Clock, &TraceWriter),
    lefts: Arc<AtomicU64>,
) -> anyhow::Result<Running> {
    let text = std::fs::read_to_string(&path)?;
    let a: Assignment = serde_json::from_str(&text)?;
    let dir = assignment::agent_dir(c.run_dir, a.index);
    let log = std::fs::File::create(dir.join(LOG_FILE))?;
    let mut cmd = Command::new(c.bin);
    cmd.arg("agent").arg(&agents.scenario);
    for s in &agents.sets {
        cmd.arg("--set").arg(s);
    }
    cmd.arg("--seed")
        .arg(c.plan.seed.to_string())
        .arg("--assignment")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            // An agent dies with its coordinator, as sim processes do.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting agent {} from {}", a.index, c.bin.display()))?;
    let pid = child.id();
    let note = AgentNote {
        agent: assignment::name(a.index),
        share: a.index,
        of: a.count,
        pid,
        deadline_us: Some(a.start_us),
        ..Default::default()
    };
    tw.emit(note.event(clock.now_us(), AgentState::Started));
    let (clock, tw) = (*clock, tw.clone());
    let waiter = tokio::spawn(async move {
        let status = child.wait().await;
        let t = clock.now_us();
        let result = read_result(&dir);
        if let Some(r) = &result {
            lefts.fetch_max(r.left_us, Ordering::Relaxed);
        }
        let (state, note) = ended(note, status, result);
        tw.emit(note.event(t, state));
    });
    Ok(Running { pid, waiter })
}

fn read_result(dir: &Path) -> Option<AgentResult> {
    let text = std::fs::read_to_string(dir.join(RESULT_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// How an agent ended: done (exit 0 with its result), late (its result says so) or
/// lost (anything else: a signal, an error, no result).
fn ended(
    mut note: AgentNote,
    status: std::io::Result<std::process::ExitStatus>,
    result: Option<AgentResult>,
) -> (AgentState, AgentNote) {
    use std::os::unix::process::ExitStatusExt;
    if let Some(r) = &result {
        note.sent = Some(r.sent);
        note.ready_us = Some(r.ready_us);
        note.offset_us = Some(r.offset_us);
    }
    let how = match &status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "ended abnormally".to_string(),
        }),
        Err(e) => Some(format!("could not be waited for: {e}")),
    };
    match (how, result) {
        (_, Some(r)) if r.late => {
            note.reason = Some(format!(
                "ready {:.3} s after the start deadline, so it sent nothing",
                r.ready_us.saturating_sub(note.deadline_us.unwrap_or(0)) as f64 / 1e6
            ));
            (AgentState::Late, note)
        }
        (None, Some(_)) => (AgentState::Done, note),
        (None, None) => {
            note.reason = Some(format!("exited without its {RESULT_FILE}"));
            (AgentState::Lost, note)
        }
        (Some(how), _) => {
            note.reason = Some(format!("{how} (its log: {})", LOG_FILE));
            (AgentState::Lost, note)
        }
    }
}

/// The agents' traces merged into the run's (after the coordinator's trace is written).
pub fn merge_traces(run_dir: &Path, count: u64) -> anyhow::Result<merge::Merged> {
    let parts: Vec<merge::Part> = (0..count)
        .map(|share| merge::Part {
            share,
            count,
            trace: assignment::agent_dir(run_dir, share).join(crate::trace::TRACE_FILE),
        })
        .filter(|p| p.trace.exists())
        .collect();
    merge::merge(&run_dir.join(crate::trace::TRACE_FILE), &parts).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    fn note() -> AgentNote {
        AgentNote {
            agent: "agent-1".into(),
            share: 1,
            of: 3,
            deadline_us: Some(2_000_000),
            ..Default::default()
        }
    }

    fn result(late: bool, ready_us: u64) -> AgentResult {
        AgentResult {
            index: 1,
            count: 3,
            ready_us,
            late,
            sent: if late { 0 } else { 17 },
            left_us: 0,
            offset_us: 4,
        }
    }

    #[test]
    fn how_an_agent_ended_is_read_from_its_exit_and_its_result() {
        let (s, n) = ended(
            note(),
            Ok(ExitStatus::from_raw(0)),
            Some(result(false, 900_000)),
        );
        assert_eq!(
            (s, n.sent, n.offset_us),
            (AgentState::Done, Some(17), Some(4))
        );
        // Late: its result says so, whatever its exit code.
        let (s, n) = ended(
            note(),
            Ok(ExitStatus::from_raw(2 << 8)),
            Some(result(true, 2_300_000)),
        );
        assert_eq!(s, AgentState::Late);
        assert_eq!(
            n.reason.as_deref(),
            Some("ready 0.300 s after the start deadline, so it sent nothing")
        );
        // Killed (SIGKILL, no result), exited non-zero, or exited 0 without a result.
        let (s, n) = ended(note(), Ok(ExitStatus::from_raw(9)), None);
        assert_eq!(s, AgentState::Lost);
        assert!(
            n.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("killed by signal 9")),
            "{n:?}"
        );
        let (s, n) = ended(
            note(),
            Ok(ExitStatus::from_raw(2 << 8)),
            Some(result(false, 1)),
        );
        assert_eq!(s, AgentState::Lost);
        assert!(
            n.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("exited with code 2")),
            "{n:?}"
        );
        let (s, n) = ended(note(), Ok(ExitStatus::from_raw(0)), None);
        assert_eq!(s, AgentState::Lost);
        assert_eq!(n.reason.as_deref(), Some("exited without its result.json"));
    }
}
