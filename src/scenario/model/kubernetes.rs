//! `target.kubernetes`: where the serving pods of a `kind: kubernetes` target are, what
//! haq may touch there (the allow-lists: nothing happens in a context or namespace
//! outside them), the gateway the load goes to and the Service whose EndpointSlices
//! route traffic to the pods. docs/kubernetes.md explains each field.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The context name of the in-cluster configuration (haq running in a pod with a
/// service account and no kubeconfig).
pub const IN_CLUSTER: &str = "in-cluster";

/// A Kubernetes deployment of the serving engine.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubeTarget {
    /// The kubeconfig context haq acts in. Default: the kubeconfig's current context
    /// (`in-cluster` when haq runs in a pod with no kubeconfig).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The contexts haq may act in (required): a context outside it — a kubeconfig
    /// switched to production — is refused by `haq validate` and `haq run` (exit 2).
    pub allowed_contexts: Vec<String>,
    /// The namespace of the serving pods; every object haq reads or changes is in it
    /// (the nodes it cordons aside).
    pub namespace: String,
    /// The namespaces haq may act in (required): a `namespace` outside it — switched
    /// with `--set` — is refused (exit 2).
    pub allowed_namespaces: Vec<String>,
    /// Label selector of the serving pods (`app=llama` or `app=llama,tier!=canary`):
    /// they are the replicas, discovered at the start; faults touch no other pod.
    pub selector: String,
    /// The engine's container in each pod. Default: the pod's first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The port the engine serves on. Default: the container's first declared port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The engine's readiness path on each pod (after a restart). Default `/health`.
    #[serde(default = "default_ready_path")]
    pub ready_path: String,
    /// Where the load goes: the gateway's Service (in-cluster DNS) or its URL.
    pub gateway: KubeGateway,
    /// The Service whose EndpointSlices route traffic to the serving pods: watched
    /// during the run for detection and traffic removal (ready / serving /
    /// terminating transitions with their times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_service: Option<String>,
    /// Watch the serving pods during the run (default on): the replacement's stages
    /// (scheduled, image pulled, started, ready) from each pod's status.
    #[serde(default = "yes")]
    pub pod_watch: bool,
    /// How a `worker` fault's pod is replaced: `controller` (default: the pod is
    /// deleted and its controller makes a new one at once) or `scale` (haq scales the
    /// pod's Deployment / StatefulSet down by one, that pod first, and back up when
    /// the fault's `restart` asks for the replacement).
    #[serde(default)]
    pub replacement: KubeReplacement,
    /// haq's proxy in the cluster: each replica (`w1`, or a listed pod's name) → the
    /// address haq's proxy listens on for it, in the pod haq runs in (the `haq-proxy`
    /// Deployment of examples/kubernetes/haq-proxy.yaml, whose Service per replica the
    /// gateway points at). It forwards to the replica's pod (following its
    /// replacement): probe points, body-marker attribution and the proxy's evidence
    /// need it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub proxies: std::collections::BTreeMap<String, String>,
    /// Scrape each pod's Prometheus metrics while faults are due (`engine_metrics`
    /// lines: KV cache, queue, prefix cache before, during and after each fault), at
    /// `http://POD_IP:PORT/PATH`. Off by default: pod IPs are reachable from inside
    /// the cluster (haq in a pod) only. `metrics: {}` scrapes the engine's port at
    /// `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<KubeMetrics>,
}

/// `target.kubernetes.metrics`: where each pod serves its Prometheus metrics.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubeMetrics {
    /// Default `/metrics`.
    #[serde(default = "default_metrics_path")]
    pub path: String,
    /// Default: the engine's port (`target.kubernetes.port`, or the container's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

fn default_metrics_path() -> String {
    "/metrics".into()
}

/// How a `worker` fault's pod is replaced (`target.kubernetes.replacement`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum KubeReplacement {
    /// The pod is deleted; its controller replaces it at once.
    #[default]
    Controller,
    /// The workload is scaled down by one (that pod removed first) and back up by the
    /// fault's `restart`; the original count is restored on heal.
    Scale,
}

fn yes() -> bool {
    true
}

