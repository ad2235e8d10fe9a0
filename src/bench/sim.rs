//! `haq sim bench`: how precisely the sim keeps its model's timing under load. Starts a
//! cluster, keeps `replicas × streams` streaming requests open (each re-sent when it
//! ends), and after a warm-up measures, for the measured window:
//!
//! - **event lateness**: how long after its engine step's modelled deadline each token
//!   event was handed to the socket writer (engine scheduling + HTTP runtime) — the
//!   decode-step timing error a client sees, the figure docs/performance.md records;
//! - step lateness: how late each engine step published (engine thread only);
//! - client-side inter-chunk gaps, events per second, CPU used by the sim processes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::target::sim::{SimCluster, haq_binary};

#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub replicas: u32,
    /// Concurrent streams per replica.
    pub streams: u32,
    pub warmup: Duration,
    pub duration: Duration,
    pub max_tokens: u32,
    pub prompt_tokens: u32,
    /// Through the gateway (true) or straight to the workers.
    pub via_gateway: bool,
    pub dir: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Quantiles {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>) -> Quantiles {
        Quantiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }

    fn row(&self, name: &str) -> String {
        let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
        format!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            self.count,
            ms(self.p50_us),
            ms(self.p90_us),
            ms(self.p99_us),
            ms(self.p999_us),
            ms(self.max_us)
        )
    }
}

#[derive(Debug, Clone)]
pub struct BenchReport {
    pub opts: BenchOpts,
    pub event_lateness: Quantiles,
    pub step_lateness: Quantiles,
    pub client_gap: Quantiles,
    pub events_per_s: f64,
    pub requests: u64,
    /// CPU seconds per wall second used by the sim processes (workers, gateway, tools)
    /// and by this process (the load generator).
    pub sim_cpu: f64,
    pub client_cpu: f64,
    pub loadavg: String,
}

impl BenchReport {
    pub fn render(&self) -> String {
        let o = &self.opts;
        format!(
            "haq sim bench: {} replicas x {} streams via {}, {} prompt / {} output tokens, {:.0} s measured after {:.0} s warm-up\n\n\
             | timing (ms) | n | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|\n{}\n{}\n{}\n\n\
             {:.0} events/s, {} requests completed or cut at the end; CPU: sim processes {:.2} cores, load generator {:.2} cores; load average {}\n",
            o.replicas,
            o.streams,
            if o.via_gateway {
                "the gateway"
            } else {
                "direct worker connections"
            },
            o.prompt_tokens,
            o.max_tokens,
            o.duration.as_secs_f64(),
            o.warmup.as_secs_f64(),
            self.event_lateness
                .row("event lateness (deadline → socket writer)"),
            self.step_lateness.row("engine step lateness"),
            self.client_gap.row("client inter-chunk gap"),
            self.events_per_s,
            self.requests,
            self.sim_cpu,
            self.client_cpu,
            self.loadavg,
        )
    }
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

fn merge(into: &mut Histogram<u64>, pairs: &serde_json::Value) {
    for p in pairs.as_array().into_iter().flatten() {
        if let (Some(v), Some(n)) = (p[0].as_u64(), p[1].as_u64()) {
            let _ = into.record_n(v.max(1), n);
        }
    }
}

fn hist() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 3_600_000_000, 3)?)
}

/// One client loop: stream, read to the end, repeat until `stop`. A bare HTTP/1.1
/// client over a TCP socket (counting `data: ` lines, timestamping each read): the load
/// generator shares the two cores with the sim, so it must cost little per event.
async fn client_loop(
    addr: String,
    request: bytes::Bytes,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    events: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
) -> Option<Histogram<u64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut gaps = hist().ok()?;
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut sock) = tokio::net::TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        if sock.write_all(&request).await.is_err() {
            continue;
        }
        let mut last: Option<Instant> = None;
        // Bytes of a `data: ` marker split across two reads.
        let mut carry: Vec<u8> = Vec::new();
        loop {
            let n = match sock.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            carry.extend_from_slice(&buf[..n]);
            let found = carry.windows(6).filter(|w| w == b"data: ").count() as u64;
            let keep = carry.len().saturating_sub(5);
            carry.drain(..keep);
            if measuring.load(Ordering::Relaxed) {
                events.fetch_add(found, Ordering::Relaxed);
                if let Some(l) = last {
                    let _ = gaps.record(now.duration_since(l).as_micros().max(1) as u64);
                }
            }
            last = Some(now);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        if measuring.load(Ordering::Relaxed) {
            requests.fetch_add(1, Ordering::Relaxed);
        }
    }
    Some(gaps)
}

