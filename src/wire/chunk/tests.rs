use super::*;

#[test]
fn shapes() {
    let c = classify(
        r#"{"id":"a","choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
    );
    assert_eq!(c.kind, Some(ChunkKind::Role));
    let c = classify(r#"{"id":"a","choices":[{"index":0,"delta":{"content":" hi"}}]}"#);
    assert_eq!(
        (c.kind, c.text.as_deref()),
        (Some(ChunkKind::Content), Some(" hi"))
    );
    let c = classify(r#"{"id":"a","choices":[{"index":0,"delta":{"content":"\"q\"\n"}}]}"#);
    assert_eq!(c.text.as_deref(), Some("\"q\"\n"), "escapes decoded");
    let c = classify(r#"{"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
    assert_eq!(
        (c.kind, c.finish.as_deref()),
        (Some(ChunkKind::Finish), Some("length"))
    );
    let c = classify(
        r#"{"id":"a","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}"#,
    );
    assert_eq!(
        (c.kind, c.usage_tokens()),
        (Some(ChunkKind::Usage), Some(7))
    );
    assert_eq!(c.usage.and_then(|u| u.cached), Some(2));
    let c = classify(
        r#"{"id":"a","choices":[{"index":0,"delta":{}}],"usage":{"completion_tokens":2}}"#,
    );
    assert_eq!(c.kind, Some(ChunkKind::Usage));
    assert_eq!(classify("[DONE]").kind, Some(ChunkKind::Done));
    let c = classify("{oops");
    assert_eq!(c.kind, Some(ChunkKind::Other));
    assert!(c.unparsable);
    let c = classify(r#"{"unknown":"shape"}"#);
    assert_eq!(c.kind, Some(ChunkKind::Other));
    assert!(
        !c.unparsable,
        "valid JSON of an unknown shape is not malformed"
    );
    let c = classify(
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
    );
    assert_eq!(
        (c.kind, c.text.as_deref()),
        (Some(ChunkKind::ToolCall), Some("f{\"a\""))
    );
    assert_eq!(c.tools[0].index, 1);
    assert_eq!(c.tools[0].id.as_deref(), Some("call_1"));
    let c = classify(r#"{"choices":[{"index":0,"text":" x","finish_reason":null}]}"#);
    assert_eq!(c.kind, Some(ChunkKind::Content));
    let c = classify(r#"{"id":"r","choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#);
    assert_eq!(c.kind, Some(ChunkKind::Reasoning));
    // a whole non-streaming answer
    let c = classify(
        r#"{"id":"w","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"all of it"},"finish_reason":"stop"}],"usage":{"completion_tokens":3}}"#,
    );
    assert_eq!(
        (c.kind, c.text.as_deref(), c.finish.as_deref()),
        (Some(ChunkKind::Content), Some("all of it"), Some("stop"))
    );
}

#[test]
fn errors_are_read_field_by_field() {
    let c = classify(r#"{"error": {"message": "x", "type": null, "param": null, "code": "500"}}"#);
    assert_eq!(c.kind, Some(ChunkKind::Error));
    let e = c.error.expect("error");
    assert_eq!(
        (e.code.as_deref(), e.message.as_deref()),
        (Some("500"), Some("x"))
    );
    assert!(!e.seed_shape);
    let c = classify(
        r#"{"error":{"code":"upstream_decode_interrupted","message":"m","request_id":"r1","partial_output":true,"delivered_output_tokens":5,"retryable":false}}"#,
    );
    let e = c.error.expect("error");
    assert!(e.seed_shape, "{e:?}");
    assert_eq!(e.delivered_output_tokens, Some(5));
    assert_eq!(e.request_id.as_deref(), Some("r1"));
    let c = classify(r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#);
    let e = c.error.expect("error");
    assert_eq!(
        (e.code.as_deref(), e.kind.as_deref()),
        (Some("400"), Some("BadRequestError"))
    );
}

/// The plain-delta scanner is only a shortcut: over thousands of generated payloads
/// (real shapes, every field in several forms, shuffled keys, then cut or corrupted)
/// classifying with it gives exactly what serde alone gives; and it does take the
/// common shapes (vLLM's, llama.cpp's, the bench server's).
#[test]
fn the_plain_delta_scanner_agrees_with_serde() {
    use rand::seq::SliceRandom;
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let strs = [
        r#""plain""#,
        r#""""#,
        r#"" sp""#,
        r#""q\"e""#,
        r#""nl\n""#,
        r#""\u00e9\u65e5""#,
        r#""\ud83d\ude42""#,
        r#""\ud800""#,
        "\"été 日本 🙂\"",
        r#""bad\x""#,
        "null",
        "7",
    ];
    let nums = [
        "0", "-0", "17", "1.5", "-2e10", "1E+3", "01", "1.", ".5", "-", "1e",
    ];
    let deltas = [
        "{}",
        r#"{"role":"assistant"}"#,
        r#"{"role":"assistant","content":null}"#,
        r#"{"role":"assistant","content":""}"#,
        r#"{"content":S}"#,
        r#"{"content":S,"reasoning_content":null,"tool_calls":null}"#,
        r#"{"role":null,"content":S,"reasoning_content":null}"#,
        r#"{"reasoning_content":S}"#,
        r#"{"reasoning":S,"content":null}"#,
        r#"{"content":S,"content":S}"#,
        r#"{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]}"#,
        r#"{"tool_calls":null,"content":S}"#,
        "null",
        "5",
    ];
    let choices = [
        r#"{"index":0,"delta":D,"logprobs":null,"finish_reason":F}"#,
        r#"{"delta":D,"finish_reason":F,"index":N}"#,
        r#"{"index":0,"delta":D}"#,
        r#"{"index":0,"delta":D,"logprobs":{"content":[]},"finish_reason":F}"#,
        r#"{"index":0,"text":S,"finish_reason":F}"#,
        r#"{"index":0,"message":{"role":"assistant","content":S},"finish_reason":F}"#,
        r#"{"index":0,"delta":D,"finish_reason":F,"finish_reason":F}"#,
        r#"{"index":0,"delta":D,"stop_reason":N}"#,
    ];
    let mut fast_taken = 0;
    let mut checked = 0;
    for _ in 0..20_000 {
        let pick = |rng: &mut rand_chacha::ChaCha8Rng, xs: &[&str]| {
            xs[rng.random_range(0..xs.len())].to_string()
        };
        let fill = |rng: &mut rand_chacha::ChaCha8Rng, t: String| {
            let mut t = t;
            while let Some(i) = t.find('S') {
                let v = pick(rng, &strs);
                t.replace_range(i..i + 1, &v);
            }
            while let Some(i) = t.find('N') {
                let v = pick(rng, &nums);
                t.replace_range(i..i + 1, &v);
            }
            while let Some(i) = t.find('F') {
                let v = pick(
                    rng,
                    &["null", r#""stop""#, r#""length""#, r#""st\"op""#, "1"],
                );
                t.replace_range(i..i + 1, &v);
            }
            t
        };
        let delta = pick(&mut rng, &deltas);
        let delta = fill(&mut rng, delta);
        let n_choices = [1, 1, 1, 1, 0, 2][rng.random_range(0..6usize)];
        let mut cs = Vec::new();
        for _ in 0..n_choices {
            let c = pick(&mut rng, &choices).replace('D', &delta);
            cs.push(fill(&mut rng, c));
        }
        let mut members = vec![format!(r#""choices":[{}]"#, cs.join(","))];
        for (key, vals) in [
            ("id", &[r#""chatcmpl-1""#, r#""a\"b""#, "null", "3"][..]),
            (
                "object",
                &[r#""chat.completion.chunk""#, r#""error""#, "null"][..],
            ),
            ("created", &["1795982190", "-1.5e3", "01"][..]),
            ("model", &[r#""m/x""#, r#""m\/x""#, r#""m""#][..]),
            ("system_fingerprint", &["null", r#""fp""#][..]),
            ("usage", &["null", r#"{"completion_tokens":3}"#][..]),
            ("error", &["null", r#"{"message":"x"}"#][..]),
            ("timings", &[r#"{"predicted_n":3}"#][..]),
        ] {
            if rng.random_bool(0.5) {
                members.push(format!(r#""{key}":{}"#, pick(&mut rng, vals)));
            }
        }
        if rng.random_bool(0.05) {
            members.push(members[0].clone());
        }
        members.shuffle(&mut rng);
        let sep = [",", ", ", " ,\n"][rng.random_range(0..3usize)];
        let mut payload = format!("{{{}}}", members.join(sep));
        let mut at = rng.random_range(0..payload.len());
        while !payload.is_char_boundary(at) {
            at -= 1;
        }
        match rng.random_range(0..10u32) {
            0 => payload.truncate(at),
            1 => payload.push_str(" x"),
            2 => payload.insert(at, '\u{1}'),
            3 => payload = format!(" \t{payload}\r\n"),
            _ => {}
        }
        let fast = classify_with(&payload, true);
        let slow = classify_with(&payload, false);
        assert_eq!(fast, slow, "{payload}");
        fast_taken += usize::from(plain::scan(&payload).is_some());
        checked += 1;
    }
    assert!(checked > 19_000, "{checked}");
    assert!(
        fast_taken > 150,
        "the scanner took only {fast_taken} payloads"
    );
    // The shapes a stream is mostly made of take the scanner.
    for p in [
        r#"{"id":"chatcmpl-bench-00000007","object":"chat.completion.chunk","created":1795982190,"model":"bench","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" t123"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"cmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" the"}}],"created":1732112345,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b4150-ab","object":"chat.completion.chunk"}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":null,"content":"x","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":1}]}"#,
    ] {
        assert!(plain::scan(p).is_some(), "{p}");
        assert_eq!(classify_with(p, true), classify_with(p, false));
    }
}

/// Manual speed figures (ignored; docs/performance.md).
pub(crate) mod speed {
    /// The bench server's content delta.
    pub(crate) const DELTA: &str = r#"{"id":"chatcmpl-bench-00000042","object":"chat.completion.chunk","created":1795982190,"model":"bench","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" r30018884712541s30018906009400"},"logprobs":null,"finish_reason":null}]}"#;

    /// ns per call of `f`, the fastest of 20 rounds of `n` calls: this VM's speed moves
    /// by a third from second to second.
    pub(crate) fn fastest_ns(n: u32, mut f: impl FnMut(u32)) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            for k in 0..n {
                f(k);
            }
            best = best.min(t.elapsed().as_nanos() as f64 / f64::from(n));
        }
        best
    }

    /// Classification cost of the bench server's content delta (manual:
    /// `cargo test --release --lib classify_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn classify_speed() {
        for fast in [true, false] {
            let mut k = 0usize;
            let ns = fastest_ns(200_000, |_| {
                let i = super::super::classify_with(std::hint::black_box(DELTA), fast);
                k += i.text.map_or(0, |s| s.len());
            });
            println!("fast={fast}: {ns:.1} ns per classify ({k})");
        }
    }
}
