//! Discovery and the EndpointSlice watch against the mock API server (exact requests).

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::mock::{self, ApiServer, list, pod};
use super::*;
use crate::trace::Event;

/// The test scenario's plan (`w1..w3`, namespace `llm`, selector `app=llama`).
pub fn plan(sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let text = crate::plan::kubernetes::tests::kube_scenario();
    crate::plan::load_str(&text, "k.yaml", Path::new("."), &sets, None)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Discovery's poll in tests.
pub const FAST: Duration = Duration::from_millis(10);

pub const PODS: &str = "/api/v1/namespaces/llm/pods?&labelSelector=app%3Dllama";

/// A trace in a scratch file, and the events written to it.
pub struct Trace {
    pub tw: TraceWriter,
    handle: Option<crate::trace::TraceHandle>,
    path: std::path::PathBuf,
}

impl Trace {
    pub fn new(tag: &str) -> Trace {
        let dir = std::env::temp_dir().join(format!("haq-kube-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("trace.jsonl");
        let (tw, h) = TraceWriter::create(&path).expect("trace");
        Trace {
            tw,
            handle: Some(h),
            path,
        }
    }

    /// Every event written.
    pub fn events(mut self) -> Vec<Event> {
        drop(self.tw);
        if let Some(h) = self.handle.take() {
            h.finish().expect("finish");
        }
        crate::trace::read(&self.path)
            .expect("read")
            .filter_map(Result::ok)
            .collect()
    }

    /// The observations written: (replica, what, detail).
    pub fn observations(self) -> Vec<(Option<String>, String, String)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Observation {
                    replica,
                    what,
                    detail,
                    ..
                } => Some((replica, what, detail.unwrap_or_default())),
                _ => None,
            })
            .collect()
    }
}

/// The three serving pods as listed (version 100): llama-b (`w2`) at `b_ip`, Ready
/// or not.
pub fn three_pods(b_ip: &str, b_ready: bool) -> serde_json::Value {
    list(
        "PodList",
        vec![
            pod("llama-c", "u-c", "node-b", "10.0.0.3", true),
            pod("llama-a", "u-a", "node-a", "10.0.0.1", true),
            pod("llama-b", "u-b", "node-a", b_ip, b_ready),
        ],
        "100",
    )
}

/// Discovery answered with three pods, `w2`'s not ready at first.
pub async fn discovered(server: &mut ApiServer) {
    let pods = |ready: bool| three_pods("10.0.0.2", ready);
    server.expect("GET", PODS, None, 200, pods(false)).await;
    server.expect("GET", PODS, None, 200, pods(true)).await;
}

#[tokio::test]
async fn the_selected_pods_become_the_replicas_once_ready() {
    let p = plan(&[
        "target.kubernetes.serving_service=null",
        "target.kubernetes.pod_watch=false",
    ]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, mut server) = mock::cluster(&k);
    let api = tokio::spawn(async move {
        discovered(&mut server).await;
        server.no_more(Duration::from_millis(200)).await;
    });
    let trace = Trace::new("discover");
    let said = std::sync::Mutex::new(Vec::new());
    let say = |s: &str| said.lock().expect("said").push(s.to_string());
    let clock = Clock::start();
    let s = started(&p, cluster, &trace.tw, &clock, &say, FAST)
        .await
        .expect("discovered");
    api.await.expect("the API server saw exactly the calls");
    assert_eq!(s.api_url, "http://gateway.llm.svc:8080/v1");
    let got: Vec<(String, String, Option<String>)> = s
        .registry
        .replicas
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.pod().expect("pod").pod.name.clone(),
                r.direct_url(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "w1".into(),
                "llama-a".into(),
                Some("http://10.0.0.1:8080".into())
            ),
            (
                "w2".into(),
                "llama-b".into(),
                Some("http://10.0.0.2:8080".into())
            ),
            (
                "w3".into(),
                "llama-c".into(),
                Some("http://10.0.0.3:8080".into())
            ),
        ]
    );
    let w2 = &s.registry.replicas[1].pod().expect("pod");
    assert_eq!(
        (w2.pod.node.as_str(), w2.pod.gpus, w2.pod.container.as_str()),
        ("node-a", 2, "llama")
    );
    assert_eq!(s.registry.replicas[1].node.as_deref(), Some("node-a"));
    let said = said.into_inner().expect("said");
    assert!(
        said.iter().any(|l| l.contains("pod llama-b is not Ready")),
        "{said:?}"
    );
    let obs = trace.observations();
    assert_eq!(obs.len(), 3, "{obs:?}");
    assert_eq!(obs[1].0.as_deref(), Some("w2"));
    assert!(
        obs[1].2.starts_with(
            "w2 = pod llama-b (uid u-b) on node node-a, 10.0.0.2:8080 container llama, 2 GPU"
        ),
        "{obs:?}"
    );
    assert!(obs[1].2.contains("haq.dev/run=t0k3n"), "{obs:?}");
}

