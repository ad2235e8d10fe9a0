//! The steps of firing one fault, shared by every trigger (time, load level, probe
//! point, the sim's hook): its targets, the injection and its record in the trace, a
//! fault not applied, and what follows (heal on time, replacement).

use std::sync::Arc;

use futures_util::future::join_all;

use super::backend::Injected;
use super::env::{Env, Fired};
use super::{Undo, injector, replace};
use crate::plan::FaultPlan;
use crate::proxy::Release;
use crate::scenario::{FaultAction, FaultBackend};
use crate::target::registry::Replica;
use crate::trace::{Event, FaultLine};

/// The declared targets (validated to exist). A node fault that names a replica
/// (a kubernetes target, whose nodes are discovered) hits every replica on that
/// replica's node.
pub(super) fn declared(f: &FaultPlan, env: &Env) -> Vec<Arc<Replica>> {
    let named: Vec<Arc<Replica>> = f
        .replicas
        .iter()
        .filter_map(|n| env.registry.get(n).cloned())
        .collect();
    if f.domain != crate::scenario::FailureDomain::Node || f.node.is_some() {
        return named;
    }
    let nodes: Vec<String> = named.iter().filter_map(|r| node_of(r)).collect();
    if nodes.is_empty() {
        return named;
    }
    env.registry
        .replicas
        .iter()
        .filter(|r| node_of(r).is_some_and(|n| nodes.contains(&n)))
        .cloned()
        .collect()
}

/// The node a replica runs on now (a kubernetes replica's pod may have moved).
fn node_of(r: &Replica) -> Option<String> {
    r.pod()
        .map(|p| p.pod.node.clone())
        .or_else(|| r.node.clone())
}

/// The targets of a fault fired by a probe served by `serving`: the declared ones,
/// or the serving replica (its whole node for a node fault). Anything outside the
/// declared replicas is refused.
pub fn probe_targets(f: &FaultPlan, env: &Env, serving: &str) -> Result<Vec<Arc<Replica>>, String> {
    if !f.replicas.is_empty() {
        return Ok(declared(f, env));
    }
    let Some(r) = env.registry.get(serving) else {
        return Err(format!(
            "the probe was served by `{serving}`, which is not a declared replica: refused (blast-radius guard)"
        ));
    };
    if f.domain == crate::scenario::FailureDomain::Node
        && let Some(node) = &r.node
    {
        return Ok(env
            .registry
            .replicas
            .iter()
            .filter(|x| x.node.as_ref() == Some(node))
            .cloned()
            .collect());
    }
    Ok(vec![r.clone()])
}

/// What a held probe request should do once the fault is applied: a killed replica's
/// computed-but-unsent bytes are dropped; a user command's effect (a `command` fault,
/// a kubernetes exec) is read from the path (dropped if the replica's side ended);
/// otherwise they go on.
pub fn release_for(f: &FaultPlan) -> Release {
    match (f.action, f.backend) {
        (FaultAction::Kill, _) => Release::Drop,
        (_, FaultBackend::Command) => Release::Auto,
        (_, FaultBackend::Kubernetes) if f.exec.is_some() => Release::Auto,
        _ => Release::Forward,
    }
}

/// Records a fault that was not applied (Failure-Domain reads it as such).
pub fn missed(f: &FaultPlan, env: &Env, replica: String, probe: Option<String>, why: String) {
    (env.say)(format!("fault {}: NOT applied — {why}", f.name));
    env.trace.emit(Event::Fault(FaultLine {
        t: env.clock.now_us(),
        name: f.name.clone(),
        domain: f.domain,
        action: f.action,
        replica,
        pid: None,
        verified: false,
        detail: format!("{}{why}", crate::trace::NOT_APPLIED),
        backend: Some(f.backend),
        node: f.node.clone(),
        trigger: Some(f.trigger.describe()),
        triggered: None,
        probe,
    }));
}

/// Applies `f` to every target at once, records each injection; returns the heal ids.
pub async fn apply(f: &FaultPlan, env: &Env, targets: &[Arc<Replica>], fired: &Fired) -> Vec<u64> {
    let cx = env.context(fired.probe.clone());
    let inj = injector(f.backend);
    let results: Vec<(Injected, Option<Box<dyn Undo>>)> =
        join_all(targets.iter().map(|r| inj.inject(f, r, &cx))).await;
    let mut ids = Vec::new();
    for (r, (i, undo)) in targets.iter().zip(results) {
        if let Some(u) = undo {
            ids.push(env.heals.register(&f.name, &r.name, u));
        }
        record(f, env, r, i, fired);
    }
    ids
}

/// Writes one applied fault (its verification) to the trace.
pub fn record(f: &FaultPlan, env: &Env, r: &Replica, i: Injected, fired: &Fired) {
    (env.say)(format!(
        "fault {}: {} {} ({}) — {}{}",
        f.name,
        f.action.as_str(),
        r.name,
        fired.trigger,
        i.detail,
        if i.verified { "" } else { " [NOT VERIFIED]" }
    ));
    env.trace.emit(Event::Fault(FaultLine {
        t: env.clock.us_of(i.at),
        name: f.name.clone(),
        domain: f.domain,
        action: f.action,
        replica: r.name.clone(),
        pid: i.pid,
        verified: i.verified,
        detail: i.detail,
        backend: Some(f.backend),
        node: node_of(r),
        trigger: Some(fired.trigger.clone()),
        triggered: Some(fired.t),
        probe: fired.probe.clone(),
    }));
}

/// After a fault is applied: heal it when its duration ends (or when the load ends),
/// and start replacements.
pub async fn after(f: &FaultPlan, env: &Env, targets: &[Arc<Replica>], ids: Vec<u64>) {
    let heal = async {
        if ids.is_empty() {
            return;
        }
        let why = match f.duration {
            Some(d) => tokio::select! {
                _ = tokio::time::sleep(d) => format!("duration {d:?} ended"),
                _ = env.load_done.cancelled() => "the load ended".to_string(),
            },
            None => {
                env.load_done.cancelled().await;
                "the load ended".to_string()
            }
        };
        for id in ids {
            env.heals.heal(id, &why).await;
        }
    };
    let restarts = async {
        if f.restart.is_some() {
            join_all(targets.iter().map(|r| replace::run(f, r, env))).await;
        }
    };
    tokio::join!(heal, restarts);
}
