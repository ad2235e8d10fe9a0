//! What the kubernetes backend does to one pod, each verified from the API: a delete
//! with grace 0 (the pod is gone, or back under a new uid) or with a grace period
//! (the pod terminating), an eviction (a
//! PodDisruptionBudget's 429 is *blocked*, never success; verified by the pod
//! terminating or gone), and the check of a kill exec'd in the engine's container (its
//! restart count or its terminated state; the exec itself is in [`super::exec`]).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::super::backend::{Injected, VERIFY_TIMEOUT};
use crate::target::kube::calls;
use crate::target::kube::cluster::api_error;
use crate::target::kube::discover::restarts;
use crate::target::kube::pod::PodRef;

/// How often a fault's effect is read back from the API.
pub const POLL: Duration = Duration::from_millis(100);

/// How long a container killed by an exec may take to show as restarted (the
/// kubelet notices a container's exit within its relist period).
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(30);

fn ms(at: Instant) -> f64 {
    at.elapsed().as_secs_f64() * 1e3
}

/// What the API says of the pod now.
pub enum Now {
    Gone,
    /// Recreated under the same name (a StatefulSet's pod).
    Replaced(String),
    /// Still there; terminating since its deletion timestamp, if set.
    There(Box<Pod>),
}

pub async fn read(p: &PodRef) -> Result<Now, String> {
    let c = &p.cluster;
    match c
        .send::<Pod>(calls::get_pod(&c.namespace, &p.pod.name))
        .await
    {
        Ok(pod) => match pod.metadata.uid.as_deref() {
            Some(uid) if uid != p.pod.uid => Ok(Now::Replaced(uid.to_string())),
            _ => Ok(Now::There(Box::new(pod))),
        },
        Err(e) if api_error(&e).0 == 404 => Ok(Now::Gone),
        Err(e) => Err(api_error(&e).1),
    }
}

/// Polls the pod until `done` says how it ended, for at most `limit`.
pub(super) async fn until(
    p: &PodRef,
    limit: Duration,
    mut done: impl FnMut(&Now) -> Option<String>,
) -> Result<String, String> {
    let start = Instant::now();
    loop {
        let last = match read(p).await {
            Ok(now) => {
                if let Some(d) = done(&now) {
                    return Ok(d);
                }
                match now {
                    Now::There(pod) => match pod.metadata.deletion_timestamp {
                        Some(t) => format!("still present, terminating since {}", t.0),
                        None => "still present".into(),
                    },
                    _ => "changed".into(),
                }
            }
            Err(e) => format!("reading it failed: {e}"),
        };
        if start.elapsed() >= limit {
            return Err(last);
        }
        tokio::time::sleep(POLL).await;
    }
}

fn gone_or_replaced(p: &PodRef, at: Instant, now: &Now) -> Option<String> {
    match now {
        Now::Gone => Some(format!(
            "pod {} gone from the API after {:.0}ms",
            p.pod.name,
            ms(at)
        )),
        Now::Replaced(uid) => Some(format!(
            "pod {} recreated under a new uid {uid} after {:.0}ms",
            p.pod.name,
            ms(at)
        )),
        Now::There(_) => None,
    }
}

/// The pod terminating (with its own grace period), gone or replaced.
pub(super) fn terminating_or_gone(p: &PodRef, at: Instant, now: &Now) -> Option<String> {
    match now {
        Now::There(pod) => pod.metadata.deletion_timestamp.as_ref().map(|t| {
            format!(
                "pod {} terminating (deletion timestamp {}, its own grace period) after {:.0}ms",
                p.pod.name,
                t.0,
                ms(at)
            )
        }),
        other => gone_or_replaced(p, at, other),
    }
}

