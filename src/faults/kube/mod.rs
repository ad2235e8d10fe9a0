//! Kubernetes backend (`backend: kubernetes`, docs/kubernetes.md): each fault acts on
//! a replica's pod through the API and is verified from it. By domain: `worker` kill
//! deletes the pod with grace 0 and `drain` evicts it ([`pods`]); `node` cordons its
//! node, then evicts or deletes it ([`node`]); `network` isolates it with a
//! NetworkPolicy ([`net`]); a `process` / `gpu` kill, `freeze`, `gpu_lost` and `slow`
//! exec the fault's commands in the pod — inject, verify, heal ([`exec`]); with
//! `replacement: scale` a `worker` fault scales the pod's workload down by one, that
//! pod first ([`scale`]). Reversible faults (a cordon, a policy, an exec with a heal)
//! are in the heal ledger before they are applied.

mod exec;
mod net;
mod node;
mod pods;
mod reset;
mod scale;
mod undo;

#[cfg(test)]
mod exectests;
#[cfg(test)]
mod nettests;
#[cfg(test)]
mod scaletests;
#[cfg(test)]
mod tests;

use std::time::Instant;

use futures_util::future::BoxFuture;

use super::backend::{Context, Injected, Injector};
use super::{Replica, Undo};
use crate::plan::FaultPlan;
use crate::scenario::KubeReplacement::Scale;
use crate::scenario::{FailureDomain as D, FaultAction as A};

pub struct KubeInjector;

impl Injector for KubeInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let Some(p) = r.pod() else {
                let why = format!("replica {} has no pod", r.name);
                return (Injected::failed(Instant::now(), None, why), None);
            };
            match (f.domain, f.action) {
                (D::Worker, A::Kill | A::Drain) if p.cluster.replacement == Scale => {
                    scale::down(&p, &f.name, &r.name, cx).await
                }
                (D::Worker, A::Kill) => {
                    let grace = crate::scenario::KubeGrace::seconds(f.grace);
                    (pods::kill(&p, grace).await, None)
                }
                (D::Drain, A::Drain) => (pods::evict(&p).await, None),
                (D::Node, a @ (A::Kill | A::Drain)) => {
                    node::node(&p, a, &f.name, &r.name, cx).await
                }

                (D::Network, A::Blackhole) => net::isolate(&p, f, r, cx).await,
                (D::Process | D::Gpu, A::Kill) | (_, A::Freeze | A::GpuLost | A::Slow) => {
                    exec::fault(&p, f, r, cx).await
                }
                (d, a) => {
                    let why = format!("the kubernetes backend cannot {a} in domain {d}");
                    (Injected::failed(Instant::now(), None, why), None)
                }
            }
        })
    }
}
