//! The sim worker as a real process: OpenAI surface, lifecycle and signals, fault hooks
//! at the token-loop points (M9), leases (M5), prefix cache (M6).

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use haq::wire::journal::{Stamped, ToolExecution, WorkerEntry};
use nix::sys::signal::Signal;
use serde_json::json;

use crate::simkit::*;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_surface_answers_like_vllm() {
    let w = worker("api", json!({"max_num_seqs": 2}), None).await;
    let u = w.url();
    let (s, models) = get_json(&format!("{u}/v1/models")).await;
    assert_eq!(
        (s, models["data"][0]["id"].as_str()),
        (200, Some("haq-sim-8b"))
    );

    // Streaming chat with usage, deterministic text, x-request-id echoed.
    let mut body = chat("tell me about failover", 6);
    body["stream_options"] = json!({"include_usage": true});
    let a = stream(
        &format!("{u}/v1/chat/completions"),
        &body,
        &[("x-request-id", "r-1")],
        LIMIT,
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["x-request-id"], "r-1");
    assert_eq!(a.headers["x-haq-worker"], "api");
    assert!(a.headers.contains_key("x-haq-model-revision"));
    assert_eq!(a.content().len(), 6);
    let data = a.data();
    let usage = data
        .iter()
        .find(|v| v["usage"].is_object())
        .expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    assert!(
        data.iter()
            .any(|v| v["choices"][0]["finish_reason"] == "length")
    );
    assert!(a.done() && a.broken.is_none());
    let b = stream(&format!("{u}/v1/chat/completions"), &body, &[], LIMIT).await;
    assert_eq!(
        a.content(),
        b.content(),
        "temperature 0: same prompt, same text"
    );

    // Completions, non-streaming, and a stop string cut at the right place.
    let (s, whole) = post_json(
        &format!("{u}/v1/completions"),
        json!({"model": "haq-sim-8b", "prompt": "tell me about failover", "max_tokens": 6, "temperature": 0}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(whole["object"], "text_completion");
    let text = whole["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    assert_eq!(
        text,
        a.content().concat(),
        "same tokens for /v1/completions"
    );
    assert_eq!(whole["usage"]["completion_tokens"], 6, "{whole}");
    assert_eq!(whole["choices"][0]["finish_reason"], "length");
    // Completions, streaming: `text` deltas, usage chunk, [DONE].
    let streamed = stream(
        &format!("{u}/v1/completions"),
        &json!({"model": "haq-sim-8b", "prompt": "tell me about failover", "max_tokens": 6,
                "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}),
        &[],
        LIMIT,
    )
    .await;
    assert_eq!(streamed.content().concat(), text);
    assert!(streamed.done());
    assert!(
        streamed
            .data()
            .iter()
            .all(|v| v["object"] == "text_completion"),
        "{:?}",
        streamed.data()
    );
    assert!(
        streamed
            .data()
            .iter()
            .any(|v| v["usage"]["completion_tokens"] == 6)
    );
    let third = a.content()[2].clone();
    let (_, stopped) = post_json(
        &format!("{u}/v1/chat/completions"),
        json!({"model": "haq-sim-8b", "messages": [{"role": "user", "content": "tell me about failover"}],
               "max_tokens": 6, "temperature": 0, "stop": [third.trim()]}),
    )
    .await;
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    let got = stopped["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert!(
        !got.contains(third.trim()) && text.starts_with(got),
        "{got:?} vs {text:?}"
    );

    // `slow` stretches every step; a bad factor is refused.
    let (s, _) = post_json(&format!("{u}/admin/slow"), json!({"factor": 0})).await;
    assert_eq!(s, 400);
    // Whole-answer time from the request: a lower bound holds exactly (no token before
    // its modelled step), so the ×20 answer (6 steps ≥ 100 ms) is checked from below and
    // the normal one (6 × ~5 ms) only has to stay under it.
    let pace = async || {
        let s = stream(
            &format!("{u}/v1/chat/completions"),
            &chat("pace", 6),
            &[],
            LIMIT,
        )
        .await;
        s.events[s.events.len() - 1].0 - s.sent
    };
    let normal = pace().await;
    let (s, r) = post_json(&format!("{u}/admin/slow"), json!({"factor": 20.0})).await;
    assert_eq!((s, r["slow_factor"].as_f64()), (200, Some(20.0)));
    let slow = pace().await;
    assert!(
        slow >= Duration::from_millis(6 * 100) && normal < slow,
        "normal {normal:?}, slow x20 {slow:?}"
    );
    post_json(&format!("{u}/admin/slow"), json!({"factor": 1.0})).await;

    // Errors in OpenAI's shape.
    let (s, e) = post_json(
        &format!("{u}/v1/chat/completions"),
        json!({"model": "gpt-x", "messages": []}),
    )
    .await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );
    let (s, e) = post_json(
        &format!("{u}/v1/completions"),
        json!({"prompt": "a", "max_tokens": 0}),
    )
    .await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("max_tokens")));
    assert!(e["error"]["message"].is_string() && e["error"]["type"].is_string());

    // Saturation: two slots, five long requests: a queue forms, visible in /metrics.
    let long = chat("a queue forms", 200);
    let mut hs = Vec::new();
    for _ in 0..5 {
        let (u, b) = (format!("{u}/v1/chat/completions"), long.clone());
        hs.push(tokio::spawn(
            async move { stream(&u, &b, &[], LIMIT).await },
        ));
    }
    let murl = format!("{u}/metrics");
    eventually("waiting requests in /metrics", LIMIT, async || {
        let m = http()
            .get(&murl)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        m.contains("vllm:num_requests_running{model_name=\"haq-sim-8b\",worker=\"api\"} 2")
            && m.lines()
                .any(|l| l.starts_with("vllm:num_requests_waiting{") && l.ends_with(" 3"))
    })
    .await;
    for h in hs {
        h.abort();
    }
    let m = http()
        .get(&murl)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for name in [
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_preemptions_total",
    ] {
        assert!(m.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_readiness_and_sigterm_drain() {
    let dir = crate::support::scratch("drain");
    let w = worker_in(
        &dir,
        "d1",
        json!({"startup": "50ms", "decode_step": "15ms"}),
        None,
        "127.0.0.1:0",
    )
    .await;
    let u = w.url().to_string();
    // A slow starter: alive at once, ready only after model load.
    let slow = spawn_worker(&dir, "s1", json!({"startup": "3s"}), None, "127.0.0.1:0").await;
    let (s, r) = get_json(&format!("{}/ready", slow.url())).await;
    assert_eq!((s, r["status"].as_str()), (503, Some("starting")));
    assert_eq!(
        http()
            .get(format!("{}/health", slow.url()))
            .send()
            .await
            .expect("health")
            .status(),
        200
    );
    let (s, _) = post_json(&format!("{}/v1/chat/completions", slow.url()), chat("x", 2)).await;
    assert_eq!(s, 503, "not ready: refused");
    wait_ready(slow.url()).await;

    // A stream in flight when SIGTERM arrives finishes; new requests get 503.
    let body = chat("drain me", 100);
    let su = format!("{u}/v1/chat/completions");
    let inflight = tokio::spawn(async move { stream(&su, &body, &[], LIMIT).await });
    running(&u, 1).await;
    w.p.signal(Signal::SIGTERM).expect("SIGTERM");
    eventually("draining", LIMIT, async || {
        get_json(&format!("{u}/ready")).await.1["status"] == "draining"
    })
    .await;
    let (s, e) = post_json(&format!("{u}/v1/chat/completions"), chat("late", 2)).await;
    assert_eq!(s, 503, "{e}");
    let seen = inflight.await.expect("stream task");
    assert!(
        seen.done() && seen.broken.is_none(),
        "in-flight stream finished: {:?}",
        seen.broken
    );
    assert_eq!(seen.content().len(), 100);
    let mut p = w.p;
    let st = p.wait_exit(LIMIT).await.expect("exits after the drain");
    assert!(st.success(), "{st}");
    let j: Vec<Stamped<WorkerEntry>> = journal(&dir.join("worker-d1.jsonl"));
    assert!(
        j.iter()
            .any(|e| matches!(e.entry, WorkerEntry::Ready { .. }))
    );
    assert!(
        j.iter()
            .any(|e| matches!(e.entry, WorkerEntry::Draining { running: 1, .. }))
    );
    assert!(j.iter().any(|e| matches!(
        e.entry,
        WorkerEntry::Drained {
            timed_out: false,
            ..
        }
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_freezes_and_sigkill_crashes() {
    let w = worker("f1", json!({"decode_step": "10ms"}), None).await;
    let su = format!("{}/v1/chat/completions", w.url());
    let body = chat("freeze", 200);
    let h = tokio::spawn(async move { stream(&su, &body, &[], LIMIT).await });
    running(w.url(), 1).await;
    w.p.signal(Signal::SIGSTOP).expect("SIGSTOP");
    let hc = http()
        .get(format!("{}/health", w.url()))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(hc.is_err(), "a frozen worker does not answer health checks");
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.p.signal(Signal::SIGCONT).expect("SIGCONT");
    let seen = h.await.expect("task");
    assert!(seen.done(), "resumed and finished");
    // From the request on (the freeze may come before the first event).
    let times: Vec<_> = std::iter::once(seen.sent)
        .chain(seen.events.iter().map(|e| e.0))
        .collect();
    let gaps: Vec<Duration> = times.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(
        gaps.iter().any(|g| *g >= Duration::from_millis(400)),
        "the freeze shows as one long gap"
    );

    let su = format!("{}/v1/chat/completions", w.url());
    let body = chat("crash", 200);
    let h = tokio::spawn(async move { stream(&su, &body, &[], LIMIT).await });
    running(w.url(), 1).await;
    let mut p = w.p;
    p.signal(Signal::SIGKILL).expect("SIGKILL");
    let seen = h.await.expect("task");
    assert!(
        !seen.done() && seen.broken.is_some(),
        "cut mid-stream: {:?}",
        seen.broken
    );
    assert_eq!(p.wait_exit(LIMIT).await.and_then(|s| s.signal()), Some(9));
    assert!(
        http()
            .get(format!("{}/health", p.url))
            .send()
            .await
            .is_err(),
        "refused after death"
    );
}

/// Waits until the worker's engine runs `n` sequences (a request is in flight).
async fn running(url: &str, n: u64) {
    let state = format!("{url}/admin/state");
    eventually("requests running", LIMIT, async || {
        get_json(&state).await.1["running"].as_u64() == Some(n)
    })
    .await;
}

/// Arms `spec` on a fresh worker, streams request `rid`, returns what the client saw
/// and the worker's exit signal.
async fn fire(
    spec: serde_json::Value,
    body: serde_json::Value,
    tools_url: Option<&str>,
) -> (Seen, Option<i32>, Vec<Stamped<WorkerEntry>>) {
    let targeted = spec["request_id"].is_string();
    let w = worker("h1", json!({"decode_step": "10ms"}), tools_url).await;
    let (s, armed) = post_json(&format!("{}/admin/faults", w.url()), spec).await;
    assert_eq!(s, 200, "{armed}");
    assert!(armed["armed"].is_string());
    let (_, st) = get_json(&format!("{}/admin/state", w.url())).await;
    assert_eq!(st["armed"].as_array().map(Vec::len), Some(1), "{st}");
    // A request that does not match runs to the end (a hook without request_id
    // takes the next request that reaches its point: no bystander then).
    if targeted {
        let other = stream(
            &format!("{}/v1/chat/completions", w.url()),
            &chat("other", 12),
            &[("x-request-id", "other")],
            LIMIT,
        )
        .await;
        assert!(other.done(), "non-matching request unaffected");
    }
    let seen = stream(
        &format!("{}/v1/chat/completions", w.url()),
        &body,
        &[("x-request-id", "victim"), ("x-haq-attempt", "victim/a1")],
        LIMIT,
    )
    .await;
    let mut p = w.p;
    let sig = p.wait_exit(LIMIT).await.and_then(|s| s.signal());
    let j = journal(&w.dir.join("worker-h1.jsonl"));
    (seen, sig, j)
}

fn fired(j: &[Stamped<WorkerEntry>], point: &str) -> bool {
    j.iter().any(|e| {
        matches!(&e.entry, WorkerEntry::FaultFired { point: p, req, attempt, .. }
        if p == point && req == "victim" && attempt.as_deref() == Some("victim/a1"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_hooks_kill_at_the_exact_token_loop_point() {
    // M9 case 1: during prefill, before any byte of the stream.
    let (seen, sig, j) = fire(
        json!({"point": "prefill", "request_id": "victim"}),
        chat("victim prompt", 20),
        None,
    )
    .await;
    assert_eq!(sig, Some(9));
    assert_eq!(seen.status, 200);
    assert!(
        seen.events.is_empty() && seen.broken.is_some(),
        "{:?}",
        seen.events
    );
    assert!(fired(&j, "prefill"));

    // M9 case 2: token 3 computed, its event not written: events 0..2 arrive.
    // M9 case 3: right after event 3 was written: events 0..3 arrive.
    for (spec, point, n) in [
        (
            json!({"point": "before_event", "k": 3, "request_id": "victim"}),
            "before_event",
            3,
        ),
        (json!({"point": "after_event", "k": 3}), "after_event", 4),
    ] {
        let (seen, sig, j) = fire(spec, chat("victim prompt", 20), None).await;
        assert_eq!(sig, Some(9));
        assert_eq!(seen.content().len(), n, "{point}: {:?}", seen.events);
        assert!(seen.broken.is_some() && !seen.done());
        assert!(fired(&j, point));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_executed_then_streamed_and_the_hook_fires_between() {
    let dir = crate::support::scratch("tools");
    let mut t = tools(&dir, true).await;
    let mut body = chat("find the runbook", 50);
    body["tools"] = json!([{"type": "function", "function": {"name": "lookup", "parameters": {}}}]);

    // Without a fault: id, name, argument fragments, finish_reason tool_calls.
    let w = worker("t1", json!({}), Some(&t.url)).await;
    let ok = stream(
        &format!("{}/v1/chat/completions", w.url()),
        &body,
        &[("x-request-id", "tool-ok")],
        LIMIT,
    )
    .await;
    let data = ok.data();
    let first = &data[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(first["function"]["name"], "lookup");
    let call_id = first["id"].as_str().expect("id").to_string();
    assert!(call_id.starts_with("call_"));
    let args: String = data
        .iter()
        .filter_map(|v| v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert!(
        serde_json::from_str::<serde_json::Value>(&args).is_ok(),
        "arguments are JSON: {args}"
    );
    assert!(
        data.iter()
            .any(|v| v["choices"][0]["finish_reason"] == "tool_calls")
    );

    // M9 case 5: killed right after the execution, before the delta.
    let (seen, sig, j) = fire(
        json!({"point": "after_tool_call"}),
        body.clone(),
        Some(&t.url),
    )
    .await;
    assert_eq!(sig, Some(9));
    assert!(
        seen.events.is_empty(),
        "no tool-call delta escaped: {:?}",
        seen.events
    );
    assert!(fired(&j, "after_tool_call"));
    let tools_log = dir.join("tools.jsonl");
    eventually("the victim's execution logged", LIMIT, async || {
        journal::<Stamped<ToolExecution>>(&tools_log)
            .iter()
            .any(|e| e.entry.logical_request_id == "victim")
    })
    .await;
    let log: Vec<Stamped<ToolExecution>> = journal(&tools_log);
    let victim: Vec<_> = log
        .iter()
        .filter(|e| e.entry.logical_request_id == "victim")
        .collect();
    assert_eq!(victim.len(), 1, "executed once before the crash: {log:?}");
    assert_eq!(
        victim[0].entry.idempotency_key,
        format!("victim:{}", victim[0].entry.tool_call_id)
    );
    assert_eq!(
        victim[0].entry.tool_call_id, call_id,
        "same prompt, same tool_call_id (M7)"
    );
    assert!(!victim[0].entry.deduplicated);
    t.kill_and_reap().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_refuse_expire_renew_and_revoke() {
    let w = worker("l1", json!({"decode_step": "10ms"}), None).await;
    let u = format!("{}/v1/chat/completions", w.url());
    let now = haq::wire::mono_ns();
    let past = (now - 1).to_string();
    // Refused: the lease is over before the request arrives.
    let r = http()
        .post(&u)
        .json(&chat("late", 4))
        .header("x-haq-attempt", "r1/a1")
        .header("x-haq-lease-deadline-ns", &past)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 409);
    let e: serde_json::Value = r.json().await.expect("json");
    assert_eq!(e["error"]["code"], "lease_refused");

    // Expiry: nothing is published after the deadline. Bounds are generous for a busy
    // 2-core machine: without the lease this answer would stream for 20 s.
    const STEP: Duration = Duration::from_millis(10);
    let deadline = haq::wire::mono_ns() + 1_500_000_000;
    let d = deadline.to_string();
    let seen = stream(
        &u,
        &chat("expire", 2000),
        &[("x-haq-attempt", "r2/a1"), ("x-haq-lease-deadline-ns", &d)],
        LIMIT,
    )
    .await;
    let n = seen.content().len();
    assert!((1..2000).contains(&n) && !seen.done(), "{n} events");
    let at_deadline = std::time::Instant::now()
        - Duration::from_nanos(haq::wire::mono_ns().saturating_sub(deadline));
    let late = seen
        .events
        .iter()
        .filter(|(t, _)| *t > at_deadline + Duration::from_millis(750))
        .count();
    assert_eq!(late, 0, "events long after the lease deadline");

    // Renewal keeps it going; revocation stops it at once and is refused afterwards.
    // By wall time T the worker can have published at most (T - sent) / step + 1
    // tokens (a step never takes less than the model's time), so more than that many
    // by the first deadline proves tokens went out after it, under renewed leases.
    let first_lease = Duration::from_secs(1);
    let sent = std::time::Instant::now();
    let d = (haq::wire::mono_ns() + first_lease.as_nanos() as u64).to_string();
    let (u2, base) = (u.clone(), w.url().to_string());
    let h = tokio::spawn(async move {
        stream(
            &u2,
            &chat("renew", 2000),
            &[("x-haq-attempt", "r3/a1"), ("x-haq-lease-deadline-ns", &d)],
            LIMIT,
        )
        .await
    });
    let most_by_first_deadline = (first_lease.as_millis() / STEP.as_millis()) as usize + 1;
    while sent.elapsed() < first_lease + Duration::from_millis(1500) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (s, r) = post_json(&format!("{base}/haq/leases/renew"),
            json!({"deadline_ns": haq::wire::mono_ns() + 2_000_000_000, "attempts": ["r3/a1", "nope/a1"]})).await;
        assert_eq!(s, 200);
        assert_eq!(r["refused"], json!(["nope/a1"]));
    }
    let (s, r) = post_json(
        &format!("{base}/haq/leases/revoke"),
        json!({"attempt": "r3/a1"}),
    )
    .await;
    assert_eq!((s, r["was_live"].as_bool()), (200, Some(true)));
    let seen = h.await.expect("task");
    assert!(
        !seen.done() && seen.content().len() < 2000,
        "revoked mid-stream"
    );
    assert!(
        seen.content().len() > most_by_first_deadline,
        "renewed past the first deadline: {} tokens, at most {most_by_first_deadline} by it",
        seen.content().len()
    );
    let (_, r) = post_json(
        &format!("{base}/haq/leases/renew"),
        json!({"deadline_ns": haq::wire::mono_ns() + 300_000_000, "attempts": ["r3/a1"]}),
    )
    .await;
    assert_eq!(
        r["refused"],
        json!(["r3/a1"]),
        "no renewal after revocation"
    );
    let r = http()
        .post(&u)
        .json(&chat("again", 4))
        .header("x-haq-attempt", "r3/a1")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 409, "a revoked attempt cannot start again");
    let jp = w.journal();
    eventually("lease entries in the worker journal", LIMIT, async || {
        let j: Vec<Stamped<WorkerEntry>> = journal(&jp);
        j.iter().any(
            |e| matches!(&e.entry, WorkerEntry::LeaseExpired { attempt, .. } if attempt == "r2/a1"),
        ) && j.iter().any(
            |e| matches!(&e.entry, WorkerEntry::LeaseRevoked { attempt, .. } if attempt == "r3/a1"),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_long_prefix_is_served_from_the_prefix_cache_until_a_restart() {
    let dir = crate::support::scratch("prefix");
    // 2000 prompt tokens at 2000 tok/s: 1 s of prefill when cold (a lower bound the
    // model guarantees); warm, one step of ~5 ms, which may stretch on a busy machine.
    let engine = json!({"prefill_tokens_per_s": 2000.0, "decode_step": "5ms"});
    let prompt = (0..2000)
        .map(|i| format!("w{}", i % 97))
        .collect::<Vec<_>>()
        .join(" ");
    let body = chat(&prompt, 3);
    let w = worker_in(&dir, "p1", engine.clone(), None, "127.0.0.1:0").await;
    let listen = w.url().trim_start_matches("http://").to_string();
    let u = format!("{}/v1/chat/completions", w.url());
    let cold = stream(&u, &body, &[], LIMIT).await.ttft().expect("ttft");
    let mut with_usage = body.clone();
    with_usage["stream_options"] = json!({"include_usage": true});
    let warm_seen = stream(&u, &with_usage, &[], LIMIT).await;
    let warm = warm_seen.ttft().expect("ttft");
    let usage = warm_seen
        .data()
        .into_iter()
        .find(|v| v["usage"].is_object())
        .expect("usage");
    assert_eq!(
        usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1999,
        "{usage}"
    );
    assert!(cold > Duration::from_millis(950), "cold {cold:?}");
    assert!(warm * 2 < cold, "warm {warm:?} vs cold {cold:?}");
    let m = http()
        .get(format!("{}/metrics", w.url()))
        .send()
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    let hits: f64 = m
        .lines()
        .find(|l| l.starts_with("vllm:prefix_cache_hits_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("hits");
    assert!(hits >= 1984.0, "{hits}");
    // A restart (same address) starts with an empty cache.
    let mut p = w.p;
    p.kill_and_reap().await;
    let w2 = worker_in(&dir, "p1", engine, None, &listen).await;
    let again = stream(
        &format!("{}/v1/chat/completions", w2.url()),
        &body,
        &[],
        LIMIT,
    )
    .await
    .ttft()
    .expect("ttft");
    assert!(
        again > Duration::from_millis(950),
        "cold again after restart: {again:?}"
    );
}
