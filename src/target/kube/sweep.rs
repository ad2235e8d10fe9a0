//! `haq heal RUN_DIR`'s label sweep: what a run left on the cluster even when its
//! ledger line was lost (haq killed between the API call and the ledger write, or a
//! ledger deleted) — every NetworkPolicy labelled with the run's token
//! (`haq.dev/run=TOKEN`) is deleted and the `haq.dev/isolate` label of the run
//! (`TOKEN-…`) is taken off every pod, then both lists are read again to verify.
//! The run's context, namespace and token are the ones its `discovered` lines
//! recorded. Cordons carry no label: they are healed from the ledger only.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::calls::{self, Call, ISOLATE_LABEL};
use super::cluster::api_error;
use crate::trace::Event;

/// Longest the sweep may take.
const SWEEP_LIMIT: Duration = Duration::from_secs(60);

/// Where a run acted: its kubeconfig context, namespace and token.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOf {
    pub context: String,
    pub namespace: String,
    pub token: String,
}

/// The run of `dir`, from its trace's `discovered` lines (`None`: not a kubernetes
/// run, or one that discovered nothing).
pub fn run_of(dir: &Path) -> Option<RunOf> {
    let path = dir.join(crate::trace::files::TRACE_FILE);
    let events = crate::trace::read(&path).ok()?;
    events.flatten().find_map(|e| match e {
        Event::Observation { what, detail, .. } if what == "discovered" => parse(&detail?),
        _ => None,
    })
}

fn parse(detail: &str) -> Option<RunOf> {
    let inner = detail.rsplit_once(" (context ")?.1.strip_suffix(')')?;
    let (context, rest) = inner.split_once(", namespace ")?;
    let (namespace, rest) = rest.split_once(", run label ")?;
    let token = rest.strip_prefix(&format!("{}=", calls::RUN_LABEL))?;
    Some(RunOf {
        context: context.into(),
        namespace: namespace.into(),
        token: token.into(),
    })
}

/// The sweep's reads (each made twice: to find, then to verify).
pub fn reads(ns: &str, token: &str) -> [Call; 2] {
    [
        calls::list_run_policies(ns, token),
        calls::list_isolated_pods(ns),
    ]
}

fn name_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

/// What of the run is on the cluster: its policies, and its pods with their label.
async fn left(
    client: &kube::Client,
    ns: &str,
    token: &str,
) -> Result<(Vec<String>, Vec<String>), String> {
    let [lp, lpods] = reads(ns, token);
    let policies: k8s_openapi::List<NetworkPolicy> = client
        .request(lp.req)
        .await
        .map_err(|e| format!("listing NetworkPolicies: {}", api_error(&e).1))?;
    let pods: k8s_openapi::List<Pod> = client
        .request(lpods.req)
        .await
        .map_err(|e| format!("listing pods labelled {ISOLATE_LABEL}: {}", api_error(&e).1))?;
    let ours = |p: &&Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ISOLATE_LABEL))
            .is_some_and(|v| v.starts_with(&format!("{token}-")))
    };
    Ok((
        policies
            .items
            .iter()
            .map(|p| name_of(&p.metadata))
            .collect(),
        pods.items
            .iter()
            .filter(ours)
            .map(|p| name_of(&p.metadata))
            .collect(),
    ))
}

/// Deletes the run's policies and labels, verified by reading again; what was done.
pub async fn sweep(client: &kube::Client, ns: &str, token: &str) -> Result<String, String> {
    let (policies, pods) = left(client, ns, token).await?;
    for p in &policies {
        match client
            .request::<serde_json::Value>(calls::delete_policy(ns, p).req)
            .await
        {
            Ok(_) => {}
            Err(e) if api_error(&e).0 == 404 => {}
            Err(e) => return Err(format!("deleting NetworkPolicy {p}: {}", api_error(&e).1)),
        }
    }
    for p in &pods {
        match client
            .request::<Pod>(calls::label_pod(ns, p, ISOLATE_LABEL, None).req)
            .await
        {
            Ok(_) => {}
            Err(e) if api_error(&e).0 == 404 => {}
            Err(e) => {
                return Err(format!(
                    "removing label {ISOLATE_LABEL} of pod {p}: {}",
                    api_error(&e).1
                ));
            }
        }
    }
    match left(client, ns, token).await? {
        (a, b) if a.is_empty() && b.is_empty() => Ok(if policies.is_empty() && pods.is_empty() {
            format!("no NetworkPolicy or pod label of run {token} left in {ns}")
        } else {
            format!(
                "run {token} in {ns}: deleted NetworkPolicies [{}], label {ISOLATE_LABEL} removed from pods [{}]",
                policies.join(", "),
                pods.join(", ")
            )
        }),
        (a, b) => Err(format!(
            "still there after the sweep: NetworkPolicies [{}], labelled pods [{}]",
            a.join(", "),
            b.join(", ")
        )),
    }
}

