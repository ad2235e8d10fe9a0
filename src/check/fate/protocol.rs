//! The stream's grammar and the response's framing (issue 15 item 6): an answer is
//! over at `[DONE]`, and its output over once `finish_reason` and then the usage
//! report came; events after `[DONE]` (output or not), and output after the finish and
//! the usage, are a finding, as is a response
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
    if v.end.outcome != Outcome::AfterDone {
        output_after_the_end(v, out);
    }
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

/// Output deltas after the answer said it was over — a `finish_reason`, then the usage
/// report that closes an OpenAI stream — but before `[DONE]` (after it, the client
/// names the end `after_done`). A stream with several choices (`n` > 1) would finish
/// one before another; haq asks for one.
fn output_after_the_end(v: &View, out: &mut Out) {
    let chunks = &v.r.chunks;
    let Some(finish) = chunks
        .iter()
        .position(|c| c.finish.is_some() || c.kind == ChunkKind::Finish)
    else {
        return;
    };
    let Some(usage) = chunks[finish..]
        .iter()
        .position(|c| c.kind == ChunkKind::Usage)
        .map(|i| finish + i)
    else {
        return;
    };
    let after: Vec<_> = chunks[usage + 1..]
        .iter()
        .take_while(|c| c.kind != ChunkKind::Done)
        .filter(|c| c.kind.is_delta())
        .collect();
    let Some(first) = after.first() else {
        return;
    };
    let text: String = after.iter().filter_map(|c| c.text.as_deref()).collect();
    out.find(
        FindingKind::DataAfterDone,
        &v.r.id,
        format!(
            "output after the answer was over: {} after finish_reason (chunk {}) and the usage report (chunk {}), the first chunk {}",
            crate::scenario::words::plural(after.len() as u64, "output delta"),
            chunks[finish].n,
            chunks[usage].n,
            first.n
        ),
    )
    .chunks(
        [chunks[finish].n, chunks[usage].n]
            .into_iter()
            .chain(after.iter().take(KEEP_CHUNKS).map(|c| c.n)),
    )
    .excerpt(excerpt(&text));
}