pub async fn run(o: BenchOpts) -> anyhow::Result<BenchReport> {
    crate::wire::tls::install_crypto_provider();
    std::fs::create_dir_all(&o.dir)?;
    let mut target: crate::scenario::Target =
        serde_json::from_value(serde_json::json!({"kind": "sim"}))?;
    target.replicas = Some(crate::scenario::Replicas::Count(o.replicas));
    target.gateway.max_inflight_per_worker =
        target.gateway.max_inflight_per_worker.max(o.streams * 2);
    let bin = haq_binary()?;
    let cluster = SimCluster::start(&target, &bin, &o.dir)
        .await
        .context("starting the sim cluster")?;
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for k in 0..o.replicas * o.streams {
        let base = if o.via_gateway {
            &cluster.gateway.url
        } else {
            &cluster.info[(k % o.replicas) as usize].url
        };
        let addr = base.trim_start_matches("http://").to_string();
        let prompt: Vec<String> = (0..o.prompt_tokens).map(|i| format!("b{k}w{i}")).collect();
        let body = serde_json::json!({"model": target.model, "stream": true, "temperature": 0,
            "max_tokens": o.max_tokens, "messages": [{"role": "user", "content": prompt.join(" ")}]});
        let body = body.to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tasks.push(tokio::spawn(client_loop(
            addr,
            bytes::Bytes::from(request),
            stop.clone(),
            measuring.clone(),
            events.clone(),
            requests.clone(),
        )));
    }
    tokio::time::sleep(o.warmup).await;
    let control = reqwest::Client::builder().no_proxy().build()?;
    for w in &cluster.info {
        control
            .post(format!("{}/admin/timing/reset", w.url))
            .send()
            .await?;
    }
    let mut pids: Vec<u32> = cluster.info.iter().filter_map(|r| r.pid).collect();
    pids.push(cluster.gateway.pid);
    pids.push(cluster.tools.pid);
    let cpu = |pids: &[u32]| pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let (sim0, me0, t0) = (cpu(&pids), cpu_seconds(std::process::id()), Instant::now());
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(o.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let wall = t0.elapsed().as_secs_f64();
    let (sim1, me1) = (cpu(&pids), cpu_seconds(std::process::id()));
    let mut step = hist()?;
    let mut event = hist()?;
    for w in &cluster.info {
        let t: serde_json::Value = control
            .get(format!("{}/admin/timing", w.url))
            .send()
            .await?
            .json()
            .await?;
        merge(&mut step, &t["step_lateness_us"]);
        merge(&mut event, &t["event_lateness_us"]);
    }
    let loadavg = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    stop.store(true, Ordering::Relaxed);
    cluster.stop().await;
    let mut gaps = hist()?;
    for t in tasks {
        if let Ok(Some(h)) = t.await {
            let _ = gaps.add(&h);
        }
    }
    Ok(BenchReport {
        event_lateness: Quantiles::of(&event),
        step_lateness: Quantiles::of(&step),
        client_gap: Quantiles::of(&gaps),
        events_per_s: events.load(Ordering::Relaxed) as f64 / wall,
        requests: requests.load(Ordering::Relaxed),
        sim_cpu: (sim1 - sim0) / wall,
        client_cpu: (me1 - me0) / wall,
        loadavg,
        opts: o,
    })
}