#[tokio::test]
async fn discovery_refuses_a_pod_outside_the_selector_and_a_wrong_count() {
    let p = plan(&[
        "target.kubernetes.serving_service=null",
        "target.ready_timeout=50ms",
        "target.kubernetes.pod_watch=false",
    ]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, mut server) = mock::cluster(&k);
    let api = tokio::spawn(async move {
        let mut other = pod("web-1", "u-w", "node-a", "10.0.0.9", true);
        other["metadata"]["labels"] = json!({"app": "web"});
        server
            .expect("GET", PODS, None, 200, list("PodList", vec![other], "1"))
            .await;
        // Two pods for three replicas, until the timeout.
        let two = list(
            "PodList",
            vec![
                pod("a", "1", "n", "10.0.0.1", true),
                pod("b", "2", "n", "10.0.0.2", true),
            ],
            "2",
        );
        server.expect("GET", PODS, None, 200, two.clone()).await;
        while tokio::time::timeout(
            Duration::from_millis(300),
            server.expect("GET", PODS, None, 200, two.clone()),
        )
        .await
        .is_ok()
        {}
    });
    let clock = Clock::start();
    let tw = TraceWriter::sink();
    let e = started(
        &p,
        cluster.clone(),
        &tw,
        &clock,
        &|_| {},
        Duration::from_millis(10),
    )
    .await
    .err()
    .expect("refused");
    assert!(
        e.to_string()
            .contains("pod web-1 does not match namespace llm and selector `app=llama`: refused"),
        "{e}"
    );
    let e = started(&p, cluster, &tw, &clock, &|_| {}, Duration::from_millis(10))
        .await
        .err()
        .expect("too few");
    let e = e.to_string();
    assert!(e.contains("not ready within 50ms"), "{e}");
    assert!(
        e.contains("finds 2 live pods in llm (a, b), the scenario declares 3"),
        "{e}"
    );
    api.abort();
}

pub const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices?&labelSelector=kubernetes.io%2Fservice-name%3Dllama";

/// The watch of the Service's EndpointSlices from the list's version 100.
pub const WATCH_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices?&watch=true&timeoutSeconds=290&labelSelector=kubernetes.io%2Fservice-name%3Dllama&allowWatchBookmarks=true&resourceVersion=100";

/// An EndpointSlice of Service `llama` with `(pod, uid, ip, node, ready, terminating)`.
pub fn slice(
    name: &str,
    version: &str,
    eps: &[(&str, &str, &str, &str, bool, bool)],
) -> serde_json::Value {
    let endpoints: Vec<serde_json::Value> = eps
        .iter()
        .map(|(pod, uid, ip, node, ready, term)| {
            json!({
                "addresses": [ip], "nodeName": node,
                "conditions": {"ready": ready, "serving": *ready || *term, "terminating": term},
                "targetRef": {"kind": "Pod", "name": pod, "uid": uid, "namespace": "llm"}
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "llm", "resourceVersion": version,
                     "labels": {"kubernetes.io/service-name": "llama"}},
        "addressType": "IPv4", "endpoints": endpoints
    })
}

/// Answers the list of the Service's EndpointSlices.
pub async fn slices_listed(server: &mut ApiServer, version: &str, items: Vec<serde_json::Value>) {
    let l = list("EndpointSliceList", items, version);
    server.expect("GET", SLICES, None, 200, l).await;
}

const A: (&str, &str, &str, &str, bool, bool) =
    ("llama-a", "u-a", "10.0.0.1", "node-a", true, false);
const C: (&str, &str, &str, &str, bool, bool) =
    ("llama-c", "u-c", "10.0.0.3", "node-b", true, false);

/// Starts the target against the mock and waits until the API server answered all
/// it expects; the API server stays up (its last watch open, `api`'s result kept)
/// until the watches are stopped.
pub async fn watched<S: Send + 'static>(
    p: &Plan,
    cluster: Arc<Cluster>,
    api: tokio::task::JoinHandle<S>,
    tag: &str,
) -> (Started, Trace) {
    let trace = Trace::new(tag);
    let clock = Clock::start();
    let s = started(p, cluster, &trace.tw, &clock, &|_| {}, FAST)
        .await
        .expect("started");
    let kept = api.await.expect("the API server saw exactly the calls");
    s.stop.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(kept);
    (s, trace)
}

