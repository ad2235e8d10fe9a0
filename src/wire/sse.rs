//! An incremental Server-Sent Events parser (WHATWG `text/event-stream`).
//!
//! Fed whatever byte chunks the network delivers; yields complete events. Unlike
//! eventsource-stream, it reports an event left unfinished at end of stream (the last
//! bytes a dying server wrote are evidence too) and it surfaces comments, so
//! keep-alives are visible.
//!
//! Bounded when asked ([`SseParser::bounded`]): a line or an event past its limit is
//! never held — the parser keeps its first bytes and its size so far
//! ([`SseParser::overflow`]) and ignores everything after, so a server that sends a
//! gigabyte without a line end costs the limit, not the gigabyte.

/// One parsed item of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// A `:` comment line (keep-alive).
    Comment(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// `event:` field, when present.
    pub event: Option<String>,
    /// `data:` lines joined with `\n`.
    pub data: String,
    /// `id:` field, when present.
    pub id: Option<String>,
    /// True when the stream ended before the blank line that completes this event.
    pub unterminated: bool,
}

/// One parsed item, borrowed from the parser (valid during the callback): the
/// client's read loop copies nothing out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseRef<'a> {
    Event {
        event: Option<&'a str>,
        data: &'a str,
        id: Option<&'a str>,
        unterminated: bool,
    },
    Comment(&'a str),
}

impl SseRef<'_> {
    pub fn to_item(self) -> SseItem {
        match self {
            SseRef::Comment(c) => SseItem::Comment(c.to_string()),
            SseRef::Event {
                event,
                data,
                id,
                unterminated,
            } => SseItem::Event(SseEvent {
                event: event.map(str::to_string),
                data: data.to_string(),
                id: id.map(str::to_string),
                unterminated,
            }),
        }
    }
}

/// The longest line and the largest event a parser holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    pub line: usize,
    pub event: usize,
}

impl Default for SseLimits {
    /// Unbounded (the sim's gateway, tests).
    fn default() -> Self {
        SseLimits {
            line: usize::MAX,
            event: usize::MAX,
        }
    }
}

/// What passed its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Line,
    Event,
}

/// A line or event past its limit: what, how many bytes of it were read, and how it
/// began (at most [`OVERFLOW_PREFIX`] bytes, lossy UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub what: Over,
    pub limit: usize,
    pub read: usize,
    pub prefix: String,
}

/// Bytes of an oversized line or event kept as evidence.
pub const OVERFLOW_PREFIX: usize = 200;

