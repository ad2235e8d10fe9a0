//! Engine-level failures (issue 18) end to end on the sim: a lost GPU behind a live
//! process (in a tensor-parallel group), a hung engine whose health passes or times
//! out, a slow engine. The reference gateway handles each (Routing, Request-Fate,
//! Failure-Domain PASS); a flawed policy fails on each — TCP-only health checks keep
//! routing to the dead or hung replica (Routing FAIL), soft-timeout failover treats
//! slow as dead (two writers: Request-Fate FAIL). Phases of a few seconds.

use std::time::Duration;

use haq::check::Status;
use haq::check::fate::FindingKind;
use serde_json::{Value, json};

use crate::simkit::*;
use crate::support::run;
use crate::verdicts::status_of;

/// The quickstart, short (`verdicts::short`), in three phases of a few seconds.
fn short(extra: &[&str]) -> haq::plan::Plan {
    let mut sets = vec![
        "phases=[{name: baseline, duration: 2s}, {name: fault, duration: 4s}, {name: degraded, duration: 2s}]",
    ];
    sets.extend(extra);
    crate::verdicts::short(&sets)
}

/// The run's report.json, with its cache effects and migrations, fits its schema.
fn valid_report(r: &haq::RunResult) {
    let text = std::fs::read_to_string(r.run_dir.join("report.json")).expect("report.json");
    crate::report::assert_valid_report(&serde_json::from_str(&text).expect("json"));
}

fn pass(r: &haq::RunResult, names: &[&str]) {
    for n in names {
        let (s, v) = status_of(r, n);
        assert_eq!(s, Status::Pass, "{n}: {v}");
    }
}

/// The run's heal of `fault`: recorded in the trace as verified, and the timeline's
/// (an unverified heal is no heal there). Returns how the undo was verified.
fn healed_verified(r: &haq::RunResult, fault: &str) -> String {
    use haq::trace::Event;
    let trace = r.run_dir.join(haq::trace::files::TRACE_FILE);
    let heals: Vec<(String, Option<bool>)> = haq::trace::read(&trace)
        .expect("trace")
        .map(|e| e.expect("event"))
        .filter_map(|e| match e {
            Event::Heal {
                name,
                detail,
                verified,
                ..
            } if name == fault => Some((detail, verified)),
            _ => None,
        })
        .collect();
    let [(detail, verified)] = &heals[..] else {
        panic!("one heal of {fault}: {heals:?}");
    };
    assert_eq!(*verified, Some(true), "{fault}: {detail}");
    let f = r.judgement.timeline.fault(fault).expect("timeline");
    assert!(f.healed.is_some() && f.heal_unverified.is_none(), "{f:?}");
    detail.clone()
}

const GPU_LOST: &str = "faults[0]={name: gpu1-w2, domain: gpu, backend: engine, action: gpu_lost, target: {replica: w2, gpu: 1}, at: {phase: fault, offset: 300ms}, when: {in_flight: 2}, duration: 2500ms}";

