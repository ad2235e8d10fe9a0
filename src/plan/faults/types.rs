//! The validated fault: [`FaultPlan`] (what, where, when, for how long) and the
//! [`Trigger`] that fires it.

use std::time::Duration;

use serde::Serialize;

use crate::scenario::{
    CommandSpec, FailureDomain, FaultAction, FaultBackend, HangHealth, ProbePoint, Restart, Via,
};

/// What fires a fault.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// At its time.
    Time,
    /// When a probe request sent at its time reaches `point`.
    Probe {
        point: ProbePoint,
        within: Duration,
        prompt_tokens: u32,
        max_tokens: u32,
        via: Via,
    },
    /// When at least `n` requests are in flight on the target replica.
    InFlight { n: u32, within: Duration },
}

impl Trigger {
    pub fn describe(&self) -> String {
        match self {
            Trigger::Time => "time".into(),
            Trigger::Probe {
                point,
                via: Via::Hook,
                ..
            } => format!("probe {} (worker hook)", point.describe()),
            Trigger::Probe { point, .. } => format!("probe {}", point.describe()),
            Trigger::InFlight { n, .. } => format!("in_flight >= {n}"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultPlan {
    pub name: String,
    pub domain: FailureDomain,
    pub backend: FaultBackend,
    pub action: FaultAction,
    /// The target replica (the first of a node); empty when the fault hits the replica
    /// serving its probe.
    pub replica: String,
    /// Every replica it removes; empty = the replica serving the probe.
    pub replicas: Vec<String>,
    /// `target.node`, when the target is a node.
    pub node: Option<String>,
    pub phase: String,
    /// Offset from the start of load.
    pub at: Duration,
    pub trigger: Trigger,
    pub duration: Option<Duration>,
    pub delay: Option<Duration>,
    pub bytes_per_s: Option<u64>,
    /// `slow`: the step-time factor.
    pub factor: Option<f64>,
    /// `gpu_hang`: how the hung replica's health endpoints behave.
    pub health: Option<HangHealth>,
    /// Domain `gpu`: the GPU of the replica's tensor-parallel group, when declared.
    pub gpu: Option<u32>,
    pub restart: Option<Restart>,
    pub command: Option<CommandSpec>,
    /// `kubernetes` backend: the commands exec'd in the pod (a `process` / `gpu` kill,
    /// `freeze`, `gpu_lost`, `slow`); a kill command alone is an `inject`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<crate::scenario::ExecSteps>,
    /// `kubernetes` backend, `network`: how the established connections are reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_connections: Option<crate::scenario::ResetConnections>,
    /// `kubernetes` backend, `worker` kill: the grace period (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace: Option<crate::scenario::KubeGrace>,
    pub verify: bool,
}

impl FaultPlan {
    /// The fault removes a replica from service for good (unless it is replaced).
    pub fn removes(&self) -> bool {
        matches!(self.action, FaultAction::Kill | FaultAction::Drain)
    }

    /// haq undoes the fault (at its duration's end, or the load's): its action is
    /// reversible, and a kubernetes exec fault has a `heal`.
    pub fn healed(&self) -> bool {
        self.action.reversible() && self.exec.as_ref().is_none_or(|e| e.heal.is_some())
    }
}
