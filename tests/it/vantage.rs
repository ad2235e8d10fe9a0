//! Verdicts from haq's own vantage points where no gateway journal exists (issue 21
//! item 9): two sim workers, each behind haq's proxy (a `url` target whose replicas
//! declare `listen`), in front of them a small independent test gateway
//! (`testgw`: no journal, forwards `x-request-id`, relays no attribution header).
//! What the gateway did is read from the proxy's upstream requests and the client's
//! trace alone:
//! - Overload: a gateway that retries every failure up to 5 times with no budget
//!   FAILs on the retry amplification haq's proxy counted; a budget of 1 PASSes;
//! - Maintenance: a gateway that keeps routing to a replica drained by haq's process
//!   backend (SIGTERM) FAILs; one that takes it out of rotation PASSes;
//! - Request-Fate: 30 % of the requests leave after 2 deltas; a gateway that keeps
//!   reading the upstream after its client left FAILs (`upstream_not_cancelled`), one
//!   that cancels it PASSes.

use haq::RunResult;
use haq::check::Status;
use haq::check::fate::FindingKind;
use serde_json::json;

use crate::simkit::{Proc, free_port, worker_in};
use crate::support::{plan_text, run, scratch, verdict};
use crate::testgw::{self, Policy};

/// Two sim workers `a` and `b` (engine settings `engine`), the proxy listen ports the
/// gateway's upstreams point at, and the test gateway.
struct Bed {
    a: Proc,
    b: Proc,
    listens: [u16; 2],
    gw: testgw::TestGw,
}

async fn bed(name: &str, engine: serde_json::Value, policy: Policy) -> Bed {
    let dir = scratch(name);
    let a = worker_in(&dir, "a", engine.clone(), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", engine, None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let ups: Vec<String> = listens.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let gw = testgw::start(&ups, policy).await;
    Bed { a, b, listens, gw }
}

impl Bed {
    /// The scenario: the gateway, both replicas behind haq's proxy (with their pids,
    /// for the process backend), `rest` after it.
    fn scenario(&self, rest: &str) -> String {
        let up = |p: &Proc| p.url().trim_start_matches("http://").to_string();
        format!(
            r#"name: vantage
target:
  kind: url
  url: {gw}
  replicas:
    - {{name: a, upstream: "{ua}", listen: "127.0.0.1:{la}", process: {{pid: {pa}, ready_path: /ready}}}}
    - {{name: b, upstream: "{ub}", listen: "127.0.0.1:{lb}", process: {{pid: {pb}, ready_path: /ready}}}}
client: {{max_late: 3s}}
{rest}"#,
            gw = self.gw.url,
            ua = up(&self.a),
            ub = up(&self.b),
            la = self.listens[0],
            lb = self.listens[1],
            pa = self.a.p.pid,
            pb = self.b.p.pid,
        )
    }
}

/// The run had no gateway journal: everything came from haq's own vantage points.
fn no_journal(r: &RunResult) {
    assert!(r.judgement.facts.gateway.is_none());
    assert!(!r.run_dir.join("gateway.jsonl").exists());
    assert!(
        r.judgement.facts.has_proxy,
        "haq's proxy saw the upstream requests"
    );
}

/// An overload phase in which one request in about seven is one the workers refuse
/// every time (its prompt is longer than their 512-token context): a failure a
/// naive gateway retries.
async fn overload_run(policy: Policy, name: &str) -> RunResult {
    let bed = bed(name, json!({"max_model_len": 512}), policy).await;
    let text = bed.scenario(
        r#"workload:
  seed: 3
  mix:
    classes:
      - {name: chat, weight: 6, prompt_tokens: 60, output_tokens: 16}
      - {name: too-long, weight: 1, prompt_tokens: 700, output_tokens: 16}
  arrival: {process: constant, rate: 4/s}
protected_load: 4/s
slo: {ttft_p95: 10s, itl_p95: 2s, e2e_p95: 60s, error_rate_max: 40%}
phases:
  - {name: baseline, duration: 2s}
  - {name: overload, load: 2, duration: 5s}
faults: []
"#,
    );
    let r = run(plan_text(&text, &[]), name).await;
    no_journal(&r);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_retries_without_a_budget_fails_overload_from_the_proxy() {
    let naive = Policy {
        retries: 5,
        sticky: true,
        ..Policy::default()
    };
    let r = overload_run(naive, "vantage-overload-naive").await;
    let v = verdict(&r, "Overload");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.summary.contains(
            "upstream requests per client request at haq's proxy (bound 1.25): a retry cascade"
        ),
        "{}",
        v.summary
    );
    // A budget of one retry per request keeps it within the bound.
    let budget = Policy {
        retries: 1,
        sticky: true,
        ..Policy::default()
    };
    let r = overload_run(budget, "vantage-overload-budget").await;
    let v = verdict(&r, "Overload");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("haq's proxy forwarded") && e.contains("per request, bound 1.25")),
        "{:?}",
        v.evidence
    );
}

