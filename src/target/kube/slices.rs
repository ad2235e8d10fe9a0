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
//! stream replays to the same observations; [`watch`] lists, watches from the list's
//! resource version, and lists again when the watch expires (410) or fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::core::WatchEvent;
use tokio_util::sync::CancellationToken;

use super::calls;
use super::cluster::{Cluster, api_error};
use super::pod::PodRef;
use crate::target::registry::{ProcRef, Registry};
use crate::trace::{Clock, Event, TraceWriter};

/// The source of the EndpointSlice watch's observations.
pub const SOURCE: &str = "kubernetes EndpointSlice watch";

/// How long the watch waits after a failed list or watch: doubled after each failure
/// in a row, up to [`RETRY_MAX`] (a watch refused by RBAC writes a line every 30 s,
/// not every second).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

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

/// What one event does to the slices.
pub enum Applied {
    Upsert(EndpointSlice),
    Delete(EndpointSlice),
    /// A fresh list replaces everything.
    Reset(Vec<EndpointSlice>),
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
    pub fn apply(&mut self, ev: Applied) -> Vec<Change> {
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

/// Maps endpoint changes onto replicas: a replica's own pod, or a new pod taking the
/// place of a replica whose pod is gone or terminating.
pub struct Replicas {
    registry: Arc<Registry>,
    /// Replicas whose pod is gone or terminating, in replica order.
    vacant: BTreeSet<usize>,
}

impl Replicas {
    pub fn new(registry: Arc<Registry>) -> Replicas {
        Replicas {
            registry,
            vacant: BTreeSet::new(),
        }
    }

    fn index_of(&self, pod: &str) -> Option<usize> {
        self.registry
            .replicas
            .iter()
            .position(|r| r.pod().is_some_and(|p| p.pod.name == pod))
    }

    /// The observations of one batch of changes (`replacement_started` before the
    /// change of a pod that took a replica's place).
    pub fn observe(&mut self, changes: Vec<Change>) -> Vec<(Option<String>, &'static str, String)> {
        let mut out = Vec::new();
        for c in changes {
            let i = match self.index_of(&c.pod) {
                Some(i) => Some(i),
                None => self.adopt(&c, &mut out),
            };
            if let Some(i) = i
                && (c.now.is_none() || c.now.as_ref().is_some_and(|n| n.terminating))
            {
                self.vacant.insert(i);
            }
            let replica = i.map(|i| self.registry.replicas[i].name.clone());
            out.push((replica, c.what, c.detail));
        }
        out
    }

    fn adopt(
        &mut self,
        c: &Change,
        out: &mut Vec<(Option<String>, &'static str, String)>,
    ) -> Option<usize> {
        let now = c.now.as_ref().filter(|n| !n.terminating)?;
        let i = *self.vacant.iter().next()?;
        let r = &self.registry.replicas[i];
        let old = r.pod()?;
        let mut pod = old.pod.clone();
        pod.name = c.pod.clone();
        pod.uid = now.uid.clone();
        pod.ip = now.address.clone();
        pod.node = now.node.clone();
        pod.restarts = 0;
        out.push((
            Some(r.name.clone()),
            "replacement_started",
            format!(
                "pod {} (uid {}) on node {} takes the place of pod {}",
                pod.name, pod.uid, pod.node, old.pod.name
            ),
        ));
        r.set_direct_url(pod.url());
        r.set_process(ProcRef::Pod(Arc::new(PodRef {
            cluster: old.cluster.clone(),
            pod,
        })));
        self.vacant.remove(&i);
        Some(i)
    }
}

/// Watches the EndpointSlices of `service` until `stop`, writing each change.
pub async fn watch(
    cluster: Arc<Cluster>,
    service: String,
    registry: Arc<Registry>,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) {
    let mut state = SliceState::default();
    let mut replicas = Replicas::new(registry);
    let emit = |out: Vec<(Option<String>, &'static str, String)>| {
        let t = clock.now_us();
        for (replica, what, detail) in out {
            trace.emit(Event::Observation {
                t,
                source: SOURCE.into(),
                replica,
                what: what.into(),
                detail: Some(detail),
            });
        }
    };
    let mut first = true;
    let mut failures = 0u32;
    while !stop.is_cancelled() {
        let ns = &cluster.namespace;
        let listed: Result<k8s_openapi::List<EndpointSlice>, _> =
            cluster.send(calls::list_slices(ns, &service)).await;
        let mut version = match listed {
            Ok(l) => {
                let changes = state.apply(Applied::Reset(l.items));
                // The first list is the baseline; a later one (after a 410) is news.
                if !first {
                    emit(replicas.observe(changes));
                }
                first = false;
                failures = 0;
                l.metadata.resource_version.unwrap_or_default()
            }
            Err(_) if stop.is_cancelled() => return,
            Err(e) => {
                emit(vec![(
                    None,
                    "watch_error",
                    format!("listing EndpointSlices of {service}: {}", api_error(&e).1),
                )]);
                failures += 1;
                pause(&stop, failures).await;
                continue;
            }
        };
        // Watch from the list until it expires (410: list again) or `stop`.
        loop {
            if stop.is_cancelled() {
                return;
            }
            let call = calls::watch_slices(ns, &service, &version);
            let events = match cluster
                .client
                .request_events::<EndpointSlice>(call.req)
                .await
            {
                Ok(s) => s,
                Err(_) if stop.is_cancelled() => return,
                Err(e) => {
                    emit(vec![(
                        None,
                        "watch_error",
                        format!("watching EndpointSlices of {service}: {}", api_error(&e).1),
                    )]);
                    failures += 1;
                    pause(&stop, failures).await;
                    break;
                }
            };
            let Some(expired) = follow(
                events,
                &mut version,
                &mut state,
                &mut replicas,
                &emit,
                &stop,
            )
            .await
            else {
                return;
            };
            if expired {
                break;
            }
        }
    }
}

type Emit<'a> = dyn Fn(Vec<(Option<String>, &'static str, String)>) + Sync + 'a;

/// Applies one watch stream's events until it ends (`Some(false)`: watch again from
/// `version`), expires or fails (`Some(true)`: list again), or `stop` (`None`).
async fn follow(
    events: impl futures_util::Stream<Item = Result<WatchEvent<EndpointSlice>, kube::Error>> + Send,
    version: &mut String,
    state: &mut SliceState,
    replicas: &mut Replicas,
    emit: &Emit<'_>,
    stop: &CancellationToken,
) -> Option<bool> {
    let mut events = std::pin::pin!(events);
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return None,
            ev = events.next() => ev,
        };
        let applied = match ev {
            None => return Some(false),
            Some(Ok(WatchEvent::Added(s) | WatchEvent::Modified(s))) => {
                if let Some(v) = &s.metadata.resource_version {
                    version.clone_from(v);
                }
                Applied::Upsert(s)
            }
            Some(Ok(WatchEvent::Deleted(s))) => {
                if let Some(v) = &s.metadata.resource_version {
                    version.clone_from(v);
                }
                Applied::Delete(s)
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                *version = b.metadata.resource_version;
                continue;
            }
            // A 410 (expired) or any other error: list again.
            Some(Ok(WatchEvent::Error(_)) | Err(_)) => return Some(true),
        };
        emit(replicas.observe(state.apply(applied)));
    }
}

async fn pause(stop: &CancellationToken, failures: u32) {
    let wait = RETRY
        .saturating_mul(1 << failures.min(6).saturating_sub(1))
        .min(RETRY_MAX);
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = stop.cancelled() => {}
    }
}
