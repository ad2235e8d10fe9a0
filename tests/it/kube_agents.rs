//! `haq run --agents N` with `agents.kubernetes` (issue 17 item 1, docs/agents.md), end
//! to end with no cluster: the coordinator creates its Indexed Job on a fake API server
//! (kube-rs's tower-test mock behind a `kube::Client`), which plays the Job controller
//! and the kubelet — it starts `haq agent` for each completion index from the Job's own
//! container args and env, with `JOB_COMPLETION_INDEX`, and reports each as a pod. So
//! the Job's spec is what starts the agents, each agent sets its clock by the exchange
//! with the coordinator's endpoint and returns its trace over HTTP, and the merged run
//! is judged. The target is the embedded sim. A pod killed mid-run makes the run
//! INVALID, naming its agent.
//!
//! On a real cluster: `real_cluster_agents_in_an_indexed_job` (ignored; its comment has
//! the kind and k3d commands).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use haq::RunResult;
use haq::engine::RunOptions;
use haq::engine::agents::{Agents, OnKube};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agents::{SCENARIO, sets};
use crate::support::{haq_bin, plan, root, scratch};

/// One agent "pod": its process and where its stderr goes.
struct PodProc {
    child: tokio::process::Child,
    log: PathBuf,
    exit: Option<std::process::ExitStatus>,
}

/// The fake cluster: the Job controller and the kubelet of one Indexed Job.
struct Fake {
    dir: PathBuf,
    pods: BTreeMap<u64, PodProc>,
    /// Kill this index once its trace holds this many requests.
    kill: Option<(u64, usize)>,
}

impl Fake {
    /// `POST …/jobs`: one `haq agent` per completion index, from the Job's container.
    fn create(&mut self, job: &Value) {
        let n = job["spec"]["completions"].as_u64().expect("completions");
        assert_eq!(job["spec"]["completionMode"], "Indexed");
        let c = &job["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<String> = c["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect();
        for k in 0..n {
            let log = self.dir.join(format!("pod-{k}.log"));
            let mut cmd = tokio::process::Command::new(haq_bin());
            cmd.args(&args)
                .env("JOB_COMPLETION_INDEX", k.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log"))
                .kill_on_drop(true);
            for e in c["env"].as_array().expect("env") {
                cmd.env(
                    e["name"].as_str().expect("name"),
                    e["value"].as_str().expect("value"),
                );
            }
            let child = cmd.spawn().expect("agent started");
            self.pods.insert(
                k,
                PodProc {
                    child,
                    log,
                    exit: None,
                },
            );
        }
    }

    /// `GET …/pods?labelSelector=…`: each process as a pod.
    fn list(&mut self) -> Value {
        use std::os::unix::process::ExitStatusExt;
        if let Some((k, at)) = self.kill
            && let Some(p) = self.pods.get_mut(&k)
            && let Some(pid) = p.child.id()
        {
            let trace = std::env::temp_dir().join(format!("haq-agent-{k}-{pid}/trace.jsonl"));
            let sent = std::fs::read_to_string(trace)
                .map(|t| t.matches("\"ev\":\"request\"").count())
                .unwrap_or(0);
            if sent >= at {
                let _ = p.child.start_kill();
                self.kill = None;
            }
        }
        let mut items = Vec::new();
        for (k, p) in &mut self.pods {
            if p.exit.is_none() {
                p.exit = p.child.try_wait().expect("wait");
            }
            let (phase, state) = match p.exit {
                None => ("Running", json!({"running": {}})),
                Some(s) => {
                    let code = s.code().unwrap_or(128 + s.signal().unwrap_or(0));
                    let phase = if code == 0 { "Succeeded" } else { "Failed" };
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    (
                        phase,
                        json!({"terminated": {"exitCode": code, "reason": reason}}),
                    )
                }
            };
            items.push(json!({
                "metadata": {"name": format!("haq-agents-{k}-x"),
                    "annotations": {"batch.kubernetes.io/job-completion-index": k.to_string()}},
                "status": {"phase": phase, "containerStatuses": [{"name": "agent", "ready": phase == "Running",
                    "restartCount": 0, "image": "haq:dev", "imageID": "", "state": state}]}
            }));
        }
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})
    }

    fn log(&self, pod: &str) -> String {
        let k: u64 = pod
            .trim_start_matches("haq-agents-")
            .trim_end_matches("-x")
            .parse()
            .expect("index");
        std::fs::read_to_string(&self.pods[&k].log).unwrap_or_default()
    }
}

