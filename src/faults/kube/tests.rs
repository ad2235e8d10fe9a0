//! Each kubernetes fault and its heal against kube-rs's mock API server: the exact
//! requests (method, path and query, body), the answers, and what is recorded.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::ledger::{Ledger, Remedy, open_entries};
use super::super::tests::{context, scratch};
use super::super::{Context, Injected, Undo, injector};
use super::exectests::env;
use crate::faults::{HealGuard, schedule};
use crate::scenario::FaultBackend;
use crate::target::kube::mock::{self, ApiServer, pod};
use crate::target::kube::tests::Trace;
use crate::target::kube::tests::plan;
use crate::target::kube::{PodInfo, replica};
use crate::target::registry::Replica;
use crate::trace::Event;

pub(super) const POD: &str = "/api/v1/namespaces/llm/pods/llama-b";

/// Replica `w2` on pod `llama-b` (node-a), reached through the mock, and the
/// context of a run whose ledger is in a scratch directory.
pub(super) fn setup(tag: &str) -> (Arc<Replica>, ApiServer, Context, std::path::PathBuf) {
    setup_with(tag, &[])
}

/// [`setup`] for the test scenario with `sets`.
pub(super) fn setup_with(
    tag: &str,
    sets: &[&str],
) -> (Arc<Replica>, ApiServer, Context, std::path::PathBuf) {
    let p = plan(sets);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, server) = mock::cluster(&k);
    let info = PodInfo {
        replica: "w2".into(),
        name: "llama-b".into(),
        uid: "u-b".into(),
        node: "node-a".into(),
        ip: "10.0.0.2".into(),
        container: "llama".into(),
        port: 8080,
        gpus: 0,
        gpu_ids: Vec::new(),
        gpu_ids_from: None,
        restarts: 0,
        owner: None,
    };
    let dir = scratch(tag);
    let mut cx = context(&dir);
    cx.ledger = Arc::new(Ledger::open(&dir).expect("ledger"));
    (replica(&cluster, info, "/health"), server, cx, dir)
}

/// Fires fault 0 of the test scenario with `sets` on `w2`.
pub(super) async fn fire(
    sets: &[&str],
    r: &Replica,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let p = plan(sets);
    injector(FaultBackend::Kubernetes)
        .inject(&p.faults[0], r, cx)
        .await
}

/// The fault is verified, its detail starting `start`.
pub(super) fn verified_as(inj: &Injected, start: &str) {
    assert!(
        inj.verified && inj.detail.starts_with(start),
        "{}",
        inj.detail
    );
}

/// Runs a heal as the guard does (off the async threads).
pub(super) async fn heal(mut u: Box<dyn Undo>) -> super::super::Healed {
    tokio::task::spawn_blocking(move || u.undo())
        .await
        .expect("heal")
}

/// The API server saw exactly the requests it expected, and no more.
pub(super) async fn done(server: tokio::task::JoinHandle<ApiServer>) {
    let api = server.await.expect("exact requests");
    api.no_more(std::time::Duration::from_millis(100)).await;
}

/// Answers the delete (grace 0) of pod `llama-b`: terminating.
async fn deleted(api: &mut ApiServer) {
    let grace0 = Some(json!({"gracePeriodSeconds": 0}));
    let uri = format!("{POD}?");
    api.expect("DELETE", &uri, grace0, 200, terminating(b()))
        .await;
}