fn prefix_of(b: &[u8]) -> String {
    let mut end = b.len().min(OVERFLOW_PREFIX);
    // Cut on a character boundary when the bytes are UTF-8.
    while end > 0 && end < b.len() && (b[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[derive(Debug, Default)]
pub struct SseParser {
    limits: SseLimits,
    /// Set once a line or an event passed its limit: nothing more is parsed.
    overflow: Option<Overflow>,
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` in the next one belongs to it.
    after_cr: bool,
    /// The event being read; its buffers are reused from event to event.
    event: Option<String>,
    data: String,
    id: Option<String>,
    has_data: bool,
    started: bool,
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that holds at most `limits.line` bytes of a line and `limits.event`
    /// bytes of an event.
    pub fn bounded(limits: SseLimits) -> Self {
        SseParser {
            limits,
            ..Self::default()
        }
    }

    /// The line or event that passed its limit, once one did.
    pub fn overflow(&self) -> Option<&Overflow> {
        self.overflow.as_ref()
    }

    /// Bytes of an unfinished line or event held.
    pub fn pending(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    /// Stops parsing: `what` passed its limit after `read` bytes beginning `begin`;
    /// the buffers are freed.
    fn overflowed(&mut self, what: Over, read: usize, begin: &[u8]) {
        let limit = match what {
            Over::Line => self.limits.line,
            Over::Event => self.limits.event,
        };
        self.overflow = Some(Overflow {
            what,
            limit,
            read,
            prefix: prefix_of(begin),
        });
        self.line = Vec::new();
        self.data = String::new();
        self.has_data = false;
    }

    /// Consumes `bytes`, appending complete items to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) {
        self.push_with(bytes, &mut |r| out.push(r.to_item()));
    }

    /// End of stream: returns the unfinished event, if any (marked `unterminated`).
    pub fn finish(&mut self, out: &mut Vec<SseItem>) {
        self.finish_with(&mut |r| out.push(r.to_item()));
    }

    /// Consumes `bytes`, handing each complete item to `f` (borrowed, no copy).
    pub fn push_with(&mut self, mut bytes: &[u8], f: &mut impl FnMut(SseRef<'_>)) {
        if bytes.is_empty() || self.overflow.is_some() {
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) {
            if self.line.len() + i > self.limits.line {
                let begin = if self.line.is_empty() {
                    &bytes[..i]
                } else {
                    &self.line[..]
                };
                let begin = begin[..begin.len().min(OVERFLOW_PREFIX)].to_vec();
                return self.overflowed(Over::Line, self.line.len() + i, &begin);
            }
            // The usual event — one `data:` line and the blank line after it, both in
            // this chunk — is handed out borrowed from the chunk, without copying.
            if self.line.is_empty()
                && !self.has_data
                && self.started
                && let Some(rest) = self.single_data_event(&bytes[..i], &bytes[i..], f)
            {
                bytes = rest;
                continue;
            }
            if self.line.is_empty() {
                self.line_done(&bytes[..i], f);
            } else {
                self.line.extend_from_slice(&bytes[..i]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, f);
                if self.overflow.is_none() {
                    self.line = line;
                    self.line.clear();
                }
            }
            if self.overflow.is_some() {
                return;
            }
            if let Some((rest, cr_at_end)) = past_line_end(&bytes[i..]) {
                bytes = rest;
                self.after_cr = cr_at_end;
            }
        }
        if self.line.len() + bytes.len() > self.limits.line {
            let read = self.line.len() + bytes.len();
            let mut begin = std::mem::take(&mut self.line);
            begin.truncate(OVERFLOW_PREFIX);
            let more = OVERFLOW_PREFIX.saturating_sub(begin.len()).min(bytes.len());
            begin.extend_from_slice(&bytes[..more]);
            return self.overflowed(Over::Line, read, &begin);
        }
        self.line.extend_from_slice(bytes);
    }

    /// `line` (complete, its terminator starting `term`) is a `data:` line in UTF-8 and
    /// a blank line follows it in `term`: hands `f` the event, borrowed, and returns
    /// what follows the blank line. Otherwise `None`, and nothing is consumed.
    fn single_data_event<'b>(
        &mut self,
        line: &[u8],
        term: &'b [u8],
        f: &mut impl FnMut(SseRef<'_>),
    ) -> Option<&'b [u8]> {
        let value = line.strip_prefix(b"data:")?;
        // A CR at the very end might be the first half of a CR LF split across reads.
        let (after, false) = past_line_end(term)? else {
            return None;
        };
        // The blank line.
        let (rest, after_cr) = past_line_end(after)?;
        let data = std::str::from_utf8(value.strip_prefix(b" ").unwrap_or(value)).ok()?;
        if data.len() > self.limits.event {
            // The slow path says so.
            return None;
        }
        f(SseRef::Event {
            event: self.event.as_deref(),
            data,
            id: self.id.as_deref(),
            unterminated: false,
        });
        self.reset();
        self.after_cr = after_cr;
        Some(rest)
    }

    /// End of stream: hands `f` the unfinished event, if any (marked `unterminated`).
    pub fn finish_with(&mut self, f: &mut impl FnMut(SseRef<'_>)) {
        if self.overflow.is_some() {
            return;
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, f);
        }
        if self.has_data && self.overflow.is_none() {
            self.dispatch(true, f);
        }
    }

    fn dispatch(&mut self, unterminated: bool, f: &mut impl FnMut(SseRef<'_>)) {
        self.has_data = false;
        f(SseRef::Event {
            event: self.event.as_deref(),
            data: &self.data,
            id: self.id.as_deref(),
            unterminated,
        });
        self.reset();
    }

    fn reset(&mut self) {
        self.data.clear();
        self.event = None;
        self.id = None;
    }

    fn line_done(&mut self, mut line: &[u8], f: &mut impl FnMut(SseRef<'_>)) {
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        if line.is_empty() {
            if self.has_data {
                self.dispatch(false, f);
            } else {
                self.reset();
            }
            return;
        }
        if let Some(c) = line.strip_prefix(b":") {
            f(SseRef::Comment(lossy(c).trim_start()));
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = lossy(value);
        match name {
            b"data" => {
                let size = self.data.len() + usize::from(self.has_data) + value.len();
                if size > self.limits.event {
                    let begin = if self.has_data {
                        self.data.as_bytes()
                    } else {
                        value.as_bytes()
                    };
                    let begin = begin[..begin.len().min(OVERFLOW_PREFIX)].to_vec();
                    return self.overflowed(Over::Event, size, &begin);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.event = Some(value.into_owned()),
            b"id" => self.id = Some(value.into_owned()),
            _ => {} // `retry:` and unknown fields are ignored, as the spec says
        }
    }
}

/// Past the line end `b` starts with (CR LF, CR or LF): the rest, and whether it was a
/// CR at the very end of `b` (its LF may come in the next read). `None` when `b` does
/// not start with one.
fn past_line_end(b: &[u8]) -> Option<(&[u8], bool)> {
    match b {
        [b'\r', b'\n', rest @ ..] => Some((rest, false)),
        [b'\r'] => Some((&b[1..], true)),
        [b'\r', rest @ ..] | [b'\n', rest @ ..] => Some((rest, false)),
        _ => None,
    }
}

/// Parses a whole body at once (tests, replays).
pub fn parse_all(bytes: &[u8]) -> Vec<SseItem> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.push(bytes, &mut out);
    p.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(items: &[SseItem]) -> Vec<String> {
        items
            .iter()
            .filter_map(|i| match i {
                SseItem::Event(e) => Some(e.data.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn parses_line_endings_comments_and_multiline() {
        let body = b": ping\r\ndata: a\r\n\r\ndata: b\rdata: c\r\rdata: d\n\n";
        let items = parse_all(body);
        assert_eq!(items[0], SseItem::Comment("ping".into()));
        assert_eq!(data(&items), vec!["a", "b\nc", "d"]);
    }

    #[test]
    fn unfinished_last_event_is_reported() {
        let items = parse_all(b"data: one\n\ndata: {\"partial\":");
        let SseItem::Event(e) = &items[1] else {
            panic!("expected event")
        };
        assert!(e.unterminated);
        assert_eq!(e.data, "{\"partial\":");
    }

    #[test]
    fn any_split_gives_the_same_events() {
        // Every line ending around single-line events (which the parser hands out
        // borrowed from the chunk when the blank line is in it too), fields before a
        // data line, invalid UTF-8, a bare `data` line.
        let body: &[u8] = b"\xEF\xBB\xBFdata: x\r\n\r\nevent: e\ndata:y\nid: 7\n\n: c\ndata: \xC3\xA9t\xC3\xA9\r\rdata: a\n\r\ndata: b\r\n\ndata: c\n\revent: f\nid: 9\ndata: d\n\ndata: \xFFz\n\ndata\n\ndata: [DONE]\n\n";
        let whole = parse_all(body);
        // One byte at a time never holds a whole event in one chunk: the reference.
        let mut p = SseParser::new();
        let mut bytewise = Vec::new();
        for b in body {
            p.push(std::slice::from_ref(b), &mut bytewise);
        }
        p.finish(&mut bytewise);
        assert_eq!(whole, bytewise);
        let SseItem::Event(d) = &whole[7] else {
            panic!("{whole:?}")
        };
        assert_eq!(
            (d.event.as_deref(), d.id.as_deref(), d.data.as_str()),
            (Some("f"), Some("9"), "d")
        );
        for i in 0..=body.len() {
            for j in i..=body.len() {
                let mut p = SseParser::new();
                let mut out = Vec::new();
                p.push(&body[..i], &mut out);
                p.push(&body[i..j], &mut out);
                p.push(&body[j..], &mut out);
                p.finish(&mut out);
                assert_eq!(out, whole, "split at {i},{j}");
            }
        }
        assert_eq!(
            data(&whole),
            vec![
                "x",
                "y",
                "été",
                "a",
                "b",
                "c",
                "d",
                "\u{FFFD}z",
                "",
                "[DONE]"
            ]
        );
    }

    #[test]
    fn a_line_past_its_limit_is_never_held_and_nothing_after_it_is_parsed() {
        let limits = SseLimits {
            line: 1000,
            event: 4000,
        };
        let mut p = SseParser::bounded(limits);
        let mut out = Vec::new();
        p.push(b"data: ok\n\n", &mut out);
        // 64 KiB without a line end, in 1 KiB reads: the parser never holds more
        // than the limit.
        let junk = vec![b'x'; 1024];
        p.push(b"data: ", &mut out);
        for _ in 0..64 {
            p.push(&junk, &mut out);
            assert!(p.line.capacity() <= 2048, "{}", p.line.capacity());
        }
        p.push(b"\n\ndata: after\n\n", &mut out);
        p.finish(&mut out);
        assert_eq!(data(&out), vec!["ok"], "nothing after the overflow");
        let o = p.overflow().expect("overflow");
        assert_eq!((o.what, o.limit), (Over::Line, 1000));
        assert!(o.read > 1000 && o.read <= 1000 + 1024, "{o:?}");
        assert!(o.prefix.starts_with("data: xxx") && o.prefix.len() <= OVERFLOW_PREFIX);
        // A long line within one read, and its end in the same read, passes too.
        let mut p = SseParser::bounded(limits);
        let mut line = b"data: ".to_vec();
        line.extend(vec![b'y'; 1500]);
        line.extend_from_slice(b"\n\n");
        p.push(&line, &mut out);
        assert_eq!(p.overflow().map(|o| o.what), Some(Over::Line));
    }

    #[test]
    fn an_event_past_its_limit_is_an_overflow_and_smaller_ones_parse_as_unbounded() {
        let limits = SseLimits {
            line: 100,
            event: 250,
        };
        let body = b"data: a\ndata: b\n\n: ping\ndata: [DONE]\n\n";
        let mut p = SseParser::bounded(limits);
        let mut out = Vec::new();
        p.push(body, &mut out);
        p.finish(&mut out);
        assert_eq!(out, parse_all(body));
        assert!(p.overflow().is_none());
        // Five 90-byte data lines of one event: each line fits, the event does not.
        let mut p = SseParser::bounded(limits);
        let mut out = Vec::new();
        for k in 0..5 {
            p.push(
                format!("data: {}\n", k.to_string().repeat(84)).as_bytes(),
                &mut out,
            );
        }
        p.push(b"\n", &mut out);
        p.finish(&mut out);
        assert!(out.is_empty(), "{out:?}");
        let o = p.overflow().expect("overflow");
        assert_eq!((o.what, o.limit), (Over::Event, 250));
        assert!(o.read > 250, "{o:?}");
        assert!(o.prefix.starts_with("000"), "{o:?}");
        // One data line over the event limit, whole in one read (the fast path).
        let mut p = SseParser::bounded(SseLimits {
            line: 1000,
            event: 10,
        });
        p.push(b"data: 0123456789abc\n\n", &mut out);
        assert_eq!(p.overflow().map(|o| o.what), Some(Over::Event));
    }
}