/// GPU 1 of w2's TP group of 2 is lost: the engine dies, the process lives on. The
/// reference gateway's deep health check takes w2 out at once; TCP-only checks keep
/// routing to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_gpu_behind_a_live_process_is_routed_around_unless_health_checks_are_tcp_only() {
    let sets = [
        "target.engine.tensor_parallel_size=2",
        GPU_LOST,
        "criteria.routing.traffic_removal_max=1500ms",
    ];
    let r = run(short(&sets), "gpu-lost").await;
    pass(&r, &["Failure-Domain", "Routing", "Request-Fate"]);
    let (s, v) = status_of(&r, "Failure-Domain");
    assert!(
        v.contains("GPU 1 of a tensor-parallel group of 2") && v.contains("/metrics 200"),
        "{s:?} {v}"
    );
    let h = healed_verified(&r, "gpu1-w2");
    assert!(h.contains("engine restarted"), "{h}");
    // Q12 step 14: the survivors' engine metrics before the fault and after the
    // reroute, next to their TTFT, in report.md.
    let e = r.judgement.cache_effects.first().expect("cache effects");
    for w in ["w1", "w3"] {
        let row = e
            .rows
            .iter()
            .find(|x| x.replica == w)
            .expect("a survivor's row");
        for fig in [&row.before, &row.after] {
            assert!(fig.kv_usage.is_some() && fig.running.is_some(), "{row:?}");
        }
        assert!(row.after.prompt_tokens_per_s.is_some(), "{row:?}");
    }
    let md = std::fs::read_to_string(r.run_dir.join("report.md")).expect("report.md");
    assert!(md.contains("## KV and cache effects (Q12 step 14)"), "{md}");
    assert!(md.contains("| w1 | "), "{md}");
    valid_report(&r);
    // The requests the dead engine cut were retried (before their first delta) or got
    // the gateway's explicit error — never the engine's error and a clean [DONE].
    use haq::check::fate::Observed;
    let fates = &r.judgement.fate_requests;
    assert!(
        fates
            .iter()
            .any(|x| matches!(x.observed, Observed::Failed | Observed::Retried)),
        "{fates:#?}"
    );

    let mut bad = sets.to_vec();
    bad.push("target.gateway.policy=tcp-health-check");
    let r = run(short(&bad), "gpu-lost-tcp").await;
    tcp_checks_kept_routing(&r);
}

/// Routing FAILs: TCP checks never saw the replica fail, new requests kept reaching it.
fn tcp_checks_kept_routing(r: &haq::RunResult) {
    let (s, v) = status_of(r, "Routing");
    assert_eq!(s, Status::Fail, "{v}");
    let f = &r.judgement.timeline.faults[0];
    assert!(f.detected.is_none(), "TCP checks never saw it: {f:?}");
    let routed = f.removal.as_ref().map(|x| x.routed_after_fault);
    assert!(routed > Some(3), "{f:?}");
}

fn hang(health: &str, policy: &str) -> haq::plan::Plan {
    let fault = format!(
        "faults[0]={{name: hang-w2, domain: gpu, backend: engine, action: gpu_hang, health: {health}, target: {{replica: w2}}, at: {{phase: fault, offset: 300ms}}, when: {{in_flight: 1}}, duration: 4s}}"
    );
    let policy = format!("target.gateway.policy={policy}");
    short(&[
        // Long streams at twice the quickstart's rate: the healthy replicas keep as
        // many requests in flight as the hung one has stuck, so its stuck requests do
        // not keep least-loaded routing away from it on their own.
        "workload.mix.classes[0].output_tokens={uniform: [100, 200]}",
        "workload.arrival.rate=12/s",
        &fault,
        &policy,
        "target.gateway.stall_timeout=1s",
        "criteria.routing.traffic_removal_max=1800ms",
    ])
}

/// A hung engine whose `/health` passes (the gray failure): the reference's deep check
/// sees no step within `stall_timeout`, takes it out and gives up its attempts; with
/// TCP-only checks traffic goes on reaching it until the heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_with_passing_health_is_caught_by_the_deep_check_not_by_tcp_checks() {
    let r = run(hang("pass", "reference"), "hang-pass").await;
    pass(&r, &["Failure-Domain", "Routing", "Request-Fate"]);
    // The hang is healed after its 4 s, and the engine verified stepping again.
    let h = healed_verified(&r, "hang-w2");
    assert!(h.contains("engine steps again"), "{h}");
    let f = &r.judgement.timeline.faults[0];
    let d = f.detected.as_ref().expect("detected");
    assert!(d.detail.contains("deep health check"), "{d:?}");
    let (_, v) = status_of(&r, "Failure-Domain");
    assert!(v.contains("/health passes (200)"), "{v}");

    let r = run(hang("pass", "tcp-health-check"), "hang-tcp").await;
    tcp_checks_kept_routing(&r);
}

