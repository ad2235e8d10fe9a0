//! The worker's generation request: the body of `/v1/chat/completions` or
//! `/v1/completions` parsed and validated (errors name the parameter, in OpenAI's error
//! JSON), and a body's prompt token count as the worker counts it.

use axum::http::StatusCode;
use serde::Deserialize;

use super::api::ApiError;
use crate::sim::text;

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
    /// vLLM's: the last (assistant) message is the start of the answer, to be continued.
    #[serde(default)]
    continue_final_message: bool,
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
    /// Tokens of the answer the prompt already ends with (a continuation: a completions
    /// prompt, or a chat with `continue_final_message`): generation goes on from there.
    pub resumed: u32,
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
/// `/v1/completions`. The checks run in this order; the first that fails is the error.
pub fn parse(
    body: &[u8],
    chat: bool,
    served: &str,
    max_model_len: u32,
) -> Result<GenRequest, ApiError> {
    let w: Wire = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad("body", format!("invalid JSON body: {e}")))?;
    let model = w.model.clone().unwrap_or_else(|| served.to_string());
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
    let prompt = prompt_of(&w, chat)?;
    if w.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad("n", "only n = 1 is supported"));
    }
    let prompt_tokens = text::count_tokens(&prompt);
    let max_tokens = max_tokens_of(&w, prompt_tokens, max_model_len)?;
    let seed = seed_of(&w)?;
    let stop = stop_of(&w)?;
    let (stream, include_usage) = streaming_of(&w)?;
    let tool = match (&w.tools, chat) {
        (Some(t), true) if !t.is_empty() => tool_name(t, w.tool_choice.as_ref()),
        _ => None,
    };
    // A prompt that ends with the answer to the rest of it is continued (Q9).
    let own = (!chat || w.continue_final_message)
        .then(|| text::own_tail(&prompt, seed))
        .flatten();
    let (prompt_hash, resumed) = own.unwrap_or((text::fnv1a(prompt.trim().as_bytes()), 0));
    Ok(GenRequest {
        chat,
        stream,
        model,
        resumed,
        prompt_hash,
        prompt_tokens,
        prompt,
        max_tokens,
        seed,
        include_usage,
        stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        tool,
    })
}

/// The prompt text: the chat messages' contents, or the completion prompt.
fn prompt_of(w: &Wire, chat: bool) -> Result<String, ApiError> {
    let mut prompt = String::new();
    if chat {
        let msgs = w
            .messages
            .as_ref()
            .ok_or_else(|| ApiError::bad("messages", "`messages` is required"))?;
        if msgs.is_empty() {
            return Err(ApiError::bad("messages", "`messages` must not be empty"));
        }
        for m in msgs {
            if let Some(c) = m.get("content") {
                content_text(c, &mut prompt);
            }
        }
    } else {
        let p = w
            .prompt
            .as_ref()
            .ok_or_else(|| ApiError::bad("prompt", "`prompt` is required"))?;
        content_text(p, &mut prompt);
    }
    Ok(prompt)
}

/// `max_completion_tokens` (or `max_tokens`, default 16): at least 1, and within the
/// context length with the prompt's `prompt_tokens`.
fn max_tokens_of(w: &Wire, prompt_tokens: u32, max_model_len: u32) -> Result<u32, ApiError> {
    let max_tokens = w.max_completion_tokens.or(w.max_tokens).unwrap_or(16);
    if max_tokens < 1 {
        return Err(ApiError::bad(
            "max_tokens",
            format!("max_tokens must be at least 1, got {max_tokens}."),
        ));
    }
    let max_tokens = u32::try_from(max_tokens).unwrap_or(u32::MAX);
    let total = u64::from(prompt_tokens) + u64::from(max_tokens);
    if total > u64::from(max_model_len) {
        return Err(ApiError::bad(
            "max_tokens",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion."
            ),
        ));
    }
    Ok(max_tokens)
}

/// The effective sampling seed (see [`GenRequest::seed`]); `temperature` in [0, 2].
fn seed_of(w: &Wire) -> Result<u64, ApiError> {
    let temperature = w.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad(
            "temperature",
            format!("temperature must be in [0, 2], got {temperature}"),
        ));
    }
    Ok(if temperature == 0.0 {
        0
    } else {
        match w.seed {
            Some(s) => s as u64,
            None => text::mix64(crate::wire::mono_ns() ^ u64::from(std::process::id())),
        }
    })
}

/// The stop strings: none, one string, or an array of strings.
fn stop_of(w: &Wire) -> Result<Vec<String>, ApiError> {
    Ok(match &w.stop {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::bad("stop", "`stop` must be a string or strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad("stop", "`stop` must be a string or strings")),
    })
}

/// (`stream`, `stream_options.include_usage`); stream options only with a stream.
fn streaming_of(w: &Wire) -> Result<(bool, bool), ApiError> {
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
    Ok((stream, include_usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn a_prompt_ending_with_its_own_answer_is_continued() {
        let h = text::fnv1a(b"why migrate");
        let said: String = (0..3).map(|i| text::token(h, 0, i)).collect();
        let c = p(
            json!({"prompt": format!("why migrate{said}"), "temperature": 0}),
            false,
        )
        .expect("ok");
        assert_eq!((c.prompt_hash, c.resumed, c.prompt_tokens), (h, 3, 5));
        let msgs = json!([{"role": "user", "content": "why migrate"},
                          {"role": "assistant", "content": said.trim()}]);
        let c = p(
            json!({"messages": msgs, "continue_final_message": true, "temperature": 0}),
            true,
        )
        .expect("ok");
        assert_eq!((c.prompt_hash, c.resumed), (h, 3));
        // Without the flag, the assistant turn is history: a new answer.
        let c = p(json!({"messages": msgs, "temperature": 0}), true).expect("ok");
        assert_eq!(c.resumed, 0);
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
}