pub(super) fn terminating(mut p: Value) -> Value {
    p["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
    p
}

pub(super) fn b() -> Value {
    pod("llama-b", "u-b", "node-a", "10.0.0.2", true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_kill_deletes_the_pod_with_grace_0_verified_by_its_absence() {
    let (r, mut api, cx, _) = setup("kill");
    let server = tokio::spawn(async move {
        let grace0 = Some(json!({"gracePeriodSeconds": 0}));
        deleted(&mut api).await;
        api.expect("GET", POD, None, 200, terminating(b())).await;
        api.refuse(
            "GET",
            POD,
            None,
            404,
            "NotFound",
            "pods \"llama-b\" not found",
        )
        .await;
        // Killed again: a StatefulSet's pod comes back under a new uid.
        deleted(&mut api).await;
        api.expect(
            "GET",
            POD,
            None,
            200,
            pod("llama-b", "u-b2", "node-a", "10.0.0.7", false),
        )
        .await;
        // Already gone: not applied.
        api.refuse(
            "DELETE",
            &format!("{POD}?"),
            grace0,
            404,
            "NotFound",
            "gone",
        )
        .await;
        api
    });
    let (inj, undo) = fire(&[], &r, &cx).await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(undo.is_none(), "a kill is not undone");
    assert!(
        inj.detail.starts_with(
            "deleted pod llama-b (uid u-b) with grace 0; pod llama-b gone from the API"
        ),
        "{}",
        inj.detail
    );
    let (inj, _) = fire(&[], &r, &cx).await;
    assert!(
        inj.verified && inj.detail.contains("recreated under a new uid u-b2"),
        "{}",
        inj.detail
    );
    let (inj, _) = fire(&[], &r, &cx).await;
    assert!(!inj.verified);
    assert_eq!(inj.detail, "pod llama-b was already gone before the delete");
    done(server).await;
}

const EVICT: &str = "/api/v1/namespaces/llm/pods/llama-b/eviction?";

fn eviction_body() -> Option<Value> {
    Some(json!({"delete_options": null, "metadata": {"name": "llama-b"}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_and_a_disruption_budget_blocks_it() {
    let (r, mut api, cx, _) = setup("drain");
    let server = tokio::spawn(async move {
        let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201});
        api.expect("POST", EVICT, eviction_body(), 201, ok).await;
        api.expect("GET", POD, None, 200, b()).await;
        api.expect("GET", POD, None, 200, terminating(b())).await;
        let pdb = "Cannot evict pod as it would violate the pod's disruption budget.";
        api.refuse("POST", EVICT, eviction_body(), 429, "TooManyRequests", pdb)
            .await;
        api
    });
    let drain = ["faults[0].domain=drain"];
    let (inj, _) = fire(&drain, &r, &cx).await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(inj.detail.contains("evicted pod llama-b (Eviction API); pod llama-b terminating (deletion timestamp 2026-12-01T00:00:00Z"), "{}", inj.detail);
    let (inj, _) = fire(&drain, &r, &cx).await;
    assert!(!inj.verified, "a blocked eviction is no success");
    assert!(inj.detail.starts_with("blocked: the eviction of pod llama-b was refused by a PodDisruptionBudget (429 TooManyRequests: Cannot evict"), "{}", inj.detail);
    done(server).await;
}

fn node(unschedulable: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}, "spec": {"unschedulable": unschedulable}})
}

const NODE: &str = "/api/v1/nodes/node-a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fault_cordons_evicts_and_uncordons_on_heal() {
    let (r, mut api, cx, dir) = setup("node");
    let server = tokio::spawn(async move {
        api.expect("GET", NODE, None, 200, node(false)).await;
        let cordon = Some(json!({"spec": {"unschedulable": true}}));
        api.expect("PATCH", &format!("{NODE}?"), cordon, 200, node(true))
            .await;
        let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201});
        api.expect("POST", EVICT, eviction_body(), 201, ok).await;
        api.refuse("GET", POD, None, 404, "NotFound", "gone").await;
        // The heal.
        let uncordon = Some(json!({"spec": {"unschedulable": false}}));
        api.expect("PATCH", &format!("{NODE}?"), uncordon, 200, node(false))
            .await;
        // A node someone else cordoned is left so: no patch, no heal.
        api.expect("GET", NODE, None, 200, node(true)).await;
        api.refuse(
            "DELETE",
            &format!("{POD}?"),
            Some(json!({"gracePeriodSeconds": 0})),
            404,
            "NotFound",
            "gone",
        )
        .await;
        api
    });
    let (inj, undo) = fire(
        &["faults[0].domain=node", "faults[0].action=drain"],
        &r,
        &cx,
    )
    .await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(
        inj.detail
            .starts_with("node node-a cordoned; evicted pod llama-b"),
        "{}",
        inj.detail
    );
    let open = open_entries(&dir).expect("ledger").0;
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].remedy,
        Remedy::KubeUncordon {
            context: "kind-haq".into(),
            node: "node-a".into()
        }
    );
    let h = heal(undo.expect("a cordon is undone")).await;
    assert!(h.verified, "{}", h.detail);
    assert_eq!(h.detail, "node node-a uncordoned (schedulable again)");
    assert!(
        open_entries(&dir).expect("ledger").0.is_empty(),
        "the heal is recorded"
    );
    let (inj, undo) = fire(&["faults[0].domain=node"], &r, &cx).await;
    assert!(undo.is_none());
    assert!(
        inj.detail.starts_with(
            "node node-a was already cordoned (left so on heal); pod llama-b was already gone"
        ),
        "{}",
        inj.detail
    );
    done(server).await;
}

