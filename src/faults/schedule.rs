//! The fault schedule: one task per fault, on the load's clock (`load_start`), apart
//! from the request dispatch loop. Each waits for its time, then for its trigger (at
//! once; a probe request's token-loop point; a load level), applies the fault to
//! every target replica, records each verification, heals it when its duration ends,
//! and starts a replacement when asked. A trigger that never comes is recorded as a
//! fault not applied (never silently skipped).

use std::sync::Arc;

use tokio::task::JoinSet;

pub use super::env::{Env, Fired, ProbeClient, wait};
use super::fire::declared;
pub use super::fire::{after, apply, missed, probe_targets, record, release_for};
use super::probe;
use crate::plan::{FaultPlan, Trigger};

/// Runs every fault to its end; while faults are due, the engines' own metrics are
/// read until the load ends (before, during and after each fault: Q12 step 14).
pub async fn run(faults: Vec<FaultPlan>, env: Arc<Env>) {
    let mut set = JoinSet::new();
    if !faults.is_empty() {
        set.spawn(super::scrape::run(env.clone()));
    }
    for f in faults {
        set.spawn(one(f, env.clone()));
    }
    while set.join_next().await.is_some() {}
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
