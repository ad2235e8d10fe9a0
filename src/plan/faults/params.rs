//! The parameters of the fault's action — `duration`, `delay`, `bytes_per_s`, the
//! `command` — and its `restart`: each given exactly when the action reads it.

use super::context::Ctx;
use crate::scenario::{CommandSpec, Fault, FaultAction, FaultBackend, Issue, Restart};
use crate::wire::units::Dur;

/// The action's parameters: positive durations, each parameter given with the one
/// action that reads it, the command of the command backend.
pub(super) fn params(field: &str, f: &Fault, action: FaultAction) -> Result<(), Issue> {
    let pos = |name: &str, d: Option<Dur>| -> Result<(), Issue> {
        match d {
            Some(d) if d.0.is_zero() => Err(Issue::new(
                format!("{field}.{name}"),
                d,
                "must be greater than 0",
            )),
            _ => Ok(()),
        }
    };
    pos("duration", f.duration)?;
    pos("delay", f.delay)?;
    if f.duration.is_some() && !action.reversible() {
        return Err(Issue::missing(
            format!("{field}.duration"),
            format!(
                "a {} is not undone; use `restart` for a replacement",
                action.as_str()
            ),
        ));
    }
    proxy_params(field, f, action)?;
    super::exec::exec(field, f, action)?;
    engine_params(field, f, action)?;
    match (f.backend, &f.command) {
        (FaultBackend::Command, None) => Err(Issue::missing(
            format!("{field}.command"),
            "is required with the command backend (`inject`, and `verify` / `heal` if you can)",
        )),
        (FaultBackend::Command, Some(c)) => command(field, f, c),
        (_, Some(_)) => Err(Issue::missing(
            format!("{field}.command"),
            "is only for `backend: command`",
        )),
        _ => Ok(()),
    }
}

/// `delay` with `action: delay` only, `bytes_per_s` with `action: throttle` only.
fn proxy_params(field: &str, f: &Fault, action: FaultAction) -> Result<(), Issue> {
    match (action, f.delay.is_some()) {
        (FaultAction::Delay, false) => {
            return Err(Issue::missing(
                format!("{field}.delay"),
                "is required for `action: delay`",
            ));
        }
        (a, true) if a != FaultAction::Delay => {
            return Err(Issue::missing(
                format!("{field}.delay"),
                "is only for `action: delay`",
            ));
        }
        _ => {}
    }
    match (action, f.bytes_per_s) {
        (FaultAction::Throttle, None | Some(0)) => {
            return Err(Issue::missing(
                format!("{field}.bytes_per_s"),
                "is required for `action: throttle` and must be at least 1",
            ));
        }
        (a, Some(_)) if a != FaultAction::Throttle => {
            return Err(Issue::missing(
                format!("{field}.bytes_per_s"),
                "is only for `action: throttle`",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// `factor` with the engine backend's `action: slow` only (above 1, at most 10000),
/// `health` with `action: gpu_hang` only.
fn engine_params(field: &str, f: &Fault, action: FaultAction) -> Result<(), Issue> {
    match (action, f.factor) {
        (FaultAction::Slow, None) if f.backend == FaultBackend::Engine => {
            return Err(Issue::missing(
                format!("{field}.factor"),
                "is required for `action: slow` (every engine step takes `factor` times as long)",
            ));
        }
        (_, Some(_)) if f.backend != FaultBackend::Engine => {
            return Err(Issue::missing(
                format!("{field}.factor"),
                "is only for the engine backend's `slow` (elsewhere the fault's own command makes the replica slow)",
            ));
        }
        (FaultAction::Slow, Some(k)) if !(k.is_finite() && k > 1.0 && k <= 10_000.0) => {
            return Err(Issue::new(
                format!("{field}.factor"),
                k,
                "must be above 1 and at most 10000 (a slower step, not a faster one)",
            ));
        }
        (a, Some(_)) if a != FaultAction::Slow => {
            return Err(Issue::missing(
                format!("{field}.factor"),
                "is only for `action: slow`",
            ));
        }
        _ => {}
    }
    if f.health.is_some() && action != FaultAction::GpuHang {
        return Err(Issue::missing(
            format!("{field}.health"),
            "is only for `action: gpu_hang`",
        ));
    }
    Ok(())
}

/// The command backend's `command`: an `inject`, a `verify` unless the fault is
/// unverified, a timeout, a `heal` to undo a fault with a `duration`.
fn command(field: &str, f: &Fault, c: &CommandSpec) -> Result<(), Issue> {
    if c.inject.trim().is_empty() {
        return Err(Issue::missing(
            format!("{field}.command.inject"),
            "is empty",
        ));
    }
    if f.verify && c.verify.is_none() {
        return Err(Issue::missing(
            format!("{field}.command.verify"),
            "is required: how haq proves the fault took effect (or set `verify: false`, and the fault counts as unverified)",
        ));
    }
    if c.timeout.0.is_zero() {
        return Err(Issue::new(
            format!("{field}.command.timeout"),
            c.timeout,
            "must be greater than 0",
        ));
    }
    if f.duration.is_some() && c.heal.is_none() {
        return Err(Issue::missing(
            format!("{field}.command.heal"),
            "is required with `duration` (how else would haq undo it?)",
        ));
    }
    Ok(())
}

/// `restart` follows a kill or a drain, and outside the sim has a command to run:
/// its own or the target replica's `process.restart` (`replicas`; empty = the
/// replica serving the probe, which needs its own).
pub(super) fn restart(
    cx: &Ctx,
    field: &str,
    r: &Restart,
    action: FaultAction,
    replicas: &[String],
) -> Result<(), Issue> {
    if !matches!(action, FaultAction::Kill | FaultAction::Drain) {
        return Err(Issue::missing(
            format!("{field}.restart"),
            "only follows a kill or a drain (the replica must be gone to be replaced)",
        ));
    }
    if cx.sim() {
        return Ok(());
    }
    if cx.kube() {
        return crate::plan::kubernetes::restart(cx.s, field, r, action);
    }
    for name in replicas {
        let declared = cx
            .decl(name)
            .and_then(|d| d.process.as_ref())
            .and_then(|p| p.restart.as_ref());
        if r.command.is_none() && declared.is_none() {
            return Err(Issue::missing(
                format!("{field}.restart.command"),
                format!("is required: replica `{name}` declares no `process.restart` command"),
            ));
        }
    }
    if replicas.is_empty() && r.command.is_none() {
        return Err(Issue::missing(
            format!("{field}.restart.command"),
            "is required when the target is the probe's replica",
        ));
    }
    Ok(())
}
