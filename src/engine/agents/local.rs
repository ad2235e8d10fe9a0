//! Local agents: N `haq agent` processes spawned from this executable, on this host's
//! monotonic clock (docs/agents.md). Each writes its trace and result into its
//! directory of the run; this process waits for each and records how it ended.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use tokio::process::Command;

use super::assignment::{self, AgentResult, Assignment, LOG_FILE, RESULT_FILE};
use super::setup::{self, Agents, Coordinator, EXIT_GRACE};
use crate::engine::load::{self, Part};
use crate::trace::merge::{AgentNote, AgentState};
use crate::trace::{Clock, TraceWriter};

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
    let start_us = clock.us_of(Instant::now() + setup::start_within(agents.count));
    let start = clock.instant_at(start_us);
    let lefts = Arc::new(AtomicU64::new(0));
    let mut running = Vec::new();
    for index in 0..agents.count {
        let (a, path) = setup::assign(&c, agents.count, index, (&clock, start_us))?;
        running.push(spawn(&c, agents, (a, path), (&clock, &tw), lefts.clone()).await?);
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

/// Starts one agent; a task waits for its end and records it.
async fn spawn(
    c: &Coordinator<'_>,
    agents: &Agents,
    (a, path): (Assignment, PathBuf),
    (clock, tw): (&Clock, &TraceWriter),
    lefts: Arc<AtomicU64>,
) -> anyhow::Result<Running> {
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
    note: AgentNote,
    status: std::io::Result<std::process::ExitStatus>,
    result: Option<AgentResult>,
) -> (AgentState, AgentNote) {
    use std::os::unix::process::ExitStatusExt;
    let how = match &status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "ended abnormally".to_string(),
        }),
        Err(e) => Some(format!("could not be waited for: {e}")),
    };
    let Some(r) = result else {
        let mut note = note;
        note.reason = Some(match how {
            None => format!("exited without its {RESULT_FILE}"),
            Some(how) => format!("{how} (its log: {LOG_FILE})"),
        });
        return (AgentState::Lost, note);
    };
    match (setup::reported(note, &r), how) {
        ((AgentState::Late, note), _) => (AgentState::Late, note),
        ((_, note), None) => (AgentState::Done, note),
        ((_, mut note), Some(how)) => {
            note.reason = Some(format!("{how} (its log: {LOG_FILE})"));
            (AgentState::Lost, note)
        }
    }
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
            sync_rtt_us: None,
            sync_drift_us: None,
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
