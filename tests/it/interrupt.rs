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
    haq_run(out, sets, Path::new("scenarios/quickstart.yaml"), None)
}

/// `haq run` of `scenario` with `sets`, into `out` (`state`: its `HAQ_STATE_DIR`).
fn haq_run(
    out: &Path,
    sets: &[&str],
    scenario: &Path,
    state: Option<&Path>,
) -> tokio::process::Child {
    let mut c = tokio::process::Command::new(haq_bin());
    c.args(["run", "--quiet", "--out"]).arg(out);
    for s in sets {
        c.args(["--set", s]);
    }
    if let Some(s) = state {
        c.env("HAQ_STATE_DIR", s);
    }
    c.arg(scenario)
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq run")
}

async fn sigint(child: tokio::process::Child) -> std::process::Output {
    sigint_to(&child);
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

/// A two-worker sim run whose one fault is the command fault `command` (on w1, 200 ms
/// into a long fault phase), into `dir/run` (`HAQ_STATE_DIR`: `dir/state`, so that
/// nothing of it reaches the user's own).
fn start_command_fault(dir: &Path, command: &str) -> tokio::process::Child {
    let f = dir.join("command.yaml");
    std::fs::write(
        &f,
        format!(
            r#"name: interrupt-command
target: {{kind: sim, replicas: 2}}
workload:
  seed: 3
  mix:
    classes: [{{name: chat, prompt_tokens: 10, output_tokens: 4}}]
  arrival: {{process: constant, rate: 2/s}}
protected_load: 2/s
slo: {{ttft_p95: 5s, itl_p95: 1s, e2e_p95: 30s, error_rate_max: 10%}}
phases:
  - {{name: baseline, duration: 1s}}
  - {{name: fault, duration: 120s}}
faults:
  - name: hold
    backend: command
    command: {command}
    verify: false
    target: {{replica: w1}}
    at: {{phase: fault, offset: 200ms}}
    duration: 100s
"#
        ),
    )
    .expect("scenario");
    haq_run(&dir.join("run"), &[], &f, Some(&dir.join("state")))
}

/// The process group a command wrote into `file` (its `$$`: `sh` leads its group).
async fn group_in(file: &Path) -> i32 {
    let mut pgid = 0;
    eventually("the command runs", Duration::from_secs(60), async || {
        pgid = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pgid > 0
    })
    .await;
    pgid
}

fn sigint_to(child: &tokio::process::Child) {
    let pid = child.id().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
}

/// The (last) SIGINT to `child`: it exits 3 within 20 s (`why`: what it must not wait
/// for); its stderr.
async fn ends_with_3(child: tokio::process::Child, why: &str) -> String {
    sigint_to(&child);
    let done = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("haq ends within 20 s of SIGINT, not {why}"))
        .expect("output");
    let stderr = String::from_utf8_lossy(&done.stderr).to_string();
    assert_eq!(done.status.code(), Some(3), "{stderr}");
    stderr
}

/// No process is left in group `pgid`.
fn gone(pgid: i32) {
    let left = haq::target::group::members(pgid);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A command fault whose inject hangs (`sleep 300`, timeout 120 s): SIGINT ends haq
/// (exit 3) well before the command's timeout, with the command's process group gone,
/// and the trace and the report say interrupted (issue 15 item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_a_command_hangs_ends_haq_and_the_commands_process_group() {
    let dir = scratch("interrupt-hung-inject");
    let pidfile = dir.join("inject.pgid");
    let child = start_command_fault(
        &dir,
        &format!(
            "{{inject: \"echo $$ > {}; sleep 300\", heal: \"true\", timeout: 120s}}",
            pidfile.display()
        ),
    );
    let pgid = group_in(&pidfile).await;
    assert!(!haq::target::group::members(pgid).is_empty());
    let stderr = ends_with_3(child, "at the command's 120 s timeout").await;
    assert!(
        stderr.contains("a second Ctrl-C ends haq at once"),
        "{stderr}"
    );
    gone(pgid);
    let out = dir.join("run");
    assert!(matches!(
        read(&out.join(haq::trace::TRACE_FILE)).last(),
        Some(Event::RunEnd {
            interrupted: true,
            ..
        })
    ));
    assert_eq!(report(&out)["interrupted"], true);
}

/// A heal that hangs (`sleep 300`, timeout 120 s) after a SIGINT: a second SIGINT
/// ends haq at once (exit 3) and kills the heal's process group; the heal stays open
/// in the heal ledger, haq says so and which `haq heal` to run, and that `haq heal`
/// then heals it (the heal command completes the second time) (issue 15 items 1-3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigint_abandons_a_hung_heal_to_the_ledger_for_haq_heal() {
    let dir = scratch("interrupt-hung-heal");
    let (pidfile, second, healed) = (
        dir.join("heal.pgid"),
        dir.join("second"),
        dir.join("healed"),
    );
    let heal = format!(
        "if [ -e {s} ]; then touch {h}; else echo $$ > {p}; exec sleep 300; fi",
        s = second.display(),
        h = healed.display(),
        p = pidfile.display()
    );
    let child = start_command_fault(
        &dir,
        &format!("{{inject: \"true\", heal: \"{heal}\", timeout: 120s}}"),
    );
    let out = dir.join("run");
    let trace = out.join(haq::trace::TRACE_FILE);
    eventually("the fault applied", Duration::from_secs(60), async || {
        read(&trace)
            .iter()
            .any(|e| matches!(e, Event::Fault(FaultLine { name, .. }) if name == "hold"))
    })
    .await;
    sigint_to(&child);
    let pgid = group_in(&pidfile).await;
    let stderr = ends_with_3(child, "at the heal's 120 s timeout").await;
    assert!(
        stderr.contains("NOT healed: hold on w1")
            && stderr.contains(&format!("haq heal {}", out.display())),
        "{stderr}"
    );
    gone(pgid);
    let (open, alive) = haq::faults::ledger::open_entries(&out).expect("ledger");
    assert!(!alive);
    assert_eq!(
        open.iter().map(|o| o.fault.as_str()).collect::<Vec<_>>(),
        ["hold"]
    );
    // The heal completes this time.
    std::fs::write(&second, "").expect("marker");
    let heal = std::process::Command::new(haq_bin())
        .arg("heal")
        .arg(&out)
        .env("HAQ_STATE_DIR", dir.join("state"))
        .output()
        .expect("haq heal");
    let said = String::from_utf8_lossy(&heal.stdout);
    assert_eq!(heal.status.code(), Some(0), "{said}");
    assert!(said.contains("healed hold on w1"), "{said}");
    assert!(healed.exists());
    assert!(
        haq::faults::ledger::open_entries(&out)
            .expect("ledger")
            .0
            .is_empty()
    );
}
