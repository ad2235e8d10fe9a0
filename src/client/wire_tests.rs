//! Real wire captures (tests/data/wire/, see its README) replayed byte for byte and
//! split at every boundary through the SSE parser and the stream classifier; and a
//! seeded property test: any split of any event stream gives the same events.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::stream::{Cut, Ending, replay};
use crate::trace::{ChunkKind, Event, Outcome};
use crate::wire::sse::{SseItem, SseParser, parse_all};

const LLAMA: &[u8] = include_bytes!("../../tests/data/wire/llamacpp-chat-stream-with-usage.sse");
const LITELLM: &[u8] =
    include_bytes!("../../tests/data/wire/litellm-upstream-killed-mid-stream.sse");
const ROUTER: &[u8] =
    include_bytes!("../../tests/data/wire/router-upstream-killed-body-before-cut.sse");

/// The router capture as reqwest reports it: a decode error whose source is an
/// `UnexpectedEof` from hyper.
fn router_cut() -> Cut {
    let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "unexpected EOF");
    super::classify_body_error(&io)
}

fn kinds(events: &[Event]) -> Vec<ChunkKind> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Chunk { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect()
}

fn text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Chunk {
                kind,
                text: Some(t),
                ..
            } if kind.is_delta() => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// Same events and same ending, ignoring arrival stamps (which count pieces).
fn same(a: &(Vec<Event>, Ending), b: &(Vec<Event>, Ending)) -> bool {
    let strip = |evs: &[Event]| -> Vec<Event> {
        evs.iter()
            .cloned()
            .map(|mut e| {
                if let Event::Chunk { t, .. } = &mut e {
                    *t = 0;
                }
                e
            })
            .collect()
    };
    strip(&a.0) == strip(&b.0) && a.1 == b.1
}

/// Every split into two pieces through parser and classifier, for positions `at`.
fn every_split(body: &[u8], cut: Cut, at: impl Iterator<Item = usize>) -> (Vec<Event>, Ending) {
    let whole = replay([body], cut.clone());
    for i in at {
        let split = replay([&body[..i], &body[i..]], cut.clone());
        assert!(same(&whole, &split), "split at {i} differs");
    }
    // byte by byte, too
    let bytes = replay(body.chunks(1), cut);
    assert!(same(&whole, &bytes), "byte-by-byte differs");
    whole
}

#[test]
fn llamacpp_stream_with_usage_completes_with_the_server_token_count() {
    // The parser alone at every boundary (cheap), then the whole pipeline at every
    // boundary of the first and last events (role, finish, usage, [DONE]) and a stride
    // through the middle.
    let whole = parse_all(LLAMA);
    for i in 0..=LLAMA.len() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(&LLAMA[..i], &mut out);
        p.push(&LLAMA[i..], &mut out);
        p.finish(&mut out);
        assert_eq!(out, whole, "parser split at {i}");
    }
    let n = LLAMA.len();
    let at = (0..700)
        .chain(n - 1300..=n)
        .chain((700..n - 1300).step_by(97));
    let (events, end) = every_split(LLAMA, Cut::Eof, at);
    let k = kinds(&events);
    assert_eq!(
        k[0],
        ChunkKind::Role,
        "role delta with content null is not output"
    );
    assert_eq!(k.iter().filter(|k| **k == ChunkKind::Content).count(), 64);
    assert_eq!(
        k[k.len() - 3..],
        [ChunkKind::Finish, ChunkKind::Usage, ChunkKind::Done]
    );
    assert_eq!(end.outcome, Outcome::Completed);
    assert_eq!((end.tokens, end.counted), (64, 64));
    assert_eq!(end.usage.and_then(|u| u.prompt), Some(34));
    assert_eq!(end.usage.and_then(|u| u.cached), Some(0));
    assert_eq!(end.finish.as_deref(), Some("length"));
    assert!(end.done);
    assert!(text(&events).starts_with("Write a short paragraph about the history"));
    // the usage chunk keeps its raw payload, `timings` included, as evidence
    let raw = events.iter().find_map(|e| match e {
        Event::Chunk {
            kind: ChunkKind::Usage,
            raw,
            ..
        } => raw.clone(),
        _ => None,
    });
    assert!(raw.is_some_and(|r| r.contains("\"timings\"")));
}

