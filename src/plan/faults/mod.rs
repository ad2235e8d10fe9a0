//! Validation of the declared replicas and the faults into [`FaultPlan`]s: every
//! target inside the declared replicas (the blast-radius guard), every backend able
//! to reach what it targets, every trigger possible — or one [`Issue`], before
//! anything starts.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use super::phase::PhasePlan;
use crate::scenario::*;

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
    pub restart: Option<Restart>,
    pub command: Option<CommandSpec>,
    pub verify: bool,
}

impl FaultPlan {
    /// The fault removes a replica from service for good (unless it is replaced).
    pub fn removes(&self) -> bool {
        matches!(self.action, FaultAction::Kill | FaultAction::Drain)
    }
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks `target.replicas` (the list form) and returns the resolved declarations.
pub fn validate_replicas(t: &Target) -> Result<Vec<ReplicaDecl>, Issue> {
    let decls = t.replica_decls();
    let Some(Replicas::List(list)) = &t.replicas else {
        return Ok(decls);
    };
    let mut names = BTreeSet::new();
    let mut listens = BTreeSet::new();
    for (i, r) in list.iter().enumerate() {
        let f = format!("target.replicas[{i}]");
        if !name_ok(&r.name) || !names.insert(r.name.as_str()) {
            return Err(Issue::new(
                format!("{f}.name"),
                format!("{:?}", r.name),
                "replica names must be unique and use only letters, digits, `-`, `_` and `.`",
            ));
        }
        if t.kind == TargetKind::Sim {
            for (field, set) in [
                ("upstream", r.upstream.is_some()),
                ("listen", r.listen.is_some()),
                ("process", r.process.is_some()),
            ] {
                if set {
                    return Err(Issue::missing(
                        format!("{f}.{field}"),
                        "is for `kind: url` replicas; the sim starts its own workers (give only `name` and `node`)",
                    ));
                }
            }
            continue;
        }
        let up = r.upstream.as_deref().ok_or_else(|| {
            Issue::missing(
                format!("{f}.upstream"),
                "is required: the `host:port` this replica serves on",
            )
        })?;
        match up.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {}
            _ => {
                return Err(Issue::new(
                    format!("{f}.upstream"),
                    up,
                    "must be `host:port` (no scheme, no path)",
                ));
            }
        }
        if let Some(l) = &r.listen {
            let a: SocketAddr = l.parse().map_err(|_| {
                Issue::new(
                    format!("{f}.listen"),
                    l,
                    "must be `IP:PORT`, e.g. 127.0.0.1:9101",
                )
            })?;
            if a.port() == 0 || !listens.insert(a) {
                return Err(Issue::new(
                    format!("{f}.listen"),
                    l,
                    "needs a fixed port of its own (the gateway is pointed at it)",
                ));
            }
        }
        if let Some(p) = &r.process {
            if p.pid.is_some() == p.pid_file.is_some() {
                return Err(Issue::missing(
                    format!("{f}.process"),
                    "needs exactly one of `pid` or `pid_file`",
                ));
            }
            if p.pid.is_some_and(|p| p <= 1) {
                return Err(Issue::new(
                    format!("{f}.process.pid"),
                    p.pid.unwrap_or(0),
                    "is not a process haq may signal",
                ));
            }
            if !p.ready_path.starts_with('/') {
                return Err(Issue::new(
                    format!("{f}.process.ready_path"),
                    &p.ready_path,
                    "must start with `/`",
                ));
            }
        }
    }
    Ok(decls)
}

fn allowed(backend: FaultBackend) -> &'static [FaultAction] {
    use FaultAction::*;
    match backend {
        FaultBackend::Process => &[Kill, Drain, Freeze],
        FaultBackend::Proxy => &[Reset, Close, Blackhole, Delay, Throttle],
        FaultBackend::Command => &[Command],
    }
}

struct Ctx<'a> {
    s: &'a Scenario,
    phases: &'a [PhasePlan],
    decls: &'a [ReplicaDecl],
}

