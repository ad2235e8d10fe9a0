//! Request bodies: deterministic prompt text (a function of the seed and the request,
//! never of time), shared prefixes, session history, tools, structured output.

use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::Planned;
use super::marker::BodyMarker;
use crate::plan::Plan;
use crate::scenario::{Api, ResponseFormat, ToolChoice};
use crate::wire::hash::mix64;

const WORDS: &[&str] = &[
    "the",
    "cluster",
    "serves",
    "tokens",
    "while",
    "a",
    "replica",
    "fails",
    "and",
    "router",
    "keeps",
    "every",
    "stream",
    "honest",
    "about",
    "what",
    "client",
    "already",
    "saw",
    "before",
    "retry",
    "budget",
    "limits",
    "prefill",
    "storms",
    "when",
    "many",
    "gpus",
    "drop",
    "at",
    "once",
    "so",
    "queue",
    "grows",
    "slowly",
    "under",
    "load",
    "latency",
    "stays",
    "inside",
    "agreed",
    "envelope",
    "of",
    "service",
    "level",
    "objective",
    "for",
    "protected",
    "traffic",
    "during",
    "degraded",
    "capacity",
    "window",
    "until",
    "replacement",
    "becomes",
    "ready",
    "again",
    "with",
    "warm",
    "cache",
    "blocks",
    "shared",
    "prefix",
];

/// Mooncake's block size: one hash id stands for 512 prompt tokens.
pub const HASH_BLOCK_TOKENS: u32 = 512;

fn words(rng: &mut ChaCha8Rng, n: u32, out: &mut String) {
    for _ in 0..n {
        if !out.is_empty() && !out.ends_with(' ') {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
}

/// Deterministic prompt text of exactly `tokens` words for request `idx`.
pub fn prompt_text(seed: u64, idx: u64, tokens: u32) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ idx);
    let mut s = String::with_capacity(tokens as usize * 7);
    words(&mut rng, tokens, &mut s);
    s
}

/// A shared system prompt: the same text for every request of (class, group).
pub fn prefix_text(seed: u64, class: usize, group: u32, tokens: u32) -> String {
    let key = mix64(seed ^ 0x5157_3F1A) ^ mix64(class as u64 + 1) ^ mix64(u64::from(group) + 77);
    prompt_text(key, u64::MAX, tokens)
}

/// A synthetic assistant answer for an earlier session turn.
fn answer_text(seed: u64, idx: u64, tokens: u32) -> String {
    prompt_text(mix64(seed ^ 0xA5A5), idx, tokens)
}

/// A prompt made of Mooncake hash blocks: equal ids give equal text, so requests that
/// share block ids share a prompt prefix (prefix-cache effects replay as recorded).
pub fn hashed_text(seed: u64, hash_ids: &[u32], tokens: u32) -> String {
    let mut s = String::with_capacity(tokens as usize * 7);
    let mut left = tokens;
    for h in hash_ids {
        if left == 0 {
            break;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0xB10C) ^ mix64(u64::from(*h)));
        let n = left.min(HASH_BLOCK_TOKENS);
        words(&mut rng, n, &mut s);
        left -= n;
    }
    if left > 0 {
        let mut rng = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0x7A11) ^ u64::from(tokens));
        words(&mut rng, left, &mut s);
    }
    s
}

const TOOLS: [(&str, &str, &[&str]); 8] = [
    ("get_weather", "Current weather for a city", &["city"]),
    ("lookup_order", "Status of a customer order", &["order_id"]),
    (
        "search_docs",
        "Search the product documentation",
        &["query"],
    ),
    (
        "create_ticket",
        "Open a support ticket",
        &["title", "priority"],
    ),
    ("get_stock_price", "Latest price of a stock", &["symbol"]),
    (
        "convert_currency",
        "Convert an amount between currencies",
        &["amount", "from", "to"],
    ),
    ("schedule_meeting", "Book a meeting", &["time", "attendees"]),
    ("translate", "Translate a text", &["text", "language"]),
];

fn tools(count: u32) -> Value {
    let defs: Vec<Value> = TOOLS
        .iter()
        .take(count as usize)
        .map(|(name, desc, args)| {
            let props: serde_json::Map<String, Value> = args
                .iter()
                .map(|a| (a.to_string(), json!({"type": "string", "description": a})))
                .collect();
            json!({"type": "function", "function": {
                "name": name, "description": desc,
                "parameters": {"type": "object", "properties": props, "required": args}}})
        })
        .collect();
    Value::Array(defs)
}

