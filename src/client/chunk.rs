//! What one SSE `data:` payload of an OpenAI-compatible stream says.
//!
//! Parsed with borrowed strings (no copy unless the JSON escapes something) into only
//! the fields haq reads; everything else is skipped. Shapes read: OpenAI/vLLM/SGLang
//! chat and completions chunks, llama.cpp (role delta with `content: null`, usage on
//! `choices: []` with `timings`), LiteLLM (usage on an empty delta, in-band
//! `{"error": {...}}`), the seed's explicit error (M3).

use std::borrow::Cow;

use serde::Deserialize;

use crate::trace::{ChunkKind, InBandError, Usage};

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

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Choices<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
}

/// `choices`, read without a heap allocation for the usual single choice.
struct Choices<'a> {
    first: Option<WireChoice<'a>>,
    rest: Vec<WireChoice<'a>>,
}

impl<'a> IntoIterator for Choices<'a> {
    type Item = WireChoice<'a>;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<WireChoice<'a>>, std::vec::IntoIter<WireChoice<'a>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let first = seq.next_element()?;
                let mut rest = Vec::new();
                if first.is_some() {
                    while let Some(c) = seq.next_element()? {
                        rest.push(c);
                    }
                }
                Ok(Choices { first, rest })
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    /// A non-streaming chat answer.
    #[serde(default, borrow)]
    message: Option<WireDelta<'a>>,
    /// `/v1/completions` streams `text` instead of a delta.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<WireDetails>,
}

#[derive(Deserialize)]
struct WireDetails {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

fn nonempty(s: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    s.filter(|t| !t.is_empty())
}

/// Joins text pieces, borrowing while there is only one.
fn add<'a>(text: &mut Option<Cow<'a, str>>, piece: Cow<'a, str>) {
    match text {
        None => *text = Some(piece),
        Some(t) => t.to_mut().push_str(&piece),
    }
}

/// Reads an in-band error object (`{"error": {...}}` or `{"object": "error", ...}`).
pub fn read_error(v: &serde_json::Value) -> InBandError {
    let s = |k: &str| match &v[k] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let mut e = InBandError {
        n: 0,
        code: s("code"),
        message: s("message"),
        kind: s("type"),
        request_id: s("request_id"),
        partial_output: v["partial_output"].as_bool(),
        delivered_output_tokens: v["delivered_output_tokens"].as_u64(),
        retryable: v["retryable"].as_bool(),
        seed_shape: false,
    };
    e.seed_shape = e.code.as_deref() == Some("upstream_decode_interrupted")
        && e.request_id.is_some()
        && e.partial_output.is_some()
        && e.delivered_output_tokens.is_some()
        && e.retryable.is_some();
    e
}

/// Classifies one `data:` payload (streamed chunk or a whole non-streaming answer);
/// the result owns its text.
pub fn classify(data: &str) -> ChunkInfo<'static> {
    classify_ref(data).into_owned()
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

/// As [`classify`], borrowing the text fields from `data` where the JSON allows (the
/// client's read loop).
pub fn classify_ref(data: &str) -> ChunkInfo<'_> {
    classify_with(data, true)
}

