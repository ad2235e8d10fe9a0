//! The kubernetes target as a user runs it, with no cluster: `haq validate` reads the
//! kubeconfig's current context (a file; no network) and refuses one outside the
//! scenario's allow-list. The API calls themselves are tested against kube-rs's mock
//! API server in `src/target/kube` and `src/faults/kube`.

use crate::cli::haq_env;
use crate::support::scratch;

/// A kubeconfig whose current context is `current` (nothing listens at its server).
fn kubeconfig(dir: &std::path::Path, current: &str) -> std::path::PathBuf {
    let p = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {current}\ncontexts:\n- name: {current}\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:9\"}}\nusers:\n- name: u\n  user: {{token: t}}\n"
    );
    std::fs::write(&p, text).expect("kubeconfig");
    p
}

fn haq_with(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let kc = kubeconfig.to_str().expect("utf-8 path");
    haq_env(args, &[("KUBECONFIG", kc)], &["KUBERNETES_SERVICE_HOST"])
}

#[test]
fn validate_refuses_a_current_context_outside_the_allow_list() {
    let dir = scratch("kube-validate");
    let scenario = "examples/kubernetes/kill-pod.yaml";
    let (code, out, err) = haq_with(&kubeconfig(&dir, "kind-haq"), &["validate", scenario]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("valid"), "{out}");
    let (code, _, err) = haq_with(&kubeconfig(&dir, "prod-eu"), &["validate", scenario]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("kill-pod.yaml:20:23: `target.kubernetes.allowed_contexts`"),
        "{err}"
    );
    assert!(err.contains("current context `prod-eu`"), "{err}");
    // A namespace switched on the command line is refused the same way.
    let (code, _, err) = haq_with(
        &kubeconfig(&dir, "kind-haq"),
        &[
            "validate",
            scenario,
            "--set",
            "target.kubernetes.namespace=prod",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`target.kubernetes.namespace`: is not in allowed_namespaces"),
        "{err}"
    );
}

/// Every example scenario validates, and `haq run --dry-run` prints its API calls,
/// makes none (the kubeconfig's server is never reached, no run directory is made)
/// and exits 0; a target of another kind is refused.
#[test]
fn dry_run_prints_the_api_calls_of_every_example_and_makes_none() {
    let dir = scratch("kube-dry-run");
    let kc = kubeconfig(&dir, "kind-haq");
    let reports = dir.join("reports");
    let reports = reports.to_str().expect("utf-8");
    let mut seen = 0;
    for e in
        std::fs::read_dir(crate::support::root().join("examples/kubernetes")).expect("examples")
    {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let Some(text) = std::fs::read_to_string(&p)
            .ok()
            .filter(|t| t.contains("kind: kubernetes"))
        else {
            continue;
        };
        seen += 1;
        let path = p.to_str().expect("utf-8");
        let (code, out, err) = haq_with(&kc, &["run", "--dry-run", path, "--reports-dir", reports]);
        assert_eq!(code, 0, "{path}: {err}");
        let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(out.contains("no call is made"), "{path}: {out}");
        assert!(
            out.contains("GET /api/v1/namespaces/haq-demo/pods?&labelSelector=app%3Dllama"),
            "{path}: {out}"
        );
        let want = if text.contains("replacement: scale") {
            "PATCH /apis/apps/v1/namespaces/haq-demo/deployments/DEPLOYMENT_OF_w2/scale?&fieldManager=haq {\"spec\":{\"replicas\":2}}"
        } else if text.contains("domain: network") {
            "POST /apis/networking.k8s.io/v1/namespaces/haq-demo/networkpolicies?"
        } else if text.contains("domain: node") {
            "PATCH /api/v1/nodes/NODE_OF_w1? {\"spec\":{\"unschedulable\":true}}"
        } else if text.contains("domain: drain") {
            "POST /api/v1/namespaces/haq-demo/pods/POD_OF_w2/eviction?"
        } else if text.contains("when: {probe") {
            "DELETE /api/v1/namespaces/haq-demo/pods/POD_OF_PROBED? {\"gracePeriodSeconds\":0}"
        } else if text.contains("domain: gpu") {
            "/exec?&stdout=true&stderr=true&container=llama&command=pkill"
        } else {
            "DELETE /api/v1/namespaces/haq-demo/pods/POD_OF_w2? {\"gracePeriodSeconds\":0}"
        };
        assert!(out.contains(want), "{path}: wanted {want}\n{out}");
        // Every example run in the haq-proxy pod puts haq's proxy in front of the pods
        // (gateway.yaml goes through it); the agents' coordinator runs in a pod of its
        // own, where the haq-proxy daemon relays for it without lending its addresses.
        assert_eq!(
            out.contains("proxy w2 haq's proxy listens on 0.0.0.0:9002 → IP_OF_w2:8080"),
            !text.contains("\nagents:"),
            "{path}: {out}"
        );
    }
    assert!(seen >= 5, "{seen} kubernetes examples");
    assert!(
        !dir.join("reports").exists(),
        "a dry run writes no run directory"
    );
    // A sim target's dry run prints its plan and no API call.
    let (code, out, err) = haq_with(&kc, &["run", "--dry-run", "scenarios/quickstart.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing was started"), "{out}");
    assert!(!out.contains("no call is made"), "{out}");
}

/// The recorded streams of a pod kill (tests/data/kube), replayed through haq's
/// observers (one shared attribution) into a stored run, judged: the kill's time and
/// its failure timeline (Q11). With `late`, a request sent 7.5 s after the kill is
/// added, answered with the gateway's upstream header `late` — mapped to a replica by
/// the run's response attribution, which learned the replacement's address from the
/// watches as a run's does.
async fn replayed_q11(streams: &[&str], late: Option<&str>) -> (u64, haq::check::Judgement) {
    use haq::target::kube::lineage::Lineage;
    use haq::target::kube::pod::Owner;
    use haq::target::kube::podwatch::{self, PodObserver};
    use haq::target::kube::slices::{self, Observer, Replicas, SliceState};
    use haq::target::kube::watch::{Applied, Follow, replayed};
    use haq::target::kube::{Cluster, PodInfo, replica};
    use haq::target::registry::{Registry, Respawn};
    use haq::trace::Event;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    // The stored run: w2 is killed at `kill` (µs); its gateway journal is left out, so
    // only the watches can see it go and come back.
    let src = crate::support::root().join("tests/data/report-run");
    let tag = late.unwrap_or("none").replace([':', '.'], "_");
    let dir = scratch(&format!("kube-q11-{}-{tag}", streams.len()));
    for f in [
        "scenario.json",
        "scenario.yaml",
        "trace.jsonl",
        "tools.jsonl",
        "worker-w1.jsonl",
        "worker-w2.jsonl",
        "worker-w3.jsonl",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).expect("copy");
    }
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    let kill = trace
        .lines()
        .find(|l| l.contains("\"ev\":\"fault\""))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["t"].as_u64())
        .expect("the kill");

    // The watches' replicas: w1..w3 on the streams' three pods, of one ReplicaSet.
    let k = haq::plan::load(
        &crate::support::root().join("examples/kubernetes/kill-pod.yaml"),
        &["target.kubernetes.context=kind-haq".to_string()],
        None,
    )
    .expect("plan")
    .scenario
    .target
    .kubernetes
    .expect("k");
    let (svc, _api) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let cluster = std::sync::Arc::new(
        Cluster::new(
            kube::Client::new(svc, "default"),
            "kind-haq".into(),
            &k,
            "t".into(),
        )
        .expect("cluster"),
    );
    let pod = |replica: &str, name: &str, node: &str| PodInfo {
        replica: replica.into(),
        name: name.into(),
        uid: format!("u-{}", &name[name.len() - 1..]),
        node: node.into(),
        ip: "10.244.0.1".into(),
        container: "llama".into(),
        port: 8080,
        gpus: 0,
        gpu_ids: Vec::new(),
        gpu_ids_from: None,
        restarts: 0,
        owner: Some(Owner {
            kind: "ReplicaSet".into(),
            name: "llama-5d9f".into(),
            uid: "rs-5d9f".into(),
        }),
    };
    let registry = std::sync::Arc::new(Registry {
        replicas: vec![
            replica(&cluster, pod("w1", "llama-5d9f-a", "haq-worker"), "/health"),
            replica(
                &cluster,
                pod("w2", "llama-5d9f-b", "haq-worker2"),
                "/health",
            ),
            replica(&cluster, pod("w3", "llama-5d9f-c", "haq-worker"), "/health"),
        ],
        respawn: Respawn::Kube,
    });
    let learned = std::sync::Arc::new(haq::client::Learned::default());
    let lineage = Lineage::learning(registry.clone(), learned.clone());
    let mut on_slices = Observer {
        state: SliceState::default(),
        replicas: Replicas::guarded(lineage.clone(), &k.namespace, cluster.selector.clone()),
    };
    // The pods as the API has them (the pod stream's objects, its last word on each):
    // what the EndpointSlice watch reads of a new pod before it adopts it.
    let api_pods: std::collections::BTreeMap<String, Pod> =
        std::fs::read_to_string(crate::support::root().join("tests/data/kube/pods.jsonl"))
            .expect("pods")
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| serde_json::from_value::<Pod>(v["event"]["object"].clone()).ok())
            .filter_map(|p| Some((p.metadata.name.clone()?, p)))
            .collect();
    let mut on_pods = PodObserver::new(
        lineage,
        k.container.clone(),
        &k.namespace,
        cluster.selector.clone(),
    );
    // Every stream's events, merged in time: (after_ms, stream, the line).
    let mut events: Vec<(u64, usize, serde_json::Value)> = Vec::new();
    for (n, name) in streams.iter().enumerate() {
        let text =
            std::fs::read_to_string(crate::support::root().join("tests/data/kube").join(name))
                .expect("stream");
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            if let Some(list) = v.get("list") {
                // The baseline: the watch writes nothing of its first list.
                if *name == "pods.jsonl" {
                    on_pods.apply(Applied::Reset(
                        serde_json::from_value::<Vec<Pod>>(list.clone()).expect("pods"),
                    ))
                } else {
                    on_slices.apply(Applied::Reset(
                        serde_json::from_value::<Vec<EndpointSlice>>(list.clone()).expect("slices"),
                    ))
                };
                continue;
            }
            events.push((
                v["after_ms"].as_u64().expect("after_ms"),
                n,
                v["event"].clone(),
            ));
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut lines = Vec::new();
    for (after, n, ev) in events {
        let (source, out) = if streams[n] == "pods.jsonl" {
            let ev =
                replayed(serde_json::from_value::<kube::core::WatchEvent<Pod>>(ev).expect("event"));
            (podwatch::SOURCE, ev.map(|e| on_pods.apply(e)))
        } else {
            let ev = replayed(
                serde_json::from_value::<kube::core::WatchEvent<EndpointSlice>>(ev).expect("event"),
            );
            let mut out = ev.map(|e| on_slices.apply(e));
            for name in on_slices.to_read() {
                let got = api_pods.get(&name).cloned();
                out.get_or_insert_default()
                    .extend(on_slices.read(&name, got));
            }
            (slices::SOURCE, out)
        };
        for (replica, what, detail) in out.into_iter().flatten() {
            let ev = Event::Observation {
                t: kill + after * 1000,
                source: source.into(),
                replica,
                what: what.into(),
                detail: Some(detail),
            };
            lines.push(serde_json::to_string(&ev).expect("line"));
        }
    }
    if let Some(header) = late {
        lines.extend(late_request(&registry, learned, header, kill + 7_500_000));
    }
    // Into the trace, before its last line (run_end), which comes after them all.
    let mut all: Vec<&str> = trace.lines().collect();
    let end = all.pop().expect("run_end");
    all.extend(lines.iter().map(String::as_str));
    let end = end.replace(
        &format!(
            "\"t\":{}",
            serde_json::from_str::<serde_json::Value>(end).expect("end")["t"]
        ),
        &format!("\"t\":{}", kill + 8_000_000),
    );
    all.push(&end);
    std::fs::write(dir.join("trace.jsonl"), all.join("\n") + "\n").expect("write");
    let (_, j) = haq::check::judge_dir(&dir).expect("judged");
    (kill, j)
}