const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_fault_isolates_the_pod_with_a_labelled_network_policy_removed_on_heal() {
    let (r, mut api, cx, dir) = setup("net");
    let policy = "haq-t0k3n-blackhole-w2-w2";
    let server = tokio::spawn(async move {
        let label = Some(json!({"metadata": {"labels": {"haq.dev/isolate": "t0k3n-w2"}}}));
        let mut labelled = b();
        labelled["metadata"]["labels"]["haq.dev/isolate"] = json!("t0k3n-w2");
        api.expect(
            "PATCH",
            &format!("{POD}?&fieldManager=haq"),
            label,
            200,
            labelled,
        )
        .await;
        let np = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": policy, "labels": {"haq.dev/run": "t0k3n", "haq.dev/fault": "blackhole-w2"}},
            "spec": {"podSelector": {"matchLabels": {"haq.dev/isolate": "t0k3n-w2"}}, "policyTypes": ["Ingress"], "ingress": []}
        });
        api.expect(
            "POST",
            &format!("{POLICIES}?"),
            Some(np.clone()),
            201,
            np.clone(),
        )
        .await;
        api.expect("GET", &format!("{POLICIES}/{policy}"), None, 200, np)
            .await;
        // The heal: the policy deleted, the label removed, the policy gone.
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        api.expect(
            "DELETE",
            &format!("{POLICIES}/{policy}?"),
            Some(json!({})),
            200,
            status,
        )
        .await;
        let unlabel = Some(json!({"metadata": {"labels": {"haq.dev/isolate": null}}}));
        api.expect(
            "PATCH",
            &format!("{POD}?&fieldManager=haq"),
            unlabel,
            200,
            b(),
        )
        .await;
        api.refuse(
            "GET",
            &format!("{POLICIES}/{policy}"),
            None,
            404,
            "NotFound",
            "gone",
        )
        .await;
        api
    });
    let (inj, undo) = fire(&["faults[0].domain=network"], &r, &cx).await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(
        inj.detail.starts_with(&format!(
            "NetworkPolicy {policy} admits no ingress to pod llama-b"
        )),
        "{}",
        inj.detail
    );
    let open = open_entries(&dir).expect("ledger").0;
    assert!(
        matches!(&open[0].remedy, Remedy::KubeIsolation { policy: p, pod, .. } if p == policy && pod == "llama-b"),
        "{open:?}"
    );
    let h = heal(undo.expect("an isolation is undone")).await;
    assert!(h.verified, "{}", h.detail);
    assert_eq!(
        h.detail,
        format!("NetworkPolicy {policy} deleted; label haq.dev/isolate removed from pod llama-b")
    );
    assert!(open_entries(&dir).expect("ledger").0.is_empty());
    done(server).await;
}

