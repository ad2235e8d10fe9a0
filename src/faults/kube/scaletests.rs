//! `replacement: scale` against the mock API server: the exact requests of the
//! scale-down (that pod first), the scale back up a `restart` asks for, the heal, and
//! the refusals.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::ledger::{Remedy, open_entries};
use super::tests::{POD, b, done, fire, heal, setup_with, terminating, verified_as};
use crate::target::kube::calls::DELETION_COST;
use crate::target::kube::mock::{ApiServer, pod};
use crate::target::kube::pod::{Owner, PodRef};
use crate::target::kube::scale;
use crate::target::registry::{ProcRef, Replica};

const RS: &str = "/apis/apps/v1/namespaces/llm/replicasets/llama-5d9f";
const SCALE: &str = "/apis/apps/v1/namespaces/llm/deployments/llama/scale";
const STS_SCALE: &str = "/apis/apps/v1/namespaces/llm/statefulsets/llama/scale";
const SETS: &[&str] = &["target.kubernetes.replacement=scale"];

/// `w2`'s pod owned by `kind` `name`.
fn owned_by(r: &Replica, kind: &str, name: &str, pod: &str) {
    let old = r.pod().expect("pod");
    let mut info = old.pod.clone();
    info.name = pod.into();
    info.owner = Some(Owner {
        kind: kind.into(),
        name: name.into(),
        uid: "rs-1".into(),
    });
    r.set_process(ProcRef::Pod(Arc::new(PodRef {
        cluster: old.cluster.clone(),
        pod: info,
    })));
}

fn scale_of(n: i32) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "llama"}, "spec": {"replicas": n}, "status": {"replicas": n}})
}

/// Answers the scale of `uri` set to `n` and read back as `reads`.
async fn scaled(api: &mut ApiServer, uri: &str, n: i32, reads: i32) {
    let body = Some(json!({"spec": {"replicas": n}}));
    let patch = format!("{uri}?&fieldManager=haq");
    api.expect("PATCH", &patch, body, 200, scale_of(n)).await;
    api.expect("GET", uri, None, 200, scale_of(reads)).await;
}

