//! Stream migration (policy `migrate`, Q9), as Dynamo does it: when a worker is lost
//! after the first delta, the request goes to another worker with the delivered
//! output appended to the prompt — a chat as a final assistant message with vLLM's
//! `continue_final_message`, a completion as the prompt's tail — and `max_tokens` less
//! what was delivered; the engine continues the answer from the next token. The flawed
//! `migrate-lossy` re-sends the output without its last delta.

use serde_json::{Value, json};

/// The continuation of a stream: its body, the output tokens re-sent in it and the
/// prompt tokens the new worker prefills (prompt plus re-sent output).
pub struct Continuation {
    pub body: bytes::Bytes,
    pub resent: u32,
    pub prompt_tokens: u32,
}

/// The continuation of the request `body` (its prompt `prompt_tokens` long) whose
/// client has `text` from `delivered` deltas; `lossy`: without the last delta (whose
/// text begins at `last`). Why not, when the stream cannot be continued.
pub fn continuation(
    body: &[u8],
    prompt_tokens: u32,
    said: &(String, usize, bool),
    delivered: u32,
    lossy: bool,
) -> Result<Continuation, String> {
    let (text, last, tools) = said;
    if *tools {
        return Err("a tool call is not continued".into());
    }
    let (text, resent) = if lossy && delivered > 0 {
        // FLAW migrate-lossy: the copy of the output lags one delta behind the stream.
        (&text[..*last], delivered - 1)
    } else {
        (text.as_str(), delivered)
    };
    let mut v: Value = serde_json::from_slice(body).map_err(|e| format!("request body: {e}"))?;
    let max = v["max_completion_tokens"]
        .as_u64()
        .or(v["max_tokens"].as_u64())
        .unwrap_or(16);
    let left = max.saturating_sub(u64::from(resent));
    if left == 0 {
        return Err("every token of the answer was already delivered".into());
    }
    if let Some(msgs) = v["messages"].as_array_mut() {
        msgs.push(json!({"role": "assistant", "content": text}));
        v["continue_final_message"] = json!(true);
        v["add_generation_prompt"] = json!(false);
    } else if let Some(p) = v["prompt"].as_str() {
        v["prompt"] = json!(format!("{p}{text}"));
    } else {
        return Err("no prompt or messages to continue".into());
    }
    for k in ["max_tokens", "max_completion_tokens"] {
        if v.get(k).is_some() || k == "max_tokens" {
            v[k] = json!(left);
        }
    }
    Ok(Continuation {
        body: bytes::Bytes::from(v.to_string()),
        resent,
        prompt_tokens: prompt_tokens + resent,
    })
}

/// A continuation's usage event reports the whole answer: the original prompt's
/// tokens, and the re-sent output counted as completion rather than prompt.
pub fn whole_usage(data: &str, (prompt, resent): (u32, u32)) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(data) else {
        return data.to_string();
    };
    let u = &mut v["usage"];
    let Some(completion) = u["completion_tokens"].as_u64() else {
        return data.to_string();
    };
    let completion = completion + u64::from(resent);
    u["prompt_tokens"] = json!(prompt);
    u["completion_tokens"] = json!(completion);
    u["total_tokens"] = json!(u64::from(prompt) + completion);
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_continues_as_its_final_assistant_message_and_a_completion_as_its_tail() {
        let chat = json!({"messages": [{"role": "user", "content": "q"}], "max_tokens": 10});
        let said = (" a b c".to_string(), 4, false);
        let c = continuation(chat.to_string().as_bytes(), 1, &said, 3, false).expect("ok");
        let v: Value = serde_json::from_slice(&c.body).expect("json");
        assert_eq!(
            v["messages"][1],
            json!({"role": "assistant", "content": " a b c"})
        );
        assert_eq!(
            (
                v["continue_final_message"].as_bool(),
                v["max_tokens"].as_u64()
            ),
            (Some(true), Some(7))
        );
        assert_eq!((c.resent, c.prompt_tokens), (3, 4));
        let lossy = continuation(chat.to_string().as_bytes(), 1, &said, 3, true).expect("ok");
        let v: Value = serde_json::from_slice(&lossy.body).expect("json");
        assert_eq!(v["messages"][1]["content"], " a b");
        assert_eq!((lossy.resent, v["max_tokens"].as_u64()), (2, Some(8)));
        let comp = json!({"prompt": "p q", "max_tokens": 3});
        let c = continuation(comp.to_string().as_bytes(), 2, &said, 3, false);
        assert!(c.is_err(), "nothing left to generate");
        let c = continuation(
            comp.to_string().as_bytes(),
            2,
            &(" a".into(), 0, false),
            1,
            false,
        )
        .expect("ok");
        let v: Value = serde_json::from_slice(&c.body).expect("json");
        assert_eq!(
            (v["prompt"].as_str(), v["max_tokens"].as_u64()),
            (Some("p q a"), Some(2))
        );
        assert!(
            continuation(
                chat.to_string().as_bytes(),
                1,
                &(String::new(), 0, true),
                1,
                false
            )
            .is_err()
        );
        let u = whole_usage(
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}"#,
            (2, 3),
        );
        let u: Value = serde_json::from_str(&u).expect("json");
        assert_eq!(
            u["usage"],
            json!({"prompt_tokens": 2, "completion_tokens": 10, "total_tokens": 12})
        );
    }
}
