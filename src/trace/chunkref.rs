//! A chunk event with borrowed fields, as the client's read loop has it: written to the
//! trace without building an [`Event`] (no allocation per SSE event). Its line is byte
//! for byte the one `serde_json` writes for the [`Event::Chunk`] it stands for.

use super::{ChunkKind, Event};
use crate::wire::scan::plain_prefix;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    pub t: u64,
    pub id: &'a str,
    pub n: u32,
    pub kind: ChunkKind,
    pub text: Option<&'a str>,
    pub cid: Option<&'a str>,
    pub finish: Option<&'a str>,
    pub raw: Option<&'a str>,
}

impl ChunkRef<'_> {
    /// The owned event.
    pub fn to_event(&self) -> Event {
        let own = |s: Option<&str>| s.map(str::to_string);
        Event::Chunk {
            t: self.t,
            id: self.id.to_string(),
            n: self.n,
            kind: self.kind,
            text: own(self.text),
            cid: own(self.cid),
            finish: own(self.finish),
            raw: own(self.raw),
        }
    }

    /// Appends the JSON object (no newline).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"ev\":\"chunk\",\"t\":");
        num(out, self.t);
        out.extend_from_slice(b",\"id\":");
        string(out, self.id);
        out.extend_from_slice(b",\"n\":");
        num(out, u64::from(self.n));
        out.extend_from_slice(b",\"kind\":\"");
        out.extend_from_slice(self.kind.as_str().as_bytes());
        out.push(b'"');
        for (key, v) in [
            (&b",\"text\":"[..], self.text),
            (b",\"cid\":", self.cid),
            (b",\"finish\":", self.finish),
            (b",\"raw\":", self.raw),
        ] {
            if let Some(v) = v {
                out.extend_from_slice(key);
                string(out, v);
            }
        }
        out.push(b'}');
    }
}

/// Reads a chunk line exactly as [`ChunkRef::write_json`] writes it — keys in its
/// order, numbers without leading zeros, strings without escapes — as judging reads
/// nearly every line. Anything else, valid or not, is `None`: the serde paths then
/// read it (or fail), so this never accepts a line serde would refuse.
pub(super) fn read(line: &str) -> Option<ChunkRef<'_>> {
    let mut r = Reader { s: line, i: 0 };
    r.lit("{\"ev\":\"chunk\",\"t\":")?;
    let t = r.num()?;
    r.lit(",\"id\":")?;
    let id = r.str()?;
    r.lit(",\"n\":")?;
    let n = u32::try_from(r.num()?).ok()?;
    r.lit(",\"kind\":")?;
    let name = r.str()?;
    let kind = ChunkKind::from_name(name)?;
    let text = r.field(",\"text\":")?;
    let cid = r.field(",\"cid\":")?;
    let finish = r.field(",\"finish\":")?;
    let raw = r.field(",\"raw\":")?;
    r.lit("}")?;
    (r.i == line.len()).then_some(ChunkRef {
        t,
        id,
        n,
        kind,
        text,
        cid,
        finish,
        raw,
    })
}

struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn lit(&mut self, l: &str) -> Option<()> {
        self.s[self.i..].starts_with(l).then(|| self.i += l.len())
    }

    /// An unsigned integer as JSON writes it (no sign, no leading zero), within u64.
    #[inline(always)]
    fn num(&mut self) -> Option<u64> {
        let b = &self.s.as_bytes()[self.i..];
        let mut v: u64 = 0;
        let mut len = 0;
        for &c in b.iter().take_while(|c| c.is_ascii_digit()) {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            len += 1;
        }
        if len == 0 || (len > 1 && b[0] == b'0') {
            return None;
        }
        self.i += len;
        Some(v)
    }

    /// A string without escapes or control characters, borrowed.
    #[inline(always)]
    fn str(&mut self) -> Option<&'a str> {
        self.lit("\"")?;
        let rest = &self.s.as_bytes()[self.i..];
        let len = plain_prefix(rest);
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        let out = &self.s[self.i..self.i + len];
        self.i += len + 1;
        Some(out)
    }

    /// An optional member: absent → `Some(None)`; present and readable →
    /// `Some(Some(..))`; present and not → `None`.
    #[inline(always)]
    fn field(&mut self, key: &str) -> Option<Option<&'a str>> {
        if self.lit(key).is_none() {
            return Some(None);
        }
        self.str().map(Some)
    }
}