/// One request sent at `t`, answered 200 with the upstream header `header` as the
/// run's response attribution maps it (the replicas' addresses at the start, and what
/// the watches taught it since), as trace lines.
fn late_request(
    registry: &haq::target::registry::Registry,
    learned: std::sync::Arc<haq::client::Learned>,
    header: &str,
    t: u64,
) -> Vec<String> {
    let a = haq::client::Attribution {
        worker: "x-upstream".into(),
        attempt: "x-haq-attempt".into(),
        replicas: registry
            .replicas
            .iter()
            .map(|r| (r.name.clone(), vec!["10.244.0.1:8080".to_string()]))
            .collect(),
        learned: Some(learned),
    };
    let worker = a.replica(header);
    [
        serde_json::json!({"ev": "request", "t": t, "id": "r-late", "class": "chat", "phase": "degraded", "intended": t, "prompt_tokens": 20, "max_tokens": 1, "protected": true}),
        serde_json::json!({"ev": "response", "t": t + 20_000, "id": "r-late", "status": 200, "worker": worker}),
        serde_json::json!({"ev": "chunk", "t": t + 21_000, "id": "r-late", "n": 0, "kind": "content", "text": " x"}),
        serde_json::json!({"ev": "chunk", "t": t + 22_000, "id": "r-late", "n": 1, "kind": "done"}),
        serde_json::json!({"ev": "end", "t": t + 23_000, "id": "r-late", "outcome": "completed", "tokens": 1, "done": true, "status": 200, "counted": 1}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect()
}

/// The replacement's first request served (Q11 "receiving traffic") on a cluster: the
/// watches attribute the new pod (10.244.2.9) to w2 and the response attribution learns
/// its address, so a gateway naming that address names w2 — a request dispatched after
/// the replacement is ready fills the stage. An address nobody learned stays itself.
#[tokio::test]
async fn a_replacements_address_learned_from_the_watches_gives_its_first_request_served() {
    let (kill, j) = replayed_q11(
        &["endpointslices.jsonl", "pods.jsonl"],
        Some("10.244.2.9:8080"),
    )
    .await;
    let f = j.timeline.fault("kill-w2").expect("the kill's timeline");
    let ready = f.replacement.ready.as_ref().expect("ready").t;
    let serving = f.replacement.serving.as_ref().expect("receiving traffic");
    assert!(serving.t >= ready, "{serving:?}");
    assert_eq!(serving.t, kill + 7_500_000, "{serving:?}");
    assert!(
        serving.detail.contains("r-late served by w2"),
        "{serving:?}"
    );
    let rows = rows_of(&j, &serving.source);
    assert!(
        rows.contains(&"w2 replacement receiving traffic"),
        "{rows:?}"
    );
    // The old pod's address is the start's; an unknown one names nobody.
    let (_, j) = replayed_q11(&["endpointslices.jsonl"], Some("10.244.9.9:8080")).await;
    let f = j.timeline.fault("kill-w2").expect("the kill's timeline");
    assert!(f.replacement.serving.is_none(), "{f:?}");
}

/// The timeline's rows one source gave: (event, source).
fn rows_of<'a>(j: &'a haq::check::Judgement, source: &str) -> Vec<&'a str> {
    j.timeline
        .entries
        .iter()
        .filter(|e| e.source == source)
        .map(|e| e.event.as_str())
        .collect()
}

