//! Validation of one fault into its [`FaultPlan`], in a fixed order (the first issue
//! found is the one reported): action, time, trigger, targets, what the trigger and
//! the backend need of the targets, parameters, restart, name.

use super::action::action;
use super::context::Ctx;
use super::kube::kube_params;
use super::params::{params, restart};
use super::replicas::name_ok;
use super::targets::{reachable, targets};
use super::trigger::{trigger, trigger_fits};
use super::types::FaultPlan;
use crate::plan::phase::PhasePlan;
use crate::scenario::{Fault, FaultAction, Issue};

/// Validates `faults[i]` (`field`) into its plan.
pub(super) fn one(cx: &Ctx, field: &str, f: &Fault) -> Result<FaultPlan, Issue> {
    let action = action(field, f)?;
    let phase = phase(cx, field, f)?;
    let trigger = trigger(cx, field, f)?;
    let (replicas, node) = targets(cx, field, f, &trigger)?;
    if replicas.is_empty() && f.backend == crate::scenario::FaultBackend::Engine {
        // The probe picks the replica: the engine backend must reach every one.
        for d in cx.decls {
            reachable(cx, field, f.backend, &d.name)?;
        }
    }
    for r in &replicas {
        reachable(cx, field, f.backend, r)?;
    }
    trigger_fits(cx, field, f, action, &trigger, &replicas)?;
    params(field, f, action)?;
    kube_params(cx, field, f, &replicas)?;
    if let Some(r) = &f.restart {
        restart(cx, field, r, action, &replicas)?;
    }
    let name = name(field, f, action, node.as_deref(), &replicas)?;
    Ok(FaultPlan {
        name,
        domain: f.domain,
        backend: f.backend,
        action,
        replica: replicas.first().cloned().unwrap_or_default(),
        replicas,
        node,
        phase: phase.name.clone(),
        at: phase.start + f.at.offset.0,
        trigger,
        duration: f.duration.map(|d| d.0),
        delay: f.delay.map(|d| d.0),
        bytes_per_s: f.bytes_per_s,
        factor: f.factor,
        health: match action {
            FaultAction::GpuHang => Some(f.health.unwrap_or_default()),
            _ => None,
        },
        gpu: f.target.as_ref().and_then(|t| t.gpu),
        restart: f.restart.clone(),
        command: f.command.clone(),
        exec: f.exec.as_ref().map(crate::scenario::KubeExec::steps),
        reset_connections: f.reset_connections.clone(),
        grace: f.grace,
        verify: f.verify,
    })
}

/// The phase of `at.phase`, with `at.offset` inside it.
fn phase<'a>(cx: &Ctx<'a>, field: &str, f: &Fault) -> Result<&'a PhasePlan, Issue> {
    let phase = cx
        .phases
        .iter()
        .find(|p| p.name == f.at.phase)
        .ok_or_else(|| {
            Issue::new(
                format!("{field}.at.phase"),
                &f.at.phase,
                format!(
                    "no such phase (phases: {})",
                    cx.phases
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
    if f.at.offset.0 >= phase.duration {
        return Err(Issue::new(
            format!("{field}.at.offset"),
            f.at.offset,
            format!(
                "is not inside phase `{}`, which lasts {}",
                phase.name,
                crate::wire::units::format_duration(phase.duration)
            ),
        ));
    }
    Ok(phase)
}

/// The fault's `name`, or `action-target` (`-probe` when a probe picks the replica).
fn name(
    field: &str,
    f: &Fault,
    action: FaultAction,
    node: Option<&str>,
    replicas: &[String],
) -> Result<String, Issue> {
    let name = f.name.clone().unwrap_or_else(|| {
        let what = node
            .map(str::to_string)
            .or_else(|| replicas.first().cloned())
            .unwrap_or_else(|| "probe".into());
        format!("{}-{what}", action.as_str())
    });
    if !name_ok(&name) {
        return Err(Issue::new(
            format!("{field}.name"),
            format!("{name:?}"),
            "use only letters, digits, `-`, `_` and `.`",
        ));
    }
    Ok(name)
}
