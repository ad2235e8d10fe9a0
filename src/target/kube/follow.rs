//! `haq proxy` of a kubernetes scenario (`target.kubernetes.proxies`): the daemon that
//! holds haq's proxy addresses between runs forwards each replica's address to that
//! replica's pod — discovered as a run discovers them (the selector, `w1..wN` in
//! pod-name order) — and follows the pods as they are replaced: the pods are listed
//! again every few seconds and a replica whose pod changed is pointed at the new one,
//! so the gateway in front of the proxies keeps working between runs and while a run
//! without proxies (from outside the cluster) replaces pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use super::cluster::Cluster;
use super::discover::replicas_from;
use super::pod::PodInfo;
use crate::scenario::{KubeTarget, Replicas};

/// How often the daemon lists the pods again.
pub const RELIST: Duration = Duration::from_secs(2);

/// Lists the pods every `every` until `stop`; `moved` is told each replica whose pod
/// now has another address than `known` (replica → `IP:PORT`) says. A listing that is
/// not the declared replicas (a pod gone, its replacement not ready yet) changes
/// nothing.
pub async fn follow(
    cluster: Arc<Cluster>,
    k: KubeTarget,
    declared: Replicas,
    mut known: BTreeMap<String, String>,
    every: Duration,
    stop: CancellationToken,
    moved: impl Fn(&PodInfo),
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        let call = super::calls::list_pods(&k.namespace, &k.selector);
        let Ok(list) = cluster.send::<k8s_openapi::List<Pod>>(call).await else {
            continue;
        };
        let Ok(pods) = replicas_from(&list.items, &k, &cluster.selector, &declared) else {
            continue;
        };
        for p in pods {
            if known.get(&p.replica) != Some(&p.authority()) {
                known.insert(p.replica.clone(), p.authority());
                moved(&p);
            }
        }
    }
}
