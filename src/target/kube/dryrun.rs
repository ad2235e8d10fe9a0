//! `haq run --dry-run` for a kubernetes target: every API call the run would make —
//! method, path and query, body — in order, built by the same functions the run sends
//! ([`super::calls`]), and none made (no client is even built). Pods and nodes are
//! discovered at the start, so the calls name them `POD_OF_w2` / `NODE_OF_w2` (a
//! listed replica names its pod; the replica serving a probe is `PROBED`); a `_`
//! never appears in a real pod or node name. haq's proxies make no call: their
//! addresses are listed first.

use super::calls::ISOLATE_LABEL;
use super::calls::{self, Call};
use crate::plan::{FaultPlan, Plan};
use crate::scenario::{
    FailureDomain as D, FaultAction as A, FaultBackend, KubeGrace, KubeReplacement, KubeTarget,
    Replicas, ResetConnections,
};

/// One call and when the run makes it — or, with no call, what haq does itself then
/// (haq's proxy resetting a replica's connections).
pub struct Step {
    pub when: String,
    pub call: Option<Call>,
    pub note: String,
}

fn step(when: &str, call: Call) -> Step {
    Step {
        when: when.to_string(),
        note: call.describe(),
        call: Some(call),
    }
}

fn note(when: &str, note: String) -> Step {
    Step {
        when: when.to_string(),
        call: None,
        note,
    }
}

/// The pod a replica's calls name in the dry run.
fn pod_name(plan: &Plan, replica: &str) -> String {
    match &plan.scenario.target.replicas {
        Some(Replicas::List(_)) => replica.to_string(),
        _ => format!("POD_OF_{replica}"),
    }
}

/// Every call of the run, in order: the start, then each fault and its heal.
pub fn steps(plan: &Plan, k: &KubeTarget, token: &str) -> Vec<Step> {
    let ns = &k.namespace;
    let mut out = vec![step("start", calls::list_pods(ns, &k.selector))];
    if let Some(s) = &k.serving_service {
        out.push(step("start", calls::list_slices(ns, s)));
        out.push(step("start", calls::watch_slices(ns, s, "LIST_VERSION")));
    }
    if k.pod_watch {
        out.push(step("start", calls::list_pods(ns, &k.selector)));
        out.push(step(
            "start",
            calls::watch_pods(ns, &k.selector, "LIST_VERSION"),
        ));
    }
    let mut faults: Vec<&FaultPlan> = plan.faults.iter().collect();
    faults.sort_by_key(|f| f.at);
    for f in faults {
        let when = format!("+{:.1}s {}", f.at.as_secs_f64(), f.name);
        if f.backend != FaultBackend::Kubernetes {
            continue;
        }
        // A probe's fault with no target hits the replica serving the probe.
        let probed = [String::from("PROBED")];
        let targets = if f.replicas.is_empty() {
            &probed[..]
        } else {
            &f.replicas[..]
        };
        for r in targets {
            let pod = pod_name(plan, r);
            if k.replacement == KubeReplacement::Scale && f.domain == D::Worker {
                scale_steps(plan, f, k, r, &pod, &when, &mut out);
            } else {
                fault_steps(f, k, token, r, &pod, &when, &mut out);
            }
        }
    }
    if k.serving_service.is_some() {
        // Whenever a slice names a new pod while a replica is vacant.
        let when = "watch (a new pod in a slice)";
        out.push(step(when, calls::get_pod(ns, "NEW_POD")));
    }
    out
}

/// A `worker` fault with `replacement: scale`, for a Deployment's pod (a
/// StatefulSet's has no ReplicaSet to read and no annotation): the scale counts are
/// the declared replicas' (the run reads the workload's own).
fn scale_steps(
    plan: &Plan,
    f: &FaultPlan,
    k: &KubeTarget,
    replica: &str,
    pod: &str,
    when: &str,
    out: &mut Vec<Step>,
) {
    let ns = &k.namespace;
    let n = match &plan.scenario.target.replicas {
        Some(Replicas::List(l)) => l.len() as i32,
        Some(Replicas::Count(n)) => *n as i32,
        None => 0,
    };
    let deploy = format!("DEPLOYMENT_OF_{replica}");
    out.push(step(
        when,
        calls::get_replicaset(ns, &format!("REPLICASET_OF_{replica}")),
    ));
    out.push(step(when, calls::get_scale(ns, "deployments", &deploy)));
    out.push(step(when, calls::mark_first_to_go(ns, pod)));
    out.push(step(
        when,
        calls::set_scale(ns, "deployments", &deploy, n - 1),
    ));
    out.push(step(when, calls::get_scale(ns, "deployments", &deploy)));
    out.push(step(when, calls::get_pod(ns, pod)));
    let back = [
        calls::set_scale(ns, "deployments", &deploy, n),
        calls::get_scale(ns, "deployments", &deploy),
    ];
    if let Some(r) = &f.restart {
        let t = format!("{when} restart (after {:.1}s)", r.after.0.as_secs_f64());
        out.extend(back.into_iter().map(|c| step(&t, c)));
    }
    let heal = format!("{when} heal (end of load)");
    out.push(step(&heal, calls::set_scale(ns, "deployments", &deploy, n)));
    out.push(step(&heal, calls::get_scale(ns, "deployments", &deploy)));
}