/// The watch lists, watches from the list's version, writes each transition of a
/// replica's endpoint (a new pod taking a gone pod's place), and lists again on 410.
#[tokio::test]
async fn the_endpointslice_watch_writes_each_transition() {
    let p = plan(&["target.kubernetes.pod_watch=false"]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, mut server) = mock::cluster(&k);
    let api = tokio::spawn(async move {
        discovered(&mut server).await;
        let b = ("llama-b", "u-b", "10.0.0.2", "node-a", true, false);
        let all = slice("llama-x1", "100", &[A, b, C]);
        slices_listed(&mut server, "100", vec![all]).await;
        let events = [
            json!({"type": "MODIFIED", "object": slice("llama-x1", "101", &[A, ("llama-b", "u-b", "10.0.0.2", "node-a", false, true), C])}),
            json!({"type": "MODIFIED", "object": slice("llama-x1", "102", &[A, C])}),
            json!({"type": "BOOKMARK", "object": {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"resourceVersion": "103"}}}),
            json!({"type": "MODIFIED", "object": slice("llama-x1", "104", &[A, C, ("llama-d", "u-d", "10.0.0.4", "node-b", false, false)])}),
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old"}}),
        ];
        let text: String = events.iter().map(|e| format!("{e}\n")).collect();
        server.stream("GET", WATCH_SLICES, text).await;
        // The new pod is read before it takes w2's place: it is in the selector.
        let d = pod("llama-d", "u-d", "node-b", "10.0.0.4", false);
        server
            .expect("GET", "/api/v1/namespaces/llm/pods/llama-d", None, 200, d)
            .await;
        // After the 410: a fresh list (the new pod is ready now), then a watch from it.
        let d = ("llama-d", "u-d", "10.0.0.4", "node-b", true, false);
        slices_listed(
            &mut server,
            "110",
            vec![slice("llama-x1", "110", &[A, C, d])],
        )
        .await;
        let (req, keep) = server.next().await;
        assert!(req.ends_with("&resourceVersion=110"), "{req}");
        (server, keep)
    });
    let (s, trace) = watched(&p, cluster, api, "slices").await;
    let w2 = s.registry.get("w2").expect("w2").pod().expect("pod");
    assert_eq!(
        (w2.pod.name.as_str(), w2.pod.ip.as_str()),
        ("llama-d", "10.0.0.4")
    );
    assert_eq!(
        s.registry.get("w2").expect("w2").direct_url().as_deref(),
        Some("http://10.0.0.4:8080")
    );
    let obs: Vec<(Option<String>, String)> = trace
        .observations()
        .into_iter()
        .filter(|o| o.1 != "discovered")
        .map(|o| (o.0, o.1))
        .collect();
    let w2 = || Some("w2".to_string());
    assert_eq!(
        obs,
        vec![
            (w2(), "draining".into()),
            (w2(), "endpoint_removed".into()),
            (w2(), "replacement_started".into()),
            (w2(), "endpoint_added".into()),
            (w2(), "endpoint_ready".into()),
        ]
    );
}

