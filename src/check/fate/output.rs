//! What the client read (M3, Q9): output repeated or restarted, a second attempt's
//! text stitched onto the first (legal only as a token-continuous migration), and
//! chunks missing or out of order.

use super::{Ctx, FindingKind, Out, Seam, View};
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
/// [`MIN_RUN`] deltas that were already delivered; or the answer's first words
/// appearing again (it started over).
pub fn duplicated(_: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    for s in v.seams() {
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
                        seam_words(&s)
                    ),
                )
                .chunks([v.delta_n(j), v.delta_n(at)])
                .attempts(attempt_ids(&s))
                .excerpt(v.excerpt(at, at + l));
                return;
            }
        }
    }
    restart(v, out);
}

fn seam_words(s: &Seam) -> String {
    match s.source {
        super::SeamSource::Stall => ", after a stall".into(),
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

/// The first words of the answer appear again later: the answer restarted.
fn restart(v: &View, out: &mut Out) {
    let mut scan = RestartScan::default();
    let Some(r) = (0..v.deltas.len()).find_map(|i| {
        let text = v.delta_text(i);
        if ascii_words(text) {
            text.split_ascii_whitespace().find_map(|w| scan.push(w, i))
        } else {
            text.split_whitespace().find_map(|w| scan.push(w, i))
        }
    }) else {
        return;
    };
    out.find(
        FindingKind::DuplicatedOutput,
        &v.r.id,
        format!(
            "the answer starts over at chunk {}: `{}` repeats",
            v.delta_n(r.at),
            r.head.join(" ")
        ),
    )
    .chunks([v.delta_n(r.first), v.delta_n(r.at)])
    .excerpt(v.excerpt(r.at, r.at + 4));
}

/// Where an answer starts over: its first [`HEAD_WORDS`] words, the delta of its
/// first word, and the delta where they appear again.
#[derive(Debug, PartialEq)]
struct Restart<'a> {
    head: [&'a str; HEAD_WORDS],
    first: usize,
    at: usize,
}

/// Looks, word by word, for the first place past the first word where the answer's
/// first [`HEAD_WORDS`] words appear again, in an answer of at least twice as many
/// words; keeps only the last [`HEAD_WORDS`] words.
#[derive(Default)]
struct RestartScan<'a> {
    head: [&'a str; HEAD_WORDS],
    first: usize,
    last: [(&'a str, usize); HEAD_WORDS],
    /// Words seen.
    n: usize,
    found: Option<usize>,
}

impl<'a> RestartScan<'a> {
    /// The next word (in delta `i`); the restart once it is certain.
    fn push(&mut self, w: &'a str, i: usize) -> Option<Restart<'a>> {
        let n = self.n;
        self.n += 1;
        if n < HEAD_WORDS {
            self.head[n] = w;
        }
        if n == 0 {
            self.first = i;
        }
        self.last[n % HEAD_WORDS] = (w, i);
        // The window of the last HEAD_WORDS words starts at word `s` ≥ 1.
        if self.found.is_none() && n >= HEAD_WORDS {
            let s = n + 1 - HEAD_WORDS;
            if (0..HEAD_WORDS).all(|k| self.last[(s + k) % HEAD_WORDS].0 == self.head[k]) {
                self.found = Some(self.last[s % HEAD_WORDS].1);
            }
        }
        let at = self.found.filter(|_| self.n >= 2 * HEAD_WORDS)?;
        Some(Restart {
            head: self.head,
            first: self.first,
            at,
        })
    }
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
    use super::{HEAD_WORDS, Restart, RestartScan};

    /// The search as it was written first: every word in a vector, every window.
    fn restart_naive<'a>(words: &[(&'a str, usize)]) -> Option<Restart<'a>> {
        if words.len() < 2 * HEAD_WORDS {
            return None;
        }
        let head: Vec<&str> = words[..HEAD_WORDS].iter().map(|w| w.0).collect();
        (1..=words.len() - HEAD_WORDS)
            .find(|&s| {
                words[s..s + HEAD_WORDS]
                    .iter()
                    .map(|w| w.0)
                    .eq(head.iter().copied())
            })
            .map(|s| Restart {
                head: std::array::from_fn(|k| head[k]),
                first: words[0].1,
                at: words[s].1,
            })
    }

    /// The one-pass search finds what the naive one finds, on seeded random answers
    /// over a small vocabulary (repeats, restarts, overlaps, short answers).
    #[test]
    fn the_one_pass_restart_search_finds_what_every_window_finds() {
        use rand::{RngExt, SeedableRng};
        let vocab = ["a", "b", "c", "the", "answer"];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut found = 0;
        for _ in 0..20_000 {
            let len = rng.random_range(0..30);
            let kinds = rng.random_range(1..=vocab.len());
            let mut words: Vec<(&str, usize)> = Vec::new();
            let mut delta = rng.random_range(0..3);
            for _ in 0..len {
                words.push((vocab[rng.random_range(0..kinds)], delta));
                delta += rng.random_range(0..2);
            }
            if rng.random_bool(0.3) && words.len() > HEAD_WORDS {
                // a restart: the head again, somewhere
                let at = rng.random_range(1..words.len());
                let head: Vec<_> = words[..HEAD_WORDS].to_vec();
                words.splice(at..at, head);
            }
            let want = restart_naive(&words);
            found += usize::from(want.is_some());
            let mut scan = RestartScan::default();
            let got = words.iter().find_map(|&(w, i)| scan.push(w, i));
            assert_eq!(got, want, "{words:?}");
        }
        assert!(found > 2_000, "{found}");
    }

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
