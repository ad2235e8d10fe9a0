//! `client.limits`: how much one response may make haq hold, and how long its head and
//! its tail after `[DONE]` may take, and how long one stream may run (issue 15 items 5
//! and 6). Past a limit haq stops reading, closes the connection and ends the request
//! with a named outcome charged to the target (`oversized`, `endless`, `after_done`,
//! `bad_head`); memory and the trace stay bounded whatever a server sends.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::{Dur, Size};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseLimits {
    /// Longest SSE line (bytes up to its line end). A `data:` line of one event is
    /// rarely over a few KiB.
    #[serde(default = "default_line")]
    pub line: Size,
    /// Largest SSE event (its `data:` lines joined).
    #[serde(default = "default_event")]
    pub event: Size,
    /// Largest non-streamed answer (a response that is not `text/event-stream`), read
    /// whole before it is parsed.
    #[serde(default = "default_body")]
    pub body: Size,
    /// Largest streamed body (all its events: a 100k-token answer is ~30 MB).
    #[serde(default = "default_stream")]
    pub stream: Size,
    /// How long one streamed answer may take from its dispatch to its end: a stream
    /// still going then (events coming, no `[DONE]`) ends `endless` and haq closes it.
    /// Ten minutes is past any answer a chat request asks for at a human reading
    /// speed; raise it for very long generations.
    #[serde(default = "default_duration")]
    pub duration: Dur,
    /// How long the body may go on after `[DONE]` before haq closes it: data events
    /// after `[DONE]` make the end `after_done`; a body that simply does not end is
    /// closed and stays `completed`.
    #[serde(default = "default_after_done")]
    pub after_done: Dur,
    /// How long a response head may take once its first byte came (haq's own HTTP/1.1
    /// client; through reqwest the first-token timeout bounds it).
    #[serde(default = "default_head_timeout")]
    pub head_timeout: Dur,
}

fn default_line() -> Size {
    Size::mib(1)
}
fn default_event() -> Size {
    Size::mib(2)
}
fn default_body() -> Size {
    Size::mib(4)
}
fn default_stream() -> Size {
    Size::mib(64)
}
fn default_duration() -> Dur {
    Dur::secs(600)
}
fn default_after_done() -> Dur {
    Dur::secs(2)
}
fn default_head_timeout() -> Dur {
    Dur::secs(10)
}

impl Default for ResponseLimits {
    fn default() -> Self {
        ResponseLimits {
            line: default_line(),
            event: default_event(),
            body: default_body(),
            stream: default_stream(),
            duration: default_duration(),
            after_done: default_after_done(),
            head_timeout: default_head_timeout(),
        }
    }
}
