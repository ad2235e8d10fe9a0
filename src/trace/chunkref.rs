//! A chunk event with borrowed fields, as the client's read loop has it: written to the
//! trace without building an [`Event`] (no allocation per SSE event). Its line is byte
//! for byte the one `serde_json` writes for the [`Event::Chunk`] it stands for.

use super::{ChunkKind, Event};

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
    /// The owned event (tests, tools).
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
    let plain = |b: u8| b >= 0x20 && b != b'"' && b != b'\\';
    if s.bytes().all(plain) {
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

    #[test]
    fn the_line_is_the_one_serde_writes_for_the_event() {
        let texts = [
            None,
            Some(""),
            Some(" plain"),
            Some("quote \" backslash \\ newline \n tab \t nul \u{0} del \u{7f}"),
            Some("été — 日本 🙂 \u{2028}"),
        ];
        let kinds = [
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
        let mut checked = 0;
        for (i, kind) in kinds.into_iter().enumerate() {
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
                checked += 1;
            }
        }
        assert_eq!(checked, 50);
    }
}
