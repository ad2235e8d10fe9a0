//! kube-rs's own mock API server pattern (tower-test's `mock::pair` behind a
//! `kube::Client`, an `ApiServerVerifier` answering each expected request in turn):
//! every test states the exact requests — method, path and query, body — it expects
//! and the answers the API server gives.

use std::sync::Arc;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

use super::cluster::Cluster;
use crate::scenario::KubeTarget;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The mock API server: answers the requests a test expects, in order.
pub struct ApiServer(Handle);

/// A client whose every request reaches the returned [`ApiServer`].
pub fn pair() -> (kube::Client, ApiServer) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), ApiServer(handle))
}

/// A cluster for `k` (context `kind-haq`, token `t0k3n`) reached through the mock.
pub fn cluster(k: &KubeTarget) -> (Arc<Cluster>, ApiServer) {
    let (client, server) = pair();
    let c = Cluster::new(client, "kind-haq".into(), k, "t0k3n".into()).expect("cluster");
    (Arc::new(c), server)
}

impl ApiServer {
    /// Expects the next request to be `method uri` with `body` (compared as JSON;
    /// `None`: no body) and answers `status` with `answer`.
    pub async fn expect(
        &mut self,
        method: &str,
        uri: &str,
        body: Option<Value>,
        status: u16,
        answer: Value,
    ) {
        let (req, send) = self
            .0
            .next_request()
            .await
            .unwrap_or_else(|| panic!("no request: wanted {method} {uri}"));
        let (parts, got) = req.into_parts();
        let got = got.collect_bytes().await.expect("body");
        assert_eq!(
            (parts.method.as_str(), parts.uri.to_string().as_str()),
            (method, uri),
            "the request"
        );
        let got: Option<Value> =
            (!got.is_empty()).then(|| serde_json::from_slice(&got).expect("a JSON body"));
        assert_eq!(got, body, "the body of {method} {uri}");
        let mut resp = Response::new(Body::from(serde_json::to_vec(&answer).expect("json")));
        *resp.status_mut() = http::StatusCode::from_u16(status).expect("status");
        send.send_response(resp);
    }

    /// Answers `status` with a `Status` object (an API error).
    pub async fn refuse(
        &mut self,
        method: &str,
        uri: &str,
        body: Option<Value>,
        code: u16,
        reason: &str,
        message: &str,
    ) {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message});
        self.expect(method, uri, body, code, status).await;
    }

    /// Answers `status` with raw `text` (a watch stream: one event per line).
    pub async fn stream(&mut self, method: &str, uri: &str, text: String) {
        let (req, send) = self
            .0
            .next_request()
            .await
            .unwrap_or_else(|| panic!("no request: wanted {method} {uri}"));
        assert_eq!(
            (req.method().as_str(), req.uri().to_string().as_str()),
            (method, uri),
            "the request"
        );
        send.send_response(Response::new(Body::from(text.into_bytes())));
    }

    /// The next request's `METHOD uri`, left unanswered while the sender is kept.
    pub async fn next(&mut self) -> (String, tower_test::mock::SendResponse<Response<Body>>) {
        let (req, send) = self.0.next_request().await.expect("a request");
        (format!("{} {}", req.method(), req.uri()), send)
    }

    /// Answers a request taken with [`ApiServer::next`]: `status` with `answer`.
    pub fn answer(
        send: tower_test::mock::SendResponse<Response<Body>>,
        status: u16,
        answer: Value,
    ) {
        let mut resp = Response::new(Body::from(serde_json::to_vec(&answer).expect("json")));
        *resp.status_mut() = http::StatusCode::from_u16(status).expect("status");
        send.send_response(resp);
    }

    /// Nothing else is asked of the API server within `wait`.
    pub async fn no_more(mut self, wait: std::time::Duration) {
        if let Ok(Some((req, _))) = tokio::time::timeout(wait, self.0.next_request()).await {
            panic!("unexpected request {} {}", req.method(), req.uri());
        }
    }
}

/// A serving pod as the API server lists it.
pub fn pod(name: &str, uid: &str, node: &str, ip: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "llm", "uid": uid, "labels": {"app": "llama"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "llama", "image": "llama.cpp:server",
                 "ports": [{"containerPort": 8080}],
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"name": "sidecar", "image": "busybox"}
            ]
        },
        "status": {
            "phase": "Running", "podIP": ip,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            "containerStatuses": [{"name": "llama", "ready": ready, "restartCount": 0, "image": "x", "imageID": "y"}]
        }
    })
}

/// A list of `kind` (`PodList`, `EndpointSliceList`, `NetworkPolicyList`).
pub fn list(kind: &str, items: Vec<Value>, version: &str) -> Value {
    let api = match kind {
        "EndpointSliceList" => "discovery.k8s.io/v1",
        "NetworkPolicyList" => "networking.k8s.io/v1",
        _ => "v1",
    };
    json!({"apiVersion": api, "kind": kind, "metadata": {"resourceVersion": version}, "items": items})
}
