//! The trace: an append-only, line-oriented event log (`trace.jsonl`) written while the
//! run goes. It is the contract between running and judging (M10): `haq check` re-reads
//! it with no network.
//!
//! Times (`t`) are microseconds since the trace was opened, on the monotonic clock.

mod chunkref;
mod clock;
mod event;
mod lines;
mod outcome;
mod writer;

pub use chunkref::ChunkRef;
pub use clock::Clock;
pub use event::*;
pub use outcome::{LocalDetail, local_detail};
pub use writer::{Backpressure, QUEUE_CAP_BYTES, TraceHandle, TraceWriter};

use std::path::Path;

pub mod files;
pub mod merge;
pub mod record;

pub use files::TRACE_FILE;

/// Streams the events of a trace file; a torn last line (the run was killed mid-write)
/// ends the stream instead of failing it.
pub fn read(path: &Path) -> std::io::Result<impl Iterator<Item = Result<Event, String>>> {
    read_lines(path, None)
}

/// As [`read`], but only the events whose `ev` tag is in `tags`: other lines that
/// carry their tag first (as haq writes every line) are skipped without being parsed.
/// For passes that look at a few kinds of event; they do not validate the rest.
pub fn read_only(
    path: &Path,
    tags: &'static [&'static str],
) -> std::io::Result<impl Iterator<Item = Result<Event, String>>> {
    read_lines(path, Some(tags))
}

fn read_lines(
    path: &Path,
    tags: Option<&'static [&'static str]>,
) -> std::io::Result<impl Iterator<Item = Result<Event, String>>> {
    let mut r = Reader::open(path, tags)?;
    Ok(std::iter::from_fn(move || r.next_with(|l| l.into_event())))
}

/// Reads a trace file line by line, each line handed over borrowed from the read
/// buffer ([`Line`]): what [`read`] and [`read_only`] yield, without an [`Event`]
/// built for a chunk line whose reader needs none.
pub struct Reader {
    lines: lines::Lines<std::fs::File>,
    tags: Option<&'static [&'static str]>,
    /// Number of the last line read.
    i: usize,
}

impl Reader {
    /// Every line ([`read`]), or only those tagged with `tags` ([`read_only`]).
    pub fn open(path: &Path, tags: Option<&'static [&'static str]>) -> std::io::Result<Reader> {
        Ok(Reader {
            lines: lines::Lines::new(std::fs::File::open(path)?),
            tags,
            i: 0,
        })
    }

    /// Hands the next event to `f`: `None` at the end (or after a torn last line),
    /// an error (with its line number) for a line that does not read.
    pub fn next_with<T>(&mut self, f: impl FnOnce(Line<'_>) -> T) -> Option<Result<T, String>> {
        loop {
            self.i += 1;
            let i = self.i;
            let bytes = match self.lines.next_bytes()? {
                Ok(b) => b,
                Err(e) => return Some(Err(format!("line {i}: {e}"))),
            };
            // A line of another kind is skipped before it is even checked for UTF-8.
            if let (Some(tags), Some(tag)) = (self.tags, tag_of(bytes))
                && !tags.iter().any(|t| t.as_bytes() == tag)
            {
                continue;
            }
            let line = match lines::utf8(bytes) {
                Ok(l) => l,
                Err(e) => return Some(Err(format!("line {i}: {e}"))),
            };
            // (A line that opens an object is not blank: no need to trim it.)
            if !line.starts_with('{') && line.trim().is_empty() {
                continue;
            }
            return match parse_ref(line) {
                Ok(l) => Some(Ok(f(l))),
                Err(e) => {
                    let e = format!("line {i}: {e}");
                    // A torn last line: the run was killed mid-write.
                    self.lines.more().then_some(Err(e))
                }
            };
        }
    }
}

/// One trace line as read: a chunk line in the exact shape haq writes, borrowed; any
/// other line as its event.
pub enum Line<'a> {
    Chunk(ChunkRef<'a>),
    Event(Event),
}

impl Line<'_> {
    pub fn into_event(self) -> Event {
        match self {
            Line::Chunk(c) => c.to_event(),
            Line::Event(ev) => ev,
        }
    }
}

/// The `ev` tag of a line that starts with it, as haq writes every line
/// (`{"ev":"chunk",…` → `chunk`), read without parsing the line.
pub fn line_tag(line: &str) -> Option<&str> {
    // The tag stands between ASCII quotes: its bounds are char boundaries.
    let tag = tag_of(line.as_bytes())?;
    line.get(TAG_AT..TAG_AT + tag.len())
}

const TAG_AT: usize = "{\"ev\":\"".len();

/// [`line_tag`] over bytes.
fn tag_of(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"{\"ev\":\"")?;
    let end = memchr::memchr(b'"', rest)?;
    matches!(rest.get(end + 1), Some(b',' | b'}')).then(|| &rest[..end])
}

/// How a chunk line starts, as haq writes it: a line that does not start so has
/// another tag (or its tag elsewhere).
const CHUNK_TAG: &str = "{\"ev\":\"chunk\"";

/// Parses one trace line. Chunk lines, nearly all of a trace, are read by a reader of
/// the exact shape haq writes them in ([`chunkref::read`]), else as a plain struct
/// (serde reads an internally tagged enum by buffering every field first, several
/// times slower); any other line, or a chunk line that reads neither way, goes through
/// [`Event`]'s own deserializer.
pub fn parse_line(line: &str) -> serde_json::Result<Event> {
    parse_ref(line).map(Line::into_event)
}

/// [`parse_line`], with a chunk line that the exact-shape reader reads left borrowed.
pub fn parse_ref(line: &str) -> serde_json::Result<Line<'_>> {
    if line.starts_with(CHUNK_TAG) && line_tag(line) == Some("chunk") {
        if let Some(c) = chunkref::read(line) {
            return Ok(Line::Chunk(c));
        }
        if let Ok(c) = serde_json::from_str::<chunkref::ChunkLine>(line) {
            return Ok(Line::Event(c.into()));
        }
    }
    serde_json::from_str(line).map(Line::Event)
}
