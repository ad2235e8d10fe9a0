//! The OpenAI wire format of the worker: request parsing and validation (errors in
//! OpenAI's error JSON), and the response bodies and SSE events it writes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::sim::text;

/// An OpenAI-shaped error.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<&'static str>,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            code: None,
            param: None,
            message: message.into(),
        }
    }
    pub fn bad(param: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match self.code {
            Some(c) => json!(c),
            None => json!(self.status.as_u16()),
        };
        let body = json!({"error": {"message": self.message, "type": self.kind,
                                    "param": self.param, "code": code}});
        (
            self.status,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// OpenAI-shaped error response.
pub fn openai_error(status: StatusCode, kind: &'static str, message: &str) -> Response {
    ApiError::new(status, kind, message).into_response()
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    prompt: Option<serde_json::Value>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    max_completion_tokens: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<serde_json::Value>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    stop: Option<serde_json::Value>,
    #[serde(default)]
    tools: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    tool_choice: Option<serde_json::Value>,
    #[serde(default)]
    n: Option<i64>,
}

/// A validated generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub chat: bool,
    pub stream: bool,
    pub model: String,
    pub prompt: String,
    pub prompt_tokens: u32,
    pub prompt_hash: u64,
    pub max_tokens: u32,
    /// Effective sampling seed: 0 for greedy (temperature 0), the request's seed, or a
    /// fresh random one for sampling without a seed.
    pub seed: u64,
    pub include_usage: bool,
    pub stop: Vec<String>,
    /// Function the answer calls (requests with `tools`, tool_choice not `none`).
    pub tool: Option<String>,
}

fn content_text(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::String(s) => {
            out.push_str(s);
            out.push(' ');
        }
        serde_json::Value::Array(parts) => {
            for p in parts {
                match p {
                    serde_json::Value::String(s) => {
                        out.push_str(s);
                        out.push(' ');
                    }
                    _ => {
                        if let Some(t) = p.get("text").and_then(|t| t.as_str()) {
                            out.push_str(t);
                            out.push(' ');
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn tool_name(tools: &[serde_json::Value], choice: Option<&serde_json::Value>) -> Option<String> {
    if let Some(c) = choice {
        if c.as_str() == Some("none") {
            return None;
        }
        if let Some(n) = c.pointer("/function/name").and_then(|n| n.as_str()) {
            return Some(n.to_string());
        }
    }
    let first = tools.first()?;
    Some(
        first
            .pointer("/function/name")
            .and_then(|n| n.as_str())
            .unwrap_or("tool")
            .to_string(),
    )
}

/// Prompt tokens of a request body as the worker counts them (whitespace words of the
/// messages or prompt); 0 for a body that is not JSON. The gateway uses it to price a
/// re-prefill (M8).
pub fn prompt_tokens_of(body: &[u8]) -> u32 {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return 0;
    };
    let mut s = String::new();
    for m in v["messages"].as_array().into_iter().flatten() {
        content_text(&m["content"], &mut s);
    }
    content_text(&v["prompt"], &mut s);
    text::count_tokens(&s)
}

/// Parses and validates a request body for `/v1/chat/completions` (`chat`) or
/// `/v1/completions`.
pub fn parse(
    body: &[u8],
    chat: bool,
    served: &str,
    max_model_len: u32,
) -> Result<GenRequest, ApiError> {
    let w: Wire = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("invalid JSON body: {e}")))?;
    let model = w.model.unwrap_or_else(|| served.to_string());
    if model != served {
        return Err(ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{model}` does not exist."),
            )
            .code("model_not_found")
        });
    }
    let mut prompt = String::new();
    if chat {
        let msgs = w
            .messages
            .ok_or_else(|| ApiError::bad("messages", "`messages` is required"))?;
        if msgs.is_empty() {
            return Err(ApiError::bad("messages", "`messages` must not be empty"));
        }
        for m in &msgs {
            if let Some(c) = m.get("content") {
                content_text(c, &mut prompt);
            }
        }
    } else {
        let p = w
            .prompt
            .ok_or_else(|| ApiError::bad("prompt", "`prompt` is required"))?;
        content_text(&p, &mut prompt);
    }
    if w.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad("n", "only n = 1 is supported"));
    }
    let max_tokens = w.max_completion_tokens.or(w.max_tokens).unwrap_or(16);
    if max_tokens < 1 {
        return Err(ApiError::bad(
            "max_tokens",
            format!("max_tokens must be at least 1, got {max_tokens}."),
        ));
    }
    let max_tokens = u32::try_from(max_tokens).unwrap_or(u32::MAX);
    let prompt_tokens = text::count_tokens(&prompt);
    let total = u64::from(prompt_tokens) + u64::from(max_tokens);
    if total > u64::from(max_model_len) {
        return Err(ApiError::bad(
            "max_tokens",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion."
            ),
        ));
    }
    let temperature = w.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad(
            "temperature",
            format!("temperature must be in [0, 2], got {temperature}"),
        ));
    }
    let seed = if temperature == 0.0 {
        0
    } else {
        match w.seed {
            Some(s) => s as u64,
            None => text::mix64(crate::wire::mono_ns() ^ u64::from(std::process::id())),
        }
    };
    let stop = match w.stop {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => vec![s],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::bad("stop", "`stop` must be a string or strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad("stop", "`stop` must be a string or strings")),
    };
    let stream = w.stream.unwrap_or(false);
    let include_usage = w
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if w.stream_options.is_some() && !stream {
        return Err(ApiError::bad(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    let tool = match (&w.tools, chat) {
        (Some(t), true) if !t.is_empty() => tool_name(t, w.tool_choice.as_ref()),
        _ => None,
    };
    Ok(GenRequest {
        chat,
        stream,
        model,
        prompt_hash: text::fnv1a(prompt.trim().as_bytes()),
        prompt_tokens,
        prompt,
        max_tokens,
        seed,
        include_usage,
        stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        tool,
    })
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::Value::from(s).to_string());
    }
}

fn sse(mut payload: String) -> Bytes {
    payload.insert_str(0, "data: ");
    payload.push_str("\n\n");
    Bytes::from(payload)
}

/// The SSE terminator.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Writes one response's events and bodies.
#[derive(Debug, Clone)]
pub struct Fmt {
    pub chat: bool,
    pub include_usage: bool,
    pub prompt_tokens: u32,
    /// Prompt tokens served from the prefix cache (`usage.prompt_tokens_details`).
    pub cached_tokens: u32,
    /// `{"id":…,"object":…,"created":…,"model":…,` of stream chunks.
    head: String,
    id: String,
    model: String,
    created: u64,
}

impl Fmt {
    pub fn new(
        chat: bool,
        id: String,
        model: String,
        include_usage: bool,
        prompt_tokens: u32,
    ) -> Fmt {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let object = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut head = String::from("{\"id\":");
        push_json_str(&mut head, &id);
        head.push_str(&format!(
            ",\"object\":\"{object}\",\"created\":{created},\"model\":"
        ));
        push_json_str(&mut head, &model);
        head.push(',');
        Fmt {
            chat,
            include_usage,
            prompt_tokens,
            cached_tokens: 0,
            head,
            id,
            model,
            created,
        }
    }

    fn chunk(&self, choice: &str) -> Bytes {
        let mut s = String::with_capacity(self.head.len() + choice.len() + 16);
        s.push_str(&self.head);
        s.push_str("\"choices\":[");
        s.push_str(choice);
        s.push_str("]}");
        sse(s)
    }

    /// One output token as an SSE event; the first chat delta carries the role.
    pub fn token(&self, t: &str, first: bool) -> Bytes {
        let mut c = String::with_capacity(96);
        if self.chat {
            c.push_str("{\"index\":0,\"delta\":{");
            if first {
                c.push_str("\"role\":\"assistant\",");
            }
            c.push_str("\"content\":");
            push_json_str(&mut c, t);
            c.push_str("},\"logprobs\":null,\"finish_reason\":null}");
        } else {
            c.push_str("{\"index\":0,\"text\":");
            push_json_str(&mut c, t);
            c.push_str(",\"logprobs\":null,\"finish_reason\":null}");
        }
        self.chunk(&c)
    }

    /// The event carrying `finish_reason`.
    pub fn finish(&self, reason: &str) -> Bytes {
        let c = if self.chat {
            format!(
                "{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}"
            )
        } else {
            format!(
                "{{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"{reason}\"}}"
            )
        };
        self.chunk(&c)
    }

    fn usage_json(&self, completion: u32) -> serde_json::Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
               "total_tokens": self.prompt_tokens + completion,
               "prompt_tokens_details": {"cached_tokens": self.cached_tokens}})
    }

    /// The final usage event (`stream_options.include_usage`): empty choices.
    pub fn usage(&self, completion: u32) -> Bytes {
        let mut s = self.head.clone();
        s.push_str("\"choices\":[],\"usage\":");
        s.push_str(&self.usage_json(completion).to_string());
        s.push('}');
        sse(s)
    }

    /// The events that end a stream: finish, usage when asked, `[DONE]`.
    pub fn tail(&self, reason: &str, completion: u32) -> Vec<Bytes> {
        let mut v = vec![self.finish(reason)];
        if self.include_usage {
            v.push(self.usage(completion));
        }
        v.push(Bytes::from_static(DONE));
        v
    }

    /// A whole (non-streaming) answer.
    pub fn whole(&self, text_out: &str, finish: &str, completion: u32) -> Bytes {
        let (object, choice) = if self.chat {
            (
                "chat.completion",
                json!({"index": 0, "message": {"role": "assistant", "content": text_out},
                       "logprobs": null, "finish_reason": finish}),
            )
        } else {
            (
                "text_completion",
                json!({"index": 0, "text": text_out, "logprobs": null, "finish_reason": finish}),
            )
        };
        Bytes::from(
            json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
                   "choices": [choice], "usage": self.usage_json(completion)})
            .to_string(),
        )
    }

    /// Tool-call deltas as OpenAI streams them: id and name first, then argument
    /// fragments of about `frag` characters.
    pub fn tool_events(&self, call_id: &str, name: &str, args: &str, frag: usize) -> Vec<Bytes> {
        let mut v = Vec::new();
        let first = json!({"index": 0, "delta": {"role": "assistant", "content": null,
            "tool_calls": [{"index": 0, "id": call_id, "type": "function",
                            "function": {"name": name, "arguments": ""}}]},
            "logprobs": null, "finish_reason": null});
        v.push(self.chunk(&first.to_string()));
        let chars: Vec<char> = args.chars().collect();
        for piece in chars.chunks(frag.max(1)) {
            let s: String = piece.iter().collect();
            let c = json!({"index": 0, "delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": s}}]}, "logprobs": null, "finish_reason": null});
            v.push(self.chunk(&c.to_string()));
        }
        v
    }

    /// A whole (non-streaming) answer that calls a tool.
    pub fn tool_whole(&self, call_id: &str, name: &str, args: &str, completion: u32) -> Bytes {
        let choice = json!({"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": args}}]},
            "logprobs": null, "finish_reason": "tool_calls"});
        Bytes::from(
            json!({"id": self.id, "object": "chat.completion", "created": self.created,
                   "model": self.model, "choices": [choice], "usage": self.usage_json(completion)})
            .to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::chunk::classify;
    use crate::wire::kinds::ChunkKind;

    fn p(body: serde_json::Value, chat: bool) -> Result<GenRequest, ApiError> {
        parse(body.to_string().as_bytes(), chat, "m", 100)
    }

    #[test]
    fn validation_errors_name_the_parameter() {
        let e = p(
            json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
            true,
        )
        .expect_err("unknown model");
        assert_eq!((e.status.as_u16(), e.code), (404, Some("model_not_found")));
        let e = p(json!({"messages": []}), true).expect_err("empty");
        assert_eq!(e.param, Some("messages"));
        let e = p(json!({"prompt": "a b", "max_tokens": 0}), false).expect_err("zero");
        assert_eq!(e.param, Some("max_tokens"));
        let e = p(json!({"prompt": "a b", "max_tokens": 99}), false).expect_err("too long");
        assert!(
            e.message.contains("maximum context length is 100"),
            "{}",
            e.message
        );
        assert!(parse(b"{", true, "m", 100).is_err());
    }

    #[test]
    fn greedy_ignores_the_seed_and_sampling_uses_it() {
        let a = p(json!({"prompt": "a", "temperature": 0, "seed": 5}), false).expect("ok");
        let b = p(json!({"prompt": "a", "temperature": 0.7, "seed": 5}), false).expect("ok");
        assert_eq!((a.seed, b.seed), (0, 5));
        let t = p(
            json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "lookup"}}]}),
            true,
        )
        .expect("ok");
        assert_eq!(t.tool.as_deref(), Some("lookup"));
    }

    #[test]
    fn events_classify_as_the_client_expects() {
        let f = Fmt::new(true, "c1".into(), "m".into(), true, 3);
        let data = |b: &Bytes| {
            let s = std::str::from_utf8(b).expect("utf8");
            s.trim_start_matches("data: ").trim_end().to_string()
        };
        let tok = classify(&data(&f.token(" ba", true)));
        assert_eq!(
            (tok.kind, tok.text.as_deref()),
            (Some(ChunkKind::Content), Some(" ba"))
        );
        assert_eq!(tok.cid.as_deref(), Some("c1"));
        let tail = f.tail("length", 1);
        assert_eq!(classify(&data(&tail[0])).finish.as_deref(), Some("length"));
        assert_eq!(classify(&data(&tail[1])).usage_tokens(), Some(1));
        assert_eq!(classify(&data(&tail[2])).kind, Some(ChunkKind::Done));
        let tools = f.tool_events("call_1", "lookup", "{\"q\":\"x\"}", 4);
        assert!(tools.len() >= 3);
        assert_eq!(classify(&data(&tools[1])).kind, Some(ChunkKind::ToolCall));
        let whole: serde_json::Value =
            serde_json::from_slice(&f.whole("hi", "stop", 1)).expect("json");
        assert_eq!(whole["choices"][0]["message"]["content"], "hi");
    }
}
