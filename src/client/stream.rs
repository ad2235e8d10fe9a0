//! One response stream as a pure state machine: fed SSE items stamped on arrival,
//! it yields the trace's chunk events and, at the end, the stream's classification.
//! No I/O here, so every wire shape and every split of its bytes is testable offline.

use crate::trace::{ChunkKind, ChunkRef, Event, InBandError, Outcome, ToolCall, Usage};

use super::bounds::{self, Limits};
use crate::wire::chunk::{self, ChunkInfo};
use crate::wire::sse::{SseParser, SseRef};

/// How the bytes stopped coming (decided by the network loop).
#[derive(Debug, Clone, PartialEq)]
pub enum Cut {
    /// The body ended cleanly (chunked terminator or connection close as framed).
    Eof,
    /// The read failed or timed out: the outcome it implies and a description.
    Failed(Outcome, String),
}

/// How the stream ended, with the evidence for the `end` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub outcome: Outcome,
    pub detail: Option<String>,
    pub tokens: u32,
    pub counted: u32,
    pub usage: Option<Usage>,
    pub error: Option<InBandError>,
    pub tool_calls: Vec<ToolCall>,
    pub done: bool,
    pub finish: Option<String>,
    pub json_valid: Option<bool>,
}

/// The state of one stream while it is read: the SSE parser and what its events said
/// so far (two fields, so the parser can hand its borrowed events to the fold).
#[derive(Debug, Default)]
pub struct StreamState {
    parser: SseParser,
    fold: Fold,
    /// Body bytes fed so far, and the most a stream may have (`client.limits.stream`).
    bytes: u64,
    max_bytes: Option<u64>,
}

/// What came after `[DONE]`.
#[derive(Debug, Default, Clone, Copy)]
struct AfterDone {
    /// Data events (a second `[DONE]` too), of them output deltas, and comments.
    events: u32,
    deltas: u32,
    comments: u32,
    /// Index of the first event after `[DONE]`.
    first: Option<u32>,
}

/// What the events of a stream said so far.
#[derive(Debug, Default)]
struct Fold {
    /// Events (and comments) seen so far: the next chunk's index.
    n: u32,
    /// Output deltas (content, reasoning, tool-call).
    deltas: u32,
    first_delta_us: Option<u64>,
    /// Last data event (not comment) arrival.
    last_event_us: Option<u64>,
    usage: Option<Usage>,
    done: bool,
    after_done: AfterDone,
    finish: Option<String>,
    error: Option<InBandError>,
    /// Index of the first event whose data could not be read, with why.
    malformed: Option<(u32, &'static str)>,
    /// The stream ended inside an event.
    unterminated: bool,
    tools: Vec<ToolCall>,
    /// Collect the answer text (structured-output requests check it parses as JSON).
    keep_text: bool,
    text: String,
}

impl StreamState {
    /// Unbounded (replays, tests, an ending built without a body).
    pub fn new(keep_text: bool) -> Self {
        StreamState {
            parser: SseParser::default(),
            fold: Fold {
                keep_text,
                ..Default::default()
            },
            bytes: 0,
            max_bytes: None,
        }
    }

    /// Bounded by `client.limits`: a line, an event or the stream past its limit is
    /// [`StreamState::over_limit`], and is never held.
    pub fn bounded(keep_text: bool, limits: &Limits) -> Self {
        StreamState {
            parser: SseParser::bounded(limits.sse()),
            max_bytes: Some(limits.stream),
            ..StreamState::new(keep_text)
        }
    }

    /// The stream passed one of its limits: how it ends (haq stops reading).
    pub fn over_limit(&self) -> Option<Cut> {
        if let Some(o) = self.parser.overflow() {
            return Some(Cut::Failed(Outcome::Oversized, bounds::overflow_detail(o)));
        }
        let max = self.max_bytes?;
        (self.bytes > max)
            .then(|| Cut::Failed(Outcome::Oversized, bounds::stream_detail(max, self.bytes)))
    }

    /// `[DONE]` came.
    pub fn done(&self) -> bool {
        self.fold.done
    }

    /// How the stream ends when its body goes on `grace` after `[DONE]`: `after_done`
    /// when anything came after it (events, comments, part of a line), else it simply
    /// did not end (the answer stays complete).
    pub fn after_done_cut(&self, grace: std::time::Duration) -> Cut {
        let a = self.fold.after_done;
        let grace = crate::wire::units::format_duration(grace);
        if a.events + a.comments > 0 || self.parser.pending() {
            Cut::Failed(
                Outcome::AfterDone,
                format!(
                    "still sending {grace} after [DONE] ({} events, {} comments after it): haq closed the connection (client.limits.after_done)",
                    a.events, a.comments
                ),
            )
        } else {
            Cut::Failed(
                Outcome::IdleTimeout,
                format!(
                    "the body did not end within {grace} of [DONE]: haq closed the connection (client.limits.after_done)"
                ),
            )
        }
    }

