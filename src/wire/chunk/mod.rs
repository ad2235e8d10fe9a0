//! What one SSE `data:` payload of an OpenAI-compatible stream says.
//!
//! Parsed with borrowed strings (no copy unless the JSON escapes something) into only
//! the fields haq reads; everything else is skipped. Shapes read: OpenAI/vLLM/SGLang
//! chat and completions chunks, llama.cpp (role delta with `content: null`, usage on
//! `choices: []` with `timings`), LiteLLM (usage on an empty delta, in-band
//! `{"error": {...}}`), the seed's explicit error (M3).

use std::borrow::Cow;

use serde::Deserialize;

pub use info::{ChunkInfo, ToolFragment};

use crate::wire::kinds::{ChunkKind, InBandError, Usage};

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Choices<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
}

/// `choices`, read without a heap allocation for the usual single choice.
struct Choices<'a> {
    first: Option<WireChoice<'a>>,
    rest: Vec<WireChoice<'a>>,
}

impl<'a> IntoIterator for Choices<'a> {
    type Item = WireChoice<'a>;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<WireChoice<'a>>, std::vec::IntoIter<WireChoice<'a>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let first = seq.next_element()?;
                let mut rest = Vec::new();
                if first.is_some() {
                    while let Some(c) = seq.next_element()? {
                        rest.push(c);
                    }
                }
                Ok(Choices { first, rest })
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    /// A non-streaming chat answer.
    #[serde(default, borrow)]
    message: Option<WireDelta<'a>>,
    /// `/v1/completions` streams `text` instead of a delta.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<WireDetails>,
}

#[derive(Deserialize)]
struct WireDetails {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

fn nonempty(s: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    s.filter(|t| !t.is_empty())
}

/// Joins text pieces, borrowing while there is only one.
fn add<'a>(text: &mut Option<Cow<'a, str>>, piece: Cow<'a, str>) {
    match text {
        None => *text = Some(piece),
        Some(t) => t.to_mut().push_str(&piece),
    }
}

/// Reads an in-band error object (`{"error": {...}}` or `{"object": "error", ...}`).
pub fn read_error(v: &serde_json::Value) -> InBandError {
    let s = |k: &str| match &v[k] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let mut e = InBandError {
        n: 0,
        code: s("code"),
        message: s("message"),
        kind: s("type"),
        request_id: s("request_id"),
        partial_output: v["partial_output"].as_bool(),
        delivered_output_tokens: v["delivered_output_tokens"].as_u64(),
        retryable: v["retryable"].as_bool(),
        seed_shape: false,
    };
    e.seed_shape = e.code.as_deref() == Some("upstream_decode_interrupted")
        && e.request_id.is_some()
        && e.partial_output.is_some()
        && e.delivered_output_tokens.is_some()
        && e.retryable.is_some();
    e
}

/// Classifies one `data:` payload (streamed chunk or a whole non-streaming answer);
/// the result owns its text.
pub fn classify(data: &str) -> ChunkInfo<'static> {
    classify_ref(data).into_owned()
}

/// As [`classify`], borrowing the text fields from `data` where the JSON allows (the
/// client's read loop).
pub fn classify_ref(data: &str) -> ChunkInfo<'_> {
    classify_with(data, true)
}