/// A hung engine whose health endpoints hang too: the readiness check's own timeout
/// takes it out; TCP-only checks still see the port accept and keep routing to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_whose_health_times_out_leaves_rotation_unless_checks_are_tcp_only() {
    let r = run(hang("timeout", "reference"), "hang-timeout").await;
    pass(&r, &["Failure-Domain", "Routing", "Request-Fate"]);
    let (_, v) = status_of(&r, "Failure-Domain");
    assert!(v.contains("/health times out"), "{v}");
    let h = healed_verified(&r, "hang-w2");
    assert!(h.contains("engine steps again"), "{h}");

    let r = run(hang("timeout", "tcp-health-check"), "hang-timeout-tcp").await;
    tcp_checks_kept_routing(&r);
}

fn slow(policy: &str) -> haq::plan::Plan {
    let policy = format!("target.gateway.policy={policy}");
    short(&[
        "workload.mix.classes[0].output_tokens={uniform: [20, 40]}",
        "faults[0]={name: slow-w2, domain: gpu, backend: engine, action: slow, factor: 40, target: {replica: w2}, at: {phase: fault, offset: 300ms}, when: {in_flight: 2}, duration: 2s}",
        "target.gateway.soft_timeout=150ms",
        &policy,
    ])
}

/// Every step of w2 × 40 (≈ 260 ms between tokens, past the 150 ms soft timeout): the
/// reference waits (slow is not dead, M4); soft-timeout failover starts an unfenced
/// second attempt — two writers in one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_engine_is_not_dead_and_soft_timeout_failover_fails_request_fate() {
    let r = run(slow("reference"), "slow").await;
    pass(&r, &["Failure-Domain", "Request-Fate"]);
    // The slowness is healed after its 2 s: verified from the worker's state, and
    // the worker's own journal shows its step factor 40 then back to 1.
    let h = healed_verified(&r, "slow-w2");
    assert!(h.contains("step factor back to 1"), "{h}");
    let lines: Vec<Value> = journal(&r.run_dir.join("worker-w2.jsonl"));
    let factors: Vec<f64> = lines
        .iter()
        .filter(|l| l["ev"] == "degraded")
        .filter_map(|l| l["slow_factor"].as_f64())
        .collect();
    assert_eq!(factors, [40.0, 1.0], "w2's step factor, set and healed");
    let (s, v) = status_of(&r, "Routing");
    assert_eq!(s, Status::NotEvaluated, "slow removes no endpoint: {v}");
    assert!(
        r.judgement.findings.is_empty(),
        "{:#?}",
        r.judgement.findings
    );

    let r = run(slow("soft-timeout"), "slow-soft").await;
    let (s, v) = status_of(&r, "Request-Fate");
    assert_eq!(s, Status::Fail, "{v}");
    assert!(
        r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::TwoWriters),
        "{:#?}",
        r.judgement.findings
    );
}

async fn get(url: &str, limit: Duration) -> Option<u16> {
    let r = tokio::time::timeout(limit, http().get(url).send()).await;
    match r {
        Ok(Ok(resp)) => Some(resp.status().as_u16()),
        _ => None,
    }
}