/// Deletes the pod with `grace` seconds (`None`: its own grace period), verified by
/// the pod gone (or a new uid) — with a grace period, by the pod terminating.
pub async fn kill(p: &PodRef, grace: Option<u32>) -> Injected {
    let c = &p.cluster;
    let at = Instant::now();
    let call = calls::delete_pod(&c.namespace, &p.pod.name, grace);
    if let Err(e) = c.send::<serde_json::Value>(call).await {
        let (code, why) = api_error(&e);
        let why = if code == 404 {
            format!("pod {} was already gone before the delete", p.pod.name)
        } else {
            format!("deleting pod {} failed: {why}", p.pod.name)
        };
        return Injected::failed(at, None, why);
    }
    let with = match grace {
        Some(g) => format!("grace {g}"),
        None => "its own grace period".into(),
    };
    let verdict = if grace == Some(0) {
        until(p, VERIFY_TIMEOUT, |now| gone_or_replaced(p, at, now)).await
    } else {
        until(p, VERIFY_TIMEOUT, |now| terminating_or_gone(p, at, now)).await
    };
    match verdict {
        Ok(d) => Injected {
            at,
            pid: None,
            verified: true,
            detail: format!(
                "deleted pod {} (uid {}) with {with}; {d}",
                p.pod.name, p.pod.uid
            ),
        },
        Err(last) => Injected::failed(
            at,
            None,
            format!(
                "deleted pod {} with {with}; {last} after {VERIFY_TIMEOUT:?}",
                p.pod.name
            ),
        ),
    }
}

/// Evicts the pod (the Eviction API), verified by the pod terminating or gone; a
/// PodDisruptionBudget's refusal (429) is reported as blocked.
pub async fn evict(p: &PodRef) -> Injected {
    let c = &p.cluster;
    let at = Instant::now();
    let call = calls::evict_pod(&c.namespace, &p.pod.name);
    if let Err(e) = c.send::<serde_json::Value>(call).await {
        let (code, why) = api_error(&e);
        let why = match code {
            429 => format!(
                "blocked: the eviction of pod {} was refused by a PodDisruptionBudget ({why})",
                p.pod.name
            ),
            404 => format!("pod {} was already gone before the eviction", p.pod.name),
            _ => format!("evicting pod {} failed: {why}", p.pod.name),
        };
        return Injected::failed(at, None, why);
    }
    let verdict = until(p, VERIFY_TIMEOUT, |now| terminating_or_gone(p, at, now)).await;
    match verdict {
        Ok(d) => Injected {
            at,
            pid: None,
            verified: true,
            detail: format!("evicted pod {} (Eviction API); {d}", p.pod.name),
        },
        Err(last) => Injected::failed(
            at,
            None,
            format!(
                "eviction of pod {} accepted; {last} after {VERIFY_TIMEOUT:?}",
                p.pod.name
            ),
        ),
    }
}

/// The container's restart count and last termination, as the API has it.
fn container_state(pod: &Pod, container: &str) -> (i32, Option<String>) {
    let last = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|s| s.name == container))
        .and_then(|s| {
            let term = s
                .state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .or_else(|| s.last_state.as_ref().and_then(|l| l.terminated.as_ref()))?;
            Some(format!(
                "terminated with exit code {}{}",
                term.exit_code,
                term.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ))
        });
    (restarts(pod, container), last)
}

/// The engine container restarted since its count was `before` (or the pod went):
/// the check of an exec'd kill, whose own exec status is only recorded (the container
/// dying under it can end the exec stream before its status).
pub async fn restarted(p: &PodRef, before: i32, at: Instant) -> Result<String, String> {
    let container = &p.pod.container;
    until(p, RESTART_TIMEOUT, |now| match now {
        Now::There(pod) => {
            let (n, last) = container_state(pod, container);
            (n > before).then(|| {
                format!(
                    "container {container} restarted ({before} → {n} restarts{}) after {:.0}ms",
                    last.map(|l| format!("; last {l}")).unwrap_or_default(),
                    ms(at)
                )
            })
        }
        other => gone_or_replaced(p, at, other),
    })
    .await
    .map_err(|last| {
        format!("the container did not restart within {RESTART_TIMEOUT:?} (pod {last})")
    })
}