/// `fast`: try the plain-delta scanner first (tests compare both ways).
fn classify_with(data: &str, fast: bool) -> ChunkInfo<'_> {
    // `[DONE]` with any whitespace is short: no scan of a long payload.
    if data.len() < 32 && data.trim() == "[DONE]" {
        return ChunkInfo {
            kind: Some(ChunkKind::Done),
            ..Default::default()
        };
    }
    if fast && let Some(p) = plain::scan(data) {
        return p.info();
    }
    let w = match serde_json::from_str::<Wire>(data) {
        Ok(w) => w,
        Err(_) => {
            return ChunkInfo {
                kind: Some(ChunkKind::Other),
                unparsable: serde_json::from_str::<serde::de::IgnoredAny>(data).is_err(),
                keep_raw: true,
                ..Default::default()
            };
        }
    };
    let mut info = ChunkInfo {
        cid: w.id,
        ..Default::default()
    };
    if w.error.is_some() || w.object.as_deref() == Some("error") {
        info.kind = Some(ChunkKind::Error);
        info.error = Some(in_band_error(w.error.as_ref(), data));
        info.keep_raw = true;
        return info;
    }
    info.usage = w.usage.as_ref().map(|u| Usage {
        prompt: u.prompt_tokens,
        completion: u.completion_tokens,
        cached: u
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens),
    });
    let has_choices = w.choices.is_some();
    let kind = read_choices(w.choices, &mut info);
    info.kind = Some(match kind {
        Some(k) => k,
        None if info.finish.is_some() => ChunkKind::Finish,
        None if w.usage.is_some() => ChunkKind::Usage,
        None if has_choices => ChunkKind::Role,
        None => ChunkKind::Other,
    });
    info.keep_raw = matches!(info.kind, Some(ChunkKind::Usage | ChunkKind::Other));
    info
}

/// The in-band error of an error payload: its `error` value, or the payload itself
/// when it is `{"object": "error", ...}`.
fn in_band_error(error: Option<&serde_json::Value>, data: &str) -> InBandError {
    match error {
        Some(e @ serde_json::Value::Object(_)) => read_error(e),
        Some(other) => InBandError {
            message: Some(other.to_string()),
            ..Default::default()
        },
        // `{"object": "error", "message": ..., "code": ...}` (vLLM's shape)
        None => serde_json::from_str::<serde_json::Value>(data)
            .map(|v| read_error(&v))
            .unwrap_or_default(),
    }
}

/// Reads the choices into `info` (finish reason, text, tool fragments); returns the
/// kind their deltas make the chunk, if any: content over reasoning over tool call.
#[inline]
fn read_choices<'a>(choices: Option<Choices<'a>>, info: &mut ChunkInfo<'a>) -> Option<ChunkKind> {
    let mut kind = None;
    let mut text = None;
    for c in choices.into_iter().flatten() {
        if let Some(f) = c.finish_reason {
            info.finish = Some(f);
        }
        if let Some(t) = nonempty(c.text) {
            add(&mut text, t);
            kind = Some(ChunkKind::Content);
        }
        let Some(d) = c.delta.or(c.message) else {
            continue;
        };
        if let Some(t) = nonempty(d.content) {
            add(&mut text, t);
            kind = Some(ChunkKind::Content);
        }
        if let Some(t) = nonempty(d.reasoning_content).or(nonempty(d.reasoning)) {
            add(&mut text, t);
            kind.get_or_insert(ChunkKind::Reasoning);
        }
        for (i, tc) in d.tool_calls.into_iter().flatten().enumerate() {
            read_tool_call(i, tc, &mut text, info);
            kind.get_or_insert(ChunkKind::ToolCall);
        }
    }
    info.text = text;
    kind
}

/// Reads the `i`-th tool call of a delta: its name and arguments join the text, its
/// fragment goes to `info`.
#[inline]
fn read_tool_call<'a>(
    i: usize,
    tc: WireToolCall<'a>,
    text: &mut Option<Cow<'a, str>>,
    info: &mut ChunkInfo<'a>,
) {
    let (name, arguments) = match tc.function {
        Some(f) => (nonempty(f.name), nonempty(f.arguments)),
        None => (None, None),
    };
    if let Some(n) = &name {
        add(text, n.clone());
    }
    if let Some(a) = &arguments {
        add(text, a.clone());
    }
    info.tools.push(ToolFragment {
        index: tc.index.unwrap_or(i as u32),
        id: tc.id.map(Cow::into_owned),
        name: name.map(Cow::into_owned),
        arguments: arguments.map(Cow::into_owned),
    });
}

mod info;
mod plain;

#[cfg(test)]
pub(crate) mod tests;
