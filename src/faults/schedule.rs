//! The fault schedule: one task per fault, on the load's clock (`load_start`), apart
//! from the request dispatch loop. Each waits for its time, then for its trigger (at
//! once; a probe request's token-loop point; a load level), applies the fault to
//! every target replica, records each verification, heals it when its duration ends,
//! and starts a replacement when asked. A trigger that never comes is recorded as a
//! fault not applied (never silently skipped).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::probe::{self, ProbeClient};
use super::{Context, Heals, Injected, Registry, Replica, injector, replace};
use crate::plan::{FaultPlan, Trigger};
use crate::proxy::{ProbeBoard, Release};
use crate::scenario::{FaultAction, FaultBackend};
use crate::trace::{Clock, Event, TraceWriter};

/// Everything the fault tasks share.
pub struct Env {
    pub registry: Arc<Registry>,
    pub heals: Arc<Heals>,
    pub trace: TraceWriter,
    pub clock: Clock,
    pub run_dir: PathBuf,
    pub seed: u64,
    /// The proxies' probe board (none when no replica has a proxy).
    pub board: Option<Arc<ProbeBoard>>,
    pub probes: ProbeClient,
    /// For the replicas' own endpoints (readiness, admin hooks).
    pub admin: reqwest::Client,
    /// Progress lines for the person watching.
    pub say: Arc<dyn Fn(String) + Send + Sync>,
    pub load_start: Instant,
    /// The load ended (or was interrupted): stop waiting for triggers, heal on time.
    pub load_done: CancellationToken,
    /// Hard stop: probe requests still running are cancelled.
    pub stop: CancellationToken,
}

impl Env {
    pub fn context(&self, probe: Option<String>) -> Context {
        Context {
            run_dir: self.run_dir.clone(),
            seed: self.seed,
            clock: self.clock,
            trace: self.trace.clone(),
            probe,
            http: self.admin.clone(),
        }
    }
}

/// Runs every fault to its end.
pub async fn run(faults: Vec<FaultPlan>, env: Arc<Env>) {
    let mut set = JoinSet::new();
    for f in faults {
        set.spawn(one(f, env.clone()));
    }
    while set.join_next().await.is_some() {}
}

/// What fired a fault, for the record.
pub struct Fired {
    pub trigger: String,
    /// Trace time the condition was met.
    pub t: u64,
    pub probe: Option<String>,
}

async fn one(f: FaultPlan, env: Arc<Env>) {
    tokio::select! {
        _ = tokio::time::sleep_until((env.load_start + f.at).into()) => {}
        _ = env.load_done.cancelled() => {
            return missed(&f, &env, f.replica.clone(), None, "the load ended before its time".into());
        }
    }
    match f.trigger {
        Trigger::Time => {
            let fired = Fired {
                trigger: "time".into(),
                t: env.clock.now_us(),
                probe: None,
            };
            let targets = declared(&f, &env);
            let ids = apply(&f, &env, &targets, &fired).await;
            after(&f, &env, &targets, ids).await;
        }
        Trigger::InFlight { n, within } => {
            let Some(proxy) = env.registry.get(&f.replica).and_then(|r| r.proxy.clone()) else {
                return missed(
                    &f,
                    &env,
                    f.replica.clone(),
                    None,
                    "no proxy counts this replica's requests".into(),
                );
            };
            let mut rx = proxy.in_flight();
            let reached = tokio::select! {
                r = tokio::time::timeout(within, rx.wait_for(|v| *v >= n)) => matches!(r, Ok(Ok(_))),
                _ = env.load_done.cancelled() => false,
            };
            if !reached {
                let peak = *rx.borrow();
                return missed(
                    &f,
                    &env,
                    f.replica.clone(),
                    None,
                    format!(
                        "in flight on {} never reached {n} within {within:?} (now {peak})",
                        f.replica
                    ),
                );
            }
            let fired = Fired {
                trigger: format!("in_flight >= {n} on {}", f.replica),
                t: env.clock.now_us(),
                probe: None,
            };
            let targets = declared(&f, &env);
            let ids = apply(&f, &env, &targets, &fired).await;
            after(&f, &env, &targets, ids).await;
        }
        Trigger::Probe { .. } => probe::run(&f, &env).await,
    }
}

/// The declared targets (validated to exist).
fn declared(f: &FaultPlan, env: &Env) -> Vec<Arc<Replica>> {
    f.replicas
        .iter()
        .filter_map(|n| env.registry.get(n).cloned())
        .collect()
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
/// computed-but-unsent bytes are dropped; a user command's effect is read from the
/// path (dropped if the replica's side ended); otherwise they go on.
pub fn release_for(f: &FaultPlan) -> Release {
    match (f.action, f.backend) {
        (FaultAction::Kill, _) => Release::Drop,
        (_, FaultBackend::Command) => Release::Auto,
        _ => Release::Forward,
    }
}

/// Records a fault that was not applied (Failure-Domain reads it as such).
pub fn missed(f: &FaultPlan, env: &Env, replica: String, probe: Option<String>, why: String) {
    (env.say)(format!("fault {}: NOT applied — {why}", f.name));
    env.trace.emit(Event::Fault {
        t: env.clock.now_us(),
        name: f.name.clone(),
        domain: format!("{:?}", f.domain).to_lowercase(),
        action: f.action.as_str().into(),
        replica,
        pid: None,
        verified: false,
        detail: format!("not applied: {why}"),
        backend: Some(backend_str(f.backend).into()),
        node: f.node.clone(),
        trigger: Some(f.trigger.describe()),
        triggered: None,
        probe,
    });
}

fn backend_str(b: FaultBackend) -> &'static str {
    match b {
        FaultBackend::Process => "process",
        FaultBackend::Proxy => "proxy",
        FaultBackend::Command => "command",
    }
}

/// Applies `f` to every target at once, records each injection; returns the heal ids.
pub async fn apply(f: &FaultPlan, env: &Env, targets: &[Arc<Replica>], fired: &Fired) -> Vec<u64> {
    let cx = env.context(fired.probe.clone());
    let inj = injector(f.backend);
    let results: Vec<(Injected, Option<Box<dyn super::Undo>>)> =
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
    env.trace.emit(Event::Fault {
        t: env.clock.us_of(i.at),
        name: f.name.clone(),
        domain: format!("{:?}", f.domain).to_lowercase(),
        action: f.action.as_str().into(),
        replica: r.name.clone(),
        pid: i.pid,
        verified: i.verified,
        detail: i.detail,
        backend: Some(backend_str(f.backend).into()),
        node: r.node.clone(),
        trigger: Some(fired.trigger.clone()),
        triggered: Some(fired.t),
        probe: fired.probe.clone(),
    });
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

/// Waits `d` unless the load ends first (returns false then).
pub async fn wait(env: &Env, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = env.load_done.cancelled() => false,
    }
}