fn restarted(n: i32) -> Value {
    let mut p = b();
    p["status"]["containerStatuses"][0]["restartCount"] = json!(n);
    p["status"]["containerStatuses"][0]["lastState"] =
        json!({"terminated": {"exitCode": 137, "reason": "Error"}});
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_kill_execs_in_the_container_verified_by_its_restart() {
    let (r, mut api, cx, _) = setup("exec");
    let exec = format!(
        "{POD}/exec?&stdout=true&stderr=true&container=llama&command=pkill&command=-KILL&command=llama-server"
    );
    let server = tokio::spawn(async move {
        api.expect("GET", POD, None, 200, b()).await;
        // No websocket upgrade here: the exec's own outcome is unknown, the API decides.
        api.expect("GET", &exec, None, 200, json!({})).await;
        api.expect("GET", POD, None, 200, b()).await;
        api.expect("GET", POD, None, 200, restarted(1)).await;
        // Refused by RBAC: not applied, nothing verified.
        api.expect("GET", POD, None, 200, restarted(1)).await;
        api.refuse(
            "GET",
            &exec,
            None,
            403,
            "Forbidden",
            "cannot create resource \"pods/exec\"",
        )
        .await;
        api
    });
    let gpu = [
        "faults[0].domain=gpu",
        "faults[0].exec=[pkill, -KILL, llama-server]",
    ];
    let (inj, _) = fire(&gpu, &r, &cx).await;
    verified_as(
        &inj,
        "exec `pkill -KILL llama-server` in llama-b/llama: the exec stream failed",
    );
    assert!(
        inj.detail.contains(
            "container llama restarted (0 → 1 restarts; last terminated with exit code 137 (Error))"
        ),
        "{}",
        inj.detail
    );
    let (inj, _) = fire(&gpu, &r, &cx).await;
    assert!(!inj.verified);
    assert!(
        inj.detail
            .starts_with("exec `pkill -KILL llama-server` in llama-b/llama refused: 403 Forbidden"),
        "{}",
        inj.detail
    );
    done(server).await;
}

/// A command fault on a kubernetes replica (a DCGM recipe, a kubectl command) gets
/// the pod, namespace, container and context in its environment.
#[tokio::test]
async fn a_command_fault_sees_the_replicas_pod() {
    let (r, _api, cx, _) = setup("env");
    let f = &plan(&[
        "faults[0].backend=command",
        "faults[0].action=command",
        "faults[0].command={inject: 'true', verify: 'true'}",
    ])
    .faults[0];
    let env = super::super::command::env(f, &r, &cx);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("HAQ_POD"), Some("llama-b"));
    assert_eq!(get("HAQ_NAMESPACE"), Some("llm"));
    assert_eq!(get("HAQ_CONTAINER"), Some("llama"));
    assert_eq!(get("HAQ_NODE"), Some("node-a"));
    assert_eq!(get("HAQ_KUBE_CONTEXT"), Some("kind-haq"));
    // No GPU ids stated by the pod: empty (the count is in the trace).
    assert_eq!(get("HAQ_GPU_IDS"), Some(""));
}

/// `grace: pod` deletes the pod with its own grace period (the delete names none) and
/// `grace: 5` with five seconds: SIGTERM first, so the pod terminating verifies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_kill_with_a_grace_period_is_verified_by_the_pod_terminating() {
    let (r, mut api, cx, _) = setup("grace");
    let server = tokio::spawn(async move {
        let uri = format!("{POD}?");
        api.expect("DELETE", &uri, Some(json!({})), 200, terminating(b()))
            .await;
        api.expect("GET", POD, None, 200, terminating(b())).await;
        let five = Some(json!({"gracePeriodSeconds": 5}));
        api.expect("DELETE", &uri, five, 200, b()).await;
        api.expect("GET", POD, None, 200, b()).await;
        api.expect("GET", POD, None, 200, terminating(b())).await;
        api
    });
    let (inj, undo) = fire(&["faults[0].grace=pod"], &r, &cx).await;
    assert!(undo.is_none());
    verified_as(
        &inj,
        "deleted pod llama-b (uid u-b) with its own grace period; pod llama-b terminating (deletion timestamp 2026-12-01T00:00:00Z, its own grace period)",
    );
    let (inj, _) = fire(&["faults[0].grace=5"], &r, &cx).await;
    verified_as(
        &inj,
        "deleted pod llama-b (uid u-b) with grace 5; pod llama-b terminating",
    );
    done(server).await;
}