/// A chunk line as read back ([`super::parse_line`]): the fields of
/// [`Event::Chunk`] in a plain struct (the `ev` key is ignored).
#[derive(serde::Deserialize)]
pub(super) struct ChunkLine {
    t: u64,
    id: String,
    n: u32,
    kind: ChunkKind,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    cid: Option<String>,
    #[serde(default)]
    finish: Option<String>,
    #[serde(default)]
    raw: Option<String>,
}

impl From<ChunkLine> for Event {
    fn from(c: ChunkLine) -> Event {
        Event::Chunk {
            t: c.t,
            id: c.id,
            n: c.n,
            kind: c.kind,
            text: c.text,
            cid: c.cid,
            finish: c.finish,
            raw: c.raw,
        }
    }
}

fn num(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// A JSON string, escaped as serde_json escapes it.
fn string(out: &mut Vec<u8>, s: &str) {
    if plain_prefix(s.as_bytes()) == s.len() {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk kind.
    const KINDS: [ChunkKind; 10] = [
        ChunkKind::Role,
        ChunkKind::Content,
        ChunkKind::Reasoning,
        ChunkKind::ToolCall,
        ChunkKind::Finish,
        ChunkKind::Usage,
        ChunkKind::Error,
        ChunkKind::Done,
        ChunkKind::Other,
        ChunkKind::Comment,
    ];

    #[test]
    fn the_line_is_the_one_serde_writes_for_the_event() {
        let texts = [
            None,
            Some(""),
            Some(" plain"),
            Some("quote \" backslash \\ newline \n tab \t nul \u{0} del \u{7f}"),
            Some("été — 日本 🙂 \u{2028}"),
        ];
        let mut checked = 0;
        for (i, kind) in KINDS.into_iter().enumerate() {
            for (j, text) in texts.iter().enumerate() {
                let c = ChunkRef {
                    t: [0, 7, 1_234_567_890_123, u64::MAX][(i + j) % 4],
                    id: ["r-1", "a\"b"][j % 2],
                    n: [0, 9, u32::MAX][i % 3],
                    kind,
                    text: *text,
                    cid: texts[(i + 1) % texts.len()],
                    finish: [None, Some("stop")][i % 2],
                    raw: texts[(i + j + 2) % texts.len()],
                };
                let mut mine = Vec::new();
                c.write_json(&mut mine);
                let serde = serde_json::to_vec(&c.to_event()).expect("serialize");
                assert_eq!(
                    String::from_utf8_lossy(&mine),
                    String::from_utf8_lossy(&serde)
                );
                // Read back: the chunk fast path gives the event the tagged path gives.
                let line = std::str::from_utf8(&mine).expect("utf-8");
                let slow: Event = serde_json::from_str(line).expect("tagged read");
                assert_eq!(super::super::parse_line(line).expect("fast read"), slow);
                // The plain reader reads every line without escapes, and reads it right.
                let escaped = line.contains('\\');
                match read(line) {
                    Some(c) => assert_eq!(c.to_event(), slow, "{line}"),
                    None => assert!(escaped, "plain line not read: {line}"),
                }
                assert_eq!(slow, c.to_event());
                checked += 1;
            }
        }
        assert_eq!(checked, 50);
        for k in KINDS {
            assert_eq!(ChunkKind::from_name(k.as_str()), Some(k));
            let json = serde_json::to_string(&k).expect("kind");
            assert_eq!(json, format!("\"{}\"", k.as_str()), "serde writes as_str");
        }
        assert_eq!(ChunkKind::from_name("Content"), None);
    }

    /// Whatever the plain reader accepts, serde reads the same: every line one byte
    /// off a written one (each byte replaced by each of a set of bytes, or removed).
    #[test]
    fn the_plain_reader_never_accepts_what_serde_reads_otherwise() {
        let c = ChunkRef {
            t: 1_234_567,
            id: "r000042",
            n: 17,
            kind: ChunkKind::Content,
            text: Some(" tok 3"),
            cid: Some("chatcmpl-9"),
            finish: Some("stop"),
            raw: None,
        };
        let mut line = Vec::new();
        c.write_json(&mut line);
        let mut accepted = 0;
        let mut check = |b: &[u8]| {
            let Ok(s) = std::str::from_utf8(b) else {
                return;
            };
            if let Some(ev) = read(s).map(|c| c.to_event()) {
                accepted += 1;
                let slow: Event = serde_json::from_str(s).unwrap_or_else(|e| panic!("{s}: {e}"));
                assert_eq!(ev, slow, "{s}");
            }
        };
        check(&line);
        for i in 0..line.len() {
            for b in [
                b'0', b'9', b'-', b'"', b'\\', b' ', b'}', b',', b':', b'x', 0x01, b'{',
            ] {
                let mut m = line.clone();
                m[i] = b;
                check(&m);
            }
            let mut m = line.clone();
            m.remove(i);
            check(&m);
        }
        // Some one-byte changes are still valid (a digit, a letter in a string).
        assert!(accepted > 20, "{accepted}");
        assert_eq!(
            read(r#"{"ev":"chunk","t":01,"id":"r","n":1,"kind":"role"}"#),
            None
        );
        assert_eq!(
            read(r#"{"ev":"chunk","t":1,"id":"r","n":4294967296,"kind":"role"}"#),
            None
        );
        // Numbers up to u64::MAX read; one past it does not (nor by serde).
        let max = r#"{"ev":"chunk","t":18446744073709551615,"id":"r","n":0,"kind":"role"}"#;
        assert_eq!(read(max).map(|c| c.t), Some(u64::MAX));
        for over in [
            "18446744073709551616",
            "99999999999999999999",
            "184467440737095516150",
        ] {
            let line = max.replace("18446744073709551615", over);
            assert_eq!(read(&line), None, "{line}");
            assert!(super::super::parse_line(&line).is_err(), "{line}");
        }
    }

    #[test]
    fn lines_in_other_shapes_take_the_tagged_path() {
        use super::super::{line_tag, parse_line};
        // Keys in another order, spaces, a tag not first: read as before.
        for line in [
            r#"{"t":5,"ev":"chunk","id":"r","n":1,"kind":"content","text":"x"}"#,
            r#"{ "ev": "chunk", "t":5,"id":"r","n":1,"kind":"content","text":"x"}"#,
            r#"{"ev":"chunk","t":5,"id":"r","n":1,"kind":"content","text":"x","later":1}"#,
        ] {
            let ev = parse_line(line).expect(line);
            assert!(
                matches!(ev, Event::Chunk { t: 5, n: 1, .. }),
                "{line}: {ev:?}"
            );
        }
        assert_eq!(line_tag(r#"{"ev":"chunk","t":1}"#), Some("chunk"));
        assert_eq!(line_tag(r#"{"ev":"run_end"}"#), Some("run_end"));
        assert_eq!(line_tag(r#"{"ev":"chunkx"#), None);
        assert_eq!(line_tag(r#"{"t":1,"ev":"chunk"}"#), None);
        assert_eq!(line_tag(r#"{"ev":"","t":1}"#), Some(""));
        assert_eq!(line_tag(r#"{"ev":"été"}"#), Some("été"));
        assert_eq!(line_tag(r#"{"ev":"chunk" ,"t":1}"#), None);
        assert_eq!(line_tag(r#"{"ev":"chunk"#), None);
        // A chunk line the struct cannot read fails as the tagged path fails.
        assert!(
            parse_line(r#"{"ev":"chunk","t":"soon","id":"r","n":1,"kind":"content"}"#).is_err()
        );
        assert!(parse_line(r#"{"ev":"chunk","t":1,"id":"r","n":1,"kind":"nope"}"#).is_err());
    }
}