fn fault_steps(
    f: &FaultPlan,
    k: &KubeTarget,
    token: &str,
    replica: &str,
    pod: &str,
    when: &str,
    out: &mut Vec<Step>,
) {
    let ns = &k.namespace;
    let heal = match f.duration {
        Some(d) => format!("{when} heal (after {:.1}s)", d.as_secs_f64()),
        None => format!("{when} heal (end of load)"),
    };
    let read = || step(when, calls::get_pod(ns, pod));
    match (f.domain, f.action) {
        (D::Worker, A::Kill) => {
            out.push(step(
                when,
                calls::delete_pod(ns, pod, KubeGrace::seconds(f.grace)),
            ));
            out.push(read());
        }
        (D::Drain, A::Drain) => {
            out.push(step(when, calls::evict_pod(ns, pod)));
            out.push(read());
        }
        (D::Node, a) => {
            let node = format!("NODE_OF_{replica}");
            out.push(step(when, calls::get_node(&node)));
            out.push(step(when, calls::cordon(&node, true)));
            let each = format!("{when} (each selected pod on {node})");
            out.push(match a {
                A::Drain => step(&each, calls::evict_pod(ns, "POD_ON_NODE")),
                _ => step(&each, calls::delete_pod(ns, "POD_ON_NODE", Some(0))),
            });
            out.push(step(&each, calls::get_pod(ns, "POD_ON_NODE")));
            out.push(step(&heal, calls::cordon(&node, false)));
        }
        (D::Network, A::Blackhole) => {
            let (policy, label) = calls::isolation_names(token, &f.name, replica);
            let np = calls::isolating_policy(&policy, token, &calls::dns_name(&f.name), &label);
            out.push(step(
                when,
                calls::label_pod(ns, pod, ISOLATE_LABEL, Some(&label)),
            ));
            out.push(step(when, calls::create_policy(ns, &np)));
            out.push(step(when, calls::get_policy(ns, &policy)));
            match &f.reset_connections {
                Some(ResetConnections::Word(_)) => out.push(note(
                    when,
                    format!(
                        "haq's proxy of {replica} resets its established connections (no API call)"
                    ),
                )),
                Some(ResetConnections::Exec { exec, container }) => {
                    let c = container.clone().or_else(|| k.container.clone());
                    let c = c.unwrap_or_else(|| "FIRST_CONTAINER".into());
                    out.push(step(when, calls::exec(ns, pod, &c, exec)));
                }
                None => {}
            }
            out.push(step(&heal, calls::delete_policy(ns, &policy)));
            out.push(step(&heal, calls::label_pod(ns, pod, ISOLATE_LABEL, None)));
            out.push(step(&heal, calls::get_policy(ns, &policy)));
        }
        (_, _) => exec_steps(f, k, replica, pod, (when, &heal), out),
    }
}

/// An exec fault: the pod read, the inject, the verify (an exec, the restart count
/// read from the pod, or `gpu_lost`'s readiness path), and the heal with its verify.
fn exec_steps(
    f: &FaultPlan,
    k: &KubeTarget,
    replica: &str,
    pod: &str,
    (when, heal): (&str, &str),
    out: &mut Vec<Step>,
) {
    let Some(e) = &f.exec else { return };
    let ns = &k.namespace;
    let c = e.container.clone().or_else(|| k.container.clone());
    let c = c.unwrap_or_else(|| "FIRST_CONTAINER".into());
    out.push(step(when, calls::get_pod(ns, pod)));
    out.push(step(when, calls::exec(ns, pod, &c, &e.inject)));
    let verify = e.verify.as_ref().filter(|_| f.verify);
    match (verify, f.action) {
        _ if !f.verify => {}
        (Some(v), _) => out.push(step(when, calls::exec(ns, pod, &c, v))),
        (None, A::GpuLost) => {
            let port = k.port.map_or_else(|| "PORT".to_string(), |p| p.to_string());
            out.push(note(
                when,
                format!(
                    "GET http://IP_OF_{replica}:{port}{} answers an error (haq's HTTP client, no API call)",
                    k.ready_path
                ),
            ));
            out.push(step(when, calls::get_pod(ns, pod)));
        }
        (None, _) => out.push(step(when, calls::get_pod(ns, pod))),
    }
    if let Some(h) = &e.heal {
        out.push(step(heal, calls::get_pod(ns, pod)));
        out.push(step(heal, calls::exec(ns, pod, &c, h)));
        if let Some(v) = verify {
            out.push(step(heal, calls::exec(ns, pod, &c, v)));
        }
    }
}

/// The dry run as people read it.
pub fn render(plan: &Plan, context: &str) -> String {
    let Some(k) = plan.scenario.target.kubernetes.as_ref() else {
        return String::new();
    };
    let token = "RUNTOKEN";
    let mut s = format!(
        "dry run of {}: context {context}, namespace {}, pods `{}`, gateway {} — no call is made\n",
        plan.scenario.name,
        k.namespace,
        k.selector,
        k.gateway_url()
    );
    let port = k.port.map_or_else(|| "PORT".to_string(), |p| p.to_string());
    for (replica, addr) in &k.proxies {
        s.push_str(&format!(
            "{:<28} haq's proxy listens on {addr} → IP_OF_{replica}:{port} (the pod's address, followed to its replacement; no API call)\n",
            format!("proxy {replica}")
        ));
    }
    for st in steps(plan, k, token) {
        s.push_str(&format!("{:<28} {}\n", st.when, st.note));
    }
    for f in plan
        .faults
        .iter()
        .filter(|f| f.backend != FaultBackend::Kubernetes)
    {
        s.push_str(&format!(
            "+{:.1}s {}: the {} backend (no API call by haq)\n",
            f.at.as_secs_f64(),
            f.name,
            f.backend
        ));
    }
    s.push_str("GET pod calls repeat until the fault is verified; a node fault hits each selected pod on the node.\n");
    s
}
