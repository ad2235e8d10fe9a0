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

    /// The next request, which must be `method uri`, and how to answer it.
    async fn take(
        &mut self,
        method: &str,
        uri: &str,
    ) -> (
        Request<Body>,
        tower_test::mock::SendResponse<Response<Body>>,
    ) {
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
        (req, send)
    }

    /// Answers `status` with raw `text` (a watch stream: one event per line).
    pub async fn stream(&mut self, method: &str, uri: &str, text: String) {
        let (_, send) = self.take(method, uri).await;
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

/// The exit status an exec'd command sends on the status channel: `Success`, or the
/// kubelet's failure with its exit code.
pub fn exit_status(code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": format!("command terminated with non-zero exit code: exit status {code}"),
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}
    })
}

impl ApiServer {
    /// Expects an exec (`GET uri`, a websocket upgrade) and runs it: the command
    /// prints `stdout` and exits with `code` (0: `Success`). The 101 answer comes from
    /// a real HTTP/1.1 exchange over an in-memory pipe (hyper upgrades nothing else),
    /// the pipe's far end speaking the exec's channels (1 stdout, 3 status).
    pub async fn exec(&mut self, uri: &str, stdout: &str, code: i32) {
        use futures_util::SinkExt;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_tungstenite::tungstenite::{Message, handshake, protocol::Role};
        let (req, send) = self.take("GET", uri).await;
        let key = req.headers()["sec-websocket-key"].as_bytes().to_vec();
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(near))
                .await
                .expect("handshake");
        tokio::spawn(conn.with_upgrades());
        let (out, status) = (stdout.as_bytes().to_vec(), exit_status(code));
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = far.read(&mut b).await.expect("request head");
                assert!(n > 0, "the pipe closed");
                head.extend_from_slice(&b[..n]);
            }
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
                handshake::derive_accept_key(&key)
            );
            far.write_all(answer.as_bytes()).await.expect("101");
            let mut ws =
                tokio_tungstenite::WebSocketStream::from_raw_socket(far, Role::Server, None).await;
            let frame = |ch: u8, b: &[u8]| Message::binary([&[ch][..], b].concat());
            if !out.is_empty() {
                let _ = ws.send(frame(1, &out)).await;
            }
            let status = serde_json::to_vec(&status).expect("json");
            let _ = ws.send(frame(3, &status)).await;
            let _ = ws.close(None).await;
        });
        let upgrade = http::Request::get("/")
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "websocket")
            .body(Body::from(Vec::new()))
            .expect("request");
        let resp = sender.send_request(upgrade).await.expect("101");
        let (parts, _) = resp.into_parts();
        // The parts keep hyper's pending upgrade, which the client's exec takes.
        send.send_response(Response::from_parts(parts, Body::from(Vec::new())));
    }
}
