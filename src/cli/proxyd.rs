//! `haq proxy SCENARIO`: the scenario's proxy addresses held between runs
//! (`proxy::daemon`). A `url` target's replicas give their `listen` and `upstream`; a
//! kubernetes target's `target.kubernetes.proxies` give the addresses, and the pods
//! are discovered and followed (`target::kube::follow`) — the daemon runs in the
//! cluster, in the pod whose Service per replica the gateway points at
//! (examples/kubernetes/haq-proxy.yaml), and runs exec'd in that pod borrow them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Exit, ValidateArgs};
use crate::plan::Plan;
use crate::proxy::ProxySpec;
use crate::scenario::TargetKind;
use crate::target::kube::{Cluster, follow};

/// `haq proxy`: the scenario's listen addresses served until Ctrl-C.
pub(super) async fn proxy_daemon(a: ValidateArgs, cancel: CancellationToken) -> Exit {
    let plan = match crate::plan::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let kube = plan.scenario.target.kind == TargetKind::Kubernetes;
    let pods = if kube {
        match discovered(&plan).await {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("error: {e:#}");
                return Exit::Unusable;
            }
        }
    } else {
        None
    };
    let upstreams = pods.as_ref().map(|p| p.1.clone()).unwrap_or_default();
    let specs = match specs(&plan, &upstreams) {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => {
            let what = if kube {
                "`target.kubernetes.proxies` is empty"
            } else {
                "no replica declares both `listen` and `upstream`"
            };
            eprintln!(
                "error: {}: {what}: haq proxy has nothing to hold",
                a.scenario.display()
            );
            return Exit::Unusable;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let say = Arc::new(|s: String| eprintln!("haq proxy: {s}"));
    let held = match crate::proxy::daemon::start(&specs, say) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Exit::Unusable;
        }
    };
    for h in &held {
        println!(
            "{} {} -> {} (control {})",
            h.name,
            h.listen(),
            h.upstream().as_deref().unwrap_or("-"),
            h.control.display()
        );
    }
    if let (Some((cluster, known)), Some(k)) = (pods, plan.scenario.target.kubernetes.clone()) {
        let held = held.clone();
        let moved = move |p: &crate::target::kube::PodInfo| {
            if let Some(h) = held.iter().find(|h| h.name == p.replica) {
                h.set_upstream(&p.authority());
                eprintln!(
                    "haq proxy: {} now forwards to pod {} ({})",
                    p.replica,
                    p.name,
                    p.authority()
                );
            }
        };
        let declared = plan.scenario.target.replica_set();
        let stop = cancel.clone();
        tokio::spawn(async move {
            follow::follow(cluster, k, declared, known, follow::RELIST, stop, moved).await;
        });
    }
    println!(
        "haq proxy: serving; start the gateway against these addresses, then `haq run` — Ctrl-C stops"
    );
    cancel.cancelled().await;
    for h in &held {
        let _ = std::fs::remove_file(&h.control);
    }
    Exit::Pass
}

/// What each held address forwards to: a `url` replica's `upstream`, a kubernetes
/// replica's pod (`upstreams`: replica → `IP:PORT`).
fn specs(plan: &Plan, upstreams: &BTreeMap<String, String>) -> Result<Vec<ProxySpec>, String> {
    let mut specs = Vec::new();
    for d in &plan.replica_decls {
        let Some(l) = &d.listen else { continue };
        let Some(up) = d
            .upstream
            .clone()
            .or_else(|| upstreams.get(&d.name).cloned())
        else {
            continue;
        };
        let listen = l
            .parse()
            .map_err(|e| format!("replica {}: listen {l}: {e}", d.name))?;
        specs.push(ProxySpec {
            name: d.name.clone(),
            listen,
            upstream: Some(up),
        });
    }
    Ok(specs)
}

/// The kubernetes target's pods, discovered as a run discovers them (in an allowed
/// context only): the cluster and each replica's `IP:PORT`.
async fn discovered(plan: &Plan) -> anyhow::Result<(Arc<Cluster>, BTreeMap<String, String>)> {
    let t = &plan.scenario.target;
    let k = t
        .kubernetes
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("target.kubernetes is missing"))?;
    let (client, context) = crate::target::kube::cluster::connect(k).await?;
    let token = crate::wire::marker::RunToken::fresh().to_string();
    let cluster = Arc::new(Cluster::new(client, context, k, token)?);
    let say = |s: &str| eprintln!("haq proxy: {s}");
    let pods = crate::target::kube::discover::discover(
        &cluster,
        k,
        &t.replica_set(),
        t.ready_timeout.0,
        Duration::from_secs(1),
        &say,
    )
    .await?;
    let up = pods
        .iter()
        .map(|p| (p.replica.clone(), p.authority()))
        .collect();
    Ok((cluster, up))
}