/// The dry run lists the calls the faults' mock tests see, in order, and no client.
#[test]
fn the_dry_run_lists_every_call_of_each_fault() {
    let with = |sets: &[&str]| -> Vec<String> {
        dryrun::render(&plan(sets), "kind-haq")
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    // The pod watch's list and watch come after the EndpointSlices'.
    let watched = with(&[]);
    assert!(
        watched[4].starts_with(&format!("start GET {PODS}")),
        "{watched:?}"
    );
    assert!(
        watched[5].starts_with("start GET /api/v1/namespaces/llm/pods?&watch=true&timeoutSeconds=290&labelSelector=app%3Dllama&allowWatchBookmarks=true&resourceVersion=LIST_VERSION"),
        "{watched:?}"
    );
    let lines = |sets: &[&str]| {
        let mut all = vec!["target.kubernetes.pod_watch=false"];
        all.extend_from_slice(sets);
        with(&all)
    };
    let kill = lines(&[]);
    assert!(
        kill[0].starts_with("dry run of t: context kind-haq, namespace llm"),
        "{kill:?}"
    );
    assert!(
        kill[1].starts_with(&format!("start GET {PODS}")),
        "{kill:?}"
    );
    assert!(
        kill[2].starts_with(&format!("start GET {SLICES}")),
        "{kill:?}"
    );
    assert!(
        kill[3].contains("&resourceVersion=LIST_VERSION"),
        "{kill:?}"
    );
    assert_eq!(
        kill[4],
        "+6.0s kill-w2 DELETE /api/v1/namespaces/llm/pods/POD_OF_w2? {\"gracePeriodSeconds\":0} (delete pod POD_OF_w2 (grace 0s))"
    );
    assert!(
        kill[5].starts_with("+6.0s kill-w2 GET /api/v1/namespaces/llm/pods/POD_OF_w2 "),
        "{kill:?}"
    );
    let own = lines(&["faults[0].grace=pod"]);
    assert_eq!(
        own[4],
        "+6.0s kill-w2 DELETE /api/v1/namespaces/llm/pods/POD_OF_w2? {} (delete pod POD_OF_w2 (its own grace period))"
    );
    let drain = lines(&["faults[0].domain=drain"]);
    assert!(drain[4].contains("POST /api/v1/namespaces/llm/pods/POD_OF_w2/eviction? {\"delete_options\":null,\"metadata\":{\"name\":\"POD_OF_w2\"}}"), "{drain:?}");
    let node = lines(&["faults[0].domain=node"]);
    let calls: Vec<&str> = node[4..9]
        .iter()
        .map(|l| l.split(" (").next().unwrap_or_default())
        .collect();
    assert_eq!(
        calls,
        vec![
            "+6.0s kill-w2 GET /api/v1/nodes/NODE_OF_w2",
            "+6.0s kill-w2 PATCH /api/v1/nodes/NODE_OF_w2? {\"spec\":{\"unschedulable\":true}}",
            "+6.0s kill-w2",
            "+6.0s kill-w2",
            "+6.0s kill-w2 heal",
        ]
    );
    assert!(
        node[6].contains("DELETE /api/v1/namespaces/llm/pods/POD_ON_NODE?"),
        "{node:?}"
    );
    assert!(node[8].ends_with("PATCH /api/v1/nodes/NODE_OF_w2? {\"spec\":{\"unschedulable\":false}} (uncordon node NODE_OF_w2)"), "{node:?}");
    let net = lines(&["faults[0].domain=network", "faults[0].duration=2s"]);
    assert!(net[4].contains("PATCH /api/v1/namespaces/llm/pods/POD_OF_w2?&fieldManager=haq {\"metadata\":{\"labels\":{\"haq.dev/isolate\":\"runtoken-w2\"}}}"), "{net:?}");
    assert!(
        net[5].contains("POST /apis/networking.k8s.io/v1/namespaces/llm/networkpolicies? {"),
        "{net:?}"
    );
    assert!(net[7].starts_with("+6.0s blackhole-w2 heal (after 2.0s) DELETE /apis/networking.k8s.io/v1/namespaces/llm/networkpolicies/haq-runtoken-blackhole-w2-w2?"), "{net:?}");
    let gpu = lines(&[
        "faults[0].domain=gpu",
        "faults[0].exec=[pkill, -KILL, llama-server]",
        "target.kubernetes.container=llama",
    ]);
    assert!(gpu[5].contains("GET /api/v1/namespaces/llm/pods/POD_OF_w2/exec?&stdout=true&stderr=true&container=llama&command=pkill&command=-KILL&command=llama-server"), "{gpu:?}");
    // The network fault's reset of the established connections.
    let proxy = "target.kubernetes.proxies={w2: \"0.0.0.0:9002\"}";
    let reset = lines(&[
        "faults[0].domain=network",
        proxy,
        "faults[0].reset_connections=proxy",
    ]);
    // (After the line of w2's proxy.)
    assert!(
        reset[6].starts_with(
            "+6.0s blackhole-w2 POST /apis/networking.k8s.io/v1/namespaces/llm/networkpolicies? "
        ),
        "{reset:?}"
    );
    assert_eq!(
        reset[7..9]
            .iter()
            .map(|l| l.split(" (").next().unwrap_or_default())
            .collect::<Vec<_>>(),
        vec![
            "+6.0s blackhole-w2 GET /apis/networking.k8s.io/v1/namespaces/llm/networkpolicies/haq-runtoken-blackhole-w2-w2",
            "+6.0s blackhole-w2 haq's proxy of w2 resets its established connections",
        ]
    );
    let exec = lines(&[
        "faults[0].domain=network",
        "faults[0].reset_connections={exec: [ss, -K, dst, 10.0.0.9], container: net}",
    ]);
    assert!(exec[7].starts_with("+6.0s blackhole-w2 GET /api/v1/namespaces/llm/pods/POD_OF_w2/exec?&stdout=true&stderr=true&container=net&command=ss&command=-K&command=dst&command=10.0.0.9 "), "{exec:?}");
    // haq's proxy in front of w2: where it listens and what it forwards to.
    let proxied = lines(&["target.kubernetes.proxies={w2: \"0.0.0.0:9002\"}"]);
    assert_eq!(
        proxied[1],
        "proxy w2 haq's proxy listens on 0.0.0.0:9002 → IP_OF_w2:PORT (the pod's address, followed to its replacement; no API call)"
    );
    // A listed replica names its pod.
    let listed = lines(&[
        "target.replicas=[{name: llama-0}, {name: llama-1}]",
        "faults[0].target.replica=llama-1",
    ]);
    assert!(
        listed[4].contains("DELETE /api/v1/namespaces/llm/pods/llama-1?"),
        "{listed:?}"
    );
}

/// An exec fault's dry run: the pod read, the inject, the verify, and at the heal's
/// time the pod read, the heal and the verify again — each exec request exactly;
/// `gpu_lost` without a verify reads the pod's readiness path (no API call).
#[test]
fn the_dry_run_lists_the_execs_of_inject_verify_and_heal() {
    let lines = |sets: &[&str]| -> Vec<String> {
        let mut all = vec![
            "target.kubernetes.pod_watch=false",
            "target.kubernetes.container=vllm",
            "faults[0].domain=gpu",
        ];
        all.extend_from_slice(sets);
        dryrun::render(&plan(&all), "kind-haq")
            .lines()
            .skip(4)
            .map(|l| {
                let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
                l.split(" (exec").next().unwrap_or_default().to_string()
            })
            .collect()
    };
    let pod = "/api/v1/namespaces/llm/pods/POD_OF_w2";
    let exec =
        |c: &str, cmd: &str| format!("{pod}/exec?&stdout=true&stderr=true&container={c}{cmd}");
    let stop = exec(
        "vllm",
        "&command=pkill&command=-STOP&command=-f&command=EngineCore",
    );
    let stopped = exec(
        "vllm",
        "&command=pgrep&command=-r&command=T&command=-f&command=EngineCore",
    );
    let cont = exec(
        "vllm",
        "&command=pkill&command=-CONT&command=-f&command=EngineCore",
    );
    let freeze = lines(&[
        "faults[0].action=freeze",
        "faults[0].duration=10s",
        "faults[0].exec={inject: [pkill, -STOP, -f, EngineCore], verify: [pgrep, -r, T, -f, EngineCore], heal: [pkill, -CONT, -f, EngineCore]}",
    ]);
    let heal = "+6.0s freeze-w2 heal (after 10.0s)";
    assert_eq!(
        freeze[..6],
        [
            format!("+6.0s freeze-w2 GET {pod} (read pod POD_OF_w2)"),
            format!("+6.0s freeze-w2 GET {stop}"),
            format!("+6.0s freeze-w2 GET {stopped}"),
            format!("{heal} GET {pod} (read pod POD_OF_w2)"),
            format!("{heal} GET {cont}"),
            format!("{heal} GET {stopped}"),
        ]
    );
    let tc = exec(
        "net",
        "&command=tc&command=qdisc&command=add&command=dev&command=eth0&command=root&command=netem&command=delay&command=200ms",
    );
    let slow = lines(&[
        "faults[0].domain=network",
        "faults[0].action=slow",
        "faults[0].exec={inject: [tc, qdisc, add, dev, eth0, root, netem, delay, 200ms], heal: [tc, qdisc, del, dev, eth0, root], container: net}",
        "faults[0].verify=false",
    ]);
    assert_eq!(slow[1], format!("+6.0s slow-w2 GET {tc}"));
    assert!(
        slow[2].starts_with("+6.0s slow-w2 heal (end of load) GET "),
        "{slow:?}"
    );
    assert!(
        slow[3].contains("container=net&command=tc&command=qdisc&command=del"),
        "{slow:?}"
    );
    let lost = lines(&[
        "faults[0].action=gpu_lost",
        "faults[0].exec=[pkill, -KILL, -f, EngineCore]",
        "target.kubernetes.port=8000",
    ]);
    assert_eq!(
        lost[2..4],
        [
            "+6.0s gpu_lost-w2 GET http://IP_OF_w2:8000/health answers an error (haq's HTTP client, no API call)".to_string(),
            format!("+6.0s gpu_lost-w2 GET {pod} (read pod POD_OF_w2)"),
        ]
    );
    assert!(
        !lost.iter().any(|l| l.contains(" heal ")),
        "no heal: {lost:?}"
    );
}

/// `pod` owned by ReplicaSet `rs` (its uid).
fn owned(mut pod: serde_json::Value, rs: &str) -> serde_json::Value {
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs, "controller": true}]);
    pod
}

