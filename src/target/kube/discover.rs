//! Discovery: the pods the selector finds in the namespace become the replicas — pod
//! name, uid, node (the failure domain `node`), pod IP, the engine's container and
//! port, its GPU count (`nvidia.com/gpu` requests, else limits) and, where the pod
//! says them, the GPUs' ids (`NVIDIA_VISIBLE_DEVICES` in its env, a scheduler's
//! annotation). A count names them
//! `w1..wN` in pod-name order; a list names the pods themselves. Pods on their way
//! out (a deletion timestamp, a finished phase) are not replicas; the start waits
//! (up to `target.ready_timeout`) until every replica is scheduled, has an IP and
//! is Ready.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::pod::{GPU_RESOURCE, PodInfo};
use crate::plan::kubernetes::{Requirement, selector_matches};
use crate::scenario::{KubeTarget, Replicas};

/// Why a listing is not (yet) the declared replicas.
#[derive(Debug, Clone, PartialEq)]
pub enum NotYet {
    /// Waiting may help (a pod not ready, not scheduled, too few pods).
    Wait(String),
    /// It will not (a pod outside the selector, no port, an unknown container).
    Refuse(String),
}

/// The pods of one listing mapped onto the declared replicas.
pub fn replicas_from(
    pods: &[Pod],
    k: &KubeTarget,
    reqs: &[Requirement],
    declared: &Replicas,
) -> Result<Vec<PodInfo>, NotYet> {
    let mut live: Vec<&Pod> = Vec::new();
    for p in pods {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        // The blast-radius guard: the API's answer is checked, not trusted.
        if p.metadata
            .namespace
            .as_deref()
            .is_some_and(|n| n != k.namespace)
            || !selector_matches(
                reqs,
                p.metadata.labels.as_ref().unwrap_or(&Default::default()),
            )
        {
            return Err(NotYet::Refuse(format!(
                "pod {name} does not match namespace {} and selector `{}`: refused",
                k.namespace, k.selector
            )));
        }
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
        {
            live.push(p);
        }
    }
    live.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let chosen: Vec<(String, &Pod)> = match declared {
        Replicas::Count(n) => {
            if live.len() != *n as usize {
                let names: Vec<&str> = live
                    .iter()
                    .filter_map(|p| p.metadata.name.as_deref())
                    .collect();
                let why = format!(
                    "selector `{}` finds {} live pods in {} ({}), the scenario declares {n}",
                    k.selector,
                    live.len(),
                    k.namespace,
                    names.join(", ")
                );
                return Err(NotYet::Wait(why));
            }
            live.iter()
                .enumerate()
                .map(|(i, p)| (format!("w{}", i + 1), *p))
                .collect()
        }
        Replicas::List(decls) => {
            let mut out = Vec::new();
            for d in decls {
                match live
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(d.name.as_str()))
                {
                    Some(p) => out.push((d.name.clone(), *p)),
                    None => {
                        return Err(NotYet::Wait(format!(
                            "pod {} is not among the live pods of `{}` in {}",
                            d.name, k.selector, k.namespace
                        )));
                    }
                }
            }
            out
        }
    };
    chosen
        .into_iter()
        .map(|(replica, p)| pod_info(replica, p, k))
        .collect()
}

/// One pod as a replica: scheduled, with an IP, Ready, its container and port known.
pub fn pod_info(replica: String, p: &Pod, k: &KubeTarget) -> Result<PodInfo, NotYet> {
    let name = p.metadata.name.clone().unwrap_or_default();
    let spec = p
        .spec
        .as_ref()
        .ok_or_else(|| NotYet::Refuse(format!("pod {name} has no spec")))?;
    let c: &Container = match &k.container {
        Some(want) => spec
            .containers
            .iter()
            .find(|c| &c.name == want)
            .ok_or_else(|| {
                NotYet::Refuse(format!(
                    "pod {name} has no container `{want}` (target.kubernetes.container)"
                ))
            })?,
        None => spec
            .containers
            .first()
            .ok_or_else(|| NotYet::Refuse(format!("pod {name} has no container")))?,
    };
    let port = match k.port {
        Some(p) => p,
        None => c
            .ports
            .as_ref()
            .and_then(|ps| ps.first())
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| {
                NotYet::Refuse(format!(
                    "container {} of pod {name} declares no port: give target.kubernetes.port",
                    c.name
                ))
            })?,
    };
    let status = p.status.as_ref();
    let node = spec
        .node_name
        .clone()
        .ok_or_else(|| NotYet::Wait(format!("pod {name} is not scheduled yet")))?;
    let ip = status
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| NotYet::Wait(format!("pod {name} has no IP yet")))?;
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Err(NotYet::Wait(format!("pod {name} is not Ready")));
    }
    let ids = gpu_ids(p, c);
    Ok(PodInfo {
        replica,
        uid: p.metadata.uid.clone().unwrap_or_default(),
        node,
        ip,
        container: c.name.clone(),
        port,
        gpus: gpus(c),
        gpu_ids: ids.as_ref().map(|i| i.0.clone()).unwrap_or_default(),
        gpu_ids_from: ids.map(|i| i.1),
        restarts: restarts(p, &c.name),
        owner: super::pod::Owner::of(p),
        name,
    })
}

