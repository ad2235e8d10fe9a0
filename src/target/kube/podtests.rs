//! The pod watch against the mock API server (exact requests): the replacement's
//! stages of a replica whose pod was deleted, attributed by the pod's controller.

use serde_json::{Value, json};

use super::mock::{self, list, pod};
use super::tests::{PODS, plan, watched};
use super::*;

/// A pod of controller `owner` (uid), changed by `f`.
fn owned(
    name: &str,
    uid: &str,
    node: &str,
    ip: &str,
    owner: &str,
    f: impl FnOnce(&mut Value),
) -> Value {
    let mut p = pod(name, uid, node, ip, true);
    p["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("llama-{owner}"),
        "uid": owner, "controller": true
    }]);
    p["status"]["containerStatuses"][0]["state"] =
        json!({"running": {"startedAt": "2026-12-02T03:00:00Z"}});
    f(&mut p);
    p
}

/// A new pod: created, not scheduled, no IP, no container status.
fn pending(p: &mut Value) {
    p["metadata"]["creationTimestamp"] = json!("2026-12-02T03:10:00Z");
    p["spec"].as_object_mut().expect("spec").remove("nodeName");
    p["status"] = json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
}

fn scheduled(p: &mut Value) {
    pending(p);
    p["spec"]["nodeName"] = json!("node-b");
    p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-02T03:10:01Z"}]);
}

fn running(p: &mut Value, ready: bool) {
    p["metadata"]["creationTimestamp"] = json!("2026-12-02T03:10:00Z");
    p["status"]["conditions"] = json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-02T03:10:01Z"},
        {"type": "Ready", "status": if ready { "True" } else { "False" },
         "lastTransitionTime": if ready { "2026-12-02T03:10:09Z" } else { "2026-12-02T03:10:01Z" }}
    ]);
    p["status"]["containerStatuses"][0]["state"] =
        json!({"running": {"startedAt": "2026-12-02T03:10:04Z"}});
}

const WATCH: &str = "/api/v1/namespaces/llm/pods?&watch=true&timeoutSeconds=290&labelSelector=app%3Dllama&allowWatchBookmarks=true&resourceVersion=200";

/// The API server's side: discovery, the pod watch's list, then its watch events.
async fn answer_pod_watch(
    mut server: mock::ApiServer,
) -> (
    mock::ApiServer,
    tower_test::mock::SendResponse<http::Response<kube::client::Body>>,
) {
    let a = || owned("llama-a", "u-a", "node-a", "10.0.0.1", "rs-1", |_| {});
    let b = || owned("llama-b", "u-b", "node-a", "10.0.0.2", "rs-1", |_| {});
    let c = || owned("llama-c", "u-c", "node-b", "10.0.0.3", "rs-1", |_| {});
    let all = list("PodList", vec![a(), b(), c()], "100");
    server.expect("GET", PODS, None, 200, all).await;
    let all = list("PodList", vec![a(), b(), c()], "200");
    server.expect("GET", PODS, None, 200, all).await;
    let d = |f: fn(&mut Value)| owned("llama-d", "u-d", "node-b", "10.0.0.4", "rs-1", f);
    let mut gone = b();
    gone["metadata"]["deletionTimestamp"] = json!("2026-12-02T03:10:00Z");
    let restarted = owned("llama-a", "u-a", "node-a", "10.0.0.1", "rs-1", |p| {
        p["status"]["conditions"][0]["status"] = json!("False");
        p["status"]["conditions"][0]["reason"] = json!("ContainersNotReady");
        let cs = &mut p["status"]["containerStatuses"][0];
        cs["restartCount"] = json!(1);
        cs["state"] = json!({"running": {"startedAt": "2026-12-02T03:11:00Z"}});
        cs["lastState"] = json!({"terminated": {"exitCode": 137, "reason": "Error"}});
    });
    let events = [
        json!({"type": "MODIFIED", "object": gone}),
        json!({"type": "ADDED", "object": owned("llama-s", "u-s", "node-a", "10.0.0.9", "rs-2", pending)}),
        json!({"type": "ADDED", "object": d(pending)}),
        json!({"type": "MODIFIED", "object": d(scheduled)}),
        json!({"type": "DELETED", "object": gone}),
        json!({"type": "MODIFIED", "object": d(|p| running(p, false))}),
        json!({"type": "MODIFIED", "object": d(|p| running(p, true))}),
        json!({"type": "MODIFIED", "object": restarted}),
    ];
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    server.stream("GET", WATCH, text).await;
    // The stream ended: the watch goes on from the last event's version.
    let (req, keep) = server.next().await;
    assert!(
        req.starts_with("GET /api/v1/namespaces/llm/pods?&watch=true"),
        "{req}"
    );
    (server, keep)
}

