//! What the client read (M3, Q9): output repeated or restarted, a second attempt's
//! text stitched onto the first (legal only as a token-continuous migration), and
//! chunks missing or out of order.

use super::{Ctx, FindingKind, Out, Seam, SeamSource, View};
use crate::check::history::FaultRec;
use crate::scenario::Fate;
use crate::trace::Outcome;

/// A repeat shorter than this many deltas at a seam is not evidence (real text
/// repeats short runs).
pub const MIN_RUN: usize = 3;
/// Words at the head of an answer that, seen again later, mean it started over.
pub const HEAD_WORDS: usize = 6;

/// Length of the common run of delta texts starting at deltas `a` and `b`.
fn common_run(v: &View, a: usize, b: usize, limit: usize) -> usize {
    let n = v.deltas.len();
    (0..)
        .take_while(|&k| {
            a + k < n && b + k < n && a + k < limit && v.delta_text(a + k) == v.delta_text(b + k)
        })
        .count()
}

/// The longest earlier run that the output after `at` repeats: (start, length).
fn repeat_at(v: &View, at: usize) -> Option<(usize, usize)> {
    (0..at)
        .map(|j| (j, common_run(v, j, at, at)))
        .max_by_key(|&(j, l)| (l, std::cmp::Reverse(j)))
        .filter(|&(_, l)| l > 0)
}

/// Duplicated output: after a seam (hand-over or stall), a run of at least
/// [`MIN_RUN`] deltas that were already delivered; or the answer starting over at a
/// seam (its first words again). Without a seam nothing is a finding: a model may
/// repeat itself (a base model does, endlessly), and one attempt that repeats is its
/// output, not a second answer.
pub fn duplicated(_: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    let seams: Vec<Seam> = v
        .seams()
        .into_iter()
        .filter(|s| s.source != SeamSource::Stall || !repetitive_before(v, s.at as usize))
        .collect();
    for s in &seams {
        let at = s.at as usize;
        if let Some((j, l)) = repeat_at(v, at) {
            let text: String = (at..at + l).map(|i| v.delta_text(i)).collect();
            if l >= MIN_RUN && text.trim().len() >= 6 {
                out.find(
                    FindingKind::DuplicatedOutput,
                    id,
                    format!(
                        "deltas {at}..{} repeat deltas {j}..{} already delivered ({}{})",
                        at + l,
                        j + l,
                        if j == 0 {
                            "the answer restarts"
                        } else {
                            "a re-sent run"
                        },
                        seam_words(s)
                    ),
                )
                .chunks([v.delta_n(j), v.delta_n(at)])
                .attempts(attempt_ids(s))
                .excerpt(v.excerpt(at, at + l));
                return;
            }
        }
    }
    if !seams.is_empty() {
        restart(v, &seams, out);
    }
}

/// The output before delta `at` already repeats a run of [`MIN_RUN`] deltas: the model
/// repeats itself, and a repeat after a stall there is its habit, not a re-sent answer
/// (a hand-over is evidence enough; a stall alone is not, in repetitive text).
fn repetitive_before(v: &View, at: usize) -> bool {
    let at = at.min(v.deltas.len());
    let mut seen = std::collections::HashSet::new();
    (0..at.saturating_sub(MIN_RUN - 1)).any(|i| {
        let run: [&str; MIN_RUN] = std::array::from_fn(|k| v.delta_text(i + k));
        !seen.insert(run)
    })
}

fn seam_words(s: &Seam) -> String {
    match s.source {
        SeamSource::Stall => ", after a stall".into(),
        _ => format!(", after the hand-over from `{}` to `{}`", s.from, s.to),
    }
}

fn attempt_ids(s: &Seam) -> Vec<String> {
    [&s.from, &s.to]
        .into_iter()
        .filter(|a| !a.is_empty())
        .cloned()
        .collect()
}

