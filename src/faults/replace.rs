//! Replacement after a kill or a drain (Q6, Q11): the target starts a new replica
//! ([`crate::target::replace`]) and this records each stage haq can see: requested,
//! process started, ready (its readiness path answers 2xx), first request served (the
//! proxy saw an inference request through it answered in full).

use std::sync::Arc;

use super::env::{Env, wait};
use crate::plan::FaultPlan;
use crate::target::registry::Replica;
use crate::target::replace::{self, Restart};
use crate::trace::{Event, ReplacementStage};

fn emit(
    env: &Env,
    f: &FaultPlan,
    r: &Replica,
    stage: ReplacementStage,
    pid: Option<u32>,
    detail: Option<String>,
) {
    if let Some(d) = &detail {
        (env.say)(format!(
            "replacement of {} ({}): {} — {d}",
            r.name,
            f.name,
            crate::scenario::words::human(&stage)
        ));
    }
    env.trace.emit(Event::Replacement {
        t: env.clock.now_us(),
        fault: f.name.clone(),
        replica: r.name.clone(),
        stage,
        pid,
        detail,
    });
}

/// Starts a replacement for `r` and follows it to its first served request.
pub async fn run(f: &FaultPlan, r: &Arc<Replica>, env: &Env) {
    let Some(spec) = &f.restart else { return };
    if !wait(env, spec.after.0).await {
        return;
    }
    emit(env, f, r, ReplacementStage::Requested, None, None);
    let how = Restart {
        command: spec.command.clone().or_else(|| r.restart_cmd.clone()),
        cold_start: spec.cold_start.map(|d| d.0),
        env: super::command::env(f, r, &env.context(None)),
        log: env.run_dir.join(format!("restart-{}.log", r.name)),
        stop: env.load_done.clone(),
    };
    let started = replace::start(r, &env.registry.respawn, &how).await;
    let (pid, how) = match started {
        Ok(s) => s,
        Err(e) => {
            return emit(env, f, r, ReplacementStage::Failed, None, Some(e));
        }
    };
    emit(env, f, r, ReplacementStage::ProcessStarted, pid, Some(how));
    let served_base = r.proxy.as_ref().map(|p| *p.served().borrow());
    let ready = spec.ready_timeout.0;
    match replace::ready_within(r, &env.admin, ready, &env.load_done).await {
        Some(d) => emit(
            env,
            f,
            r,
            ReplacementStage::Ready,
            pid,
            Some(format!("ready after {:.0}ms", d.as_secs_f64() * 1e3)),
        ),
        None => {
            return emit(
                env,
                f,
                r,
                ReplacementStage::Failed,
                pid,
                Some(format!(
                    "not ready within {ready:?} (or the load ended first)"
                )),
            );
        }
    }
    let (Some(p), Some(base)) = (&r.proxy, served_base) else {
        return;
    };
    let mut rx = p.served();
    tokio::select! {
        r2 = rx.wait_for(|n| *n > base) => {
            if r2.is_ok() {
                emit(env, f, r, ReplacementStage::FirstRequestServed, pid, Some("first inference request answered in full through the proxy".into()));
            }
        }
        _ = env.load_done.cancelled() => {}
    }
}
