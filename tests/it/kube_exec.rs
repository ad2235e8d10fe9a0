//! `haq heal RUN_DIR` after a run SIGKILLed while kubernetes faults held: the heal
//! ledger's `kube_exec` entry (a freeze) makes it read the pod in the run's context —
//! still the one the fault hit — and exec the fault's heal there; a `kube_uncordon`
//! and a `kube_isolation` entry make it uncordon the node and delete the
//! NetworkPolicy. Against a fake API server on 127.0.0.1 (the kubeconfig's server)
//! speaking HTTP/1.1 and the exec's websocket, which records every request.

use std::sync::{Arc, Mutex};

use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{Message, handshake, protocol::Role};

use crate::cli::haq_env;
use crate::support::scratch;

const POD: &str = "/api/v1/namespaces/llm/pods/llama-b";

/// How the fake API server answers a request other than an exec: `(method, path)` →
/// status and JSON body.
type Answer = fn(&str, &str) -> (u16, serde_json::Value);

/// A fake API server: every exec exiting `exit`, every other request answered by its
/// [`Answer`] (by default pod `llama-b`, uid `u-b`).
struct FakeApi {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

/// Pod `llama-b` (uid `u-b`), whatever was asked.
fn the_pod(_: &str, _: &str) -> (u16, serde_json::Value) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "llama-b", "namespace": "llm", "uid": "u-b"},
        "spec": {"containers": [{"name": "llama"}]}
    });
    (200, pod)
}

impl FakeApi {
    fn start(exit: i32) -> FakeApi {
        FakeApi::answering(exit, the_pod)
    }

    fn answering(exit: i32, answer: Answer) -> FakeApi {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
        let port = l.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        rt.spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                tokio::spawn(serve(c, s.clone(), exit, answer));
            }
        });
        FakeApi {
            port,
            seen,
            _rt: rt,
        }
    }

    fn seen(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().expect("seen"))
    }
}

/// One request off the connection: its head and its body (by its content-length),
/// or `None` once the client closed it.
async fn request(c: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match c.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[end..].to_vec();
    while body.len() < len {
        match c.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&b[..n]),
        }
    }
    Some((head, String::from_utf8_lossy(&body).into_owned()))
}

/// One connection: requests answered on it (kept alive) until an exec upgrades it.
/// Each is recorded as `METHOD PATH`, then ` BODY` when it has one.
async fn serve(mut c: TcpStream, seen: Arc<Mutex<Vec<String>>>, exit: i32, answer: Answer) {
    while let Some((head, body)) = request(&mut c).await {
        let line = head.lines().next().unwrap_or_default();
        let method = line.split(' ').next().unwrap_or_default().to_string();
        let path = line.split(' ').nth(1).unwrap_or_default().to_string();
        let mut said = line.rsplit_once(' ').map_or(line, |x| x.0).to_string();
        if !body.is_empty() {
            said = format!("{said} {body}");
        }
        seen.lock().expect("seen").push(said);
        if path.contains("/exec?") {
            let key = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("sec-websocket-key")
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_default();
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
                handshake::derive_accept_key(key.as_bytes())
            );
            let _ = c.write_all(answer.as_bytes()).await;
            let mut ws =
                tokio_tungstenite::WebSocketStream::from_raw_socket(c, Role::Server, None).await;
            let status = if exit == 0 {
                serde_json::json!({"metadata": {}, "status": "Success"})
            } else {
                serde_json::json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": exit.to_string()}]}})
            };
            let mut frame = vec![3u8];
            frame.extend(serde_json::to_vec(&status).expect("json"));
            let _ = ws.send(Message::binary(frame)).await;
            let _ = ws.close(None).await;
            return;
        }
        let (status, body) = answer(&method, &path);
        let body = body.to_string();
        let text = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if c.write_all(text.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A run directory whose ledger (its run gone: pid 0) leaves the freeze of w2 open,
/// and a kubeconfig whose context `kind-haq` is the fake API server.
fn killed_run(tag: &str, port: u16) -> (std::path::PathBuf, std::path::PathBuf) {
    let freeze = serde_json::json!({"ev": "open", "id": 1, "fault": "hang-w2", "replica": "w2", "undo": "kube_exec",
        "context": "kind-haq", "namespace": "llm", "pod": "llama-b", "uid": "u-b", "container": "llama",
        "heal": ["pkill", "-CONT", "-f", "EngineCore"], "timeout_ms": 5000});
    killed_run_with(tag, port, &[freeze])
}

/// [`killed_run`] with the ledger's `open` entries.
fn killed_run_with(
    tag: &str,
    port: u16,
    open: &[serde_json::Value],
) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch(tag);
    let kc = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: kind-haq\ncontexts:\n- name: kind-haq\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{token: t}}\n"
    );
    std::fs::write(&kc, text).expect("kubeconfig");
    let run = serde_json::json!({"ev": "run", "pid": 0});
    let text: String = std::iter::once(&run)
        .chain(open)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("heals.jsonl"), text).expect("ledger");
    (dir, kc)
}

