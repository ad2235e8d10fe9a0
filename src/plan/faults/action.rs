//! The fault's action: the default of its backend, one the backend can do, and a
//! failure domain that matches what it does (Q7).

use crate::scenario::{FailureDomain, Fault, FaultAction, FaultBackend, Issue};

/// The fault's action (its backend's default when not given), allowed for its
/// backend and fitting its declared domain.
pub(super) fn action(field: &str, f: &Fault) -> Result<FaultAction, Issue> {
    let action = match (f.action, f.backend) {
        (Some(a), _) => a,
        (None, FaultBackend::Process) => FaultAction::Kill,
        (None, FaultBackend::Command) => FaultAction::Command,
        (None, FaultBackend::Kubernetes) => match f.domain {
            crate::scenario::FailureDomain::Drain => FaultAction::Drain,
            crate::scenario::FailureDomain::Network => FaultAction::Blackhole,
            _ => FaultAction::Kill,
        },
        (None, FaultBackend::Proxy) => {
            return Err(Issue::missing(
                format!("{field}.action"),
                "is required with the proxy backend (reset, close, blackhole, delay or throttle)",
            ));
        }
        (None, FaultBackend::Engine) => {
            return Err(Issue::missing(
                format!("{field}.action"),
                "is required with the engine backend (gpu_lost, gpu_hang or slow)",
            ));
        }
    };
    // The kubernetes backend execs its own commands for a lost GPU and a slow replica.
    let execs = f.backend == FaultBackend::Kubernetes && action != FaultAction::GpuHang;
    if action.backend() == FaultBackend::Engine && f.backend != FaultBackend::Engine && !execs {
        return Err(Issue::new(
            format!("{field}.backend"),
            f.backend.as_str(),
            format!(
                "`{}` acts on the sim worker's engine: declare `backend: engine`{}",
                action.as_str(),
                if f.backend == FaultBackend::Kubernetes {
                    " (on kubernetes a hung engine is `action: freeze` with `exec`: SIGSTOP of the engine core, SIGCONT to heal)"
                } else {
                    ""
                }
            ),
        ));
    }
    if !allowed(f.backend).contains(&action) {
        return Err(Issue::new(
            format!("{field}.action"),
            action.as_str(),
            format!(
                "is not a `{}` backend action (use {})",
                serde_json::to_value(f.backend)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                allowed(f.backend)
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    domain_fits(field, f.domain, f.backend, action)?;
    Ok(action)
}

/// The actions a backend can carry out.
fn allowed(backend: FaultBackend) -> &'static [FaultAction] {
    use FaultAction::*;
    match backend {
        FaultBackend::Process => &[Kill, Drain, Freeze],
        FaultBackend::Proxy => &[Reset, Close, Blackhole, Delay, Throttle],
        FaultBackend::Command => &[Command],
        FaultBackend::Kubernetes => &[Kill, Drain, Blackhole, Freeze, GpuLost, Slow],
        FaultBackend::Engine => &[GpuLost, GpuHang, Slow],
    }
}

/// The declared failure domain matches what the action does to the replica.
fn domain_fits(
    field: &str,
    domain: FailureDomain,
    backend: FaultBackend,
    action: FaultAction,
) -> Result<(), Issue> {
    use FailureDomain as D;
    let why = match (domain, backend, action) {
        (_, FaultBackend::Command, _) => None,
        (_, FaultBackend::Kubernetes, _) => kube_fits(domain, action),
        (D::Drain, _, FaultAction::Drain) => None,
        (D::Drain, _, _) => Some("a planned drain is `action: drain` (SIGTERM) or a command"),
        (_, _, FaultAction::Drain) => Some(
            "SIGTERM starts a planned drain: declare `domain: drain` (Q7 keeps drain and abrupt failure apart)",
        ),
        (D::Network, FaultBackend::Proxy, _) => None,
        (D::Network, _, _) => Some(
            "a network-path fault leaves the replica alive: use the proxy backend or a command",
        ),
        (_, FaultBackend::Proxy, _) => Some(
            "a proxy fault cuts the network path and leaves the process alive: declare `domain: network`",
        ),
        (D::Node, FaultBackend::Engine, _) => Some(
            "an engine fault hits one replica's engine: declare `domain: gpu`, `process` or `worker`",
        ),
        _ => None,
    };
    match why {
        Some(w) => Err(Issue::new(
            format!("{field}.domain"),
            serde_json::to_value(domain)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            w,
        )),
        None => Ok(()),
    }
}

/// What the kubernetes backend does in each domain: `kill` deletes the pod (worker),
/// cordons its node and deletes its pods (node) or exec's a kill in the container
/// (process, gpu); `drain` evicts it (drain) or cordons its node and evicts its pods
/// (node); `blackhole` isolates it with a NetworkPolicy (network); `freeze`, `gpu_lost`
/// and `slow` exec the fault's commands in one pod (`slow` may stand for its network
/// path: a `tc` delay).
fn kube_fits(domain: FailureDomain, action: FaultAction) -> Option<&'static str> {
    use FailureDomain as D;
    use FaultAction as A;
    match (domain, action) {
        (D::Worker | D::Node | D::Process | D::Gpu, A::Kill) => None,
        (D::Drain | D::Node, A::Drain) => None,
        (D::Network, A::Blackhole | A::Slow) => None,
        (D::Worker | D::Process | D::Gpu, A::Freeze | A::GpuLost | A::Slow) => None,
        (D::Network, _) => Some(
            "a network-path fault leaves the pod alive: `action: blackhole` (a NetworkPolicy) or `slow` (an exec: a `tc` delay)",
        ),
        (_, A::Freeze | A::GpuLost | A::Slow) => Some(
            "an exec fault hits one pod's container: declare `domain: process`, `gpu` or `worker`",
        ),
        (_, A::Drain) => Some(
            "an eviction is a planned drain: declare `domain: drain` (or `node` to drain a node)",
        ),
        (_, A::Blackhole) => Some("a NetworkPolicy cuts a path: declare `domain: network`"),
        _ => Some("the kubernetes backend cannot do this"),
    }
}