/// A pod an EndpointSlice names is read before it may take a vacant replica's place:
/// one outside the target's selector (the serving Service selects more) is nobody's
/// (`not_adopted`), one of another controller (a rollout's) is not the replacement,
/// the gone pod's controller's new pod is.
#[tokio::test]
async fn a_pod_named_by_an_endpointslice_is_adopted_only_inside_the_selector_and_its_controller() {
    let p = plan(&["target.kubernetes.pod_watch=false"]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, mut server) = mock::cluster(&k);
    let api = tokio::spawn(async move {
        let pods = ["a", "b", "c"].map(|x| {
            let (ip, node) = match x {
                "a" => ("10.0.0.1", "node-a"),
                "b" => ("10.0.0.2", "node-a"),
                _ => ("10.0.0.3", "node-b"),
            };
            owned(
                pod(&format!("llama-{x}"), &format!("u-{x}"), node, ip, true),
                "rs-1",
            )
        });
        let listed = list("PodList", pods.to_vec(), "100");
        server.expect("GET", PODS, None, 200, listed).await;
        let b = |ready, term| ("llama-b", "u-b", "10.0.0.2", "node-a", ready, term);
        slices_listed(
            &mut server,
            "100",
            vec![slice("s", "100", &[A, b(true, false), C])],
        )
        .await;
        let web = ("web-1", "u-w", "10.0.0.7", "node-b", true, false);
        let rollout = ("llama-y", "u-y", "10.0.0.8", "node-b", true, false);
        let d = ("llama-d", "u-d", "10.0.0.4", "node-b", true, false);
        let events = [
            json!({"type": "MODIFIED", "object": slice("s", "101", &[A, b(false, true), C])}),
            json!({"type": "MODIFIED", "object": slice("s", "102", &[A, C])}),
            json!({"type": "MODIFIED", "object": slice("s", "103", &[A, C, web])}),
            json!({"type": "MODIFIED", "object": slice("s", "104", &[A, C, web, rollout])}),
            json!({"type": "MODIFIED", "object": slice("s", "105", &[A, C, web, rollout, d])}),
        ];
        let text: String = events.iter().map(|e| format!("{e}\n")).collect();
        server.stream("GET", WATCH_SLICES, text).await;
        let mut w = pod("web-1", "u-w", "node-b", "10.0.0.7", true);
        w["metadata"]["labels"] = json!({"app": "web"});
        let at = |name: &str| format!("/api/v1/namespaces/llm/pods/{name}");
        server
            .expect("GET", &at("web-1"), None, 200, owned(w, "rs-9"))
            .await;
        let y = owned(pod("llama-y", "u-y", "node-b", "10.0.0.8", true), "rs-2");
        server.expect("GET", &at("llama-y"), None, 200, y).await;
        let d = owned(pod("llama-d", "u-d", "node-b", "10.0.0.4", true), "rs-1");
        server.expect("GET", &at("llama-d"), None, 200, d).await;
        let (_req, keep) = server.next().await;
        (server, keep)
    });
    let (s, trace) = watched(&p, cluster, api, "guarded").await;
    let w2 = s.registry.get("w2").expect("w2").pod().expect("pod");
    assert_eq!(w2.pod.name, "llama-d");
    let obs: Vec<(Option<String>, String, String)> = trace
        .observations()
        .into_iter()
        .filter(|o| o.1 != "discovered")
        .collect();
    let got: Vec<(Option<&str>, &str)> =
        obs.iter().map(|o| (o.0.as_deref(), o.1.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (Some("w2"), "draining"),
            (Some("w2"), "endpoint_removed"),
            (None, "not_adopted"),
            (None, "endpoint_ready"),
            (None, "endpoint_ready"),
            (Some("w2"), "replacement_started"),
            (Some("w2"), "endpoint_ready"),
        ],
        "{obs:?}"
    );
    assert_eq!(
        obs[2].2,
        "pod web-1 is outside namespace llm and selector `app=llama`: no replica's (blast-radius guard)"
    );
    assert!(obs[4].2.contains("pod llama-y"), "{obs:?}");
}

