//! Agents as a Kubernetes Indexed Job against the mock API server (exact requests):
//! the Job's spec, the results returned over the endpoint by the agent's own client
//! (trace, result, the clock exchange), and agent pods that fail, exit without their
//! result or never start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::assignment::{AgentResult, Assignment};
use super::endpoint::{self, Served};
use super::pods::{self, Watch};
use super::remote::Remote;
use super::setup::Api;
use crate::target::kube::jobs::{self, AgentJob};
use crate::target::kube::mock::{self, list};
use crate::trace::merge::{AgentNote, AgentState};
use crate::trace::{Clock, TraceWriter};

const AGENT_PODS: &str =
    "/api/v1/namespaces/llm/pods?&labelSelector=haq.dev%2Frun%3Dt0k3n%2Chaq.dev%2Frole%3Dagent";

fn plan() -> crate::plan::Plan {
    crate::target::kube::tests::plan(&[
        "agents.kubernetes={image: 'haq:dev', scenario_config_map: haq-scenarios, env_secret: staging-key}",
    ])
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("haq-agents-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

#[tokio::test]
async fn the_agents_job_is_an_indexed_job_of_one_pod_per_share() {
    let p = plan();
    let cfg = p
        .scenario
        .agents
        .kubernetes
        .clone()
        .expect("agents.kubernetes");
    let sets = vec!["phases[0].duration=4s".to_string()];
    let args = jobs::agent_args(&cfg, "k.yaml", &sets, 7, "http://10.0.0.9:7070");
    let job = jobs::agent_job(&AgentJob {
        token: "t0k3n",
        count: 3,
        cfg: &cfg,
        args,
        key: "s3cr3t",
        deadline_s: jobs::deadline_s(&p, &cfg),
    });
    let labels = json!({"haq.dev/run": "t0k3n", "haq.dev/role": "agent"});
    let want = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "haq-agents-t0k3n", "labels": labels},
        "spec": {
            "completionMode": "Indexed", "completions": 3, "parallelism": 3,
            "backoffLimit": 0,
            "activeDeadlineSeconds": jobs::deadline_s(&p, &cfg),
            "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": labels}}],
                    "containers": [{
                        "name": "agent", "image": "haq:dev", "imagePullPolicy": "IfNotPresent",
                        "args": ["agent", "/scenarios/k.yaml", "--set", "phases[0].duration=4s", "--seed", "7", "--coordinator", "http://10.0.0.9:7070"],
                        "env": [{"name": "HAQ_AGENT_KEY", "value": "s3cr3t"}],
                        "envFrom": [{"secretRef": {"name": "staging-key"}}],
                        "volumeMounts": [
                            {"name": "scenario", "mountPath": "/scenarios", "readOnly": true},
                            {"name": "work", "mountPath": "/tmp"}
                        ]
                    }],
                    "volumes": [
                        {"name": "scenario", "configMap": {"name": "haq-scenarios"}},
                        {"name": "work", "emptyDir": {}}
                    ]
                }
            }
        }
    });
    assert_eq!(serde_json::to_value(&job).expect("json"), want);
    // The run's planned length, the start deadline, the drain and two minutes.
    assert_eq!(
        jobs::deadline_s(&p, &cfg),
        (p.total + cfg.start_within.0 + p.scenario.client.drain_timeout.0).as_secs() + 120
    );
    // Created exactly so, in the target's namespace.
    let (client, mut server) = mock::pair();
    let api = Api {
        client,
        ns: "llm".into(),
    };
    let sent = tokio::spawn(async move {
        api.send::<Value>(jobs::create_job("llm", &job))
            .await
            .map_err(|e| e.to_string())
    });
    let uri = "/apis/batch/v1/namespaces/llm/jobs?";
    server
        .expect("POST", uri, Some(want.clone()), 201, want)
        .await;
    sent.await.expect("join").expect("created");
}

/// An agent pod as the API lists it: share `k` in `phase`, with its container's state.
fn agent_pod(k: u64, phase: &str, state: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("haq-agents-t0k3n-{k}-abcde"), "namespace": "llm",
            "labels": {"haq.dev/run": "t0k3n", "haq.dev/role": "agent"},
            "annotations": {"batch.kubernetes.io/job-completion-index": k.to_string()}},
        "spec": {"containers": [{"name": "agent", "image": "haq:dev"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "agent", "ready": phase == "Running", "restartCount": 0, "image": "haq:dev", "imageID": "", "state": state}]}
    })
}

fn running() -> Value {
    json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}})
}

/// A trace in `dir`, and the coordinator's clock.
struct Coordinator {
    dir: PathBuf,
    clock: Clock,
    tw: TraceWriter,
    handle: crate::trace::TraceHandle,
}