fn response_format(f: ResponseFormat) -> Value {
    match f {
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema => json!({"type": "json_schema", "json_schema": {
            "name": "answer", "strict": true,
            "schema": {"type": "object", "additionalProperties": false,
                       "required": ["answer", "confidence"],
                       "properties": {"answer": {"type": "string"},
                                      "confidence": {"type": "number"}}}}}),
    }
}

/// The text of planted prompt `k` (`workload.cache_truth`, M6): the same for every
/// request that carries it.
pub fn planted_text(seed: u64, k: u32, tokens: u32) -> String {
    prompt_text(mix64(seed ^ 0xCAC4_E7A0), u64::from(k), tokens)
}

/// A planted prompt's body: the class's API and streaming, nothing else of the class.
fn planted_body(plan: &Plan, p: &Planned, k: u32, marker: &BodyMarker) -> Bytes {
    let class = &plan.mix.classes[p.class];
    let text = planted_text(plan.seed, k, p.prompt_tokens);
    let mut body = serde_json::Map::new();
    body.insert("model".into(), plan.scenario.target.model.clone().into());
    match class.api {
        Api::Chat => body.insert(
            "messages".into(),
            json!([{"role": "user", "content": text}]),
        ),
        Api::Completions => body.insert("prompt".into(), text.into()),
    };
    body.insert("max_tokens".into(), p.max_tokens.into());
    body.insert("temperature".into(), 0.into());
    body.insert("seed".into(), plan.seed.into());
    body.insert("stream".into(), p.stream.into());
    if p.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    marker.put(&mut body, &p.id);
    Bytes::from(Value::Object(body).to_string())
}

/// The JSON body of request `p`, with its marker.
pub fn request_body(plan: &Plan, p: &Planned, marker: &BodyMarker) -> Bytes {
    if let Some(k) = p.planted {
        return planted_body(plan, p, k, marker);
    }
    let class = &plan.mix.classes[p.class];
    let seed = plan.seed;
    let prompt = match &p.hash_ids {
        Some(h) => hashed_text(seed, h, p.prompt_tokens),
        None => prompt_text(seed, p.idx, p.prompt_tokens),
    };
    let prefix = p.prefix.map(|(g, n)| prefix_text(seed, p.class, g, n));
    let mut body = serde_json::Map::new();
    body.insert("model".into(), plan.scenario.target.model.clone().into());
    match class.api {
        Api::Chat => {
            let mut messages = Vec::new();
            if let Some(s) = prefix {
                messages.push(json!({"role": "system", "content": s}));
            }
            for (i, pt, ot) in p.session.iter().flat_map(|s| s.history.iter()) {
                messages.push(json!({"role": "user", "content": prompt_text(seed, *i, *pt)}));
                messages.push(json!({"role": "assistant", "content": answer_text(seed, *i, *ot)}));
            }
            messages.push(json!({"role": "user", "content": prompt}));
            body.insert("messages".into(), Value::Array(messages));
        }
        Api::Completions => {
            let mut text = prefix.unwrap_or_default();
            for (i, pt, ot) in p.session.iter().flat_map(|s| s.history.iter()) {
                text.push_str(&format!(
                    "\n{}\n{}",
                    prompt_text(seed, *i, *pt),
                    answer_text(seed, *i, *ot)
                ));
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&prompt);
            body.insert("prompt".into(), text.into());
        }
    }
    body.insert("max_tokens".into(), p.max_tokens.into());
    body.insert("temperature".into(), 0.into());
    body.insert("seed".into(), seed.into());
    if let Some(t) = &class.tools {
        body.insert("tools".into(), tools(t.count));
        let choice = match t.choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
        };
        body.insert("tool_choice".into(), choice.into());
    }
    if let Some(f) = class.response_format {
        body.insert("response_format".into(), response_format(f));
    }
    body.insert("stream".into(), p.stream.into());
    if p.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    marker.put(&mut body, &p.id);
    Bytes::from(Value::Object(body).to_string())
}

/// The path (relative to the base URL) for a class's API.
pub fn api_path(api: Api) -> &'static str {
    match api {
        Api::Chat => "/chat/completions",
        Api::Completions => "/completions",
    }
}