/// Discovery reads the GPUs' ids where the pod says them — the engine container's
/// `NVIDIA_VISIBLE_DEVICES` (a list, not `all`), else a GPU scheduler's annotation —
/// and the count alone otherwise.
#[test]
fn discovery_reads_the_gpu_ids_a_pod_states() {
    let p = plan(&[]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let reqs = crate::plan::kubernetes::parse_selector(&k.selector).expect("selector");
    let mut a = pod("llama-a", "u-a", "node-a", "10.0.0.1", true);
    a["spec"]["containers"][0]["env"] = json!([{"name": "HF_HOME", "value": "/x"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0, 1"}]);
    let mut b = pod("llama-b", "u-b", "node-a", "10.0.0.2", true);
    b["metadata"]["annotations"] = json!({"volcano.sh/gpu-index": "3"});
    let mut c = pod("llama-c", "u-c", "node-b", "10.0.0.3", true);
    c["spec"]["containers"][0]["env"] = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = [a, b, c]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("pod"))
        .collect();
    let found = discover::replicas_from(&pods, &k, &reqs, &p.scenario.target.replica_set())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let ids: Vec<(Vec<String>, Option<String>)> = found
        .iter()
        .map(|p| (p.gpu_ids.clone(), p.gpu_ids_from.clone()))
        .collect();
    assert_eq!(
        ids,
        vec![
            (
                vec!["0".to_string(), "1".to_string()],
                Some("env NVIDIA_VISIBLE_DEVICES".to_string())
            ),
            (
                vec!["3".to_string()],
                Some("annotation volcano.sh/gpu-index".to_string())
            ),
            (Vec::new(), None),
        ]
    );
    assert!(
        found[0]
            .describe()
            .ends_with("2 GPU (nvidia.com/gpu, ids 0,1 from env NVIDIA_VISIBLE_DEVICES)"),
        "{}",
        found[0].describe()
    );
    assert!(found[2].describe().ends_with("2 GPU (nvidia.com/gpu)"));
}
