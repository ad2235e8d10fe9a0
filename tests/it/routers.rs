//! Real routers from PyPI in front of haq's sim workers (issue 21 items 2, 3, 10 and
//! its done-when): vllm-router 0.1.17 and sglang-router 0.3.2, round robin over two
//! sim workers (real processes), each behind haq's proxy, the process backend. What
//! the router did is read from its own log, stamped by this test on CLOCK_MONOTONIC
//! (haq's trace clock) as each line arrives. Three cases per router, each one run:
//!
//! - **kill mid-stream**: the worker serving a probe is SIGKILLed right after the
//!   probe's first delta reached the client. Every `Failed to send … worker_url=<dead>`
//!   is a send to the dead replica, and haq must see at least as many refused connects
//!   there, the last within a second of the router's last failed send; Request-Fate
//!   FAILs with one finding, the probe's `silent_interruption` (the routers end it
//!   silently); Routing FAILs at the run's own 10 s bound (the breaker's 10 failed
//!   sends take ~20 s at 0.5 req/s) and at a bound below the router's removal time,
//!   and PASSes at one above it (the same run re-judged).
//! - **freeze**: a worker SIGSTOPped for 16 s; the router notices nothing and keeps
//!   routing into it: Routing FAILs at 10 s (PASSes re-judged above the freeze).
//! - **kill + restart**: a worker SIGKILLed and re-launched on its address 3 s later,
//!   the breaker shortened (open after 3 failures, half-open after 12 s): the
//!   replacement is ready long before it gets traffic, at the breaker's half-open —
//!   Recovery shows that gap and FAILs a bound between the two.
//!
//! No run has a `duplicated_output` finding (none has a hand-over).
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

use haq::RunResult;

use crate::simkit::{Proc, eventually, free_port, host_port, kill_pid, worker_in};
use crate::support::{
    events, haq_bin, plan_text, rejudge, run, scratch, skipped, verdict, verdict_in,
};

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

