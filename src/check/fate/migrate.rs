//! What a migration cost and whether it was whole (Q9): for a stream that went on on
//! another attempt after delivering output, the interruption the client saw, its
//! inter-token latency before and after, what the new attempt re-prefilled and how
//! long that took (worker journals), and the output duplicated or missing at the seam
//! — from the engine's own resume point where the journals have it, else from the text.

use serde::Serialize;

use super::view::{Seam, View};

/// One stream's migration, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Migration {
    /// The attempts (`id (worker)` from the journal, else generation ids) before and
    /// after the seam.
    pub from: String,
    pub to: String,
    /// Deltas the client had when the new attempt took over.
    pub delivered: u32,
    /// From the last delta before the seam to the first after it (client clock).
    pub interruption_ms: f64,
    /// Median gap between deltas before and after the seam (the seam's gap left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_before_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_after_ms: Option<f64>,
    /// Prompt tokens the new attempt's engine prefilled (prompt plus re-sent output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reprefill_tokens: Option<u32>,
    /// From its admission to its first token (queue and re-prefill).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reprefill_ms: Option<f64>,
    /// The answer's token the new attempt's engine went on from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<u32>,
    /// Tokens (deltas) the client got twice, or never, at the seam.
    pub duplicated: u32,
    pub missing: u32,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Median gap (ms) between the deltas `a..b` of `v`.
fn median_gap(v: &View, a: usize, b: usize) -> Option<f64> {
    let mut gaps: Vec<u64> = (a + 1..b)
        .map(|i| v.delta(i).t.saturating_sub(v.delta(i - 1).t))
        .collect();
    if gaps.is_empty() {
        return None;
    }
    let mid = gaps.len() / 2;
    Some(ms(*gaps.select_nth_unstable(mid).1))
}

/// The first hand-over of `v` with output after it, measured.
pub fn of(v: &View) -> Option<Migration> {
    let s = v
        .handovers()
        .into_iter()
        .find(|s| s.at > 0 && (s.at as usize) < v.deltas.len())?;
    Some(measure(v, &s))
}

/// The hand-over `s` of `v`, measured.
pub fn measure(v: &View, s: &Seam) -> Migration {
    let at = s.at as usize;
    let n = v.deltas.len();
    let taker = v.r.attempts.iter().find(|a| a.id == s.to).or_else(|| {
        let t = v.delta(at).t;
        v.r.attempts.iter().skip(1).rfind(|a| a.start <= t)
    });
    let engine = taker.and_then(|a| a.engine.as_ref());
    // The text's own word: the last `l` delivered deltas sent again right after the seam.
    let text_repeat = (1..=at.min(n - at).min(64))
        .rev()
        .find(|&l| (0..l).all(|m| v.delta_text(at - l + m) == v.delta_text(at + m)))
        .unwrap_or(0) as u32;
    let (duplicated, missing) = match engine {
        Some(e) => (
            s.at.saturating_sub(e.resumed),
            e.resumed.saturating_sub(s.at),
        ),
        None => (text_repeat, 0),
    };
    let named = |a: &crate::trace::record::AttemptRec| format!("{} ({})", a.id, a.worker);
    let before = taker.and_then(|t| {
        let i = v.r.attempts.iter().position(|a| std::ptr::eq(a, t))?;
        v.r.attempts[..i].last()
    });
    Migration {
        from: before.map_or_else(|| s.from.clone(), named),
        to: taker.map_or_else(|| s.to.clone(), named),
        delivered: s.at,
        interruption_ms: ms(v.delta(at).t.saturating_sub(v.delta(at - 1).t)),
        itl_before_ms: median_gap(v, 0, at),
        itl_after_ms: median_gap(v, at, n),
        reprefill_tokens: engine.map(|e| e.prompt_tokens),
        reprefill_ms: engine.and_then(|e| {
            let t = e.first_token?;
            Some((t.saturating_sub(e.admitted)) as f64 / 1000.0)
        }),
        resumed_at: engine.map(|e| e.resumed),
        duplicated,
        missing,
    }
}

/// One line for the verdict's evidence.
pub fn describe(request: &str, m: &Migration) -> String {
    let opt = |x: Option<f64>| x.map_or("?".into(), |x| format!("{x:.1}"));
    let prefill = match (m.reprefill_tokens, m.reprefill_ms) {
        (Some(t), Some(d)) => format!("re-prefill of {t} tokens in {d:.1} ms"),
        (Some(t), None) => format!("re-prefill of {t} tokens"),
        _ => "re-prefill not journaled".into(),
    };
    format!(
        "migration of {request} from `{}` to `{}` after {} deltas (Q9): interrupted {:.1} ms; ITL p50 {} ms before, {} ms after; {prefill}; {} duplicated, {} missing",
        m.from,
        m.to,
        m.delivered,
        m.interruption_ms,
        opt(m.itl_before_ms),
        opt(m.itl_after_ms),
        m.duplicated,
        m.missing
    )
}
