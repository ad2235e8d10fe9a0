//! An incremental Server-Sent Events parser (WHATWG `text/event-stream`).
//!
//! Fed whatever byte chunks the network delivers; yields complete events. Unlike
//! eventsource-stream, it reports an event left unfinished at end of stream (the last
//! bytes a dying server wrote are evidence too) and it surfaces comments, so
//! keep-alives are visible.

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

#[derive(Debug, Default)]
pub struct SseParser {
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
        if bytes.is_empty() {
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) {
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
                self.line = line;
                self.line.clear();
            }
            if let Some((rest, cr_at_end)) = past_line_end(&bytes[i..]) {
                bytes = rest;
                self.after_cr = cr_at_end;
            }
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
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, f);
        }
        if self.has_data {
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
}
