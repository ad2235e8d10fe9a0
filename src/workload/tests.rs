//! Same seed, same requests; each arrival process and mix feature does what it says.

use std::path::Path;

use super::*;
use crate::plan::load_str;

fn plan_with(workload: &str, extra: &[&str]) -> Plan {
    let text = format!(
        "name: t\ntarget: {{kind: url, url: 'http://127.0.0.1:9'}}\n{workload}\nprotected_load: 10/s\nslo: {{ttft_p95: 1s, itl_p95: 50ms, e2e_p95: 10s}}\nphases:\n  - {{name: baseline, duration: 20s}}\n  - {{name: fault, duration: 10s}}\n"
    );
    let sets: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    load_str(&text, "w.yaml", Path::new("."), &sets, None).unwrap_or_else(|e| panic!("{e}"))
}

const BASIC: &str = "workload:\n  seed: 5\n  mix:\n    classes:\n      - {name: a, weight: 3, prompt_tokens: {uniform: [10, 500]}, output_tokens: {lognormal: {mean: 100, stddev: 80}}}\n      - {name: b, prompt_tokens: {normal: {mean: 200, stddev: 20}}, output_tokens: 7, priority: best_effort, stream: 50%}\n  arrival: {process: poisson, rate: 20/s}";

const NO: BodyMarker = BodyMarker {
    field: crate::scenario::MarkerField::None,
    token: crate::wire::marker::RunToken::from_u32(0),
};

