//! Real routers from PyPI in front of haq's sim workers (issue 21 items 2, 3, 10):
//! vllm-router 0.1.17 and sglang-router 0.3.2, round robin over two sim workers, each
//! behind haq's proxy. The worker serving a probe is SIGKILLed right after the
//! probe's first delta reached the client (the process backend). What the router did
//! is read from its own log, stamped by this test on CLOCK_MONOTONIC (haq's trace
//! clock) as each line arrives: every `Failed to send … worker_url=<dead>` is a send
//! to the dead replica, and haq must see at least as many refused connects there, the
//! last of them within a second of the router's last failed send; the stream the kill
//! cut must be a Request-Fate FAIL, its one finding the probe's `silent_interruption`
//! (the routers end it silently; no `duplicated_output` anywhere); Routing FAILs at
//! the run's own 10 s bound (the breaker's 10 failed sends take ~20 s at 0.5 req/s)
//! and at a bound below the router's removal time, and PASSes at one above it (the
//! same run re-judged).
//!
//! The routers are not on the machine by default: `.ci/run` installs them in venvs
//! under target/ and sets `HAQ_VLLM_ROUTER` (the `vllm-router` executable),
//! `HAQ_SGLANG_ROUTER_PYTHON` (a python with `sglang_router`) and
//! `HAQ_REQUIRE_ROUTERS=1`. Elsewhere a test without its router says "skipped".
//! The routers start only once their workers answer `/health`: haq's proxies listen
//! only during `haq run`, so the router is started once they do, and haq waits for it
//! (`target.ready_timeout`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haq::check::Status;
use haq::check::fate::FindingKind;
use haq::trace::Event;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::simkit::{Proc, eventually, free_port, host_port, worker_in};
use crate::support::{events, plan_text, rejudge, run, scratch, verdict, verdict_in};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Vllm,
    Sglang,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Vllm => "vllm-router",
            Kind::Sglang => "sglang-router",
        }
    }

    /// The command that starts the router (without its arguments), if installed.
    fn command(self) -> Option<(PathBuf, Vec<String>)> {
        let from_env = |v: &str| std::env::var_os(v).map(PathBuf::from);
        let on_path = |exe: &str| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join(exe))
                .find(|p| p.is_file())
        };
        match self {
            Kind::Vllm => from_env("HAQ_VLLM_ROUTER")
                .or_else(|| on_path("vllm-router"))
                .map(|p| (p, Vec::new())),
            Kind::Sglang => from_env("HAQ_SGLANG_ROUTER_PYTHON").map(|p| {
                (
                    p,
                    vec!["-m".to_string(), "sglang_router.launch_router".to_string()],
                )
            }),
        }
    }
}

/// The router's log lines, each with the CLOCK_MONOTONIC ns it arrived at.
type Log = Arc<Mutex<Vec<(u64, String)>>>;

fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

struct Router {
    _child: tokio::process::Child,
    log: Log,
}

