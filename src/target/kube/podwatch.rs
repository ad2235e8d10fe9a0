//! The watch of the serving pods (Q11): the replacement's stages as the pod's own
//! status tells them, each an `observation` (source [`SOURCE`]) dated when haq saw it,
//! the cluster's own time in its detail.
//!
//! | `what` | when | timeline stage |
//! |---|---|---|
//! | `replacement_requested` | the controller made a new pod for a vacant replica | requested |
//! | `pod_scheduled` | its `PodScheduled` condition turned true (the node) | — |
//! | `image_pulled` | the engine container's image is on the node (`imageID` set) | — |
//! | `process_started` | the engine container is running (`startedAt`) | started |
//! | `restarted` | the engine container of a replica's pod runs again (its restart count rose) | started |
//! | `replacement_ready` / `ready` | the pod's `Ready` turned true (a replacement's / the replica's own pod again) | ready |
//! | `not_ready` | `Ready` turned false, the pod not terminating | detection |
//! | `pod_terminating`, `pod_deleted` | the pod got a deletion timestamp / left the API | — |
//! | `replacement_failed` | the engine container waits on an error (`ErrImagePull`, `CrashLoopBackOff`, …) or the pod failed | — |
//!
//! Which replica a pod is, and which vacant replica a new pod fills, is the
//! attribution shared with the EndpointSlice watch (`super::lineage`): by the pod's
//! controller. Pods of no replica (a rollout's surge pod) are not observed.
//! [`PodObserver`] is the pure part, so a recorded stream replays to the same lines.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tokio_util::sync::CancellationToken;

use super::calls;
use super::cluster::Cluster;
use super::lineage::{Lineage, Seen, Shared};
use super::pod::Owner;
use super::watch::{Applied, Follow, Obs, Watched};
use crate::plan::kubernetes::{Requirement, selector_matches};
use crate::trace::{Clock, TraceWriter};

/// The source of the pod watch's observations.
pub const SOURCE: &str = "kubernetes pod watch";

/// The reasons a waiting container will not start by itself soon.
const FAILING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerError",
    "CreateContainerConfigError",
    "RunContainerError",
];

/// What the watch keeps of one pod.
#[derive(Debug, Clone, Default, PartialEq)]
struct Status {
    uid: String,
    ip: String,
    node: String,
    /// `PodScheduled` true since.
    scheduled: Option<String>,
    image: Option<String>,
    /// The engine container running since.
    started: Option<String>,
    restarts: i32,
    last_exit: String,
    /// `Ready` true since.
    ready: Option<String>,
    not_ready_why: String,
    terminating: bool,
    failing: Option<String>,
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    t.0.to_string()
}

fn condition(p: &Pod, kind: &str) -> Option<(bool, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)?;
    Some((
        c.status == "True",
        c.last_transition_time
            .as_ref()
            .map(time)
            .unwrap_or_default(),
        [c.reason.as_deref(), c.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": "),
    ))
}

fn last_exit(c: &ContainerStatus) -> String {
    let Some(t) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) else {
        return String::new();
    };
    format!(
        "last exit {}{}",
        t.exit_code,
        t.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    )
}

fn status(p: &Pod, container: &str) -> Status {
    let s = p.status.as_ref();
    let c = s
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container));
    let state = c.and_then(|c| c.state.as_ref());
    let waiting = state
        .and_then(|s| s.waiting.as_ref())
        .filter(|w| w.reason.as_deref().is_some_and(|r| FAILING.contains(&r)))
        .map(|w| {
            format!(
                "container {container} waiting: {}{}",
                w.reason.as_deref().unwrap_or_default(),
                w.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        });
    let failed = (s.and_then(|s| s.phase.as_deref()) == Some("Failed")).then(|| {
        format!(
            "pod phase Failed{}",
            s.and_then(|s| s.reason.as_deref())
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )
    });
    let ready = condition(p, "Ready");
    Status {
        uid: p.metadata.uid.clone().unwrap_or_default(),
        ip: s.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        scheduled: condition(p, "PodScheduled").and_then(|(on, t, _)| on.then_some(t)),
        image: c.map(|c| c.image_id.clone()).filter(|i| !i.is_empty()),
        started: state
            .and_then(|s| s.running.as_ref())
            .map(|r| r.started_at.as_ref().map(time).unwrap_or_default()),
        restarts: c.map_or(0, |c| c.restart_count),
        last_exit: c.map(last_exit).unwrap_or_default(),
        ready: ready.as_ref().and_then(|(on, t, _)| on.then(|| t.clone())),
        not_ready_why: ready.map(|r| r.2).unwrap_or_default(),
        terminating: p.metadata.deletion_timestamp.is_some(),
        failing: waiting.or(failed),
    }
}

