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

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` in the next one belongs to it.
    after_cr: bool,
    cur: SseEvent,
    has_data: bool,
    started: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes`, appending complete items to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseItem>) {
        if bytes.is_empty() {
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(i) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..i]);
            let cr = bytes[i] == b'\r';
            bytes = &bytes[i + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    _ => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out);
            self.line = line;
            self.line.clear();
        }
        self.line.extend_from_slice(bytes);
    }

    /// End of stream: returns the unfinished event, if any (marked `unterminated`).
    pub fn finish(&mut self, out: &mut Vec<SseItem>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out);
        }
        if self.has_data {
            let mut ev = std::mem::take(&mut self.cur);
            ev.unterminated = true;
            self.has_data = false;
            out.push(SseItem::Event(ev));
        }
    }

    fn line_done(&mut self, mut line: &[u8], out: &mut Vec<SseItem>) {
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                out.push(SseItem::Event(std::mem::take(&mut self.cur)));
            } else {
                self.cur = SseEvent::default();
            }
            return;
        }
        if let Some(c) = line.strip_prefix(b":") {
            out.push(SseItem::Comment(
                String::from_utf8_lossy(c).trim_start().to_string(),
            ));
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => {
                if self.has_data {
                    self.cur.data.push('\n');
                }
                self.cur.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.cur.event = Some(value.into_owned()),
            b"id" => self.cur.id = Some(value.into_owned()),
            _ => {} // `retry:` and unknown fields are ignored, as the spec says
        }
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
        let body: &[u8] = b"\xEF\xBB\xBFdata: x\r\n\r\nevent: e\ndata:y\nid: 7\n\n: c\ndata: \xC3\xA9t\xC3\xA9\r\rdata: [DONE]\n\n";
        let whole = parse_all(body);
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
        assert_eq!(data(&whole), vec!["x", "y", "été", "[DONE]"]);
    }
}
