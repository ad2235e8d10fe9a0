//! `haq heal RUN_DIR` after a run SIGKILLed while a kubernetes exec fault (a freeze)
//! held: the heal ledger's `kube_exec` entry makes it read the pod in the run's context
//! — still the one the fault hit — and exec the fault's heal there. Against a fake API
//! server on 127.0.0.1 (the kubeconfig's server) speaking HTTP/1.1 and the exec's
//! websocket, which records every request.

use std::sync::{Arc, Mutex};

use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{Message, handshake, protocol::Role};

use crate::cli::haq_env;
use crate::support::scratch;

const POD: &str = "/api/v1/namespaces/llm/pods/llama-b";

/// A fake API server: pod `llama-b` (uid `u-b`), and every exec exiting `exit`.
struct FakeApi {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

impl FakeApi {
    fn start(exit: i32) -> FakeApi {
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
                tokio::spawn(serve(c, s.clone(), exit));
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

/// One connection: pod reads answered on it (kept alive) until an exec upgrades it.
async fn serve(mut c: TcpStream, seen: Arc<Mutex<Vec<String>>>, exit: i32) {
    loop {
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match c.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&b[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let line = head.lines().next().unwrap_or_default();
        let path = line.split(' ').nth(1).unwrap_or_default().to_string();
        seen.lock()
            .expect("seen")
            .push(line.rsplit_once(' ').map_or(line, |x| x.0).to_string());
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
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "llama-b", "namespace": "llm", "uid": "u-b"},
            "spec": {"containers": [{"name": "llama"}]}
        })
        .to_string();
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if c.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A run directory whose ledger (its run gone: pid 0) leaves the freeze of w2 open,
/// and a kubeconfig whose context `kind-haq` is the fake API server.
fn killed_run(tag: &str, port: u16) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch(tag);
    let kc = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: kind-haq\ncontexts:\n- name: kind-haq\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{token: t}}\n"
    );
    std::fs::write(&kc, text).expect("kubeconfig");
    let lines = [
        serde_json::json!({"ev": "run", "pid": 0}),
        serde_json::json!({"ev": "open", "id": 1, "fault": "hang-w2", "replica": "w2", "undo": "kube_exec",
            "context": "kind-haq", "namespace": "llm", "pod": "llama-b", "uid": "u-b", "container": "llama",
            "heal": ["pkill", "-CONT", "-f", "EngineCore"], "timeout_ms": 5000}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
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