/// w2's pod is deleted; a rollout's surge pod (another ReplicaSet) appears and is no
/// replica's; the ReplicaSet's new pod is w2's replacement through each stage; w1's
/// engine restarts in place.
#[tokio::test]
async fn the_pod_watch_writes_the_replacement_stages_of_the_replica_it_replaces() {
    let p = plan(&["target.kubernetes.serving_service=null"]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, server) = mock::cluster(&k);
    let api = tokio::spawn(answer_pod_watch(server));
    let (s, trace) = watched(&p, cluster, api, "podwatch").await;
    let w2 = s.registry.get("w2").expect("w2");
    let pod = w2.pod().expect("pod");
    assert_eq!(
        (
            pod.pod.name.as_str(),
            pod.pod.ip.as_str(),
            pod.pod.node.as_str()
        ),
        ("llama-d", "10.0.0.4", "node-b")
    );
    assert_eq!(w2.direct_url().as_deref(), Some("http://10.0.0.4:8080"));
    let obs: Vec<(Option<String>, String, String)> = trace
        .observations()
        .into_iter()
        .filter(|o| o.1 != "discovered")
        .collect();
    let got: Vec<(&str, &str)> = obs
        .iter()
        .map(|o| (o.0.as_deref().unwrap_or("-"), o.1.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("w2", "pod_terminating"),
            ("w2", "replacement_requested"),
            ("w2", "pod_scheduled"),
            ("w2", "pod_deleted"),
            ("w2", "image_pulled"),
            ("w2", "process_started"),
            ("w2", "replacement_ready"),
            ("w1", "restarted"),
            ("w1", "not_ready"),
        ],
        "{obs:#?}"
    );
    let detail = |what: &str| &obs.iter().find(|o| o.1 == what).expect(what).2;
    assert_eq!(
        detail("replacement_requested"),
        "pod llama-d (uid u-d) created by ReplicaSet llama-rs-1 at 2026-12-02T03:10:00Z takes the place of pod llama-b"
    );
    assert_eq!(
        detail("pod_scheduled"),
        "pod llama-d scheduled on node node-b at 2026-12-02T03:10:01Z"
    );
    assert_eq!(
        detail("process_started"),
        "container llama of pod llama-d running since 2026-12-02T03:10:04Z"
    );
    assert_eq!(
        detail("replacement_ready"),
        "pod llama-d Ready since 2026-12-02T03:10:09Z"
    );
    assert_eq!(
        detail("restarted"),
        "container llama of pod llama-a restarted (restart count 1, last exit 137 (Error)), running since 2026-12-02T03:11:00Z"
    );
    assert_eq!(
        detail("not_ready"),
        "pod llama-a Ready=False: ContainersNotReady"
    );
}

/// A pod the watch returns outside the selector is not looked at, a new pod with no
/// vacant replica is nobody's, and a replacement that fails to start says why.
#[test]
fn the_pod_observer_guards_the_selector_and_reports_a_failing_replacement() {
    use super::watch::{Applied, Follow};
    let p = plan(&["target.kubernetes.serving_service=null"]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let _g = rt.enter();
    let (cluster, _server) = mock::cluster(&k);
    let info = |r: &str, name: &str| PodInfo {
        replica: r.into(),
        name: name.into(),
        uid: format!("u-{name}"),
        node: "node-a".into(),
        ip: "10.0.0.1".into(),
        container: "llama".into(),
        port: 8080,
        gpus: 0,
        gpu_ids: Vec::new(),
        gpu_ids_from: None,
        restarts: 0,
        owner: None,
    };
    let registry = Arc::new(Registry {
        replicas: vec![replica(&cluster, info("w1", "llama-a"), "/health")],
        respawn: Respawn::Kube,
    });
    let lin = lineage::Lineage::shared(registry.clone());
    let mut o = podwatch::PodObserver::new(lin, None, "llm", cluster.selector.clone());
    let pod_of =
        |v: Value| -> k8s_openapi::api::core::v1::Pod { serde_json::from_value(v).expect("pod") };
    // No vacancy: a new pod is nobody's.
    let extra = pod_of(owned(
        "llama-x", "u-x", "node-a", "10.0.0.8", "rs-1", pending,
    ));
    assert!(o.apply(Applied::Upsert(extra)).is_empty());
    // Outside the selector: not looked at, even the replica's own pod's name.
    let mut other = owned("llama-a", "u-llama-a", "node-a", "10.0.0.1", "rs-1", |_| {});
    other["metadata"]["labels"] = json!({"app": "web"});
    other["metadata"]["deletionTimestamp"] = json!("2026-12-02T03:10:00Z");
    assert!(o.apply(Applied::Upsert(pod_of(other))).is_empty());
    // The pod goes; its replacement cannot pull its image.
    let a = owned("llama-a", "u-llama-a", "node-a", "10.0.0.1", "rs-1", |_| {});
    let got = o.apply(Applied::Delete(pod_of(a)));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, "pod_deleted");
    let bad = owned("llama-e", "u-e", "node-a", "10.0.0.5", "rs-1", |p| {
        scheduled(p);
        p["status"]["containerStatuses"] = json!([{"name": "llama", "ready": false, "restartCount": 0,
            "image": "x", "imageID": "",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}}]);
    });
    let got = o.apply(Applied::Upsert(pod_of(bad)));
    let words: Vec<(Option<&str>, &str)> = got.iter().map(|g| (g.0.as_deref(), g.1)).collect();
    let w1 = Some("w1");
    assert_eq!(
        words,
        vec![
            (w1, "replacement_requested"),
            (w1, "pod_scheduled"),
            (w1, "replacement_failed")
        ],
        "{got:?}"
    );
    assert_eq!(
        got[2].2,
        "pod llama-e: container llama waiting: ImagePullBackOff: pull access denied"
    );
}
