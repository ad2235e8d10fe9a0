//! `agents`: where the agents of `haq run --agents N` run (docs/agents.md). Absent:
//! N local processes. `agents.kubernetes`: an Indexed Job in the target's cluster and
//! namespace, one pod per share, reporting to this process over HTTP.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Dur;

/// Where the agents of `haq run --agents N` run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentsCfg {
    /// Run the agents as a Kubernetes Indexed Job (one pod per share) in
    /// `target.kubernetes`'s context and namespace, instead of local processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubeAgents>,
}

impl AgentsCfg {
    pub fn is_default(&self) -> bool {
        self.kubernetes.is_none()
    }
}

/// The agents' Indexed Job: its image, where its pods read the scenario, and where
/// they reach this process (the coordinator) for their assignment, the clock and the
/// return of their traces.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubeAgents {
    /// haq's image (the same version as this process: examples/kubernetes/Dockerfile).
    pub image: String,
    /// `IfNotPresent` (default), `Always` or `Never`.
    #[serde(default = "default_pull")]
    pub image_pull_policy: String,
    /// The ConfigMap holding the scenario file (and the workload files it names),
    /// mounted read-only at `scenario_dir` in each agent pod.
    pub scenario_config_map: String,
    /// Where the ConfigMap is mounted; the agents read `<scenario_dir>/<the scenario's
    /// file name>`. Default `/scenarios`.
    #[serde(default = "default_dir")]
    pub scenario_dir: String,
    /// A Secret whose keys become the agents' environment (`envFrom`): the
    /// credentials `target.headers` reads from environment variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_secret: Option<String>,
    /// Where this process serves its agents (assignment, clock, results). Default
    /// `0.0.0.0:7070`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The URL the agent pods reach that address at. Default: `http://$POD_IP:<port>`
    /// (haq running in a pod, `POD_IP` from the downward API as in
    /// examples/kubernetes/coordinator.yaml), else the `listen` address's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
    /// How long the pods have, from the Job's creation, to be scheduled, pull the
    /// image, start and be ready: the start of load. An agent not ready by then is
    /// late and the run INVALID. Default 60s.
    #[serde(default = "default_start_within")]
    pub start_within: Dur,
}

fn default_pull() -> String {
    "IfNotPresent".into()
}

fn default_dir() -> String {
    "/scenarios".into()
}

fn default_listen() -> String {
    "0.0.0.0:7070".into()
}

fn default_start_within() -> Dur {
    Dur::secs(60)
}