impl Coordinator {
    fn new(tag: &str) -> Coordinator {
        let dir = scratch(tag);
        let (tw, handle) = TraceWriter::create(&dir.join("trace.jsonl")).expect("trace");
        Coordinator {
            dir,
            clock: Clock::start(),
            tw,
            handle,
        }
    }

    fn watch(&self, api: Api, n: u64) -> Watch {
        Watch {
            api: Arc::new(api),
            token: "t0k3n".into(),
            notes: (0..n)
                .map(|k| AgentNote {
                    agent: crate::workload::agent_name(k),
                    share: k,
                    of: n,
                    deadline_us: Some(1_000),
                    ..Default::default()
                })
                .collect(),
            clock: self.clock,
            tw: self.tw.clone(),
            poll: Duration::from_millis(20),
        }
    }

    /// The agent observations written: (what, note).
    fn ends(self) -> Vec<(AgentState, AgentNote)> {
        drop(self.tw);
        self.handle.finish().expect("finish");
        crate::trace::read(&self.dir.join("trace.jsonl"))
            .expect("read")
            .filter_map(|e| AgentNote::read(&e.expect("event")))
            .collect()
    }
}

fn assignment(k: u64, n: u64, dir: &std::path::Path) -> Assignment {
    Assignment {
        index: k,
        count: n,
        seed: 7,
        epoch_mono_ns: 0,
        epoch_wall_ns: 0,
        start_us: 1_000,
        api_url: "http://gateway.llm.svc:8080/v1".into(),
        replicas: Vec::new(),
        marker: crate::scenario::MarkerField::default(),
        token: "0badc0de".into(),
        run_dir: dir.to_path_buf(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_trace_and_result_come_back_over_the_endpoint_and_end_it_done() {
    let c = Coordinator::new("collect");
    let served = Served {
        clock: c.clock,
        key: "s3cr3t".into(),
        run_dir: c.dir.clone(),
        scenario: "{\"name\": \"k\"}".into(),
        assignments: vec![assignment(0, 1, &c.dir)],
    };
    let ep = endpoint::serve("127.0.0.1:0", served).await.expect("serve");
    let url = format!("http://{}", ep.addr);
    // Another run's key is refused.
    let wrong = Remote::new(&url, "other").expect("client");
    assert!(wrong.scenario().await.is_err());
    // The agent's side: its assignment, the scenario, the clock, its trace and result.
    let remote = Remote::new(&url, "s3cr3t").expect("client");
    assert_eq!(
        remote.assignment(0).await.expect("assignment"),
        assignment(0, 1, &c.dir)
    );
    assert_eq!(
        remote.scenario().await.expect("scenario"),
        json!({"name": "k"})
    );
    let synced = remote.sync().await.expect("sync");
    let (theirs, ours) = (synced.clock.now_us(), c.clock.now_us());
    assert!(
        theirs.abs_diff(ours) <= synced.rtt_us + 2_000,
        "the agent's trace time {theirs} µs against the coordinator's {ours} (round trip {} µs)",
        synced.rtt_us
    );
    assert!(synced.offset_us.abs() < 5_000, "{}", synced.offset_us);
    let work = scratch("collect-work");
    let trace = work.join("trace.jsonl");
    std::fs::write(&trace, "{\"ev\":\"request\"}\n".repeat(10_000)).expect("trace");
    remote.send_trace(0, &trace).await.expect("trace sent");
    let result = AgentResult {
        index: 0,
        count: 1,
        ready_us: 500,
        late: false,
        sent: 17,
        left_us: 42,
        offset_us: synced.offset_us,
        sync_rtt_us: Some(synced.rtt_us),
        sync_drift_us: Some(-3),
    };
    remote.send_result(&result).await.expect("result sent");
    let kept = c.dir.join("agents/agent-0");
    assert_eq!(
        std::fs::read(kept.join("trace.jsonl")).expect("kept"),
        std::fs::read(&trace).expect("sent")
    );
    assert!(kept.join("result.json").exists());
    // The watch takes the result and ends the agent done.
    let (client, mut server) = mock::pair();
    let w = c.watch(
        Api {
            client,
            ns: "llm".into(),
        },
        1,
    );
    let watch = tokio::spawn(pods::watch(w, ep.results, CancellationToken::new()));
    let pod = agent_pod(0, "Running", running());
    server
        .expect(
            "GET",
            AGENT_PODS,
            None,
            200,
            list("PodList", vec![pod], "9"),
        )
        .await;
    let ended = watch.await.expect("watch");
    assert_eq!(ended.left_us, 42);
    assert_eq!(ended.pods.len(), 1);
    server.no_more(Duration::from_millis(100)).await;
    let ends = c.ends();
    assert_eq!(ends.len(), 1, "{ends:?}");
    let (state, note) = &ends[0];
    assert_eq!(*state, AgentState::Done);
    assert_eq!(
        (note.sent, note.sync_rtt_us, note.pod.as_deref()),
        (
            Some(17),
            Some(synced.rtt_us),
            Some("haq-agents-t0k3n-0-abcde")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_pod_that_fails_exits_without_its_result_or_never_starts_is_lost() {
    let c = Coordinator::new("lost");
    let (client, mut server) = mock::pair();
    let w = c.watch(
        Api {
            client,
            ns: "llm".into(),
        },
        4,
    );
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(u64, AgentResult)>();
    let stop = CancellationToken::new();
    let watch = tokio::spawn(pods::watch(w, rx, stop.clone()));
    let oom = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}});
    let ok = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
    let pull = json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"haq:dev\""}});
    let pods = |zero: &str| {
        list(
            "PodList",
            vec![
                agent_pod(
                    0,
                    zero,
                    if zero == "Succeeded" {
                        ok.clone()
                    } else {
                        running()
                    },
                ),
                agent_pod(1, "Failed", oom.clone()),
                agent_pod(2, "Pending", pull.clone()),
            ],
            "9",
        )
    };
    // agent-1's pod is OOM-killed; agent-0's exits 0 but its result never comes.
    server
        .expect("GET", AGENT_PODS, None, 200, pods("Running"))
        .await;
    server
        .expect("GET", AGENT_PODS, None, 200, pods("Succeeded"))
        .await;
    server
        .expect("GET", AGENT_PODS, None, 200, pods("Succeeded"))
        .await;
    // The coordinator stops waiting: agent-2 never started, agent-3 has no pod at all.
    stop.cancel();
    drop(tx);
    let ended = watch.await.expect("watch");
    assert_eq!(ended.pods.len(), 3);
    let ends = c.ends();
    let lost: Vec<(String, String)> = ends
        .iter()
        .map(|(s, n)| {
            assert_eq!(*s, AgentState::Lost, "{n:?}");
            (n.agent.clone(), n.reason.clone().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        lost,
        vec![
            ("agent-1".to_string(), "its pod haq-agents-t0k3n-1-abcde (Failed: terminated: OOMKilled, exit code 137) (its log: agent.log)".to_string()),
            ("agent-0".to_string(), "its pod haq-agents-t0k3n-0-abcde exited 0 but its result.json never reached haq".to_string()),
            ("agent-2".to_string(), "never started: its pod haq-agents-t0k3n-2-abcde (Pending: waiting: ImagePullBackOff (Back-off pulling image \"haq:dev\"))".to_string()),
            ("agent-3".to_string(), "never started: no pod of its index was seen".to_string()),
        ]
    );
}

#[test]
fn the_pods_reach_the_endpoint_at_advertise_the_listen_address_or_pod_ip() {
    let p = plan();
    let mut cfg = p.scenario.agents.kubernetes.clone().expect("agents");
    let any: std::net::SocketAddr = "0.0.0.0:7070".parse().expect("addr");
    let one: std::net::SocketAddr = "10.1.2.3:7070".parse().expect("addr");
    assert_eq!(
        super::kube::advertised(&cfg, one).expect("url"),
        "http://10.1.2.3:7070"
    );
    if std::env::var_os("POD_IP").is_none() {
        let e = super::kube::advertised(&cfg, any).expect_err("nowhere");
        assert!(e.to_string().contains("set `advertise`"), "{e}");
    }
    cfg.advertise = Some("http://172.18.0.1:7070/".into());
    assert_eq!(
        super::kube::advertised(&cfg, any).expect("url"),
        "http://172.18.0.1:7070"
    );
}

#[test]
fn agents_on_kubernetes_need_a_kubernetes_target_and_readable_credentials() {
    let sim = crate::plan::load(
        std::path::Path::new("scenarios/quickstart.yaml"),
        &["agents.kubernetes={image: 'haq:dev', scenario_config_map: s}".to_string()],
        None,
    );
    let e = sim.expect_err("a sim target").to_string();
    assert!(e.contains("needs `target.kind: kubernetes`"), "{e}");
    let text = crate::plan::kubernetes::tests::kube_scenario();
    let file = crate::plan::load_str(
        &text,
        "k.yaml",
        std::path::Path::new("."),
        &[
            "agents.kubernetes={image: 'haq:dev', scenario_config_map: s}".to_string(),
            "target.headers={authorization: {file: /run/key}}".to_string(),
        ],
        None,
    );
    let e = file.expect_err("a file credential").to_string();
    assert!(
        e.contains("agent pods of `agents.kubernetes` do not have"),
        "{e}"
    );
}