/// Each `client.marker` puts `haq-<token>-<id>` where it says: the `user` field,
/// `metadata.haq_request_id`, a top-level `haq_marker`, the end of the last user
/// message (or of the prompt);
/// the rest of the body is the body without a marker.
#[test]
fn the_marker_goes_where_the_scenario_says() {
    use crate::scenario::MarkerField as F;
    let token = crate::wire::marker::RunToken::from_u32(0xabcd_0123);
    let p = plan_with(BASIC, &[]);
    let a = all(&p);
    let r = a.iter().find(|r| r.class == 0).expect("chat");
    let json = |m: &BodyMarker| -> serde_json::Value {
        serde_json::from_slice(&request_body(&p, r, m)).expect("json")
    };
    let plain = json(&NO);
    let want = format!("haq-abcd0123-{}", r.id);
    for (field, path) in [
        (F::User, "/user"),
        (F::Metadata, "/metadata/haq_request_id"),
        (F::TopLevel, "/haq_marker"),
    ] {
        let mut b = json(&BodyMarker { field, token });
        assert_eq!(b.pointer(path), Some(&want.clone().into()), "{field:?}");
        let key = path.split('/').nth(1).expect("key");
        b.as_object_mut().expect("object").remove(key);
        assert_eq!(b, plain, "{field:?}");
    }
    let b = json(&BodyMarker {
        field: F::Prompt,
        token,
    });
    let last = |v: &serde_json::Value| {
        v["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .map(str::to_string)
            .expect("last message")
    };
    assert_eq!(last(&b), format!("{} ({want})", last(&plain)));
    let completions = plan_with(
        &BASIC.replace("output_tokens: 7,", "output_tokens: 7, api: completions,"),
        &[],
    );
    let c = all(&completions);
    let r = c.iter().find(|r| r.class == 1).expect("completions");
    let b: serde_json::Value = serde_json::from_slice(&request_body(
        &completions,
        r,
        &BodyMarker {
            field: F::Prompt,
            token,
        },
    ))
    .expect("json");
    let prompt = b["prompt"].as_str().expect("prompt");
    assert!(
        prompt.ends_with(&format!(" (haq-abcd0123-{})", r.id)),
        "{prompt}"
    );
}

fn all(p: &Plan) -> Vec<Planned> {
    Schedule::new(p).expect("schedule").collect()
}

#[test]
fn same_seed_same_requests_other_seed_others() {
    let a = all(&plan_with(BASIC, &[]));
    let b = all(&plan_with(BASIC, &[]));
    assert_eq!(a, b);
    assert!(
        (500..700).contains(&a.len()),
        "{} requests for 20/s over 30 s",
        a.len()
    );
    let c = all(&plan_with(BASIC, &["workload.seed=6"]));
    assert_ne!(a[..10], c[..10]);
    // Changing the mix does not move the arrivals.
    let d = all(&plan_with(BASIC, &["workload.mix.classes[0].weight=1"]));
    let times = |v: &[Planned]| v.iter().map(|p| p.at).collect::<Vec<_>>();
    assert_eq!(times(&a), times(&d));
    // Bodies are deterministic too.
    let p = plan_with(BASIC, &[]);
    assert_eq!(request_body(&p, &a[3], &NO), request_body(&p, &b[3], &NO));
    // streaming share and priority
    let b_class: Vec<_> = a.iter().filter(|r| r.class == 1).collect();
    let streamed = b_class.iter().filter(|r| r.stream).count() as f64 / b_class.len() as f64;
    assert!((0.3..0.7).contains(&streamed), "{streamed}");
    assert!(a.iter().filter(|r| r.class == 0).all(|r| r.stream));
    assert_eq!(priority_value(&p, b_class[0]), "best_effort");
    let body: serde_json::Value = serde_json::from_slice(&request_body(
        &p,
        b_class.iter().find(|r| !r.stream).expect("one"),
        &NO,
    ))
    .expect("json");
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
}

fn cv(times: &[Duration]) -> f64 {
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    var.sqrt() / mean
}

#[test]
fn processes_have_their_burstiness() {
    let times = |extra: &[&str]| -> Vec<Duration> {
        all(&plan_with(BASIC, extra)).iter().map(|p| p.at).collect()
    };
    let constant = times(&["workload.arrival.process=constant"]);
    assert_eq!(
        constant.len(),
        599,
        "20/s over 30 s, the first after one gap"
    );
    assert!(cv(&constant) < 1e-6);
    let poisson = times(&[]);
    assert!((0.85..1.15).contains(&cv(&poisson)), "{}", cv(&poisson));
    let bursty = times(&[
        "workload.arrival.process=gamma",
        "workload.arrival.burstiness=0.25",
    ]);
    assert!(cv(&bursty) > 1.6, "cv {} should be near 2", cv(&bursty));
}

#[test]
fn ramp_and_stages_shape_the_rate() {
    let count_in = |v: &[Planned], a: f64, b: f64| {
        v.iter()
            .filter(|p| (a..b).contains(&p.at.as_secs_f64()))
            .count()
    };
    let stages = all(&plan_with(
        &BASIC.replace(
            "arrival: {process: poisson, rate: 20/s}",
            "arrival:\n    process: constant\n    stages: [{duration: 10s, rate: 5/s}, {duration: 10s, ramp: [5/s, 25/s]}, {duration: 5s, rate: 12/s}]",
        ),
        &[],
    ));
    assert!((49..=50).contains(&count_in(&stages, 0.0, 10.0)));
    assert!((149..=151).contains(&count_in(&stages, 10.0, 20.0)));
    assert!(
        (119..=121).contains(&count_in(&stages, 20.0, 30.0)),
        "the last rate holds"
    );
    let ramp = all(&plan_with(
        &BASIC.replace("rate: 20/s", "ramp: {from: 1/s, to: 30/s}"),
        &[],
    ));
    assert!(count_in(&ramp, 0.0, 10.0) < count_in(&ramp, 20.0, 30.0) / 3);
}

#[test]
fn a_ramp_below_the_protected_load_during_the_fault_is_rejected() {
    let text = format!(
        "name: t\ntarget: {{kind: url, url: 'http://127.0.0.1:9'}}\n{}\nprotected_load: 10/s\nslo: {{ttft_p95: 1s, itl_p95: 50ms, e2e_p95: 10s}}\nphases:\n  - {{name: baseline, duration: 20s}}\n  - {{name: fault, duration: 10s}}\n",
        BASIC.replace("rate: 20/s", "ramp: {from: 30/s, to: 1/s}")
    );
    let e = load_str(&text, "w.yaml", Path::new("."), &[], None).expect_err("Q12");
    assert!(
        e.reason.contains("protected_load") && e.to_string().contains("phase `fault`"),
        "{e}"
    );
}

#[test]
fn sessions_prefixes_tools_and_structured_output() {
    let w = "workload:\n  seed: 9\n  mix:\n    classes:\n      - name: agent\n        prompt_tokens: 20\n        output_tokens: 10\n        shared_prefix: {groups: 2, tokens: {uniform: [50, 60]}}\n        session: {turns: 3, parallel: 2}\n        tools: {count: 3, choice: required}\n        response_format: json_schema\n  arrival: {process: constant, rate: 10/s}";
    let p = plan_with(w, &[]);
    let reqs = all(&p);
    let first = &reqs[0];
    let s = first.session.as_ref().expect("session");
    assert_eq!((s.turn, s.history.len()), (1, 0));
    let third = reqs
        .iter()
        .find(|r| r.session.as_ref().is_some_and(|s| s.turn == 3))
        .expect("a third turn");
    assert_eq!(third.session.as_ref().map(|s| s.history.len()), Some(2));
    let (g, n) = third.prefix.expect("prefix");
    assert!(g < 2 && (50..=60).contains(&n));
    assert_eq!(third.total_prompt_tokens(), 20 + 2 * (20 + 10) + n);
    let body: serde_json::Value =
        serde_json::from_slice(&request_body(&p, third, &NO)).expect("json");
    let msgs = body["messages"].as_array().expect("messages");
    assert_eq!(
        msgs.len(),
        1 + 2 * 2 + 1,
        "system, two earlier turns, the new message"
    );
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(body["tools"].as_array().map(Vec::len), Some(3));
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["response_format"]["type"], "json_schema");
    // one system prompt per group, shared by every request of the group
    let texts: std::collections::BTreeSet<String> = reqs
        .iter()
        .filter_map(|r| {
            let b: serde_json::Value = serde_json::from_slice(&request_body(&p, r, &NO)).ok()?;
            b["messages"][0]["content"].as_str().map(str::to_string)
        })
        .collect();
    assert_eq!(texts.len(), 2);
    // sessions end after their turns; no turn number exceeds 3
    assert!(
        reqs.iter()
            .all(|r| r.session.as_ref().is_some_and(|s| s.turn <= 3))
    );
}