/// Starts `kind` on 127.0.0.1:`port` in front of `upstreams` (`host:port`) with its
/// own defaults but for `flags`, its output collected into the stamped log.
fn start_router(kind: Kind, port: u16, upstreams: &[String], flags: &[&str]) -> Router {
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
    args.extend(flags.iter().map(|f| f.to_string()));
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

/// Two sim workers (30 deltas of 20 ms: a stream of ~0.6 s), each behind one of haq's
/// proxy listen ports, and the router's port.
struct Stack {
    name: String,
    dir: PathBuf,
    a: Proc,
    b: Proc,
    listens: [u16; 2],
    gw: u16,
}

/// The stack for `kind`'s case `case`, or `None` (said) when the router is not
/// installed.
async fn stack(kind: Kind, case: &str) -> Option<Stack> {
    if kind.command().is_none() {
        assert!(
            std::env::var_os("HAQ_REQUIRE_ROUTERS").is_none(),
            "{} is required (HAQ_REQUIRE_ROUTERS) but not installed",
            kind.name()
        );
        skipped(case, &format!("{} is not installed", kind.name()));
        return None;
    }
    let name = format!("router-{}-{case}", kind.name());
    let dir = scratch(&name);
    let engine = json!({"decode_step": "20ms"});
    let a = worker_in(&dir, "a", engine.clone(), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", engine, None, "127.0.0.1:0").await;
    Some(Stack {
        name,
        dir,
        a,
        b,
        listens: [free_port(), free_port()],
        gw: free_port(),
    })
}

impl Stack {
    /// The scenario: round robin's target at `rate` (constant), then `rest` (criteria,
    /// phases, faults); `restart_a`: replica a's restart command.
    fn scenario(&self, rate: &str, restart_a: &str, rest: &str) -> String {
        format!(
            r#"name: real-router
target:
  kind: url
  url: http://127.0.0.1:{gw}/v1
  model: haq-sim-8b
  ready_timeout: 120s
  replicas:
    - {{name: a, upstream: "{ua}", listen: "127.0.0.1:{la}", process: {{pid: {pa}, ready_path: /health{restart_a}}}}}
    - {{name: b, upstream: "{ub}", listen: "127.0.0.1:{lb}", process: {{pid: {pb}, ready_path: /health}}}}
workload:
  seed: 21
  mix:
    classes: [{{name: chat, prompt_tokens: 16, output_tokens: 30, priority: protected}}]
  arrival: {{process: constant, rate: {rate}}}
protected_load: {rate}
slo: {{ttft_p95: 3s, itl_p95: 500ms, e2e_p95: 10s, error_rate_max: 50%}}
policy: {{new: reroute, queued: retry, prefill: retry, decode: retry, streaming: fail}}
client: {{max_late: 3s}}
evidence: {{readiness_watch: 250ms}}
{rest}"#,
            gw = self.gw,
            ua = host_port(self.a.url()),
            ub = host_port(self.b.url()),
            la = self.listens[0],
            lb = self.listens[1],
            pa = self.a.p.pid,
            pb = self.b.p.pid,
        )
    }

    /// Runs `text` with `kind` (and its `flags`) started in front of haq's proxies as
    /// soon as they listen; returns the run and the router's log on the trace's clock
    /// (µs after the run's start).
    async fn run(&self, kind: Kind, text: &str, flags: &[&str]) -> (RunResult, Vec<(u64, String)>) {
        let plan = plan_text(text, &[]);
        let run = tokio::spawn(run(plan, Box::leak(self.name.clone().into_boxed_str())));
        // haq's proxies are up: the router can find its workers healthy.
        let last = self.listens[1];
        eventually(
            "haq's proxies listen",
            Duration::from_secs(60),
            async || {
                tokio::net::TcpStream::connect(("127.0.0.1", last))
                    .await
                    .is_ok()
            },
        )
        .await;
        let ups = self.listens.map(|p| format!("127.0.0.1:{p}"));
        let router = start_router(kind, self.gw, &ups, flags);
        let r = tokio::time::timeout(Duration::from_secs(240), run)
            .await
            .expect("the run ends")
            .expect("run task");
        let mono0 = events(&r)
            .iter()
            .find_map(|e| match e {
                Event::RunStart { mono_ns, .. } => Some(*mono_ns),
                _ => None,
            })
            .expect("run_start");
        let log = router.log.lock().map(|g| g.clone()).unwrap_or_default();
        let log = log
            .into_iter()
            .map(|(t, l)| (t.saturating_sub(mono0) / 1000, l))
            .collect();
        (r, log)
    }
}

/// The router's log without its health checks, for a failed assertion.
fn dump(log: &[(u64, String)]) -> String {
    log.iter()
        .map(|(t, l)| format!("{:>9.3} {l}", *t as f64 / 1e6))
        .filter(|l| !l.contains("GET /health"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// No run behind a router has a hand-over: repetition or a stall is no
/// `duplicated_output`.
fn no_duplicated_output(r: &RunResult) {
    assert!(
        !r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::DuplicatedOutput),
        "{:#?}",
        r.judgement.findings
    );
}

/// Routing's verdict of the run `r` re-judged with `criteria` instead of its own.
fn rejudged(r: &RunResult, text: &str, criteria: (&str, &str), name: &str) -> haq::check::Verdict {
    assert!(
        text.contains(criteria.0),
        "no {:?} in the scenario",
        criteria.0
    );
    let text = text.replace(criteria.0, criteria.1);
    verdict_in(&rejudge(r, &plan_text(&text, &[])), name)
}

async fn kill_midstream(kind: Kind) {
    let Some(st) = stack(kind, "kill-midstream").await else {
        return;
    };
    let own = "criteria: {routing: {traffic_removal_max: 10s}}";
    // The probe: 200 deltas, ~4 s.
    let text = st.scenario(
        "0.5/s",
        "",
        &format!(
            r#"{own}
phases:
  - {{name: baseline, duration: 4s}}
  - {{name: fault, duration: 40s}}
faults:
  - name: kill-midstream
    domain: process
    action: kill
    at: {{phase: fault, offset: 1s}}
    when: {{probe: first_delta, prompt_tokens: 16, max_tokens: 200}}
"#
        ),
    );
    let (r, log) = st.run(kind, &text, &[]).await;
    let evs = events(&r);
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
    let dead_url = format!("http://127.0.0.1:{}", st.listens[dead]);
    // The router's sends to the dead replica.
    let failed: Vec<u64> = log
        .iter()
        .filter(|(_, l)| l.contains("Failed to send") && l.contains(&dead_url))
        .map(|(t, _)| *t)
        .collect();
    assert!(
        !failed.is_empty(),
        "the router sent to the dead replica {dead_url}:\n{}",
        dump(&log)
    );
    let removal = fault.removal.as_ref().expect("a removal was judged");
    assert!(
        removal.refused_connects >= failed.len() as u64,
        "haq saw {} refused connects, the router logged {} failed sends:\n{removal:?}\n{}",
        removal.refused_connects,
        failed.len(),
        dump(&log)
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
    // without an error: silent truncation. The router closes the client's connection
    // before the end of the chunked body, no error event: `silent_interruption` on the
    // probe, and nothing else.
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(fate.status, Status::Fail, "{fate:?}");
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
    no_duplicated_output(&r);
    // Routing: the breaker opens after its 10th failed send; at 0.5 req/s that is
    // ~20 s after the kill: the run's own 10 s bound FAILs. Re-judged, it FAILs below
    // the router's removal time and PASSes above it.
    assert!(removed_s > 12.0, "removed {removed_s:.1} s after the kill");
    let routing = verdict(&r, "Routing");
    assert_eq!(routing.status, Status::Fail, "{routing:?}");
    let at = |bound_s: f64| {
        let ms = (bound_s * 1000.0) as u64;
        let c = format!("criteria: {{routing: {{traffic_removal_max: {ms}ms}}}}");
        rejudged(&r, &text, (own, &c), "Routing")
    };
    let below = at((removed_s - 1.0).max(0.1));
    assert_eq!(below.status, Status::Fail, "{below:?}");
    let above = at(removed_s + 5.0);
    assert_eq!(above.status, Status::Pass, "{above:?}");
}

/// Replica a SIGSTOPped for 16 s under round robin at 1 req/s: the router does not
/// notice (a stopped process still accepts connects; it logs nothing) and keeps
/// sending every other request into it until the SIGCONT — Routing FAILs at 10 s.
async fn freeze(kind: Kind) {
    let Some(st) = stack(kind, "freeze").await else {
        return;
    };
    let own = "criteria: {routing: {traffic_removal_max: 10s}}";
    let text = st.scenario(
        "1/s",
        "",
        &format!(
            r#"{own}
phases:
  - {{name: baseline, duration: 4s}}
  - {{name: fault, duration: 21s}}
faults:
  - {{name: freeze-a, domain: process, action: freeze, target: {{replica: a}}, at: {{phase: fault, offset: 1s}}, duration: 16s}}
"#
        ),
    );
    let (r, log) = st.run(kind, &text, &[]).await;
    let f = r.judgement.timeline.fault("freeze-a").expect("the freeze");
    assert!(f.verified, "{f:?}");
    let removal = f.removal.as_ref().expect("a removal was judged");
    let last_s = removal.t.saturating_sub(f.injected) as f64 / 1e6;
    eprintln!(
        "{}: {} requests routed into the frozen replica, the last {last_s:.1} s after the SIGSTOP",
        kind.name(),
        removal.routed_after_fault
    );
    assert!(
        removal.routed_after_fault >= 4 && last_s > 12.0,
        "{removal:?}\n{}",
        dump(&log)
    );
    assert!(
        !log.iter().any(|(_, l)| l.contains("Failed to send")),
        "the router noticed the freeze:\n{}",
        dump(&log)
    );
    let routing = verdict(&r, "Routing");
    assert_eq!(routing.status, Status::Fail, "{routing:?}");
    // The traffic ended with the heal, not with a removal: a bound above the freeze
    // PASSes.
    let above = rejudged(
        &r,
        &text,
        (own, "criteria: {routing: {traffic_removal_max: 22s}}"),
        "Routing",
    );
    assert_eq!(above.status, Status::Pass, "{above:?}");
    no_duplicated_output(&r);
}

/// Kills whatever the pid file names when dropped: the replacement started by the
/// scenario's restart command is not the test's child.
struct KillOnDrop(PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .filter(|p| *p > 1)
        {
            kill_pid(pid);
        }
    }
}

/// Breaker timing shortened for the test: open after 3 failed sends, half-open 12 s
/// later (the routers' defaults: 10 failures, 60 s).
const CB_OPEN_AFTER: &str = "3";
const CB_HALF_OPEN_S: u64 = 12;

/// Replica a SIGKILLed under load (2 req/s) and re-launched on the same address 3 s
/// later: the router's breaker opened on the failed sends before the replacement was
/// ready, so the replacement gets traffic only when the breaker half-opens — Recovery
/// shows the gap between ready and serving, the breaker's, and FAILs a bound between
/// the two (PASSes re-judged above it: the `recovered` phase, 6 s after the breaker's
/// half-open is due, shows the latency envelope back).
async fn kill_restart(kind: Kind) {
    let Some(st) = stack(kind, "kill-restart").await else {
        return;
    };
    let pid_file = st.dir.join("a2.pid");
    let _replacement = KillOnDrop(pid_file.clone());
    let script = st.dir.join("restart-a.sh");
    std::fs::write(
        &script,
        format!(
            "echo $$ > {pid}\nexec {bin} sim worker --name a --listen {ua} --engine '{{\"startup\":\"300ms\",\"decode_step\":\"20ms\"}}'\n",
            pid = pid_file.display(),
            bin = haq_bin().display(),
            ua = host_port(st.a.url()),
        ),
    )
    .expect("restart script");
    let own = "criteria: {recovery: {ready_and_serving_max: 8s}}";
    let text = st.scenario(
        "2/s",
        &format!(r#", restart: "sh {}""#, script.display()),
        &format!(
            r#"{own}
phases:
  - {{name: baseline, duration: 4s}}
  - {{name: fault, duration: 16s}}
  - {{name: recovered, duration: 6s}}
faults:
  - {{name: kill-a, domain: process, action: kill, target: {{replica: a}}, at: {{phase: fault, offset: 1s}}, restart: {{after: 3s}}}}
"#
        ),
    );
    let half_open = CB_HALF_OPEN_S.to_string();
    let flags = [
        "--cb-failure-threshold",
        CB_OPEN_AFTER,
        "--cb-timeout-duration-secs",
        &half_open,
    ];
    let (r, log) = st.run(kind, &text, &flags).await;
    let f = r.judgement.timeline.fault("kill-a").expect("the kill");
    assert!(f.verified, "{f:?}");
    let after = |t: u64| t.saturating_sub(f.injected) as f64 / 1e6;
    let ready = f.replacement.ready.as_ref().map(|m| m.t);
    let serving = f.replacement.serving.as_ref().map(|m| m.t);
    let (Some(ready), Some(serving)) = (ready, serving) else {
        panic!("{:?}\n{}", f.replacement, dump(&log));
    };
    // The breaker's transitions, from the router's own log.
    let transition = |what: &str| {
        log.iter()
            .find(|(_, l)| l.contains("Circuit breaker") && l.contains(what))
            .map(|(t, _)| *t)
    };
    let (Some(opened), Some(half)) = (
        transition("closed -> open"),
        transition("open -> half_open"),
    ) else {
        panic!("no breaker transitions:\n{}", dump(&log));
    };
    eprintln!(
        "{}: breaker open +{:.1} s, replacement ready +{:.1} s, half-open +{:.1} s, first request served +{:.1} s",
        kind.name(),
        after(opened),
        after(ready),
        after(half),
        after(serving),
    );
    // Open before the replacement was ready; the replacement served only once the
    // breaker let a request through again: the gap is the breaker's, not the
    // replacement's start.
    assert!(opened < ready, "{}", dump(&log));
    assert!(
        serving + 500_000 >= half && serving <= half + 3_000_000,
        "first request served +{:.1} s, half-open +{:.1} s",
        after(serving),
        after(half)
    );
    assert!(
        serving - ready >= (CB_HALF_OPEN_S - 4) * 1_000_000,
        "ready +{:.1} s, serving +{:.1} s",
        after(ready),
        after(serving)
    );
    let recovery = verdict(&r, "Recovery");
    assert_eq!(recovery.status, Status::Fail, "{recovery:?}");
    let above = rejudged(
        &r,
        &text,
        (
            own,
            &format!(
                "criteria: {{recovery: {{ready_and_serving_max: {}ms}}}}",
                (after(serving) * 1000.0) as u64 + 5000
            ),
        ),
        "Recovery",
    );
    assert_eq!(above.status, Status::Pass, "{above:?}");
    no_duplicated_output(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_router_kill_midstream_is_judged_from_what_the_router_did() {
    kill_midstream(Kind::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_router_kill_midstream_is_judged_from_what_the_router_did() {
    kill_midstream(Kind::Sglang).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_router_keeps_routing_into_a_frozen_worker() {
    freeze(Kind::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_router_keeps_routing_into_a_frozen_worker() {
    freeze(Kind::Sglang).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_router_breaker_gates_the_recovery_of_a_restarted_worker() {
    kill_restart(Kind::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_router_breaker_gates_the_recovery_of_a_restarted_worker() {
    kill_restart(Kind::Sglang).await;
}