async fn deployment_found(api: &mut ApiServer) {
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "llama-5d9f",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama", "uid": "d-1", "controller": true}]}});
    api.expect("GET", RS, None, 200, rs).await;
    api.expect("GET", SCALE, None, 200, scale_of(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_replacement_scales_the_deployment_down_that_pod_first_then_back_up() {
    let (r, mut api, cx, dir) = setup_with("scale", SETS);
    owned_by(&r, "ReplicaSet", "llama-5d9f", "llama-b");
    let server = tokio::spawn(async move {
        deployment_found(&mut api).await;
        let cost = json!({"metadata": {"annotations": {DELETION_COST: "-2147483648"}}});
        let uri = format!("{POD}?&fieldManager=haq");
        api.expect("PATCH", &uri, Some(cost), 200, b()).await;
        scaled(&mut api, SCALE, 2, 2).await;
        api.expect("GET", POD, None, 200, terminating(b())).await;
        // The restart: back to 3; the replacement read Ready; then the heal sets 3
        // again (idempotent).
        scaled(&mut api, SCALE, 3, 3).await;
        let d = pod("llama-d", "u-d", "node-b", "10.0.0.4", true);
        let uri = "/api/v1/namespaces/llm/pods/llama-d";
        api.expect("GET", uri, None, 200, d).await;
        scaled(&mut api, SCALE, 3, 3).await;
        api
    });
    let (inj, undo) = fire(SETS, &r, &cx).await;
    verified_as(
        &inj,
        "deployments/llama scaled to 2 (read back) from 3; pod llama-b terminating",
    );
    // The original count is in the heal ledger: `haq heal` restores it after a kill.
    let open = open_entries(&dir).expect("ledger").0;
    assert_eq!(
        open.iter().map(|o| &o.remedy).collect::<Vec<_>>(),
        vec![&Remedy::KubeScale {
            context: "kind-haq".into(),
            namespace: "llm".into(),
            plural: "deployments".into(),
            name: "llama".into(),
            replicas: 3,
        }]
    );
    assert_eq!(
        (open[0].fault.as_str(), open[0].replica.as_str()),
        ("kill-w2", "w2")
    );
    let (pid, how) = scale::respawn(&r).await.expect("scaled back");
    assert_eq!(pid, None);
    assert_eq!(
        how,
        "deployments/llama scaled to 3 (read back): its controller makes the replacement"
    );
    // Not ready while the replica's pod is still the one scaled away (no call made);
    // ready once the watches gave it the new pod and the API says Ready.
    let stop = tokio_util::sync::CancellationToken::new();
    let short = std::time::Duration::from_millis(300);
    assert_eq!(scale::ready(&r, short, &stop).await, None);
    owned_by(&r, "ReplicaSet", "llama-5d9f", "llama-d");
    let mut info = r.pod().expect("pod").pod.clone();
    info.uid = "u-d".into();
    let cluster = r.pod().expect("pod").cluster.clone();
    r.set_process(ProcRef::Pod(Arc::new(PodRef { cluster, pod: info })));
    let limit = std::time::Duration::from_secs(10);
    assert!(scale::ready(&r, limit, &stop).await.is_some());
    let h = heal(undo.expect("a heal")).await;
    assert!(h.verified, "{}", h.detail);
    assert_eq!(h.detail, "deployments/llama scaled to 3 (read back)");
    assert!(
        open_entries(&dir).expect("ledger").0.is_empty(),
        "the heal closes the entry"
    );
    done(server).await;
}

/// A scale the API does not read back fails the fault; the heal still restores the
/// original count. A StatefulSet's pod that is not its highest ordinal is refused
/// before anything changes, as is a pod with no controller (and then there is nothing
/// for a `restart` to scale back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_not_read_back_is_healed_and_a_wrong_ordinal_is_refused() {
    let (r, mut api, cx, _dir) = setup_with("scale-bad", SETS);
    owned_by(&r, "ReplicaSet", "llama-5d9f", "llama-b");
    let server = tokio::spawn(async move {
        deployment_found(&mut api).await;
        let uri = format!("{POD}?&fieldManager=haq");
        let cost = json!({"metadata": {"annotations": {DELETION_COST: "-2147483648"}}});
        api.expect("PATCH", &uri, Some(cost), 200, b()).await;
        scaled(&mut api, SCALE, 2, 3).await;
        scaled(&mut api, SCALE, 3, 3).await;
        // The StatefulSet: its scale read, nothing changed.
        api.expect("GET", STS_SCALE, None, 200, scale_of(3)).await;
        api
    });
    let (inj, undo) = fire(SETS, &r, &cx).await;
    assert!(!inj.verified);
    assert_eq!(
        inj.detail,
        "deployments/llama scaled to 2, but its scale reads 3"
    );
    let h = heal(undo.expect("a heal, the scale was patched")).await;
    assert!(h.verified, "{}", h.detail);
    owned_by(&r, "StatefulSet", "llama", "llama-1");
    let (inj, undo) = fire(SETS, &r, &cx).await;
    assert!(undo.is_none() && !inj.verified);
    assert_eq!(
        inj.detail,
        "scaling statefulsets/llama down removes pod llama-2, not llama-1: fault that replica"
    );
    done(server).await;
    let (r, _api, cx, _dir) = setup_with("scale-bare", SETS);
    let (inj, undo) = fire(SETS, &r, &cx).await;
    assert!(undo.is_none());
    assert_eq!(inj.detail, "pod llama-b has no controller to scale");
    let e = scale::respawn(&r).await.expect_err("nothing to scale back");
    assert!(
        e.starts_with("no scale-down of replica w2's workload"),
        "{e}"
    );
}
