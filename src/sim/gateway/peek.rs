//! What the gateway reads of the SSE events it relays: whether a payload is an output
//! delta and whether it ends the answer, found without parsing the JSON; and one event
//! written back as SSE.

use axum::body::Bytes;

use crate::wire::chunk;
use crate::wire::kinds::ChunkKind;

/// What the gateway needs to know of one SSE payload, found without parsing the JSON
/// (the gateway relays ~10^5 events/s in `haq sim bench`): whether it is an output delta
/// (non-empty content or text, reasoning, a tool call) and whether it ends the answer
/// (`[DONE]` or a finish_reason). Agrees with `wire::chunk::classify` on every event
/// the sim worker writes (tested).
pub struct Peek {
    pub delta: bool,
    pub finished: bool,
    /// An in-band error event (`{"error": …}`: an engine that died mid-stream).
    pub error: bool,
}

pub fn peek(data: &str) -> Peek {
    let d = data.trim();
    if d == "[DONE]" {
        return Peek {
            delta: false,
            finished: true,
            error: false,
        };
    }
    let non_empty = |key: &str| {
        d.match_indices(key)
            .any(|(i, _)| !d[i + key.len()..].starts_with('"'))
    };
    let compact = !d.contains("\": ");
    if !compact || d.starts_with("{\"error\"") {
        // Not the sim's compact format, or an error: ask the full classifier.
        let info = chunk::classify(d);
        return Peek {
            delta: info.kind.unwrap_or(ChunkKind::Other).is_delta(),
            finished: info.kind == Some(ChunkKind::Done) || info.finish.is_some(),
            error: info.kind == Some(ChunkKind::Error),
        };
    }
    Peek {
        delta: non_empty("\"content\":\"")
            || non_empty("\"text\":\"")
            || non_empty("\"reasoning_content\":\"")
            || d.contains("\"tool_calls\":["),
        finished: d.contains("\"finish_reason\":\""),
        error: false,
    }
}

pub fn sse(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::worker::api::Fmt;

    #[test]
    fn peek_agrees_with_the_full_classifier_on_every_sim_event() {
        let mut events = Vec::new();
        for chat in [true, false] {
            let f = Fmt::new(chat, "c1".into(), "m".into(), true, 3);
            events.push(f.token(" ba", true));
            events.push(f.token(" ba", false));
            events.push(f.token("", false));
            events.extend(f.tail("length", 2));
            events.extend(f.tail("stop", 2));
            if chat {
                events.extend(f.tool_events("call_1", "lookup", "{\"q\": \"x\"}", 4));
                events.extend(f.tail("tool_calls", 2));
            }
        }
        let mut payloads: Vec<String> = events
            .iter()
            .map(|b| {
                let s = std::str::from_utf8(b).expect("utf8");
                s.trim_start_matches("data: ").trim_end().to_string()
            })
            .collect();
        payloads.push(r#"{"error": {"code": "upstream_decode_interrupted"}}"#.into());
        for b in crate::sim::worker::api::engine_dead_events() {
            let s = std::str::from_utf8(&b).expect("utf8").to_string();
            payloads.push(s.trim_start_matches("data: ").trim_end().to_string());
        }
        payloads.push(
            r#"{"choices": [{"delta": {"content": "spaced"}, "finish_reason": null}]}"#.into(),
        );
        for d in payloads {
            let info = chunk::classify(&d);
            let p = peek(&d);
            assert_eq!(
                (p.delta, p.finished, p.error),
                (
                    info.kind.unwrap_or(ChunkKind::Other).is_delta(),
                    info.kind == Some(ChunkKind::Done) || info.finish.is_some(),
                    info.kind == Some(ChunkKind::Error)
                ),
                "{d}"
            );
        }
    }
}