/// `a` drained by haq's process backend (SIGTERM) 1 s into the fault phase, with
/// 2-second streams in flight on it.
async fn drain_run(policy: Policy, name: &str) -> RunResult {
    let bed = bed(name, json!({"decode_step": "20ms"}), policy).await;
    let text = bed.scenario(
        r#"workload:
  seed: 5
  mix:
    classes: [{name: chat, prompt_tokens: 60, output_tokens: 100}]
  arrival: {process: constant, rate: 4/s}
protected_load: 4/s
slo: {ttft_p95: 10s, itl_p95: 2s, e2e_p95: 60s}
phases:
  - {name: baseline, duration: 2s}
  - {name: fault, duration: 5s}
  - {name: degraded, duration: 2s}
faults:
  - {name: drain-a, domain: drain, action: drain, target: {replica: a}, at: {phase: fault, offset: 1s}}
"#,
    );
    let r = run(plan_text(&text, &[]), name).await;
    no_journal(&r);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_keeps_routing_to_a_draining_replica_fails_maintenance() {
    // Round robin, no readiness checks, the draining replica's 503 handed on.
    let r = drain_run(Policy::default(), "vantage-drain-keeps").await;
    let v = verdict(&r, "Maintenance");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(
        v.summary.contains("the drain reached clients")
            && v.summary.contains("routed to the draining a"),
        "{}",
        v.summary
    );
    // Readiness checks every 100 ms and one retry on the other upstream.
    let careful = Policy {
        retries: 1,
        health: Some(std::time::Duration::from_millis(100)),
        ..Policy::default()
    };
    let r = drain_run(careful, "vantage-drain-careful").await;
    let v = verdict(&r, "Maintenance");
    assert_eq!(v.status, Status::Pass, "{v:?}");
}

/// The requests flagged `upstream_not_cancelled`.
fn not_cancelled(r: &RunResult) -> Vec<&str> {
    r.judgement
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::UpstreamNotCancelled)
        .map(|f| f.request.as_str())
        .collect()
}

/// One phase of `secs` s at `rate`/s of 100-delta streams whose class leaves as
/// `abandon` says (stays to the end without), judged with `evidence.cancel_grace:
/// grace`; no fault.
fn leaving(seed: u32, abandon: Option<&str>, rate: u32, grace: &str, secs: u32) -> String {
    let abandon = abandon
        .map(|a| format!(", abandon: {a}"))
        .unwrap_or_default();
    format!(
        r#"workload:
  seed: {seed}
  mix:
    classes:
      - {{name: chat, prompt_tokens: 60, output_tokens: 100{abandon}}}
  arrival: {{process: constant, rate: {rate}/s}}
protected_load: {rate}/s
slo: {{ttft_p95: 10s, itl_p95: 2s, e2e_p95: 60s}}
evidence: {{cancel_grace: {grace}}}
phases:
  - {{name: baseline, duration: {secs}s}}
faults: []
"#
    )
}