fn heal(dir: &std::path::Path, kc: &std::path::Path) -> (i32, String, String) {
    let args = ["heal", dir.to_str().expect("utf-8")];
    let kc = kc.to_str().expect("utf-8");
    haq_env(&args, &[("KUBECONFIG", kc)], &["KUBERNETES_SERVICE_HOST"])
}

#[test]
fn haq_heal_execs_a_killed_runs_exec_heal_in_the_pod() {
    let exec = format!(
        "GET {POD}/exec?&stdout=true&stderr=true&container=llama&command=pkill&command=-CONT&command=-f&command=EngineCore"
    );
    // The heal exits 1: NOT healed, the entry kept for the next try.
    let failing = FakeApi::start(1);
    let (dir, kc) = killed_run("kube-exec-heal", failing.port);
    let before = std::fs::read_to_string(dir.join("heals.jsonl")).expect("ledger");
    let (code, out, err) = heal(&dir, &kc);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "NOT healed hang-w2 on w2: exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 1"
        ),
        "{out}"
    );
    assert_eq!(failing.seen(), [format!("GET {POD}"), exec.clone()]);
    let after = std::fs::read_to_string(dir.join("heals.jsonl")).expect("ledger");
    assert_eq!(after, before, "still open");
    // It exits 0: healed, recorded, and nothing is left for the next `haq heal`.
    let api = FakeApi::start(0);
    let (_, kc) = killed_run("kube-exec-heal-kc", api.port);
    let (code, out, err) = heal(&dir, &kc);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "healed hang-w2 on w2: exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 0"
        ),
        "{out}"
    );
    assert_eq!(api.seen(), [format!("GET {POD}"), exec]);
    let (code, out, _) = heal(&dir, &kc);
    assert_eq!(code, 0);
    assert!(out.contains("nothing left applied"), "{out}");
    assert!(api.seen().is_empty(), "no call for nothing");
}

const POLICY: &str =
    "/apis/networking.k8s.io/v1/namespaces/llm/networkpolicies/haq-t0k3n-cut-w2-w2";

/// The API of a cluster where a killed run left node-a cordoned and w2 isolated: the
/// uncordon and the policy's delete succeed, the policy is then gone.
fn undoable(method: &str, path: &str) -> (u16, serde_json::Value) {
    let gone = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": 404, "reason": "NotFound", "message": "gone"});
    match (method, path) {
        ("PATCH", "/api/v1/nodes/node-a?") => (
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}, "spec": {"unschedulable": false}}),
        ),
        ("DELETE", p) if p == format!("{POLICY}?") => (
            200,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        ("PATCH", p) if p == format!("{POD}?&fieldManager=haq") => the_pod(method, path),
        ("GET", POLICY) => (404, gone),
        _ => (
            500,
            serde_json::json!({"kind": "Status", "code": 500, "message": "unexpected"}),
        ),
    }
}

/// `haq heal RUN_DIR` after a killed run that left a cordon and a NetworkPolicy open
/// in its ledger: it uncordons the node and deletes the policy (its label off the pod,
/// the policy read back gone) through the run's context, and the ledger records both
/// healed — a second `haq heal` finds nothing and calls nothing.
#[test]
fn haq_heal_uncordons_and_deletes_the_policy_a_killed_run_left() {
    let api = FakeApi::answering(0, undoable);
    let open = [
        serde_json::json!({"ev": "open", "id": 1, "fault": "node-of-w1", "replica": "w1",
            "undo": "kube_uncordon", "context": "kind-haq", "node": "node-a"}),
        serde_json::json!({"ev": "open", "id": 2, "fault": "cut-w2", "replica": "w2",
            "undo": "kube_isolation", "context": "kind-haq", "namespace": "llm",
            "policy": "haq-t0k3n-cut-w2-w2", "pod": "llama-b", "label": "haq.dev/isolate"}),
    ];
    let (dir, kc) = killed_run_with("kube-heal-cordon-policy", api.port, &open);
    let (code, out, err) = heal(&dir, &kc);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("healed node-of-w1 on w1: node node-a uncordoned (schedulable again)"),
        "{out}"
    );
    assert!(
        out.contains("healed cut-w2 on w2: NetworkPolicy haq-t0k3n-cut-w2-w2 deleted; label haq.dev/isolate removed from pod llama-b"),
        "{out}"
    );
    assert_eq!(
        api.seen(),
        [
            r#"PATCH /api/v1/nodes/node-a? {"spec":{"unschedulable":false}}"#.to_string(),
            format!("DELETE {POLICY}? {{}}"),
            format!(
                r#"PATCH {POD}?&fieldManager=haq {{"metadata":{{"labels":{{"haq.dev/isolate":null}}}}}}"#
            ),
            format!("GET {POLICY}"),
        ]
    );
    let ledger = std::fs::read_to_string(dir.join("heals.jsonl")).expect("ledger");
    let healed: Vec<u64> = ledger
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["ev"] == "healed")
        .filter_map(|l| l["id"].as_u64())
        .collect();
    assert_eq!(healed, [1, 2], "{ledger}");
    let (code, out, _) = heal(&dir, &kc);
    assert_eq!(code, 0);
    assert!(out.contains("nothing left applied"), "{out}");
    assert!(api.seen().is_empty(), "no call for nothing");
}
