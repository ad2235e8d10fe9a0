//! The OpenAI wire format of the worker: errors in OpenAI's error JSON, and the response
//! bodies and SSE events it writes. Requests are parsed in `request.rs`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

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

/// vLLM's `EngineDeadError` message: the engine core died, the API server lives on.
pub const ENGINE_DEAD: &str =
    "EngineCore encountered an issue. See stack trace (above) for the root cause.";

/// The event vLLM's OpenAI server writes into a stream whose engine died: its streaming
/// error helper's default shape (`BadRequestError`, code 400, whatever the cause), then
/// `[DONE]` — a clean end after an error, which a gateway must not pass on as one.
pub fn engine_dead_events() -> [Bytes; 2] {
    let ev = json!({"error": {"object": "error", "message": ENGINE_DEAD,
                              "type": "BadRequestError", "param": null, "code": 400}});
    [sse(ev.to_string()), Bytes::from_static(DONE)]
}

/// A new request to a dead engine: HTTP 500.
pub fn engine_dead_response() -> Response {
    openai_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        ENGINE_DEAD,
    )
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