/// `fast`: try the plain-delta scanner first (tests compare both ways).
fn classify_with(data: &str, fast: bool) -> ChunkInfo<'_> {
    // `[DONE]` with any whitespace is short: no scan of a long payload.
    if data.len() < 32 && data.trim() == "[DONE]" {
        return ChunkInfo {
            kind: Some(ChunkKind::Done),
            ..Default::default()
        };
    }
    if fast && let Some(p) = plain::scan(data) {
        return p.info();
    }
    let w = match serde_json::from_str::<Wire>(data) {
        Ok(w) => w,
        Err(_) => {
            return ChunkInfo {
                kind: Some(ChunkKind::Other),
                unparsable: serde_json::from_str::<serde::de::IgnoredAny>(data).is_err(),
                keep_raw: true,
                ..Default::default()
            };
        }
    };
    let mut info = ChunkInfo {
        cid: w.id,
        ..Default::default()
    };
    if w.error.is_some() || w.object.as_deref() == Some("error") {
        let err = match &w.error {
            Some(e @ serde_json::Value::Object(_)) => read_error(e),
            Some(other) => InBandError {
                message: Some(other.to_string()),
                ..Default::default()
            },
            // `{"object": "error", "message": ..., "code": ...}` (vLLM's shape)
            None => serde_json::from_str::<serde_json::Value>(data)
                .map(|v| read_error(&v))
                .unwrap_or_default(),
        };
        info.kind = Some(ChunkKind::Error);
        info.error = Some(err);
        info.keep_raw = true;
        return info;
    }
    info.usage = w.usage.as_ref().map(|u| Usage {
        prompt: u.prompt_tokens,
        completion: u.completion_tokens,
        cached: u
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens),
    });
    let has_choices = w.choices.is_some();
    let mut kind = None;
    let mut text = None;
    for c in w.choices.into_iter().flatten() {
        if let Some(f) = c.finish_reason {
            info.finish = Some(f);
        }
        if let Some(t) = nonempty(c.text) {
            add(&mut text, t);
            kind = Some(ChunkKind::Content);
        }
        let Some(d) = c.delta.or(c.message) else {
            continue;
        };
        if let Some(t) = nonempty(d.content) {
            add(&mut text, t);
            kind = Some(ChunkKind::Content);
        }
        if let Some(t) = nonempty(d.reasoning_content).or(nonempty(d.reasoning)) {
            add(&mut text, t);
            kind.get_or_insert(ChunkKind::Reasoning);
        }
        for (i, tc) in d.tool_calls.into_iter().flatten().enumerate() {
            let (name, arguments) = match tc.function {
                Some(f) => (nonempty(f.name), nonempty(f.arguments)),
                None => (None, None),
            };
            if let Some(n) = &name {
                add(&mut text, n.clone());
            }
            if let Some(a) = &arguments {
                add(&mut text, a.clone());
            }
            info.tools.push(ToolFragment {
                index: tc.index.unwrap_or(i as u32),
                id: tc.id.map(Cow::into_owned),
                name: name.map(Cow::into_owned),
                arguments: arguments.map(Cow::into_owned),
            });
            kind.get_or_insert(ChunkKind::ToolCall);
        }
    }
    info.text = text;
    info.kind = Some(match kind {
        Some(k) => k,
        None if info.finish.is_some() => ChunkKind::Finish,
        None if w.usage.is_some() => ChunkKind::Usage,
        None if has_choices => ChunkKind::Role,
        None => ChunkKind::Other,
    });
    info.keep_raw = matches!(info.kind, Some(ChunkKind::Usage | ChunkKind::Other));
    info
}

/// The plain delta nearly every chunk of a stream is — one choice whose delta holds
/// at most `role` and `content` (other delta fields null), an optional
/// `finish_reason`, strings without escapes, no nested values outside `choices` — read
/// by a small scanner instead of serde (the client's hot path). Anything else, or
/// anything it is not sure of, gives `None` and goes through serde: the scanner accepts
/// only what serde's path reads to the same [`ChunkInfo`].
mod plain {
    use std::borrow::Cow;

