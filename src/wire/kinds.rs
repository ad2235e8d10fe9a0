//! What an SSE event of an OpenAI-compatible stream carries, as classified: the
//! vocabulary the client, haq's proxy, the sim and the trace share.

use serde::{Deserialize, Serialize};

/// Token usage as the server reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<u32>,
    /// Prompt tokens served from the prefix cache (`prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u32>,
}

/// An in-band error event, field by field. `seed_shape` is true when it carries every
/// field of the seed's explicit error (M3): code `upstream_decode_interrupted`,
/// `request_id`, `partial_output`, `delivered_output_tokens`, `retryable`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct InBandError {
    /// Index of the chunk that carried it.
    pub n: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_output: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(default)]
    pub seed_shape: bool,
}

/// A tool call assembled from its streamed deltas.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolCall {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default)]
    pub arguments: String,
    /// The assembled arguments parse as JSON.
    #[serde(default)]
    pub arguments_valid: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// A delta with only the role (or empty content): no output yet.
    Role,
    /// Output text.
    Content,
    /// Reasoning text.
    Reasoning,
    /// A tool-call fragment.
    ToolCall,
    /// finish_reason with no text.
    Finish,
    /// Usage report (`choices: []` or empty delta).
    Usage,
    /// In-band error object.
    Error,
    /// `data: [DONE]`.
    Done,
    /// Anything else (unknown JSON, unparsable data).
    Other,
    /// An SSE comment line (`: keep-alive`); `text` holds it.
    Comment,
}

impl ChunkKind {
    /// The name the trace uses (serde's `snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkKind::Role => "role",
            ChunkKind::Content => "content",
            ChunkKind::Reasoning => "reasoning",
            ChunkKind::ToolCall => "tool_call",
            ChunkKind::Finish => "finish",
            ChunkKind::Usage => "usage",
            ChunkKind::Error => "error",
            ChunkKind::Done => "done",
            ChunkKind::Other => "other",
            ChunkKind::Comment => "comment",
        }
    }

    /// The kind [`ChunkKind::as_str`] names (judging reads it from every chunk line:
    /// a match, no loop of compares; a test checks the two agree for every kind).
    pub fn from_name(name: &str) -> Option<ChunkKind> {
        Some(match name {
            "role" => ChunkKind::Role,
            "content" => ChunkKind::Content,
            "reasoning" => ChunkKind::Reasoning,
            "tool_call" => ChunkKind::ToolCall,
            "finish" => ChunkKind::Finish,
            "usage" => ChunkKind::Usage,
            "error" => ChunkKind::Error,
            "done" => ChunkKind::Done,
            "other" => ChunkKind::Other,
            "comment" => ChunkKind::Comment,
            _ => return None,
        })
    }

    /// Output the client can see: the M1 boundary is the first such delta.
    pub fn is_delta(self) -> bool {
        matches!(
            self,
            ChunkKind::Content | ChunkKind::Reasoning | ChunkKind::ToolCall
        )
    }
}