/// [`sweep`] for the run of `dir`, from synchronous code (`haq heal`): `None` when
/// it is no kubernetes run; else whether nothing is left, and how.
pub fn sweep_dir(dir: &Path) -> Option<(bool, String)> {
    let run = run_of(dir)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let got = match rt {
            Ok(rt) => rt.block_on(async {
                let client = super::cluster::client_for(&run.context)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                sweep(&client, &run.namespace, &run.token).await
            }),
            Err(e) => Err(format!("a runtime for the sweep: {e}")),
        };
        let _ = tx.send(got);
    });
    Some(match rx.recv_timeout(SWEEP_LIMIT) {
        Ok(Ok(d)) => (true, d),
        Ok(Err(e)) => (false, e),
        Err(_) => (
            false,
            format!("the sweep did not finish within {SWEEP_LIMIT:?}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::mock::{self, list, pod};
    use super::*;

    const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies?&labelSelector=haq.dev%2Frun%3Dt0k3n";
    const ISOLATED: &str = "/api/v1/namespaces/llm/pods?&labelSelector=haq.dev%2Fisolate";

    fn isolated(name: &str, value: &str) -> serde_json::Value {
        let mut p = pod(name, "u", "n", "10.0.0.1", true);
        p["metadata"]["labels"][ISOLATE_LABEL] = json!(value);
        p
    }

    /// The run's policy and its pod label go, another run's label stays; both lists
    /// are read again to verify. A policy that will not go fails the sweep.
    #[tokio::test]
    async fn the_sweep_removes_what_carries_the_runs_labels_and_verifies() {
        let (client, mut api) = mock::pair();
        let server = tokio::spawn(async move {
            let np = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "haq-t0k3n-cut-w2", "labels": {"haq.dev/run": "t0k3n"}}});
            let pl = |items| list("NetworkPolicyList", items, "1");
            let mine = isolated("llama-b", "t0k3n-w2");
            let other = isolated("llama-c", "0th3r-w3");
            api.expect("GET", POLICIES, None, 200, pl(vec![np.clone()]))
                .await;
            let pods = list("PodList", vec![mine.clone(), other.clone()], "1");
            api.expect("GET", ISOLATED, None, 200, pods).await;
            let del = "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies/haq-t0k3n-cut-w2?";
            api.expect("DELETE", del, Some(json!({})), 200, np.clone())
                .await;
            let unlabel = Some(json!({"metadata": {"labels": {ISOLATE_LABEL: null}}}));
            let patch = "/api/v1/namespaces/llm/pods/llama-b?&fieldManager=haq";
            api.expect("PATCH", patch, unlabel, 200, mine).await;
            api.expect("GET", POLICIES, None, 200, pl(vec![])).await;
            let pods = list("PodList", vec![other.clone()], "2");
            api.expect("GET", ISOLATED, None, 200, pods).await;
            // The second sweep: the policy is back (another haq re-created it).
            api.expect("GET", POLICIES, None, 200, pl(vec![np.clone()]))
                .await;
            api.expect("GET", ISOLATED, None, 200, list("PodList", vec![], "3"))
                .await;
            api.expect("DELETE", del, Some(json!({})), 200, np.clone())
                .await;
            api.expect("GET", POLICIES, None, 200, pl(vec![np])).await;
            api.expect("GET", ISOLATED, None, 200, list("PodList", vec![], "4"))
                .await;
            api
        });
        let done = sweep(&client, "llm", "t0k3n").await.expect("swept");
        assert_eq!(
            done,
            "run t0k3n in llm: deleted NetworkPolicies [haq-t0k3n-cut-w2], label haq.dev/isolate removed from pods [llama-b]"
        );
        let e = sweep(&client, "llm", "t0k3n")
            .await
            .expect_err("still there");
        assert_eq!(
            e,
            "still there after the sweep: NetworkPolicies [haq-t0k3n-cut-w2], labelled pods []"
        );
        server
            .await
            .expect("exact requests")
            .no_more(Duration::from_millis(100))
            .await;
    }

    #[test]
    fn the_run_is_read_from_its_discovered_line() {
        let d = "w1 = pod llama-a (uid u-a) on node n, 10.0.0.1:8080 container llama, 0 GPU (nvidia.com/gpu) (context kind-haq, namespace llm, run label haq.dev/run=t0k3n)";
        assert_eq!(
            parse(d),
            Some(RunOf {
                context: "kind-haq".into(),
                namespace: "llm".into(),
                token: "t0k3n".into()
            })
        );
        assert_eq!(parse("w1 = pod llama-a"), None);
    }
}
