//! Replacement by scaling (`target.kubernetes.replacement: scale`): the workload a
//! replica's pod belongs to (its ReplicaSet's Deployment, or its StatefulSet), its
//! scale subresource read and set — each set read back — and the replacement a
//! fault's `restart` asks for: the workload scaled back to the count it had before the
//! fault scaled it down (`faults::kube` does the scale-down and heals back to it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::autoscaling::v1::Scale;

use super::calls;
use super::cluster::{Cluster, api_error};
use super::pod::PodRef;
pub use super::workload::{Scaled, Workload};
use crate::target::registry::Replica;

/// The workload a pod's controller belongs to.
pub async fn workload_of(p: &PodRef) -> Result<Workload, String> {
    let c = &p.cluster;
    let Some(o) = &p.pod.owner else {
        return Err(format!("pod {} has no controller to scale", p.pod.name));
    };
    match o.kind.as_str() {
        "StatefulSet" => Ok(Workload {
            plural: "statefulsets",
            name: o.name.clone(),
        }),
        "ReplicaSet" => {
            let rs: ReplicaSet = c
                .send(calls::get_replicaset(&c.namespace, &o.name))
                .await
                .map_err(|e| format!("reading ReplicaSet {}: {}", o.name, api_error(&e).1))?;
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true) && r.kind == "Deployment")
                .map(|r| Workload {
                    plural: "deployments",
                    name: r.name.clone(),
                })
                .ok_or_else(|| format!("ReplicaSet {} has no Deployment to scale", o.name))
        }
        other => Err(format!(
            "pod {} is controlled by a {other} ({}): only Deployments and StatefulSets are scaled",
            p.pod.name, o.name
        )),
    }
}

fn replicas_of(s: &Scale) -> i32 {
    s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// The workload's replicas now.
pub async fn read(c: &Cluster, w: &Workload) -> Result<i32, String> {
    let s: Scale = c
        .send(calls::get_scale(&c.namespace, w.plural, &w.name))
        .await
        .map_err(|e| format!("reading the scale of {w}: {}", api_error(&e).1))?;
    Ok(replicas_of(&s))
}

/// Sets the workload's replicas, verified by reading the scale back.
pub async fn set(c: &Cluster, w: &Workload, n: i32) -> Result<String, String> {
    super::heal::rescale(&c.client, &c.namespace, w.plural, &w.name, n).await
}

/// The replacement of a replica whose fault scaled its workload down: back to the
/// original count, verified.
pub async fn respawn(r: &Replica) -> Result<(Option<u32>, String), String> {
    let Some(p) = r.pod() else {
        return Err(format!("replica {} has no pod", r.name));
    };
    let cluster: Arc<Cluster> = p.cluster.clone();
    let Some(s) = cluster.scaled(&r.name) else {
        return Err(format!(
            "no scale-down of replica {}'s workload to undo (target.kubernetes.replacement: scale scales `worker` faults only)",
            r.name
        ));
    };
    let done = set(&cluster, &s.workload, s.original).await?;
    Ok((
        None,
        format!("{done}: its controller makes the replacement"),
    ))
}

/// How often [`ready`] reads the replacement pod.
const READY_POLL: Duration = Duration::from_millis(500);

/// The replacement of a kubernetes replica is ready: the replica's pod is a new one
/// (the watches attributed the controller's new pod to it) and the API says it is
/// Ready — read from the API, as haq outside the cluster cannot reach pod IPs.
pub async fn ready(r: &Replica, timeout: Duration, stop: &CancellationToken) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(p) = r.pod() {
            let gone = p.cluster.scaled(&r.name).map(|s| s.pod_uid);
            let new = gone.is_none_or(|uid| uid != p.pod.uid);
            let c = &p.cluster;
            if new
                && let Ok(pod) = c
                    .send::<Pod>(calls::get_pod(&c.namespace, &p.pod.name))
                    .await
                && pod.metadata.uid.as_deref() == Some(p.pod.uid.as_str())
                && is_ready(&pod)
            {
                return Some(start.elapsed());
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(READY_POLL) => {}
            _ = stop.cancelled() => return None,
        }
    }
    None
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
