//! The per-request marker in a request body (`client.marker`): where it goes, so that
//! haq's proxy can tie every upstream request to its client request from the body
//! alone (the format is `wire::marker`'s).

use serde_json::{Map, Value};

use crate::scenario::MarkerField;
use crate::wire::marker::{RunToken, marker};

/// Where a run's markers go, and the run's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyMarker {
    pub field: MarkerField,
    pub token: RunToken,
}

impl BodyMarker {
    /// No marker at all (tests, benchmarks that compare bodies across runs).
    pub fn none() -> BodyMarker {
        BodyMarker {
            field: MarkerField::None,
            token: RunToken::from_u32(0),
        }
    }

    /// The marker of request `id`, when the run puts one in its bodies.
    pub fn value(&self, id: &str) -> Option<String> {
        (self.field != MarkerField::None).then(|| marker(self.token, id))
    }

    /// Puts request `id`'s marker into `body` (a chat or completions request).
    pub fn put(&self, body: &mut Map<String, Value>, id: &str) {
        let Some(m) = self.value(id) else { return };
        match self.field {
            MarkerField::None => {}
            // Resolved before any body is built (`engine`); `user` if it were not.
            MarkerField::Auto | MarkerField::User => {
                body.insert("user".into(), m.into());
            }
            MarkerField::Metadata => {
                let mut md = Map::new();
                md.insert("haq_request_id".into(), m.into());
                body.insert("metadata".into(), Value::Object(md));
            }
            MarkerField::TopLevel => {
                body.insert("haq_marker".into(), m.into());
            }
            MarkerField::Prompt => {
                let nonce = format!(" ({m})");
                let last_user = body
                    .get_mut("messages")
                    .and_then(Value::as_array_mut)
                    .and_then(|ms| ms.iter_mut().rfind(|m| m["role"] == "user"))
                    .and_then(|m| m.get_mut("content"));
                let text = match last_user {
                    Some(c) => Some(c),
                    None => body.get_mut("prompt"),
                };
                if let Some(Value::String(s)) = text {
                    s.push_str(&nonce);
                }
            }
        }
    }
}