/// Pods `llama-a` and `llama-b` each deleted (grace 0) and read back gone, in whatever
/// order the two injections send them.
async fn both_deleted(api: &mut ApiServer) {
    let a = pod("llama-a", "u-a", "node-a", "10.0.0.1", true);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (req, send) = api.next().await;
        let answer = match req.as_str() {
            "DELETE /api/v1/namespaces/llm/pods/llama-a?" => (200, terminating(a.clone())),
            "DELETE /api/v1/namespaces/llm/pods/llama-b?" => (200, terminating(b())),
            "GET /api/v1/namespaces/llm/pods/llama-a"
            | "GET /api/v1/namespaces/llm/pods/llama-b" => (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "gone"}),
            ),
            other => panic!("unexpected request {other}"),
        };
        ApiServer::answer(send, answer.0, answer.1);
        seen.push(req);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "DELETE /api/v1/namespaces/llm/pods/llama-a?",
            "DELETE /api/v1/namespaces/llm/pods/llama-b?",
            "GET /api/v1/namespaces/llm/pods/llama-a",
            "GET /api/v1/namespaces/llm/pods/llama-b",
        ]
    );
}

/// Replica `who` on pod `name` (uid `uid`, IP `ip`) of `node`, in w2's cluster.
fn sibling(w2: &Replica, who: &str, name: &str, uid: &str, node: &str, ip: &str) -> Arc<Replica> {
    let p = w2.pod().expect("pod");
    let mut info = p.pod.clone();
    (info.replica, info.name, info.uid, info.node, info.ip) =
        (who.into(), name.into(), uid.into(), node.into(), ip.into());
    replica(&p.cluster, info, "/health")
}

/// A node fault the scenario declares on ONE replica (w2), fired by the fault
/// schedule: `faults::fire::declared` widens it to every selected replica on w2's
/// node — w1's pod there too, not w3's on another node. One cordon, both pods
/// deleted, one uncordon when the load ends; the trace records both replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fault_declared_on_one_replica_takes_every_selected_pod_of_its_node() {
    let sets = ["faults[0].domain=node", "faults[0].at={phase: baseline}"];
    let (w2, mut api, cx, dir) = setup_with("node-widen", &sets);
    let w1 = sibling(&w2, "w1", "llama-a", "u-a", "node-a", "10.0.0.1");
    let w3 = sibling(&w2, "w3", "llama-c", "u-c", "node-b", "10.0.0.3");
    let (applied, deleted) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        api.expect("GET", NODE, None, 200, node(false)).await;
        let cordon = Some(json!({"spec": {"unschedulable": true}}));
        api.expect("PATCH", &format!("{NODE}?"), cordon, 200, node(true))
            .await;
        both_deleted(&mut api).await;
        let _ = applied.send(());
        let uncordon = Some(json!({"spec": {"unschedulable": false}}));
        api.expect("PATCH", &format!("{NODE}?"), uncordon, 200, node(false))
            .await;
        api
    });
    let trace = Trace::new("node-widen");
    let guard = HealGuard::new(trace.tw.clone(), cx.clock);
    let env = env(vec![w1, w2, w3], &cx, trace.tw.clone(), &guard);
    let faults = tokio::spawn(schedule::run(plan(&sets).faults.clone(), env.clone()));
    // (Were the fault not widened, w1's pod would never be deleted: fail, not hang.)
    let limit = std::time::Duration::from_secs(30);
    let deleted = tokio::time::timeout(limit, deleted).await;
    deleted.expect("in time").expect("both pods deleted");
    // The load ends: the cordon is healed then, and the fault's task ends.
    env.load_done.cancel();
    faults.await.expect("faults");
    let api = server.await.expect("exact requests");
    api.no_more(std::time::Duration::from_millis(100)).await;
    drop((env, guard));
    let events = trace.events();
    let mut hit: Vec<(String, bool, Option<String>)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault(f) => Some((f.replica.clone(), f.verified, f.node.clone())),
            _ => None,
        })
        .collect();
    hit.sort();
    let on_a = Some("node-a".to_string());
    assert_eq!(
        hit,
        [("w1".into(), true, on_a.clone()), ("w2".into(), true, on_a)]
    );
    let heals: Vec<(&str, Option<bool>)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Heal {
                detail, verified, ..
            } => Some((detail.as_str(), *verified)),
            _ => None,
        })
        .collect();
    assert_eq!(
        heals,
        [(
            "the load ended: node node-a uncordoned (schedulable again)",
            Some(true)
        )]
    );
    assert!(open_entries(&dir).expect("ledger").0.is_empty(), "healed");
}

