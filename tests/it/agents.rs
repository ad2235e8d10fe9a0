//! `haq run --agents N` (issue 17 items 1–2, docs/agents.md): the same scenario on the
//! embedded sim sent by one process and by three local agents offers the same request
//! set and reaches the same verdicts; a trace split into agents' traces and merged
//! back judges exactly as before (lossless); an agent killed mid-run makes the run
//! INVALID, naming it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use haq::RunResult;
use haq::check::Status;
use haq::engine::RunOptions;
use haq::engine::agents::Agents;
use tokio_util::sync::CancellationToken;

use crate::support::{LOOSE_SLO, haq_bin, plan, root, scratch, verdict};

pub(crate) const SCENARIO: &str = "scenarios/quickstart.yaml";

/// The quickstart with short phases: w2 killed 2 s into the fault phase.
pub(crate) fn sets() -> Vec<String> {
    loose(&[
        "phases[0].duration=4s",
        "phases[1].duration=5s",
        "phases[2].duration=4s",
        "faults[0].at.offset=2s",
        "workload.mix.classes[0].output_tokens={uniform: [40, 80]}",
    ])
}

/// `sets` with the loose SLO.
fn loose(sets: &[&str]) -> Vec<String> {
    sets.iter()
        .chain(&LOOSE_SLO)
        .map(|s| s.to_string())
        .collect()
}

/// The M9/3 scenario on the naive-retry gateway, so that its findings are the
/// schedule's: a probe sent 2 s into the fault phase, its replica killed while haq's
/// proxy holds the probe's third delta (computed, not sent: exactly two delivered —
/// killed at its first delta instead, how many more left before the SIGKILL landed
/// varied, and the findings with it), the probe then stitched onto another replica
/// (Request-Fate findings on it). Constant arrivals, the fault phase at 0.25/s (the
/// protected load, lowered for it) and answers of 4–8 tokens: the workload's last
/// request before the probe is sent as the fault phase starts and done within a
/// second, its next 4 s in, so the kill catches the probe alone.
pub(crate) const PROBED: &str = "scenarios/m9-3-kill-after-first-delta.yaml";

fn probed_sets() -> Vec<String> {
    loose(&[
        "target.gateway.policy=naive-retry",
        "workload.arrival={process: constant, rate: 4/s}",
        "workload.mix.classes[0].output_tokens={uniform: [4, 8]}",
        "protected_load=0.25/s",
        "phases[0].duration=5s",
        "phases[1].duration=8s",
        "phases[1].rate=0.25/s",
        "phases[2].duration=5s",
        "faults[0].when={probe: {computed_not_sent: 3}, max_tokens: 40}",
        "client.max_late=3s",
    ])
}

fn options(name: &str, agents: u64) -> RunOptions {
    options_for(name, agents, SCENARIO, sets())
}

fn options_for(name: &str, agents: u64, scenario: &str, sets: Vec<String>) -> RunOptions {
    let dir = scratch(name);
    RunOptions {
        out: Some(dir.join("run")),
        reports_dir: dir,
        quiet: true,
        haq_bin: Some(haq_bin()),
        agents: (agents > 1).then(|| Agents {
            count: agents,
            scenario: root().join(scenario),
            sets,
            kube: None,
        }),
    }
}

/// The [`PROBED`] scenario sent by `agents` processes.
async fn run_with(name: &str, agents: u64) -> RunResult {
    haq::install_crypto_provider();
    let s = probed_sets();
    let p = plan(PROBED, &s.iter().map(String::as_str).collect::<Vec<_>>());
    let opts = options_for(name, agents, PROBED, s);
    haq::run(p, opts, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("run failed: {e:#}"))
}

/// Every line of a trace, as JSON.
fn lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(haq::trace::TRACE_FILE))
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The schedule's requests as sent: id → (class, phase, prompt and max tokens,
/// intended time from the first request's, µs).
fn requests(dir: &Path) -> BTreeMap<String, (String, String, u64, u64, i64)> {
    let reqs: Vec<serde_json::Value> = lines(dir)
        .into_iter()
        .filter(|e| e["ev"] == "request" && e.get("probe").is_none())
        .collect();
    let first = reqs
        .iter()
        .find(|e| e["id"] == "r000000")
        .map(|e| e["intended"].as_i64().expect("intended"))
        .expect("r000000 sent");
    reqs.iter()
        .map(|e| {
            (
                e["id"].as_str().expect("id").to_string(),
                (
                    e["class"].as_str().expect("class").to_string(),
                    e["phase"].as_str().expect("phase").to_string(),
                    e["prompt_tokens"].as_u64().expect("prompt"),
                    e["max_tokens"].as_u64().expect("max"),
                    e["intended"].as_i64().expect("intended") - first,
                ),
            )
        })
        .collect()
}

/// The findings as the schedule determines them: kind and request, sorted.
fn findings(j: &haq::check::Judgement) -> Vec<(&'static str, &str)> {
    let mut f: Vec<_> = j
        .findings
        .iter()
        .map(|f| (f.kind.as_str(), f.request.as_str()))
        .collect();
    f.sort();
    f
}

