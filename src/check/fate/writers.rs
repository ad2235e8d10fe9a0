//! Who wrote the stream (M2, M5): two attempt ids publishing into one client stream,
//! two attempts alive at once with the old one unfenced, and a new attempt started
//! after the first delta reached the client.

use super::{Ctx, FindingKind, Out, View};
use crate::check::history::FaultRec;
use crate::scenario::Fate;

/// Two writers in one stream. Always a finding when they interleave (A, B, A) or when
/// the journal shows the old attempt still alive and unfenced as the new one started;
/// a clean hand-over from one id to the next is legal only as a declared migration.
pub fn two_writers(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    let writers = v.writers();
    // Interleaving: a writer comes back after another one wrote.
    if let Some(back) = v
        .segs
        .iter()
        .enumerate()
        .skip(2)
        .find(|(i, s)| v.segs[..i - 1].iter().any(|p| p.cid == s.cid))
        .map(|(_, s)| s)
    {
        let other = v.segs.iter().find(|s| s.cid != back.cid);
        let first = v.segs.iter().find(|s| s.cid == back.cid);
        if let (Some(o), Some(f)) = (other, first) {
            out.find(
                FindingKind::TwoWriters,
                id,
                format!(
                    "generations `{}` and `{}` interleave: `{}` wrote chunks {}..={}, `{}` from chunk {}, then `{}` again at chunk {}",
                    f.cid, o.cid, f.cid, f.first_n, f.last_n, o.cid, o.first_n, back.cid, back.first_n
                ),
            )
            .chunks([f.first_n, o.first_n, back.first_n])
            .attempts([f.cid.clone(), o.cid.clone()]);
            return;
        }
    }
    // Journal: an attempt started while an earlier one was alive and not fenced. haq's
    // proxy sees no fence: an upstream request it saw end within the cancel grace after
    // the next one started was being cancelled (the gateway's close takes a moment).
    let atts = &v.r.attempts;
    let overlaps = |a: &crate::check::history::AttemptRec, start: u64| {
        a.live_at(start)
            && a.fenced.is_none_or(|f| f > start)
            && (!a.proxy_leg || a.end.is_none_or(|e| e > start + ctx.cancel_grace))
    };
    for (j, b) in atts.iter().enumerate() {
        if let Some(a) = atts[..j].iter().find(|a| overlaps(a, b.start)) {
            out.find(
                FindingKind::TwoWriters,
                id,
                format!(
                    "attempt `{}` on {} started while attempt `{}` on {} was still alive and not fenced (it ended {})",
                    b.id,
                    b.worker,
                    a.id,
                    a.worker,
                    match (a.end, &a.result) {
                        (Some(e), Some(res)) => format!(
                            "{} µs later as {res}",
                            e.saturating_sub(b.start)
                        ),
                        _ => "never, by the journal".into(),
                    }
                ),
            )
            .attempts([a.id.clone(), b.id.clone()]);
            return;
        }
    }
    if writers.len() >= 2 && ctx.policy.streaming != Fate::Migrate {
        let segs: Vec<String> = v
            .segs
            .iter()
            .map(|s| format!("`{}` chunks {}..={}", s.cid, s.first_n, s.last_n))
            .collect();
        out.find(
            FindingKind::TwoWriters,
            id,
            format!(
                "{} generation ids published into one stream: {}",
                writers.len(),
                segs.join(", ")
            ),
        )
        .chunks(v.segs.iter().map(|s| s.first_n))
        .attempts(writers.iter().map(|w| w.to_string()));
    }
}

/// M2: a retry is legal only before the first delivered delta. Under a declared
/// `migrate` for streaming, a hand-over after delivery is a migration instead, judged
/// for token continuity by the stitched-output checker.
pub fn retry_after_first_delta(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    if ctx.policy.streaming == Fate::Migrate {
        return;
    }
    let id = &v.r.id;
    if let Some(s) = v.handovers().first() {
        let (what, note) = match s.source {
            super::SeamSource::Journal => ("the gateway journal shows attempt", ""),
            super::SeamSource::Proxy => (
                "haq's proxy saw a second upstream request,",
                " (one client stream, two upstream requests: a re-send after the first delta)",
            ),
            _ => ("chunks of generation", ""),
        };
        out.find(
            FindingKind::RetryAfterFirstDelta,
            id,
            format!(
                "{what} `{}` after {} deltas of `{}` had reached the client{note}",
                s.to, s.at, s.from
            ),
        )
        .chunks([v.delta_n(s.at as usize - 1), v.delta_n(s.at as usize)])
        .attempts([s.from.clone(), s.to.clone()])
        .excerpt(v.excerpt(s.at.saturating_sub(3) as usize, s.at as usize + 3));
        return;
    }
    if let Some(n) = v.r.notes.iter().find(|n| n.ev == "retry_after_delta") {
        out.find(
            FindingKind::RetryAfterFirstDelta,
            id,
            format!(
                "the gateway journal records a retry after {} deltas had been delivered",
                n.delivered.unwrap_or(0)
            ),
        );
    }
}