    use super::{ChunkInfo, ChunkKind};
    use crate::trace::plain_prefix;

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let c = classify(
            r#"{"id":"a","choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        );
        assert_eq!(c.kind, Some(ChunkKind::Role));
        let c = classify(r#"{"id":"a","choices":[{"index":0,"delta":{"content":" hi"}}]}"#);
        assert_eq!(
            (c.kind, c.text.as_deref()),
            (Some(ChunkKind::Content), Some(" hi"))
        );
        let c = classify(r#"{"id":"a","choices":[{"index":0,"delta":{"content":"\"q\"\n"}}]}"#);
        assert_eq!(c.text.as_deref(), Some("\"q\"\n"), "escapes decoded");
        let c =
            classify(r#"{"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(
            (c.kind, c.finish.as_deref()),
            (Some(ChunkKind::Finish), Some("length"))
        );
        let c = classify(
            r#"{"id":"a","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}"#,
        );
        assert_eq!(
            (c.kind, c.usage_tokens()),
            (Some(ChunkKind::Usage), Some(7))
        );
        assert_eq!(c.usage.and_then(|u| u.cached), Some(2));
        let c = classify(
            r#"{"id":"a","choices":[{"index":0,"delta":{}}],"usage":{"completion_tokens":2}}"#,
        );
        assert_eq!(c.kind, Some(ChunkKind::Usage));
        assert_eq!(classify("[DONE]").kind, Some(ChunkKind::Done));
        let c = classify("{oops");
        assert_eq!(c.kind, Some(ChunkKind::Other));
        assert!(c.unparsable);
        let c = classify(r#"{"unknown":"shape"}"#);
        assert_eq!(c.kind, Some(ChunkKind::Other));
        assert!(
            !c.unparsable,
            "valid JSON of an unknown shape is not malformed"
        );
        let c = classify(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
        );
        assert_eq!(
            (c.kind, c.text.as_deref()),
            (Some(ChunkKind::ToolCall), Some("f{\"a\""))
        );
        assert_eq!(c.tools[0].index, 1);
        assert_eq!(c.tools[0].id.as_deref(), Some("call_1"));
        let c = classify(r#"{"choices":[{"index":0,"text":" x","finish_reason":null}]}"#);
        assert_eq!(c.kind, Some(ChunkKind::Content));
        let c =
            classify(r#"{"id":"r","choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#);
        assert_eq!(c.kind, Some(ChunkKind::Reasoning));
        // a whole non-streaming answer
        let c = classify(
            r#"{"id":"w","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"all of it"},"finish_reason":"stop"}],"usage":{"completion_tokens":3}}"#,
        );
        assert_eq!(
            (c.kind, c.text.as_deref(), c.finish.as_deref()),
            (Some(ChunkKind::Content), Some("all of it"), Some("stop"))
        );
    }

    #[test]
    fn errors_are_read_field_by_field() {
        let c =
            classify(r#"{"error": {"message": "x", "type": null, "param": null, "code": "500"}}"#);
        assert_eq!(c.kind, Some(ChunkKind::Error));
        let e = c.error.expect("error");
        assert_eq!(
            (e.code.as_deref(), e.message.as_deref()),
            (Some("500"), Some("x"))
        );
        assert!(!e.seed_shape);
        let c = classify(
            r#"{"error":{"code":"upstream_decode_interrupted","message":"m","request_id":"r1","partial_output":true,"delivered_output_tokens":5,"retryable":false}}"#,
        );
        let e = c.error.expect("error");
        assert!(e.seed_shape, "{e:?}");
        assert_eq!(e.delivered_output_tokens, Some(5));
        assert_eq!(e.request_id.as_deref(), Some("r1"));
        let c =
            classify(r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#);
        let e = c.error.expect("error");
        assert_eq!(
            (e.code.as_deref(), e.kind.as_deref()),
            (Some("400"), Some("BadRequestError"))
        );
    }

    /// The plain-delta scanner is only a shortcut: over thousands of generated payloads
    /// (real shapes, every field in several forms, shuffled keys, then cut or corrupted)
    /// classifying with it gives exactly what serde alone gives; and it does take the
    /// common shapes (vLLM's, llama.cpp's, the bench server's).
    #[test]
    fn the_plain_delta_scanner_agrees_with_serde() {
        use rand::seq::SliceRandom;
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let strs = [
            r#""plain""#,
            r#""""#,
            r#"" sp""#,
            r#""q\"e""#,
            r#""nl\n""#,
            r#""\u00e9\u65e5""#,
            r#""\ud83d\ude42""#,
            r#""\ud800""#,
            "\"été 日本 🙂\"",
            r#""bad\x""#,
            "null",
            "7",
        ];
        let nums = [
            "0", "-0", "17", "1.5", "-2e10", "1E+3", "01", "1.", ".5", "-", "1e",
        ];
        let deltas = [
            "{}",
            r#"{"role":"assistant"}"#,
            r#"{"role":"assistant","content":null}"#,
            r#"{"role":"assistant","content":""}"#,
            r#"{"content":S}"#,
            r#"{"content":S,"reasoning_content":null,"tool_calls":null}"#,
            r#"{"role":null,"content":S,"reasoning_content":null}"#,
            r#"{"reasoning_content":S}"#,
            r#"{"reasoning":S,"content":null}"#,
            r#"{"content":S,"content":S}"#,
            r#"{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]}"#,
            r#"{"tool_calls":null,"content":S}"#,
            "null",
            "5",
        ];
        let choices = [
            r#"{"index":0,"delta":D,"logprobs":null,"finish_reason":F}"#,
            r#"{"delta":D,"finish_reason":F,"index":N}"#,
            r#"{"index":0,"delta":D}"#,
            r#"{"index":0,"delta":D,"logprobs":{"content":[]},"finish_reason":F}"#,
            r#"{"index":0,"text":S,"finish_reason":F}"#,
            r#"{"index":0,"message":{"role":"assistant","content":S},"finish_reason":F}"#,
            r#"{"index":0,"delta":D,"finish_reason":F,"finish_reason":F}"#,
            r#"{"index":0,"delta":D,"stop_reason":N}"#,
        ];
        let mut fast_taken = 0;
        let mut checked = 0;
        for _ in 0..20_000 {
            let pick = |rng: &mut rand_chacha::ChaCha8Rng, xs: &[&str]| {
                xs[rng.random_range(0..xs.len())].to_string()
            };
            let fill = |rng: &mut rand_chacha::ChaCha8Rng, t: String| {
                let mut t = t;
                while let Some(i) = t.find('S') {
                    let v = pick(rng, &strs);
                    t.replace_range(i..i + 1, &v);
                }
                while let Some(i) = t.find('N') {
                    let v = pick(rng, &nums);
                    t.replace_range(i..i + 1, &v);
                }
                while let Some(i) = t.find('F') {
                    let v = pick(
                        rng,
                        &["null", r#""stop""#, r#""length""#, r#""st\"op""#, "1"],
                    );
                    t.replace_range(i..i + 1, &v);
                }
                t
            };
            let delta = pick(&mut rng, &deltas);
            let delta = fill(&mut rng, delta);
            let n_choices = [1, 1, 1, 1, 0, 2][rng.random_range(0..6usize)];
            let mut cs = Vec::new();
            for _ in 0..n_choices {
                let c = pick(&mut rng, &choices).replace('D', &delta);
                cs.push(fill(&mut rng, c));
            }
            let mut members = vec![format!(r#""choices":[{}]"#, cs.join(","))];
            for (key, vals) in [
                ("id", &[r#""chatcmpl-1""#, r#""a\"b""#, "null", "3"][..]),
                (
                    "object",
                    &[r#""chat.completion.chunk""#, r#""error""#, "null"][..],
                ),
                ("created", &["1795982190", "-1.5e3", "01"][..]),
                ("model", &[r#""m/x""#, r#""m\/x""#, r#""m""#][..]),
                ("system_fingerprint", &["null", r#""fp""#][..]),
                ("usage", &["null", r#"{"completion_tokens":3}"#][..]),
                ("error", &["null", r#"{"message":"x"}"#][..]),
                ("timings", &[r#"{"predicted_n":3}"#][..]),
            ] {
                if rng.random_bool(0.5) {
                    members.push(format!(r#""{key}":{}"#, pick(&mut rng, vals)));
                }
            }
            if rng.random_bool(0.05) {
                members.push(members[0].clone());
            }
            members.shuffle(&mut rng);
            let sep = [",", ", ", " ,\n"][rng.random_range(0..3usize)];
            let mut payload = format!("{{{}}}", members.join(sep));
            let mut at = rng.random_range(0..payload.len());
            while !payload.is_char_boundary(at) {
                at -= 1;
            }
            match rng.random_range(0..10u32) {
                0 => payload.truncate(at),
                1 => payload.push_str(" x"),
                2 => payload.insert(at, '\u{1}'),
                3 => payload = format!(" \t{payload}\r\n"),
                _ => {}
            }
            let fast = classify_with(&payload, true);
            let slow = classify_with(&payload, false);
            assert_eq!(fast, slow, "{payload}");
            fast_taken += usize::from(plain::scan(&payload).is_some());
            checked += 1;
        }
        assert!(checked > 19_000, "{checked}");
        assert!(
            fast_taken > 150,
            "the scanner took only {fast_taken} payloads"
        );
        // The shapes a stream is mostly made of take the scanner.
        for p in [
            r#"{"id":"chatcmpl-bench-00000007","object":"chat.completion.chunk","created":1795982190,"model":"bench","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" t123"},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"id":"cmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" the"}}],"created":1732112345,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b4150-ab","object":"chat.completion.chunk"}"#,
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":null,"content":"x","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":1}]}"#,
        ] {
            assert!(plain::scan(p).is_some(), "{p}");
            assert_eq!(classify_with(p, true), classify_with(p, false));
        }
    }
}

#[cfg(test)]
mod speed {
    /// The bench server's content delta.
    const DELTA: &str = r#"{"id":"chatcmpl-bench-00000042","object":"chat.completion.chunk","created":1795982190,"model":"bench","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" r30018884712541s30018906009400"},"logprobs":null,"finish_reason":null}]}"#;

    /// ns per call of `f`, the fastest of 20 rounds of `n` calls: this VM's speed moves
    /// by a third from second to second.
    fn fastest_ns(n: u32, mut f: impl FnMut(u32)) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            for k in 0..n {
                f(k);
            }
            best = best.min(t.elapsed().as_nanos() as f64 / f64::from(n));
        }
        best
    }

    /// Classification cost of the bench server's content delta (manual:
    /// `cargo test --release --lib classify_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn classify_speed() {
        for fast in [true, false] {
            let mut k = 0usize;
            let ns = fastest_ns(200_000, |_| {
                let i = super::classify_with(std::hint::black_box(DELTA), fast);
                k += i.text.map_or(0, |s| s.len());
            });
            println!("fast={fast}: {ns:.1} ns per classify ({k})");
        }
    }

    /// Everything haq does per SSE event in the read loop but the socket: SSE parse,
    /// classification, the stream's fold and the chunk's trace line (into a buffer).
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
