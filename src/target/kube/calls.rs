//! Every Kubernetes API call haq makes, built once as an HTTP request (kube-core's
//! request builders): the run sends it, `haq run --dry-run` prints it instead
//! ([`Call::describe`]) — one source for both, so the dry run lists exactly the
//! calls a run would make. Tests assert these requests exactly against the mock API
//! server.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::WatchParams;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Request;

/// The label every object haq creates carries: the run's token.
pub const RUN_LABEL: &str = "haq.dev/run";
/// The label haq puts on a pod it isolates (a NetworkPolicy selects it).
pub const ISOLATE_LABEL: &str = "haq.dev/isolate";
/// The field manager of haq's patches.
const MANAGER: &str = "haq";
/// How long one watch request (EndpointSlices, pods) lasts before it is renewed.
pub const WATCH_SECS: u32 = 290;

/// One API call: what it is for and the request itself.
pub struct Call {
    pub what: String,
    pub req: http::Request<Vec<u8>>,
}

impl Call {
    pub fn new(
        what: impl Into<String>,
        req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Call {
        let what = what.into();
        let req = req.unwrap_or_else(|e| {
            // The builders take names validated before; a request that cannot be built
            // is sent as a GET of nothing, which the API server refuses.
            let mut r = http::Request::new(Vec::new());
            *r.uri_mut() = http::Uri::from_static("/haq-request-not-built");
            r.headers_mut().insert(
                "x-haq-error",
                http::HeaderValue::from_str(&e.to_string().replace(['\r', '\n'], " "))
                    .unwrap_or(http::HeaderValue::from_static("unbuildable")),
            );
            r
        });
        Call { what, req }
    }

    /// `METHOD path?query  body` — the dry run's line (bodies shortened).
    pub fn describe(&self) -> String {
        let body = String::from_utf8_lossy(self.req.body());
        let body = if body.chars().count() > 240 {
            format!("{}…", body.chars().take(240).collect::<String>())
        } else {
            body.into_owned()
        };
        let line = format!("{} {}", self.req.method(), self.req.uri());
        if body.is_empty() {
            format!("{line}  ({})", self.what)
        } else {
            format!("{line}  {body}  ({})", self.what)
        }
    }
}

fn pods(ns: &str) -> Request {
    Request::new(<Pod as kube::Resource>::url_path(&(), Some(ns)))
}

fn nodes() -> Request {
    Request::new(<Node as kube::Resource>::url_path(&(), None))
}

fn policies(ns: &str) -> Request {
    Request::new(<NetworkPolicy as kube::Resource>::url_path(&(), Some(ns)))
}

/// A workload with a scale subresource: `deployments` or `statefulsets` (apps/v1).
fn workloads(ns: &str, plural: &str) -> Request {
    Request::new(format!("/apis/apps/v1/namespaces/{ns}/{plural}"))
}

/// The ReplicaSet that owns a Deployment's pod (its owner is the Deployment).
pub fn get_replicaset(ns: &str, name: &str) -> Call {
    Call::new(
        format!("read ReplicaSet {name}"),
        workloads(ns, "replicasets").get(name, &Default::default()),
    )
}

/// `plural` is `deployments` or `statefulsets`.
pub fn get_scale(ns: &str, plural: &str, name: &str) -> Call {
    Call::new(
        format!("read the scale of {plural}/{name}"),
        workloads(ns, plural).get_subresource("scale", name),
    )
}

/// Sets a workload's replicas: a merge patch of its scale subresource.
pub fn set_scale(ns: &str, plural: &str, name: &str, replicas: i32) -> Call {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    Call::new(
        format!("scale {plural}/{name} to {replicas}"),
        workloads(ns, plural).patch_subresource("scale", name, &pp, &Patch::Merge(&patch)),
    )
}

/// The annotation that makes a ReplicaSet scaled down remove this pod first.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Marks a pod to be the first a scale-down of its ReplicaSet removes.
pub fn mark_first_to_go(ns: &str, pod: &str) -> Call {
    let patch =
        serde_json::json!({"metadata": {"annotations": {DELETION_COST: i32::MIN.to_string()}}});
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    Call::new(
        format!("annotate pod {pod} {DELETION_COST}={}", i32::MIN),
        pods(ns).patch(pod, &pp, &Patch::Merge(&patch)),
    )
}

fn slices(ns: &str) -> Request {
    Request::new(<EndpointSlice as kube::Resource>::url_path(&(), Some(ns)))
}

/// The serving pods: `GET …/pods?labelSelector=…`.
pub fn list_pods(ns: &str, selector: &str) -> Call {
    let lp = ListParams::default().labels(selector);
    Call::new(format!("list the pods of `{selector}`"), pods(ns).list(&lp))
}

/// Watches the serving pods from `version`.
pub fn watch_pods(ns: &str, selector: &str, version: &str) -> Call {
    let wp = WatchParams::default().labels(selector).timeout(WATCH_SECS);
    Call::new(
        format!("watch the pods of `{selector}`"),
        pods(ns).watch(&wp, version),
    )
}

pub fn get_pod(ns: &str, pod: &str) -> Call {
    Call::new(
        format!("read pod {pod}"),
        pods(ns).get(pod, &Default::default()),
    )
}

/// Deletes a pod with `grace` seconds (0: at once, SIGKILL to its containers; `None`:
/// the pod's own grace period).
pub fn delete_pod(ns: &str, pod: &str, grace: Option<u32>) -> Call {
    let dp = DeleteParams {
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    let what = match grace {
        Some(g) => format!("delete pod {pod} (grace {g}s)"),
        None => format!("delete pod {pod} (its own grace period)"),
    };
    Call::new(what, pods(ns).delete(pod, &dp))
}

/// The Eviction API: a planned removal a PodDisruptionBudget may refuse (429).
pub fn evict_pod(ns: &str, pod: &str) -> Call {
    Call::new(
        format!("evict pod {pod}"),
        pods(ns).evict(pod, &EvictParams::default()),
    )
}

pub fn get_node(node: &str) -> Call {
    Call::new(
        format!("read node {node}"),
        nodes().get(node, &Default::default()),
    )
}

/// Cordons (`true`) or uncordons a node: a merge patch of `spec.unschedulable`.
pub fn cordon(node: &str, on: bool) -> Call {
    let patch = serde_json::json!({"spec": {"unschedulable": on}});
    Call::new(
        format!("{} node {node}", if on { "cordon" } else { "uncordon" }),
        nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
    )
}

/// Sets (`Some`) or removes a label of a pod: a merge patch.
pub fn label_pod(ns: &str, pod: &str, key: &str, value: Option<&str>) -> Call {
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    let what = match value {
        Some(v) => format!("label pod {pod} {key}={v}"),
        None => format!("remove label {key} of pod {pod}"),
    };
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    Call::new(what, pods(ns).patch(pod, &pp, &Patch::Merge(&patch)))
}

/// A NetworkPolicy that admits no ingress to the pods labelled `isolate`: the path
/// from the gateway is cut, the pod stays alive.
pub fn isolating_policy(name: &str, token: &str, fault: &str, isolate: &str) -> NetworkPolicy {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "labels": {RUN_LABEL: token, "haq.dev/fault": fault},
        },
        "spec": {
            "podSelector": {"matchLabels": {ISOLATE_LABEL: isolate}},
            "policyTypes": ["Ingress"],
            "ingress": [],
        },
    }))
    .unwrap_or_default()
}

