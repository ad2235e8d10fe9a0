//! KV and cache effects of a reroute (Q12 step 14): for each fault, what the engines'
//! own metrics (read while the run's faults were due: `engine_metrics` lines) showed
//! before it and after its reroute, replica by replica, next to the TTFT they explain —
//! the prefix-cache hit rate the survivors lose when a replica's warm cache goes, the
//! KV usage and queues the moved load brings, the prompt tokens they now prefill.
//! Reported, not judged: Latency and Capacity judge the TTFT itself.

use serde::Serialize;

use super::facts::{ENGINE_METRICS, EngineSample, Evidence};
use super::timeline::{FaultTimeline, Timeline};

/// How far before a fault its "before" window reaches.
pub const BEFORE_US: u64 = 10_000_000;

/// One fault's effects.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheEffects {
    pub fault: String,
    /// The faulted replica.
    pub replica: String,
    /// `[from, to)` of the window before the fault and after its reroute (trace µs):
    /// after runs from the traffic removal (the fault when none was seen) to the heal
    /// or the end of the degraded interval.
    pub before: (u64, u64),
    pub after: (u64, u64),
    /// A row per replica with engine metrics, then `all`.
    pub rows: Vec<EffectRow>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EffectRow {
    pub replica: String,
    pub before: Figures,
    pub after: Figures,
}

/// One window of one replica (or all of them).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Figures {
    /// Prompt tokens served from the prefix cache, of those looked up (0–1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate: Option<f64>,
    /// Mean KV cache usage (0–1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_usage: Option<f64>,
    /// Mean requests running and waiting in the engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    /// Prompt tokens the engine took in per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_per_s: Option<f64>,
    /// TTFT of the requests dispatched in the window (served by the replica).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p95_ms: Option<f64>,
    pub requests: u32,
}

fn idx(name: &str) -> usize {
    ENGINE_METRICS.iter().position(|m| *m == name).unwrap_or(0)
}

/// How much a counter rose over `s` (a drop is a restarted process: counted from 0).
fn rise(s: &[&EngineSample], k: usize) -> Option<f64> {
    let vals: Vec<f64> = s.iter().map(|x| x.v[k]).filter(|v| !v.is_nan()).collect();
    (vals.len() >= 2).then(|| {
        vals.windows(2)
            .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
            .sum()
    })
}

fn mean(s: &[&EngineSample], k: usize) -> Option<f64> {
    let vals: Vec<f64> = s.iter().map(|x| x.v[k]).filter(|v| !v.is_nan()).collect();
    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
}

/// The engine figures of samples `s` (one replica's, in time order).
fn engine_figures(s: &[&EngineSample]) -> Figures {
    let hits = rise(s, idx("prefix_hits"));
    let queries = rise(s, idx("prefix_queries"));
    let span = match (s.first(), s.last()) {
        (Some(a), Some(b)) if b.t > a.t => Some((b.t - a.t) as f64 / 1e6),
        _ => None,
    };
    Figures {
        prefix_hit_rate: match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => mean(s, idx("prefix_hit_rate")),
        },
        kv_usage: mean(s, idx("kv_usage")),
        running: mean(s, idx("running")),
        waiting: mean(s, idx("waiting")),
        prompt_tokens_per_s: rise(s, idx("prompt_tokens")).zip(span).map(|(r, d)| r / d),
        ..Figures::default()
    }
}

/// Nearest-rank percentile `p` of sorted `v`, in ms.
fn pct(v: &[u64], p: f64) -> Option<f64> {
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).map(|us| *us as f64 / 1000.0)
}

/// The TTFT of the requests dispatched in `w` (served by `replica`, or all).
fn ttft(ev: &Evidence, w: (u64, u64), replica: Option<&str>, f: &mut Figures) {
    let mut v: Vec<u64> = ev
        .requests
        .iter()
        .filter(|r| r.probe.is_none() && w.0 <= r.dispatch && r.dispatch < w.1)
        .filter(|r| replica.is_none_or(|x| r.worker.as_deref() == Some(x)))
        .filter_map(|r| r.ttft())
        .collect();
    v.sort_unstable();
    f.requests = v.len() as u32;
    f.ttft_p50_ms = pct(&v, 0.5);
    f.ttft_p95_ms = pct(&v, 0.95);
}

/// The windows of fault `f`: before it, and after its reroute.
fn windows(ev: &Evidence, f: &FaultTimeline) -> Option<((u64, u64), (u64, u64))> {
    let before = (
        f.injected.saturating_sub(BEFORE_US).max(ev.load_start),
        f.injected,
    );
    let from = f
        .removal
        .as_ref()
        .map_or(f.injected, |r| r.t.max(f.injected));
    let to = f.healed.as_ref().map_or(f.degraded_until, |h| h.t);
    (before.0 < before.1 && from < to).then_some((before, (from, to)))
}

