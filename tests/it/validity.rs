//! Issue 21 item 7: the validity rule on real runs. A haq process really starved —
//! stopped by SIGSTOP for 300 ms in the middle of a phase, no test hook — is INVALID,
//! naming the phase, the rule and how late, and every output agrees on the result
//! ([`crate::support::one_result`]). (Runs left alone are valid: `run::quickstart_*`
//! asserts PASS; the rule's PASS and INVALID cases on hand-written traces are in
//! `src/check/validity.rs`.)

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::simkit::eventually;
use crate::support::{haq_bin, one_result, scratch};

/// Two sim replicas at a constant 20/s (a send due every 50 ms): a 2 s baseline and a
/// 4 s steady phase. TTFT objective 200 ms (the sim answers in tens of ms), so the
/// stall bound (`client.max_late` by default: the tightest objective) is 200 ms.
const SCENARIO: &str = "name: stopped
target: {kind: sim, replicas: 2, gateway: {policy: reference}}
workload:
  seed: 5
  mix: {classes: [{name: chat, prompt_tokens: 20, output_tokens: 8}]}
  arrival: {process: constant, rate: 20/s}
protected_load: 20/s
slo: {ttft_p95: 200ms, itl_p95: 2s, e2e_p95: 60s}
phases:
  - {name: baseline, duration: 2s}
  - {name: steady, kind: baseline, duration: 4s}
";

/// Runs `haq run` on the scenario into `out`, SIGSTOPs the haq process for `stop` 1 s
/// into the steady phase, then SIGCONTs it. Its stdout and exit code.
async fn haq_run(scenario: &Path, out: &Path, stop: Duration) -> (String, Option<i32>) {
    let child = tokio::process::Command::new(haq_bin())
        .args(["run", "--quiet", "--out"])
        .arg(out)
        .arg(scenario)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq run");
    let trace = out.join(haq::trace::TRACE_FILE);
    eventually(
        "the steady phase starts",
        Duration::from_secs(60),
        async || {
            std::fs::read_to_string(&trace)
                .is_ok_and(|t| t.contains(r#""name":"steady","edge":"start""#))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = Pid::from_raw(child.id().expect("pid") as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    tokio::time::sleep(stop).await;
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let done = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("haq run ends")
        .expect("output");
    let stdout = String::from_utf8_lossy(&done.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&done.stderr);
    (format!("{stdout}\nstderr: {stderr}"), done.status.code())
}

fn report(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_haq_process_stopped_300ms_in_a_phase_is_invalid_naming_the_phase_and_how_late() {
    let dir = scratch("stopped");
    let scenario = dir.join("stopped.yaml");
    std::fs::write(&scenario, SCENARIO).expect("scenario");

    // Stopped for 300 ms: the send due next after the stop began (within 50 ms) went
    // out at least 250 ms late, past the 200 ms bound, whatever else the machine does.
    let stopped = dir.join("stopped");
    let (stdout, code) = haq_run(&scenario, &stopped, Duration::from_millis(300)).await;
    assert_eq!(one_result(&stopped, &stdout, code), "INVALID", "{stdout}");
    assert!(
        stdout.contains("INVALID [stall] phase steady: "),
        "{stdout}"
    );
    let r = report(&stopped);
    crate::report::assert_valid_report(&r);
    let breaches = r["client"]["breaches"].as_array().expect("breaches");
    assert!(
        breaches
            .iter()
            .any(|b| b["rule"] == "stall" && b["phase"] == "steady"),
        "{breaches:?}"
    );
    let steady = r["client"]["phases"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "steady"))
        .expect("steady phase");
    let late = steady["late_max_ms"].as_f64().expect("late_max_ms");
    assert!(late >= 250.0, "{steady}");
    assert!(steady["over_max_late"].as_u64() >= Some(1), "{steady}");
    let md = std::fs::read_to_string(stopped.join("report.md")).expect("report.md");
    assert!(md.contains("[stall] phase steady: "), "{md}");
    let junit = std::fs::read_to_string(stopped.join("junit.xml")).expect("junit.xml");
    assert!(junit.contains("type=\"INVALID\""), "{junit}");
    assert!(junit.contains("[stall] phase steady: "), "{junit}");
}
