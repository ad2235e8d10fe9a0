//! What the client writes of one request, event by event (times in µs): the request
//! line, the response head, each SSE chunk numbered as the client counts, the end.
//! Each event has one writer (`*_as`, taking its shape); the short forms write the
//! shape a history uses most.

use super::state::{MS, Tb};
use crate::trace::{ChunkKind, Event, Outcome};

/// How a request was asked for: its request line beyond id and time.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub phase: &'a str,
    pub max_tokens: u32,
    pub protected: bool,
    /// The fault whose trigger this probe request drives.
    pub probe: Option<&'a str>,
    pub stream: bool,
    /// Sent this long (µs) after it was intended: haq's own lateness.
    pub late: u64,
}

impl Default for Ask<'_> {
    /// A protected streaming chat request of phase `baseline`, up to 64 tokens.
    fn default() -> Self {
        Ask {
            phase: "baseline",
            max_tokens: 64,
            protected: true,
            probe: None,
            stream: true,
            late: 0,
        }
    }
}

/// A response head: status and what the attribution headers said.
#[derive(Clone, Debug)]
pub struct Head<'a> {
    pub status: u16,
    pub worker: Option<&'a str>,
    pub attempt: Option<String>,
    pub retry_after: Option<&'a str>,
}

/// One SSE event of a stream.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    pub kind: ChunkKind,
    pub text: Option<&'a str>,
    pub cid: Option<&'a str>,
    pub finish: Option<&'a str>,
    pub raw: Option<&'a str>,
}

impl Piece<'_> {
    /// An event of `kind` carrying nothing.
    pub fn of(kind: ChunkKind) -> Self {
        Piece {
            kind,
            text: None,
            cid: None,
            finish: None,
            raw: None,
        }
    }
}

/// How the end line is written beyond what the request's chunks say (its delta
/// count and last finish reason are always taken from them).
#[derive(Clone, Copy, Debug)]
pub struct Close {
    pub outcome: Outcome,
    /// `[DONE]` seen; `None`: as the chunks say (a `Done` chunk was written).
    pub done: Option<bool>,
    /// With the status (200) and the delta count the client tallied.
    pub tallied: bool,
}

impl Tb {
    /// The request line of `id` at `t`, as [`Ask::default`].
    pub fn req(&mut self, id: &str, t: u64) -> &mut Self {
        self.req_as(id, t, Ask::default())
    }

    /// The request line of `id` sent at `t` (intended `ask.late` before), asked as
    /// `ask`.
    pub fn req_as(&mut self, id: &str, t: u64, ask: Ask) -> &mut Self {
        self.ev(Event::Request {
            t,
            id: id.into(),
            class: "chat".into(),
            phase: ask.phase.into(),
            intended: t.saturating_sub(ask.late),
            prompt_tokens: 100,
            max_tokens: ask.max_tokens,
            protected: ask.protected,
            stream: ask.stream,
            admitted: None,
            session: None,
            turn: None,
            probe: ask.probe.map(Into::into),
        })
    }

    /// A 200 head served by `worker` as `attempt`.
    pub fn head(&mut self, id: &str, t: u64, worker: &str, attempt: &str) -> &mut Self {
        let head = Head {
            status: 200,
            worker: Some(worker),
            attempt: Some(attempt.into()),
            retry_after: None,
        };
        self.head_as(id, t, head)
    }

    /// The response head of `id`; the attribution (worker, attempt) only when
    /// [`Tb::headers`] is on.
    pub fn head_as(&mut self, id: &str, t: u64, head: Head) -> &mut Self {
        let headers = self.headers;
        self.ev(Event::Response {
            t,
            id: id.into(),
            status: head.status,
            worker: head.worker.filter(|_| headers).map(Into::into),
            attempt: head.attempt.filter(|_| headers),
            retry_after: head.retry_after.map(Into::into),
            queue_us: None,
            headers: Vec::new(),
            headers_omitted: 0,
            conn: None,
        })
    }

    /// A chunk of `kind` with its text and generation id.
    pub fn chunk(
        &mut self,
        id: &str,
        t: u64,
        kind: ChunkKind,
        text: Option<&str>,
        cid: Option<&str>,
    ) -> &mut Self {
        let piece = Piece {
            text,
            cid,
            ..Piece::of(kind)
        };
        self.chunk_as(id, t, piece)
    }

