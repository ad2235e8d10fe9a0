//! What the coordinator of `haq run --agents N` works from, wherever its agents run:
//! how they are started ([`Agents`]: local processes, or an Indexed Job), what the
//! load shares with it ([`Coordinator`]), each agent's [`Assignment`], and how an agent
//! that reported back ended (done or late).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::assignment::{self, AgentResult, Assignment};
use crate::engine::load::Aim;
use crate::plan::Plan;
use crate::scenario::KubeAgents;
use crate::trace::Clock;
use crate::trace::merge::{AgentNote, AgentState};
use crate::workload::BodyMarker;

/// How the agents of a run are started: how many, the scenario file and overrides
/// each re-reads (the coordinator's own command line), and where they run.
#[derive(Debug, Clone)]
pub struct Agents {
    pub count: u64,
    pub scenario: PathBuf,
    pub sets: Vec<String>,
    /// `None`: local processes. `Some`: an Indexed Job (`agents.kubernetes`).
    pub kube: Option<OnKube>,
}

/// The agents' Indexed Job: its settings, the namespace it goes in, and the client
/// (`None`: connect to `target.kubernetes`'s context at the run's start; the tests
/// give the mock API server's).
#[derive(Clone)]
pub struct OnKube {
    pub cfg: KubeAgents,
    pub namespace: String,
    pub client: Option<kube::Client>,
    /// How often the agents' pods are read ([`POLL`]).
    pub poll: Duration,
}

/// How often the agents' pods are read.
pub const POLL: Duration = Duration::from_secs(2);

impl std::fmt::Debug for OnKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnKube")
            .field("cfg", &self.cfg)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl OnKube {
    /// The agents' Job of `plan` (`agents.kubernetes` in a `kind: kubernetes`
    /// target's namespace), `None` for local agents.
    pub fn of(plan: &Plan) -> Option<OnKube> {
        let cfg = plan.scenario.agents.kubernetes.clone()?;
        let k = plan.scenario.target.kubernetes.as_ref()?;
        Some(OnKube {
            cfg,
            namespace: k.namespace.clone(),
            client: None,
            poll: POLL,
        })
    }
}

/// The Job's client in the namespace it goes in.
pub(super) struct Api {
    pub client: kube::Client,
    pub ns: String,
}

impl Api {
    pub async fn send<T: serde::de::DeserializeOwned>(
        &self,
        call: crate::target::kube::calls::Call,
    ) -> Result<T, kube::Error> {
        self.client.request(call.req).await
    }
}

/// How long local agents have, from their spawn, to be ready before the load starts:
/// an agent reads the scenario and builds its client in well under a second; the rest
/// is room for a busy host.
pub fn start_within(count: u64) -> Duration {
    Duration::from_millis(2_000 + 250 * count)
}

/// How long past the end of load and the drain timeout an agent may take to write its
/// trace and exit (or send it) before it is stopped (and counted lost).
pub const EXIT_GRACE: Duration = Duration::from_secs(30);

/// What the load shares with the coordinator.
pub struct Coordinator<'a> {
    pub plan: &'a Plan,
    pub aim: Aim<'a>,
    pub marker: BodyMarker,
    pub run_dir: &'a Path,
    pub bin: &'a Path,
}

/// Agent `index`'s assignment, written to its directory (the run's record of what it
/// was told); returns it and its path.
pub(super) fn assign(
    c: &Coordinator<'_>,
    count: u64,
    index: u64,
    (clock, start_us): (&Clock, u64),
) -> anyhow::Result<(Assignment, PathBuf)> {
    let dir = assignment::agent_dir(c.run_dir, index);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let a = Assignment {
        index,
        count,
        seed: c.plan.seed,
        epoch_mono_ns: clock.base_mono_ns(),
        epoch_wall_ns: assignment::wall_ns().saturating_sub(clock.now_us() * 1000),
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
    Ok((a, path))
}

/// How an agent that reported back ended: late when its result says so, else done
/// (the caller decides whether its exit allows done).
pub(super) fn reported(mut note: AgentNote, r: &AgentResult) -> (AgentState, AgentNote) {
    note.sent = Some(r.sent);
    note.ready_us = Some(r.ready_us);
    note.offset_us = Some(r.offset_us);
    note.sync_rtt_us = r.sync_rtt_us;
    note.sync_drift_us = r.sync_drift_us;
    if r.late {
        note.reason = Some(format!(
            "ready {:.3} s after the start deadline, so it sent nothing",
            r.ready_us.saturating_sub(note.deadline_us.unwrap_or(0)) as f64 / 1e6
        ));
        return (AgentState::Late, note);
    }
    (AgentState::Done, note)
}
