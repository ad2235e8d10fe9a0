//! A `url` target with listed replicas, against OpenAI-compatible servers haq did not
//! start: sim workers launched here as "external" servers, and a gateway whose
//! upstreams point at haq's proxy listen ports. Process faults reach the declared
//! pids / pid files, proxy faults the paths, a replacement is started with the
//! declared restart command; and the haq binary, interrupted with SIGINT or SIGTERM, heals a
//! frozen worker and a blackholed path and exits 3 with a partial report.

use std::path::Path;
use std::time::Duration;

use haq::check::Status;
use haq::target::sim::SimProcess;
use haq::trace::{Event, FaultLine, ReplacementStage};
use serde_json::json;

use crate::simkit::{Proc, eventually, free_port, host_port, http, kill_pid, worker_in};
use crate::support::{events, haq_bin, plan_text, run, scratch, verdict};

/// Two workers and a gateway in front of the proxy ports `listens`.
struct External {
    a: Proc,
    b: Proc,
    gateway: SimProcess,
    listens: [u16; 2],
    dir: std::path::PathBuf,
}

async fn external(name: &str) -> External {
    let dir = scratch(name);
    let a = worker_in(&dir, "a", json!({}), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", json!({}), None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let args: Vec<String> = [
        "sim",
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--config",
        r#"{"health_interval": "100ms"}"#,
        "--upstream",
        &format!("a=http://127.0.0.1:{}", listens[0]),
        "--upstream",
        &format!("b=http://127.0.0.1:{}", listens[1]),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let gateway = SimProcess::start(&haq_bin(), "gateway", &args, &dir)
        .await
        .expect("gateway");
    External {
        a,
        b,
        gateway,
        listens,
        dir,
    }
}

impl External {
    /// The scenario's target: the gateway's URL and both replicas.
    fn target(&self, restart_a: &str) -> String {
        std::fs::write(self.dir.join("b.pid"), format!("{}\n", self.b.p.pid)).expect("pid file");
        format!(
            r#"target:
  kind: url
  url: {gw}/v1
  replicas:
    - name: a
      upstream: {ua}
      listen: 127.0.0.1:{la}
      node: n1
      process: {{pid: {pa}, restart: "{restart_a}", ready_path: /ready}}
    - name: b
      upstream: {ub}
      listen: 127.0.0.1:{lb}
      node: n2
      process: {{pid_file: {pf}, ready_path: /ready}}
"#,
            gw = self.gateway.url,
            ua = host_port(self.a.url()),
            ub = host_port(self.b.url()),
            la = self.listens[0],
            lb = self.listens[1],
            pa = self.a.p.pid,
            pf = self.dir.join("b.pid").display(),
        )
    }
}

fn scenario(target: &str, phases: &str, faults: &str) -> String {
    format!(
        r#"name: url-target
{target}workload:
  seed: 7
  mix:
    classes: [{{name: chat, prompt_tokens: {{uniform: [100, 300]}}, output_tokens: {{uniform: [40, 80]}}}}]
  arrival: {{process: poisson, rate: 4/s}}
protected_load: 4/s
slo: {{ttft_p95: 5s, itl_p95: 1s, e2e_p95: 30s, error_rate_max: 20%}}
client: {{max_late: 3s}}
phases:
{phases}
faults:
{faults}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_target_with_listed_replicas_is_faulted_through_pids_and_proxies() {
    let ext = external("url-target").await;
    // The replacement: the same server, started again on a's address by the declared
    // command (it writes its pid where the test can find it).
    let restart = format!(
        "echo $$ > {dir}/a2.pid; exec {bin} sim worker --name a --listen {ua} --engine '{{\\\"startup\\\": \\\"300ms\\\", \\\"decode_step\\\": \\\"5ms\\\"}}'",
        dir = ext.dir.display(),
        bin = haq_bin().display(),
        ua = host_port(ext.a.url()),
    );
    let text = scenario(
        &ext.target(&restart),
        "  - {name: baseline, duration: 2s}\n  - {name: fault, duration: 4s}\n  - {name: degraded, duration: 4s}",
        "  - {name: kill-a, domain: worker, action: kill, target: {replica: a}, at: {phase: fault, offset: 500ms}, restart: {after: 300ms}}
  - {name: slow-b, domain: network, backend: proxy, action: delay, delay: 30ms, target: {replica: b}, at: {phase: fault, offset: 1s}, duration: 1s}
  - {name: freeze-b, domain: worker, action: freeze, target: {replica: b}, at: {phase: degraded, offset: 1s}, duration: 500ms}
",
    );
    let r = run(
        plan_text(&text, &["evidence.readiness_watch=100ms"]),
        "url-target",
    )
    .await;
    let evs = events(&r);
    if let Ok(p) = std::fs::read_to_string(ext.dir.join("a2.pid")) {
        // Stop the replacement whatever the assertions say (it is not our child).
        let pid: u32 = p.trim().parse().unwrap_or(0);
        if pid > 1 {
            kill_pid(pid);
        }
    }

    // Every request went through haq's proxies, attributed to its replica.
    let routed: std::collections::BTreeSet<_> = evs
        .iter()
        .filter_map(|e| match e {
            Event::ProxyRequest { replica, .. } => Some(replica.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(routed, ["a".to_string(), "b".into()].into());
    // The kill reached the declared pid, the freeze the pid named by the pid file.
    for (name, pid) in [("kill-a", ext.a.p.pid), ("freeze-b", ext.b.p.pid)] {
        let f = evs.iter().find_map(|e| match e {
            Event::Fault(FaultLine {
                name: n,
                pid,
                verified,
                detail,
                ..
            }) if n == name => Some((*pid, *verified, detail.clone())),
            _ => None,
        });
        let (got, verified, detail) = f.unwrap_or_else(|| panic!("no {name}"));
        assert!(verified, "{name}: {detail}");
        assert_eq!(got, Some(pid), "{name}");
    }
    assert!(evs.iter().any(
        |e| matches!(e, Event::Fault(FaultLine { name, verified: true, .. }) if name == "slow-b")
    ));
    // The replacement's stages, in order, up to the first request it served.
    let stages: Vec<ReplacementStage> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Replacement { stage, .. } => Some(*stage),
            _ => None,
        })
        .collect();
    assert_eq!(
        stages,
        vec![
            ReplacementStage::Requested,
            ReplacementStage::ProcessStarted,
            ReplacementStage::Ready,
            ReplacementStage::FirstRequestServed
        ],
        "{evs:?}"
    );
    assert_eq!(verdict(&r, "Failure-Domain").status, Status::Pass);
    // No gateway journal here: haq's readiness watch dates the detection of the kill
    // and of the freeze (a frozen replica does not answer its readiness check) (Q11).
    for name in ["kill-a", "freeze-b"] {
        let f = r.judgement.timeline.fault(name).expect("timeline");
        let d = f
            .detected
            .as_ref()
            .unwrap_or_else(|| panic!("{name} not detected: {f:?}"));
        assert_eq!(d.source, haq::trace::READINESS, "{name}: {d:?}");
    }
    let fate = verdict(&r, "Request-Fate");
    assert!(
        matches!(fate.status, Status::Pass),
        "{fate:?}\n{:?}",
        r.judgement.findings
    );
    drop(ext);
}

/// State letter of a process from /proc.
fn state(pid: u32) -> Option<char> {
    haq::target::procs::proc_stat(pid).map(|s| s.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_or_sigterm_heals_a_frozen_worker_and_a_blackholed_path_then_exits_3() {
    use nix::sys::signal::Signal;
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        interrupted_run_heals(sig).await;
    }
}

async fn interrupted_run_heals(sig: nix::sys::signal::Signal) {
    let ext = external(&format!("url-{sig}")).await;
    let text = scenario(
        &ext.target("true"),
        "  - {name: baseline, duration: 1s}\n  - {name: fault, duration: 60s}",
        "  - {name: freeze-a, domain: worker, action: freeze, target: {replica: a}, at: {phase: fault, offset: 300ms}, duration: 60s}
  - {name: cut-b, domain: network, backend: proxy, action: blackhole, target: {replica: b}, at: {phase: fault, offset: 300ms}, duration: 60s}
",
    );
    let f = ext.dir.join("sigint.yaml");
    std::fs::write(&f, text).expect("scenario");
    let out = ext.dir.join("run");
    let child = tokio::process::Command::new(haq_bin())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&f)
        .current_dir(crate::support::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq run");
    let trace = out.join(haq::trace::TRACE_FILE);
    eventually("both faults applied", Duration::from_secs(30), async || {
        let evs = read(&trace);
        ["freeze-a", "cut-b"].iter().all(|n| {
            evs.iter().any(
                |e| matches!(e, Event::Fault(FaultLine { name, verified: true, .. }) if name == n),
            )
        })
    })
    .await;
    assert_eq!(state(ext.a.p.pid), Some('T'), "a is frozen");
    let pid = child.id().expect("pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("signal");
    let done = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("haq exits after the signal")
        .expect("output");
    assert_eq!(
        done.status.code(),
        Some(3),
        "{sig}: stderr: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(stdout.contains("result: INTERRUPTED"), "{sig}: {stdout}");
    // The worker runs again and answers; the trace says both faults were healed.
    assert_ne!(state(ext.a.p.pid), Some('T'), "a was left frozen");
    let ready = http()
        .get(format!("{}/ready", ext.a.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("a answers");
    assert!(ready.status().is_success());
    let evs = read(&trace);
    for n in ["freeze-a", "cut-b"] {
        assert!(
            evs.iter()
                .any(|e| matches!(e, Event::Heal { name, verified: Some(true), .. } if name == n)),
            "{n} not healed: {evs:?}"
        );
    }
    assert!(matches!(
        evs.last(),
        Some(Event::RunEnd {
            interrupted: true,
            ..
        })
    ));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report"))
            .expect("json");
    assert_eq!(report["interrupted"], true);
    drop(ext);
}

/// haq SIGKILLed while it holds a url-target replica frozen (nothing can heal it then):
/// `haq check RUN_DIR` judges the trace it left; `haq heal RUN_DIR` resumes it from
/// the run's heal ledger, once; the process is running again (issue 15 item 3). Killed
/// again, the next run against the same target heals it first, from another reports
/// directory, through the per-user list of runs with open heals (item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_freeze_then_haq_heal_or_the_next_run_leaves_no_process_frozen() {
    let ext = external("url-sigkill").await;
    let text = scenario(
        &ext.target("true"),
        "  - {name: baseline, duration: 1s}\n  - {name: fault, duration: 60s}",
        "  - {name: freeze-a, domain: worker, action: freeze, target: {replica: a}, at: {phase: fault, offset: 300ms}, duration: 60s}\n",
    );
    let f = ext.dir.join("sigkill.yaml");
    std::fs::write(&f, text).expect("scenario");
    // The list of runs with open heals, this test's own.
    let state_dir = ext.dir.join("state");
    let listed = || {
        std::fs::read_dir(state_dir.join("open"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let haq = |args: &[&std::ffi::OsStr]| {
        let mut c = std::process::Command::new(haq_bin());
        c.args(args)
            .env("HAQ_STATE_DIR", &state_dir)
            .current_dir(crate::support::root());
        c
    };
    // `haq run` into `out` (its reports directory `out`'s parent), SIGKILLed once it
    // froze a.
    let frozen_by_a_killed_run = async |out: &Path| {
        let reports = out.parent().expect("parent");
        let mut child = tokio::process::Command::new(haq_bin())
            .args(["run", "--quiet", "--reports-dir"])
            .arg(reports)
            .arg("--out")
            .arg(out)
            .arg(&f)
            .env("HAQ_STATE_DIR", &state_dir)
            .current_dir(crate::support::root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("haq run");
        eventually("a frozen", Duration::from_secs(30), async || {
            state(ext.a.p.pid) == Some('T')
        })
        .await;
        child.start_kill().expect("SIGKILL");
        let _ = child.wait().await;
        assert_eq!(state(ext.a.p.pid), Some('T'), "SIGKILL healed nothing");
        assert_eq!(listed(), 1, "the killed run is listed with its open freeze");
    };
    let out = ext.dir.join("run");
    frozen_by_a_killed_run(&out).await;
    // `haq check` judges the trace up to its last flush (item 3): never a panic, never
    // "unusable" (2). The run reads UNKNOWN (exit 1), not INVALID: the trace has no
    // `run_end` and stops where the writer last flushed, so what it holds is a short
    // baseline and at most a fraction of a second of the fault phase — too few
    // completed requests for Latency (UNKNOWN, "too few completed requests") — and
    // nothing is judged from what was not recorded.
    let check = haq(&["check".as_ref(), out.as_os_str()])
        .output()
        .expect("haq check");
    let said = String::from_utf8_lossy(&check.stdout);
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(check.status.code(), Some(1), "{said}{err}");
    assert!(said.contains("result: UNKNOWN"), "{said}");
    assert!(
        said.lines().any(|l| l.contains("Latency")
            && l.contains("UNKNOWN")
            && l.contains("too few completed")),
        "{said}"
    );
    assert!(!said.contains("INVALID"), "{said}");
    let heal = haq(&["heal".as_ref(), out.as_os_str()])
        .output()
        .expect("haq heal");
    let said = String::from_utf8_lossy(&heal.stdout);
    assert_eq!(
        heal.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&heal.stderr)
    );
    assert!(
        said.contains("healed freeze-a on a: SIGCONT sent"),
        "{said}"
    );
    assert_ne!(state(ext.a.p.pid), Some('T'), "a was left frozen");
    assert_eq!(listed(), 0, "healed: unlisted");
    let ready = http()
        .get(format!("{}/ready", ext.a.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("a answers");
    assert!(ready.status().is_success());
    // Healed once: a second `haq heal` finds nothing left.
    let again = haq(&["heal".as_ref(), out.as_os_str()])
        .output()
        .expect("haq heal");
    assert_eq!(again.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing left applied"));
    // Killed again with its run in reports directory x; the next `haq run` against
    // the same target, in reports directory y, heals it first, before anything of its
    // own (here: no fault, a short run).
    let killed = ext.dir.join("x").join("run-b");
    frozen_by_a_killed_run(&killed).await;
    let y = ext.dir.join("y");
    let next = haq(&[
        "run".as_ref(),
        "--quiet".as_ref(),
        "--reports-dir".as_ref(),
        y.as_os_str(),
        "--set".as_ref(),
        "faults=[]".as_ref(),
        "--set".as_ref(),
        "phases[1].duration=1s".as_ref(),
        f.as_os_str(),
    ])
    .output()
    .expect("haq run");
    let said = String::from_utf8_lossy(&next.stderr);
    assert!(
        said.contains("haq: healed freeze-a on a") && said.contains("x/run-b"),
        "{said}"
    );
    assert_ne!(state(ext.a.p.pid), Some('T'), "a was left frozen");
    assert_eq!(listed(), 0, "healed: unlisted");
    drop(ext);
}

fn read(trace: &Path) -> Vec<Event> {
    haq::trace::read(trace)
        .map(|i| i.map_while(Result::ok).collect())
        .unwrap_or_default()
}

/// Bad environment (a declared process that does not exist, an upstream that refuses):
/// one clear error, exit 2, no load offered, no fault applied.
#[test]
fn a_missing_process_or_upstream_is_refused_before_anything_starts() {
    let dir = scratch("url-missing");
    let up = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let up_addr = up.local_addr().expect("addr");
    let closed = free_port();
    for (upstream, pid, want) in [
        (
            up_addr.to_string(),
            9_999_999_u32,
            "process 9999999 does not exist",
        ),
        (
            format!("127.0.0.1:{closed}"),
            std::process::id(),
            "is not reachable",
        ),
    ] {
        let text = scenario(
            &format!(
                "target:\n  kind: url\n  url: http://{up_addr}/v1\n  replicas:\n    - {{name: a, upstream: \"{upstream}\", listen: 127.0.0.1:{}, process: {{pid: {pid}}}}}\n",
                free_port()
            ),
            "  - {name: fault, duration: 2s}",
            "  - {name: k, target: {replica: a}, at: {phase: fault}}\n",
        );
        let f = dir.join("bad.yaml");
        std::fs::write(&f, text).expect("write");
        let out = std::process::Command::new(haq_bin())
            .args(["run", "--quiet", "--reports-dir"])
            .arg(&dir)
            .arg(&f)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && err.contains("replica a"), "{err}");
    }
}