/// An EndpointSlice stream around a pod kill, in the API's shape (tests/data/kube), replayed
/// through haq's EndpointSlice watch into a stored run, gives the failure timeline
/// (Q11): detection and the replacement's stages, each from the watch.
#[tokio::test]
async fn a_replayed_endpointslice_stream_gives_the_q11_timeline() {
    use haq::target::kube::slices::SOURCE;
    let (kill, j) = replayed_q11(&["endpointslices.jsonl"], None).await;
    let f = j.timeline.fault("kill-w2").expect("the kill's timeline");
    let d = f.detected.as_ref().expect("detected");
    assert_eq!((d.t, d.source.as_str()), (kill + 15_000, SOURCE), "{d:?}");
    assert!(
        d.detail
            .contains("ready=false serving=true terminating=true"),
        "{d:?}"
    );
    let started = f.replacement.started.as_ref().expect("started");
    assert_eq!(
        (started.t, started.source.as_str()),
        (kill + 910_000, SOURCE)
    );
    assert!(
        started.detail.contains(
            "pod llama-5d9f-d (uid u-d) on node haq-worker2 takes the place of pod llama-5d9f-b"
        ),
        "{started:?}"
    );
    let ready = f.replacement.ready.as_ref().expect("ready");
    assert_eq!((ready.t, ready.source.as_str()), (kill + 7_400_000, SOURCE));
    // No pod watch: when the controller asked for the replacement is not known.
    assert!(f.replacement.requested.is_none(), "{f:?}");
    let rows = rows_of(&j, SOURCE);
    for row in [
        "w2 detected",
        "w2 replacement started",
        "w2 replacement ready",
    ] {
        assert!(rows.contains(&row), "{rows:?}");
    }
}