#[test]
fn trace_replay_with_time_scaling_and_shared_blocks() {
    let dir = std::env::temp_dir().join(format!("haq-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("t.jsonl");
    std::fs::write(
        &f,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [7, 8]}\n{\"timestamp\": 4000, \"input_length\": 700, \"output_length\": 6, \"hash_ids\": [7, 9]}\n{\"timestamp\": 8000, \"input_length\": 30, \"output_length\": 2, \"hash_ids\": [1]}\n",
    )
    .expect("write");
    let w = format!(
        "workload:\n  mix:\n    classes: [{{name: a, prompt_tokens: 1, output_tokens: 1}}]\n  arrival: {{process: trace, trace: {{file: {}, time_scale: 0.5}}}}",
        f.display()
    );
    let p = plan_with(&w, &[]);
    let reqs = all(&p);
    assert_eq!(
        reqs.len(),
        3,
        "a trace that ends before the run stops the arrivals"
    );
    assert_eq!(
        reqs.iter().map(|r| r.at.as_secs_f64()).collect::<Vec<_>>(),
        vec![0.0, 2.0, 4.0]
    );
    assert_eq!((reqs[1].prompt_tokens, reqs[1].max_tokens), (700, 6));
    let text = |r: &Planned| {
        let b: serde_json::Value = serde_json::from_slice(&request_body(&p, r, &NO)).expect("json");
        b["messages"][0]["content"]
            .as_str()
            .expect("text")
            .to_string()
    };
    let (a, b) = (text(&reqs[0]), text(&reqs[1]));
    let block = |s: &str, n: usize| s.split(' ').take(n).collect::<Vec<_>>().join(" ");
    assert_eq!(
        block(&a, 512),
        block(&b, 512),
        "hash id 7 is the same block"
    );
    assert_ne!(block(&a, 600), block(&b, 600));
    assert_eq!(a.split(' ').count(), 600);
    let looped = all(&plan_with(
        &w.replace("time_scale: 0.5", "time_scale: 0.5, loop: true"),
        &[],
    ));
    assert_eq!(looped.len(), 15, "three requests every 6 s over 30 s");
}

#[test]
fn a_share_of_a_class_leaves_early_drawn_from_the_seed_alone() {
    let abandon = "workload.mix.classes[0].abandon={share: 30%, after_deltas: 2}";
    let plain = all(&plan_with(BASIC, &[]));
    let left = all(&plan_with(BASIC, &[abandon]));
    // Abandonment moves no other draw: the same requests, some of them leaving.
    let strip = |v: &[Planned]| {
        v.iter()
            .map(|p| Planned {
                leave: None,
                ..p.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&plain), strip(&left));
    assert!(plain.iter().all(|p| p.leave.is_none()));
    // Only class `a` (all streamed), about 30 % of it.
    let a: Vec<&Planned> = left.iter().filter(|p| p.class == 0).collect();
    let gone = a.iter().filter(|p| p.leave.is_some()).count();
    let share = gone as f64 / a.len() as f64;
    assert!((0.22..0.38).contains(&share), "{gone} of {}", a.len());
    assert!(
        left.iter()
            .filter(|p| p.leave.is_some())
            .all(|p| p.class == 0 && p.leave == Some(crate::scenario::Leave::AfterDeltas(2)))
    );
    // Same seed, same leavers.
    assert_eq!(left, all(&plan_with(BASIC, &[abandon])));
    // Class b streams half its requests: only streamed ones leave.
    let b = "workload.mix.classes[1].abandon={share: 100%, before_first_token: true}";
    let bs = all(&plan_with(BASIC, &[b]));
    assert!(
        bs.iter()
            .filter(|p| p.class == 1)
            .all(|p| p.leave.is_some() == p.stream)
    );
    assert!(bs.iter().any(|p| p.class == 1 && !p.stream));
}

/// Cache truth (M6): one request in `every` carries a planted prompt — the same body
/// for the same prompt whatever the class's extras, another for another — and the
/// rest of the schedule is the schedule without it.
#[test]
fn planted_prompts_replace_every_nth_request_and_move_no_other_draw() {
    let truth = "workload.cache_truth={every: 5, prompts: 2, prompt_tokens: 40, output_tokens: 8}";
    let plain = all(&plan_with(BASIC, &[]));
    let p = plan_with(BASIC, &[truth]);
    let got = all(&p);
    assert_eq!(plain.len(), got.len());
    for (a, b) in plain.iter().zip(&got) {
        assert_eq!(
            (a.at, a.class, a.stream, a.phase),
            (b.at, b.class, b.stream, b.phase)
        );
        match b.planted {
            None => assert_eq!(
                a,
                &Planned {
                    planted: None,
                    ..b.clone()
                }
            ),
            Some(k) => {
                assert_eq!((b.idx + 1) % 5, 0);
                assert_eq!(k, ((b.idx / 5) % 2) as u32);
                assert_eq!((b.prompt_tokens, b.max_tokens), (40, 8));
                assert!(b.prefix.is_none() && b.session.is_none() && b.leave.is_none());
            }
        }
    }
    let body = |r: &Planned| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_slice(&request_body(&p, r, &NO)).expect("json");
        v.as_object_mut().map(|o| o.remove("stream_options"));
        v["stream"] = serde_json::Value::Null;
        v
    };
    let chat: Vec<&Planned> = got
        .iter()
        .filter(|r| r.planted.is_some() && r.class == 0)
        .collect();
    let (k0, k1): (Vec<&Planned>, Vec<&Planned>) =
        chat.into_iter().partition(|r| r.planted == Some(0));
    assert!(k0.len() > 3 && k1.len() > 3);
    assert!(
        k0.iter().all(|r| body(r) == body(k0[0])),
        "one body per prompt"
    );
    assert_ne!(body(k0[0]), body(k1[0]));
    assert_eq!(body(k0[0])["temperature"], 0);
    assert_eq!(index_of(&k0[0].id), Some(k0[0].idx));
    assert_eq!(index_of("probe-x"), None);
}

#[test]
fn a_planting_period_below_two_is_refused() {
    let text = format!(
        "name: t\ntarget: {{kind: url, url: 'http://127.0.0.1:9'}}\n{BASIC}\nprotected_load: 10/s\nslo: {{ttft_p95: 1s, itl_p95: 50ms, e2e_p95: 10s}}\nphases:\n  - {{name: baseline, duration: 20s}}\n"
    );
    let sets = vec!["workload.cache_truth={every: 1}".to_string()];
    let e = load_str(&text, "w.yaml", Path::new("."), &sets, None).expect_err("refused");
    assert_eq!(e.field, "workload.cache_truth.every", "{e}");
}

#[test]
fn shares_partition_the_schedule_by_index() {
    let p = plan_with(BASIC, &[]);
    let whole = all(&p);
    assert!(whole.len() > 10);
    let n = 3;
    let mut union: Vec<Planned> = (0..n)
        .flat_map(|k| {
            let share = Share { index: k, count: n };
            let mine: Vec<Planned> = all(&p).into_iter().filter(|r| share.holds(r.idx)).collect();
            assert!(mine.iter().all(|r| Share::of_id(&r.id, n) == Some(k)));
            mine
        })
        .collect();
    union.sort_by_key(|r| r.idx);
    assert_eq!(
        union, whole,
        "the shares together are the schedule, each request once"
    );
    assert!(whole.iter().all(|r| Share::WHOLE.holds(r.idx)));
    assert!(!Share { index: 1, count: 2 }.holds(4));
}
