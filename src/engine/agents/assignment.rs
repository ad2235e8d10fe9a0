//! What the coordinator of `haq run --agents N` tells each agent (its assignment file)
//! and what the agent tells back (its result file): the types both sides share.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::scenario::MarkerField;
use crate::trace::ReplicaInfo;

/// Where the agents' directories go inside the run directory.
pub const AGENTS_DIR: &str = "agents";
/// An agent's assignment, result and log, inside its directory.
pub const ASSIGNMENT_FILE: &str = "assignment.json";
pub const RESULT_FILE: &str = "result.json";
pub const LOG_FILE: &str = "agent.log";

/// Nanoseconds since the UNIX epoch, now.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The directory of agent `index` in run directory `run_dir`.
pub fn agent_dir(run_dir: &Path, index: u64) -> PathBuf {
    run_dir.join(AGENTS_DIR).join(name(index))
}

/// How an agent is named in the trace and the reports.
pub fn name(index: u64) -> String {
    crate::workload::agent_name(index)
}

/// One agent's part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The share: requests whose index mod `count` is `index`.
    pub index: u64,
    pub count: u64,
    /// The seed the coordinator's plan resolved (the agent's must be the same).
    pub seed: u64,
    /// The coordinator's trace epoch (its `run_start`): CLOCK_MONOTONIC and UNIX time
    /// (ns) of trace time 0, read together.
    pub epoch_mono_ns: u64,
    pub epoch_wall_ns: u64,
    /// The start of load, in trace µs: the deadline by which the agent must be ready.
    pub start_us: u64,
    /// The target's API URL and replicas (for response attribution).
    pub api_url: String,
    pub replicas: Vec<ReplicaInfo>,
    /// Where request bodies carry their marker, and the run's token.
    pub marker: MarkerField,
    pub token: String,
    /// The run directory (its `scenario.json` is what the agent's plan must equal).
    pub run_dir: PathBuf,
}

/// What an agent reports when its share is done (or when it was late).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentResult {
    pub index: u64,
    pub count: u64,
    /// When the agent was ready to send (trace µs).
    pub ready_us: u64,
    /// Ready after the start deadline: it sent nothing.
    pub late: bool,
    /// Requests it sent.
    pub sent: u64,
    /// The last time one of its clients went away before its answer ended (trace µs;
    /// 0: none did): the coordinator's cancel-grace observation waits past it.
    pub left_us: u64,
    /// Its wall clock against the coordinator's, measured at its start: trace time from
    /// the UNIX clock minus trace time from the monotonic clock (µs). Its events are
    /// stamped on the monotonic clock. On another host (a pod): its wall clock minus
    /// the coordinator's, from the clock exchange.
    pub offset_us: i64,
    /// On another host: the round trip of the clock exchange that set its trace time
    /// (µs; its stamps are within half of it of the coordinator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_rtt_us: Option<u64>,
    /// On another host: a second clock exchange after its share, against the clock
    /// set at its start: how far the two hosts' clocks drifted apart while it sent
    /// (µs; within the two exchanges' half round trips).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_drift_us: Option<i64>,
}

/// The coordinator's answer to a clock exchange (`GET /clock`): its trace time and
/// its UNIX time, read together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockReading {
    pub t_us: u64,
    pub wall_ns: u64,
}