impl Ctx<'_> {
    fn decl(&self, name: &str) -> Option<&ReplicaDecl> {
        self.decls.iter().find(|d| d.name == name)
    }
    fn sim(&self) -> bool {
        self.s.target.kind == TargetKind::Sim
    }
    fn has_proxy(&self, d: &ReplicaDecl) -> bool {
        self.sim() || d.listen.is_some()
    }
    fn names(&self) -> String {
        if self.decls.is_empty() {
            "none: list them under target.replicas".into()
        } else {
            self.decls
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

pub fn validate_faults(
    s: &Scenario,
    phases: &[PhasePlan],
    decls: &[ReplicaDecl],
) -> Result<Vec<FaultPlan>, Issue> {
    let cx = Ctx { s, phases, decls };
    let mut out: Vec<FaultPlan> = Vec::new();
    for (i, f) in s.faults.iter().enumerate() {
        out.push(one(&cx, &format!("faults[{i}]"), f)?);
    }
    // A replica removed for good cannot be faulted again later.
    let mut gone: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| out[i].at);
    for i in order {
        let p = &out[i];
        for r in &p.replicas {
            if gone.get(r.as_str()).is_some_and(|t| *t <= p.at) {
                return Err(Issue::new(
                    format!("faults[{i}].target.replica"),
                    r,
                    "is already killed by an earlier fault (add `restart` to it to fault its replacement)",
                ));
            }
        }
        if p.removes() && p.restart.is_none() {
            for r in &p.replicas {
                gone.insert(r, p.at);
            }
        }
    }
    for (i, p) in out.iter().enumerate() {
        if out[..i].iter().any(|o| o.name == p.name) {
            return Err(Issue::new(
                format!("faults[{i}].name"),
                &p.name,
                "is used by two faults (names identify faults in the trace)",
            ));
        }
    }
    Ok(out)
}

fn one(cx: &Ctx, field: &str, f: &Fault) -> Result<FaultPlan, Issue> {
    let action = match (f.action, f.backend) {
        (Some(a), _) => a,
        (None, FaultBackend::Process) => FaultAction::Kill,
        (None, FaultBackend::Command) => FaultAction::Command,
        (None, FaultBackend::Proxy) => {
            return Err(Issue::missing(
                format!("{field}.action"),
                "is required with the proxy backend (reset, close, blackhole, delay or throttle)",
            ));
        }
    };
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

    let trigger = trigger(field, f)?;
    let (replicas, node) = targets(cx, field, f, &trigger)?;
    for r in &replicas {
        reachable(cx, field, f.backend, r)?;
    }
    if let Trigger::Probe {
        via: Via::Hook,
        point,
        ..
    } = trigger
    {
        if !cx.sim() {
            return Err(Issue::new(
                format!("{field}.when.via"),
                "hook",
                "worker hooks exist in the sim's workers only; use `via: proxy` for other engines",
            ));
        }
        if !matches!(
            point,
            ProbePoint::Prefill | ProbePoint::ComputedNotSent(_) | ProbePoint::ToolCall
        ) {
            return Err(Issue::new(
                format!("{field}.when.via"),
                "hook",
                format!(
                    "the worker has no hook at {} (hooks: prefill, computed_not_sent, tool_call)",
                    point.describe()
                ),
            ));
        }
        if action != FaultAction::Kill || f.backend != FaultBackend::Process {
            return Err(Issue::new(
                format!("{field}.action"),
                action.as_str(),
                "a worker hook crashes the worker: the fault is `action: kill` (process backend)",
            ));
        }
    }
    if matches!(trigger, Trigger::Probe { .. }) {
        // The proxy tells which replica serves the probe and holds it at its point.
        if let Some(d) = cx.decls.iter().find(|d| !cx.has_proxy(d)) {
            return Err(Issue::missing(
                format!("{field}.when.probe"),
                format!(
                    "needs haq's proxy in front of every replica; replica `{}` has no `listen`",
                    d.name
                ),
            ));
        }
        if replicas.is_empty() && f.domain == FailureDomain::Node {
            return Err(Issue::missing(
                format!("{field}.target.node"),
                "is required for domain `node`",
            ));
        }
    }
    if let Trigger::InFlight { .. } = trigger {
        if replicas.len() != 1 {
            return Err(Issue::missing(
                format!("{field}.target.replica"),
                "`when.in_flight` counts the requests of one target replica: name it",
            ));
        }
        let d = cx.decl(&replicas[0]);
        if !d.is_some_and(|d| cx.has_proxy(d)) {
            return Err(Issue::missing(
                format!("{field}.when.in_flight"),
                format!(
                    "is counted by haq's proxy; replica `{}` has no `listen`",
                    replicas[0]
                ),
            ));
        }
    }

    params(field, f, action)?;
    if let Some(r) = &f.restart {
        if !matches!(action, FaultAction::Kill | FaultAction::Drain) {
            return Err(Issue::missing(
                format!("{field}.restart"),
                "only follows a kill or a drain (the replica must be gone to be replaced)",
            ));
        }
        if !cx.sim() {
            for name in &replicas {
                let declared = cx
                    .decl(name)
                    .and_then(|d| d.process.as_ref())
                    .and_then(|p| p.restart.as_ref());
                if r.command.is_none() && declared.is_none() {
                    return Err(Issue::missing(
                        format!("{field}.restart.command"),
                        format!(
                            "is required: replica `{name}` declares no `process.restart` command"
                        ),
                    ));
                }
            }
            if replicas.is_empty() && r.command.is_none() {
                return Err(Issue::missing(
                    format!("{field}.restart.command"),
                    "is required when the target is the probe's replica",
                ));
            }
        }
    }

    let name = f.name.clone().unwrap_or_else(|| {
        let what = node
            .clone()
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
        restart: f.restart.clone(),
        command: f.command.clone(),
        verify: f.verify,
    })
}

fn domain_fits(
    field: &str,
    domain: FailureDomain,
    backend: FaultBackend,
    action: FaultAction,
) -> Result<(), Issue> {
    use FailureDomain as D;
    let why = match (domain, backend, action) {
        (_, FaultBackend::Command, _) => None,
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

fn trigger(field: &str, f: &Fault) -> Result<Trigger, Issue> {
    let Some(w) = &f.when else {
        return Ok(Trigger::Time);
    };
    let within = w.within.0;
    if within.is_zero() {
        return Err(Issue::new(
            format!("{field}.when.within"),
            w.within,
            "must be greater than 0",
        ));
    }
    match (w.probe, w.in_flight) {
        (Some(_), Some(_)) | (None, None) => Err(Issue::missing(
            format!("{field}.when"),
            "needs exactly one of `probe` or `in_flight`",
        )),
        (Some(point), None) => {
            if let ProbePoint::ComputedNotSent(0) | ProbePoint::AfterDeltas(0) = point {
                return Err(Issue::new(
                    format!("{field}.when.probe"),
                    point.describe(),
                    "k counts from 1",
                ));
            }
            let k = match point {
                ProbePoint::ComputedNotSent(k) | ProbePoint::AfterDeltas(k) => k,
                _ => 1,
            };
            if w.max_tokens < k || w.prompt_tokens == 0 {
                return Err(Issue::new(
                    format!("{field}.when.max_tokens"),
                    w.max_tokens,
                    format!(
                        "the probe must ask for at least {k} tokens (and a prompt of at least 1)"
                    ),
                ));
            }
            Ok(Trigger::Probe {
                point,
                within,
                prompt_tokens: w.prompt_tokens,
                max_tokens: w.max_tokens,
                via: w.via,
            })
        }
        (None, Some(n)) => {
            if n == 0 {
                return Err(Issue::new(
                    format!("{field}.when.in_flight"),
                    0,
                    "must be at least 1",
                ));
            }
            Ok(Trigger::InFlight { n, within })
        }
    }
}

fn targets(
    cx: &Ctx,
    field: &str,
    f: &Fault,
    trigger: &Trigger,
) -> Result<(Vec<String>, Option<String>), Issue> {
    let Some(t) = &f.target else {
        if matches!(trigger, Trigger::Probe { .. }) {
            return Ok((Vec::new(), None));
        }
        return Err(Issue::missing(
            format!("{field}.target"),
            "is required (a `replica` or a `node`), unless a probe trigger picks the replica serving the probe",
        ));
    };
    match (&t.replica, &t.node) {
        (Some(r), None) => {
            if cx.decl(r).is_none() {
                return Err(Issue::new(
                    format!("{field}.target.replica"),
                    r,
                    format!("no such replica (the target has {})", cx.names()),
                ));
            }
            if f.domain == FailureDomain::Node {
                return Err(Issue::missing(
                    format!("{field}.target.node"),
                    "is required for domain `node` (a node fault removes every replica of the node)",
                ));
            }
            Ok((vec![r.clone()], None))
        }
        (None, Some(n)) => {
            let on: Vec<String> = cx
                .decls
                .iter()
                .filter(|d| d.node.as_deref() == Some(n.as_str()))
                .map(|d| d.name.clone())
                .collect();
            if on.is_empty() {
                return Err(Issue::new(
                    format!("{field}.target.node"),
                    n,
                    "no replica is declared on this node (give replicas a `node`)",
                ));
            }
            if f.domain != FailureDomain::Node && f.domain != FailureDomain::Network {
                return Err(Issue::new(
                    format!("{field}.domain"),
                    format!("{:?}", f.domain).to_lowercase(),
                    "a fault on a whole node is `domain: node` (or `network` for its paths)",
                ));
            }
            Ok((on, Some(n.clone())))
        }
        _ => Err(Issue::missing(
            format!("{field}.target"),
            "needs exactly one of `replica` or `node`",
        )),
    }
}

fn reachable(cx: &Ctx, field: &str, backend: FaultBackend, r: &str) -> Result<(), Issue> {
    let Some(d) = cx.decl(r) else {
        return Ok(());
    };
    match backend {
        FaultBackend::Process if !cx.sim() && d.process.is_none() => Err(Issue::missing(
            format!("{field}.backend"),
            format!(
                "the process backend needs replica `{r}` to declare `process: {{pid | pid_file}}`"
            ),
        )),
        FaultBackend::Proxy if !cx.has_proxy(d) => Err(Issue::missing(
            format!("{field}.backend"),
            format!(
                "the proxy backend needs replica `{r}` to declare `listen` (haq's proxy in front of it)"
            ),
        )),
        _ => Ok(()),
    }
}

fn params(field: &str, f: &Fault, action: FaultAction) -> Result<(), Issue> {
    let pos = |name: &str, d: Option<crate::wire::units::Dur>| -> Result<(), Issue> {
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
    match (f.backend, &f.command) {
        (FaultBackend::Command, None) => Err(Issue::missing(
            format!("{field}.command"),
            "is required with the command backend (`inject`, and `verify` / `heal` if you can)",
        )),
        (FaultBackend::Command, Some(c)) => {
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
        (_, Some(_)) => Err(Issue::missing(
            format!("{field}.command"),
            "is only for `backend: command`",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
