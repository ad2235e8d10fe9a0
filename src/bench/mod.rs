//! `haq bench client`: measures what haq's own client costs and how late it sees
//! events. A `haq bench server` child process (stamping its send time into each event)
//! serves the streams; the client side is the real `haq run` path — dispatcher,
//! client, SSE parser, classification, trace streamed to disk, then the judging. After
//! the run the trace gives the observation lag of every event (arrival − server
//! stamp, CLOCK_MONOTONIC on one host) and the TTFT against the server's truth; the
//! judgement gives the schedule slip; getrusage gives the CPU; /proc the peak RSS.

pub mod runs;
pub mod server;
pub mod sim;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::metrics::hist::{hist, rec};
use crate::trace::{ChunkKind, Event};

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Concurrent streams in steady state (arrivals are spaced to keep this many).
    pub streams: u32,
    pub shape: server::StreamShape,
    pub duration: Duration,
    /// Arrival rate; default `streams / stream length` (steady concurrency).
    pub rate: Option<f64>,
    pub out: Option<PathBuf>,
    /// Only read the bytes (no parsing, no trace): the floor any client pays here.
    pub bare: bool,
    /// The HTTP client of the run (`client.transport`).
    pub transport: crate::scenario::Transport,
    /// Local agent processes sending the load (`haq run --agents`; 1: this process).
    pub agents: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The bare floor (`--bare`): reads counted, nothing else measured.
    pub bare: bool,
    /// Processes that sent the load (`--agents`); their CPU is counted with haq's.
    pub agents: u64,
    pub streams: u32,
    pub tokens: u32,
    pub itl_ms: f64,
    pub sync: bool,
    /// The HTTP client of the run (`client.transport`).
    pub transport: crate::scenario::Transport,
    pub rate: f64,
    pub requests: u64,
    pub completed: u64,
    /// SSE events the client read (content deltas counted in `deltas`).
    pub events: u64,
    pub deltas: u64,
    /// Events read per second of load offered (`--duration`).
    pub events_per_s: f64,
    /// CPU seconds of the whole haq process during the load (dispatcher, client,
    /// parsing, trace writing), and of judging the trace afterwards.
    pub cpu_load_s: f64,
    /// Of `cpu_load_s`, what the agent processes used (`--agents N`; 0 without).
    pub cpu_agents_s: f64,
    pub cpu_judge_s: f64,
    pub cpu_load_per_100k_events_s: f64,
    pub cpu_total_per_100k_events_s: f64,
    /// Observation lag of content deltas: arrival − server send stamp, ms.
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_p999_ms: f64,
    pub lag_max_ms: f64,
    /// |client TTFT (from dispatch) − server TTFT (receive → first token sent)|, ms.
    pub ttft_error_p50_ms: f64,
    pub ttft_error_p99_ms: f64,
    pub ttft_error_max_ms: f64,
    /// The same for requests sent on a connection an earlier request used: client and
    /// server then time the same interval.
    pub ttft_error_reused_p50_ms: f64,
    pub ttft_error_reused_p99_ms: f64,
    /// Requests that opened their connection: their TTFT also holds the TCP handshake
    /// and the server's accept, which the server's clock (from the parsed request)
    /// cannot see.
    pub new_connections: u64,
    /// Connections opened before load (one per stream): requests on them count as
    /// reused.
    pub warmed_connections: u64,
    pub ttft_error_new_p50_ms: f64,
    pub slip_p50_ms: f64,
    pub slip_p99_ms: f64,
    pub slip_max_ms: f64,
    pub valid: bool,
    pub peak_rss_mib: f64,
    pub run_dir: String,
}

fn cpu_seconds() -> f64 {
    cpu_seconds_of(libc::RUSAGE_SELF)
}