/// Starts `kind` on 127.0.0.1:`port` in front of `upstreams` (`host:port`), its
/// output collected into the stamped log.
fn start_router(kind: Kind, port: u16, upstreams: &[String]) -> Router {
    let (exe, mut args) = kind.command().expect("router installed");
    let metrics = free_port();
    args.extend(
        [
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--policy",
            "round_robin",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            &metrics.to_string(),
            "--worker-startup-check-interval",
            "1",
            "--log-level",
            "info",
            "--worker-urls",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(upstreams.iter().map(|u| format!("http://{u}")));
    let mut child = tokio::process::Command::new(exe)
        .args(&args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG_STYLE", "never")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("router starts");
    let log: Log = Arc::default();
    for out in [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    {
        let log = log.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(out).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let t = mono_ns();
                if let Ok(mut g) = log.lock() {
                    g.push((t, l));
                }
            }
        });
    }
    Router { _child: child, log }
}

fn scenario(gw: u16, a: &Proc, b: &Proc, listens: [u16; 2], bound: &str) -> String {
    format!(
        r#"name: real-router
target:
  kind: url
  url: http://127.0.0.1:{gw}/v1
  model: haq-sim-8b
  ready_timeout: 120s
  replicas:
    - {{name: a, upstream: "{ua}", listen: "127.0.0.1:{la}", process: {{pid: {pa}, ready_path: /health}}}}
    - {{name: b, upstream: "{ub}", listen: "127.0.0.1:{lb}", process: {{pid: {pb}, ready_path: /health}}}}
workload:
  seed: 21
  mix:
    classes: [{{name: chat, prompt_tokens: 16, output_tokens: 30, priority: protected}}]
  arrival: {{process: constant, rate: 0.5/s}}
protected_load: 0.5/s
slo: {{ttft_p95: 3s, itl_p95: 500ms, e2e_p95: 10s, error_rate_max: 50%}}
policy: {{new: reroute, queued: retry, prefill: retry, decode: retry, streaming: fail}}
client: {{max_late: 3s}}
criteria: {{routing: {{traffic_removal_max: {bound}}}}}
phases:
  - {{name: baseline, duration: 4s}}
  - {{name: fault, duration: 40s}}
faults:
  - name: kill-midstream
    domain: process
    action: kill
    at: {{phase: fault, offset: 1s}}
    when: {{probe: first_delta, prompt_tokens: 16, max_tokens: 200}}
"#,
        ua = host_port(a.url()),
        ub = host_port(b.url()),
        la = listens[0],
        lb = listens[1],
        pa = a.p.pid,
        pb = b.p.pid,
    )
}

async fn kill_midstream(kind: Kind) {
    if kind.command().is_none() {
        assert!(
            std::env::var_os("HAQ_REQUIRE_ROUTERS").is_none(),
            "{} is required (HAQ_REQUIRE_ROUTERS) but not installed",
            kind.name()
        );
        eprintln!("skipped: {} is not installed", kind.name());
        return;
    }
    let name = format!("router-{}", kind.name());
    let dir = scratch(&name);
    // 30 deltas of 20 ms: a stream of ~0.6 s, the probe's of 200 deltas ~4 s.
    let engine = json!({"decode_step": "20ms"});
    let a = worker_in(&dir, "a", engine.clone(), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", engine, None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let gw = free_port();
    let text = scenario(gw, &a, &b, listens, "10s");
    let plan = plan_text(&text, &[]);
    let run = tokio::spawn(run(plan, Box::leak(name.clone().into_boxed_str())));
    // haq's proxies are up: the router can find its workers healthy.
    eventually(
        "haq's proxies listen",
        Duration::from_secs(60),
        async || {
            tokio::net::TcpStream::connect(("127.0.0.1", listens[1]))
                .await
                .is_ok()
        },
    )
    .await;
    let ups = listens.map(|p| format!("127.0.0.1:{p}"));
    let router = start_router(kind, gw, &ups);
    let r = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the run ends")
        .expect("run task");
    let log = router.log.lock().map(|g| g.clone()).unwrap_or_default();
    let evs = events(&r);
    let mono0 = evs
        .iter()
        .find_map(|e| match e {
            Event::RunStart { mono_ns, .. } => Some(*mono_ns),
            _ => None,
        })
        .expect("run_start");
    // client.marker: auto learned what the router forwards (measured by the
    // forwarding captures: vllm-router passes `user`, sglang-router drops it and
    // passes `metadata`).
    let learned = evs.iter().find_map(|e| match e {
        Event::Target { marker, .. } => marker.as_ref().map(|m| m.field.clone()),
        _ => None,
    });
    let want = match kind {
        Kind::Vllm => "user",
        Kind::Sglang => "metadata",
    };
    assert_eq!(learned.as_deref(), Some(want), "{}", kind.name());
    let fault = r
        .judgement
        .timeline
        .faults
        .first()
        .expect("the fault fired");
    let dead = if fault.replica == "a" { 0 } else { 1 };
    let dead_url = format!("http://127.0.0.1:{}", listens[dead]);
    // The router's sends to the dead replica, on the trace's clock.
    let failed: Vec<u64> = log
        .iter()
        .filter(|(_, l)| l.contains("Failed to send") && l.contains(&dead_url))
        .map(|(t, _)| t.saturating_sub(mono0) / 1000)
        .collect();
    let dump = || {
        log.iter()
            .map(|(_, l)| l.as_str())
            .filter(|l| !l.contains("GET /health"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        !failed.is_empty(),
        "the router sent to the dead replica {dead_url}:\n{}",
        dump()
    );
    let removal = fault.removal.as_ref().expect("a removal was judged");
    assert!(
        removal.refused_connects >= failed.len() as u64,
        "haq saw {} refused connects, the router logged {} failed sends:\n{removal:?}\n{}",
        removal.refused_connects,
        failed.len(),
        dump()
    );
    let last = *failed.last().expect("one");
    assert!(
        removal.t + 1_500_000 >= last,
        "haq's removal at {} µs, the router's last failed send at {last} µs",
        removal.t
    );
    let removed_s = removal.t.saturating_sub(fault.injected) as f64 / 1e6;
    eprintln!(
        "{}: {} failed sends to the dead replica, the last {:.1} s after the kill; haq: removal {removed_s:.1} s, {} refused connects, {} health-check connects",
        kind.name(),
        failed.len(),
        last.saturating_sub(fault.injected) as f64 / 1e6,
        removal.refused_connects,
        removal.probe_connects,
    );
    // The kill cut the probe's stream after its first delta; the router ended it
    // without an error: silent truncation.
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(fate.status, Status::Fail, "{fate:?}");
    // The router closes the client's connection before the end of the chunked body,
    // no error event: `silent_interruption` on the probe, and nothing else (no
    // `duplicated_output`: no request had a hand-over).
    let kinds: Vec<_> = r
        .judgement
        .findings
        .iter()
        .map(|f| (f.kind, f.request.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [(FindingKind::SilentInterruption, "probe-kill-midstream")],
        "{:?}",
        r.judgement.findings
    );
    // Routing: FAIL below the router's removal time, PASS above it.
    let routing = verdict(&r, "Routing");
    let judged = |bound_s: f64| {
        let text = scenario(
            gw,
            &a,
            &b,
            listens,
            &format!("{}ms", (bound_s * 1000.0) as u64),
        );
        verdict_in(&rejudge(&r, &plan_text(&text, &[])), "Routing")
    };
    // The breaker opens after its 10th failed send; at 0.5 req/s that is ~20 s after
    // the kill: the run's own 10 s bound FAILs.
    assert!(removed_s > 12.0, "removed {removed_s:.1} s after the kill");
    assert_eq!(routing.status, Status::Fail, "{routing:?}");
    let below = judged((removed_s - 1.0).max(0.1));
    assert_eq!(below.status, Status::Fail, "{below:?}");
    let above = judged(removed_s + 5.0);
    assert_eq!(above.status, Status::Pass, "{above:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_router_kill_midstream_is_judged_from_what_the_router_did() {
    kill_midstream(Kind::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_router_kill_midstream_is_judged_from_what_the_router_did() {
    kill_midstream(Kind::Sglang).await;
}