    /// Events (and comments) read so far.
    pub fn events(&self) -> u32 {
        self.fold.n
    }

    /// Output deltas (content, reasoning, tool-call) so far.
    pub fn deltas(&self) -> u32 {
        self.fold.deltas
    }

    /// When the first output delta arrived.
    pub fn first_delta_us(&self) -> Option<u64> {
        self.fold.first_delta_us
    }

    /// When the last data event (not a comment) arrived.
    pub fn last_event_us(&self) -> Option<u64> {
        self.fold.last_event_us
    }

    /// Bytes that arrived at `t`: parses them and hands each chunk event to `emit`
    /// (borrowed: nothing is copied out of the bytes for a plain delta).
    pub fn on_bytes(
        &mut self,
        t: u64,
        id: &str,
        bytes: &[u8],
        emit: &mut impl FnMut(ChunkRef<'_>),
    ) {
        self.bytes += bytes.len() as u64;
        let fold = &mut self.fold;
        self.parser
            .push_with(bytes, &mut |it| fold.on_item(t, id, it, emit));
    }

    /// The body ended at `t`: flushes an unfinished last event.
    pub fn on_eof(&mut self, t: u64, id: &str, emit: &mut impl FnMut(ChunkRef<'_>)) {
        let fold = &mut self.fold;
        self.parser
            .finish_with(&mut |it| fold.on_item(t, id, it, emit));
    }

    /// A whole (non-streaming) JSON answer arrived at `t`.
    pub fn on_whole(&mut self, t: u64, id: &str, body: &str, emit: &mut impl FnMut(ChunkRef<'_>)) {
        self.fold.on_data(t, id, body, false, emit);
    }

    /// Anything that settles the stream: output, an error, a terminator.
    pub fn settled(&self) -> bool {
        let f = &self.fold;
        f.first_delta_us.is_some() || f.error.is_some() || f.done
    }

    /// The answer is over (a terminator, a finish_reason or an error came): a client
    /// that meant to leave has nothing left to leave.
    pub fn ended(&self) -> bool {
        let f = &self.fold;
        f.done || f.finish.is_some() || f.error.is_some()
    }

    /// Classifies the stream once no more bytes will come (SPEC M3, M10: every end is
    /// named; a clean end is never assumed).
    pub fn conclude(self, cut: Cut) -> Ending {
        self.fold.conclude(cut)
    }
}

impl Fold {
    fn on_item(&mut self, t: u64, id: &str, item: SseRef<'_>, emit: &mut impl FnMut(ChunkRef<'_>)) {
        match item {
            SseRef::Comment(c) => {
                if self.done {
                    self.after_done.comments += 1;
                }
                emit(ChunkRef {
                    t,
                    id,
                    n: self.n,
                    kind: ChunkKind::Comment,
                    text: (!c.is_empty()).then_some(c),
                    cid: None,
                    finish: None,
                    raw: None,
                });
                self.n += 1;
            }
            SseRef::Event {
                event,
                data,
                unterminated,
                ..
            } => {
                if unterminated {
                    self.unterminated = true;
                }
                self.on_data(t, id, data, event == Some("error"), emit);
            }
        }
    }

    fn on_data(
        &mut self,
        t: u64,
        id: &str,
        data: &str,
        error_event: bool,
        emit: &mut impl FnMut(ChunkRef<'_>),
    ) {
        let mut info: ChunkInfo<'_> = chunk::classify_ref(data);
        if error_event && info.kind != Some(ChunkKind::Error) {
            // `event: error` with a payload that is not an error object.
            info.kind = Some(ChunkKind::Error);
            info.error = Some(InBandError {
                message: Some(data.to_string()),
                ..Default::default()
            });
            info.keep_raw = true;
        }
        let kind = info.kind.unwrap_or(ChunkKind::Other);
        self.last_event_us = Some(t);
        if self.done {
            let a = &mut self.after_done;
            a.events += 1;
            a.deltas += u32::from(kind.is_delta());
            a.first.get_or_insert(self.n);
        }
        match kind {
            ChunkKind::Done => self.done = true,
            ChunkKind::Error if self.error.is_none() => {
                let mut e = info.error.take().unwrap_or_default();
                e.n = self.n;
                self.error = Some(e);
            }
            k if k.is_delta() => {
                self.deltas += 1;
                self.first_delta_us.get_or_insert(t);
            }
            _ => {}
        }
        if info.unparsable && !self.unterminated && self.malformed.is_none() {
            self.malformed = Some((self.n, "not JSON"));
        }
        if let Some(f) = info.finish.as_deref()
            && self.finish.as_deref() != Some(f)
        {
            self.finish = Some(f.to_string());
        }
        if info.usage.is_some() {
            self.usage = info.usage;
        }
        for f in info.tools.drain(..) {
            self.tool_fragment(f);
        }
        if let (true, ChunkKind::Content, Some(t)) = (self.keep_text, kind, &info.text) {
            self.text.push_str(t);
        }
        emit(ChunkRef {
            t,
            id,
            n: self.n,
            kind,
            text: info.text.as_deref(),
            cid: info.cid.as_deref(),
            finish: info.finish.as_deref(),
            raw: info.keep_raw.then_some(data),
        });
        self.n += 1;
    }

    fn tool_fragment(&mut self, f: chunk::ToolFragment) {
        let tc = match self.tools.iter_mut().find(|t| t.index == f.index) {
            Some(tc) => tc,
            None => {
                self.tools.push(ToolCall {
                    index: f.index,
                    ..Default::default()
                });
                let last = self.tools.len() - 1;
                &mut self.tools[last]
            }
        };
        if f.id.is_some() && tc.id.is_none() {
            tc.id = f.id;
        }
        if let Some(n) = f.name {
            tc.name.push_str(&n);
        }
        if let Some(a) = f.arguments {
            tc.arguments.push_str(&a);
        }
    }

    fn conclude(mut self, cut: Cut) -> Ending {
        let cut_detail = match &cut {
            Cut::Eof => None,
            Cut::Failed(_, d) => Some(d.clone()),
        };
        let a = self.after_done;
        let (outcome, detail) =
            if let Cut::Failed(o @ (Outcome::Oversized | Outcome::AfterDone), d) = &cut {
                // haq stopped reading for what the server sent: that is the end, whatever
                // came before.
                (*o, Some(d.clone()))
            } else if a.events > 0 {
                (
                    Outcome::AfterDone,
                    Some(format!(
                        "{} data events ({} output deltas) after [DONE], the first chunk {}",
                        a.events,
                        a.deltas,
                        a.first.unwrap_or_default()
                    )),
                )
            } else if let Some(e) = &self.error {
                let what = e
                    .message
                    .clone()
                    .or(e.code.clone())
                    .unwrap_or_else(|| "in-band error".into());
                (Outcome::ExplicitError, Some(what))
            } else if let Some((n, why)) = self.malformed {
                (
                    Outcome::Malformed,
                    Some(format!("event {n} could not be read ({why})")),
                )
            } else if self.done || self.finish.is_some() {
                (Outcome::Completed, cut_detail)
            } else {
                match cut {
                    Cut::Failed(o, d) => (o, Some(d)),
                    Cut::Eof if self.unterminated => (
                        Outcome::Truncated,
                        Some(
                            "end of body inside an event, with no [DONE], finish_reason or error"
                                .into(),
                        ),
                    ),
                    Cut::Eof => (
                        Outcome::Truncated,
                        Some("end of body without [DONE], finish_reason or error".into()),
                    ),
                }
            };
        for tc in &mut self.tools {
            tc.arguments_valid =
                serde_json::from_str::<serde::de::IgnoredAny>(&tc.arguments).is_ok();
        }
        let json_valid = self
            .keep_text
            .then(|| serde_json::from_str::<serde::de::IgnoredAny>(self.text.trim()).is_ok());
        Ending {
            outcome,
            detail,
            tokens: self.usage.and_then(|u| u.completion).unwrap_or(self.deltas),
            counted: self.deltas,
            usage: self.usage,
            error: self.error,
            tool_calls: self.tools,
            done: self.done,
            finish: self.finish,
            json_valid,
        }
    }
}

/// Replays a whole body through the state machine in the given pieces (tests, tools).
pub fn replay<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, cut: Cut) -> (Vec<Event>, Ending) {
    let mut s = StreamState::new(false);
    let mut events = Vec::new();
    let mut emit = |c: ChunkRef<'_>| events.push(c.to_event());
    let mut t = 0;
    for p in pieces {
        s.on_bytes(t, "r", p, &mut emit);
        t += 1;
    }
    s.on_eof(t, "r", &mut emit);
    (events, s.conclude(cut))
}

#[cfg(test)]
mod speed {
    use crate::wire::chunk::tests::speed::{DELTA, fastest_ns};

    /// Everything haq does per SSE event in the read loop but the socket: SSE parse,
    /// classification, the stream's fold and the chunk's trace line (into a buffer).
    /// Manual: `cargo test --release --lib event_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn event_speed() {
        let ev = format!("data: {DELTA}\n\n");
        let mut out = Vec::with_capacity(1 << 20);
        let mut st = crate::client::stream::StreamState::new(false);
        let ns = fastest_ns(100_000, |k| {
            out.clear();
            let mut emit = |c: crate::trace::ChunkRef<'_>| {
                c.write_json(&mut out);
                out.push(b'\n');
            };
            let bytes = std::hint::black_box(ev.as_bytes());
            st.on_bytes(u64::from(k), "r000042", bytes, &mut emit);
        });
        println!("{ns:.1} ns per event (parse, classify, fold, trace line)");
    }
}