/// 30 % of the requests leave after 2 deltas of 100-delta streams (2 s each): the
/// upstream runs on for about 2 s after its client left, unless cancelled.
async fn abandon_run(policy: Policy, name: &str) -> RunResult {
    let bed = bed(name, json!({"decode_step": "20ms"}), policy).await;
    let text = bed.scenario(&leaving(
        11,
        Some("{share: 30%, after_deltas: 2}"),
        4,
        "500ms",
        4,
    ));
    let r = run(plan_text(&text, &[]), name).await;
    no_journal(&r);
    let left = r
        .judgement
        .facts
        .requests
        .iter()
        .filter(|q| q.outcome == haq::trace::Outcome::Abandoned)
        .count();
    assert!(left >= 2, "{left} clients left");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_does_not_cancel_the_upstream_when_the_client_leaves_fails_request_fate() {
    let keeps = Policy {
        cancel: false,
        ..Policy::default()
    };
    let r = abandon_run(keeps, "vantage-leave-keeps").await;
    let v = verdict(&r, "Request-Fate");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    let f = r
        .judgement
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::UpstreamNotCancelled)
        .unwrap_or_else(|| panic!("no upstream_not_cancelled: {v:?}"));
    assert!(
        f.detail.contains("after the client went away") && f.detail.contains("(abandoned)"),
        "{}",
        f.detail
    );
    let r = abandon_run(Policy::default(), "vantage-leave-cancels").await;
    let v = verdict(&r, "Request-Fate");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    assert!(
        v.summary.contains("whose client left early"),
        "{}",
        v.summary
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_keeps_observing_for_the_cancel_grace_after_the_last_client_left() {
    // Every client leaves after its first delta, so the load ends as soon as the
    // last one leaves; the gateway reads every upstream to its 2-second end. haq
    // stops its proxies only once the grace has passed: the last request's upstream
    // shows still running then, as every other's does.
    let keeps = Policy {
        cancel: false,
        ..Policy::default()
    };
    let bed = bed("vantage-leave-last", json!({"decode_step": "20ms"}), keeps).await;
    let text = bed.scenario(&leaving(
        2,
        Some("{share: 100%, after_deltas: 1}"),
        2,
        "1s",
        2,
    ));
    let r = run(plan_text(&text, &[]), "vantage-leave-last").await;
    no_journal(&r);
    let reqs = &r.judgement.facts.requests;
    assert!(reqs.len() >= 3, "{} requests", reqs.len());
    assert!(
        reqs.iter()
            .all(|q| q.outcome == haq::trace::Outcome::Abandoned)
    );
    let last = reqs.iter().max_by_key(|q| q.end).expect("a request");
    let flagged = not_cancelled(&r);
    assert!(
        flagged.contains(&last.id.as_str()),
        "the last leaver {} is not flagged: {:#?}",
        last.id,
        r.judgement.findings
    );
    assert_eq!(flagged.len(), reqs.len(), "{flagged:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_keeps_observing_for_the_cancel_grace_after_haqs_own_end_of_load_cancel() {
    // 2-second streams sent through a 2-second phase with a 300 ms drain timeout: the
    // streams sent in the phase's last ~1.7 s are still open when haq stops them
    // itself (`cancelled`). A gateway that does not cancel reads each upstream on to
    // its end, past the 500 ms grace for those sent last; haq's proxy observes until
    // the grace has passed after its own cancels, so the last one stopped is flagged.
    let keeps = Policy {
        cancel: false,
        ..Policy::default()
    };
    let end_of_load = |text: String| {
        text.replace(
            "client: {max_late: 3s}",
            "client: {max_late: 3s, drain_timeout: 300ms}",
        )
    };
    let b = bed("vantage-stop-keeps", json!({"decode_step": "20ms"}), keeps).await;
    let text = end_of_load(b.scenario(&leaving(5, None, 4, "500ms", 2)));
    let r = run(plan_text(&text, &[]), "vantage-stop-keeps").await;
    no_journal(&r);
    let stopped: Vec<_> = r
        .judgement
        .facts
        .requests
        .iter()
        .filter(|q| q.outcome == haq::trace::Outcome::Cancelled)
        .collect();
    assert!(stopped.len() >= 3, "{} stopped by haq", stopped.len());
    let flagged = not_cancelled(&r);
    // Those sent last had more than the grace left to run: the last of them most.
    let last = stopped
        .iter()
        .max_by_key(|q| q.end)
        .expect("a stopped request");
    assert!(
        flagged.contains(&last.id.as_str()) && flagged.len() >= 2,
        "the last request stopped by haq, {}, is not flagged: {:#?}",
        last.id,
        r.judgement.findings
    );
    assert_eq!(verdict(&r, "Request-Fate").status, Status::Fail);

    // The same load through a gateway that cancels: the upstreams end with the client.
    let b = bed(
        "vantage-stop-cancels",
        json!({"decode_step": "20ms"}),
        Policy::default(),
    )
    .await;
    let text = end_of_load(b.scenario(&leaving(5, None, 4, "500ms", 2)));
    let r = run(plan_text(&text, &[]), "vantage-stop-cancels").await;
    no_journal(&r);
    assert!(
        r.judgement
            .facts
            .requests
            .iter()
            .any(|q| q.outcome == haq::trace::Outcome::Cancelled)
    );
    assert!(
        !r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::UpstreamNotCancelled),
        "{:#?}",
        r.judgement.findings
    );
}