/// CPU time of `who` (`RUSAGE_SELF`, or `RUSAGE_CHILDREN`: the children reaped so far —
/// the agents of a run, reaped when it ends).
fn cpu_seconds_of(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Peak resident set of this process (VmHWM), MiB.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Events per second over `d`, to 0.1.
fn per_s(events: u64, d: Duration) -> f64 {
    (events as f64 / d.as_secs_f64().max(1e-3) * 10.0).round() / 10.0
}

fn ms(v: u64) -> f64 {
    (v as f64 / 1000.0 * 1000.0).round() / 1000.0
}

fn scenario(cfg: &BenchConfig, url: &str, rate: f64) -> String {
    let total = cfg.duration.as_secs_f64();
    // The server's stream length with a quarter more and a second of slack: what the
    // open-file check (plan::budget) plans each request to hold its socket for; every
    // objective at it (the benchmark judges no latency, the objectives only have to
    // be consistent).
    let e2e = cfg.shape.ttft.as_secs_f64() * 1.25
        + cfg.shape.itl.as_secs_f64() * f64::from(cfg.shape.tokens) * 1.25
        + 1.0;
    format!(
        "name: bench-client\ntarget: {{kind: url, url: '{url}'}}\nworkload:\n  seed: 1\n  mix: {{classes: [{{name: bench, prompt_tokens: 16, output_tokens: {tokens}}}]}}\n  arrival: {{process: constant, rate: {rate}/s}}\nprotected_load: {rate}/s\nslo: {{ttft_p95: {e2e:.3}s, itl_p95: {e2e:.3}s, e2e_p95: {e2e:.3}s}}\nphases: [{{name: baseline, duration: {total}s}}]\nclient: {{first_token_timeout: 60s, idle_timeout: 60s, drain_timeout: 600s, warm_connections: {warm}, transport: {transport}}}\n",
        tokens = cfg.shape.tokens,
        transport = cfg.transport.as_str(),
        warm = cfg.streams.min(crate::plan::MAX_WARM_CONNECTIONS),
    )
}

/// The stamps in a content delta: (server receive ns for the first, send ns).
fn stamps(text: &str) -> Option<(Option<u64>, u64)> {
    let t = text.trim_start();
    if let Some(rest) = t.strip_prefix('r') {
        let (r, s) = rest.split_once('s')?;
        return Some((r.parse().ok(), s.parse().ok()?));
    }
    Some((None, t.strip_prefix('t')?.parse().ok()?))
}

struct Analysis {
    events: u64,
    deltas: u64,
    lag: Histogram<u64>,
    ttft_err: Histogram<u64>,
    /// TTFT error of requests on a reused connection, and on a new one.
    ttft_err_reused: Histogram<u64>,
    ttft_err_new: Histogram<u64>,
    /// Connections opened before load (`client.warm_connections`).
    warmed: u64,
}

/// Reads the trace: lag of every stamped delta, TTFT against the server's.
fn analyse(trace: &std::path::Path) -> anyhow::Result<Analysis> {
    let mut a = Analysis {
        events: 0,
        deltas: 0,
        lag: hist(),
        ttft_err: hist(),
        ttft_err_reused: hist(),
        ttft_err_new: hist(),
        warmed: 0,
    };
    let mut base_ns = 0u64;
    // Per request in flight: dispatch time, and whether its connection was new.
    let mut dispatch: std::collections::HashMap<String, (u64, bool)> = Default::default();
    let mut conns: std::collections::HashSet<String> = Default::default();
    for ev in crate::trace::read(trace)? {
        match ev.map_err(anyhow::Error::msg)? {
            Event::RunStart { mono_ns, .. } => base_ns = mono_ns,
            Event::Request { id, t, .. } => {
                dispatch.insert(id, (t, true));
            }
            Event::Warmed { conns: warmed, .. } => {
                a.warmed += warmed.len() as u64;
                conns.extend(warmed);
            }
            Event::Response { id, conn, .. } => {
                if let (Some(c), Some(d)) = (conn, dispatch.get_mut(&id)) {
                    d.1 = conns.insert(c);
                }
            }
            Event::End { id, .. } => {
                dispatch.remove(&id);
            }
            Event::Chunk {
                id, t, kind, text, ..
            } => {
                a.events += 1;
                if kind != ChunkKind::Content {
                    continue;
                }
                a.deltas += 1;
                let Some((recv, sent)) = text.as_deref().and_then(stamps) else {
                    continue;
                };
                let arrival_ns = base_ns + t * 1000;
                rec(&mut a.lag, arrival_ns.saturating_sub(sent) / 1000);
                if let (Some(r), Some(&(d, new))) = (recv, dispatch.get(&id)) {
                    let client = t.saturating_sub(d) as i64;
                    let server = (sent.saturating_sub(r) / 1000) as i64;
                    let err = (client - server).unsigned_abs();
                    rec(&mut a.ttft_err, err);
                    rec(
                        if new {
                            &mut a.ttft_err_new
                        } else {
                            &mut a.ttft_err_reused
                        },
                        err,
                    );
                }
            }
            _ => {}
        }
    }
    Ok(a)
}

/// The benchmark's run: in a fresh directory under `dir`, by this process or by
/// `cfg.agents` agents (which re-read the scenario `text` from a file).
fn run_options(
    cfg: &BenchConfig,
    dir: &std::path::Path,
    text: &str,
    bin: PathBuf,
) -> anyhow::Result<crate::engine::RunOptions> {
    let scenario_file = dir.join("bench.yaml");
    std::fs::write(&scenario_file, text)?;
    Ok(crate::engine::RunOptions {
        out: Some(dir.join(format!("run-{}", crate::wire::mono_ns()))),
        reports_dir: dir.to_path_buf(),
        quiet: true,
        haq_bin: Some(bin),
        agents: (cfg.agents > 1).then(|| crate::engine::agents::Agents {
            count: cfg.agents,
            scenario: scenario_file,
            sets: Vec::new(),
            kube: None,
        }),
    })
}

pub async fn run(cfg: BenchConfig) -> anyhow::Result<BenchReport> {
    crate::wire::fds::raise_fd_limit();
    let dir = match &cfg.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("haq-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let bin = crate::target::sim::haq_binary().context("locating the haq executable")?;
    let mut args = vec!["bench".to_string(), "server".into()];
    args.extend(cfg.shape.args());
    let server = crate::target::sim::SimProcess::start(&bin, "bench-server", &args, &dir).await?;
    let stream_s =
        cfg.shape.ttft.as_secs_f64() + cfg.shape.itl.as_secs_f64() * f64::from(cfg.shape.tokens);
    let rate = cfg
        .rate
        .unwrap_or(f64::from(cfg.streams) / stream_s.max(1e-3));
    if cfg.bare {
        return bare(&cfg, &server.url, rate).await;
    }
    let text = scenario(&cfg, &format!("{}/v1", server.url), rate);
    let plan = crate::plan::load_str(&text, "bench.yaml", &dir, &[], None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = run_options(&cfg, &dir, &text, bin)?;
    let cpu0 = cpu_seconds();
    let children0 = cpu_seconds_of(libc::RUSAGE_CHILDREN);
    // The whole `haq run` path: record, judge, write.
    let r = crate::engine::run(plan, opts, CancellationToken::new()).await?;
    crate::report::judge_and_write(&r.run_dir)?;
    // The agents' CPU (reaped by now; the server is not yet).
    let agents_cpu = cpu_seconds_of(libc::RUSAGE_CHILDREN) - children0;
    let cpu1 = cpu_seconds();
    drop(server);
    // The run judged its trace at the end; judging again (with its interval log, as
    // the run does) measures that part alone.
    let (_, j) = crate::report::judge_writing_hlog(&r.run_dir)?;
    let cpu_judge = cpu_seconds() - cpu1;
    let cpu_load = (cpu1 - cpu0 - cpu_judge).max(0.0) + agents_cpu;
    let a = analyse(&r.run_dir.join(crate::trace::TRACE_FILE))?;
    let per100k = |cpu: f64| {
        if a.events > 0 {
            (cpu / a.events as f64 * 1e5 * 1000.0).round() / 1000.0
        } else {
            0.0
        }
    };
    let q = |h: &Histogram<u64>, x: f64| {
        if h.is_empty() {
            0.0
        } else {
            ms(h.value_at_quantile(x))
        }
    };
    let phase = j.phases.first();
    Ok(BenchReport {
        bare: false,
        agents: cfg.agents,
        streams: cfg.streams,
        tokens: cfg.shape.tokens,
        itl_ms: cfg.shape.itl.as_secs_f64() * 1e3,
        sync: cfg.shape.sync,
        transport: cfg.transport,
        rate: (rate * 1000.0).round() / 1000.0,
        requests: phase.map_or(0, |p| p.requests),
        completed: phase.map_or(0, |p| p.completed),
        events: a.events,
        deltas: a.deltas,
        events_per_s: per_s(a.events, cfg.duration),
        cpu_load_s: (cpu_load * 1000.0).round() / 1000.0,
        cpu_agents_s: (agents_cpu * 1000.0).round() / 1000.0,
        cpu_judge_s: (cpu_judge * 1000.0).round() / 1000.0,
        cpu_load_per_100k_events_s: per100k(cpu_load),
        cpu_total_per_100k_events_s: per100k(cpu_load + cpu_judge),
        lag_p50_ms: q(&a.lag, 0.5),
        lag_p99_ms: q(&a.lag, 0.99),
        lag_p999_ms: q(&a.lag, 0.999),
        lag_max_ms: if a.lag.is_empty() {
            0.0
        } else {
            ms(a.lag.max())
        },
        ttft_error_p50_ms: q(&a.ttft_err, 0.5),
        ttft_error_p99_ms: q(&a.ttft_err, 0.99),
        ttft_error_max_ms: if a.ttft_err.is_empty() {
            0.0
        } else {
            ms(a.ttft_err.max())
        },
        ttft_error_reused_p50_ms: q(&a.ttft_err_reused, 0.5),
        ttft_error_reused_p99_ms: q(&a.ttft_err_reused, 0.99),
        new_connections: a.ttft_err_new.len(),
        warmed_connections: a.warmed,
        ttft_error_new_p50_ms: q(&a.ttft_err_new, 0.5),
        slip_p50_ms: j.client.slip_p50_ms,
        slip_p99_ms: j.client.slip_p99_ms,
        slip_max_ms: j.client.slip_max_ms,
        valid: j.client.valid,
        peak_rss_mib: (peak_rss_mib() * 10.0).round() / 10.0,
        run_dir: r.run_dir.display().to_string(),
    })
}

/// The floor: the same streams read by a client that only counts bytes (reqwest
/// `chunk()`, nothing else). Reports CPU per 100k reads (one read per event here).
async fn bare(cfg: &BenchConfig, url: &str, rate: f64) -> anyhow::Result<BenchReport> {
    let http = crate::client::http_client(Duration::from_secs(5), &Default::default())?;
    let url = format!("{url}/v1/chat/completions");
    let body = format!("{{\"max_tokens\":{}}}", cfg.shape.tokens);
    let n = (rate * cfg.duration.as_secs_f64()) as u64;
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let cpu0 = cpu_seconds();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let (http, url, body, reads) = (http.clone(), url.clone(), body.clone(), reads.clone());
        tasks.spawn(async move {
            let Ok(mut r) = http.post(url).body(body).send().await else {
                return;
            };
            while let Ok(Some(_)) = r.chunk().await {
                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let cpu = cpu_seconds() - cpu0;
    let events = reads.load(std::sync::atomic::Ordering::Relaxed);
    let per100k = (cpu / events.max(1) as f64 * 1e5 * 1000.0).round() / 1000.0;
    Ok(BenchReport {
        bare: true,
        agents: 1,
        streams: cfg.streams,
        tokens: cfg.shape.tokens,
        itl_ms: cfg.shape.itl.as_secs_f64() * 1e3,
        sync: cfg.shape.sync,
        transport: cfg.transport,
        rate,
        requests: n,
        completed: n,
        events,
        deltas: 0,
        events_per_s: per_s(events, cfg.duration),
        cpu_load_s: (cpu * 1000.0).round() / 1000.0,
        cpu_agents_s: 0.0,
        cpu_judge_s: 0.0,
        cpu_load_per_100k_events_s: per100k,
        cpu_total_per_100k_events_s: per100k,
        lag_p50_ms: 0.0,
        lag_p99_ms: 0.0,
        lag_p999_ms: 0.0,
        lag_max_ms: 0.0,
        ttft_error_p50_ms: 0.0,
        ttft_error_p99_ms: 0.0,
        ttft_error_max_ms: 0.0,
        ttft_error_reused_p50_ms: 0.0,
        ttft_error_reused_p99_ms: 0.0,
        new_connections: 0,
        warmed_connections: 0,
        ttft_error_new_p50_ms: 0.0,
        slip_p50_ms: 0.0,
        slip_p99_ms: 0.0,
        slip_max_ms: 0.0,
        valid: true,
        peak_rss_mib: (peak_rss_mib() * 10.0).round() / 10.0,
        run_dir: String::new(),
    })
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bare {
            return write!(
                f,
                "bare reqwest client (reads only) · {} streams × {} tokens, ITL {} ms · {} requests, {} reads ({:.0}/s) · {:.3} CPU-s, {:.3} CPU-s per 100k reads · peak RSS {:.1} MiB",
                self.streams,
                self.tokens,
                self.itl_ms,
                self.requests,
                self.events,
                self.events_per_s,
                self.cpu_load_s,
                self.cpu_load_per_100k_events_s,
                self.peak_rss_mib
            );
        }
        writeln!(
            f,
            "haq bench client ({}{}) · {} streams × {} tokens, ITL {} ms{} · {:.1} req/s",
            match self.transport {
                crate::scenario::Transport::Auto => "own HTTP/1.1 client",
                crate::scenario::Transport::Reqwest => "reqwest",
            },
            if self.agents > 1 {
                format!(", {} agents", self.agents)
            } else {
                String::new()
            },
            self.streams,
            self.tokens,
            self.itl_ms,
            if self.sync {
                " (synchronized steps)"
            } else {
                ""
            },
            self.rate
        )?;
        writeln!(
            f,
            "requests {} (completed {}) · events {} (content deltas {})",
            self.requests, self.completed, self.events, self.deltas
        )?;
        writeln!(
            f,
            "client CPU: load {:.3} s ({:.3} s per 100k events){} · judging {:.3} s · total {:.3} s per 100k events · {:.0} events/s",
            self.cpu_load_s,
            self.cpu_load_per_100k_events_s,
            if self.agents > 1 {
                format!(", of it the agents' {:.3} s", self.cpu_agents_s)
            } else {
                String::new()
            },
            self.cpu_judge_s,
            self.cpu_total_per_100k_events_s,
            self.events_per_s
        )?;
        writeln!(
            f,
            "observation lag: p50 {:.3} ms · p99 {:.3} ms · p99.9 {:.3} ms · max {:.3} ms",
            self.lag_p50_ms, self.lag_p99_ms, self.lag_p999_ms, self.lag_max_ms
        )?;
        writeln!(
            f,
            "TTFT vs server truth: |error| p50 {:.3} ms · p99 {:.3} ms · max {:.3} ms",
            self.ttft_error_p50_ms, self.ttft_error_p99_ms, self.ttft_error_max_ms
        )?;
        writeln!(
            f,
            "  on a reused connection ({} warmed before load): p50 {:.3} ms · p99 {:.3} ms · on a new one ({} requests, handshake and accept included): p50 {:.3} ms",
            self.warmed_connections,
            self.ttft_error_reused_p50_ms,
            self.ttft_error_reused_p99_ms,
            self.new_connections,
            self.ttft_error_new_p50_ms
        )?;
        writeln!(
            f,
            "schedule slip: p50 {:.3} ms · p99 {:.3} ms · max {:.3} ms · run {}",
            self.slip_p50_ms,
            self.slip_p99_ms,
            self.slip_max_ms,
            if self.valid { "valid" } else { "INVALID" }
        )?;
        write!(
            f,
            "peak RSS {:.1} MiB · trace in {}",
            self.peak_rss_mib, self.run_dir
        )
    }
}