    /// The next chunk of `id`, numbered as the client would.
    pub fn chunk_as(&mut self, id: &str, t: u64, piece: Piece) -> &mut Self {
        let next = self.chunks.entry(id.to_string()).or_default();
        let n = *next;
        *next += 1;
        self.ev(Event::Chunk {
            t,
            id: id.into(),
            n,
            kind: piece.kind,
            text: piece.text.map(Into::into),
            cid: piece.cid.map(Into::into),
            finish: piece.finish.map(Into::into),
            raw: piece.raw.map(Into::into),
        })
    }

    /// Content deltas from generation `cid`, one every 20 ms from `t0`.
    pub fn deltas(&mut self, id: &str, cid: &str, t0: u64, texts: &[&str]) -> &mut Self {
        for (i, tx) in texts.iter().enumerate() {
            self.chunk(
                id,
                t0 + i as u64 * 20 * MS,
                ChunkKind::Content,
                Some(tx),
                Some(cid),
            );
        }
        self
    }

    /// The finish event (`stop`) of generation `cid`, then `[DONE]`.
    pub fn finish(&mut self, id: &str, cid: &str, t: u64) -> &mut Self {
        let piece = Piece {
            cid: Some(cid),
            finish: Some("stop"),
            ..Piece::of(ChunkKind::Finish)
        };
        self.chunk_as(id, t, piece)
            .chunk(id, t, ChunkKind::Done, None, None)
    }

    /// An in-band error event with payload `raw`.
    pub fn error_event(&mut self, id: &str, t: u64, raw: &str) -> &mut Self {
        let piece = Piece {
            raw: Some(raw),
            ..Piece::of(ChunkKind::Error)
        };
        self.chunk_as(id, t, piece)
    }

    /// The seed's explicit error for `delivered` deltas.
    pub fn seed_error(&mut self, id: &str, t: u64, delivered: u32) -> &mut Self {
        let raw = serde_json::json!({"error": {"code": "upstream_decode_interrupted",
            "message": "interrupted", "request_id": id, "partial_output": true,
            "delivered_output_tokens": delivered, "retryable": false}})
        .to_string();
        self.error_event(id, t, &raw)
    }

    /// The end of `id`, as its chunks say, with status and tally.
    pub fn end(&mut self, id: &str, t: u64, outcome: Outcome) -> &mut Self {
        let close = Close {
            outcome,
            done: None,
            tallied: true,
        };
        self.end_as(id, t, close)
    }

    /// The end of `id` as the client writes it when it names why (`detail`): with
    /// its status and tally when a head was written for it.
    pub fn end_saying(&mut self, id: &str, t: u64, outcome: Outcome, detail: &str) -> &mut Self {
        let headed = self
            .events
            .iter()
            .any(|e| matches!(e, Event::Response { id: i, .. } if i == id));
        let close = Close {
            outcome,
            done: None,
            tallied: headed,
        };
        self.end_as(id, t, close);
        if let Some(Event::End { detail: d, .. }) = self.events.last_mut() {
            *d = Some(detail.into());
        }
        self
    }

    /// The end line of `id`: its deltas counted and last finish reason taken from
    /// the chunks written so far, the rest as `close` says.
    pub fn end_as(&mut self, id: &str, t: u64, close: Close) -> &mut Self {
        let mine = |e: &&Event| matches!(e, Event::Chunk { id: i, .. } if i == id);
        let deltas = self
            .events
            .iter()
            .filter(mine)
            .filter(|e| matches!(e, Event::Chunk { kind, .. } if kind.is_delta()))
            .count() as u32;
        let finish = self.events.iter().rev().filter(mine).find_map(|e| match e {
            Event::Chunk { finish: f, .. } => f.clone(),
            _ => None,
        });
        let done = close.done.unwrap_or_else(|| {
            self.events.iter().filter(mine).any(|e| {
                matches!(
                    e,
                    Event::Chunk {
                        kind: ChunkKind::Done,
                        ..
                    }
                )
            })
        });
        self.ev(Event::End {
            t,
            id: id.into(),
            outcome: close.outcome,
            detail: None,
            tokens: deltas,
            done,
            finish,
            status: close.tallied.then_some(200),
            counted: close.tallied.then_some(deltas),
            usage: None,
            error: None,
            tool_calls: Vec::new(),
            json_valid: None,
        })
    }
}
