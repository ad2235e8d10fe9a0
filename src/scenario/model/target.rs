//! `target`: the system under test (the sim, a URL, or a Kubernetes deployment).
//!
//! The sim's knobs (`engine`, `gateway`, `tools`) and their defaults are documented with
//! their sources in docs/sim.md.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Dur;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// haq's embedded simulated cluster (worker processes + gateway on loopback).
    Sim,
    /// Any OpenAI-compatible endpoint.
    Url,
    /// Serving pods of a Kubernetes cluster, discovered by a label selector and
    /// faulted through the API (`target.kubernetes`, docs/kubernetes.md).
    Kubernetes,
}

/// The system under test.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub kind: TargetKind,
    /// `sim`: the number of worker processes to start, or a list naming them (with
    /// their nodes). `url`: the replicas behind the gateway, each with its upstream
    /// and the address haq's proxy listens on for the gateway.
    /// `kubernetes`: how many serving pods the selector must find (named `w1..wN` in
    /// pod-name order), or a list of their pod names (a StatefulSet's).
    /// (Default for the sim: 3 workers.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Replicas>,
    /// `url`: base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:8000/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Model name sent in requests (the sim's workers serve exactly this name).
    #[serde(default = "default_model")]
    pub model: String,
    /// Extra request headers. A credential comes from the environment or a file, so
    /// it is never written in the scenario, on a command line or in any output:
    /// `authorization: {env: STAGING_KEY, prefix: "Bearer "}` or
    /// `x-api-key: {file: /run/secrets/key}`. Values of credential headers
    /// (authorization, x-api-key, cookie, …) and of every env/file header are redacted
    /// from every file haq writes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderSource>,
    /// `sim`: the gateway in front of the workers.
    #[serde(default)]
    pub gateway: GatewayCfg,
    /// `sim`: the workers' performance model.
    #[serde(default)]
    pub engine: EngineCfg,
    /// `sim`: the tool service that executes tool calls (M7).
    #[serde(default)]
    pub tools: ToolsCfg,
    /// `url`: how long haq waits for the gateway to answer `GET …/models` before the
    /// load (a router that listens only once its replicas, behind haq's proxy, are
    /// healthy). Default 60s.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout: Dur,
    /// `kubernetes`: the cluster, namespace, selector and allow-lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<super::kubernetes::KubeTarget>,
}

fn default_ready_timeout() -> Dur {
    Dur::secs(60)
}

/// Where a request header's value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum HeaderSource {
    /// The value itself (fine for non-secrets; a credential's value is redacted from
    /// every output, but prefer `env` or `file` for it).
    Value(String),
    /// An environment variable's value, after `prefix` (e.g. `"Bearer "`).
    Env {
        env: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// A file's content (trailing newline removed), after `prefix`.
    File {
        file: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
}

/// `replicas: 3`, or a list of replicas.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Replicas {
    Count(u32),
    List(Vec<ReplicaDecl>),
}

/// Sim workers when `replicas` is not given.
pub const DEFAULT_SIM_REPLICAS: u32 = 3;

impl Target {
    /// The declared replicas; the sim's default count when none are given.
    pub fn replica_set(&self) -> Replicas {
        match (&self.replicas, self.kind) {
            (Some(r), _) => r.clone(),
            (None, TargetKind::Sim) => Replicas::Count(DEFAULT_SIM_REPLICAS),
            (None, TargetKind::Url | TargetKind::Kubernetes) => Replicas::List(Vec::new()),
        }
    }

    /// Replica names (`w1..wN` for a sim count).
    pub fn replica_names(&self) -> Vec<String> {
        self.replica_set().names()
    }

    /// Every replica as a declaration.
    pub fn replica_decls(&self) -> Vec<ReplicaDecl> {
        self.replica_set().decls()
    }
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Replicas::Count)
                .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a replica count"))),
            v @ serde_json::Value::Array(_) => serde_json::from_value(v)
                .map(Replicas::List)
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "expected a number of replicas or a list of replicas, got {other}"
            ))),
        }
    }
}

impl Replicas {
    pub fn count(&self) -> u32 {
        match self {
            Replicas::Count(n) => *n,
            Replicas::List(l) => l.len() as u32,
        }
    }

    /// Replica names: `w1..wN` for a count, the declared names for a list.
    pub fn names(&self) -> Vec<String> {
        match self {
            Replicas::Count(n) => (1..=*n).map(|i| format!("w{i}")).collect(),
            Replicas::List(l) => l.iter().map(|r| r.name.clone()).collect(),
        }
    }

    /// Every replica as a declaration (a count gives names only).
    pub fn decls(&self) -> Vec<ReplicaDecl> {
        match self {
            Replicas::Count(_) => self.names().into_iter().map(ReplicaDecl::named).collect(),
            Replicas::List(l) => l.clone(),
        }
    }
}

/// One replica of the target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplicaDecl {
    pub name: String,
    /// url: `host:port` the replica serves on (the gateway's upstream today).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// url: `127.0.0.1:PORT` where haq's proxy listens; point the gateway's upstream
    /// for this replica here. Without it, proxy faults and probe points cannot reach
    /// this replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The node the replica runs on: a `node` fault removes all replicas of a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// url: the replica's engine process, for process faults and restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessDecl>,
}

impl ReplicaDecl {
    pub fn named(name: String) -> ReplicaDecl {
        ReplicaDecl {
            name,
            upstream: None,
            listen: None,
            node: None,
            process: None,
        }
    }
}

/// A replica's engine process on this host: a pid or a pid file (read at injection
/// time, so it follows restarts).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProcessDecl {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_file: Option<String>,
    /// Shell command that starts a replacement (run with `sh -c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    /// Readiness path on the upstream, polled after a restart.
    #[serde(default = "default_ready_path")]
    pub ready_path: String,
}

fn default_ready_path() -> String {
    "/health".into()
}
fn default_model() -> String {
    "haq-sim-8b".into()
}

pub use crate::sim::config::{EngineCfg, GatewayCfg, GatewayPolicy, ToolsCfg};
