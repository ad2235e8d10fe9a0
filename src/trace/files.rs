//! A run directory's files: the contract between the stage that records a run and the
//! stages that judge and render it (docs/evidence.md describes each).

/// The trace (this stage's own events).
pub const TRACE_FILE: &str = "trace.jsonl";
/// The effective scenario, as judging re-reads it.
pub const SCENARIO_FILE: &str = "scenario.json";
/// The effective scenario, for people.
pub const SCENARIO_YAML: &str = "scenario.yaml";
/// The sim gateway's journal.
pub const GATEWAY_FILE: &str = "gateway.jsonl";
/// The tool service's execution log (the sim's, or `evidence.tool_log` copied in).
pub const TOOLS_FILE: &str = "tools.jsonl";
/// The heal ledger: reversible faults applied and healed (`haq heal` reads it).
pub const HEALS_FILE: &str = "heals.jsonl";
/// The HdrHistogram interval log, rebuilt from the trace whenever it is re-rendered.
pub const HLOG_FILE: &str = "latency.hlog";
/// Prefix and suffix of each sim worker's journal (`worker-<name>.jsonl`).
pub const WORKER_PREFIX: &str = "worker-";
pub const WORKER_SUFFIX: &str = ".jsonl";

/// The journal file of sim worker `name`.
pub fn worker_file(name: &str) -> String {
    format!("{WORKER_PREFIX}{name}{WORKER_SUFFIX}")
}