/// The GPUs a container requests (or, with no request, is limited to).
fn gpus(c: &Container) -> u32 {
    let r = c.resources.as_ref();
    let q = r
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(GPU_RESOURCE))
        .or_else(|| {
            r.and_then(|r| r.limits.as_ref())
                .and_then(|m| m.get(GPU_RESOURCE))
        });
    q.and_then(|q| q.0.trim().parse().ok()).unwrap_or(0)
}

/// The env variables whose value lists the container's GPUs (set in the pod's spec).
const GPU_ENV: [&str; 2] = ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"];

/// Pod annotations of GPU schedulers that name the GPUs they gave the pod (Volcano's
/// GPU sharing: `volcano.sh/gpu-index: "0,1"`).
const GPU_ANNOTATIONS: [&str; 1] = ["volcano.sh/gpu-index"];

/// The GPUs' ids of container `c` and where they were read: its env (a literal list,
/// not `all` / `none` / `void`), else a scheduler's annotation; `None` when the pod
/// does not say (the NVIDIA device plugin sets the env at container creation, which
/// the API does not show: then the count is all there is).
fn gpu_ids(p: &Pod, c: &Container) -> Option<(Vec<String>, String)> {
    let list = |v: &str| -> Option<Vec<String>> {
        let ids: Vec<String> = v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let words = ["all", "none", "void"];
        (!ids.is_empty() && !ids.iter().any(|i| words.contains(&i.as_str()))).then_some(ids)
    };
    let env = c.env.iter().flatten();
    for e in env {
        if GPU_ENV.contains(&e.name.as_str())
            && let Some(ids) = e.value.as_deref().and_then(list)
        {
            return Some((ids, format!("env {}", e.name)));
        }
    }
    let notes = p.metadata.annotations.as_ref()?;
    GPU_ANNOTATIONS.iter().find_map(|k| {
        let ids = notes.get(*k).and_then(|v| list(v))?;
        Some((ids, format!("annotation {k}")))
    })
}

/// The restart count of container `c` of the pod.
pub fn restarts(p: &Pod, c: &str) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|s| s.name == c))
        .map_or(0, |s| s.restart_count)
}

/// Lists until the pods are the declared replicas, every one Ready (or `timeout`
/// passes, or the pods are refused); `say` tells what it waits for.
pub async fn discover(
    cluster: &super::cluster::Cluster,
    k: &KubeTarget,
    declared: &Replicas,
    timeout: Duration,
    every: Duration,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Vec<PodInfo>> {
    let start = Instant::now();
    let mut told = false;
    loop {
        let call = super::calls::list_pods(&k.namespace, &k.selector);
        let list: k8s_openapi::List<Pod> = cluster.client.request(call.req).await.map_err(|e| {
            anyhow::anyhow!(
                "listing the pods of `{}` in {}: {e}",
                k.selector,
                k.namespace
            )
        })?;
        let why = match replicas_from(&list.items, k, &cluster.selector, declared) {
            Ok(pods) => return Ok(pods),
            Err(NotYet::Refuse(why)) => anyhow::bail!("{why}"),
            Err(NotYet::Wait(why)) => why,
        };
        if start.elapsed() >= timeout {
            anyhow::bail!(
                "the serving pods are not ready within {timeout:?} (target.ready_timeout): {why}"
            );
        }
        if !told {
            told = true;
            say(&format!(
                "waiting for the serving pods (up to {timeout:?}): {why}"
            ));
        }
        tokio::time::sleep(every).await;
    }
}
