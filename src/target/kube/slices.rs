//! The watch of the serving Service's EndpointSlices (Q11): the endpoints the Service
//! routes to, with their `ready` / `serving` / `terminating` conditions. Every change
//! of a replica's endpoint is an `observation` (source [`SOURCE`]) dated when haq saw
//! it: `not_ready`, `draining` (terminating), `endpoint_removed` — detection and
//! traffic removal as the cluster's own routing saw them — and `endpoint_ready`.
//! A new pod whose endpoint appears while a replica's pod is gone or terminating takes
//! that replica's place (`replacement_started`): the controller's replacement, in
//! replica order — once the pod, read from the API, is in the target's namespace and
//! selector and of the gone pod's controller (`not_adopted` otherwise).
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
use super::pod::Owner;
pub use super::watch::Applied;
use super::watch::{Follow, Obs, Watched};
use crate::plan::kubernetes::{Requirement, selector_matches};
use crate::trace::{Clock, TraceWriter};
use k8s_openapi::api::core::v1::Pod;

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
/// new pod taking the place of a replica whose pod is gone or terminating — once the
/// pod is read and found in the namespace and the selector (the slice names the pod,
/// not its labels: the serving Service may select more than the target's selector)
/// and of the same controller.
pub struct Replicas {
    lineage: Shared,
    namespace: String,
    selector: Vec<Requirement>,
    /// Changes of new pods that may fill a vacant replica, until the pod is read.
    pending: Vec<Change>,
}

impl Replicas {
    /// With the attribution the pod watch shares; new pods are adopted only inside
    /// `namespace` and `selector` (the blast-radius guard).
    pub fn guarded(lineage: Shared, namespace: &str, selector: Vec<Requirement>) -> Replicas {
        Replicas {
            lineage,
            namespace: namespace.to_string(),
            selector,
            pending: Vec::new(),
        }
    }

    /// The observations of one batch of changes; a new pod that may fill a vacant
    /// replica waits to be read ([`Replicas::read`]).
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
                None if !gone
                    && lin.replica_of(&c.pod).is_none()
                    && (lin.has_vacant() || self.pending.iter().any(|p| p.pod == c.pod)) =>
                {
                    self.pending.push(c);
                    continue;
                }
                None => lin.replica_of(&c.pod),
            };
            out.push((i.map(|i| lin.name(i)), c.what, c.detail));
        }
        out
    }

    /// The new pods waiting to be read.
    pub fn to_read(&mut self) -> Vec<String> {
        let mut names: Vec<String> = self.pending.iter().map(|c| c.pod.clone()).collect();
        names.dedup();
        names
    }

    /// The pod as the API has it (`None`: gone or unread): in the namespace and the
    /// selector, it may fill a vacant replica of its controller (`replacement_started`
    /// before its changes); else its changes are nobody's.
    pub fn read(&mut self, pod: &str, got: Option<Pod>) -> Vec<Obs> {
        let (changes, rest) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|c| c.pod == pod);
        self.pending = rest;
        let mut lin = self.lineage.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        let last = changes.iter().rev().find_map(|c: &Change| c.now.clone());
        let i = match (&got, last) {
            (Some(p), Some(now)) if self.ours(p) => adopt(&mut lin, pod, p, &now, &mut out),
            (Some(_), _) => {
                out.push((
                    None,
                    "not_adopted",
                    format!(
                        "pod {pod} is outside namespace {} and selector `{}`: no replica's (blast-radius guard)",
                        self.namespace,
                        show_selector(&self.selector)
                    ),
                ));
                None
            }
            _ => None,
        };
        let i = i
            .or_else(|| lin.current(pod, ""))
            .or_else(|| lin.replica_of(pod));
        for c in changes {
            out.push((i.map(|i| lin.name(i)), c.what, c.detail));
        }
        out
    }

    fn ours(&self, p: &Pod) -> bool {
        p.metadata
            .namespace
            .as_deref()
            .is_none_or(|n| n == self.namespace)
            && p.metadata.deletion_timestamp.is_none()
            && selector_matches(
                &self.selector,
                p.metadata.labels.as_ref().unwrap_or(&Default::default()),
            )
    }
}

fn show_selector(reqs: &[Requirement]) -> String {
    reqs.iter()
        .map(|r| format!("{}{}{}", r.key, if r.equal { "=" } else { "!=" }, r.value))
        .collect::<Vec<_>>()
        .join(",")
}

/// Pod `name` (read: in the selector) fills a vacant replica of its controller.
fn adopt(lin: &mut Lineage, name: &str, p: &Pod, now: &Cond, out: &mut Vec<Obs>) -> Option<usize> {
    let seen = Seen {
        name: name.to_string(),
        uid: p.metadata.uid.clone().unwrap_or_else(|| now.uid.clone()),
        ip: now.address.clone(),
        node: now.node.clone(),
        owner: Owner::of(p),
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

    fn to_read(&mut self) -> Vec<String> {
        self.replicas.to_read()
    }

    fn read(&mut self, pod: &str, got: Option<Pod>) -> Vec<Obs> {
        self.replicas.read(pod, got)
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
        replicas: Replicas::guarded(lineage, &ns, cluster.selector.clone()),
    };
    super::watch::run(&cluster, w, observer, clock, trace, stop).await;
}