/// The answer's first [`HEAD_WORDS`] words begin again at a seam: it started over
/// there (in an answer of at least twice as many words).
fn restart(v: &View, seams: &[Seam], out: &mut Out) {
    let words: Vec<(&str, usize)> = (0..v.deltas.len())
        .flat_map(|i| {
            let text = v.delta_text(i);
            let split: Box<dyn Iterator<Item = &str>> = if ascii_words(text) {
                Box::new(text.split_ascii_whitespace())
            } else {
                Box::new(text.split_whitespace())
            };
            split.map(move |w| (w, i))
        })
        .collect();
    if words.len() < 2 * HEAD_WORDS {
        return;
    }
    let head = &words[..HEAD_WORDS];
    let Some((k, s)) = seams.iter().find_map(|s| {
        let k = words.iter().position(|(_, i)| *i >= s.at as usize)?;
        let again = words.get(k..k + HEAD_WORDS)?;
        (k > 0 && again.iter().zip(head).all(|(a, h)| a.0 == h.0)).then_some((k, s))
    }) else {
        return;
    };
    let at = words[k].1;
    out.find(
        FindingKind::DuplicatedOutput,
        &v.r.id,
        format!(
            "the answer starts over at chunk {}{}: `{}` repeats",
            v.delta_n(at),
            seam_words(s),
            head.iter().map(|w| w.0).collect::<Vec<_>>().join(" ")
        ),
    )
    .chunks([v.delta_n(head[0].1), v.delta_n(at)])
    .attempts(attempt_ids(s))
    .excerpt(v.excerpt(at, at + 4));
}

/// ASCII text without a vertical tab (the one ASCII space `split_ascii_whitespace`
/// does not split at): its words are the same split byte by byte, several times
/// faster than `split_whitespace` splits them char by char.
fn ascii_words(s: &str) -> bool {
    s.is_ascii() && !s.as_bytes().contains(&0x0b)
}

/// Stitched output: text from another attempt after the first attempt's deltas.
/// Unless the policy declares `migrate` for streaming, any such hand-over stitches two
/// answers; under `migrate` it must be token-continuous: the new attempt neither
/// restarts nor re-sends what was delivered, and it starts where delivery stopped.
pub fn stitched(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    for s in v.handovers() {
        let at = s.at as usize;
        if v.deltas.len() <= at {
            continue; // nothing delivered after the hand-over
        }
        if s.source == super::SeamSource::Proxy && !proxy_spliced(v, &s) {
            continue; // the first upstream request wrote the rest itself
        }
        let broken = if ctx.policy.streaming == Fate::Migrate {
            match continuity(v, &s) {
                Ok(()) => continue,
                Err(why) => format!(
                    "the migration from `{}` to `{}` after {at} deltas is not token-continuous: {why}",
                    s.from, s.to
                ),
            }
        } else {
            format!(
                "{at} deltas from `{}`, then {} deltas from `{}` in the same stream (the policy declares `{}` for streaming, not `migrate`){}",
                s.from,
                v.deltas.len() - at,
                s.to,
                ctx.policy.streaming.as_str(),
                if s.source == super::SeamSource::Proxy {
                    "; seen by haq's proxy: the client's chunk ids do not change at the seam"
                } else {
                    ""
                }
            )
        };
        out.find(FindingKind::StitchedOutput, id, broken)
            .chunks([v.delta_n(at - 1), v.delta_n(at)])
            .attempts(attempt_ids(&s))
            .excerpt(format!(
                "{} ‖ {}",
                v.excerpt(at.saturating_sub(3), at),
                v.excerpt(at, at + 3)
            ));
        return;
    }
}

/// A hand-over only haq's proxy saw (the client's chunk ids run on): the deltas after
/// it came from the new upstream request when the old one had ended before the client's
/// last delta and the new one had sent output by then.
fn proxy_spliced(v: &View, s: &Seam) -> bool {
    let leg = |id: &str| v.r.proxy.iter().find(|l| l.id() == id);
    let Some(last) = v.deltas.last().map(|&i| v.r.chunks[i].t) else {
        return false;
    };
    match (leg(&s.from), leg(&s.to)) {
        (Some(a), Some(b)) => {
            a.end.is_some_and(|(t, _)| t < last) && b.first_event.is_some_and(|t| t < last)
        }
        _ => false,
    }
}

/// Token continuity of a hand-over (Dynamo-style migration re-prefills prompt plus
/// generated tokens and continues with the next one).
pub fn continuity(v: &View, s: &Seam) -> Result<(), String> {
    let at = s.at as usize;
    if let Some((j, l)) = repeat_at(v, at).filter(|&(_, l)| l >= 2) {
        return Err(if j == 0 {
            format!("the new attempt restarts the answer ({l} deltas repeat its beginning)")
        } else {
            format!("the new attempt re-sends {l} deltas already delivered (from delta {j})")
        });
    }
    // The attempt that took over: named by the seam, or the latest one started
    // before the new writer's first delta.
    let t = v.delta(at).t;
    let taker =
        v.r.attempts
            .iter()
            .find(|a| a.id == s.to)
            .or_else(|| v.r.attempts.iter().skip(1).rfind(|a| a.start <= t));
    if let Some((a, e)) = taker.and_then(|a| Some((a, a.engine.as_ref()?)))
        && e.resumed as usize != at
    {
        let r = e.resumed as usize;
        return Err(format!(
            "the worker's engine went on from token {r} of the answer for `{}`, but the client had {at} deltas: {}",
            a.id,
            if r < at {
                format!(
                    "{} delivered token(s) sent again (duplicated output)",
                    at - r
                )
            } else {
                format!("{} token(s) never sent (missing output)", r - at)
            }
        ));
    }
    if let Some(a) = taker
        && a.delivered_at_start as usize != at
    {
        return Err(format!(
            "{} `{}` started after {} delivered deltas, but its text begins after delta {at}",
            if a.proxy_leg {
                "haq's proxy saw"
            } else {
                "the journal says"
            },
            a.id,
            a.delivered_at_start
        ));
    }
    Ok(())
}

