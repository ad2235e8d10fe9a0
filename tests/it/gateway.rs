//! The sim gateway end to end on real worker processes: the reference policy's request
//! fate at each token-loop fault point (M9), leases and fencing (M5), cancel on client
//! disconnect (M4), drain (Q7), shedding (Q10), retry budget (M8), and every flawed
//! policy's flaw visible on the wire.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use haq::target::sim::SimCluster;
use haq::wire::journal::{FenceHow, GatewayEntry, Stamped, ToolExecution};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::simkit::*;
use crate::support::{haq_bin, scratch};

const LIMIT: Duration = Duration::from_secs(20);

struct Sim {
    c: SimCluster,
    dir: PathBuf,
}

impl Sim {
    async fn start(name: &str, replicas: u32, gateway: Value, engine: Value) -> Sim {
        let dir = scratch(name);
        let mut e = json!({"startup": "50ms", "decode_step": "5ms"});
        for (k, v) in engine.as_object().into_iter().flatten() {
            e[k] = v.clone();
        }
        // A health check may take 2 s before it fails: on a busy machine a slow `/ready`
        // must not take a worker out of rotation (and ignore `x-haq-route`) by accident.
        let mut g = json!({"health_interval": "100ms", "health_timeout": "2s"});
        for (k, v) in gateway.as_object().into_iter().flatten() {
            g[k] = v.clone();
        }
        let target: haq::scenario::Target = serde_json::from_value(json!({
            "kind": "sim", "replicas": replicas, "gateway": g, "engine": e,
            "tools": {"exec_time": "5ms"}}))
        .expect("target");
        let c = SimCluster::start(&target, &haq_bin(), &dir)
            .await
            .expect("cluster");
        Sim { c, dir }
    }
    fn chat_url(&self) -> String {
        format!("{}/chat/completions", self.c.api_url)
    }
    fn worker(&self, name: &str) -> String {
        self.c
            .info
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.url.clone())
            .expect("worker")
    }
    async fn arm(&self, worker: &str, spec: Value) {
        let (s, r) = post_json(&format!("{}/admin/faults", self.worker(worker)), spec).await;
        assert_eq!(s, 200, "{r}");
    }
    async fn signal(&self, worker: &str, sig: Signal) {
        let p = self.c.worker(worker).expect("worker");
        p.lock().await.signal(sig).expect("signal");
    }
    async fn req(&self, rid: &str, body: &Value, extra: &[(&str, &str)]) -> Seen {
        let mut h = vec![("x-request-id", rid)];
        h.extend_from_slice(extra);
        stream(&self.chat_url(), body, &h, LIMIT).await
    }
    /// The gateway journal once it holds `ev` for `req` (it is flushed every 50 ms).
    async fn journal_with(&self, what: impl Fn(&GatewayEntry) -> bool) -> Vec<GatewayEntry> {
        let p = self.dir.join("gateway.jsonl");
        let mut out = Vec::new();
        eventually("gateway journal entry", LIMIT, async || {
            out = gw_journal(&p);
            out.iter().any(&what)
        })
        .await;
        out
    }
    /// Holds (or releases) every engine step of `worker`; its HTTP side keeps answering.
    async fn hang(&self, worker: &str, on: bool) {
        let (s, r) = post_json(
            &format!("{}/admin/hang", self.worker(worker)),
            json!({"on": on}),
        )
        .await;
        assert_eq!(s, 200, "{r}");
    }
    /// Waits until the gateway journal has an entry for `rid` that `what` accepts.
    async fn journaled(&self, rid: &str, what: impl Fn(&GatewayEntry) -> bool) {
        self.journal_with(|e| e.req() == Some(rid) && what(e)).await;
    }
    async fn stop(self) {
        self.c.stop().await;
    }
}

fn gw_journal(p: &Path) -> Vec<GatewayEntry> {
    if !p.exists() {
        return Vec::new();
    }
    journal::<Stamped<GatewayEntry>>(p)
        .into_iter()
        .map(|s| s.entry)
        .collect()
}

fn of<'a>(j: &'a [GatewayEntry], rid: &str) -> Vec<&'a GatewayEntry> {
    j.iter().filter(|e| e.req() == Some(rid)).collect()
}

fn ends(rid: &str) -> impl Fn(&GatewayEntry) -> bool {
    let rid = rid.to_string();
    move |e| matches!(e, GatewayEntry::RequestEnd { req, .. } if *req == rid)
}

