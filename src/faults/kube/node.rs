//! A node fault on a kubernetes target: the replica's node is cordoned (unless it was
//! already — then it is left so on heal), then the replica's pod is evicted (`drain`)
//! or deleted with grace 0 (`kill`). Every selected replica on the node is a target
//! of the same fault (`faults::fire`), so the node's serving pods all go; the node is
//! uncordoned on heal, and the ledger lets `haq heal` uncordon it after a killed run.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;

use super::super::backend::{Context, Injected};
use super::super::guard::{Healed, Undo};
use super::super::ledger::{Ledger, Remedy};
use super::pods;
use super::undo::heal_with;
use crate::scenario::FaultAction;
use crate::target::kube::calls;
use crate::target::kube::cluster::{Cluster, api_error};
use crate::target::kube::heal;
use crate::target::kube::pod::PodRef;

/// Cordons the pod's node, then evicts or deletes the pod.
pub async fn node(
    p: &PodRef,
    action: FaultAction,
    fault: &str,
    replica: &str,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let c = &p.cluster;
    let node = p.pod.node.clone();
    let at = Instant::now();
    let was: Result<Node, _> = c.send(calls::get_node(&node)).await;
    let cordoned_before = match was {
        Ok(n) => n.spec.and_then(|s| s.unschedulable).unwrap_or(false),
        Err(e) => {
            let why = format!("reading node {node}: {}", api_error(&e).1);
            return (Injected::failed(at, None, why), None);
        }
    };
    let (cordon, undo) = if cordoned_before {
        (
            format!("node {node} was already cordoned (left so on heal)"),
            None,
        )
    } else {
        let remedy = Remedy::KubeUncordon {
            context: c.context.clone(),
            node: node.clone(),
        };
        let entry = cx.ledger.intend(fault, replica, remedy);
        let undo: Box<dyn Undo> = Box::new(Uncordon {
            cluster: c.clone(),
            node: node.clone(),
            ledger: (cx.ledger.clone(), entry),
        });
        match c.send::<Node>(calls::cordon(&node, true)).await {
            Ok(n) if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) => {
                (format!("node {node} cordoned"), Some(undo))
            }
            Ok(_) => {
                let why = format!("node {node} is not unschedulable after the cordon");
                return (Injected::failed(at, None, why), Some(undo));
            }
            Err(e) => {
                let why = format!("cordoning node {node}: {}", api_error(&e).1);
                return (Injected::failed(at, None, why), Some(undo));
            }
        }
    };
    let mut inj = match action {
        FaultAction::Drain => pods::evict(p).await,
        _ => pods::kill(p, Some(0)).await,
    };
    inj.at = at;
    inj.detail = format!("{cordon}; {}", inj.detail);
    (inj, undo)
}

/// Uncordons the node; a verified uncordon closes the ledger entry.
pub struct Uncordon {
    pub cluster: Arc<Cluster>,
    pub node: String,
    pub ledger: (Arc<Ledger>, u64),
}

impl Undo for Uncordon {
    fn undo(&mut self) -> Healed {
        let (c, node) = (self.cluster.clone(), self.node.clone());
        let late = format!("the uncordon of node {} did not finish", self.node);
        heal_with(&self.cluster, &self.ledger, late, async move {
            heal::uncordon(&c.client, &node).await
        })
    }
}
