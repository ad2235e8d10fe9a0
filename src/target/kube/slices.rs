//! The watch of the serving Service's EndpointSlices (Q11): the endpoints the Service
//! routes to, with their `ready` / `serving` / `terminating` conditions. Every change
//! of a replica's endpoint is an `observation` (source [`SOURCE`]) dated when haq saw
//! it: `not_ready`, `draining` (terminating), `endpoint_removed` — detection and
//! traffic removal as the cluster's own routing saw them — and `endpoint_ready`.
//! A new pod whose endpoint appears while a replica's pod is gone or terminating takes
//! that replica's place (`replacement_started`): the controller's replacement, in
//! replica order.
//!
//! [`SliceState`] is the pure part (slices in, changes out), so a recorded event
//! stream replays to the same observations; [`watch`] runs it in the shared
//! list → watch loop (`super::watch`). Which replica a pod is comes from the
//! attribution the pod watch shares (`super::lineage`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio_util::sync::CancellationToken;

use super::calls;
use super::cluster::Cluster;
use super::lineage::{Lineage, Seen, Shared};
pub use super::watch::Applied;
use super::watch::{Follow, Obs, Watched};
use crate::target::registry::Registry;
use crate::trace::{Clock, TraceWriter};

/// The source of the EndpointSlice watch's observations.
pub const SOURCE: &str = "kubernetes EndpointSlice watch";

/// An endpoint's conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub address: String,
    pub node: String,
    pub uid: String,
}

/// One pod's endpoint changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub pod: String,
    /// The observation vocabulary of docs/evidence.md (`endpoint_added` and
    /// `endpoint_changed` are read by no verdict).
    pub what: &'static str,
    pub detail: String,
    /// The endpoint now (`None`: removed).
    pub now: Option<Cond>,
}

/// The Service's endpoints, by slice then pod.
#[derive(Default)]
pub struct SliceState {
    slices: BTreeMap<String, BTreeMap<String, Cond>>,
}

fn endpoints(s: &EndpointSlice) -> BTreeMap<String, Cond> {
    let mut out = BTreeMap::new();
    for e in s.endpoints.iter().flatten() {
        let Some(r) = e
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
        else {
            continue;
        };
        let c = e.conditions.as_ref();
        let ready = c.and_then(|c| c.ready).unwrap_or(false);
        out.insert(
            r.name.clone().unwrap_or_default(),
            Cond {
                ready,
                serving: c.and_then(|c| c.serving).unwrap_or(ready),
                terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                address: e.addresses.first().cloned().unwrap_or_default(),
                node: e.node_name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            },
        );
    }
    out
}

impl SliceState {
    /// Every pod's endpoint (the last slice listing a pod wins).
    fn pods(&self) -> BTreeMap<String, (String, Cond)> {
        let mut out = BTreeMap::new();
        for (slice, eps) in &self.slices {
            for (pod, c) in eps {
                out.insert(pod.clone(), (slice.clone(), c.clone()));
            }
        }
        out
    }

    /// Applies one event; the pods whose endpoint changed, in pod-name order.
    pub fn apply(&mut self, ev: Applied<EndpointSlice>) -> Vec<Change> {
        let before = self.pods();
        match ev {
            Applied::Upsert(s) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                self.slices.insert(name, endpoints(&s));
            }
            Applied::Delete(s) => {
                self.slices
                    .remove(s.metadata.name.as_deref().unwrap_or_default());
            }
            Applied::Reset(all) => {
                self.slices = all
                    .iter()
                    .map(|s| (s.metadata.name.clone().unwrap_or_default(), endpoints(s)))
                    .collect();
            }
        }
        let after = self.pods();
        let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        names
            .into_iter()
            .filter_map(|pod| change(pod, before.get(pod), after.get(pod)))
            .collect()
    }
}

fn show(slice: &str, pod: &str, c: &Cond) -> String {
    format!(
        "EndpointSlice {slice}: pod {pod} ({}) ready={} serving={} terminating={}",
        c.address, c.ready, c.serving, c.terminating
    )
}