/// The serving pods and the replicas they are: the pod watch's observer.
pub struct PodObserver {
    lineage: Shared,
    /// The engine's container (`None`: each pod's first).
    container: Option<String>,
    namespace: String,
    selector: Vec<Requirement>,
    pods: BTreeMap<String, Status>,
}

impl PodObserver {
    pub fn new(
        lineage: Shared,
        container: Option<String>,
        namespace: &str,
        selector: Vec<Requirement>,
    ) -> PodObserver {
        PodObserver {
            lineage,
            container,
            namespace: namespace.to_string(),
            selector,
            pods: BTreeMap::new(),
        }
    }

    /// The blast-radius guard: a pod outside the namespace or selector is not looked at.
    fn ours(&self, p: &Pod) -> bool {
        p.metadata
            .namespace
            .as_deref()
            .is_none_or(|n| n == self.namespace)
            && selector_matches(
                &self.selector,
                p.metadata.labels.as_ref().unwrap_or(&Default::default()),
            )
    }

    fn container_of(&self, p: &Pod) -> String {
        self.container.clone().unwrap_or_else(|| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone())
                .unwrap_or_default()
        })
    }

    fn upsert(&mut self, p: &Pod, out: &mut Vec<Obs>) {
        if !self.ours(p) {
            return;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        let container = self.container_of(p);
        let now = status(p, &container);
        let before = self.pods.insert(name.clone(), now.clone());
        let mut lin = self.lineage.lock().unwrap_or_else(|e| e.into_inner());
        let before = before.filter(|b| b.uid == now.uid);
        let Some(i) = attribute(&mut lin, p, &name, &now, before.is_none(), out) else {
            return;
        };
        let at = Stage {
            replica: lin.name(i),
            pod: &name,
            container: &container,
        };
        let current = lin.current(&name, &now.uid) == Some(i);
        if now.terminating && !before.as_ref().is_some_and(|b| b.terminating) {
            if current {
                lin.vacate(i);
            }
            out.push(at.obs("pod_terminating", format!("pod {name} is terminating")));
        }
        if !current || now.terminating {
            return;
        }
        lin.update(i, &seen(p, &name, &now));
        stages(
            &at,
            before.as_ref(),
            &now,
            lin.is_replacement(&now.uid),
            out,
        );
    }

    fn gone(&mut self, name: &str, uid: &str, out: &mut Vec<Obs>) {
        self.pods.remove(name);
        let mut lin = self.lineage.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = lin.current(name, uid) {
            lin.vacate(i);
        }
        if let Some(i) = lin.replica_of(name) {
            out.push((
                Some(lin.name(i)),
                "pod_deleted",
                format!("pod {name} (uid {uid}) is gone"),
            ));
        }
    }
}

fn seen(p: &Pod, name: &str, s: &Status) -> Seen {
    Seen {
        name: name.to_string(),
        uid: s.uid.clone(),
        ip: s.ip.clone(),
        node: s.node.clone(),
        owner: Owner::of(p),
    }
}

/// The replica of a pod: its own, one it was, or the vacant one a new pod fills
/// (`replacement_requested`).
fn attribute(
    lin: &mut Lineage,
    p: &Pod,
    name: &str,
    now: &Status,
    fresh: bool,
    out: &mut Vec<Obs>,
) -> Option<usize> {
    if let Some(i) = lin.current(name, &now.uid) {
        return Some(i);
    }
    if fresh
        && !now.terminating
        && let Some(a) = lin.adopt(&seen(p, name, now))
    {
        let owner = Owner::of(p).map_or("no controller".into(), |o| o.to_string());
        let created = p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(time)
            .unwrap_or_default();
        out.push((
            Some(lin.name(a.replica)),
            "replacement_requested",
            format!(
                "pod {name} (uid {}) created by {owner} at {created} takes the place of pod {}",
                now.uid, a.old
            ),
        ));
        return Some(a.replica);
    }
    lin.replica_of(name)
}

