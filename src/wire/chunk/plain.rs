//! The plain delta nearly every chunk of a stream is — one choice whose delta holds
//! at most `role` and `content` (other delta fields null), an optional
//! `finish_reason`, strings without escapes, no nested values outside `choices` — read
//! by a small scanner instead of serde (the client's hot path). Anything else, or
//! anything it is not sure of, gives `None` and goes through serde: the scanner accepts
//! only what serde's path reads to the same [`ChunkInfo`].

use std::borrow::Cow;

use super::info::ChunkInfo;
use crate::wire::kinds::ChunkKind;
use crate::wire::scan::plain_prefix;

/// What a plain delta says: built straight into a [`ChunkInfo`], as serde's path
/// would for the same payload (no `Wire` in between: its moves cost more than the
/// scan).
pub(super) struct Plain<'a> {
    id: Option<&'a str>,
    content: Option<&'a str>,
    finish: Option<&'a str>,
}

impl<'a> Plain<'a> {
    pub(super) fn info(self) -> ChunkInfo<'a> {
        let text = self.content.filter(|t| !t.is_empty()).map(Cow::Borrowed);
        let finish = self.finish.map(Cow::Borrowed);
        let kind = match (&text, &finish) {
            (Some(_), _) => ChunkKind::Content,
            (None, Some(_)) => ChunkKind::Finish,
            (None, None) => ChunkKind::Role,
        };
        ChunkInfo {
            kind: Some(kind),
            text,
            cid: self.id.map(Cow::Borrowed),
            finish,
            ..Default::default()
        }
    }
}

struct Scan<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Skips whitespace, then consumes `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    /// A string with no escapes or control characters, borrowed.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let len = plain_prefix(&self.b[start..]);
        if self.b.get(start + len) != Some(&b'"') {
            return None;
        }
        self.i = start + len + 1;
        self.s.get(start..start + len)
    }

    /// `null` → `Some(None)`, a plain string → `Some(Some(s))`.
    fn opt_str(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.plain_str().map(Some)
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        self.ws();
        let end = self.i + w.len();
        (self.b.get(self.i..end)? == w).then(|| self.i = end)
    }

    fn null(&mut self) -> Option<()> {
        self.word(b"null")
    }

    /// Skips a scalar: any string (escapes checked), a number, true/false/null.
    /// Objects and arrays are not skipped here: `None`.
    fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.any_str(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.null(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn any_str(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            // Surrogates need pairing rules: leave them to serde.
                            if matches!(hex[0], b'd' | b'D') && !matches!(hex[1], b'0'..=b'7') {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }

    /// JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    fn number(&mut self) -> Option<()> {
        let digits = |sc: &mut Self| {
            let start = sc.i;
            while sc.b.get(sc.i).is_some_and(u8::is_ascii_digit) {
                sc.i += 1;
            }
            (sc.i > start).then_some(())
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => digits(self)?,
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            digits(self)?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            digits(self)?;
        }
        Some(())
    }

    /// The members of an object: `f` is called with each key, after its `:`.
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.plain_str()?;
            self.eat(b':')?;
            f(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// Sets a field once: a repeated field is an error to serde, so `None` here.
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(v);
            Some(())
        }
    }
}

pub(super) fn scan(s: &str) -> Option<Plain<'_>> {
    let mut sc = Scan {
        s,
        b: s.as_bytes(),
        i: 0,
    };
    let mut id: Option<Option<&str>> = None;
    let mut object: Option<Option<&str>> = None;
    let mut choice: Option<(Option<&str>, Option<&str>)> = None;
    let (mut usage, mut error) = (None, None);
    sc.object(|sc, key| match key {
        "id" => once(&mut id, sc.opt_str()?),
        "object" => once(&mut object, sc.opt_str()?),
        // Present and not null: serde's path reads them.
        "usage" => once(&mut usage, sc.null()?),
        "error" => once(&mut error, sc.null()?),
        "choices" => {
            if choice.is_some() {
                return None;
            }
            sc.eat(b'[')?;
            choice = Some(one_choice(sc)?);
            sc.eat(b']')
        }
        _ => sc.scalar(),
    })?;
    sc.ws();
    if sc.i != sc.b.len() || object == Some(Some("error")) {
        return None;
    }
    let (content, finish) = choice?;
    Some(Plain {
        id: id.flatten(),
        content,
        finish,
    })
}

/// The one choice: its delta's content and its finish reason.
fn one_choice<'a>(sc: &mut Scan<'a>) -> Option<(Option<&'a str>, Option<&'a str>)> {
    let mut delta: Option<Option<&'a str>> = None;
    let mut finish: Option<Option<&'a str>> = None;
    let (mut message, mut text) = (None, None);
    sc.object(|sc, key| match key {
        "delta" => {
            if sc.peek()? == b'n' {
                sc.null()?;
                return once(&mut delta, None);
            }
            let d = one_delta(sc)?;
            once(&mut delta, d)
        }
        "finish_reason" => once(&mut finish, sc.opt_str()?),
        "message" => once(&mut message, sc.null()?),
        "text" => once(&mut text, sc.null()?),
        _ => sc.scalar(),
    })?;
    Some((delta.flatten(), finish.flatten()))
}

/// A delta: its content (`role` and other scalars skipped; the other text fields
/// and tool calls must be null).
fn one_delta<'a>(sc: &mut Scan<'a>) -> Option<Option<&'a str>> {
    let mut content: Option<Option<&'a str>> = None;
    let (mut reasoning_content, mut reasoning, mut tool_calls) = (None, None, None);
    sc.object(|sc, key| match key {
        "content" => once(&mut content, sc.opt_str()?),
        "reasoning_content" => once(&mut reasoning_content, sc.null()?),
        "reasoning" => once(&mut reasoning, sc.null()?),
        "tool_calls" => once(&mut tool_calls, sc.null()?),
        _ => sc.scalar(),
    })?;
    Some(content.flatten())
}