/// The requests a fault caught: request, fault, stage and outcome, sorted.
fn caught(j: &haq::check::Judgement) -> Vec<(&str, &str, String, &'static str)> {
    let mut c: Vec<_> = j
        .fate_requests
        .iter()
        .map(|r| {
            let stage = format!("{:?}", r.stage);
            (
                r.request.as_str(),
                r.fault.as_str(),
                stage,
                r.outcome.as_str(),
            )
        })
        .collect();
    c.sort();
    c
}

fn statuses(j: &haq::check::Judgement) -> Vec<(String, Status)> {
    j.verdicts
        .iter()
        .map(|v| (v.name.to_string(), v.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_and_three_agents_send_the_same_requests_and_reach_the_same_verdicts() {
    let one = run_with("agents-1", 1).await;
    let three = run_with("agents-3", 3).await;
    // The same request set: ids, contents and intended times (to the µs the two
    // runs' starts of load round to).
    let (a, b) = (requests(&one.run_dir), requests(&three.run_dir));
    assert!(a.len() > 40, "{} requests", a.len());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (id, x) in &a {
        let y = &b[id];
        assert_eq!((&x.0, &x.1, x.2, x.3), (&y.0, &y.1, y.2, y.3), "{id}");
        assert!(
            (x.4 - y.4).abs() <= 1,
            "{id}: intended {} vs {} µs",
            x.4,
            y.4
        );
    }
    // Same verdicts and the same findings: each finding's kind and request, and each
    // caught request's fault, stage and outcome (not their text or chunk indices: how
    // many deltas left the replica between the probe's first delta and the SIGKILL is
    // timing). The kill catches the probe alone (the scenario's quiet fault phase):
    // were a workload request caught, which one would be the timing's.
    assert_eq!(statuses(&one.judgement), statuses(&three.judgement));
    assert_eq!(verdict(&three, "Request-Fate").status, Status::Fail);
    let probe = "probe-kill-after-first-delta";
    for r in [&one, &three] {
        let caught: Vec<&str> = caught(&r.judgement).into_iter().map(|c| c.0).collect();
        assert_eq!(caught, [probe], "{:?}", r.judgement.fate_requests);
        assert!(
            findings(&r.judgement).iter().all(|f| f.1 == probe),
            "{:?}",
            r.judgement.findings
        );
    }
    assert!(!findings(&one.judgement).is_empty());
    assert_eq!(findings(&one.judgement), findings(&three.judgement));
    assert_eq!(caught(&one.judgement), caught(&three.judgement));
    assert_eq!(one.judgement.finding_counts, three.judgement.finding_counts);
    assert!(
        !three.judgement.invalid(),
        "{:?}",
        three.judgement.client.reasons()
    );
    // Per phase: the same requests measured, latency loosely alike. Two live runs'
    // latencies differ (the sim's engine and the machine's load), so their
    // percentiles cannot be equal; that merging loses nothing — every percentile the
    // same within HdrHistogram's precision, in fact byte for byte — is checked on one
    // trace split into agents' traces and merged back (`lossless` below).
    for (p, q) in one.judgement.phases.iter().zip(&three.judgement.phases) {
        assert_eq!(p.name, q.name);
        let (x, y) = (p.e2e_ms.count, q.e2e_ms.count);
        assert_eq!(x, y, "{}: {x} vs {y} measured", p.name);
        for (x, y) in [(p.ttft_ms.p50, q.ttft_ms.p50), (p.e2e_ms.p50, q.e2e_ms.p50)] {
            assert!(
                y < x * 3.0 + 200.0 && x < y * 3.0 + 200.0,
                "{}: {x} vs {y} ms",
                p.name
            );
        }
    }
    // How many agents sent what: each its share, together all.
    let h = three
        .judgement
        .client
        .agents
        .as_ref()
        .expect("agents reported");
    assert_eq!(h.count, 3);
    for (k, ag) in h.agents.iter().enumerate() {
        let mine = a
            .keys()
            .filter(|id| haq::workload::Share::of_id(id, 3) == Some(k as u64))
            .count() as u64;
        assert_eq!(
            (ag.state, ag.sent, ag.reported),
            ("done", mine, Some(mine)),
            "{ag:?}"
        );
        assert!(ag.clock_offset_ms.expect("offset").abs() < 50.0, "{ag:?}");
    }
    assert!(one.judgement.client.agents.is_none());
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(three.run_dir.join("report.json")).expect("report"),
    )
    .expect("json");
    crate::report::assert_valid_report(&report);
    assert_eq!(report["client"]["agents"]["agents"][2]["name"], "agent-2");
    let md = std::fs::read_to_string(three.run_dir.join("report.md")).expect("md");
    assert!(md.contains("| agents | 3 agents sent"), "{md}");
    // `haq check` of the merged run judges as the run did.
    let (_, again) = haq::check::judge_dir(&three.run_dir).expect("judged");
    assert_eq!(statuses(&again), statuses(&three.judgement));
    assert_eq!(
        serde_json::to_value(&again.phases).expect("json"),
        serde_json::to_value(&three.judgement.phases).expect("json")
    );
    // A merged trace is one trace: ordered by time within each input, ids unique,
    // the coordinator's run_end last.
    let all = lines(&three.run_dir);
    assert_eq!(all.last().expect("lines")["ev"], "run_end");
    assert_eq!(all.iter().filter(|e| e["ev"] == "run_start").count(), 1);

    lossless(&one.run_dir);
}

/// A single-process run's trace split by share into three agents' traces and merged
/// back judges exactly as the original: every percentile, verdict and finding.
fn lossless(src: &Path) {
    let dir = scratch("agents-split").join("run");
    std::fs::create_dir_all(&dir).expect("dir");
    for e in std::fs::read_dir(src).expect("read").flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy");
        }
    }
    let text = std::fs::read_to_string(src.join(haq::trace::TRACE_FILE)).expect("trace");
    let mut main = String::new();
    let mut shares = vec![String::new(); 3];
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("json");
        let per_request =
            ["request", "response", "chunk", "end"].contains(&v["ev"].as_str().unwrap_or_default());
        let share = v["id"]
            .as_str()
            .and_then(|id| haq::workload::Share::of_id(id, 3))
            .filter(|_| per_request && v.get("probe").is_none());
        match share {
            Some(k) => shares[k as usize].push_str(&format!("{l}\n")),
            None => main.push_str(&format!("{l}\n")),
        }
    }
    std::fs::write(dir.join(haq::trace::TRACE_FILE), main).expect("main");
    let parts: Vec<haq::trace::merge::Part> = shares
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let p: PathBuf = dir.join(format!("agent-{k}.jsonl"));
            std::fs::write(&p, s).expect("share");
            haq::trace::merge::Part {
                share: k as u64,
                count: 3,
                trace: p,
            }
        })
        .collect();
    haq::trace::merge::merge(&dir.join(haq::trace::TRACE_FILE), &parts).expect("merged");
    let (_, before) = haq::check::judge_dir(src).expect("judged");
    let (_, after) = haq::check::judge_dir(&dir).expect("judged");
    // Everything judged, byte for byte (but the run directory's path in the evidence).
    let json = |j: &haq::check::Judgement| serde_json::to_string(j).expect("json");
    let (src_s, dir_s) = (src.display().to_string(), dir.display().to_string());
    assert_eq!(json(&before).replace(&src_s, &dir_s), json(&after));
    assert!(before.phases.iter().all(|p| p.ttft_ms.count > 0));
}