/// The pod watch's recorded stream of the same kill, replayed with the EndpointSlice
/// stream: the replacement is requested, started and ready by the pod's own status
/// (each earlier than its endpoint), the replacement pod named; detection stays the
/// EndpointSlice's.
#[tokio::test]
async fn a_replayed_pod_stream_gives_the_replacement_stages() {
    use haq::target::kube::{podwatch, slices};
    let (kill, j) = replayed_q11(&["endpointslices.jsonl", "pods.jsonl"], None).await;
    let f = j.timeline.fault("kill-w2").expect("the kill's timeline");
    let d = f.detected.as_ref().expect("detected");
    assert_eq!(
        (d.t, d.source.as_str()),
        (kill + 15_000, slices::SOURCE),
        "{d:?}"
    );
    let r = &f.replacement;
    let at = |m: &Option<haq::check::timeline::Mark>| {
        m.as_ref()
            .map(|m| (m.t - kill, m.source.clone(), m.detail.clone()))
    };
    let pw = podwatch::SOURCE.to_string();
    assert_eq!(
        at(&r.requested),
        Some((12_000, pw.clone(), "pod llama-5d9f-d (uid u-d) created by ReplicaSet llama-5d9f at 2026-12-02T03:00:05Z takes the place of pod llama-5d9f-b".into()))
    );
    assert_eq!(
        at(&r.started),
        Some((
            850_000,
            pw.clone(),
            "container llama of pod llama-5d9f-d running since 2026-12-02T03:00:06Z".into()
        ))
    );
    assert_eq!(
        at(&r.ready),
        Some((
            7_390_000,
            pw.clone(),
            "pod llama-5d9f-d Ready since 2026-12-02T03:00:12Z".into()
        ))
    );
    let rows = rows_of(&j, podwatch::SOURCE);
    for row in [
        "w2 replacement requested",
        "w2 replacement started",
        "w2 replacement ready",
    ] {
        assert!(rows.contains(&row), "{rows:?}");
    }
}

