//! Shared helpers: load a shipped scenario with overrides, run it in-process against
//! the real sim (worker and gateway processes from the built haq binary).

use std::path::{Path, PathBuf};

use haq::RunResult;
use haq::engine::RunOptions;
use haq::plan::Plan;
use tokio_util::sync::CancellationToken;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn haq_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_haq"))
}

/// A fresh directory under the target dir, removed by nothing (kept for post-mortems).
pub fn scratch(name: &str) -> PathBuf {
    let d = root().join("target").join("it-scratch").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Latency bounds generous enough for a busy 2-core CI machine: these tests judge
/// request fate, not speed (Latency has its own PASS/FAIL tests on stored traces).
pub const LOOSE_SLO: [&str; 3] = ["slo.ttft_p95=10s", "slo.itl_p95=2s", "slo.e2e_p95=60s"];

pub fn plan(scenario: &str, sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    haq::plan::load(&root().join(scenario), &sets, None).unwrap_or_else(|e| panic!("{e}"))
}

pub async fn run(plan: Plan, name: &str) -> RunResult {
    haq::install_crypto_provider();
    let dir = scratch(name);
    let opts = RunOptions {
        out: Some(dir.join("run")),
        reports_dir: dir,
        quiet: true,
        haq_bin: Some(haq_bin()),
        agents: None,
    };
    haq::run(plan, opts, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"))
}

pub fn verdict(r: &RunResult, name: &str) -> haq::check::Verdict {
    verdict_in(&r.judgement, name)
}

/// One verdict of a judgement, by name.
pub fn verdict_in(j: &haq::check::Judgement, name: &str) -> haq::check::Verdict {
    j.verdicts
        .iter()
        .find(|v| v.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no verdict {name}"))
}

/// A stored run judged again, with all its evidence, against another plan.
pub fn rejudge(r: &RunResult, plan: &Plan) -> haq::check::Judgement {
    let tp = r.run_dir.join(haq::trace::TRACE_FILE);
    haq::check::judge_with(
        plan,
        || haq::trace::read(&tp).expect("trace").map_while(Result::ok),
        haq::check::evidence::open(&r.run_dir, plan),
    )
}

/// A scenario written in the test (relative workload paths resolve from the repo root).
pub fn plan_text(text: &str, sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    haq::plan::load_str(text, "test.yaml", root(), &sets, None).unwrap_or_else(|e| panic!("{e}"))
}

/// Every event of a run's trace.
pub fn events(r: &RunResult) -> Vec<haq::trace::Event> {
    haq::trace::read(&r.run_dir.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .map_while(Result::ok)
        .collect()
}

/// Reads one request (head and `content-length` body) from `s`, bytes beyond it kept
/// in `have` for the next; returns its head, lower-cased. `None` when the peer is gone.
pub async fn read_request(s: &mut tokio::net::TcpStream, have: &mut Vec<u8>) -> Option<String> {
    read_request_as_sent(s, have)
        .await
        .map(|(head, _)| head.to_lowercase())
}

/// As [`read_request`], with the head as sent and the body.
pub async fn read_request_as_sent(
    s: &mut tokio::net::TcpStream,
    have: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 65536];
    let head_end = loop {
        if let Some(i) = have.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => have.extend_from_slice(&buf[..k]),
        }
    };
    let head = String::from_utf8_lossy(&have[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while have.len() < head_end + len {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => have.extend_from_slice(&buf[..k]),
        }
    }
    let body = have[head_end..head_end + len].to_vec();
    have.drain(..head_end + len);
    Some((head, body))
}

/// The one result of a judged run directory, as every output gives it: report.json's
/// `result`, report.md's title, junit.xml's `result` property, the terminal's `result:`
/// line and the exit code (0 PASS · 1 FAIL or UNKNOWN · 2 INVALID · 3 INTERRUPTED).
/// Panics unless they all agree.
pub fn one_result(dir: &Path, stdout: &str, code: Option<i32>) -> String {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{stdout}"))
    };
    let json: serde_json::Value = serde_json::from_str(&read("report.json")).expect("json");
    let result = json["result"].as_str().expect("result").to_string();
    assert_eq!(json["valid"], result != "INVALID", "{}", json["client"]);
    let md = read("report.md");
    let title = md.lines().next().unwrap_or_default();
    assert!(
        title.ends_with(&format!(" · {result}")),
        "report.md: {title} vs {result}"
    );
    let junit = read("junit.xml");
    assert!(
        junit.contains(&format!("<property name=\"result\" value=\"{result}\"/>")),
        "junit.xml vs {result}: {junit}"
    );
    assert!(
        stdout.contains(&format!("result: {result} ·")),
        "terminal vs {result}: {stdout}"
    );
    let exit = match result.as_str() {
        "PASS" => 0,
        "FAIL" | "UNKNOWN" => 1,
        "INVALID" => 2,
        "INTERRUPTED" => 3,
        other => panic!("no such result {other}"),
    };
    assert_eq!(code, Some(exit), "exit code vs {result}: {stdout}");
    result
}

/// Says a test was skipped and why, where it is seen: straight on stderr, past the test
/// harness's capture (which shows a test's own output only when it fails), so a
/// skipped test is never read as a passing one.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "test {test} ... SKIPPED: {why}");
}
