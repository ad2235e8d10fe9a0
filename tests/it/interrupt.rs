//! An interrupted run judges only what completed before the signal (issue 15 item 7):
//! requests haq's interrupt stopped end `interrupted` and are neither failures nor
//! successes, a fault the interrupt came before is not a failed fault, default bounds
//! derive from the planned intervals, and an interrupt during start-up exits 3
//! (INTERRUPTED), not 2.
//!
//! The quickstart (three sim workers, the reference gateway, w2 SIGKILLed) with short
//! phases, interrupted by SIGINT at a point read from its own trace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use haq::trace::{Event, FaultLine, Outcome};

use crate::simkit::eventually;
use crate::support::{haq_bin, root, scratch};

fn read(trace: &Path) -> Vec<Event> {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `haq run` of the quickstart with `sets`, into `out`.
fn start(out: &Path, sets: &[&str]) -> tokio::process::Child {
    let mut c = tokio::process::Command::new(haq_bin());
    c.args(["run", "--quiet", "--out"]).arg(out);
    for s in sets {
        c.args(["--set", s]);
    }
    c.arg("scenarios/quickstart.yaml")
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq run")
}

async fn sigint(child: tokio::process::Child) -> std::process::Output {
    let pid = child.id().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("haq exits after SIGINT")
        .expect("output")
}

fn report(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("json")
}

fn status<'a>(report: &'a serde_json::Value, verdict: &str) -> (&'a str, &'a str) {
    let v = report["verdicts"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == verdict))
        .unwrap_or_else(|| panic!("no {verdict} in {report}"));
    (
        v["status"].as_str().unwrap_or_default(),
        v["summary"].as_str().unwrap_or_default(),
    )
}

const PHASES: [&str; 3] = [
    "phases[0].duration=3s",
    "phases[1].duration=20s",
    "phases[2].duration=20s",
];

/// SIGINT 400 ms after w2 was killed: the requests in flight are stopped by haq and
/// recorded `interrupted`; Capacity does not FAIL on them (before this, "100% of
/// protected requests failed"), no verdict FAILs, the run exits 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_after_the_fault_fails_no_verdict_by_its_own_cancellations() {
    let out: PathBuf = scratch("interrupt-after").join("run");
    let mut sets = PHASES.to_vec();
    sets.push("faults[0].at.offset=1s");
    let child = start(&out, &sets);
    let trace = out.join(haq::trace::TRACE_FILE);
    eventually("w2 killed", Duration::from_secs(60), async || {
        read(&trace)
            .iter()
            .any(|e| matches!(e, Event::Fault(FaultLine { verified: true, .. })))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let done = sigint(child).await;
    assert_eq!(
        done.status.code(),
        Some(3),
        "stderr: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let evs = read(&trace);
    let stopped = evs
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::End {
                    outcome: Outcome::Interrupted,
                    ..
                }
            )
        })
        .count();
    assert!(
        stopped > 0,
        "6 req/s of ~1 s streams: some were in flight at the signal"
    );
    assert!(
        !evs.iter().any(|e| matches!(
            e,
            Event::End {
                outcome: Outcome::Cancelled,
                ..
            }
        )),
        "the interrupt's stops are not drain-timeout cancels"
    );
    let r = report(&out);
    assert_eq!(r["result"], "INTERRUPTED", "{r}");
    for v in r["verdicts"].as_array().expect("verdicts") {
        assert_ne!(v["status"], "FAIL", "{v}");
    }
    // Routing's default bound comes from the planned degraded interval (39 s from the
    // kill: half, at most 10 s), not from the 0.4 s the interrupt left of it.
    let (_, why) = status(&r, "Routing");
    assert!(
        why.contains("bound 10000 ms, default: half the planned degraded interval"),
        "{why}"
    );
}

/// SIGINT before the fault's time: the fault was never applied because of the
/// interrupt, so Failure-Domain is UNKNOWN (before this: FAIL "verification failed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_before_the_fault_leaves_failure_domain_unknown() {
    let out: PathBuf = scratch("interrupt-before").join("run");
    let child = start(&out, &PHASES);
    let trace = out.join(haq::trace::TRACE_FILE);
    eventually("the load began", Duration::from_secs(60), async || {
        read(&trace)
            .iter()
            .filter(|e| matches!(e, Event::End { .. }))
            .count()
            >= 3
    })
    .await;
    let done = sigint(child).await;
    assert_eq!(done.status.code(), Some(3));
    let r = report(&out);
    let (fd, why) = status(&r, "Failure-Domain");
    assert_eq!(fd, "UNKNOWN", "{why}");
    assert!(
        why.contains("not applied before the run was interrupted"),
        "{why}"
    );
}

/// SIGINT while haq waits for the gateway to become ready (a url target whose
/// gateway never answers): exit 3, said so — not 2 as for a gateway that is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_during_start_up_exits_3() {
    let dir = scratch("interrupt-start");
    let port = crate::simkit::free_port();
    let f = dir.join("down.yaml");
    std::fs::write(
        &f,
        format!(
            r#"name: interrupt-start
target: {{kind: url, url: "http://127.0.0.1:{port}/v1", ready_timeout: 60s}}
workload:
  mix:
    classes: [{{name: chat, prompt_tokens: 10, output_tokens: 4}}]
  arrival: {{process: constant, rate: 1/s}}
protected_load: 1/s
slo: {{ttft_p95: 1s, itl_p95: 1s, e2e_p95: 5s, error_rate_max: 10%}}
phases: [{{name: baseline, duration: 5s}}]
faults: []
"#
        ),
    )
    .expect("scenario");
    let out = dir.join("run");
    let mut child = tokio::process::Command::new(haq_bin())
        .args(["run", "--out"])
        .arg(&out)
        .arg(&f)
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq run");
    // It says it is waiting for the gateway.
    let mut err = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let waiting = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = err.next_line().await {
            if l.contains("waiting") {
                return Some(l);
            }
        }
        None
    })
    .await;
    assert!(matches!(waiting, Ok(Some(_))), "{waiting:?}");
    let done = sigint(child).await;
    let mut rest = String::new();
    while let Ok(Ok(Some(l))) = tokio::time::timeout(Duration::from_secs(5), err.next_line()).await
    {
        rest.push_str(&l);
        rest.push('\n');
    }
    assert_eq!(done.status.code(), Some(3), "stderr: {rest}");
    assert!(rest.contains("interrupted before the load began"), "{rest}");
}