/// `kubectl -n haq-demo ARGS`: its exit code and output.
fn kubectl(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new("kubectl")
        .args(["-n", "haq-demo"])
        .args(args)
        .output()
        .expect("kubectl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// Against a real cluster: each example scenario runs end to end in the haq-proxy pod
/// (the examples put haq's proxy in front of the pods: the gateway points at it), its
/// fault is recorded verified, the watches and haq's proxy recorded what they saw,
/// and `haq heal` finds nothing left. Set up (docs/kubernetes.md, "Running the
/// examples"):
///
/// ```sh
/// kind create cluster --name haq --config examples/kubernetes/kind.yaml   # or: k3d cluster create haq --agents 2
/// docker build -t haq:dev -f examples/kubernetes/Dockerfile . && kind load docker-image haq:dev --name haq
/// kubectl apply -f examples/kubernetes/namespace.yaml
/// kubectl -n haq-demo create configmap haq-scenarios --from-file=examples/kubernetes/
/// kubectl apply -f examples/kubernetes/llama.yaml -f examples/kubernetes/rbac.yaml \
///   -f examples/kubernetes/haq-proxy.yaml -f examples/kubernetes/gateway.yaml
/// kubectl -n haq-demo rollout status deploy/llama deploy/haq-proxy deploy/gateway --timeout=10m
/// cargo test --test it kube::real_cluster -- --ignored --test-threads 1
/// ```
fn real_cluster(example: &str) -> String {
    let out = format!("/reports/{example}-{}", std::process::id());
    let scenario = format!("/scenarios/{example}.yaml");
    let (code, said) = kubectl(&[
        "exec",
        "deploy/haq-proxy",
        "--",
        "haq",
        "run",
        &scenario,
        "--out",
        &out,
    ]);
    assert!(code == 0 || code == 1, "{example}: exit {code}\n{said}");
    let trace_file = format!("{out}/trace.jsonl");
    let (_, trace) = kubectl(&["exec", "deploy/haq-proxy", "--", "cat", &trace_file]);
    let fault = trace
        .lines()
        .find(|l| l.contains("\"ev\":\"fault\""))
        .unwrap_or_else(|| panic!("{example}: no fault line\n{said}"));
    assert!(fault.contains("\"verified\":true"), "{example}: {fault}");
    assert!(
        trace.contains(haq::target::kube::slices::SOURCE),
        "{example}: no EndpointSlice observation"
    );
    // Every example's fault restarts or replaces a pod (the partition's pod stays and
    // its readiness does not change, so it has none).
    if example != "network-partition" {
        assert!(
            trace.contains(haq::target::kube::podwatch::SOURCE),
            "{example}: no pod watch observation"
        );
    }
    // haq's proxy saw the gateway's requests and tied them by the body marker.
    assert!(
        trace
            .lines()
            .any(|l| l.contains("\"ev\":\"proxy_request\"") && l.contains("\"by\":\"marker\"")),
        "{example}: no request attributed by haq's proxy"
    );
    let (code, heal) = kubectl(&["exec", "deploy/haq-proxy", "--", "haq", "heal", &out]);
    assert_eq!(code, 0, "{example}: something is left applied: {heal}");
    trace
}

/// The probe point through haq's proxy in the cluster: the fault fires on the probe,
/// on the replica that served it.
#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied, haq-proxy.yaml included (see real_cluster)"]
fn real_cluster_probe_kill() {
    let trace = real_cluster("probe-kill");
    let fault = trace
        .lines()
        .find(|l| l.contains("\"ev\":\"fault\""))
        .expect("the fault");
    assert!(fault.contains("\"probe\":"), "fired by the probe: {fault}");
}

#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied (see real_cluster)"]
fn real_cluster_kill_pod() {
    real_cluster("kill-pod");
}

#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied (see real_cluster)"]
fn real_cluster_drain_pod() {
    real_cluster("drain-pod");
}

#[test]
#[ignore = "needs a kind/k3d cluster with two workers and examples/kubernetes applied (see real_cluster)"]
fn real_cluster_node_drain() {
    real_cluster("node-drain");
}

#[test]
#[ignore = "needs a kind/k3d cluster whose CNI enforces NetworkPolicies (see real_cluster)"]
fn real_cluster_network_partition() {
    real_cluster("network-partition");
}

#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied (see real_cluster)"]
fn real_cluster_gpu_engine_kill() {
    real_cluster("gpu-engine-kill");
}

/// `haq heal` reads a killed run's kubernetes entries (a cordon, a scale-down of
/// `replacement: scale`) and, when it cannot reach the context, says NOT healed, exits
/// 1 and leaves the entries open — no call is made to a context the kubeconfig does
/// not have.
#[test]
fn heal_reports_a_cordon_it_could_not_undo_and_keeps_it_open() {
    let dir = scratch("kube-heal");
    let kc = kubeconfig(&dir, "kind-haq");
    let lines = [
        serde_json::json!({"ev": "run", "pid": 0}),
        serde_json::json!({"ev": "open", "id": 1, "fault": "node-of-w1", "replica": "w1", "undo": "kube_uncordon", "context": "gone-ctx", "node": "node-a"}),
        serde_json::json!({"ev": "open", "id": 2, "fault": "scale-w2", "replica": "w2", "undo": "kube_scale", "context": "gone-ctx", "namespace": "haq-demo", "plural": "deployments", "name": "llama", "replicas": 3}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("heals.jsonl"), &text).expect("ledger");
    let run_dir = dir.to_str().expect("utf-8");
    let (code, out, err) = haq_with(&kc, &["heal", run_dir]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("NOT healed node-of-w1 on w1: kubeconfig context gone-ctx"),
        "{out}"
    );
    assert!(
        out.contains("NOT healed scale-w2 on w2: kubeconfig context gone-ctx"),
        "{out}"
    );
    let after = std::fs::read_to_string(dir.join("heals.jsonl")).expect("ledger");
    assert_eq!(after, text, "still open for the next try");
}

/// The verb of one API call as RBAC names it: (API group, resource[/subresource], verb).
fn rbac_of(method: &str, uri: &str) -> (String, String, String) {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest.to_vec()),
        ["apis", g, _v, rest @ ..] => (g.to_string(), rest.to_vec()),
        _ => panic!("not an API path: {uri}"),
    };
    let rest = match rest.as_slice() {
        ["namespaces", _ns, r @ ..] => r.to_vec(),
        r => r.to_vec(),
    };
    let resource = match rest.as_slice() {
        [res] | [res, _] => res.to_string(),
        [res, _, sub] => format!("{res}/{sub}"),
        _ => panic!("unexpected path {uri}"),
    };
    let verb = match (method, rest.len()) {
        // An exec is a websocket upgrade of a GET, authorized as `create`.
        ("GET", 3) if resource == "pods/exec" => "create",
        ("GET", 1) if query.contains("watch=true") => "watch",
        ("GET", 1) => "list",
        ("GET", _) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        (m, _) => panic!("unexpected method {m}"),
    };
    (group, resource, verb.to_string())
}

/// examples/kubernetes/rbac.yaml grants exactly the verbs of the calls the examples'
/// dry runs print (every call a run makes) and `haq heal`'s sweep: none missing, none
/// spare.
#[test]
fn the_role_grants_exactly_the_verbs_the_examples_use() {
    use std::collections::BTreeSet;
    let root = crate::support::root().join("examples/kubernetes");
    let mut used = BTreeSet::new();
    for e in std::fs::read_dir(&root).expect("examples") {
        let p = e.expect("entry").path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if p.extension().is_none_or(|x| x != "yaml") || !text.contains("kind: kubernetes") {
            continue;
        }
        let sets = ["target.kubernetes.context=kind-haq".to_string()];
        let plan = haq::plan::load(&p, &sets, None).expect("plan");
        let k = plan.scenario.target.kubernetes.clone().expect("k");
        let run = haq::target::kube::dryrun::steps(&plan, &k, "t")
            .into_iter()
            .filter_map(|s| s.call);
        // `haq heal`'s sweep reads besides, and `--agents 2` the agents' Job's calls.
        let sweep = haq::target::kube::sweep::reads(&k.namespace, "t");
        let file = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let agents = haq::target::kube::jobs::dry_steps(&plan, 2, file, &[])
            .into_iter()
            .filter_map(|s| s.call);
        for c in run.chain(sweep).chain(agents) {
            let (m, u) = (c.req.method().to_string(), c.req.uri().to_string());
            used.insert(rbac_of(&m, &u));
        }
    }
    let rbac = std::fs::read_to_string(root.join("rbac.yaml")).expect("rbac");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rbac).expect("yaml");
    let mut granted = BTreeSet::new();
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
            serde_json::from_value(d["rules"].clone()).expect("a Role's rules");
        for r in &rules {
            for g in r.api_groups.iter().flatten() {
                for res in r.resources.iter().flatten() {
                    for v in &r.verbs {
                        granted.insert((g.clone(), res.clone(), v.clone()));
                    }
                }
            }
        }
    }
    let missing: Vec<_> = used.difference(&granted).collect();
    let spare: Vec<_> = granted.difference(&used).collect();
    assert!(
        missing.is_empty() && spare.is_empty(),
        "missing {missing:?}, spare {spare:?}"
    );
}

/// The hung engine through the kubernetes backend's exec: SIGSTOP in w2's container,
/// verified by a stopped process, SIGCONT exec'd when the 20 s end — the heal
/// recorded verified (nothing left for `haq heal`, which `real_cluster` checks).
#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied (see real_cluster)"]
fn real_cluster_hung_engine() {
    let trace = real_cluster("hung-engine");
    let heal = trace
        .lines()
        .find(|l| l.contains("\"ev\":\"heal\""))
        .expect("the heal");
    assert!(heal.contains("\"verified\":true"), "{heal}");
    assert!(heal.contains("pkill -CONT llama-server"), "{heal}");
}