/// The answer a healthy worker gives to `prompt` (temperature 0).
async fn expected(sim: &Sim, prompt: &str, n: u32) -> Vec<String> {
    let u = format!("{}/v1/chat/completions", sim.worker("w3"));
    stream(&u, &chat(prompt, n), &[], LIMIT).await.content()
}

fn explicit_error(seen: &Seen) -> Option<Value> {
    seen.data().into_iter().find(|v| v["error"].is_object())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_retries_only_before_the_first_delta_and_only_after_fencing() {
    let sim = Sim::start("gw-fate", 3, json!({}), json!({})).await;
    let want = expected(&sim, "the answer", 12).await;

    // M9 case 1: killed during prefill → one complete answer after a retry.
    sim.arm("w1", json!({"point": "prefill", "request_id": "v1"}))
        .await;
    let s = sim
        .req("v1", &chat("the answer", 12), &[("x-haq-route", "w1")])
        .await;
    assert!(s.done(), "{:?}", s.broken);
    assert_eq!(s.content(), want, "exactly one complete answer");
    assert_eq!(s.headers["x-haq-attempt"], "v1/a2");
    assert_ne!(s.headers["x-haq-worker"], "w1");
    let j = sim.journal_with(ends("v1")).await;
    let v1 = of(&j, "v1");
    let fence = v1.iter().position(|e| {
        matches!(
            e,
            GatewayEntry::Fence {
                how: FenceHow::ConfirmedDead,
                ..
            }
        )
    });
    let retry = v1
        .iter()
        .position(|e| matches!(e, GatewayEntry::Retry { .. }));
    let second = v1.iter().position(
        |e| matches!(e, GatewayEntry::AttemptStart { attempt, .. } if attempt == "v1/a2"),
    );
    assert!(
        fence < retry && retry < second && fence.is_some(),
        "fence, then retry: {v1:?}"
    );
    // The same phase journal, queried from the running gateway (M1).
    let gw = sim.c.api_url.trim_end_matches("/v1");
    let (st, q) = get_json(&format!("{gw}/haq/requests/v1")).await;
    assert_eq!(st, 200, "{q}");
    let attempts: Vec<_> = q["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["attempt"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(attempts, ["v1/a1", "v1/a2"], "{q}");
    assert_eq!(q["attempts"][0]["worker"], "w1");
    assert_eq!(q["first_delta"]["attempt"], "v1/a2", "{q}");
    assert_eq!(q["delivered_output_tokens"], 12, "{q}");
    assert_eq!(q["retry_budget"], 1);
    assert_eq!(q["outcome"], "completed");
    assert!(q["model_revision"].is_string(), "{q}");
    assert_eq!(get_json(&format!("{gw}/haq/requests/nope")).await.0, 404);

    // M9 case 2: token computed, event not written (k=0) → retry, no fragment.
    sim.arm(
        "w2",
        json!({"point": "before_event", "k": 0, "request_id": "v2"}),
    )
    .await;
    let s = sim
        .req("v2", &chat("the answer", 12), &[("x-haq-route", "w2")])
        .await;
    assert!(s.done());
    assert_eq!(s.content(), want);
    assert_eq!(s.headers["x-haq-attempt"], "v2/a2");

    // M9 case 3: right after the first delta → explicit error, no second generation.
    sim.arm(
        "w3",
        json!({"point": "after_event", "k": 2, "request_id": "v3"}),
    )
    .await;
    let s = sim
        .req("v3", &chat("the answer", 12), &[("x-haq-route", "w3")])
        .await;
    assert_eq!(s.content(), want[..3].to_vec());
    let e = explicit_error(&s).expect("explicit error event");
    assert_eq!(e["error"]["code"], "upstream_decode_interrupted");
    assert_eq!(e["error"]["request_id"], "v3");
    assert_eq!(e["error"]["partial_output"], true);
    assert_eq!(e["error"]["delivered_output_tokens"], 3);
    assert_eq!(e["error"]["retryable"], false);
    assert!(!s.done());
    let j = sim.journal_with(ends("v3")).await;
    assert!(
        !of(&j, "v3")
            .iter()
            .any(|e| matches!(e, GatewayEntry::AttemptStart { attempt, .. } if attempt == "v3/a2"))
    );
    assert!(of(&j, "v3").iter().any(|e| matches!(
        e,
        GatewayEntry::FirstDelta {
            revision: Some(_),
            ..
        }
    )));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_is_fenced_by_lease_expiry_then_the_stream_ends_explicitly() {
    let sim = Sim::start(
        "gw-frozen",
        2,
        json!({"lease_ttl": "600ms", "health_interval": "100ms"}),
        json!({"decode_step": "10ms"}),
    )
    .await;
    let u = sim.chat_url();
    let h = tokio::spawn(async move {
        stream(
            &u,
            &chat("freeze mid stream", 300),
            &[("x-request-id", "v4"), ("x-haq-route", "w1")],
            LIMIT,
        )
        .await
    });
    sim.journaled("v4", |e| matches!(e, GatewayEntry::FirstDelta { .. }))
        .await;
    sim.signal("w1", Signal::SIGSTOP).await;
    let stopped = std::time::Instant::now();
    let s = h.await.expect("task");
    let took = stopped.elapsed();
    sim.signal("w1", Signal::SIGCONT).await;
    let e = explicit_error(&s).expect("explicit error");
    assert_eq!(e["error"]["code"], "upstream_decode_interrupted");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let j = sim.journal_with(ends("v4")).await;
    assert!(
        j.iter()
            .any(|e| matches!(e, GatewayEntry::LeaseRenewFailed { worker, .. } if worker == "w1"))
    );
    let v4 = of(&j, "v4");
    assert!(
        v4.iter()
            .any(|e| matches!(e, GatewayEntry::CancelSent { .. }))
    );
    assert!(
        v4.iter()
            .any(|e| matches!(e, GatewayEntry::CancelUnconfirmed { .. })),
        "{v4:?}"
    );
    assert!(
        v4.iter().any(|e| matches!(
            e,
            GatewayEntry::Fence {
                how: FenceHow::LeaseExpired,
                ..
            }
        )),
        "{v4:?}"
    );
    sim.stop().await;
}

/// A worker frozen for 1 s mid-stream, shorter than its 1.5 s lease: a renewal fails
/// during the freeze, but the attempt publishes again inside its lease, its renewals
/// resume and the answer completes (slow is not dead, M4). Renewals stopped for good
/// after one failure used to let the lease run out under a stream being served: the
/// client got `upstream_decode_interrupted` for a 500 ms freeze (it::url, under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_for_less_than_its_lease_finishes_the_stream() {
    let sim = Sim::start(
        "gw-short-freeze",
        2,
        json!({"lease_ttl": "1500ms", "health_interval": "100ms"}),
        json!({"decode_step": "10ms"}),
    )
    .await;
    let u = sim.chat_url();
    let h = tokio::spawn(async move {
        stream(
            &u,
            &chat("freeze briefly mid stream", 300),
            &[("x-request-id", "v5"), ("x-haq-route", "w1")],
            LIMIT,
        )
        .await
    });
    sim.journaled("v5", |e| matches!(e, GatewayEntry::FirstDelta { .. }))
        .await;
    sim.signal("w1", Signal::SIGSTOP).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    sim.signal("w1", Signal::SIGCONT).await;
    let s = h.await.expect("task");
    assert!(explicit_error(&s).is_none(), "{s:?}");
    assert_eq!(
        s.events.last().map(|e| e.1.as_str()),
        Some("[DONE]"),
        "{s:?}"
    );
    let j = sim.journal_with(ends("v5")).await;
    assert!(
        j.iter()
            .any(|e| matches!(e, GatewayEntry::LeaseRenewFailed { worker, .. } if worker == "w1")),
        "a renewal failed during the freeze: {j:?}"
    );
    assert!(
        !of(&j, "v5")
            .iter()
            .any(|e| matches!(e, GatewayEntry::Fence { .. })),
        "{j:?}"
    );
    sim.stop().await;
}

fn tool_body() -> Value {
    let mut b = chat("open a ticket for the outage", 40);
    b["tools"] =
        json!([{"type": "function", "function": {"name": "create_ticket", "parameters": {}}}]);
    b
}

async fn tool_runs(policy: &str) -> (Seen, Vec<ToolExecution>) {
    let sim = Sim::start(
        &format!("gw-tools-{policy}"),
        2,
        json!({"policy": policy}),
        json!({}),
    )
    .await;
    sim.arm(
        "w1",
        json!({"point": "after_tool_call", "request_id": "v5"}),
    )
    .await;
    let s = sim.req("v5", &tool_body(), &[("x-haq-route", "w1")]).await;
    let p = sim.dir.join("tools.jsonl");
    let mut log = Vec::new();
    eventually("two tool executions logged", LIMIT, async || {
        log = journal::<Stamped<ToolExecution>>(&p)
            .into_iter()
            .map(|e| e.entry)
            .collect();
        log.len() >= 2
    })
    .await;
    sim.stop().await;
    (s, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_executed_before_a_crash_is_not_executed_again_unless_keys_follow_the_attempt()
{
    // M9 case 5 on the reference: the retry re-sends the same key; deduplicated.
    let (s, log) = tool_runs("reference").await;
    assert!(s.done());
    assert_eq!(s.headers["x-haq-attempt"], "v5/a2");
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        log[0].idempotency_key,
        format!("v5:{}", log[0].tool_call_id)
    );
    assert_eq!(log[0].idempotency_key, log[1].idempotency_key);
    assert_eq!((log[0].deduplicated, log[1].deduplicated), (false, true));
    assert_eq!(log[1].attempt.as_deref(), Some("v5/a2"));

    // FLAW no-tool-idempotency: keys derive from the attempt, the tool runs twice.
    let (s, log) = tool_runs("no-tool-idempotency").await;
    assert!(s.done());
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log.iter().all(|e| !e.deduplicated),
        "executed twice: {log:?}"
    );
    assert_eq!(
        log[0].idempotency_key,
        format!("v5/a1:{}", log[0].tool_call_id)
    );
    assert_ne!(log[0].idempotency_key, log[1].idempotency_key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnect_cancels_the_upstream_and_starts_no_spare() {
    let sim = Sim::start("gw-gone", 2, json!({}), json!({"decode_step": "10ms"})).await;
    let resp = http()
        .post(sim.chat_url())
        .json(&chat("leave early", 300))
        .header("x-request-id", "v6")
        .header("x-haq-route", "w1")
        .send()
        .await
        .expect("head");
    let mut resp = resp;
    let _ = resp.chunk().await;
    drop(resp);
    let j = sim
        .journal_with(|e| matches!(e, GatewayEntry::CancelConfirmed { req, .. } if req == "v6"))
        .await;
    let v6 = of(&j, "v6");
    assert!(
        v6.iter()
            .any(|e| matches!(e, GatewayEntry::ClientGone { .. }))
    );
    assert!(
        v6.iter()
            .any(|e| matches!(e, GatewayEntry::CancelSent { .. }))
    );
    assert!(
        !v6.iter()
            .any(|e| matches!(e, GatewayEntry::AttemptStart { attempt, .. } if attempt == "v6/a2"))
    );
    // The worker freed the slot.
    let w1 = sim.worker("w1");
    eventually("worker slot freed", LIMIT, async || {
        get_json(&format!("{w1}/admin/state")).await.1["running"] == 0
    })
    .await;
    sim.stop().await;
}

async fn drain_run(policy: &str) -> (Vec<Seen>, Seen, Vec<GatewayEntry>) {
    let sim = Sim::start(
        &format!("gw-drain-{policy}"),
        2,
        json!({"policy": policy}),
        json!({"decode_step": "10ms"}),
    )
    .await;
    let mut hs = Vec::new();
    for k in 0..2 {
        let u = sim.chat_url();
        let rid = format!("d{k}");
        hs.push(tokio::spawn(async move {
            stream(
                &u,
                &chat("drain", 200),
                &[("x-request-id", &rid), ("x-haq-route", "w1")],
                LIMIT,
            )
            .await
        }));
    }
    // Both streams have delivered a delta; the worker then holds its steps while it
    // drains, so they are in flight when the drain starts however slow the machine.
    for rid in ["d0", "d1"] {
        sim.journaled(rid, |e| matches!(e, GatewayEntry::FirstDelta { .. }))
            .await;
    }
    sim.hang("w1", true).await;
    sim.signal("w1", Signal::SIGTERM).await;
    sim.journal_with(
        |e| matches!(e, GatewayEntry::UpstreamRemoved { worker, .. } if worker == "w1"),
    )
    .await;
    let after = sim.req("late", &chat("after drain", 4), &[]).await;
    // Released (unless the worker already exited: a drain with nothing left to finish).
    let _ = http()
        .post(format!("{}/admin/hang", sim.worker("w1")))
        .json(&json!({"on": false}))
        .send()
        .await;
    let mut inflight = Vec::new();
    for h in hs {
        inflight.push(h.await.expect("task"));
    }
    let j = sim.journal_with(ends("d1")).await;
    sim.stop().await;
    (inflight, after, j)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_drain_lets_streams_finish_and_hard_drain_cuts_them() {
    let (inflight, after, j) = drain_run("reference").await;
    for s in &inflight {
        assert!(
            s.done() && s.content().len() == 200,
            "finished: {:?}",
            s.broken
        );
        assert_eq!(s.headers["x-haq-worker"], "w1");
    }
    assert_eq!(
        after.headers["x-haq-worker"], "w2",
        "new traffic avoids the draining worker"
    );
    assert!(j.iter().any(|e| matches!(e, GatewayEntry::UpstreamRemoved { worker, cause: haq::wire::journal::RemovalCause::Draining, .. } if worker == "w1")));

    // FLAW hard-drain: the draining worker's in-flight streams are cut.
    let (inflight, _, j) = drain_run("hard-drain").await;
    for s in &inflight {
        assert!(!s.done(), "cut, not finished");
        let e = explicit_error(s).expect("explicit error");
        assert_eq!(e["error"]["code"], "upstream_decode_interrupted");
    }
    assert!(
        j.iter()
            .any(|e| matches!(e, GatewayEntry::HardDrainAbort { .. }))
    );
}

async fn overload(policy: &str) -> Vec<(String, u16, Option<String>)> {
    let sim = Sim::start(
        &format!("gw-shed-{policy}"),
        1,
        json!({"policy": policy, "max_inflight_per_worker": 1, "queue_limit": 2, "best_effort_queue_limit": 1}),
        json!({}),
    )
    .await;
    // The worker holds its steps while the requests arrive, and each is sent once the
    // gateway has admitted, queued or shed the one before: the queue is exactly what
    // this order makes it, however slow the machine.
    sim.hang("w1", true).await;
    let order = [
        ("p1", "protected"),
        ("b1", "best_effort"),
        ("p2", "protected"),
        ("p3", "protected"),
        ("p4", "protected"),
    ];
    let mut hs = Vec::new();
    for (rid, prio) in order {
        let u = sim.chat_url();
        hs.push(tokio::spawn(async move {
            let s = stream(
                &u,
                &chat("load", 10),
                &[("x-request-id", rid), ("x-haq-priority", prio)],
                LIMIT,
            )
            .await;
            let ra = s
                .headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            (rid.to_string(), s.status, ra)
        }));
        sim.journaled(rid, |e| {
            matches!(
                e,
                GatewayEntry::AttemptStart { .. }
                    | GatewayEntry::Queued { .. }
                    | GatewayEntry::Shed { .. }
            )
        })
        .await;
    }
    sim.hang("w1", false).await;
    let mut out = Vec::new();
    for h in hs {
        out.push(h.await.expect("task"));
    }
    sim.stop().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_sheds_best_effort_first_with_429_and_no_shedding_queues_everything() {
    // One slot, queue of 2 (1 for best-effort): p1 runs; b1 queues; p2 queues ahead of
    // it; p3 evicts b1; p4 finds the queue full.
    let got = overload("reference").await;
    let status: Vec<_> = got.iter().map(|(r, s, _)| (r.as_str(), *s)).collect();
    assert_eq!(
        status,
        vec![
            ("p1", 200),
            ("b1", 429),
            ("p2", 200),
            ("p3", 200),
            ("p4", 429)
        ]
    );
    assert!(
        got.iter()
            .filter(|g| g.1 == 429)
            .all(|g| g.2.as_deref() == Some("1")),
        "Retry-After: {got:?}"
    );

    // FLAW no-shedding: everything queues, nothing is refused.
    let got = overload("no-shedding").await;
    assert!(got.iter().all(|g| g.1 == 200), "{got:?}");
}

fn cids(s: &Seen) -> BTreeSet<String> {
    s.data()
        .iter()
        .filter(|v| v["choices"][0]["delta"]["content"].is_string())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect()
}

async fn slow_run(policy: &str) -> (Seen, Vec<GatewayEntry>) {
    let sim = Sim::start(
        &format!("gw-slow-{policy}"),
        2,
        json!({"policy": policy, "soft_timeout": "300ms"}),
        json!({}),
    )
    .await;
    sim.hang("w1", true).await;
    let u = sim.chat_url();
    let h = tokio::spawn(async move {
        stream(
            &u,
            &chat("slow is not dead", 20),
            &[("x-request-id", "v8"), ("x-haq-route", "w1")],
            LIMIT,
        )
        .await
    });
    // Held until the gateway has acted on the silence (journaled `slow_upstream`, or the
    // flawed spare attempt), then a while longer, then released.
    sim.journaled("v8", |e| {
        matches!(
            e,
            GatewayEntry::SlowUpstream { .. } | GatewayEntry::SoftTimeoutFailover { .. }
        )
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    sim.hang("w1", false).await;
    let seen = h.await.expect("task");
    let j = sim.journal_with(ends("v8")).await;
    sim.stop().await;
    (seen, j)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_is_not_dead_and_soft_timeout_failover_publishes_two_attempts() {
    let (s, j) = slow_run("reference").await;
    assert!(s.done());
    assert_eq!(cids(&s).len(), 1, "one writer");
    assert_eq!(s.content().len(), 20);
    assert!(
        of(&j, "v8")
            .iter()
            .any(|e| matches!(e, GatewayEntry::SlowUpstream { .. }))
    );

    // FLAW soft-timeout: a spare attempt starts unfenced; both publish into one stream.
    let (s, j) = slow_run("soft-timeout").await;
    assert_eq!(cids(&s).len(), 2, "two writers: {:?}", cids(&s));
    assert!(s.content().len() > 20, "duplicated output");
    assert!(
        of(&j, "v8")
            .iter()
            .any(|e| matches!(e, GatewayEntry::SoftTimeoutFailover { .. }))
    );
}

/// Q6: a replacement that listens but is still loading its model (`/ready` 503
/// `starting`) gets no traffic, even when asked for by name; once ready, it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_replacement_gets_traffic_only_once_ready() {
    let sim = Sim::start("gw-cold", 2, json!({}), json!({"cold_start": "4s"})).await;
    sim.signal("w1", Signal::SIGKILL).await;
    let old = sim.c.worker("w1").expect("w1");
    old.lock().await.wait_exit(LIMIT).await.expect("w1 exits");
    let mut fresh = sim
        .c
        .spawn_worker("w1", &sim.c.target.engine.for_replacement())
        .await
        .expect("replacement");
    let gw = sim.c.api_url.trim_end_matches("/v1").to_string();
    let w1_state = async || {
        let (_, st) = get_json(&format!("{gw}/haq/status")).await;
        st["upstreams"]
            .as_array()
            .and_then(|u| u.iter().find(|u| u["name"] == "w1"))
            .map(|u| u["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    eventually("the gateway sees w1 starting", LIMIT, async || {
        w1_state().await == "starting"
    })
    .await;
    let ready_url = format!("{}/ready", sim.worker("w1"));
    let mut checked = 0;
    for k in 0..3 {
        let s = sim
            .req(&format!("s{k}"), &chat("cold", 4), &[("x-haq-route", "w1")])
            .await;
        // Only a request that ended while w1 still loads proves anything.
        if get_json(&ready_url).await.1["status"] == "starting" {
            assert!(s.done());
            assert_eq!(
                s.headers["x-haq-worker"], "w2",
                "not routed to a starting worker"
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "no request ended during the 4 s model load");
    let p = sim.dir.join("gateway.jsonl");
    eventually("w1 back in rotation after its removal", LIMIT, async || {
        let j = gw_journal(&p);
        let removed = j.iter().rposition(
            |e| matches!(e, GatewayEntry::UpstreamRemoved { worker, .. } if worker == "w1"),
        );
        removed.is_some_and(|r| {
            j[r..]
                .iter()
                .any(|e| matches!(e, GatewayEntry::UpstreamReady { worker, .. } if worker == "w1"))
        })
    })
    .await;
    let s = sim
        .req("s-ready", &chat("warm", 4), &[("x-haq-route", "w1")])
        .await;
    assert_eq!(s.headers["x-haq-worker"], "w1", "ready: back in rotation");
    fresh.kill_and_reap().await;
    sim.stop().await;
}

async fn dead_worker_run(policy: &str) -> (Vec<Seen>, Vec<GatewayEntry>) {
    let sim = Sim::start(
        &format!("gw-dead-{policy}"),
        2,
        json!({"policy": policy}),
        json!({}),
    )
    .await;
    sim.signal("w1", Signal::SIGKILL).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut seen = Vec::new();
    for k in 0..6 {
        seen.push(
            sim.req(&format!("n{k}"), &chat("after the crash", 4), &[])
                .await,
        );
    }
    let j = sim.journal_with(ends("n5")).await;
    sim.stop().await;
    (seen, j)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_worker_leaves_rotation_unless_health_checks_are_off() {
    let attempts_on_w1 = |j: &[GatewayEntry]| {
        j.iter()
            .filter(|e| matches!(e, GatewayEntry::AttemptStart { worker, .. } if worker == "w1"))
            .count()
    };
    let (seen, j) = dead_worker_run("reference").await;
    assert!(seen.iter().all(|s| s.done()));
    assert!(
        attempts_on_w1(&j) <= 1,
        "at most the attempt that found it dead"
    );
    assert!(
        j.iter()
            .any(|e| matches!(e, GatewayEntry::UpstreamRemoved { worker, .. } if worker == "w1"))
    );

    // FLAW no-health-check: the dead worker stays in rotation; requests keep hitting it.
    let (seen, j) = dead_worker_run("no-health-check").await;
    assert!(attempts_on_w1(&j) >= 2, "kept routing to the dead worker");
    assert!(
        !j.iter()
            .any(|e| matches!(e, GatewayEntry::UpstreamRemoved { .. }))
    );
    assert!(seen.iter().any(|s| {
        s.headers
            .get("x-haq-attempt")
            .is_some_and(|a| a.to_str().is_ok_and(|a| a.ends_with("/a2")))
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_budgeted_and_priced() {
    let sim = Sim::start("gw-budget", 2, json!({"retry_budget": 0}), json!({})).await;
    sim.arm("w1", json!({"point": "prefill", "request_id": "b1"}))
        .await;
    let r = http()
        .post(sim.chat_url())
        .json(&chat("no budget", 4))
        .header("x-request-id", "b1")
        .header("x-haq-route", "w1")
        .send()
        .await
        .expect("response");
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let e: Value = r.json().await.expect("json");
    assert_eq!(e["error"]["code"], "retry_budget_exhausted");
    sim.stop().await;

    let sim = Sim::start(
        "gw-cost",
        2,
        json!({"retry_max_prompt_tokens": 3}),
        json!({}),
    )
    .await;
    sim.arm("w1", json!({"point": "prefill", "request_id": "b2"}))
        .await;
    let r = http()
        .post(sim.chat_url())
        .json(&chat("a prompt of six words here", 4))
        .header("x-request-id", "b2")
        .header("x-haq-route", "w1")
        .send()
        .await
        .expect("response");
    assert_eq!(r.status(), 503);
    let e: Value = r.json().await.expect("json");
    assert_eq!(e["error"]["code"], "retry_cost_exceeded");
    let j = sim.journal_with(ends("b2")).await;
    assert!(
        of(&j, "b2")
            .iter()
            .any(|e| matches!(e, GatewayEntry::RetryDenied { .. }))
    );
    sim.stop().await;
}

async fn cut_after_delta(policy: &str) -> (Seen, Vec<String>) {
    let sim = Sim::start(
        &format!("gw-cut-{policy}"),
        3,
        json!({"policy": policy}),
        json!({}),
    )
    .await;
    let want = expected(&sim, "the answer", 10).await;
    sim.arm(
        "w1",
        json!({"point": "after_event", "k": 2, "request_id": "c1"}),
    )
    .await;
    let s = sim
        .req("c1", &chat("the answer", 10), &[("x-haq-route", "w1")])
        .await;
    sim.stop().await;
    (s, want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_retry_stitches_and_silent_truncate_ends_clean_after_a_cut() {
    // FLAW naive-retry: a second attempt after three delivered deltas; its answer is
    // stitched on: two chunk ids, the text restarts.
    let (s, want) = cut_after_delta("naive-retry").await;
    assert_eq!(cids(&s).len(), 2, "two writers");
    let mut stitched = want[..3].to_vec();
    stitched.extend(want.iter().cloned());
    assert_eq!(s.content(), stitched);
    assert!(s.done() && explicit_error(&s).is_none());

    // FLAW silent-truncate: three deltas, then a clean [DONE] with no finish_reason.
    let (s, want) = cut_after_delta("silent-truncate").await;
    assert_eq!(s.content(), want[..3].to_vec());
    assert!(s.done() && explicit_error(&s).is_none());
    assert!(
        !s.data()
            .iter()
            .any(|v| v["choices"][0]["finish_reason"].is_string())
    );
}

/// Python with the official `openai` package: `$HAQ_PYTHON`, else `python3`, if it
/// imports `openai` (.ci/run installs it in a venv and sets HAQ_REQUIRE_OPENAI_SDK).
fn python_with_openai() -> Option<String> {
    let python = std::env::var("HAQ_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("HAQ_REQUIRE_OPENAI_SDK").is_none(),
            "HAQ_REQUIRE_OPENAI_SDK is set but {python} cannot import openai"
        );
        crate::support::skipped(
            "gateway::the_openai_python_sdk_streams_from_the_gateway",
            &format!("{python} cannot import openai (pip install openai; HAQ_PYTHON=...)"),
        );
    }
    ok.then_some(python)
}

/// The official OpenAI Python SDK streams from the gateway unchanged:
/// examples/openai_sdk_stream.py (models, a streamed chat with usage, the gateway's
/// worker and attempt headers, a non-streaming completion) exits 0 against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_streams_from_the_gateway() {
    let Some(python) = python_with_openai() else {
        return;
    };
    let sim = Sim::start("gw-sdk", 2, json!({}), json!({})).await;
    let script = crate::support::root().join("examples/openai_sdk_stream.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&sim.c.api_url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the SDK example ends within 60 s")
        .expect("python runs");
    sim.stop().await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{python} {}: {stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("finish_reason=length"), "{stdout}");
}

/// `haq sim up` as a user runs it: prints its URLs, serves, and Ctrl-C stops every
/// process it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_up_serves_until_ctrl_c_then_stops_every_process() {
    use tokio::io::AsyncBufReadExt;
    let dir = scratch("sim-up");
    let mut child = tokio::process::Command::new(haq_bin())
        .args([
            "sim",
            "up",
            "--replicas",
            "2",
            "--policy",
            "reference",
            "--dir",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq sim up");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut out = Vec::new();
    while let Ok(Ok(Some(l))) = tokio::time::timeout(LIMIT, lines.next_line()).await {
        let done = l.starts_with("Ctrl-C");
        out.push(l);
        if done {
            break;
        }
    }
    let field = |prefix: &str| {
        out.iter()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no {prefix} line in {out:?}"))
    };
    let api = field("gateway");
    let pid: i32 = out
        .iter()
        .find(|l| l.starts_with("w1"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("w1 pid");
    let s = stream(
        &format!("{api}/chat/completions"),
        &chat("hello", 3),
        &[],
        LIMIT,
    )
    .await;
    assert!(s.done() && s.content().len() == 3);
    let haq = nix::unistd::Pid::from_raw(child.id().expect("pid") as i32);
    nix::sys::signal::kill(haq, Signal::SIGINT).expect("SIGINT");
    let st = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(st.success(), "{st}");
    let w1 = nix::unistd::Pid::from_raw(pid);
    eventually("worker w1 gone", LIMIT, async || {
        nix::sys::signal::kill(w1, None).is_err()
    })
    .await;
}

/// A worker that answers every chat request whole — two deltas, the finish, the usage
/// report and `[DONE]` — then drops its connection before the chunked body's end, as a
/// worker killed (or drained and exiting) at that moment does; `/ready` and `/health`
/// answer 200.
async fn done_then_dropped() -> std::net::SocketAddr {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut have = Vec::new();
                while let Some((head, _)) =
                    crate::support::read_request_as_sent(&mut s, &mut have).await
                {
                    if !head.starts_with("POST") {
                        let ok = r#"{"status":"ready"}"#;
                        let a = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ok}",
                            ok.len()
                        );
                        if s.write_all(a.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let ev = |d: &str| format!("data: {d}\n\n");
                    let body: String = [
                        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":" one"}}]}"#,
                        r#"{"id":"c1","choices":[{"index":0,"delta":{"content":" two"}}]}"#,
                        r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                        r#"{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
                        "[DONE]",
                    ]
                    .iter()
                    .map(|d| ev(d))
                    .collect();
                    let a = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n",
                        body.len()
                    );
                    let _ = s.write_all(a.as_bytes()).await;
                    // No `0\r\n\r\n`: the connection goes down mid-body.
                    return;
                }
            });
        }
    });
    addr
}

/// The answer was over for the client once `[DONE]` was relayed: an upstream that
/// breaks after it is not an interrupted decode, and the client gets no error event
/// after `[DONE]` (CI saw the reference gateway append `upstream_decode_interrupted`
/// to a finished answer whose worker was drained at that moment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_breaks_after_done_leaves_the_answer_whole() {
    let dir = scratch("gw-done-dropped");
    let up = done_then_dropped().await;
    let args: Vec<String> = vec![
        "sim".into(),
        "gateway".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--config".into(),
        json!({"policy": "reference"}).to_string(),
        "--upstream".into(),
        format!("a=http://{up}"),
    ];
    let g = haq::target::sim::SimProcess::start(&haq_bin(), "gateway", &args, &dir)
        .await
        .expect("gateway");
    let body = http()
        .post(format!("{}/v1/chat/completions", g.url))
        .json(
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}),
        )
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("answer")
        .text()
        .await
        .expect("body");
    assert!(body.contains(" one") && body.contains(" two"), "{body}");
    assert!(
        body.trim_end().ends_with("data: [DONE]"),
        "[DONE] is the last event: {body}"
    );
    assert!(!body.contains("error"), "{body}");
}