struct Stage<'a> {
    replica: String,
    pod: &'a str,
    container: &'a str,
}

impl Stage<'_> {
    fn obs(&self, what: &'static str, detail: String) -> Obs {
        (Some(self.replica.clone()), what, detail)
    }
}

/// The stages a replica's live pod went through between two looks.
fn stages(at: &Stage<'_>, b: Option<&Status>, now: &Status, replacement: bool, out: &mut Vec<Obs>) {
    let (pod, c) = (at.pod, at.container);
    let was = |f: fn(&Status) -> bool| b.is_some_and(f);
    if let Some(t) = &now.scheduled
        && !was(|b| b.scheduled.is_some())
    {
        let d = format!("pod {pod} scheduled on node {} at {t}", now.node);
        out.push(at.obs("pod_scheduled", d));
    }
    if let Some(id) = &now.image
        && !was(|b| b.image.is_some())
    {
        let d = format!("container {c} of pod {pod}: image present on the node ({id})");
        out.push(at.obs("image_pulled", d));
    }
    if let Some(t) = &now.started
        && b.is_none_or(|b| b.started.as_ref() != Some(t))
    {
        if b.is_some_and(|b| now.restarts > b.restarts) {
            let d = format!(
                "container {c} of pod {pod} restarted (restart count {}, {}), running since {t}",
                now.restarts, now.last_exit
            );
            out.push(at.obs("restarted", d));
        } else {
            let d = format!("container {c} of pod {pod} running since {t}");
            out.push(at.obs("process_started", d));
        }
    }
    match (&now.ready, b.and_then(|b| b.ready.as_ref())) {
        (Some(t), None) => {
            let what = if replacement {
                "replacement_ready"
            } else {
                "ready"
            };
            out.push(at.obs(what, format!("pod {pod} Ready since {t}")));
        }
        (None, Some(_)) => {
            let d = format!("pod {pod} Ready=False: {}", now.not_ready_why);
            out.push(at.obs("not_ready", d));
        }
        _ => {}
    }
    if let Some(why) = &now.failing
        && b.is_none_or(|b| b.failing.as_ref() != Some(why))
    {
        out.push(at.obs("replacement_failed", format!("pod {pod}: {why}")));
    }
}

impl Follow<Pod> for PodObserver {
    fn apply(&mut self, ev: Applied<Pod>) -> Vec<Obs> {
        let mut out = Vec::new();
        match ev {
            Applied::Upsert(p) => self.upsert(&p, &mut out),
            Applied::Delete(p) if self.ours(&p) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                let uid = p.metadata.uid.clone().unwrap_or_default();
                self.gone(&name, &uid, &mut out);
            }
            Applied::Delete(_) => {}
            Applied::Reset(all) => {
                let listed: Vec<String> =
                    all.iter().filter_map(|p| p.metadata.name.clone()).collect();
                let left: Vec<(String, String)> = self
                    .pods
                    .iter()
                    .filter(|(n, _)| !listed.contains(n))
                    .map(|(n, s)| (n.clone(), s.uid.clone()))
                    .collect();
                for (name, uid) in left {
                    self.gone(&name, &uid, &mut out);
                }
                for p in &all {
                    self.upsert(p, &mut out);
                }
            }
        }
        out
    }
}

/// Watches the serving pods until `stop`, writing each stage.
pub async fn watch(
    cluster: Arc<Cluster>,
    container: Option<String>,
    lineage: Shared,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) {
    let (ns, sel) = (cluster.namespace.clone(), cluster.selector_text.clone());
    let list = || calls::list_pods(&ns, &sel);
    let watch = |version: &str| calls::watch_pods(&ns, &sel, version);
    let w = Watched {
        source: SOURCE,
        noun: format!("pods of `{sel}`"),
        list: &list,
        watch: &watch,
    };
    let observer = PodObserver::new(lineage, container, &ns, cluster.selector.clone());
    super::watch::run(&cluster, w, observer, clock, trace, stop).await;
}