/// The gateway: exactly one of `url` or `service`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubeGateway {
    /// The OpenAI base URL, e.g. `http://127.0.0.1:8080/v1` through a port-forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The gateway's Service in `namespace`: haq (running in the cluster) reaches it
    /// as `http://SERVICE.NAMESPACE.svc:PORT/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The Service's port (with `service`). Default 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The API's base path (with `service`). Default `/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl KubeTarget {
    /// The OpenAI base URL of the gateway (`…/v1`).
    pub fn gateway_url(&self) -> String {
        match (&self.gateway.url, &self.gateway.service) {
            (Some(u), _) => u.trim_end_matches('/').to_string(),
            (None, Some(s)) => format!(
                "http://{s}.{}.svc:{}{}",
                self.namespace,
                self.gateway.port.unwrap_or(80),
                self.gateway.path.as_deref().unwrap_or("/v1")
            ),
            (None, None) => String::new(),
        }
    }
}

fn default_ready_path() -> String {
    "/health".into()
}

/// How a kubernetes network fault resets the connections established before its
/// NetworkPolicy (`faults[].reset_connections`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum ResetConnections {
    /// `proxy`: haq's proxy in front of the replica (`target.kubernetes.proxies`)
    /// resets (RST) its connections of that replica — the gateway's to the proxy and
    /// the proxy's to the pod; new ones then meet the policy.
    Word(ResetBy),
    /// A command exec'd in the pod: in `container` (default: the engine's), e.g. a
    /// sidecar with NET_ADMIN running `[ss, -K, sport, "= :8080"]`.
    Exec {
        exec: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
    },
}

/// `reset_connections: proxy`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResetBy {
    Proxy,
}

/// A `worker` kill's grace period (`faults[].grace`): the pod's own, or seconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(untagged)]
pub enum KubeGrace {
    /// `pod`: the pod's own `terminationGracePeriodSeconds` (the delete names none).
    Own(GraceOf),
    /// Seconds between SIGTERM and SIGKILL.
    Seconds(u32),
}

/// `grace: pod`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GraceOf {
    Pod,
}

impl KubeGrace {
    /// The delete's `gracePeriodSeconds` (`None`: the pod's own).
    pub fn seconds(grace: Option<KubeGrace>) -> Option<u32> {
        match grace {
            None => Some(0),
            Some(KubeGrace::Seconds(s)) => Some(s),
            Some(KubeGrace::Own(_)) => None,
        }
    }
}

/// `faults[].exec` of a kubernetes fault: commands run in the pod (`pods/exec`), each
/// an argument list (no shell unless you name one: `[sh, -c, "…"]`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(
    untagged,
    expecting = "a command (a list: the kill of a `kill` fault) or {inject, verify, heal, container, timeout}"
)]
pub enum KubeExec {
    /// `[pkill, -KILL, llama-server]`: the kill of a `process` / `gpu` `kill` fault,
    /// verified by the container's restart count.
    Kill(Vec<String>),
    /// Commands to inject, verify and heal the fault.
    Steps(ExecSteps),
}

/// The commands of a kubernetes exec fault (`faults[].exec: {inject, …}`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExecSteps {
    /// Applies the fault, e.g. `[pkill, -STOP, -f, EngineCore]`; must exit 0 (a `kill`
    /// may end the exec with the container).
    pub inject: Vec<String>,
    /// Proves the fault took effect: exit 0 in the container = applied. Default: for
    /// `kill`, the container's restart count rising; for `gpu_lost`, the pod's
    /// readiness path answering an error (the API server alive, its engine dead).
    /// Required for `freeze` and `slow` (or `verify: false` on the fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Vec<String>>,
    /// Undoes it, e.g. `[pkill, -CONT, -f, EngineCore]`: run when the fault's
    /// `duration` ends, at the end of the load, on error and on Ctrl-C, and by `haq heal
    /// RUN_DIR` after a SIGKILL of haq (it is in the heal ledger). Required for
    /// `freeze` and `slow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal: Option<Vec<String>>,
    /// The container the commands run in. Default: the engine's
    /// (`target.kubernetes.container`, or the pod's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Longest time each command may take.
    #[serde(default = "default_exec_timeout")]
    pub timeout: crate::wire::units::Dur,
}

fn default_exec_timeout() -> crate::wire::units::Dur {
    crate::wire::units::Dur::secs(30)
}

impl KubeExec {
    /// Both forms as steps (a kill command is an `inject` alone).
    pub fn steps(&self) -> ExecSteps {
        match self {
            KubeExec::Kill(cmd) => ExecSteps {
                inject: cmd.clone(),
                verify: None,
                heal: None,
                container: None,
                timeout: default_exec_timeout(),
            },
            KubeExec::Steps(s) => s.clone(),
        }
    }
}