/// Every fault's effects, when engine metrics were read.
pub fn table(ev: &Evidence, tl: &Timeline) -> Vec<CacheEffects> {
    if ev.engine_metrics.is_empty() {
        return Vec::new();
    }
    let mut names: Vec<&str> = ev
        .engine_metrics
        .iter()
        .map(|s| s.replica.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let of = |r: &str, w: (u64, u64)| -> Vec<&EngineSample> {
        let s = ev.engine_metrics.iter();
        s.filter(|s| s.replica == r && w.0 <= s.t && s.t < w.1)
            .collect()
    };
    let mut out = Vec::new();
    for f in tl.faults.iter().filter(|f| f.verified && !f.drain) {
        let Some((before, after)) = windows(ev, f) else {
            continue;
        };
        let mut rows: Vec<EffectRow> = names
            .iter()
            .map(|r| {
                let (mut b, mut a) = (
                    engine_figures(&of(r, before)),
                    engine_figures(&of(r, after)),
                );
                ttft(ev, before, Some(r), &mut b);
                ttft(ev, after, Some(r), &mut a);
                EffectRow {
                    replica: r.to_string(),
                    before: b,
                    after: a,
                }
            })
            .collect();
        let mut all = EffectRow {
            replica: "all".into(),
            before: Figures::default(),
            after: Figures::default(),
        };
        ttft(ev, before, None, &mut all.before);
        ttft(ev, after, None, &mut all.after);
        rows.push(all);
        out.push(CacheEffects {
            fault: f.fault.clone(),
            replica: f.replica.clone(),
            before,
            after,
            rows,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::*;
    use crate::trace::Event;

    /// w1's engine metrics at `t` s: counters of prefix hits/queries and prompt tokens,
    /// gauges of KV usage and queues.
    fn metrics(tb: &mut Tb, t: f64, w: &str, hits: f64, queries: f64, prompt: f64, kv: f64) {
        let m = [
            ("prefix_hits", hits),
            ("prefix_queries", queries),
            ("prompt_tokens", prompt),
            ("kv_usage", kv),
            ("running", kv * 10.0),
            ("waiting", 0.0),
        ];
        tb.ev(Event::EngineMetrics {
            t: us(t),
            replica: w.into(),
            engine: "vllm".into(),
            m: m.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        });
    }

    /// The kill of w2 at 13 s moves its load onto w1: w1's prefix hit rate falls (the
    /// warm cache was w2's), its KV usage and prompt intake rise, its TTFT with them.
    #[test]
    fn a_reroute_shows_the_survivors_cache_and_queue_change_next_to_their_ttft() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 12.9, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        // One more request reached w2 after the kill: the reroute is after it.
        tb.request(R::ok("late", "fault", 13.3, "w2"));
        tb.removed(us(13.5), "w2", "connection failed");
        for k in 0..60 {
            let t = 13.6 + f64::from(k) * 0.1;
            let mut r = R::ok(
                format!("d{k}"),
                "fault",
                t,
                if k % 2 == 0 { "w1" } else { "w3" },
            );
            r.ttft_ms = 300.0;
            tb.request(r);
        }
        // Before: 80 of 100 looked-up prompt tokens hit, 1000 prompt tokens/s, KV 20%.
        for (i, t) in [9.0, 10.0, 11.0, 12.0].iter().enumerate() {
            let i = i as f64;
            metrics(&mut tb, *t, "w1", 80.0 * i, 100.0 * i, 1000.0 * i, 0.2);
        }
        // After: the process restarted its counters at 14 s (a drop counts from 0):
        // 10 hits of 100 per second, 3000 prompt tokens/s, KV 60%.
        for (i, t) in [14.0, 15.0, 16.0, 17.0].iter().enumerate() {
            let i = i as f64;
            metrics(&mut tb, *t, "w1", 10.0 * i, 100.0 * i, 3000.0 * i, 0.6);
        }
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        let e = &j.cache_effects[0];
        assert_eq!((e.fault.as_str(), e.replica.as_str()), ("kill-w2", "w2"));
        let removed = j.timeline.faults[0].removal.as_ref().map(|r| r.t);
        assert_eq!(Some(e.after.0), removed, "after the reroute, not the fault");
        assert!(e.after.0 >= us(13.3), "{e:?}");
        let w1 = e.rows.iter().find(|r| r.replica == "w1").expect("w1");
        let (b, a) = (&w1.before, &w1.after);
        assert_eq!(
            (b.prefix_hit_rate, a.prefix_hit_rate),
            (Some(0.8), Some(0.1))
        );
        assert_eq!((b.kv_usage, a.kv_usage), (Some(0.2), Some(0.6)));
        assert_eq!(
            (b.prompt_tokens_per_s, a.prompt_tokens_per_s),
            (Some(1000.0), Some(3000.0))
        );
        assert_eq!((b.ttft_p50_ms, a.ttft_p50_ms), (Some(100.0), Some(300.0)));
        let all = e.rows.last().expect("all");
        assert_eq!(all.replica, "all");
        assert!(all.after.requests >= 60, "{all:?}");
        // No engine metrics read: no table.
        let mut plain = Tb::new();
        plain.phases(&p);
        plain.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1"]));
        plain.inject("kill-w2", "w2", us(13.0), true);
        plain.run_end(us(32.0));
        assert!(plain.judge(&p).cache_effects.is_empty());
    }
}
