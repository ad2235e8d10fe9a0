//! The stream's grammar and the response's framing (issue 15 item 6): an answer is
//! over at `[DONE]`; events after it (output or not) are a finding, as is a response
//! haq had to cut or refuse for what the server sent — a line, event, answer or stream
//! past `client.limits`, a `content-encoding` haq did not ask for, a head it could not
//! accept. The client names each in the `end` line's outcome; this checker turns them
//! into findings with their evidence, so Request-Fate FAILs on them.

use super::{Ctx, FindingKind, Out, View, excerpt};
use crate::check::history::FaultRec;
use crate::trace::{ChunkKind, Outcome};

/// Chunk indices kept as evidence of data after `[DONE]`.
const KEEP_CHUNKS: usize = 20;

pub fn stream_grammar(_: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    let detail = v.end.detail.as_deref().map(excerpt).unwrap_or_default();
    match v.end.outcome {
        Outcome::AfterDone => {
            let done = v.r.chunks.iter().position(|c| c.kind == ChunkKind::Done);
            let after: Vec<u32> = done
                .map(|i| {
                    v.r.chunks[i + 1..]
                        .iter()
                        .filter(|c| c.kind != ChunkKind::Comment)
                        .take(KEEP_CHUNKS)
                        .map(|c| c.n)
                        .collect()
                })
                .unwrap_or_default();
            let text: String = done
                .map(|i| {
                    v.r.chunks[i + 1..]
                        .iter()
                        .filter(|c| c.kind.is_delta())
                        .filter_map(|c| c.text.as_deref())
                        .collect()
                })
                .unwrap_or_default();
            out.find(
                FindingKind::DataAfterDone,
                id,
                format!("the stream went on after [DONE]: {detail}"),
            )
            .chunks(done.map(|i| v.r.chunks[i].n).into_iter().chain(after))
            .excerpt(excerpt(&text));
        }
        o if o.is_protocol_violation() => {
            out.find(
                FindingKind::ProtocolViolation,
                id,
                format!("{}: {detail}", o.as_str()),
            )
            .chunks(v.r.chunks.last().map(|c| c.n));
        }
        _ => {}
    }
}
