//! haq's proxy in front of a kubernetes replica (`target.kubernetes.proxies`): the
//! run's proxy forwards to the discovered pod, attributes each request by the body
//! marker (no header from the gateway needed), and follows the replica to the pod
//! that replaces it. Two local servers stand in for the pods' IPs (127.0.0.1 and
//! 127.0.0.2, one port), the mock API server for the cluster.

use std::time::Duration;

use serde_json::json;

use super::mock::{self, ApiServer, list, pod};
use super::tests::{PODS, Trace, WATCH_SLICES, plan, slice, slices_listed, three_pods};
use super::*;
use crate::trace::Event;

/// A "pod": answers every POST with its own name.
async fn pod_server(ip: &str, port: u16, name: &'static str) -> u16 {
    let l = tokio::net::TcpListener::bind((ip, port))
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let app = axum::Router::new().fallback(axum::routing::post(move || async move { name }));
    tokio::spawn(axum::serve(l, app).into_future());
    port
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

async fn through(proxy: u16, body: String) -> String {
    crate::wire::tls::install_crypto_provider();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    c.post(format!("http://127.0.0.1:{proxy}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("text")
}

/// Discovery (w2 = llama-b on 127.0.0.1), the EndpointSlices listed; once `go`, w2's
/// pod goes and llama-d on 127.0.0.2 takes its place.
async fn cluster_script(mut server: ApiServer, go: tokio::sync::oneshot::Receiver<()>) {
    let pods = three_pods("127.0.0.1", true);
    server.expect("GET", PODS, None, 200, pods).await;
    let a = ("llama-a", "u-a", "10.0.0.1", "node-a", true, false);
    let c = ("llama-c", "u-c", "10.0.0.3", "node-b", true, false);
    let b = |ready, term| ("llama-b", "u-b", "127.0.0.1", "node-a", ready, term);
    slices_listed(
        &mut server,
        "100",
        vec![slice("s1", "100", &[a, b(true, false), c])],
    )
    .await;
    let _ = go.await;
    let d = ("llama-d", "u-d", "127.0.0.2", "node-b", true, false);
    let events = [
        json!({"type": "MODIFIED", "object": slice("s1", "101", &[a, b(false, true), c])}),
        json!({"type": "MODIFIED", "object": slice("s1", "102", &[a, c, d])}),
    ];
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    server.stream("GET", WATCH_SLICES, text).await;
    let d = pod("llama-d", "u-d", "node-b", "127.0.0.2", true);
    let uri = "/api/v1/namespaces/llm/pods/llama-d";
    server.expect("GET", uri, None, 200, d).await;
    let (_req, _keep) = server.next().await;
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_of_a_replica_forwards_to_its_pod_attributes_by_marker_and_follows_the_replacement()
 {
    let port = pod_server("127.0.0.1", 0, "llama-b").await;
    pod_server("127.0.0.2", port, "llama-d").await;
    let listen = free_port();
    let proxies = format!("target.kubernetes.proxies={{w2: \"127.0.0.1:{listen}\"}}");
    let at = format!("target.kubernetes.port={port}");
    let p = plan(&["target.kubernetes.pod_watch=false", &proxies, &at]);
    assert_eq!(
        p.replica_decls[1].listen.as_deref(),
        Some(format!("127.0.0.1:{listen}").as_str())
    );
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, server) = mock::cluster(&k);
    let (go, wait) = tokio::sync::oneshot::channel();
    let api = tokio::spawn(cluster_script(server, wait));
    let trace = Trace::new("proxied");
    let s = started(
        &p,
        cluster,
        &trace.tw,
        &Clock::start(),
        &|_| {},
        tests::FAST,
    )
    .await
    .expect("started");
    let set = s.proxies.as_ref().expect("the proxies");
    assert_eq!(set.replicas.len(), 1, "w2's only");
    let token = crate::wire::marker::RunToken::from_u32(0xabc);
    set.board().set_run_token(token);
    let w2 = s.registry.get("w2").expect("w2");
    assert_eq!(
        w2.proxy.as_ref().map(|p| p.upstream()),
        Some(Some(format!("127.0.0.1:{port}")))
    );
    assert!(s.registry.get("w1").expect("w1").proxy.is_none());
    // The gateway forwards the body only: the marker names the request.
    let body = |id: &str| {
        let m = crate::wire::marker::marker(token, id);
        json!({"model": "m", "user": m, "messages": []}).to_string()
    };
    assert_eq!(through(listen, body("r1")).await, "llama-b");
    go.send(()).expect("go");
    let t0 = std::time::Instant::now();
    while w2.pod().expect("pod").pod.name != "llama-d" {
        assert!(t0.elapsed() < Duration::from_secs(5), "not adopted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        w2.proxy.as_ref().and_then(|p| p.upstream()),
        Some(format!("127.0.0.2:{port}"))
    );
    assert_eq!(through(listen, body("r2")).await, "llama-d");
    s.stop.cancel();
    set.stop();
    api.abort();
    let ids: Vec<(String, Option<String>)> = trace
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ProxyRequest { replica, id, .. } => Some((replica, id)),
            _ => None,
        })
        .collect();
    let w2 = |id: &str| ("w2".to_string(), Some(id.to_string()));
    assert_eq!(ids, vec![w2("r1"), w2("r2")]);
}

/// `haq proxy` of a kubernetes scenario lists the pods again and again: a listing that
/// is not the declared replicas (a pod gone, none yet in its place) changes nothing;
/// once the replacement is there, the replica whose pod changed is pointed at it.
#[tokio::test]
async fn haq_proxy_follows_each_replica_to_its_current_pod() {
    let p = plan(&["target.kubernetes.pod_watch=false"]);
    let k = p.scenario.target.kubernetes.clone().expect("k");
    let (cluster, mut server) = mock::cluster(&k);
    let stop = tokio_util::sync::CancellationToken::new();
    let api = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let a = pod("llama-a", "u-a", "node-a", "10.0.0.1", true);
            let c = pod("llama-c", "u-c", "node-b", "10.0.0.3", true);
            let two = list("PodList", vec![a.clone(), c.clone()], "5");
            server.expect("GET", PODS, None, 200, two).await;
            let d = pod("llama-b2", "u-d", "node-b", "10.0.0.4", true);
            let three = list("PodList", vec![a, c, d], "6");
            server.expect("GET", PODS, None, 200, three.clone()).await;
            server.expect("GET", PODS, None, 200, three).await;
            stop.cancel();
            server
        })
    };
    let known = [("w1", "10.0.0.1"), ("w2", "10.0.0.2"), ("w3", "10.0.0.3")]
        .iter()
        .map(|(r, ip)| (r.to_string(), format!("{ip}:8080")))
        .collect();
    let moved = std::sync::Mutex::new(Vec::new());
    follow::follow(
        cluster,
        k,
        p.scenario.target.replica_set(),
        known,
        Duration::from_millis(10),
        stop,
        |p: &PodInfo| {
            let seen = (p.replica.clone(), p.name.clone(), p.authority());
            moved.lock().expect("moved").push(seen);
        },
    )
    .await;
    api.await.expect("the API server saw exactly the calls");
    let moved = moved.into_inner().expect("moved");
    assert_eq!(
        moved,
        vec![("w2".into(), "llama-b2".into(), "10.0.0.4:8080".into())]
    );
}
