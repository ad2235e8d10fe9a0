//! The trace: an append-only, line-oriented event log (`trace.jsonl`) written while the
//! run goes. It is the contract between running and judging (M10): `haq check` re-reads
//! it with no network.
//!
//! Times (`t`) are microseconds since the trace was opened, on the monotonic clock.

mod chunkref;
mod clock;
mod event;
pub mod journal;
mod writer;

pub use chunkref::ChunkRef;
pub use clock::{Clock, mono_ns};
pub use event::*;
pub use writer::{Backpressure, QUEUE_CAP_BYTES, TraceHandle, TraceWriter};

use std::io::BufRead;
use std::path::Path;

pub const TRACE_FILE: &str = "trace.jsonl";

/// Streams the events of a trace file; a torn last line (the run was killed mid-write)
/// ends the stream instead of failing it.
pub fn read(path: &Path) -> std::io::Result<impl Iterator<Item = Result<Event, String>>> {
    let f = std::fs::File::open(path)?;
    let mut lines = std::io::BufReader::new(f).lines().enumerate().peekable();
    Ok(std::iter::from_fn(move || {
        loop {
            let (i, line) = lines.next()?;
            let line = match line {
                Ok(l) => l,
                Err(e) => return Some(Err(format!("line {}: {e}", i + 1))),
            };
            if line.trim().is_empty() {
                continue;
            }
            return match serde_json::from_str::<Event>(&line) {
                Ok(ev) => Some(Ok(ev)),
                Err(_) if lines.peek().is_none() => None,
                Err(e) => Some(Err(format!("line {}: {e}", i + 1))),
            };
        }
    }))
}