/// A node fault on a replica whose node runs two selected pods hits both at once (as
/// `faults::fire` does): the node is read and cordoned once — the second injection
/// waits for the first and finds it done — both pods are deleted, and only the
/// injection that cordoned heals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fault_on_two_pods_of_one_node_cordons_it_once() {
    let (w2, mut api, cx, dir) = setup_with("node-twice", &["faults[0].domain=node"]);
    let w1 = sibling(&w2, "w1", "llama-a", "u-a", "node-a", "10.0.0.1");
    let server = tokio::spawn(async move {
        api.expect("GET", NODE, None, 200, node(false)).await;
        let cordon = Some(json!({"spec": {"unschedulable": true}}));
        api.expect("PATCH", &format!("{NODE}?"), cordon, 200, node(true))
            .await;
        both_deleted(&mut api).await;
        // The heal: one uncordon.
        let uncordon = Some(json!({"spec": {"unschedulable": false}}));
        api.expect("PATCH", &format!("{NODE}?"), uncordon, 200, node(false))
            .await;
        api
    });
    let p = plan(&["faults[0].domain=node"]);
    let inj = injector(FaultBackend::Kubernetes);
    let (one, two) = tokio::join!(
        inj.inject(&p.faults[0], &w2, &cx),
        inj.inject(&p.faults[0], &w1, &cx)
    );
    let fault = &p.faults[0].name;
    let mut undos = Vec::new();
    let mut winner = None;
    let mut firsts = Vec::new();
    for (name, (i, undo)) in [("w2", one), ("w1", two)] {
        assert!(i.verified, "{}", i.detail);
        if undo.is_some() {
            winner = Some(name);
        }
        firsts.push(i.detail.split("; ").next().unwrap_or_default().to_string());
        undos.extend(undo);
    }
    let winner = winner.expect("one injection cordoned");
    firsts.sort();
    assert_eq!(
        firsts,
        [
            "node node-a cordoned".to_string(),
            format!("node node-a cordoned by {fault} (with {winner}'s pod)"),
        ]
    );
    assert_eq!(undos.len(), 1, "one cordon, one heal");
    assert_eq!(open_entries(&dir).expect("ledger").0.len(), 1);
    let h = heal(undos.pop().expect("the heal")).await;
    assert!(h.verified, "{}", h.detail);
    done(server).await;
}

/// `target.kubernetes.metrics` makes each pod's Prometheus metrics read at the pod's
/// address, path and port (a local server stands in for the pod's IP); without it a
/// kubernetes replica is not scraped at all.
#[tokio::test]
async fn a_pods_metrics_are_scraped_only_when_the_target_asks() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let hits = Arc::new(AtomicU32::new(0));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/stats/prom",
        axum::routing::get(move || {
            h.fetch_add(1, Ordering::Relaxed);
            async { "llamacpp:kv_cache_usage_ratio 0.25\nllamacpp:requests_processing 2\n" }
        }),
    );
    tokio::spawn(axum::serve(l, app).into_future());
    let at_local = |r: &Replica| {
        let p = r.pod().expect("pod");
        let mut info = p.pod.clone();
        info.ip = "127.0.0.1".into();
        replica(&p.cluster, info, "/health")
    };
    crate::wire::tls::install_crypto_provider();
    let http = reqwest::Client::new();
    let asked = format!("target.kubernetes.metrics={{path: /stats/prom, port: {port}}}");
    let (r, _api, _, _) = setup_with("metrics", &[&asked]);
    let r = at_local(&r);
    let url = crate::faults::scrape::url(&r);
    assert_eq!(url, Some(format!("http://127.0.0.1:{port}/stats/prom")));
    let (engine, m) = crate::faults::scrape::read(&http, &r)
        .await
        .expect("the pod's metrics");
    assert_eq!(
        (engine, m["kv_usage"], m["running"]),
        ("llamacpp", 0.25, 2.0)
    );
    let (r, _api, _, _) = setup_with("no-metrics", &[]);
    let r = at_local(&r);
    assert_eq!(crate::faults::scrape::url(&r), None);
    assert!(crate::faults::scrape::read(&http, &r).await.is_none());
    assert_eq!(hits.load(Ordering::Relaxed), 1, "read once, when asked");
}

