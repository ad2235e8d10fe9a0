//! A kubernetes fault's `exec`: given exactly when the fault execs in the pod (a
//! `process` / `gpu` kill, `freeze`, `gpu_lost`, `slow`), its commands not empty, a
//! `verify` and a `heal` where the action needs them (a freeze or a slowdown must be
//! undone, and proven), its container a container name.

use crate::scenario::{FailureDomain as D, Fault, FaultAction as A, FaultBackend, Issue, KubeExec};

/// The fault execs in the pod.
fn execs(f: &Fault, action: A) -> bool {
    f.backend == FaultBackend::Kubernetes
        && match action {
            A::Kill => matches!(f.domain, D::Process | D::Gpu),
            A::Freeze | A::GpuLost | A::Slow => true,
            _ => false,
        }
}

fn empty(c: &[String]) -> bool {
    c.first().is_none_or(|x| x.trim().is_empty())
}

/// `faults[i].exec` of fault `f` (`field` is `faults[i]`).
pub(super) fn exec(field: &str, f: &Fault, action: A) -> Result<(), Issue> {
    let field = format!("{field}.exec");
    let Some(exec) = &f.exec else {
        return match (execs(f, action), action) {
            (false, _) => Ok(()),
            (true, A::Kill) => Err(Issue::missing(
                field,
                "is required: the command that kills the engine inside its container, e.g. [pkill, -KILL, llama-server] (a container's PID 1 ignores SIGKILL from inside it)",
            )),
            (true, a) => Err(Issue::missing(
                field,
                format!(
                    "is required for a kubernetes `{a}`: the commands run in the pod, e.g. {{inject: [pkill, -STOP, -f, EngineCore], verify: […], heal: [pkill, -CONT, -f, EngineCore]}}"
                ),
            )),
        };
    };
    if !execs(f, action) {
        return Err(Issue::missing(
            field,
            "is only for `backend: kubernetes` faults that exec in the pod: a `kill` of domain `process` or `gpu`, `freeze`, `gpu_lost` or `slow`",
        ));
    }
    let s = exec.steps();
    let list = matches!(exec, KubeExec::Kill(_));
    let at = |name: &str| {
        if list {
            field.clone()
        } else {
            format!("{field}.{name}")
        }
    };
    if empty(&s.inject) {
        return Err(Issue::missing(at("inject"), "is empty"));
    }
    for (name, c) in [("verify", &s.verify), ("heal", &s.heal)] {
        if c.as_deref().is_some_and(empty) {
            return Err(Issue::missing(format!("{field}.{name}"), "is empty"));
        }
    }
    if let Some(c) = &s.container
        && !crate::plan::kubernetes::dns_label_ok(c)
    {
        return Err(Issue::new(
            format!("{field}.container"),
            c,
            "is not a container name",
        ));
    }
    if s.timeout.0.is_zero() {
        return Err(Issue::new(
            format!("{field}.timeout"),
            s.timeout,
            "must be greater than 0",
        ));
    }
    needs(&at, f, action, &s)
}

/// The `verify` and `heal` the action needs: a kill has no heal (the kubelet restarts
/// the container); a freeze and a slowdown have both; a `duration` needs a heal.
fn needs(
    at: &dyn Fn(&str) -> String,
    f: &Fault,
    action: A,
    s: &crate::scenario::ExecSteps,
) -> Result<(), Issue> {
    match action {
        A::Kill if s.heal.is_some() => Err(Issue::missing(
            at("heal"),
            "is not for a kill: the kubelet restarts the container (`gpu_lost` keeps the engine down until its heal)",
        )),
        A::Freeze | A::Slow if s.heal.is_none() => Err(Issue::missing(
            at("heal"),
            format!(
                "is required for `{action}`: how haq undoes it when its duration ends, at the end of the load, on error, on Ctrl-C and in `haq heal` — write `exec: {{inject: […], verify: […], heal: […]}}`"
            ),
        )),
        A::Freeze | A::Slow if f.verify && s.verify.is_none() => Err(Issue::missing(
            at("verify"),
            "is required: how haq proves the fault took effect (exit 0 in the container), or set `verify: false` and the fault counts as unverified",
        )),
        _ if f.duration.is_some() && s.heal.is_none() => Err(Issue::missing(
            at("heal"),
            "is required with `duration` (how else would haq undo it?)",
        )),
        _ => Ok(()),
    }
}
