//! The engine model's sustainable rate, computed from its parameters: the truth a
//! capacity search of the sim is measured against (`haq sim capacity`, issue 19).
//!
//! At saturation every one of the `M` scheduling slots is busy (`M`: the smallest of
//! `max_num_seqs`, the gateway's `max_inflight_per_worker`, the sequences whose
//! prompt and output fit the KV cache at once, and the step's token budget). A
//! request holds its slot for `O` steps: the step that prefills its `P` prompt tokens
//! and samples the first token, then `O − 1` decode steps (`sched::Sched::schedule`).
//! Per second of engine time, at λ requests/s per replica:
//!
//! ```text
//! steps/s            n = λ·O/M
//! 1 s  = n·base + per_seq·λ(O−1) + per_1k·λ·Σᵢ(P+i)/1000 + λ·P/prefill_tps
//! λmax = 1 / (O·base/M + per_seq·(O−1) + per_1k·((O−1)·P + O(O−1)/2)/1000 + P/tps)
//! ```
//!
//! (i over the decode steps 1‥O−1; the context of a decoding sequence is its computed
//! tokens plus one). When the gateway's limit binds (it admits no more than the
//! engine's slots, so the engine holds no queue), a freed slot stays empty for one
//! step — the next request reaches the engine while the step after the finishing one
//! runs — and a request's cycle is O + 1 steps (O·base becomes (O+1)·base). Above λmax the waiting queue grows without bound (TTFT climbs
//! for as long as the rate is held); below it there is a free slot for every
//! arrival. A mix of classes averages the per-request cost by weight. Prefix
//! sharing is not credited (the KV bound is the cold one), so the figure holds for
//! mixes without shared prefixes; tool calls are not modelled.

use crate::sim::config::EngineCfg;

const GATEWAY: &str = "max_inflight_per_worker";

/// One class of a mix, by weight, with its typical lengths (tokens).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassLen {
    pub weight: f64,
    pub prompt: f64,
    pub output: f64,
}

/// The model's sustainable rate and what binds it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sustainable {
    /// Requests per second one replica completes at saturation.
    pub per_replica: f64,
    /// Concurrent sequences at saturation.
    pub slots: u32,
    /// What sets `slots`: `max_num_seqs`, `max_inflight_per_worker`, `kv_cache`,
    /// `max_num_batched_tokens`.
    pub bound: &'static str,
    /// Step time at saturation (ms), the decode ITL there.
    pub step_ms: f64,
}

impl Sustainable {
    /// `replicas` replicas behind a gateway that spreads the load evenly.
    pub fn total(&self, replicas: u32) -> f64 {
        self.per_replica * f64::from(replicas)
    }
}

