//! The KV and cache effects of each fault's reroute (Q12 step 14) as table rows: per
//! replica, each engine figure before the fault → after its reroute, next to the TTFT.

use crate::check::Judgement;
use crate::check::cache_effects::{CacheEffects, EffectRow, Figures};

pub const HEAD: [&str; 8] = [
    "replica",
    "prefix cache hit rate",
    "KV usage",
    "running",
    "waiting",
    "prompt tokens/s",
    "TTFT p50",
    "TTFT p95",
];

fn pair(a: Option<f64>, b: Option<f64>, show: impl Fn(f64) -> String) -> String {
    let s = |x: Option<f64>| x.map_or("–".to_string(), &show);
    format!("{} → {}", s(a), s(b))
}

fn row(r: &EffectRow) -> Vec<String> {
    let (b, a): (&Figures, &Figures) = (&r.before, &r.after);
    let pc = |x: f64| format!("{:.1}%", x * 100.0);
    let n = |x: f64| format!("{x:.1}");
    let ms = |x: f64| format!("{x:.0} ms");
    vec![
        r.replica.clone(),
        pair(b.prefix_hit_rate, a.prefix_hit_rate, pc),
        pair(b.kv_usage, a.kv_usage, pc),
        pair(b.running, a.running, n),
        pair(b.waiting, a.waiting, n),
        pair(b.prompt_tokens_per_s, a.prompt_tokens_per_s, |x| {
            format!("{x:.0}")
        }),
        pair(b.ttft_p50_ms, a.ttft_p50_ms, ms),
        pair(b.ttft_p95_ms, a.ttft_p95_ms, ms),
    ]
}

/// One fault's title line: the windows compared.
fn title(j: &Judgement, e: &CacheEffects) -> String {
    let at = |t: u64| {
        let start = j.run.load_start.unwrap_or(0);
        format!("+{:.1}s", t.saturating_sub(start) as f64 / 1e6)
    };
    format!(
        "**{}** ({}): before = {} to {}, after its reroute = {} to {}.",
        e.fault,
        e.replica,
        at(e.before.0),
        at(e.before.1),
        at(e.after.0),
        at(e.after.1)
    )
}

/// Each fault's title and rows; none when the run read no engine metrics.
pub fn tables(j: &Judgement) -> Vec<(String, Vec<Vec<String>>)> {
    j.cache_effects
        .iter()
        .map(|e| (title(j, e), e.rows.iter().map(row).collect()))
        .collect()
}