/// Answers the coordinator's API calls until it drops its client; the calls made.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    mut fake: Fake,
) -> Vec<String> {
    let mut calls = Vec::new();
    while let Some((req, send)) = handle.next_request().await {
        let (parts, body) = req.into_parts();
        let body = body.collect_bytes().await.expect("body");
        let (m, uri) = (parts.method.to_string(), parts.uri.to_string());
        let path = uri.split('?').next().unwrap_or_default().to_string();
        calls.push(format!("{m} {path}"));
        let answer = match m.as_str() {
            "POST" if path.ends_with("/jobs") => {
                let job: Value = serde_json::from_slice(&body).expect("a Job");
                fake.create(&job);
                job.to_string()
            }
            "GET" if path.ends_with("/log") => {
                let pod = path.rsplit('/').nth(1).expect("pod");
                fake.log(pod)
            }
            "GET" => fake.list().to_string(),
            "DELETE" => {
                for p in fake.pods.values_mut() {
                    let _ = p.child.start_kill();
                }
                json!({"kind": "Status", "status": "Success"}).to_string()
            }
            _ => panic!("unexpected call {m} {uri}"),
        };
        send.send_response(Response::new(Body::from(answer.into_bytes())));
    }
    calls
}

async fn run_on_fake(
    name: &str,
    agents: u64,
    kill: Option<(u64, usize)>,
) -> (RunResult, Vec<String>) {
    haq::install_crypto_provider();
    let s = sets();
    let p = plan(SCENARIO, &s.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = scratch(name);
    let cfg: haq::scenario::KubeAgents = serde_json::from_value(json!({
        "image": "haq:dev",
        "scenario_config_map": "haq-scenarios",
        "scenario_dir": root().join("scenarios"),
        "listen": "127.0.0.1:0",
        "start_within": "5s",
    }))
    .expect("agents.kubernetes");
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let fake = Fake {
        dir: dir.clone(),
        pods: BTreeMap::new(),
        kill,
    };
    let api = tokio::spawn(serve(handle, fake));
    let opts = RunOptions {
        out: Some(dir.join("run")),
        reports_dir: dir,
        quiet: true,
        haq_bin: Some(haq_bin()),
        agents: Some(Agents {
            count: agents,
            scenario: root().join(SCENARIO),
            sets: s,
            kube: Some(OnKube {
                cfg,
                namespace: "haq-demo".into(),
                client: Some(kube::Client::new(svc, "haq-demo")),
                poll: std::time::Duration::from_millis(200),
            }),
        }),
    };
    let r = haq::run(p, opts, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    (r, api.await.expect("the fake API"))
}

/// The requests the merged trace holds, by id.
fn request_ids(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .filter(|e| e["ev"] == "request" && e.get("probe").is_none())
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_in_an_indexed_job_send_the_schedule_and_return_their_traces() {
    let (r, calls) = run_on_fake("kube-agents", 2, None).await;
    // The Job created, its pods read, each pod's log copied, the Job deleted.
    assert_eq!(calls[0], "POST /apis/batch/v1/namespaces/haq-demo/jobs");
    assert!(calls.contains(&"GET /api/v1/namespaces/haq-demo/pods".to_string()));
    assert!(calls.contains(&"GET /api/v1/namespaces/haq-demo/pods/haq-agents-1-x/log".to_string()));
    assert_eq!(
        calls.last().map(String::as_str),
        Some(
            format!(
                "DELETE /apis/batch/v1/namespaces/haq-demo/jobs/haq-agents-{}",
                token(&r)
            )
            .as_str()
        )
    );
    assert!(!r.judgement.invalid(), "{:?}", r.judgement.client.reasons());
    // Every request of the schedule once: r000000 … without a gap.
    let mut ids = request_ids(&r.run_dir);
    ids.sort();
    assert!(ids.len() > 30, "{} requests", ids.len());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(*id, format!("r{i:06}"));
    }
    let h = r.judgement.client.agents.as_ref().expect("agents");
    for (k, a) in h.agents.iter().enumerate() {
        let mine = ids
            .iter()
            .filter(|id| haq::workload::Share::of_id(id, 2) == Some(k as u64))
            .count() as u64;
        assert_eq!(
            (a.state, a.sent, a.reported),
            ("done", mine, Some(mine)),
            "{a:?}"
        );
        // Its clock set over the network (loopback: well under a millisecond).
        let sync = a.clock_sync_ms.expect("clock set by the exchange");
        assert!(sync < 20.0, "{a:?}");
        // One host's clock: no drift beyond the exchanges' precision.
        let drift = a.clock_drift_ms.expect("a second exchange after its share");
        assert!(drift.abs() < 20.0, "{a:?}");
        assert_eq!(a.pod.as_deref(), Some(format!("haq-agents-{k}-x").as_str()));
        let dir = r.run_dir.join(format!("agents/agent-{k}"));
        let log = std::fs::read_to_string(dir.join("agent.log")).expect("its log copied");
        assert!(log.contains("clock set by an exchange"), "{log}");
        assert!(dir.join("trace.jsonl").exists() && dir.join("result.json").exists());
    }
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(r.run_dir.join("report.json")).expect("report"),
    )
    .expect("json");
    crate::report::assert_valid_report(&report);
    assert!(report["client"]["agents"]["agents"][1]["clock_sync_ms"].is_number());
    assert_eq!(
        haq::check::judge_dir(&r.run_dir)
            .expect("judged")
            .1
            .result()
            .to_string(),
        r.judgement.result().to_string()
    );
}

fn token(r: &RunResult) -> String {
    let text = std::fs::read_to_string(r.run_dir.join(haq::trace::TRACE_FILE)).expect("trace");
    let first: Value = serde_json::from_str(text.lines().next().expect("a line")).expect("json");
    first["token"].as_str().expect("token").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_pod_killed_mid_run_makes_the_run_invalid_naming_it() {
    let (r, _) = run_on_fake("kube-agents-killed", 2, Some((1, 3))).await;
    let breach = crate::agents::agent_breach(&r, "agent-1");
    assert!(
        breach.contains(
            "was lost: its pod haq-agents-1-x (Failed: terminated: Error, exit code 137)"
        ),
        "{breach}"
    );
    let h = r.judgement.client.agents.as_ref().expect("agents");
    let states: Vec<&str> = h.agents.iter().map(|a| a.state).collect();
    assert_eq!(states, vec!["done", "lost"]);
}

/// The same on a real cluster: the coordinator in a pod (examples/kubernetes/
/// coordinator.yaml runs `haq run agents-kill-pod.yaml --agents 3`), its three agents an
/// Indexed Job on the cluster's nodes. This test applies the coordinator, waits for it
/// and reads its log. First (kind; for k3d: `k3d cluster create haq --agents 2` and
/// `k3d image import haq:dev -c haq` instead of the two kind lines):
///
/// ```text
/// kind create cluster --name haq --config examples/kubernetes/kind.yaml
/// docker build -t haq:dev -f examples/kubernetes/Dockerfile . && kind load docker-image haq:dev --name haq
/// kubectl apply -f examples/kubernetes/namespace.yaml -f examples/kubernetes/rbac.yaml \
///   -f examples/kubernetes/llama.yaml -f examples/kubernetes/gateway.yaml
/// kubectl -n haq-demo rollout status deploy/llama deploy/gateway --timeout=10m
/// cargo test --test it kube_agents::real_cluster -- --ignored
/// ```
#[test]
#[ignore = "needs a kind/k3d cluster with examples/kubernetes applied (see its comment)"]
fn real_cluster_agents_in_an_indexed_job() {
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .args(["-n", "haq-demo"])
            .args(args)
            .current_dir(root())
            .output()
            .expect("kubectl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let _ = kubectl(&["delete", "job", "haq-coordinator", "--ignore-not-found"]);
    let _ = kubectl(&["delete", "configmap", "haq-scenarios", "--ignore-not-found"]);
    let (ok, _, err) = kubectl(&[
        "create",
        "configmap",
        "haq-scenarios",
        "--from-file=examples/kubernetes/",
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = kubectl(&["apply", "-f", "examples/kubernetes/coordinator.yaml"]);
    assert!(ok, "{err}");
    // Complete (every verdict PASS) or failed (a FAIL, exit 1): either way it ran.
    let (_, _, _) = kubectl(&[
        "wait",
        "--for=condition=complete",
        "--timeout=10m",
        "job/haq-coordinator",
    ]);
    let (ok, log, err) = kubectl(&["logs", "job/haq-coordinator"]);
    assert!(ok, "{err}");
    assert!(log.contains("3 agents sent"), "{log}");
    assert!(log.contains("clocks set over the network"), "{log}");
    assert!(!log.contains("INVALID"), "{log}");
    // The agents' Job is gone with its pods.
    let (_, jobs, _) = kubectl(&["get", "jobs", "-l", "haq.dev/role=agent", "-o", "name"]);
    assert!(jobs.trim().is_empty(), "left behind: {jobs}");
}