/// A kubernetes kill with no target, fired by its probe (`when: {probe: queued}`): the
/// probe goes through haq's proxy in front of w2 — the gateway forwards only the body,
/// whose marker names the probe — the proxy holds it there, and the pod deleted is
/// the one of the replica the proxy saw serving it (w2's llama-b), learned at run
/// time, not declared. The trace records the fault on w2 with its probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_fired_kill_deletes_the_pod_of_the_replica_the_proxy_saw_serve_the_probe() {
    let listen = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listen.set_nonblocking(true).expect("nonblocking");
    let at = listen.local_addr().expect("addr");
    // Every replica proxied (the plan's rule for a probe); only w2's is started here.
    let proxies = format!(
        "target.kubernetes.proxies={{w1: \"127.0.0.1:1\", w2: \"{at}\", w3: \"127.0.0.1:2\"}}"
    );
    let sets = [
        "faults[0]={name: kill-probed, backend: kubernetes, domain: worker, action: kill, at: {phase: baseline}, when: {probe: queued}}",
        proxies.as_str(),
    ];
    let (w2, mut api, cx, _) = setup_with("probe-kill", &sets);
    // The "pod" behind the proxy: never reached, the probe is held before it.
    let pod_at = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let spec = crate::proxy::ProxySpec {
        name: "w2".into(),
        listen: at,
        upstream: Some(pod_at.local_addr().expect("addr").to_string()),
    };
    let trace = Trace::new("probe-kill");
    let set = crate::proxy::ProxySet::from_listeners(&[spec], vec![listen], &trace.tw, &cx.clock)
        .expect("the proxy");
    let token = crate::wire::marker::RunToken::from_u32(0x5eed);
    set.board().set_run_token(token);
    let p = w2.pod().expect("pod");
    let w2 =
        crate::target::kube::proxied(&p.cluster, p.pod.clone(), "/health", set.get("w2").cloned());
    let w1 = sibling(&w2, "w1", "llama-a", "u-a", "node-a", "10.0.0.1");
    let server = tokio::spawn(async move {
        deleted(&mut api).await;
        api.refuse("GET", POD, None, 404, "NotFound", "gone").await;
        api
    });
    let guard = HealGuard::new(trace.tw.clone(), cx.clock);
    let mut env = env(vec![w1, w2], &cx, trace.tw.clone(), &guard);
    let e = Arc::get_mut(&mut env).expect("the only handle");
    e.board = Some(set.board().clone());
    e.probes.url = format!("http://{at}/v1/chat/completions");
    e.probes.marker = crate::workload::BodyMarker {
        field: crate::scenario::MarkerField::User,
        token,
    };
    let faults = tokio::spawn(schedule::run(plan(&sets).faults.clone(), env.clone()));
    let limit = std::time::Duration::from_secs(30);
    let api = tokio::time::timeout(limit, server).await;
    let api = api
        .expect("the pod deleted in time")
        .expect("exact requests");
    env.load_done.cancel();
    env.stop.cancel();
    tokio::time::timeout(limit, faults)
        .await
        .expect("the fault's task ends")
        .expect("faults");
    api.no_more(std::time::Duration::from_millis(100)).await;
    set.stop();
    drop((env, guard));
    let fault: Vec<(String, bool, Option<String>)> = trace
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Fault(f) => Some((f.replica, f.verified, f.probe)),
            _ => None,
        })
        .collect();
    assert_eq!(
        fault,
        [("w2".into(), true, Some("probe-kill-probed".into()))]
    );
}