/// Gaps or reordering: chunk indices that skip or go back, chunks stamped out of
/// order, or fewer (more) deltas than the gateway journal says it delivered.
pub fn chunk_order(_: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    let mut prev: Option<(u32, u64)> = None;
    for c in &v.r.chunks {
        match prev {
            None if c.n != 0 => {
                out.find(
                    FindingKind::ChunkGap,
                    id,
                    format!(
                        "the first chunk has index {} (chunks 0..{} missing)",
                        c.n, c.n
                    ),
                )
                .chunks([c.n]);
                return;
            }
            Some((pn, _)) if c.n != pn + 1 => {
                out.find(
                    FindingKind::ChunkGap,
                    id,
                    if c.n <= pn {
                        format!("chunk {} follows chunk {pn}: reordered or repeated", c.n)
                    } else {
                        format!(
                            "chunk indices jump from {pn} to {}: {} chunks missing",
                            c.n,
                            c.n - pn - 1
                        )
                    },
                )
                .chunks([pn, c.n]);
                return;
            }
            Some((pn, pt)) if c.t < pt => {
                out.find(
                    FindingKind::ChunkGap,
                    id,
                    format!(
                        "chunk {} is stamped {} µs before chunk {pn}: reordered",
                        c.n,
                        pt - c.t
                    ),
                )
                .chunks([pn, c.n]);
                return;
            }
            _ => {}
        }
        prev = Some((c.n, c.t));
    }
    // The gateway's own count, when the client read the stream to its end. A
    // non-streamed answer is one body, not deltas: the gateway counts none of it.
    let atts = &v.r.attempts;
    if !v.r.stream
        || !matches!(v.end.outcome, Outcome::Completed | Outcome::ExplicitError)
        || atts.is_empty()
        || atts.iter().any(|a| a.end.is_none())
    {
        return;
    }
    let sent = atts
        .iter()
        .filter_map(|a| a.delivered_at_end)
        .chain(
            v.r.notes
                .iter()
                .filter(|n| matches!(n.ev.as_str(), "explicit_error" | "request_end"))
                .filter_map(|n| n.delivered),
        )
        .max();
    let got = v.delivered();
    if let Some(sent) = sent
        && sent != got
    {
        out.find(
            FindingKind::ChunkGap,
            id,
            format!(
                "the gateway journal says {sent} deltas were delivered, the client received {got}{}",
                if sent > got { " (deltas lost on the way)" } else { " (deltas the gateway does not account for)" }
            ),
        )
        .attempts(atts.iter().map(|a| a.id.clone()));
    }
}

#[cfg(test)]
mod tests {
    /// The fast split gives the words `split_whitespace` gives, with every ASCII byte
    /// and the non-ASCII spaces between words, at the ends, and repeated.
    #[test]
    fn words_split_as_split_whitespace_splits_them() {
        let mut seps: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        seps.extend(
            [
                "\u{85}", "\u{a0}", "\u{1680}", "\u{2028}", "\u{3000}", "é", "  ",
            ]
            .map(String::from),
        );
        let mut checked = 0;
        for sep in &seps {
            for s in [
                format!("a{sep}b"),
                format!("{sep}tok{sep}{sep}en{sep}"),
                format!(" t123{sep}"),
                sep.clone(),
                String::new(),
            ] {
                let want: Vec<&str> = s.split_whitespace().collect();
                if super::ascii_words(&s) {
                    assert_eq!(
                        s.split_ascii_whitespace().collect::<Vec<_>>(),
                        want,
                        "{s:?}"
                    );
                    checked += 1;
                }
            }
        }
        // Every case of the 127 ASCII separators but the vertical tab, and of "  ";
        // of the other 7 only the empty text.
        assert_eq!(checked, 127 * 5 + 5 + 7);
    }
}