/// The sustainable rate of one replica of `cfg` for `mix`; `max_inflight`: the
/// gateway's per-worker admission limit, when there is one in front.
pub fn sustainable(
    cfg: &EngineCfg,
    max_inflight: Option<u32>,
    mix: &[ClassLen],
) -> Option<Sustainable> {
    let w: f64 = mix.iter().map(|c| c.weight).sum();
    if w <= 0.0 || mix.iter().any(|c| c.output < 1.0 || c.prompt < 0.0) {
        return None;
    }
    let avg = |f: &dyn Fn(&ClassLen) -> f64| mix.iter().map(|c| c.weight * f(c)).sum::<f64>() / w;
    let (p, o) = (avg(&|c| c.prompt), avg(&|c| c.output));
    let bs = f64::from(cfg.block_size.max(1));
    let blocks = (cfg.kv_cache_tokens / cfg.block_size.max(1)).max(1);
    let per_seq_blocks = avg(&|c| ((c.prompt + c.output) / bs).ceil()).max(1.0);
    let kv = (f64::from(blocks) / per_seq_blocks).floor() as u32;
    // The gateway first: at a tie it binds (the engine then never holds a queue).
    let mut bounds = Vec::new();
    if let Some(g) = max_inflight {
        bounds.push((g, GATEWAY));
    }
    bounds.extend([
        (cfg.max_num_seqs, "max_num_seqs"),
        (kv.max(1), "kv_cache"),
        (cfg.max_num_batched_tokens, "max_num_batched_tokens"),
    ]);
    let (slots, bound) = bounds.into_iter().min_by_key(|b| b.0)?;
    let m = f64::from(slots.max(1));
    // The step times as the engine runs them (`target.engine.speed` applied).
    let model = super::StepModel::from_cfg(cfg);
    let base = model.base.as_secs_f64();
    let per_seq = model.per_seq.as_secs_f64();
    let per_1k = model.per_1k_context.as_secs_f64();
    let context = avg(&|c| (c.output - 1.0) * c.prompt + c.output * (c.output - 1.0) / 2.0);
    // Gateway-bound, a freed slot waits one step: the next request reaches the engine
    // while the step after the finishing one runs, and joins the one after that.
    let cycle = if bound == GATEWAY { o + 1.0 } else { o };
    let cost = cycle * base / m
        + per_seq * (o - 1.0)
        + per_1k * context / 1000.0
        + p / model.prefill_tokens_per_s.max(1.0);
    let per_replica = 1.0 / cost;
    Some(Sustainable {
        per_replica,
        slots,
        bound,
        step_ms: 1000.0 * m / (per_replica * cycle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> EngineCfg {
        serde_json::from_str(
            r#"{"decode_step": "10ms", "decode_step_per_seq": "2ms",
                "decode_step_per_1k_context": "0ms", "max_num_seqs": 4,
                "prefill_tokens_per_s": 1000000}"#,
        )
        .expect("cfg")
    }

    #[test]
    fn the_formula_by_hand() {
        let one = [ClassLen {
            weight: 1.0,
            prompt: 64.0,
            output: 32.0,
        }];
        let s = sustainable(&cfg(), None, &one).expect("rate");
        // 32·10/4 + 2·31 + 64/1e6 ms·1000 = 80 + 62 + 0.064 = 142.064 ms per request.
        assert!((s.per_replica - 1000.0 / 142.064).abs() < 1e-6, "{s:?}");
        assert_eq!((s.slots, s.bound), (4, "max_num_seqs"));
        // A gateway admitting 2 per worker binds first: (32+1)·10/2 + 62 + 0.064 ms.
        let g = sustainable(&cfg(), Some(2), &one).expect("rate");
        assert_eq!(g.bound, "max_inflight_per_worker");
        assert!((1000.0 / g.per_replica - 227.064).abs() < 1e-6, "{g:?}");
        // At a tie the gateway binds too: (32+1)·10/4 + 62.064 ms.
        let t = sustainable(&cfg(), Some(4), &one).expect("rate");
        assert_eq!((t.slots, t.bound), (4, "max_inflight_per_worker"));
        assert!((1000.0 / t.per_replica - 144.564).abs() < 1e-6, "{t:?}");
        // Context cost: 1 ms per 1k tokens over Σ(64+i), i = 1..31 = 1984 + 496.
        let mut c = cfg();
        c.decode_step_per_1k_context = crate::wire::units::Dur::millis(1);
        let k = sustainable(&c, None, &one).expect("rate");
        assert!(
            (1000.0 / k.per_replica - (142.064 + 2.48)).abs() < 1e-6,
            "{k:?}"
        );
        assert!((s.total(3) - 3.0 * s.per_replica).abs() < 1e-9);
        // `speed` scales every step time: twice as fast, twice the rate.
        let fast = EngineCfg {
            speed: 2.0,
            ..cfg()
        };
        let f = sustainable(&fast, None, &one).expect("rate");
        assert!((f.per_replica - 2.0 * s.per_replica).abs() < 1e-9, "{f:?}");
        assert!((f.step_ms - s.step_ms / 2.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn the_kv_cache_can_bind_and_a_mix_averages_by_weight() {
        let mut c = cfg();
        c.kv_cache_tokens = 16 * 12; // 12 blocks: two 96-token sequences (6 blocks each)
        let one = [ClassLen {
            weight: 1.0,
            prompt: 64.0,
            output: 32.0,
        }];
        let s = sustainable(&c, None, &one).expect("rate");
        assert_eq!((s.slots, s.bound), (2, "kv_cache"));
        let mix = [
            ClassLen {
                weight: 1.0,
                prompt: 64.0,
                output: 16.0,
            },
            ClassLen {
                weight: 1.0,
                prompt: 64.0,
                output: 48.0,
            },
        ];
        let m = sustainable(&cfg(), None, &mix).expect("rate");
        assert!((1000.0 / m.per_replica - 142.064).abs() < 1e-6, "{m:?}");
        assert!(sustainable(&cfg(), None, &[]).is_none());
    }
}