fn change(pod: &str, a: Option<&(String, Cond)>, b: Option<&(String, Cond)>) -> Option<Change> {
    let what = match (a, b) {
        (None, None) => return None,
        (Some((_, x)), Some((_, y))) if x == y => return None,
        (Some(_), None) => "endpoint_removed",
        (None, Some((_, y))) if y.ready => "endpoint_ready",
        (None, Some((_, y))) if y.terminating => "draining",
        (None, Some(_)) => "endpoint_added",
        (Some((_, x)), Some((_, y))) if y.ready && !x.ready => "endpoint_ready",
        (Some((_, x)), Some((_, y))) if x.ready && !y.ready && y.terminating => "draining",
        (Some((_, x)), Some((_, y))) if x.ready && !y.ready => "not_ready",
        (Some((_, x)), Some((_, y))) if y.terminating && !x.terminating => "draining",
        _ => "endpoint_changed",
    };
    let detail = match (a, b) {
        (_, Some((s, c))) => show(s, pod, c),
        (Some((s, c)), None) => format!("EndpointSlice {s}: pod {pod} ({}) removed", c.address),
        (None, None) => String::new(),
    };
    Some(Change {
        pod: pod.into(),
        what,
        detail,
        now: b.map(|(_, c)| c.clone()),
    })
}

/// Maps endpoint changes onto replicas: a replica's own pod (or one that was), or a
/// new pod taking the place of a replica whose pod is gone or terminating.
pub struct Replicas {
    lineage: Shared,
}

impl Replicas {
    pub fn new(registry: Arc<Registry>) -> Replicas {
        Replicas::shared(Lineage::shared(registry))
    }

    /// With the attribution the pod watch shares.
    pub fn shared(lineage: Shared) -> Replicas {
        Replicas { lineage }
    }

    /// The observations of one batch of changes (`replacement_started` before the
    /// change of a pod that took a replica's place).
    pub fn observe(&mut self, changes: Vec<Change>) -> Vec<Obs> {
        let mut lin = self.lineage.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for c in changes {
            let uid = c.now.as_ref().map_or("", |n| n.uid.as_str());
            let gone = c.now.as_ref().is_none_or(|n| n.terminating);
            let i = match lin.current(&c.pod, uid) {
                Some(i) => {
                    if gone {
                        lin.vacate(i);
                    }
                    Some(i)
                }
                None => adopt(&mut lin, &c, &mut out).or_else(|| lin.replica_of(&c.pod)),
            };
            out.push((i.map(|i| lin.name(i)), c.what, c.detail));
        }
        out
    }
}

fn adopt(lin: &mut Lineage, c: &Change, out: &mut Vec<Obs>) -> Option<usize> {
    let now = c.now.as_ref().filter(|n| !n.terminating)?;
    let seen = Seen {
        name: c.pod.clone(),
        uid: now.uid.clone(),
        ip: now.address.clone(),
        node: now.node.clone(),
        owner: None,
    };
    let a = lin.adopt(&seen)?;
    out.push((
        Some(lin.name(a.replica)),
        "replacement_started",
        format!(
            "pod {} (uid {}) on node {} takes the place of pod {}",
            seen.name, seen.uid, seen.node, a.old
        ),
    ));
    Some(a.replica)
}

/// The slices and the replicas they map to: the watch's observer.
pub struct Observer {
    pub state: SliceState,
    pub replicas: Replicas,
}

impl Follow<EndpointSlice> for Observer {
    fn apply(&mut self, ev: Applied<EndpointSlice>) -> Vec<Obs> {
        let changes = self.state.apply(ev);
        self.replicas.observe(changes)
    }
}

/// Watches the EndpointSlices of `service` until `stop`, writing each change.
pub async fn watch(
    cluster: Arc<Cluster>,
    service: String,
    lineage: Shared,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) {
    let ns = cluster.namespace.clone();
    let list = || calls::list_slices(&ns, &service);
    let watch = |version: &str| calls::watch_slices(&ns, &service, version);
    let w = Watched {
        source: SOURCE,
        noun: format!("EndpointSlices of {service}"),
        list: &list,
        watch: &watch,
    };
    let observer = Observer {
        state: SliceState::default(),
        replicas: Replicas::shared(lineage),
    };
    super::watch::run(&cluster, w, observer, clock, trace, stop).await;
}
