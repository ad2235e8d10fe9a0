//! A replica's pod: what discovery found of it, and the cluster it is in (the
//! process reference of a kubernetes replica).

use std::sync::Arc;

use super::cluster::Cluster;

/// The resource a pod requests GPUs by.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// One serving pod, as haq faults it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// The replica's name (`w2`, or the pod's own name).
    pub replica: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub ip: String,
    pub container: String,
    pub port: u16,
    pub gpus: u32,
    /// The GPUs' ids, where the pod says them (and where it said them), else empty.
    pub gpu_ids: Vec<String>,
    pub gpu_ids_from: Option<String>,
    /// The engine container's restart count when it was read.
    pub restarts: i32,
    /// The controller that owns the pod (its replacement has the same).
    pub owner: Option<Owner>,
}

/// A pod's controller: its `controller: true` owner reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// The controller of pod `p`, if any.
    pub fn of(p: &k8s_openapi::api::core::v1::Pod) -> Option<Owner> {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| Owner {
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
            })
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

impl PodInfo {
    /// `http://IP:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority())
    }

    /// `IP:PORT` (`[IP]:PORT` for IPv6): haq's proxy's upstream.
    pub fn authority(&self) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{}", self.ip, self.port)
        } else {
            format!("{}:{}", self.ip, self.port)
        }
    }

    /// What discovery found, for the trace.
    pub fn describe(&self) -> String {
        let ids = match &self.gpu_ids_from {
            Some(from) => format!(", ids {} from {from}", self.gpu_ids.join(",")),
            None => String::new(),
        };
        format!(
            "{} = pod {} (uid {}) on node {}, {}:{} container {}, {} GPU ({GPU_RESOURCE}{ids})",
            self.replica,
            self.name,
            self.uid,
            self.node,
            self.ip,
            self.port,
            self.container,
            self.gpus
        )
    }
}

/// A replica's pod and the cluster it is in (the process reference of a kubernetes
/// replica).
pub struct PodRef {
    pub cluster: Arc<Cluster>,
    pub pod: PodInfo,
}
