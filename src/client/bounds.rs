//! What one response may make haq hold ([`Limits`], from `client.limits`), and how a
//! response past a limit is described: the limit by its scenario name, the size read,
//! and how the oversized part began — never the part itself (issue 15 item 5).

use std::time::Duration;

use crate::scenario::ResponseLimits;
use crate::wire::sse::{Over, Overflow, SseLimits};
use crate::wire::units::format_size;

/// `client.limits` as the client applies them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub line: usize,
    pub event: usize,
    pub body: usize,
    pub stream: u64,
    pub duration: Duration,
    pub after_done: Duration,
    pub head_timeout: Duration,
}

impl From<&ResponseLimits> for Limits {
    fn from(l: &ResponseLimits) -> Self {
        Limits {
            line: l.line.bytes(),
            event: l.event.bytes(),
            body: l.body.bytes(),
            stream: l.stream.0,
            duration: l.duration.0,
            after_done: l.after_done.0,
            head_timeout: l.head_timeout.0,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&ResponseLimits::default())
    }
}

impl Limits {
    pub fn sse(&self) -> SseLimits {
        SseLimits {
            line: self.line,
            event: self.event,
        }
    }
}

/// The `detail` of an SSE line or event past its limit.
pub fn overflow_detail(o: &Overflow) -> String {
    let (what, name, how) = match o.what {
        Over::Line => ("an SSE line longer than", "line", "with no line end"),
        Over::Event => ("an SSE event larger than", "event", "of data"),
    };
    format!(
        "{what} client.limits.{name} ({}): {} bytes {how} when haq stopped reading; it began {:?}",
        format_size(o.limit as u64),
        o.read,
        o.prefix
    )
}

/// The `detail` of a stream past `client.limits.stream`.
pub fn stream_detail(limit: u64, read: u64) -> String {
    format!(
        "the stream passed client.limits.stream ({}): {read} bytes of body when haq stopped reading",
        format_size(limit)
    )
}

/// The `detail` of a non-streamed answer past `client.limits.body`.
pub fn body_detail(limit: usize, begin: &[u8]) -> String {
    let begin = &begin[..begin.len().min(crate::wire::sse::OVERFLOW_PREFIX)];
    format!(
        "a non-streamed answer larger than client.limits.body ({}): haq stopped reading past it; it began {:?}",
        format_size(limit as u64),
        String::from_utf8_lossy(begin)
    )
}