async fn metric(url: &str, name: &str) -> Option<f64> {
    let text = http()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The worker's side of `gpu_lost`: an in-flight stream ends with vLLM's engine error
/// and `[DONE]`, new requests get 500, `/health` 503, `/metrics` is served; the restart
/// brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_fails_its_streams_and_new_requests_while_the_process_serves_metrics() {
    let w = worker(
        "w1",
        json!({"tensor_parallel_size": 2, "decode_step": "20ms"}),
        None,
    )
    .await;
    let url = w.url().to_string();
    let u = format!("{url}/v1/chat/completions");
    let h = tokio::spawn(async move {
        stream(
            &u,
            &chat("gpu lost mid stream", 200),
            &[],
            Duration::from_secs(20),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, body) = post_json(&format!("{url}/admin/gpu_lost"), json!({"gpu": 1})).await;
    assert_eq!((st, body["engine"].as_str()), (200, Some("dead")), "{body}");
    let s = h.await.expect("stream");
    assert!(s.done(), "[DONE] after the error: {s:?}");
    let err = s.data().into_iter().find(|v| v.get("error").is_some());
    let err: Value = err.unwrap_or_else(|| panic!("no error event: {s:?}"));
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("EngineCore encountered an issue")),
        "{err}"
    );
    let n = s.content().len();
    assert!(n > 0 && n < 200, "cut mid stream: {n}");
    assert_eq!(
        get(&format!("{url}/health"), Duration::from_secs(2)).await,
        Some(503)
    );
    assert_eq!(
        get(&format!("{url}/metrics"), Duration::from_secs(2)).await,
        Some(200)
    );
    assert_eq!(metric(&url, "haq_sim_engine_dead").await, Some(1.0));
    let r = http()
        .post(format!("{url}/v1/chat/completions"))
        .json(&chat("after", 4))
        .send()
        .await
        .expect("response");
    assert_eq!(r.status().as_u16(), 500);
    let (_, st) = get_json(&format!("{url}/admin/state")).await;
    assert_eq!(
        (st["engine"].as_str(), st["dead_gpu"].as_u64()),
        (Some("dead"), Some(1))
    );
    assert_eq!(st["tensor_parallel_size"], 2);
    // GPU 2 is not in a group of 2.
    let (st, _) = post_json(&format!("{url}/admin/gpu_lost"), json!({"gpu": 2})).await;
    assert_eq!(st, 400);
    let r = http()
        .delete(format!("{url}/admin/gpu_lost"))
        .send()
        .await
        .expect("restore");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        get(&format!("{url}/health"), Duration::from_secs(2)).await,
        Some(200)
    );
    let s = stream(
        &format!("{url}/v1/chat/completions"),
        &chat("after the restart", 4),
        &[],
        Duration::from_secs(20),
    )
    .await;
    assert!(s.done() && s.content().len() == 4, "{s:?}");
    let lines: Vec<Value> = journal(&w.journal());
    assert!(
        lines
            .iter()
            .any(|l| l["ev"] == "engine_dead" && l["gpu"] == 1)
    );
    assert!(lines.iter().any(|l| l["ev"] == "engine_restarted"));
}

/// The worker's side of `gpu_hang`: no step (the deep check gets no answer), sockets
/// accepted; `/health` passes or hangs as declared; the admin API answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_answers_health_as_declared_and_never_the_deep_check() {
    let w = worker("w1", json!({}), None).await;
    let url = w.url().to_string();
    let short = Duration::from_millis(400);
    assert_eq!(
        get(&format!("{url}/health_generate"), Duration::from_secs(5)).await,
        Some(200)
    );
    for (health, want) in [("pass", Some(200)), ("timeout", None)] {
        let (st, b) = post_json(
            &format!("{url}/admin/hang"),
            json!({"on": true, "health": health}),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(get(&format!("{url}/health"), short).await, want, "{health}");
        assert_eq!(get(&format!("{url}/ready"), short).await, want, "{health}");
        assert_eq!(get(&format!("{url}/health_generate"), short).await, None);
        let (st, state) = get_json(&format!("{url}/admin/state")).await;
        assert_eq!((st, state["hang_health"].as_str()), (200, Some(health)));
        post_json(&format!("{url}/admin/hang"), json!({"on": false})).await;
        assert_eq!(
            get(&format!("{url}/health_generate"), Duration::from_secs(5)).await,
            Some(200)
        );
    }
    let (st, _) = post_json(
        &format!("{url}/admin/hang"),
        json!({"on": true, "health": "maybe"}),
    )
    .await;
    assert_eq!(st, 400);
}