pub fn create_policy(ns: &str, policy: &NetworkPolicy) -> Call {
    let name = policy.metadata.name.clone().unwrap_or_default();
    let body = serde_json::to_vec(policy).unwrap_or_default();
    Call::new(
        format!("create NetworkPolicy {name}"),
        policies(ns).create(&PostParams::default(), body),
    )
}

/// The NetworkPolicies run `token` created (`haq heal`'s sweep).
pub fn list_run_policies(ns: &str, token: &str) -> Call {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={token}"));
    Call::new(
        format!("list the NetworkPolicies labelled {RUN_LABEL}={token}"),
        policies(ns).list(&lp),
    )
}

/// The pods carrying haq's isolation label, any run's (`haq heal`'s sweep).
pub fn list_isolated_pods(ns: &str) -> Call {
    let lp = ListParams::default().labels(ISOLATE_LABEL);
    Call::new(
        format!("list the pods labelled {ISOLATE_LABEL}"),
        pods(ns).list(&lp),
    )
}

pub fn get_policy(ns: &str, name: &str) -> Call {
    Call::new(
        format!("read NetworkPolicy {name}"),
        policies(ns).get(name, &Default::default()),
    )
}

pub fn delete_policy(ns: &str, name: &str) -> Call {
    Call::new(
        format!("delete NetworkPolicy {name}"),
        policies(ns).delete(name, &DeleteParams::default()),
    )
}

/// How haq exec's in a container: no stdin, no TTY, its output read.
pub fn attach_params(container: &str) -> kube::api::AttachParams {
    kube::api::AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true)
}

/// Exec `command` in a container (a websocket upgrade of this GET).
pub fn exec(ns: &str, pod: &str, container: &str, command: &[String]) -> Call {
    let ap = attach_params(container);
    Call::new(
        format!("exec `{}` in {pod}/{container}", command.join(" ")),
        pods(ns).exec(pod, command.iter().cloned(), &ap),
    )
}

fn service_selector(service: &str) -> String {
    format!("kubernetes.io/service-name={service}")
}

/// The EndpointSlices of a Service.
pub fn list_slices(ns: &str, service: &str) -> Call {
    let lp = ListParams::default().labels(&service_selector(service));
    Call::new(
        format!("list the EndpointSlices of Service {service}"),
        slices(ns).list(&lp),
    )
}

/// Watches the EndpointSlices of a Service from `version`.
pub fn watch_slices(ns: &str, service: &str, version: &str) -> Call {
    let wp = WatchParams::default()
        .labels(&service_selector(service))
        .timeout(WATCH_SECS);
    Call::new(
        format!("watch the EndpointSlices of Service {service}"),
        slices(ns).watch(&wp, version),
    )
}

/// The NetworkPolicy's name and the pod label's value of network fault `fault` on
/// `replica` in the run of `token`.
pub fn isolation_names(token: &str, fault: &str, replica: &str) -> (String, String) {
    let policy = dns_name(&format!("haq-{token}-{fault}-{replica}"));
    let label = dns_name(&format!("{token}-{replica}"));
    (policy, label)
}

/// A name the API accepts, from haq's own (lower case, `-` for anything else).
pub fn dns_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(63);
    out.trim_matches('-').to_string()
}
