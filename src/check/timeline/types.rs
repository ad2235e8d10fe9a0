//! The timeline's vocabulary: a [`Mark`] (a point and the evidence that says so),
//! the per-fault stages ([`FaultTimeline`]: detection, [`Removal`], [`InFlight`],
//! [`Replacement`]), the rows people read ([`Entry`]) and the evidence sources' names.

use serde::Serialize;

use crate::scenario::{FailureDomain, FaultAction};

pub const JOURNAL: &str = "gateway journal";
pub const HEADER: &str = "x-haq-worker header";
pub const PROXY: &str = "haq proxy";
pub const BACKEND: &str = "haq fault backend";
/// The gateway's error answers that say it could not reach an upstream.
pub const CLIENT: &str = "client error answers";

/// A point on the timeline and what says so.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mark {
    pub t: u64,
    pub source: String,
    pub detail: String,
}

pub(super) fn mark(t: u64, source: &str, detail: impl Into<String>) -> Mark {
    Mark {
        t,
        source: source.into(),
        detail: detail.into(),
    }
}

/// When new traffic stopped reaching the faulted endpoint.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Removal {
    /// The last new request routed to the endpoint after the fault, or the fault
    /// itself when none was.
    pub t: u64,
    /// Requests (attempts) routed to the endpoint after the fault.
    pub routed_after_fault: u64,
    pub last: Option<Mark>,
    /// The first request routed elsewhere after `t`: proof that traffic went on and
    /// avoided the endpoint (without it, the run may simply have ended).
    pub confirmed: Option<Mark>,
    /// The evidence sources consulted.
    pub sources: Vec<String>,
    /// A reversible fault (freeze, proxy rule) was healed while traffic still reached
    /// the endpoint: routing never took it out, the heal ended the outage. Traffic
    /// after the heal is not traffic to a dead endpoint.
    pub until_heal: bool,
    /// Connect attempts refused at the endpoint's proxy, among `routed_after_fault`.
    pub refused_connects: u64,
    /// Why the run cannot tell that traffic stopped reaching the endpoint after `t`
    /// (no source sees every attempt: a proxy whose listener was closed while the
    /// connects refused there could not be seen, or only the gateway's error answers).
    /// Routing is then UNKNOWN unless `t` already exceeds the bound.
    pub unseen: Option<String>,
    /// The gateway's error answers after the fault that another endpoint down at the
    /// same time could explain as well: not counted.
    pub unattributed: u64,
    /// Connects refused at the endpoint's proxy while no client request was looking
    /// for an upstream (health checks, probes): not counted as traffic.
    pub probe_connects: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct InFlight {
    /// Requests in flight on the endpoint (or not yet committed) when it failed.
    pub caught: u64,
    /// ... that still completed (retried before their first delta, or drained).
    pub recovered: u64,
    /// ... that ended otherwise (explicit error, reset, …).
    pub terminated: u64,
    /// ... that the client left on purpose or haq ended (abandoned, cancelled at the
    /// drain timeout, interrupted, or failed by haq's own host: `local`): neither
    /// recovered nor ended by the fault.
    pub left: u64,
    /// When the last of them ended.
    pub settled: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Replacement {
    pub requested: Option<Mark>,
    pub started: Option<Mark>,
    pub ready: Option<Mark>,
    /// The first request routed to the replacement once ready.
    pub serving: Option<Mark>,
    /// The backend could not start it, or it never became ready.
    pub failed: Option<Mark>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FaultTimeline {
    pub fault: String,
    pub replica: String,
    pub domain: FailureDomain,
    pub action: FaultAction,
    pub injected: u64,
    pub verified: bool,
    /// A planned drain (Q7) rather than an abrupt failure.
    pub drain: bool,
    /// The fault takes the endpoint out of service (routing applies).
    pub removes: bool,
    pub detected: Option<Mark>,
    /// `None` when the run has no routing evidence at all.
    pub removal: Option<Removal>,
    pub in_flight: InFlight,
    /// End of the degraded interval: the first later phase that is not a fault,
    /// drain or degraded phase, or the end of load.
    pub degraded_until: u64,
    /// The same as planned, when the run was cut short (interrupted) before the end of
    /// the degraded interval it planned: default bounds derive from it, not from what
    /// the interrupt left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_until: Option<u64>,
    pub replacement: Replacement,
    /// haq undid the fault and verified the undo.
    pub healed: Option<Mark>,
    /// haq tried to undo the fault but could not verify it (the mark's detail says
    /// why): the fault is not healed, and may still be in place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heal_unverified: Option<Mark>,
}

/// One row of the timeline as people read it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    pub t: u64,
    /// Seconds since the start of load.
    pub at_s: f64,
    /// Milliseconds since the fault this entry belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_fault_ms: Option<f64>,
    pub event: String,
    pub source: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Timeline {
    pub faults: Vec<FaultTimeline>,
    /// All replaced capacity ready and serving, and the healthy latency envelope back.
    pub full_recovery: Option<Mark>,
    pub entries: Vec<Entry>,
}

impl Timeline {
    pub fn fault(&self, name: &str) -> Option<&FaultTimeline> {
        self.faults.iter().find(|f| f.fault == name)
    }
}

pub fn ms(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1000.0
}