#[test]
fn litellm_in_band_error_then_clean_end_is_an_explicit_error() {
    let (events, end) = every_split(LITELLM, Cut::Eof, 0..=LITELLM.len());
    assert_eq!(end.outcome, Outcome::ExplicitError);
    let e = end.error.expect("error read");
    assert_eq!(e.code.as_deref(), Some("500"));
    assert!(
        e.message
            .as_deref()
            .is_some_and(|m| m.contains("APIConnectionError"))
    );
    assert!(!e.seed_shape);
    assert_eq!(e.n, 6, "the error is the 7th event");
    assert!(!end.done);
    assert_eq!(text(&events), "Write a short paragraph about");
    assert_eq!(end.counted, 5);
}

#[test]
fn router_cut_is_a_reset_mid_stream_with_the_partial_text_kept() {
    let (events, end) = every_split(ROUTER, router_cut(), 0..=ROUTER.len());
    assert_eq!(end.outcome, Outcome::Reset, "{end:?}");
    assert!(
        end.detail
            .as_deref()
            .is_some_and(|d| d.contains("unexpected EOF"))
    );
    assert_eq!(text(&events), "Write a short paragraph about the");
    assert_eq!(kinds(&events)[0], ChunkKind::Role);
    assert_eq!((end.counted, end.tokens), (6, 6));
    assert!(end.finish.is_none() && end.usage.is_none() && !end.done);
    // The same bytes ending cleanly (no cut reported) are a truncation, never success.
    let (_, clean) = replay([ROUTER], Cut::Eof);
    assert_eq!(clean.outcome, Outcome::Truncated);
}

#[test]
fn vllm_and_sglang_shapes() {
    // vLLM: role delta first (content ""), deltas, finish with stop_reason, usage on
    // `choices: []` (stream_options.include_usage), [DONE].
    let body = concat!(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":8,\"completion_tokens\":3}}\n\n",
        "data: [DONE]\n\n"
    );
    let (events, end) = every_split(body.as_bytes(), Cut::Eof, 0..=body.len());
    assert_eq!(end.outcome, Outcome::Completed);
    assert_eq!(text(&events), "Hi there");
    assert_eq!(
        (end.tokens, end.counted),
        (3, 2),
        "usage wins; the mismatch is visible"
    );
    // SGLang: reasoning deltas before content; tool calls streamed in fragments.
    let body = concat!(
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":null}}]}\n\n",
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\": \"}}]}}]}\n\n",
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]}}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"completion_tokens\":9}}\n\n",
        "data: [DONE]\n\n"
    );
    let (events, end) = every_split(body.as_bytes(), Cut::Eof, 0..=body.len());
    assert_eq!(end.outcome, Outcome::Completed);
    assert_eq!(end.finish.as_deref(), Some("tool_calls"));
    let tc = &end.tool_calls[0];
    assert_eq!(
        (tc.id.as_deref(), tc.name.as_str(), tc.arguments.as_str()),
        (Some("call_9"), "get_weather", "{\"city\": \"Paris\"}")
    );
    assert!(tc.arguments_valid);
    let k = kinds(&events);
    assert_eq!(k[1], ChunkKind::Reasoning);
    assert!(k.contains(&ChunkKind::Comment), "keep-alives are seen");
}

#[test]
fn seed_explicit_error_is_recognised_with_its_fields() {
    let body = concat!(
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"error\":{\"code\":\"upstream_decode_interrupted\",\"message\":\"m\",\"request_id\":\"r7\",\"partial_output\":true,\"delivered_output_tokens\":1,\"retryable\":false}}\n\n",
    );
    let (_, end) = every_split(body.as_bytes(), Cut::Eof, 0..=body.len());
    assert_eq!(end.outcome, Outcome::ExplicitError);
    let e = end.error.expect("error");
    assert!(e.seed_shape);
    assert_eq!(
        (
            e.request_id.as_deref(),
            e.delivered_output_tokens,
            e.retryable
        ),
        (Some("r7"), Some(1), Some(false))
    );
}

