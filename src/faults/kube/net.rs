//! A network fault on a kubernetes target: the replica's pod gets a label of this run
//! (`haq.dev/isolate`) and a NetworkPolicy labelled `haq.dev/run=<token>` admits no
//! ingress to it — the path from the gateway is cut, the pod stays alive. Verified by
//! the API (the label on the pod, the policy in place); the CNI enforces it, and
//! connections established before may survive it (conntrack: docs/kubernetes.md) —
//! unless the fault's `reset_connections` resets them ([`super::reset`]). Healed by
//! deleting the policy and the label, in the ledger before it is applied.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::super::backend::{Context, Injected};
use super::super::guard::{Healed, Undo};
use super::super::ledger::{Ledger, Remedy};
use super::undo::heal_with;
use crate::plan::FaultPlan;
use crate::target::kube::calls::{self, ISOLATE_LABEL, dns_name};
use crate::target::kube::cluster::{Cluster, api_error};
use crate::target::kube::heal;
use crate::target::kube::pod::PodRef;
use crate::target::registry::Replica;

/// Labels the pod and creates the isolating NetworkPolicy, then resets the
/// connections established before it when the fault asks.
pub async fn isolate(
    p: &PodRef,
    f: &FaultPlan,
    r: &Replica,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let (mut inj, undo) = policy(p, &f.name, &r.name, cx).await;
    if let (true, Some(how)) = (inj.verified, &f.reset_connections) {
        match super::reset::reset(p, r, how).await {
            Ok(d) => inj.detail = format!("{}; {d}", inj.detail),
            Err(why) => {
                inj.verified = false;
                inj.detail = format!(
                    "{}; the established connections were not reset: {why}",
                    inj.detail
                );
            }
        }
    }
    (inj, undo)
}

/// Labels the pod and creates the isolating NetworkPolicy.
async fn policy(
    p: &PodRef,
    fault: &str,
    replica: &str,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let c = &p.cluster;
    let ns = c.namespace.clone();
    let (policy, label) = calls::isolation_names(&c.token, fault, replica);
    let remedy = Remedy::KubeIsolation {
        context: c.context.clone(),
        namespace: ns.clone(),
        policy: policy.clone(),
        pod: p.pod.name.clone(),
        label: ISOLATE_LABEL.into(),
    };
    // In the ledger before anything is applied; undone even if half applied.
    let entry = cx.ledger.intend(fault, replica, remedy);
    let undo: Box<dyn Undo> = Box::new(Unisolate {
        cluster: c.clone(),
        policy: policy.clone(),
        pod: p.pod.name.clone(),
        ledger: (cx.ledger.clone(), entry),
    });
    let at = Instant::now();
    let fail = |why: String| Injected::failed(at, None, why);
    let labelled: Result<Pod, _> = c
        .send(calls::label_pod(
            &ns,
            &p.pod.name,
            ISOLATE_LABEL,
            Some(&label),
        ))
        .await;
    let has = |pod: &Pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ISOLATE_LABEL))
            == Some(&label)
    };
    match labelled {
        Ok(pod) if has(&pod) => {}
        Ok(_) => {
            let why = format!(
                "pod {} does not carry {ISOLATE_LABEL}={label} after the patch",
                p.pod.name
            );
            return (fail(why), Some(undo));
        }
        Err(e) => {
            let why = format!("labelling pod {}: {}", p.pod.name, api_error(&e).1);
            return (fail(why), Some(undo));
        }
    }
    let np = calls::isolating_policy(&policy, &c.token, &dns_name(fault), &label);
    if let Err(e) = c
        .send::<NetworkPolicy>(calls::create_policy(&ns, &np))
        .await
    {
        let why = format!("creating NetworkPolicy {policy}: {}", api_error(&e).1);
        return (fail(why), Some(undo));
    }
    let inj = match c
        .send::<NetworkPolicy>(calls::get_policy(&ns, &policy))
        .await
    {
        Ok(_) => Injected {
            at,
            pid: None,
            verified: true,
            detail: format!(
                "NetworkPolicy {policy} admits no ingress to pod {} ({ISOLATE_LABEL}={label}); the pod stays alive (enforced by the CNI; established connections may survive)",
                p.pod.name
            ),
        },
        Err(e) => fail(format!(
            "NetworkPolicy {policy} created but not read back: {}",
            api_error(&e).1
        )),
    };
    (inj, Some(undo))
}

/// Deletes the policy and the label; a verified heal closes the ledger entry.
pub struct Unisolate {
    pub cluster: Arc<Cluster>,
    pub policy: String,
    pub pod: String,
    pub ledger: (Arc<Ledger>, u64),
}

impl Undo for Unisolate {
    fn undo(&mut self) -> Healed {
        let (c, policy, pod) = (self.cluster.clone(), self.policy.clone(), self.pod.clone());
        let late = format!("removing NetworkPolicy {} did not finish", self.policy);
        heal_with(&self.cluster, &self.ledger, late, async move {
            heal::unisolate(&c.client, &c.namespace, &policy, &pod, ISOLATE_LABEL).await
        })
    }
}
