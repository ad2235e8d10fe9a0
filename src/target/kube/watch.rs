//! The list → watch → list-again loop both observers share (the EndpointSlice watch,
//! [`super::slices`], and the pod watch, [`super::podwatch`]): list, watch from the
//! list's resource version (each request renewed after `WATCH_SECS`), follow the
//! events, list again after a 410 or a failed watch, and write what the observer
//! makes of each event as `observation` lines of its source.
//!
//! The observer is a [`Follow`] (events in, observations out: pure but for the
//! replica attribution it shares), so a recorded stream replays to the same lines;
//! the pods it must read to attribute (an EndpointSlice's new pod: its labels) are
//! read by the loop and handed back to it.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::core::WatchEvent;
use tokio_util::sync::CancellationToken;

use super::calls::Call;
use super::cluster::{Cluster, api_error};
use crate::trace::{Clock, Event, TraceWriter};

/// How long the watch waits after a failed list or watch: doubled after each failure
/// in a row, up to [`RETRY_MAX`] (a watch refused by RBAC writes a line every 30 s,
/// not every second).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// One observation: the replica (if attributed), the word, the detail.
pub type Obs = (Option<String>, &'static str, String);

/// What one event does to the observed objects.
pub enum Applied<K> {
    Upsert(K),
    Delete(K),
    /// A fresh list replaces everything.
    Reset(Vec<K>),
}

/// An observer: each event applied, the observations it makes.
pub trait Follow<K> {
    fn apply(&mut self, ev: Applied<K>) -> Vec<Obs>;

    /// Pods it must read before it can attribute them (an EndpointSlice names a pod,
    /// not its labels or its controller): the loop reads each after every event.
    fn to_read(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// What the API answered for a pod it asked to read (`None`: gone, or not read).
    fn read(&mut self, _pod: &str, _got: Option<Pod>) -> Vec<Obs> {
        Vec::new()
    }
}

/// Reads the pods the observer asks for, and gives it each answer.
async fn read_asked<K>(cluster: &Cluster, follow: &mut impl Follow<K>) -> Vec<Obs> {
    let mut out = Vec::new();
    for name in follow.to_read() {
        let got: Option<Pod> = cluster
            .send(super::calls::get_pod(&cluster.namespace, &name))
            .await
            .ok();
        out.extend(follow.read(&name, got));
    }
    out
}

/// What a watch lists and watches, and what its errors call it.
pub struct Watched<'a> {
    pub source: &'static str,
    /// `EndpointSlices of llama`, `pods of app=llama`.
    pub noun: String,
    pub list: &'a (dyn Fn() -> Call + Send + Sync),
    pub watch: &'a (dyn Fn(&str) -> Call + Send + Sync),
}

/// Lists and watches until `stop`, writing each observation (the first list is the
/// baseline and writes nothing; a later one, after a 410, is news).
pub async fn run<K, F>(
    cluster: &Cluster,
    w: Watched<'_>,
    mut follow: F,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) where
    K: kube::Resource
        + k8s_openapi::ListableResource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    F: Follow<K> + Send,
{
    let emit = |out: Vec<Obs>| {
        let t = clock.now_us();
        for (replica, what, detail) in out {
            trace.emit(Event::Observation {
                t,
                source: w.source.into(),
                replica,
                what: what.into(),
                detail: Some(detail),
            });
        }
    };
    let failed = |doing: &str, e: &kube::Error| {
        vec![(
            None,
            "watch_error",
            format!("{doing} {}: {}", w.noun, api_error(e).1),
        )]
    };
    let mut first = true;
    let mut failures = 0u32;
    while !stop.is_cancelled() {
        let listed: Result<k8s_openapi::List<K>, _> = cluster.send((w.list)()).await;
        let mut version = match listed {
            Ok(l) => {
                let mut out = follow.apply(Applied::Reset(l.items));
                out.extend(read_asked(cluster, &mut follow).await);
                if !first {
                    emit(out);
                }
                first = false;
                failures = 0;
                l.metadata.resource_version.unwrap_or_default()
            }
            Err(_) if stop.is_cancelled() => return,
            Err(e) => {
                emit(failed("listing", &e));
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
            let events = match cluster
                .client
                .request_events::<K>((w.watch)(&version).req)
                .await
            {
                Ok(s) => s,
                Err(_) if stop.is_cancelled() => return,
                Err(e) => {
                    emit(failed("watching", &e));
                    failures += 1;
                    pause(&stop, failures).await;
                    break;
                }
            };
            let Some(expired) =
                follow_stream(cluster, events, &mut version, &mut follow, &emit, &stop).await
            else {
                return;
            };
            if expired {
                break;
            }
        }
    }
}

fn version_of<K: kube::Resource>(k: &K, version: &mut String) {
    if let Some(v) = &k.meta().resource_version {
        version.clone_from(v);
    }
}

/// Applies one watch stream's events until it ends (`Some(false)`: watch again from
/// `version`), expires or fails (`Some(true)`: list again), or `stop` (`None`).
async fn follow_stream<K: kube::Resource>(
    cluster: &Cluster,
    events: impl futures_util::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Send,
    version: &mut String,
    follow: &mut impl Follow<K>,
    emit: &(dyn Fn(Vec<Obs>) + Sync),
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
                version_of(&s, version);
                Applied::Upsert(s)
            }
            Some(Ok(WatchEvent::Deleted(s))) => {
                version_of(&s, version);
                Applied::Delete(s)
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                *version = b.metadata.resource_version;
                continue;
            }
            // A 410 (expired) or any other error: list again.
            Some(Ok(WatchEvent::Error(_)) | Err(_)) => return Some(true),
        };
        let mut out = follow.apply(applied);
        out.extend(read_asked(cluster, follow).await);
        emit(out);
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

/// A replayed watch event (a recorded stream's `{"type": …, "object": …}` line) as
/// what it does: `None` for a bookmark or an error.
pub fn replayed<K>(ev: WatchEvent<K>) -> Option<Applied<K>> {
    match ev {
        WatchEvent::Added(k) | WatchEvent::Modified(k) => Some(Applied::Upsert(k)),
        WatchEvent::Deleted(k) => Some(Applied::Delete(k)),
        WatchEvent::Bookmark(_) | WatchEvent::Error(_) => None,
    }
}
