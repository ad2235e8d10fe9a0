//! Undoing what a kubernetes fault left: uncordon a node haq cordoned, delete the
//! NetworkPolicy haq created and take its label off the pod, scale a workload haq
//! scaled down back to its count, run an exec fault's heal command in its pod. The
//! run's heals and
//! `haq heal RUN_DIR` (from the heal ledger, after a killed run) call the same
//! functions; each is verified by what the API answers.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::cluster::api_error;
use super::{calls, exec};

/// Longest a heal outside the run (`haq heal`) may take.
const HEAL_LIMIT: Duration = Duration::from_secs(60);

/// Uncordons `node`, verified by the patched node being schedulable.
pub async fn uncordon(client: &kube::Client, node: &str) -> Result<String, String> {
    let n: Node = client
        .request(calls::cordon(node, false).req)
        .await
        .map_err(|e| format!("uncordoning node {node}: {}", api_error(&e).1))?;
    match n.spec.and_then(|s| s.unschedulable) {
        Some(true) => Err(format!(
            "node {node} is still unschedulable after the uncordon"
        )),
        _ => Ok(format!("node {node} uncordoned (schedulable again)")),
    }
}

/// Deletes NetworkPolicy `policy` and removes `label` from `pod`, verified by the
/// policy being gone; a pod gone meanwhile needs no label removed.
pub async fn unisolate(
    client: &kube::Client,
    ns: &str,
    policy: &str,
    pod: &str,
    label: &str,
) -> Result<String, String> {
    match client
        .request::<serde_json::Value>(calls::delete_policy(ns, policy).req)
        .await
    {
        Ok(_) => {}
        Err(e) if api_error(&e).0 == 404 => {}
        Err(e) => {
            return Err(format!(
                "deleting NetworkPolicy {policy}: {}",
                api_error(&e).1
            ));
        }
    }
    let pod_said = match client
        .request::<Pod>(calls::label_pod(ns, pod, label, None).req)
        .await
    {
        Ok(_) => format!("label {label} removed from pod {pod}"),
        Err(e) if api_error(&e).0 == 404 => format!("pod {pod} is gone"),
        Err(e) => {
            return Err(format!(
                "removing label {label} of pod {pod}: {}",
                api_error(&e).1
            ));
        }
    };
    match client
        .request::<NetworkPolicy>(calls::get_policy(ns, policy).req)
        .await
    {
        Err(e) if api_error(&e).0 == 404 => {
            Ok(format!("NetworkPolicy {policy} deleted; {pod_said}"))
        }
        Ok(_) => Err(format!(
            "NetworkPolicy {policy} is still there after its delete"
        )),
        Err(e) => Err(format!(
            "reading NetworkPolicy {policy}: {}",
            api_error(&e).1
        )),
    }
}

/// Scales workload `plural/name` to `n`, verified by its scale read back.
pub async fn rescale(
    client: &kube::Client,
    ns: &str,
    plural: &str,
    name: &str,
    n: i32,
) -> Result<String, String> {
    let w = format!("{plural}/{name}");
    client
        .request::<Scale>(calls::set_scale(ns, plural, name, n).req)
        .await
        .map_err(|e| format!("scaling {w} to {n}: {}", api_error(&e).1))?;
    let s: Scale = client
        .request(calls::get_scale(ns, plural, name).req)
        .await
        .map_err(|e| format!("reading the scale of {w}: {}", api_error(&e).1))?;
    match s.spec.and_then(|s| s.replicas).unwrap_or(0) {
        got if got == n => Ok(format!("{w} scaled to {n} (read back)")),
        got => Err(format!("{w} scaled to {n}, but its scale reads {got}")),
    }
}

/// Where an exec fault ran: the pod it hit (by uid) and the container.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecAt {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
}

/// Exec's an exec fault's `heal` where the fault ran, while the pod is the one it hit
/// (a pod gone or replaced since holds nothing of it), verified by its exit 0 — and,
/// given the fault's `verify`, by that no longer passing.
pub async fn exec_heal(
    client: &kube::Client,
    at: &ExecAt,
    heal: &[String],
    verify: Option<&[String]>,
    timeout: Duration,
) -> Result<String, String> {
    let (ns, pod) = (&at.namespace, &at.pod);
    match client.request::<Pod>(calls::get_pod(ns, pod).req).await {
        Ok(p) if p.metadata.uid.as_deref() == Some(at.uid.as_str()) => {}
        Ok(p) => {
            return Ok(format!(
                "pod {pod} was replaced (uid {}): nothing of the fault is left",
                p.metadata.uid.unwrap_or_default()
            ));
        }
        Err(e) if api_error(&e).0 == 404 => {
            return Ok(format!("pod {pod} is gone: nothing of the fault is left"));
        }
        Err(e) => return Err(format!("reading pod {pod}: {}", api_error(&e).1)),
    }
    let c = &at.container;
    let ran = exec::exec(client, ns, pod, c, heal, timeout).await;
    let d = ran.describe(&exec::what(pod, &at.container, heal));
    if !ran.ok() {
        return Err(d);
    }
    let Some(v) = verify else { return Ok(d) };
    let still = exec::exec(client, ns, pod, c, v, timeout).await;
    let vd = still.describe(&exec::what(pod, &at.container, v));
    if still.ok() {
        Err(format!("{d}; {vd}: the fault is still in effect"))
    } else {
        Ok(format!("{d}; {vd}: the fault is gone"))
    }
}

/// What `haq heal` undoes in a cluster.
pub enum Leftover {
    Cordon {
        node: String,
    },
    Isolation {
        namespace: String,
        policy: String,
        pod: String,
        label: String,
    },
    Scale {
        namespace: String,
        plural: String,
        name: String,
        replicas: i32,
    },
    /// An exec fault's heal command, where the fault ran.
    Exec {
        at: ExecAt,
        heal: Vec<String>,
        timeout: Duration,
    },
}

/// Undoes `what` through `client`: how, or why not.
pub async fn heal_leftover(client: &kube::Client, what: &Leftover) -> Result<String, String> {
    match what {
        Leftover::Cordon { node } => uncordon(client, node).await,
        Leftover::Isolation {
            namespace,
            policy,
            pod,
            label,
        } => unisolate(client, namespace, policy, pod, label).await,
        Leftover::Scale {
            namespace,
            plural,
            name,
            replicas,
        } => rescale(client, namespace, plural, name, *replicas).await,
        Leftover::Exec { at, heal, timeout } => exec_heal(client, at, heal, None, *timeout).await,
    }
}

/// Undoes a leftover in kubeconfig context `context`, from synchronous code (on a
/// thread and runtime of its own, bounded): whether nothing is left, and how.
pub fn heal_blocking(context: &str, what: Leftover) -> (bool, String) {
    let context = context.to_string();
    // An exec's own timeout, and the pod read before it.
    let limit = match &what {
        Leftover::Exec { timeout, .. } => HEAL_LIMIT.max(*timeout + Duration::from_secs(10)),
        _ => HEAL_LIMIT,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(format!("a runtime for the heal: {e}")));
                return;
            }
        };
        let got = rt.block_on(async {
            let client = client_of(&context).await?;
            heal_leftover(&client, &what).await
        });
        let _ = tx.send(got);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(d)) => (true, d),
        Ok(Err(e)) => (false, e),
        Err(_) => (false, format!("the heal did not finish within {limit:?}")),
    }
}

async fn client_of(context: &str) -> Result<kube::Client, String> {
    super::cluster::client_for(context)
        .await
        .map_err(|e| format!("{e:#}"))
}
