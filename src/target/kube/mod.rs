//! A Kubernetes deployment (`target.kind: kubernetes`, docs/kubernetes.md): the client
//! for the allowed context ([`cluster`]), the API calls haq makes ([`calls`], printed
//! by `haq run --dry-run`), the discovery of the serving pods as replicas
//! ([`discover`]), the watch of the serving Service's EndpointSlices ([`slices`])
//! whose transitions are the run's detection and traffic-removal evidence, and the
//! watch of the serving pods ([`podwatch`]) whose status gives the replacement's
//! stages; both share the list → watch loop ([`watch`]) and which replica a pod is
//! ([`lineage`]). The faults are in `faults::kube`.
//!
//! Hand-written on kube-client's requests instead of kube-runtime's watcher: the
//! watch needs only list → watch → re-list on 410, and leaving kube-runtime out
//! keeps its dependencies (and build time on two cores) out of the tree.

pub mod calls;
pub mod cluster;
pub mod discover;
pub mod dryrun;
pub mod exec;
pub mod follow;
pub mod heal;
pub mod jobs;
pub mod lineage;
pub mod pod;
pub mod podwatch;
pub mod scale;
pub mod slices;
pub mod sweep;
pub mod watch;
pub mod workload;

#[cfg(test)]
pub mod mock;
#[cfg(test)]
mod podtests;
#[cfg(test)]
mod proxytests;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use cluster::Cluster;
pub use pod::{PodInfo, PodRef};

use crate::plan::Plan;
use crate::proxy::{ProxySet, ProxySpec, ReplicaProxy};
use crate::target::registry::{ProcRef, Registry, Replica, Respawn};
use crate::trace::{Clock, Event, TraceWriter};

/// The source of the observations of the kubernetes target (discovery).
pub const SOURCE: &str = "kubernetes";

/// How often discovery lists the pods while it waits for them.
const DISCOVERY_POLL: Duration = Duration::from_secs(1);

/// A kubernetes target while the run lasts.
pub struct Started {
    pub registry: Arc<Registry>,
    pub cluster: Arc<Cluster>,
    /// The gateway's OpenAI base URL.
    pub api_url: String,
    /// Stops the EndpointSlice and pod watches.
    pub stop: tokio_util::sync::CancellationToken,
    /// haq's proxies in front of the replicas (`target.kubernetes.proxies`).
    pub proxies: Option<ProxySet>,
    /// The replacements' addresses, as the watches attribute them.
    pub learned: Arc<crate::client::Learned>,
}

/// Connects to the allowed context, discovers the serving pods and starts the
/// EndpointSlice watch of the serving Service and the pod watch.
pub async fn start(
    plan: &Plan,
    tw: &TraceWriter,
    clock: &Clock,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Started> {
    let k = block(plan)?;
    let (client, context) = cluster::connect(k).await?;
    let token = crate::wire::marker::RunToken::fresh().to_string();
    let cluster = Arc::new(Cluster::new(client, context, k, token)?);
    started(plan, cluster, tw, clock, say, DISCOVERY_POLL).await
}

/// [`start`] on a cluster already reached (the tests' mock API server).
pub async fn started(
    plan: &Plan,
    cluster: Arc<Cluster>,
    tw: &TraceWriter,
    clock: &Clock,
    say: &(dyn Fn(&str) + Sync),
    every: Duration,
) -> anyhow::Result<Started> {
    let (t, k) = (&plan.scenario.target, block(plan)?);
    let declared = t.replica_set();
    let pods = discover::discover(&cluster, k, &declared, t.ready_timeout.0, every, say).await?;
    let proxies = proxies(plan, &pods, tw, clock).await?;
    let mut replicas = Vec::new();
    for p in pods {
        tw.emit(Event::Observation {
            t: clock.now_us(),
            source: SOURCE.into(),
            replica: Some(p.replica.clone()),
            what: "discovered".into(),
            detail: Some(format!(
                "{} (context {}, namespace {}, run label {}={})",
                p.describe(),
                cluster.context,
                cluster.namespace,
                calls::RUN_LABEL,
                cluster.token
            )),
        });
        let proxy = proxies.as_ref().and_then(|s| s.get(&p.replica).cloned());
        replicas.push(proxied(&cluster, p, &k.ready_path, proxy));
    }
    let registry = Arc::new(Registry {
        replicas,
        respawn: Respawn::Kube,
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let learned = Arc::new(crate::client::Learned::default());
    let lineage = lineage::Lineage::learning(registry.clone(), learned.clone());
    if let Some(service) = &k.serving_service {
        tokio::spawn(slices::watch(
            cluster.clone(),
            service.clone(),
            lineage.clone(),
            *clock,
            tw.clone(),
            stop.clone(),
        ));
    }
    if k.pod_watch {
        tokio::spawn(podwatch::watch(
            cluster.clone(),
            k.container.clone(),
            lineage,
            *clock,
            tw.clone(),
            stop.clone(),
        ));
    }
    Ok(Started {
        registry,
        cluster,
        api_url: k.gateway_url(),
        stop,
        proxies,
        learned,
    })
}

/// haq's proxies of `target.kubernetes.proxies` (each replica's `listen`), forwarding
/// to the discovered pods — borrowed from `haq proxy` when it holds the addresses.
async fn proxies(
    plan: &Plan,
    pods: &[PodInfo],
    tw: &TraceWriter,
    clock: &Clock,
) -> anyhow::Result<Option<ProxySet>> {
    let mut specs = Vec::new();
    for d in &plan.replica_decls {
        let (Some(l), Some(p)) = (&d.listen, pods.iter().find(|p| p.replica == d.name)) else {
            continue;
        };
        specs.push(ProxySpec {
            name: d.name.clone(),
            listen: l
                .parse()
                .map_err(|e| anyhow::anyhow!("replica {}: proxy address {l}: {e}", d.name))?,
            upstream: Some(p.authority()),
        });
    }
    if specs.is_empty() {
        return Ok(None);
    }
    Ok(Some(ProxySet::start(&specs, tw, clock).await?))
}

fn block(plan: &Plan) -> anyhow::Result<&crate::scenario::KubeTarget> {
    plan.scenario
        .target
        .kubernetes
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("target.kubernetes is missing"))
}

/// A discovered pod as a replica of the registry.
pub fn replica(cluster: &Arc<Cluster>, p: PodInfo, ready_path: &str) -> Arc<Replica> {
    proxied(cluster, p, ready_path, None)
}

/// A discovered pod as a replica, with haq's proxy in front of it.
pub fn proxied(
    cluster: &Arc<Cluster>,
    p: PodInfo,
    ready_path: &str,
    proxy: Option<Arc<ReplicaProxy>>,
) -> Arc<Replica> {
    Arc::new(Replica {
        name: p.replica.clone(),
        node: Some(p.node.clone()),
        direct_url: RwLock::new(Some(p.url())),
        process: Mutex::new(Some(ProcRef::Pod(Arc::new(PodRef {
            cluster: cluster.clone(),
            pod: p,
        })))),
        proxy,
        ready_path: ready_path.to_string(),
        restart_cmd: None,
    })
}
