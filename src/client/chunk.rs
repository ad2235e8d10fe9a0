//! What one SSE `data:` payload of an OpenAI-compatible stream says.

use serde::Deserialize;

use crate::trace::ChunkKind;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChunkInfo {
    pub kind: Option<ChunkKind>,
    pub text: Option<String>,
    pub cid: Option<String>,
    pub finish: Option<String>,
    /// `usage.completion_tokens`, when this chunk reports usage.
    pub usage_tokens: Option<u32>,
    /// Keep the raw payload in the trace (not a plain delta).
    pub keep_raw: bool,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    object: Option<String>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    /// `/v1/completions` streams `text` instead of a delta.
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    completion_tokens: Option<u32>,
}

/// Classifies one `data:` payload.
pub fn classify(data: &str) -> ChunkInfo {
    if data.trim() == "[DONE]" {
        return ChunkInfo {
            kind: Some(ChunkKind::Done),
            ..Default::default()
        };
    }
    let Ok(w) = serde_json::from_str::<Wire>(data) else {
        return ChunkInfo {
            kind: Some(ChunkKind::Other),
            keep_raw: true,
            ..Default::default()
        };
    };
    let mut info = ChunkInfo {
        cid: w.id,
        ..Default::default()
    };
    if w.error.is_some() || w.object.as_deref() == Some("error") {
        info.kind = Some(ChunkKind::Error);
        info.keep_raw = true;
        return info;
    }
    info.usage_tokens = w.usage.as_ref().and_then(|u| u.completion_tokens);
    let mut kind = None;
    let mut text = String::new();
    for c in w.choices.iter().flatten() {
        if let Some(f) = &c.finish_reason {
            info.finish = Some(f.clone());
        }
        if let Some(t) = c.text.as_deref().filter(|t| !t.is_empty()) {
            text.push_str(t);
            kind = Some(ChunkKind::Content);
        }
        let Some(d) = &c.delta else { continue };
        if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
            text.push_str(t);
            kind = Some(ChunkKind::Content);
        }
        if let Some(t) = d
            .reasoning_content
            .as_deref()
            .or(d.reasoning.as_deref())
            .filter(|t| !t.is_empty())
        {
            text.push_str(t);
            kind.get_or_insert(ChunkKind::Reasoning);
        }
        for tc in d.tool_calls.iter().flatten() {
            if let Some(f) = &tc.function {
                if let Some(n) = &f.name {
                    text.push_str(n);
                }
                if let Some(a) = &f.arguments {
                    text.push_str(a);
                }
            }
            kind.get_or_insert(ChunkKind::ToolCall);
        }
    }
    if !text.is_empty() {
        info.text = Some(text);
    }
    info.kind = Some(match kind {
        Some(k) => k,
        None if info.finish.is_some() => ChunkKind::Finish,
        None if w.usage.is_some() => ChunkKind::Usage,
        None if w.choices.is_some() => ChunkKind::Role,
        None => ChunkKind::Other,
    });
    info.keep_raw = matches!(info.kind, Some(ChunkKind::Usage | ChunkKind::Other));
    info
}

#[cfg(test)]
mod tests {
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
        let c =
            classify(r#"{"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(
            (c.kind, c.finish.as_deref()),
            (Some(ChunkKind::Finish), Some("length"))
        );
        let c = classify(
            r#"{"id":"a","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}"#,
        );
        assert_eq!((c.kind, c.usage_tokens), (Some(ChunkKind::Usage), Some(7)));
        let c = classify(
            r#"{"id":"a","choices":[{"index":0,"delta":{}}],"usage":{"completion_tokens":2}}"#,
        );
        assert_eq!(c.kind, Some(ChunkKind::Usage));
        let c =
            classify(r#"{"error": {"message": "x", "type": null, "param": null, "code": "500"}}"#);
        assert_eq!(c.kind, Some(ChunkKind::Error));
        assert_eq!(classify("[DONE]").kind, Some(ChunkKind::Done));
        assert_eq!(classify("{oops").kind, Some(ChunkKind::Other));
        let c = classify(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
        );
        assert_eq!(
            (c.kind, c.text.as_deref()),
            (Some(ChunkKind::ToolCall), Some("f{\"a\""))
        );
        let c = classify(r#"{"choices":[{"index":0,"text":" x","finish_reason":null}]}"#);
        assert_eq!(c.kind, Some(ChunkKind::Content));
    }
}
