//! A node fault on a kubernetes target: the replica's node is cordoned (unless it was
//! already — then it is left so on heal), then the replica's pod is evicted (`drain`)
//! or deleted with grace 0 (`kill`). Every selected replica on the node is a target
//! of the same fault (`faults::fire`, all at once), so the node's serving pods all go;
//! the node is read and cordoned once (the first injection; the others wait for it
//! and find it done), uncordoned on heal, and the ledger lets `haq heal` uncordon it
//! after a killed run.

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
use crate::target::kube::cluster::{Cluster, Cordoned, api_error};
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
    let at = Instant::now();
    let (cordon, undo) = match cordon_once(p, fault, replica, cx).await {
        Ok(done) => done,
        Err((why, undo)) => return (Injected::failed(at, None, why), undo),
    };
    let mut inj = match action {
        FaultAction::Drain => pods::evict(p).await,
        _ => pods::kill(p, Some(0)).await,
    };
    inj.at = at;
    inj.detail = format!("{cordon}; {}", inj.detail);
    (inj, undo)
}

/// A cordon and the heal that undoes it, or why not (and the heal of a cordon that
/// may have half happened).
type Cordon = (String, Option<Box<dyn Undo>>);

/// Cordons the pod's node unless this run's node faults already did (another pod of
/// the node: this fault's other injections wait for the first) or it was cordoned
/// before haq (left so). Only the injection that cordons gets the heal.
async fn cordon_once(
    p: &PodRef,
    fault: &str,
    replica: &str,
    cx: &Context,
) -> Result<Cordon, (String, Option<Box<dyn Undo>>)> {
    let c = &p.cluster;
    let node = p.pod.node.clone();
    let mut cordons = c.cordons.lock().await;
    match cordons.get(&node) {
        Some(Cordoned::ByHaq {
            fault: f,
            replica: r,
        }) => {
            return Ok((
                format!("node {node} cordoned by {f} (with {r}'s pod)"),
                None,
            ));
        }
        Some(Cordoned::Before) => {
            return Ok((
                format!("node {node} was already cordoned (left so on heal)"),
                None,
            ));
        }
        None => {}
    }
    let was: Result<Node, _> = c.send(calls::get_node(&node)).await;
    match was {
        Ok(n) if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) => {
            cordons.insert(node.clone(), Cordoned::Before);
            return Ok((
                format!("node {node} was already cordoned (left so on heal)"),
                None,
            ));
        }
        Ok(_) => {}
        Err(e) => return Err((format!("reading node {node}: {}", api_error(&e).1), None)),
    }
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
            let by = Cordoned::ByHaq {
                fault: fault.to_string(),
                replica: replica.to_string(),
            };
            cordons.insert(node.clone(), by);
            Ok((format!("node {node} cordoned"), Some(undo)))
        }
        Ok(_) => Err((
            format!("node {node} is not unschedulable after the cordon"),
            Some(undo),
        )),
        Err(e) => Err((
            format!("cordoning node {node}: {}", api_error(&e).1),
            Some(undo),
        )),
    }
}

/// Uncordons the node; a verified uncordon closes the ledger entry (and a later node
/// fault cordons it again).
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
            let done = heal::uncordon(&c.client, &node).await;
            if done.is_ok() {
                c.cordons.lock().await.remove(&node);
            }
            done
        })
    }
}
