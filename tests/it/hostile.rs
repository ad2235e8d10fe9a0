//! haq against hostile local servers and with its own resources short (issue 15
//! items 1, 5, 6): an open-file limit too low for the load makes the run INVALID and
//! names the limit (never the target's `refused`), a plan that cannot fit is refused
//! before anything starts; a gigabyte line, body or event, data after `[DONE]`, an
//! endless tail, an encoded body and an endless or slow head each end their request
//! with a named outcome charged to the target — memory and the trace stay small and
//! the run stays valid.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haq::client::{self, Call, Timeouts};
use haq::scenario::Transport;
use haq::trace::{Clock, Event, Outcome, TraceWriter};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::{haq_bin, one_result, read_request, scratch};

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
const MIB: usize = 1 << 20;

async fn chunk(s: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    s.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    s.write_all(data).await?;
    s.write_all(b"\r\n").await
}

fn delta(text: &str) -> String {
    format!(
        "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
    )
}

const FINISH: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

/// A whole answer: three deltas, a finish, `[DONE]`.
fn answer() -> String {
    format!(
        "{}{}{}{FINISH}data: [DONE]\n\n",
        delta("a"),
        delta(" b"),
        delta(" c")
    )
}

/// What one hostile response does. Everything endless is bounded (1 GiB, a minute)
/// and stops at the first failed write: when haq has closed the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostile {
    /// A clean answer.
    Clean,
    /// `data: aaaa…`, 1 GiB with no line end.
    HugeLine,
    /// A 1 GiB `application/json` answer.
    HugeBody,
    /// One 1 GiB event of 64 KiB data lines.
    HugeEvent,
    /// A clean answer, then five more deltas.
    DeltasAfterDone,
    /// A clean answer, then a keep-alive every 100 ms for a minute.
    EndlessTail,
    /// A gzip-encoded stream haq did not ask for.
    Gzip,
    /// A head of a million headers of 2 KB each.
    EndlessHead,
    /// A head that trickles a header every 200 ms for 20 s.
    SlowHead,
    /// A stream of deltas every 50 ms for a minute that never ends.
    EndlessStream,
    /// A clean answer streamed over 3 s (six deltas 500 ms apart).
    Slow,
}

const ALL: [Hostile; 10] = [
    Hostile::Clean,
    Hostile::HugeLine,
    Hostile::HugeBody,
    Hostile::HugeEvent,
    Hostile::DeltasAfterDone,
    Hostile::EndlessTail,
    Hostile::Gzip,
    Hostile::EndlessHead,
    Hostile::SlowHead,
    Hostile::EndlessStream,
];

