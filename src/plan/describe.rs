//! The plan in words, for `haq run --dry-run`: the target, the phases with their rates
//! and expected requests, each fault with its targets, trigger and what its backend
//! will do, the verdicts the plan exercises. Pure: nothing is started or read. A
//! target that does more than the sim or a URL adds its own lines where the command
//! line prints this (`cli::dry_run`).

use super::{FaultPlan, Plan, Trigger};
use crate::scenario::words::{and_list, plural};
use crate::scenario::{ArrivalProcess, FailureDomain, FaultAction, FaultBackend, TargetKind};
use crate::wire::units::format_duration;

/// A titled block of lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub title: String,
    pub lines: Vec<String>,
}

/// The plan's blocks, in reading order.
pub fn describe(plan: &Plan) -> Vec<Block> {
    vec![
        Block {
            title: "target".into(),
            lines: target(plan),
        },
        Block {
            title: format!("load: {}", plural(plan.phases.len() as u64, "phase")),
            lines: phases(plan),
        },
        Block {
            title: format!("faults: {}", plural(plan.faults.len() as u64, "fault")),
            lines: plan.faults.iter().flat_map(|f| fault(plan, f)).collect(),
        },
        Block {
            title: "verdicts".into(),
            lines: verdicts(plan),
        },
    ]
}

