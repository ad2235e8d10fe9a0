//! A `worker` fault with `target.kubernetes.replacement: scale`: the replica's pod's
//! workload (its Deployment, its StatefulSet) is scaled down by one, that pod first —
//! a Deployment's pod is annotated with the lowest `pod-deletion-cost` so its
//! ReplicaSet removes it first; a StatefulSet removes its highest ordinal, so the pod
//! must be that one — verified by the scale read back and the pod terminating or gone
//! (another pod going instead is not this fault: unverified). The fault's `restart`
//! scales back up (`target::kube::scale::respawn`); the heal restores the original
//! count whatever happened (idempotent: a count already restored is set again), and
//! the heal ledger has that count before the scale changes (`haq heal` after a
//! killed run).

use std::sync::Arc;
use std::time::Instant;

use super::super::backend::{Context, Injected, VERIFY_TIMEOUT};
use super::super::guard::{Healed, Undo};
use super::super::ledger::{Ledger, Remedy};
use super::pods::{terminating_or_gone, until};
use crate::target::kube::calls;
use crate::target::kube::cluster::{Cluster, api_error};
use crate::target::kube::pod::PodRef;
use crate::target::kube::scale::{self, Scaled, Workload};

/// Scales the pod's workload down by one, that pod first; the original count is in
/// the heal ledger before the scale changes.
pub async fn down(
    p: &PodRef,
    fault: &str,
    replica: &str,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let (c, at) = (&p.cluster, Instant::now());
    let w = match scale::workload_of(p).await {
        Ok(w) => w,
        Err(why) => return (Injected::failed(at, None, why), None),
    };
    let n = match scale::read(c, &w).await {
        Ok(n) if n >= 1 => n,
        Ok(n) => {
            let why = format!("{w} has {n} replicas: nothing to scale down");
            return (Injected::failed(at, None, why), None);
        }
        Err(why) => return (Injected::failed(at, None, why), None),
    };
    if let Err(why) = first_to_go(p, &w, n).await {
        return (Injected::failed(at, None, why), None);
    }
    c.record_scaled(
        replica,
        Scaled {
            workload: w.clone(),
            original: n,
            pod_uid: p.pod.uid.clone(),
        },
    );
    let remedy = Remedy::KubeScale {
        context: c.context.clone(),
        namespace: c.namespace.clone(),
        plural: w.plural.to_string(),
        name: w.name.clone(),
        replicas: n,
    };
    let entry = cx.ledger.intend(fault, replica, remedy);
    let undo: Box<dyn Undo> = Box::new(ScaleBack {
        cluster: c.clone(),
        workload: w.clone(),
        original: n,
        ledger: (cx.ledger.clone(), entry),
    });
    let scaled = match scale::set(c, &w, n - 1).await {
        Ok(d) => d,
        Err(why) => return (Injected::failed(at, None, why), Some(undo)),
    };
    let verdict = until(p, VERIFY_TIMEOUT, |now| terminating_or_gone(p, at, now)).await;
    let inj = match verdict {
        Ok(d) => Injected {
            at,
            pid: None,
            verified: true,
            detail: format!("{scaled} from {n}; {d}"),
        },
        Err(last) => Injected::failed(
            at,
            None,
            format!(
                "{scaled} from {n}, but pod {} is {last} after {VERIFY_TIMEOUT:?}: the controller removed another pod",
                p.pod.name
            ),
        ),
    };
    (inj, Some(undo))
}

/// Makes the pod the one a scale-down removes (a Deployment's), or checks it is (a
/// StatefulSet's highest ordinal).
async fn first_to_go(p: &PodRef, w: &Workload, n: i32) -> Result<(), String> {
    let c = &p.cluster;
    if w.plural == "statefulsets" {
        let last = format!("{}-{}", w.name, n - 1);
        return if p.pod.name == last {
            Ok(())
        } else {
            Err(format!(
                "scaling {w} down removes pod {last}, not {}: fault that replica",
                p.pod.name
            ))
        };
    }
    c.send::<serde_json::Value>(calls::mark_first_to_go(&c.namespace, &p.pod.name))
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "annotating pod {} {}: {}",
                p.pod.name,
                calls::DELETION_COST,
                api_error(&e).1
            )
        })
}

/// The heal: the workload back to its original count; a verified heal closes the
/// ledger entry.
struct ScaleBack {
    cluster: Arc<Cluster>,
    workload: Workload,
    original: i32,
    ledger: (Arc<Ledger>, u64),
}

impl Undo for ScaleBack {
    fn undo(&mut self) -> Healed {
        let (c, w, n) = (self.cluster.clone(), self.workload.clone(), self.original);
        let late = format!("scaling {w} back to {n} did not finish");
        super::undo::heal_with(&self.cluster, &self.ledger, late, async move {
            scale::set(&c, &w, n).await
        })
    }
}