/// The pid of the process whose command line names `needle` (an agent of this test's
/// run: its assignment file's path is unique to the run directory).
fn pid_naming(needle: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        String::from_utf8_lossy(&cmd)
            .contains(needle)
            .then_some(pid)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_run_makes_the_run_invalid_naming_it() {
    haq::install_crypto_provider();
    let s = sets();
    let p = plan(SCENARIO, &s.iter().map(String::as_str).collect::<Vec<_>>());
    let opts = options("agents-killed", 3);
    let assignment = opts
        .out
        .clone()
        .expect("out")
        .join("agents/agent-1/assignment.json");
    let run = tokio::spawn(haq::run(p, opts, CancellationToken::new()));
    // Once agent 1 has sent part of its share, it is killed.
    let trace = assignment.with_file_name("trace.jsonl");
    let mut pid = None;
    for _ in 0..600 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let sent = std::fs::read_to_string(&trace)
            .map(|t| t.matches("\"ev\":\"request\"").count())
            .unwrap_or(0);
        if sent >= 3 {
            pid = pid_naming(&assignment.display().to_string());
            break;
        }
    }
    let pid = pid.expect("agent 1 running and sending");
    // SAFETY: kill(2) on the agent this test's run started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let r = run.await.expect("joined").expect("the run ends");
    let breach = agent_breach(&r, "agent-1");
    assert!(
        breach.contains("lost") && breach.contains("signal 9"),
        "{breach}"
    );
    let h = r.judgement.client.agents.as_ref().expect("agents");
    let states: Vec<&str> = h.agents.iter().map(|a| a.state).collect();
    assert_eq!(states, vec!["done", "lost", "done"]);
    assert_eq!(r.judgement.result().to_string(), "INVALID");
}

/// The run is INVALID, and the breach of rule `agent` naming `agent` says why.
pub(crate) fn agent_breach(r: &RunResult, agent: &str) -> String {
    assert!(r.judgement.invalid(), "{:?}", r.judgement.client);
    let breach = r
        .judgement
        .client
        .breaches
        .iter()
        .find(|b| b.message.contains(agent))
        .unwrap_or_else(|| panic!("{:?}", r.judgement.client.breaches));
    assert_eq!(breach.rule.as_str(), "agent");
    breach.message.clone()
}