fn migrate(policy: &str) -> haq::plan::Plan {
    let policy = format!("target.gateway.policy={policy}");
    let mut sets = vec![
        "phases=[{name: baseline, duration: 2s}, {name: fault, duration: 4s}, {name: degraded, duration: 2s}]",
        "workload.mix.classes[0].output_tokens={uniform: [40, 80]}",
        "workload.mix.classes[0].prompt_tokens={uniform: [50, 200]}",
        "client.max_late=2s",
        &policy,
    ];
    sets.extend(crate::support::LOOSE_SLO);
    crate::support::plan("scenarios/migrate.yaml", &sets)
}

/// Q9: the probe's replica is killed after 8 delivered deltas; `migrate` continues the
/// stream elsewhere from token 8 — one answer, measured; `migrate-lossy` re-sends the
/// output without its last delta and the new engine repeats that token: stitched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_stream_is_token_continuous_and_measured_and_a_lossy_one_fails() {
    use haq::check::fate::Observed;
    let r = run(migrate("migrate"), "migrate").await;
    pass(&r, &["Failure-Domain", "Request-Fate"]);
    let probe = r
        .judgement
        .fate_requests
        .iter()
        .find(|f| f.request.starts_with("probe-"))
        .unwrap_or_else(|| panic!("{:#?}", r.judgement.fate_requests));
    assert_eq!(probe.observed, Observed::Migrated, "{probe:?}");
    assert_eq!(probe.delivered, 120, "the whole answer: {probe:?}");
    let m = probe.migration.as_ref().expect("measured");
    // At least the 8 deltas of the probe point (one more may be on its way then).
    assert!(
        m.delivered >= 8 && m.resumed_at == Some(m.delivered),
        "{m:?}"
    );
    assert_eq!((m.duplicated, m.missing), (0, 0), "{m:?}");
    assert!(m.reprefill_tokens.is_some_and(|t| t > 8), "{m:?}");
    assert!(
        m.reprefill_ms.is_some() && m.itl_after_ms.is_some(),
        "{m:?}"
    );
    let (_, v) = status_of(&r, "Request-Fate");
    assert!(v.contains("migration of probe-"), "{v}");
    valid_report(&r);

    let r = run(migrate("migrate-lossy"), "migrate-lossy").await;
    let f = fails_with(&r, FindingKind::StitchedOutput, "probe-");
    assert!(
        f.detail.contains("1 delivered token(s) sent again"),
        "{f:?}"
    );
}

/// Request-Fate FAILs with a `kind` finding on a request whose id starts with `id`.
fn fails_with<'r>(
    r: &'r haq::RunResult,
    kind: FindingKind,
    id: &str,
) -> &'r haq::check::fate::Finding {
    let (s, v) = status_of(r, "Request-Fate");
    assert_eq!(s, Status::Fail, "{v}");
    r.judgement
        .findings
        .iter()
        .find(|f| f.kind == kind && f.request.starts_with(id))
        .unwrap_or_else(|| panic!("no {kind:?}: {:#?}", r.judgement.findings))
}

fn truth(corrupt: bool) -> haq::plan::Plan {
    let corrupt = format!("target.engine.corrupt_prefix_cache={corrupt}");
    short(&[
        "workload.cache_truth={every: 3, prompts: 2}",
        "faults[0].at.offset=300ms",
        "faults[0].when={in_flight: 1}",
        &corrupt,
    ])
}

/// Cache truth (M6): identical prompts planted at temperature 0 across the replicas,
/// the phases and a kill get one answer each on the reference; an engine whose
/// prefix cache corrupts a hit answers a repeat differently: `cache_divergence`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_identical_prompts_get_one_answer_unless_the_prefix_cache_is_corrupt() {
    let r = run(truth(false), "cache-truth").await;
    pass(&r, &["Request-Fate"]);
    let (_, v) = status_of(&r, "Request-Fate");
    assert!(v.contains("M6: ") && !v.contains("M6: 0 answers"), "{v}");

    let r = run(truth(true), "cache-corrupt").await;
    let f = fails_with(&r, FindingKind::CacheDivergence, "r");
    assert!(f.detail.contains("answered differently"), "{f:?}");
}
