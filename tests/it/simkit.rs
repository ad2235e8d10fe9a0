//! Helpers for tests that drive sim processes directly: start a worker or the tool
//! service from the built binary, stream a request and keep every event with its
//! arrival time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use haq::target::sim::SimProcess;
use haq::wire::sse::{SseItem, SseParser};
use serde_json::{Value, json};

use crate::support::{haq_bin, scratch};

pub struct Proc {
    pub p: SimProcess,
    pub dir: PathBuf,
}

impl Proc {
    pub fn url(&self) -> &str {
        &self.p.url
    }
    pub fn journal(&self) -> PathBuf {
        self.dir.join(format!("worker-{}.jsonl", self.p.name))
    }
}

/// A worker `name` with the engine settings `engine` (merged over fast test defaults).
pub async fn worker(name: &str, engine: Value, tools_url: Option<&str>) -> Proc {
    let dir = scratch(&format!("worker-{name}"));
    worker_in(&dir, name, engine, tools_url, "127.0.0.1:0").await
}

pub async fn worker_in(
    dir: &Path,
    name: &str,
    engine: Value,
    tools_url: Option<&str>,
    listen: &str,
) -> Proc {
    let w = spawn_worker(dir, name, engine, tools_url, listen).await;
    wait_ready(w.url()).await;
    w
}

/// Starts a worker without waiting for readiness.
pub async fn spawn_worker(
    dir: &Path,
    name: &str,
    engine: Value,
    tools_url: Option<&str>,
    listen: &str,
) -> Proc {
    let mut e = json!({"startup": "50ms", "decode_step": "5ms"});
    if let (Some(m), Some(extra)) = (e.as_object_mut(), engine.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    let mut args: Vec<String> = [
        "sim", "worker", "--name", name, "--listen", listen, "--engine",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(e.to_string());
    args.push("--journal".into());
    args.push(
        dir.join(format!("worker-{name}.jsonl"))
            .display()
            .to_string(),
    );
    if let Some(t) = tools_url {
        args.push("--tools-url".into());
        args.push(t.into());
    }
    let p = SimProcess::start(&haq_bin(), name, &args, dir)
        .await
        .expect("worker starts");
    Proc {
        p,
        dir: dir.to_path_buf(),
    }
}

/// The tool service, logging to `dir/tools.jsonl`.
pub async fn tools(dir: &Path, dedup: bool) -> SimProcess {
    let args: Vec<String> = vec![
        "sim".into(),
        "tools".into(),
        "--log".into(),
        dir.join("tools.jsonl").display().to_string(),
        "--config".into(),
        json!({"dedup": dedup, "exec_time": "5ms"}).to_string(),
    ];
    SimProcess::start(&haq_bin(), "tools", &args, dir)
        .await
        .expect("tool service starts")
}

/// A port nobody listens on right now (for a proxy listen address the gateway must
/// know before haq starts).
/// SIGKILL to `pid` (a process the test did not start as its child).
pub fn kill_pid(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// A loopback port nobody listens on now, never one this test process handed out
/// before: two binds to port 0 in a row may get the same port back once the first is
/// closed (two replicas' listen addresses drawn equal failed a real-router test in CI).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// `host:port` of an `http://` URL.
pub fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

pub fn http() -> reqwest::Client {
    haq::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

pub async fn wait_ready(url: &str) {
    let c = http();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = c.get(format!("{url}/ready")).send().await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{url} never became ready");
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let r = http().get(url).send().await.expect("GET");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

pub async fn post_json(url: &str, body: Value) -> (u16, Value) {
    let r = http().post(url).json(&body).send().await.expect("POST");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// A chat request body.
pub fn chat(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": "haq-sim-8b", "messages": [{"role": "user", "content": prompt}],
           "max_tokens": max_tokens, "temperature": 0, "stream": true})
}

/// What a client saw of one streamed request.
#[derive(Debug)]
pub struct Seen {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub sent: Instant,
    /// Every SSE `data:` payload with its arrival time.
    pub events: Vec<(Instant, String)>,
    /// The body broke (reset, EOF inside a chunk) instead of ending cleanly.
    pub broken: Option<String>,
}

impl Seen {
    pub fn data(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter_map(|(_, d)| serde_json::from_str(d).ok())
            .collect()
    }
    /// Content deltas (`choices[0].delta.content` or `.text`).
    pub fn content(&self) -> Vec<String> {
        self.data()
            .iter()
            .filter_map(|v| {
                let c = &v["choices"][0];
                c["delta"]["content"]
                    .as_str()
                    .or(c["text"].as_str())
                    .map(str::to_string)
            })
            .filter(|s| !s.is_empty())
            .collect()
    }
    pub fn done(&self) -> bool {
        self.events.iter().any(|(_, d)| d.trim() == "[DONE]")
    }
    pub fn ttft(&self) -> Option<Duration> {
        let i = self.data().iter().position(|v| {
            let c = &v["choices"][0];
            c["delta"]["content"].is_string()
                || c["text"].is_string()
                || c["delta"]["tool_calls"].is_array()
        })?;
        Some(
            self.events
                .iter()
                .filter(|(_, d)| serde_json::from_str::<Value>(d).is_ok())
                .nth(i)?
                .0
                - self.sent,
        )
    }
}

/// Streams `body` to `url` with extra headers; reads until the body ends, breaks, or
/// `limit` passes.
pub async fn stream(url: &str, body: &Value, headers: &[(&str, &str)], limit: Duration) -> Seen {
    let mut req = http().post(url).json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let sent = Instant::now();
    let mut resp = req.send().await.expect("response head");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut parser = SseParser::new();
    let mut items = Vec::new();
    let mut events = Vec::new();
    let mut broken = None;
    let deadline = sent + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, resp.chunk()).await {
            Err(_) => {
                broken = Some("test time limit".into());
                break;
            }
            Ok(Ok(Some(b))) => {
                let t = Instant::now();
                parser.push(&b, &mut items);
                for it in items.drain(..) {
                    if let SseItem::Event(e) = it {
                        events.push((t, e.data));
                    }
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                broken = Some(format!("{e:?}"));
                break;
            }
        }
    }
    Seen {
        status,
        headers,
        sent,
        events,
        broken,
    }
}

/// Reads a JSON-lines journal.
pub fn journal<T: for<'de> serde::Deserialize<'de>>(path: &Path) -> Vec<T> {
    haq::wire::journal::read_lines(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `f` holds (polling), or panics with `what`.
pub async fn eventually(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}
