//! What one classified payload says ([`ChunkInfo`]).

use std::borrow::Cow;

use crate::wire::kinds::{ChunkKind, InBandError, Usage};

/// One streamed tool-call fragment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolFragment {
    pub index: u32,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: Option<String>,
}

/// What one payload says. Text fields borrow from the payload unless the JSON escaped
/// something (or several pieces were joined): the client's read loop allocates nothing
/// for a plain delta.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChunkInfo<'a> {
    pub kind: Option<ChunkKind>,
    pub text: Option<Cow<'a, str>>,
    pub cid: Option<Cow<'a, str>>,
    pub finish: Option<Cow<'a, str>>,
    pub usage: Option<Usage>,
    pub error: Option<InBandError>,
    pub tools: Vec<ToolFragment>,
    /// The payload is not JSON (and not `[DONE]`).
    pub unparsable: bool,
    /// Keep the raw payload in the trace (not a plain delta).
    pub keep_raw: bool,
}

impl ChunkInfo<'_> {
    /// `usage.completion_tokens`, when this chunk reports usage.
    pub fn usage_tokens(&self) -> Option<u32> {
        self.usage.and_then(|u| u.completion)
    }
}

impl ChunkInfo<'_> {
    pub fn into_owned(self) -> ChunkInfo<'static> {
        let own = |c: Option<Cow<'_, str>>| c.map(|c| Cow::Owned(c.into_owned()));
        ChunkInfo {
            kind: self.kind,
            text: own(self.text),
            cid: own(self.cid),
            finish: own(self.finish),
            usage: self.usage,
            error: self.error,
            tools: self.tools,
            unparsable: self.unparsable,
            keep_raw: self.keep_raw,
        }
    }
}