async fn respond(s: &mut TcpStream, h: Hostile) -> std::io::Result<()> {
    let a = vec![b'a'; 64 * 1024];
    match h {
        Hostile::Clean => {
            s.write_all(SSE_HEAD).await?;
            chunk(s, answer().as_bytes()).await?;
        }
        Hostile::HugeLine => {
            s.write_all(SSE_HEAD).await?;
            chunk(s, b"data: ").await?;
            for _ in 0..(1 << 14) {
                chunk(s, &a).await?;
            }
        }
        Hostile::HugeBody => {
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1073741824\r\n\r\n").await?;
            s.write_all(b"{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"content\":\"")
                .await?;
            for _ in 0..(1 << 14) {
                s.write_all(&a).await?;
            }
        }
        Hostile::HugeEvent => {
            s.write_all(SSE_HEAD).await?;
            let mut line = b"data: ".to_vec();
            line.extend_from_slice(&a);
            line.push(b'\n');
            for _ in 0..(1 << 14) {
                chunk(s, &line).await?;
            }
            chunk(s, b"\n").await?;
        }
        Hostile::DeltasAfterDone => {
            s.write_all(SSE_HEAD).await?;
            let more: String = (0..5).map(|k| delta(&format!(" late{k}"))).collect();
            chunk(s, format!("{}{more}", answer()).as_bytes()).await?;
        }
        Hostile::EndlessTail => {
            s.write_all(SSE_HEAD).await?;
            chunk(s, answer().as_bytes()).await?;
            for _ in 0..600 {
                chunk(s, b": keep-alive\n\n").await?;
                s.flush().await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Hostile::Gzip => {
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n").await?;
            chunk(
                s,
                b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\x49\x2c\x49\xb4\x52",
            )
            .await?;
        }
        Hostile::EndlessHead => {
            s.write_all(b"HTTP/1.1 200 OK\r\n").await?;
            let v = "v".repeat(2000);
            for k in 0..1_000_000 {
                s.write_all(format!("x-pad-{k}: {v}\r\n").as_bytes())
                    .await?;
            }
        }
        Hostile::SlowHead => {
            s.write_all(b"HTTP/1.1 200 OK\r\n").await?;
            for k in 0..100 {
                s.write_all(format!("x-slow-{k}: v\r\n").as_bytes()).await?;
                s.flush().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Hostile::EndlessStream => {
            s.write_all(SSE_HEAD).await?;
            for k in 0..1200 {
                chunk(s, delta(&format!(" on{k}")).as_bytes()).await?;
                s.flush().await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Hostile::Slow => {
            s.write_all(SSE_HEAD).await?;
            for k in 0..6 {
                chunk(s, delta(&format!(" w{k}")).as_bytes()).await?;
                s.flush().await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            chunk(s, format!("{FINISH}data: [DONE]\n\n").as_bytes()).await?;
        }
    }
    s.write_all(b"0\r\n\r\n").await?;
    s.flush().await
}

/// What the server saw: each request id with the behaviour it got, and whether its
/// request asked for `accept-encoding: identity`.
type Seen = Arc<Mutex<Vec<(String, Hostile, bool)>>>;

/// A server on 127.0.0.1 answering the k-th POST with `pick(k)` (a `GET` — haq's
/// look at `/v1/models` before load — with an empty model list), one request per
/// connection.
async fn server(pick: fn(usize) -> Hostile) -> (String, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let posts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (log, posts) = (log.clone(), posts.clone());
            tokio::spawn(async move {
                let Some(head) = read_request(&mut s, &mut Vec::new()).await else {
                    return;
                };
                if !head.starts_with("post ") {
                    let body = r#"{"object":"list","data":[]}"#;
                    let r = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(r.as_bytes()).await;
                    return;
                }
                let h = pick(posts.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let id = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-request-id:"))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default();
                let identity = head.contains("accept-encoding: identity");
                if let Ok(mut v) = log.lock() {
                    v.push((id, h, identity));
                }
                let _ = respond(&mut s, h).await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// `e2e`: the p95 objective (TTFT and ITL objectives no longer).
fn scenario(url: &str, rate: &str, secs: f64, e2e: &str, client: &str) -> String {
    format!(
        "name: hostile\ntarget: {{kind: url, url: '{url}/v1'}}\nworkload:\n  seed: 1\n  mix: {{classes: [{{name: c, prompt_tokens: 5, output_tokens: 6}}]}}\n  arrival: {{process: constant, rate: {rate}}}\nprotected_load: {rate}\nslo: {{ttft_p95: {e2e}, itl_p95: {e2e}, e2e_p95: {e2e}}}\nphases: [{{name: baseline, duration: {secs}s}}]\nclient: {{max_late: 5s, drain_timeout: 60s{client}}}\n"
    )
}

/// `haq run` of `text` (off the runtime: the test's server keeps serving) with its
/// open-file limit at `nofile` (soft and hard), or as inherited: exit code, stdout,
/// stderr, peak RSS (KiB) and the run directory.
async fn haq_run(
    name: &'static str,
    text: String,
    nofile: Option<u64>,
) -> (Option<i32>, String, String, i64, PathBuf) {
    tokio::task::spawn_blocking(move || haq_run_blocking(name, &text, nofile))
        .await
        .expect("join")
}

// The child is reaped by wait4 (for its own rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn haq_run_blocking(
    name: &str,
    text: &str,
    nofile: Option<u64>,
) -> (Option<i32>, String, String, i64, PathBuf) {
    let dir = scratch(name);
    let file = dir.join("s.yaml");
    std::fs::write(&file, text).expect("scenario");
    let out = dir.join("run");
    let mut c = std::process::Command::new(haq_bin());
    c.args(["run", "-q", "--out"])
        .arg(&out)
        .arg("--reports-dir")
        .arg(&dir)
        .arg(&file)
        .env("HAQ_NICE", "off")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; it lowers the child's own limit.
        unsafe {
            c.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = c.spawn().expect("haq runs");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let so = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let se = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    // Its own peak RSS, sampled from /proc while it runs: VmHWM, the high-water mark of
    // the process's own memory since its exec. Not wait4's ru_maxrss: Linux carries
    // into it, across the exec, the RSS of the address space the child was spawned
    // from (posix_spawn shares the test process's until the exec), so it read 92–170
    // MiB under the full suite, where the test process itself is that large, against
    // ~50 MiB alone. And the anonymous part (the heap: what a response makes haq hold).
    let pid = child.id();
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let on = sampling.clone();
    let sampler = std::thread::spawn(move || {
        let mut peak = (0i64, 0i64);
        while on.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                let kib = |k: &str| {
                    s.lines()
                        .find(|l| l.starts_with(k))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse::<i64>().ok())
                        .unwrap_or(0)
                };
                peak = (peak.0.max(kib("VmHWM:")), peak.1.max(kib("RssAnon:")));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        peak
    });
    // wait4: this child's own peak RSS (other tests' children do not count).
    let mut status = 0;
    // SAFETY: rusage is a plain struct we own; wait4 reaps exactly this child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (hwm, anon) = sampler.join().expect("sampler");
    eprintln!(
        "{name}: peak RSS {hwm} KiB (VmHWM), of it anonymous {anon} KiB; wait4's maxrss {} KiB",
        ru.ru_maxrss
    );
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let stdout = so.join().expect("stdout");
    let stderr = se.join().expect("stderr");
    (code, stdout, stderr, hwm, out)
}

fn ends(run: &Path) -> HashMap<String, (Outcome, String)> {
    haq::trace::read(&run.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .map_while(Result::ok)
        .filter_map(|e| match e {
            Event::End {
                id,
                outcome,
                detail,
                ..
            } => Some((id, (outcome, detail.unwrap_or_default()))),
            _ => None,
        })
        .collect()
}

fn report(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_short_of_file_descriptors_is_invalid_naming_haqs_limit_not_the_targets_refusal() {
    // 80 streams a second of 3 s each want ~240 sockets; haq may open 160 files. The
    // plan (slo.e2e_p95 500 ms: ~50 in flight) fits, so the run starts; the target
    // is slower than planned and haq runs out. Through both HTTP clients.
    for transport in ["auto", "reqwest"] {
        short_of_descriptors(transport).await;
    }
}

/// The run wrote its report and is INVALID.
fn assert_invalid(run: &Path, stdout: &str, stderr: &str, code: Option<i32>, what: &str) {
    assert!(
        run.join("report.json").exists(),
        "{code:?} {stdout}\n{stderr}"
    );
    assert_eq!(
        one_result(run, stdout, code),
        "INVALID",
        "{what}: {stdout}\n{stderr}"
    );
}

async fn short_of_descriptors(transport: &str) {
    let (url, _) = server(|_| Hostile::Slow).await;
    let client = format!(", transport: {transport}");
    let text = scenario(&url, "80/s", 4.0, "500ms", &client);
    let (code, stdout, stderr, _, run) = haq_run("emfile", text, Some(160)).await;
    assert_invalid(&run, &stdout, &stderr, code, transport);
    let ends = ends(&run);
    let local: Vec<&String> = ends
        .values()
        .filter(|(o, _)| *o == Outcome::Local)
        .map(|(_, d)| d)
        .collect();
    assert!(!local.is_empty(), "{transport}: {ends:?}");
    assert!(
        local
            .iter()
            .all(|d| d.starts_with("EMFILE (haq's open-file limit ran out) nofile=160/160")),
        "{transport}: {local:?}"
    );
    assert!(
        !ends.values().any(|(o, _)| *o == Outcome::Refused),
        "haq's own EMFILE is never the target's refusal"
    );
    let j = report(&run);
    let breach = j["client"]["breaches"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["rule"] == "local"))
        .unwrap_or_else(|| panic!("{}", j["client"]));
    let m = breach["message"].as_str().unwrap_or_default();
    assert!(
        m.contains(&format!(
            "haq ran out of file descriptors (EMFILE) on {} request(s)",
            local.len()
        )) && m.contains("raise `ulimit -n` (now 160)"),
        "{m}"
    );
    assert!(
        stdout.contains("[local] haq ran out of file descriptors"),
        "{stdout}"
    );
    assert_eq!(j["client"]["local_failures"], local.len());
    // The requests that got a socket completed: the target did its part.
    assert!(
        ends.values().any(|(o, _)| *o == Outcome::Completed),
        "{ends:?}"
    );
}

/// haq's proxy short of descriptors: a gateway (here the test) opens 150 idle
/// connections to the proxy of replica w1, which accepts each and connects each to the
/// replica, past haq's limit of 200 files. The proxy's own EMFILE, accepting or
/// connecting, is haq's failure — the run is INVALID naming haq's proxy — and never
/// a connect the replica refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haqs_proxy_short_of_file_descriptors_makes_the_run_invalid_not_the_replica() {
    let (url, _) = server(|_| Hostile::Clean).await;
    let port = crate::simkit::free_port();
    let upstream = url.trim_start_matches("http://");
    let text = scenario(&url, "5/s", 8.0, "2s", "").replace(
        &format!("url: '{url}/v1'}}"),
        &format!(
            "url: '{url}/v1', replicas: [{{name: w1, upstream: '{upstream}', listen: '127.0.0.1:{port}'}}]}}"
        ),
    );
    assert!(text.contains("listen:"), "{text}");
    let run = tokio::spawn(haq_run("proxy-emfile", text, Some(200)));
    // The gateway's pool: idle connections to the proxy while the run lasts, opened
    // once the load runs (the proxy listens first; haq's start-up is left its files).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut pool = Vec::new();
    while pool.len() < 150 && tokio::time::Instant::now() < deadline {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(s) => pool.push(s),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let (code, stdout, stderr, _, run) = run.await.expect("join");
    drop(pool);
    assert_invalid(&run, &stdout, &stderr, code, "through the proxy");
    let events: Vec<Event> = haq::trace::read(&run.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .map_while(Result::ok)
        .collect();
    let local: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ProxyLocal { errno, during, .. } => Some((errno.as_str(), during.as_str())),
            _ => None,
        })
        .collect();
    assert!(!local.is_empty(), "the proxy ran out: {stdout}");
    assert!(local.iter().all(|(e, _)| *e == "EMFILE"), "{local:?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ProxyRefused { .. })),
        "haq's proxy's EMFILE is never a refused connect to the replica"
    );
    let j = report(&run);
    let named = j["client"]["breaches"].as_array().is_some_and(|b| {
        b.iter().any(|b| {
            b["rule"] == "local"
                && b["message"].as_str().is_some_and(|m| {
                    m.starts_with("haq's proxy for w1 ran out of file descriptors (EMFILE)")
                })
        })
    });
    assert!(named, "{}", j["client"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_cannot_fit_haqs_open_file_limit_is_refused_before_anything_starts() {
    let (url, seen) = server(|_| Hostile::Clean).await;
    // 200/s × 10 s ≈ 2000 streams in flight at the peak; haq may open 64 files.
    let text = scenario(&url, "200/s", 20.0, "10s", "");
    let (code, stdout, stderr, _, run) = haq_run("nofit", text, Some(64)).await;
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("open-file limit is 64 (hard limit 64)")
            && stderr.contains("requests in flight"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one clear error: {stderr}");
    assert!(!run.exists(), "nothing started: no run directory");
    assert!(seen.lock().expect("seen").is_empty(), "no request sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_responses_end_with_named_outcomes_in_bounded_memory_and_the_run_stays_valid() {
    let (url, seen) = server(|k| ALL[k % ALL.len()]).await;
    // 4 requests a second for 3 s: each behaviour at least once.
    let text = scenario(
        &url,
        "4/s",
        3.0,
        "20s",
        ", limits: {after_done: 1s, head_timeout: 1s, duration: 2s}",
    );
    let (code, stdout, stderr, rss_kib, run) = haq_run("hostile", text, None).await;
    // FAIL (Request-Fate's findings), never INVALID: the server's doing, not haq's.
    assert_eq!(
        one_result(&run, &stdout, code),
        "FAIL",
        "{stdout}\n{stderr}"
    );
    let j = report(&run);
    assert_eq!(j["valid"], true, "{}", j["client"]);
    let ends = ends(&run);
    let seen = seen.lock().expect("seen").clone();
    assert!(seen.len() >= ALL.len(), "{seen:?}");
    for (id, h, identity) in &seen {
        assert!(identity, "{id}: haq asks for accept-encoding: identity");
        let (o, d) = ends.get(id).unwrap_or_else(|| panic!("no end for {id}"));
        let (want, says) = match h {
            Hostile::Clean => (Outcome::Completed, ""),
            Hostile::HugeLine => (
                Outcome::Oversized,
                "an SSE line longer than client.limits.line (1MiB)",
            ),
            Hostile::HugeBody => (
                Outcome::Oversized,
                "a non-streamed answer larger than client.limits.body (4MiB)",
            ),
            Hostile::HugeEvent => (
                Outcome::Oversized,
                "an SSE event larger than client.limits.event (2MiB)",
            ),
            Hostile::DeltasAfterDone => (
                Outcome::AfterDone,
                "5 data events (5 output deltas) after [DONE]",
            ),
            Hostile::EndlessTail => (Outcome::AfterDone, "still sending 1s after [DONE]"),
            Hostile::Gzip => (Outcome::Encoded, "content-encoding: gzip"),
            Hostile::EndlessHead => (Outcome::BadHead, "larger than 65536 bytes"),
            Hostile::SlowHead => (Outcome::BadHead, "not complete 1s after its first byte"),
            Hostile::EndlessStream => (Outcome::Endless, "still sending 2s after it was sent"),
            Hostile::Slow => unreachable!(),
        };
        assert_eq!(*o, want, "{id} ({h:?}): {d}");
        assert!(d.contains(says), "{id} ({h:?}): {d}");
        assert!(d.len() < 1000, "a bounded detail: {d}");
    }
    // Memory and the trace stay small: the gigabytes were never held or written.
    let trace = std::fs::metadata(run.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .len();
    assert!(trace < 4 * MIB as u64, "trace {trace} bytes");
    eprintln!("hostile run: peak RSS {rss_kib} KiB, trace {trace} bytes");
    // Under 64 MiB, as issue 15 asks: the (debug) run's own peak is ~50 MiB, most of
    // it the binary's code; its heap ~10 MiB. Nothing near the gigabytes it was sent is
    // held.
    assert!(rss_kib < 64 * 1024, "peak RSS {rss_kib} KiB");
    let kinds: Vec<&str> = j["findings"]
        .as_array()
        .map(|f| f.iter().filter_map(|x| x["kind"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        kinds.contains(&"data_after_done") && kinds.contains(&"protocol_violation"),
        "{kinds:?}"
    );
    let fate = j["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "Request-Fate"))
        .expect("Request-Fate");
    assert_eq!(fate["status"], "FAIL", "{fate}");
}

/// Both HTTP clients against one hostile response: the outcome of its end.
async fn through(h: Hostile, transport: Transport) -> (Outcome, String) {
    haq::install_crypto_provider();
    let (url, _) = server(match h {
        Hostile::HugeLine => |_| Hostile::HugeLine,
        Hostile::Gzip => |_| Hostile::Gzip,
        Hostile::EndlessHead => |_| Hostile::EndlessHead,
        _ => |_| Hostile::Clean,
    })
    .await;
    let dir = scratch("hostile-client");
    let path = dir.join("t.jsonl");
    let (tw, th) = TraceWriter::create(&path).expect("trace");
    let http =
        client::Http::new(Duration::from_secs(2), &Default::default(), transport).expect("client");
    let c = Call::new(
        "r1",
        format!("{url}/v1/chat/completions"),
        bytes::Bytes::from_static(b"{}"),
    );
    let t = Timeouts {
        first_token: Duration::from_secs(20),
        idle: Duration::from_secs(10),
    };
    let r = client::execute(&http, &c, t, &Clock::start(), &tw).await;
    drop(tw);
    th.finish().expect("trace written");
    let detail = haq::trace::read(&path)
        .expect("read")
        .map_while(Result::ok)
        .find_map(|e| match e {
            Event::End { detail, .. } => Some(detail.unwrap_or_default()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(
        std::fs::metadata(&path).expect("trace").len() < MIB as u64,
        "{h:?} through {transport:?}: the trace holds a prefix, not the line"
    );
    (r.outcome, detail)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_bound_a_huge_line_name_an_encoding_and_refuse_an_endless_head() {
    for tr in [Transport::Auto, Transport::Reqwest] {
        let (o, d) = through(Hostile::HugeLine, tr).await;
        assert_eq!(o, Outcome::Oversized, "{tr:?}: {d}");
        assert!(d.contains("it began \"data: aaaa"), "{tr:?}: {d}");
        let (o, d) = through(Hostile::Gzip, tr).await;
        assert_eq!(o, Outcome::Encoded, "{tr:?}: {d}");
        let (o, d) = through(Hostile::EndlessHead, tr).await;
        assert_eq!(o, Outcome::BadHead, "{tr:?}: {d}");
        let (o, d) = through(Hostile::Clean, tr).await;
        assert_eq!(o, Outcome::Completed, "{tr:?}: {d}");
    }
}

/// A disk that fills during the run (a 256 KiB tmpfs in a mount namespace of the
/// test's own): the run stops soon after its trace cannot be written — not at the
/// end of its two planned minutes — heals, and says it was haq's host (exit 2).
#[test]
fn a_full_disk_stops_the_run_and_says_it_was_haqs_host() {
    let dir = scratch("enospc");
    let mnt = dir.join("small");
    std::fs::create_dir_all(&mnt).expect("mnt");
    let can = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size=256k tmpfs '{}'",
            mnt.display()
        ))
        .status()
        .is_ok_and(|s| s.success());
    if !can {
        crate::support::skipped(
            "hostile::a_full_disk_stops_the_run_and_says_it_was_haqs_host",
            "no user and mount namespace here (unshare -rm): cannot make a small disk",
        );
        return;
    }
    let scenario = std::fs::canonicalize("scenarios/quickstart.yaml").expect("quickstart");
    let script = format!(
        "mount -t tmpfs -o size=256k tmpfs '{m}' && exec '{haq}' run -q --out '{m}/run' '{s}' --set phases[0].duration=60s --set phases[1].duration=30s --set phases[2].duration=30s",
        m = mnt.display(),
        haq = haq_bin().display(),
        s = scenario.display()
    );
    let started = std::time::Instant::now();
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .env("HAQ_NICE", "off")
        .output()
        .expect("runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("could not be written (No space left on device")
            && stderr.contains("a failure of haq's host, not of the target"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "one clear error: {stderr}"
    );
    // Planned: two minutes of load. Stopped when the trace filled (seconds in).
    assert!(
        took < Duration::from_secs(90),
        "the run went on {took:?} with no trace"
    );
}