#[test]
fn malformed_and_unterminated_events() {
    let (_, end) = replay(
        [&b"data: {\"choices\":[]}\n\ndata: {not json\n\ndata: [DONE]\n\n"[..]],
        Cut::Eof,
    );
    assert_eq!(end.outcome, Outcome::Malformed);
    assert!(end.detail.as_deref().is_some_and(|d| d.contains("event 1")));
    let (_, end) = replay(
        [
            &b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choi"
                [..],
        ],
        Cut::Eof,
    );
    assert_eq!(end.outcome, Outcome::Truncated);
    assert!(
        end.detail
            .as_deref()
            .is_some_and(|d| d.contains("inside an event"))
    );
    let (_, end) = replay(
        [&b"event: error\ndata: upstream exploded\n\n"[..]],
        Cut::Eof,
    );
    assert_eq!(end.outcome, Outcome::ExplicitError);
}

/// A random event stream over the shapes the parser must handle: CR, LF and CRLF line
/// ends, comments, multi-line data, fields with and without the space, unknown fields,
/// a BOM, UTF-8 text, a final event with no blank line.
fn random_body(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = Vec::new();
    if rng.random_bool(0.2) {
        b.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let eols: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
    let words = ["x", "{\"a\":1}", "été", "[DONE]", "", " sp", "a:b", "日本"];
    for _ in 0..rng.random_range(0..12) {
        let eol = eols[rng.random_range(0..3)];
        match rng.random_range(0..10) {
            0 => b.extend_from_slice(b": keep-alive"),
            1 => b.extend_from_slice(b"event: message"),
            2 => b.extend_from_slice(b"id: 42"),
            3 => b.extend_from_slice(b"retry: 100"),
            4 => {} // blank line: dispatch
            5 => b.extend_from_slice(b"data"),
            _ => {
                b.extend_from_slice(if rng.random_bool(0.5) {
                    b"data: "
                } else {
                    b"data:"
                });
                b.extend_from_slice(words[rng.random_range(0..words.len())].as_bytes());
            }
        }
        b.extend_from_slice(eol);
        if rng.random_bool(0.4) {
            b.extend_from_slice(eol);
        }
    }
    b
}

fn parse_in(body: &[u8], cuts: &[usize]) -> Vec<SseItem> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts {
        p.push(&body[prev..c], &mut out);
        prev = c;
    }
    p.push(&body[prev..], &mut out);
    p.finish(&mut out);
    out
}

#[test]
fn property_any_split_of_any_stream_gives_the_same_events() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5EED);
    for _ in 0..400 {
        let body = random_body(&mut rng);
        let whole = parse_all(&body);
        // every single split point, then random multi-way splits
        for i in 0..=body.len() {
            assert_eq!(parse_in(&body, &[i]), whole, "{body:?} split at {i}");
        }
        for _ in 0..20 {
            let mut cuts: Vec<usize> = (0..rng.random_range(1..8))
                .map(|_| rng.random_range(0..=body.len()))
                .collect();
            cuts.sort_unstable();
            assert_eq!(parse_in(&body, &cuts), whole, "{body:?} cuts {cuts:?}");
        }
    }
}

/// Issue #4 item 2: response headers are recorded in order, bounded in number and size.
#[test]
fn response_headers_are_recorded_in_order_and_bounded() {
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    let mut h = HeaderMap::new();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.append("x-haq-worker", HeaderValue::from_static("w1"));
    let long = "é".repeat(200); // 400 bytes
    h.insert("x-long", HeaderValue::from_str(&long).expect("value"));
    let (list, omitted) = super::record_headers(&h);
    assert_eq!(omitted, 0);
    assert_eq!(list[0], ("content-type".into(), "text/event-stream".into()));
    assert_eq!(list[1], ("x-haq-worker".into(), "w1".into()));
    let cut = &list[2].1;
    assert!(
        cut.ends_with('…') && cut.len() <= super::MAX_HEADER_BYTES + 3,
        "{cut}"
    );
    assert!(long.starts_with(cut.trim_end_matches('…')));
    for i in 0..40 {
        h.append(
            HeaderName::from_bytes(format!("x-h{i}").as_bytes()).expect("name"),
            HeaderValue::from_static("v"),
        );
    }
    let (list, omitted) = super::record_headers(&h);
    assert_eq!((list.len(), omitted), (super::MAX_HEADERS, 43 - 32));
}
