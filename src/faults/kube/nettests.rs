//! A network fault's `reset_connections` against the mock API server: through haq's
//! proxy in front of the replica (a local proxy, a local "pod"), or by a command
//! exec'd in the pod — the exact requests, and a reset that fails leaves the fault
//! unverified (its policy still healed).

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tests::{POD, b, done, fire, setup_with};
use crate::proxy::{ProxySet, ProxySpec};
use crate::target::kube::mock::ApiServer;
use crate::target::kube::{PodInfo, proxied};
use crate::trace::{Clock, TraceWriter};

const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies";
const POLICY: &str = "haq-t0k3n-blackhole-w2-w2";

/// Answers the label, the policy's creation and its read-back.
async fn isolated(api: &mut ApiServer) {
    let label = Some(json!({"metadata": {"labels": {"haq.dev/isolate": "t0k3n-w2"}}}));
    let mut labelled = b();
    labelled["metadata"]["labels"]["haq.dev/isolate"] = json!("t0k3n-w2");
    let patch = format!("{POD}?&fieldManager=haq");
    api.expect("PATCH", &patch, label, 200, labelled).await;
    let np = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": POLICY, "labels": {"haq.dev/run": "t0k3n", "haq.dev/fault": "blackhole-w2"}},
        "spec": {"podSelector": {"matchLabels": {"haq.dev/isolate": "t0k3n-w2"}}, "policyTypes": ["Ingress"], "ingress": []}
    });
    let create = format!("{POLICIES}?");
    api.expect("POST", &create, Some(np.clone()), 201, np.clone())
        .await;
    api.expect("GET", &format!("{POLICIES}/{POLICY}"), None, 200, np)
        .await;
}

const NET: [&str; 2] = [
    "faults[0].domain=network",
    "target.kubernetes.proxies={w2: \"127.0.0.1:9002\"}",
];

/// The gateway's kept-alive connection through haq's proxy is reset once the policy is
/// in place; the proxy forwards new connections again (into the policy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_fault_resets_the_established_connections_through_haqs_proxy() {
    let mut sets = NET.to_vec();
    sets.push("faults[0].reset_connections=proxy");
    let (plain, mut api, cx, _) = setup_with("net-reset", &sets);
    // The "pod": accepts and holds its connections.
    let pod = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up = pod.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = pod.accept().await {
            held.push(s);
        }
    });
    let spec = ProxySpec {
        name: "w2".into(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        upstream: Some(up),
    };
    let set = ProxySet::start(&[spec], &TraceWriter::sink(), &Clock::start())
        .await
        .expect("proxy");
    let proxy = set.get("w2").cloned().expect("w2");
    let p = plain.pod().expect("pod");
    let info: PodInfo = p.pod.clone();
    let r = proxied(&p.cluster, info, "/health", Some(proxy.clone()));
    // The gateway's connection, open before the fault.
    let mut gw = tokio::net::TcpStream::connect(proxy.listen)
        .await
        .expect("connect");
    gw.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let t0 = std::time::Instant::now();
    while proxy.connections() != 1 {
        assert!(t0.elapsed() < Duration::from_secs(5), "not accepted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server = tokio::spawn(async move {
        isolated(&mut api).await;
        api
    });
    let (inj, undo) = fire(&sets, &r, &cx).await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(
        inj.detail.ends_with(&format!(
            "; haq's proxy on {} reset its 1 established connection(s) of the replica (new ones meet the policy)",
            proxy.listen
        )),
        "{}",
        inj.detail
    );
    assert!(undo.is_some(), "the policy is still healed");
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), gw.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the gateway's connection is cut: {read:?}"
    );
    assert_eq!(proxy.rules().cut, None, "no rule left on the path");
    set.stop();
    done(server).await;
}

/// A command exec'd in the pod (here in a sidecar): the exec request exactly; the API
/// refusing it leaves the fault unverified, its policy still to heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_fault_resets_by_exec_and_a_refused_exec_is_not_verified() {
    let mut sets = NET.to_vec();
    sets.push("faults[0].reset_connections={exec: [ss, -K, dst, 10.0.0.9], container: net}");
    let (r, mut api, cx, _) = setup_with("net-exec", &sets);
    let server = tokio::spawn(async move {
        isolated(&mut api).await;
        let exec = format!(
            "{POD}/exec?&stdout=true&stderr=true&container=net&command=ss&command=-K&command=dst&command=10.0.0.9"
        );
        let why = "cannot create resource \"pods/exec\"";
        api.refuse("GET", &exec, None, 403, "Forbidden", why).await;
        api
    });
    let (inj, undo) = fire(&sets, &r, &cx).await;
    assert!(!inj.verified, "{}", inj.detail);
    assert!(
        inj.detail.ends_with(
            "; the established connections were not reset: exec `ss -K dst 10.0.0.9` in llama-b/net refused: 403 Forbidden: cannot create resource \"pods/exec\""
        ),
        "{}",
        inj.detail
    );
    assert!(undo.is_some(), "the policy is still healed");
    done(server).await;
}