/// The blocks as text.
pub fn render(blocks: &[Block]) -> String {
    let mut out = String::new();
    for b in blocks {
        out.push_str(&b.title);
        out.push('\n');
        if b.lines.is_empty() {
            out.push_str("  (none)\n");
        }
        for l in &b.lines {
            out.push_str("  ");
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn target(plan: &Plan) -> Vec<String> {
    let t = &plan.scenario.target;
    let mut out = match t.kind {
        TargetKind::Sim => vec![
            format!(
                "embedded sim: starts {} ({}) behind the sim gateway (policy {}) and a tool service, on 127.0.0.1",
                plural(plan.replicas.len() as u64, "worker process"),
                and_list(&plan.replicas),
                t.gateway.policy.name()
            ),
            "haq's proxy sits between the gateway and each worker".into(),
        ],
        TargetKind::Url => {
            let mut v = vec![format!(
                "url {}: waits up to {} for GET …/models to answer",
                t.url.as_deref().unwrap_or("?"),
                t.ready_timeout
            )];
            for d in &plan.replica_decls {
                let mut parts = vec![format!("replica {}", d.name)];
                if let Some(u) = &d.upstream {
                    parts.push(format!("serves on {u}"));
                }
                match &d.listen {
                    Some(l) => parts.push(format!("haq's proxy listens on {l}")),
                    None => parts.push("no proxy (no `listen`)".into()),
                }
                if let Some(n) = &d.node {
                    parts.push(format!("node {n}"));
                }
                if let Some(p) = &d.process {
                    parts.push(match (p.pid, &p.pid_file) {
                        (Some(pid), _) => format!("process pid {pid}"),
                        (None, Some(f)) => format!("process from pid file {f}"),
                        _ => "process".into(),
                    });
                }
                v.push(parts.join(" · "));
            }
            v
        }
        TargetKind::Kubernetes => match &t.kubernetes {
            Some(k) => {
                let mut v = kube_lines(k);
                if let Some(m) = &k.metrics {
                    let port = m.port.map_or_else(|| "PORT".to_string(), |p| p.to_string());
                    v.push(format!(
                        "each pod's metrics read at http://POD_IP:{port}{} while faults are due",
                        m.path
                    ));
                }
                if !k.proxies.is_empty() {
                    let each: Vec<String> = k
                        .proxies
                        .iter()
                        .map(|(r, a)| format!("{r} on {a}"))
                        .collect();
                    v.push(format!(
                        "haq's proxy in front of each replica's pod (the gateway points at it): {}",
                        each.join(", ")
                    ));
                }
                v
            }
            None => vec!["kubernetes: no `target.kubernetes` section".into()],
        },
    };
    out.push(format!(
        "model {} · seed {} · protected load {}",
        t.model, plan.seed, plan.scenario.protected_load
    ));
    out
}

fn kube_lines(k: &crate::scenario::KubeTarget) -> Vec<String> {
    vec![
        format!(
            "kubernetes: namespace {}, serving pods `{}` discovered as replicas (node: their failure domain), gateway {}",
            k.namespace,
            k.selector,
            k.gateway_url()
        ),
        match &k.serving_service {
            Some(s) => format!("traffic removal read from Service {s}'s EndpointSlices"),
            None => "no serving Service: traffic removal is not read from EndpointSlices".into(),
        },
    ]
}

fn phases(plan: &Plan) -> Vec<String> {
    let process = match plan.scenario.workload.arrival.process {
        ArrivalProcess::Poisson => "Poisson",
        ArrivalProcess::Constant => "evenly spaced",
        ArrivalProcess::Gamma => "gamma",
        ArrivalProcess::Trace => "replayed",
    };
    let mut out: Vec<String> = plan
        .phases
        .iter()
        .map(|p| {
            format!(
                "+{:<7} {} ({}) for {}: {:.2}/s, about {} ({process} arrivals)",
                format_duration(p.start),
                p.name,
                p.kind,
                format_duration(p.duration),
                p.rate,
                plural(
                    (p.rate * p.duration.as_secs_f64()).round() as u64,
                    "request"
                ),
            )
        })
        .collect();
    out.push(format!(
        "load ends at +{}; in-flight requests then get up to {}",
        format_duration(plan.total),
        plan.scenario.client.drain_timeout
    ));
    out.extend(search(plan));
    out
}

/// The capacity search that runs after the phases, in words.
fn search(plan: &Plan) -> Option<String> {
    let p = super::capacity::Params::of(plan)?;
    let b = &p.bisect;
    let topologies: Vec<&str> = p.topologies.iter().map(|t| t.as_str()).collect();
    let overload = match p.overload.is_empty() {
        true => "no overload step".to_string(),
        false => {
            let m: Vec<String> = p.overload.iter().map(|m| format!("{m}×")).collect();
            format!("overload steps at {} C_degraded", m.join(", "))
        }
    };
    Some(format!(
        "then the capacity search (criteria.capacity.search), each step a run of its own in capacity/: {} {}, from {:.2}/s ×{} until the SLO breaks, then bisected to ±{:.0}% in at most {} per topology, each {} after a {} warm-up; {}",
        topologies.join(" and "),
        if topologies.len() == 1 {
            "topology"
        } else {
            "topologies"
        },
        b.start,
        b.factor,
        b.precision * 100.0,
        plural(b.max_steps as u64, "step"),
        format_duration(p.step),
        format_duration(p.warmup),
        overload
    ))
}

/// When a fault fires, in words.
fn when(plan: &Plan, f: &FaultPlan) -> String {
    let start = plan
        .phases
        .iter()
        .find(|p| p.name == f.phase)
        .map_or(f.at, |p| p.start);
    let at = format!(
        "+{} ({} +{})",
        format_duration(f.at),
        f.phase,
        format_duration(f.at.saturating_sub(start))
    );
    match f.trigger {
        Trigger::Time => format!("fires at {at}"),
        Trigger::Probe {
            point,
            within,
            prompt_tokens,
            max_tokens,
            via,
        } => format!(
            "sends a probe request ({prompt_tokens} prompt tokens, {max_tokens} out) at {at} and fires when it reaches {} ({}; waits up to {})",
            point.describe(),
            match via {
                crate::scenario::Via::Proxy => "haq's proxy holds it there",
                crate::scenario::Via::Hook => "the sim worker's own hook",
            },
            format_duration(within)
        ),
        Trigger::InFlight { n, within } => format!(
            "from {at}, fires once {} are in flight on the target (counted by haq's proxy; waits up to {})",
            plural(u64::from(n), "request"),
            format_duration(within)
        ),
    }
}

/// The fault's lines: what, where, when, what its backend does, how it ends.
fn fault(plan: &Plan, f: &FaultPlan) -> Vec<String> {
    let targets = if f.replicas.is_empty() {
        "the replica serving the probe".to_string()
    } else {
        match &f.node {
            Some(n) => format!("node {n} ({})", and_list(&f.replicas)),
            None => and_list(&f.replicas),
        }
    };
    let mut out = vec![
        format!(
            "{}: {} {} on {targets} (domain {})",
            f.name, f.backend, f.action, f.domain
        ),
        format!("  {}", when(plan, f)),
        format!("  does: {}", backend_action(plan, f)),
    ];
    let ends = match (f.healed(), f.duration) {
        (true, Some(d)) => format!("healed after {}", format_duration(d)),
        (true, None) => "healed at the end of the load".into(),
        (false, _) => "not undone".into(),
    };
    out.push(format!("  ends: {ends}"));
    if let Some(r) = &f.restart {
        out.push(format!(
            "  then: a replacement {} after the removal{}{}, ready within {}",
            if r.after.0.is_zero() {
                "right".to_string()
            } else {
                format!("{}", r.after)
            },
            r.cold_start
                .map(|c| format!(", cold start {c}"))
                .unwrap_or_default(),
            r.command
                .as_ref()
                .map(|c| format!(", started with `{c}`"))
                .unwrap_or_default(),
            r.ready_timeout
        ));
    }
    if !f.verify {
        out.push("  not verified (verify: false): Failure-Domain cannot pass on it".into());
    }
    out
}

/// What the fault's backend will do, concretely.
fn backend_action(plan: &Plan, f: &FaultPlan) -> String {
    let sim = plan.scenario.target.kind == TargetKind::Sim;
    match f.backend {
        FaultBackend::Process => {
            let sig = match f.action {
                FaultAction::Drain => "SIGTERM (a planned drain)",
                FaultAction::Freeze => "SIGSTOP (healed with SIGCONT)",
                _ => "SIGKILL",
            };
            let whose: Vec<String> = f
                .replicas
                .iter()
                .map(|r| {
                    let decl = plan.replica_decls.iter().find(|d| &d.name == r);
                    match decl.and_then(|d| d.process.as_ref()) {
                        Some(p) => match (p.pid, &p.pid_file) {
                            (Some(pid), _) => format!("pid {pid} ({r})"),
                            (None, Some(file)) => format!("the pid in {file} ({r})"),
                            _ => r.clone(),
                        },
                        None if sim => format!("sim worker {r}'s process"),
                        None => r.clone(),
                    }
                })
                .collect();
            let whom = if whose.is_empty() {
                "the process of the replica serving the probe".to_string()
            } else {
                and_list(&whose)
            };
            format!("{sig} to {whom}, after checking it is still the same process")
        }
        FaultBackend::Proxy => {
            let what = match f.action {
                FaultAction::Reset => "aborts the replica's connections with RST".to_string(),
                FaultAction::Close => "closes the replica's connections with FIN".to_string(),
                FaultAction::Blackhole => {
                    "forwards nothing either way, sockets kept open".to_string()
                }
                FaultAction::Delay => format!(
                    "adds {} to every byte, both ways",
                    f.delay.map(format_duration).unwrap_or_default()
                ),
                FaultAction::Throttle => format!(
                    "caps the path at {} bytes/s each way",
                    f.bytes_per_s.unwrap_or(0)
                ),
                other => other.to_string(),
            };
            format!("haq's proxy between the gateway and the replica {what}")
        }
        FaultBackend::Command => match &f.command {
            Some(c) => {
                let mut s = format!("runs `{}` (sh -c, HAQ_* in the environment", c.inject);
                s.push_str(&format!(", each command at most {})", c.timeout));
                if let Some(v) = &c.verify {
                    s.push_str(&format!("; verifies with `{v}`"));
                }
                if let Some(h) = &c.heal {
                    s.push_str(&format!("; heals with `{h}`"));
                }
                s
            }
            None => "runs its command".into(),
        },
        FaultBackend::Kubernetes => kube_action(f),
        FaultBackend::Engine => engine_action(f),
    }
}

/// What a `kubernetes` fault asks of the API.
fn kube_action(f: &FaultPlan) -> String {
    if let Some(e) = &f.exec {
        return exec_action(f, e);
    }
    let what = match (f.domain, f.action) {
        (FailureDomain::Node, FaultAction::Drain) => {
            "cordons the replica's node and evicts every selected pod on it (a PodDisruptionBudget's refusal is reported as blocked); uncordons on heal".to_string()
        }
        (FailureDomain::Node, _) => {
            "cordons the replica's node and deletes every selected pod on it (grace 0); uncordons on heal".to_string()
        }
        (FailureDomain::Drain, _) => {
            "evicts the replica's pod through the Eviction API (a PodDisruptionBudget's refusal is reported as blocked)".to_string()
        }
        (FailureDomain::Network, _) => {
            "labels the replica's pod and creates a NetworkPolicy that admits no ingress to it (the pod stays alive); deletes both on heal".to_string()
        }
        (FailureDomain::Worker, FaultAction::Kill) => match f.grace {
            None | Some(crate::scenario::KubeGrace::Seconds(0)) => {
                "deletes the replica's pod (grace 0), verified from the API".to_string()
            }
            Some(crate::scenario::KubeGrace::Seconds(s)) => format!(
                "deletes the replica's pod with grace {s}s (SIGTERM first), verified from the API by the pod terminating"
            ),
            Some(_) => "deletes the replica's pod with its own grace period (SIGTERM first), verified from the API by the pod terminating".to_string(),
        },
        _ => "cannot do this".to_string(),
    };
    format!("the Kubernetes API {what}")
}

/// What a kubernetes exec fault runs in the pod, and how it is verified and healed.
fn exec_action(f: &FaultPlan, e: &crate::scenario::ExecSteps) -> String {
    let container = match &e.container {
        Some(c) => format!("container {c}"),
        None => "the engine's container".into(),
    };
    let verify = match (&e.verify, f.action) {
        (_, _) if !f.verify => "not verified (verify: false)".to_string(),
        (Some(v), _) => format!("verified by `{}` exiting 0 there", v.join(" ")),
        (None, FaultAction::GpuLost) => {
            "verified by the pod's readiness path answering an error, its container not restarted"
                .to_string()
        }
        (None, _) => "verified by the container's restart count".to_string(),
    };
    let heal = match &e.heal {
        Some(h) => format!("; heals with `{}` (in the heal ledger)", h.join(" ")),
        None => String::new(),
    };
    format!(
        "the Kubernetes API execs `{}` in the replica's pod, {container} (each command at most {}), {verify}{heal}",
        e.inject.join(" "),
        e.timeout
    )
}

/// What an `engine` fault does to the sim worker's engine.
fn engine_action(f: &FaultPlan) -> String {
    let what = match f.action {
        FaultAction::GpuLost => {
            "loses its GPU: the engine dies, the process stays up (requests answer 500, /health fails)"
        }
        FaultAction::GpuHang => "hangs: every stream stalls, sockets still accepted",
        FaultAction::Slow => "slows its decode steps (slow is not dead)",
        _ => "fails as the action says",
    };
    format!("the sim worker's engine {what}; healed at the end of the fault")
}

fn verdicts(plan: &Plan) -> Vec<String> {
    let mut out: Vec<String> = crate::scenario::VerdictName::ALL
        .iter()
        .map(|&v| match super::implied::why(plan, v) {
            Some(why) => format!("{v}: judged from {why}"),
            None => format!("{v}: NOT_EVALUATED (nothing in the scenario exercises it)"),
        })
        .collect();
    let req = &plan.scenario.criteria.require;
    if !req.is_empty() {
        let names: Vec<String> = req.iter().map(ToString::to_string).collect();
        out.push(format!(
            "required (criteria.require): {} — one not judged fails the run",
            and_list(&names)
        ));
    }
    out
}
