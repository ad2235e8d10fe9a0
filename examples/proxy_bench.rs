//! What haq's interposition proxy costs on the path: added latency per SSE event and
//! CPU per event, against a local upstream that stamps CLOCK_MONOTONIC into every event.
//!
//! ```sh
//! cargo run --release --example proxy_bench -- [STREAMS] [EVENTS] [GAP_MS]
//! ```
//!
//! Runs the same load twice — client → upstream directly, then client → proxy →
//! upstream — and prints, for each, the event receive lag p50/p99/p99.9 (client arrival
//! minus the upstream's send stamp) and the process CPU time per event; the difference
//! is the proxy's cost. Figures are in docs/performance.md.

use std::time::{Duration, Instant};

use haq::proxy::{ProxySet, ProxySpec};
use haq::trace::{Clock, TraceWriter};
use haq::wire::mono_ns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Answers each POST with `events` chunked SSE events, `gap` apart, each stamped.
async fn upstream(events: u32, gap: Duration) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..p]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if got.len() >= p + 4 + len {
                            got.drain(..p + 4 + len);
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut next = Instant::now();
                for _ in 0..events {
                    next += gap;
                    tokio::time::sleep_until(next.into()).await;
                    let ev = format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok \"}}}}],\"t\":{}}}\n\n",
                        mono_ns()
                    );
                    let c = format!("{:x}\r\n{ev}\r\n", ev.len());
                    if s.write_all(c.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let _ = s.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

/// A chat request body as haq sends it: a prompt of `BODY_WORDS` words and the
/// per-request marker in the `user` field (what the proxy reads to attribute it).
fn body_of(id: usize) -> String {
    let words = [
        "the", "cluster", "serves", "tokens", "while", "a", "replica", "fails",
    ];
    let prompt: Vec<&str> = (0..BODY_WORDS).map(|i| words[i % words.len()]).collect();
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}],"max_tokens":200,"stream":true,"user":"haq-{BENCH_TOKEN}-r{id:06}"}}"#,
        prompt.join(" ")
    )
}

/// Words of each request's prompt (about 7 bytes each: a 1,000-token prompt).
const BODY_WORDS: usize = 1000;
/// The run token of the bench's markers.
const BENCH_TOKEN: &str = "0be4c100";

/// One stream: returns the receive lag (ns) of each event.
async fn stream(addr: std::net::SocketAddr, id: usize) -> Vec<u64> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let _ = s.set_nodelay(true);
    let body = body_of(id);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: b\r\nx-request-id: r{id}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("send");
    let mut lags = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut carry = String::new();
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = mono_ns();
        carry.push_str(&String::from_utf8_lossy(&buf[..n]));
        while let Some(i) = carry.find("\"t\":") {
            let rest = &carry[i + 4..];
            let Some(j) = rest.find('}') else { break };
            if let Ok(t) = rest[..j].parse::<u64>() {
                lags.push(now.saturating_sub(t));
            }
            carry.drain(..i + 4 + j);
        }
        if carry.ends_with("0\r\n\r\n") {
            break;
        }
    }
    lags
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1e3
}

async fn run(label: &str, addr: std::net::SocketAddr, streams: usize) -> (f64, usize) {
    let cpu = cpu_s();
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..streams {
        set.spawn(stream(addr, i));
    }
    let mut lags = Vec::new();
    while let Some(r) = set.join_next().await {
        lags.extend(r.expect("stream"));
    }
    lags.sort_unstable();
    let cpu = cpu_s() - cpu;
    println!(
        "{label:<7} {:>7} events in {:>5.2}s · lag p50 {:>7.1} µs · p99 {:>8.1} µs · p99.9 {:>8.1} µs · CPU {:>6.2} µs/event (upstream + client{})",
        lags.len(),
        t.elapsed().as_secs_f64(),
        pct(&lags, 0.5),
        pct(&lags, 0.99),
        pct(&lags, 0.999),
        cpu / lags.len().max(1) as f64 * 1e6,
        if label == "proxied" { " + proxy" } else { "" },
    );
    (cpu, lags.len())
}

/// What reading the marker costs per request: the scan over one body, alone.
fn scan_cost() {
    let Some(token) = haq::wire::marker::RunToken::parse(BENCH_TOKEN) else {
        return;
    };
    let bodies: Vec<String> = (0..1000).map(body_of).collect();
    let t = Instant::now();
    let mut found = 0;
    for _ in 0..20 {
        for b in &bodies {
            let mut s = haq::wire::marker::MarkerScan::new(token);
            // In the pieces a 4 KiB read gives.
            for part in b.as_bytes().chunks(4096) {
                s.feed(part);
            }
            s.end();
            found += usize::from(s.found().is_some());
        }
    }
    let per = t.elapsed().as_secs_f64() / 20_000.0;
    println!(
        "marker scan: {:.2} µs per {}-byte body ({found} of 20000 found)",
        per * 1e6,
        bodies[0].len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let streams: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let events: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let gap = Duration::from_millis(args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5));
    println!("{streams} streams × {events} events, one every {gap:?} per stream");
    let up = upstream(events, gap).await;
    let dir = std::env::temp_dir().join(format!("haq-proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (tw, th) = TraceWriter::create(&dir.join("trace.jsonl")).expect("trace");
    let proxies = ProxySet::start(
        &[ProxySpec {
            name: "w1".into(),
            listen: "127.0.0.1:0".parse().expect("addr"),
            upstream: Some(up.to_string()),
        }],
        &tw,
        &Clock::start(),
    )
    .await
    .expect("proxy");
    // Bodies are scanned for this run's markers, as in `haq run`.
    if let Some(t) = haq::wire::marker::RunToken::parse(BENCH_TOKEN) {
        proxies.board().set_run_token(t);
    }
    let via = proxies.replicas[0].listen;
    let _ = run("warm-up", up, streams / 4 + 1).await;
    let (c1, n1) = run("direct", up, streams).await;
    let (c2, n2) = run("proxied", via, streams).await;
    println!(
        "proxy CPU ≈ {:.2} µs per event",
        (c2 / n2.max(1) as f64 - c1 / n1.max(1) as f64) * 1e6
    );
    scan_cost();
    drop(proxies);
    drop(tw);
    let _ = th.finish();
    let _ = std::fs::remove_dir_all(&dir);
}
