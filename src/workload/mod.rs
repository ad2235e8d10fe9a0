//! The request schedule: seeded, open loop, computed ahead of sending (never from
//! responses), lazily so a long run holds no schedule in memory.

use std::time::Duration;

use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

use crate::scenario::{Api, ArrivalProcess, Dist, Plan, Priority};

/// One request the schedule wants sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub idx: u64,
    pub id: String,
    /// Offset from the start of load.
    pub at: Duration,
    pub class: usize,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    /// Index into `plan.phases`.
    pub phase: usize,
}

/// Iterator over the schedule. Arrivals and request contents draw from separate
/// seeded streams, so changing the mix does not move the arrival times.
pub struct Schedule<'a> {
    plan: &'a Plan,
    arrivals: ChaCha8Rng,
    content: ChaCha8Rng,
    next_at: f64,
    idx: u64,
    cum_weights: Vec<f64>,
}

impl<'a> Schedule<'a> {
    pub fn new(plan: &'a Plan) -> Self {
        let mut total = 0.0;
        let cum_weights = plan
            .mix
            .classes
            .iter()
            .map(|c| {
                total += c.weight;
                total
            })
            .collect();
        let mut s = Schedule {
            plan,
            arrivals: ChaCha8Rng::seed_from_u64(plan.seed),
            content: ChaCha8Rng::seed_from_u64(plan.seed ^ 0x9E37_79B9_7F4A_7C15),
            next_at: 0.0,
            idx: 0,
            cum_weights,
        };
        s.next_at = s.next_after(0.0);
        s
    }

    /// The next arrival after `t`. Each phase offers its own rate; where the rate
    /// changes at a phase edge, the arrival process restarts there (memoryless for
    /// Poisson), so phases with the same rate draw exactly as one long phase.
    fn next_after(&mut self, mut t: f64) -> f64 {
        loop {
            let (rate, edge) = self.rate_at(t);
            let g = self.gap(rate);
            match edge {
                Some(e) if t + g >= e => t = e,
                _ => return t + g,
            }
        }
    }

    /// Rate at offset `t` (s) and where it next changes, if it does.
    fn rate_at(&self, t: f64) -> (f64, Option<f64>) {
        let ph = &self.plan.phases;
        let Some(i) = ph
            .iter()
            .position(|p| t < p.end().as_secs_f64())
            .or(ph.len().checked_sub(1))
        else {
            return (self.plan.rate, None);
        };
        let rate = ph[i].rate;
        let mut j = i;
        while j + 1 < ph.len() && ph[j + 1].rate == rate {
            j += 1;
        }
        let edge = (j + 1 < ph.len()).then(|| ph[j].end().as_secs_f64());
        (rate, edge)
    }

    fn gap(&mut self, rate: f64) -> f64 {
        match self.plan.scenario.workload.arrival.process {
            ArrivalProcess::Constant => 1.0 / rate,
            ArrivalProcess::Poisson => match Exp::new(rate) {
                Ok(e) => e.sample(&mut self.arrivals),
                Err(_) => 1.0 / rate,
            },
        }
    }

    fn draw(&mut self, d: &Dist) -> u32 {
        match d {
            Dist::Fixed(n) => *n,
            Dist::Uniform([lo, hi]) => self.content.random_range(*lo..=*hi),
        }
    }
}

impl Iterator for Schedule<'_> {
    type Item = Planned;

    fn next(&mut self) -> Option<Planned> {
        let at = Duration::from_secs_f64(self.next_at);
        if at >= self.plan.total {
            return None;
        }
        self.next_at = self.next_after(self.next_at);
        let total = self.cum_weights.last().copied().unwrap_or(1.0);
        let pick = self.content.random::<f64>() * total;
        let class = self
            .cum_weights
            .iter()
            .position(|w| pick < *w)
            .unwrap_or(self.cum_weights.len().saturating_sub(1));
        let plan = self.plan;
        let c = &plan.mix.classes[class];
        let prompt_tokens = self.draw(&c.prompt_tokens);
        let max_tokens = self.draw(&c.output_tokens);
        let phase = plan
            .phases
            .iter()
            .position(|p| at < p.end())
            .unwrap_or(plan.phases.len().saturating_sub(1));
        let idx = self.idx;
        self.idx += 1;
        Some(Planned {
            idx,
            id: format!("r{idx:06}"),
            at,
            class,
            prompt_tokens,
            max_tokens,
            phase,
        })
    }
}

const WORDS: &[&str] = &[
    "the",
    "cluster",
    "serves",
    "tokens",
    "while",
    "a",
    "replica",
    "fails",
    "and",
    "router",
    "keeps",
    "every",
    "stream",
    "honest",
    "about",
    "what",
    "client",
    "already",
    "saw",
    "before",
    "retry",
    "budget",
    "limits",
    "prefill",
    "storms",
    "when",
    "many",
    "gpus",
    "drop",
    "at",
    "once",
    "so",
    "queue",
    "grows",
    "slowly",
    "under",
    "load",
    "latency",
    "stays",
    "inside",
    "agreed",
    "envelope",
    "of",
    "service",
    "level",
    "objective",
    "for",
    "protected",
    "traffic",
    "during",
    "degraded",
    "capacity",
    "window",
    "until",
    "replacement",
    "becomes",
    "ready",
    "again",
    "with",
    "warm",
    "cache",
    "blocks",
    "shared",
    "prefix",
];

/// Deterministic prompt text of exactly `tokens` words for request `idx`.
pub fn prompt_text(seed: u64, idx: u64, tokens: u32) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ idx);
    let mut s = String::with_capacity(tokens as usize * 7);
    for i in 0..tokens {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    s
}

/// The JSON body of a streaming request.
pub fn request_body(plan: &Plan, p: &Planned) -> Bytes {
    let class = &plan.mix.classes[p.class];
    let prompt = prompt_text(plan.seed, p.idx, p.prompt_tokens);
    let model = &plan.scenario.target.model;
    let body = match class.api {
        Api::Chat => serde_json::json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": p.max_tokens,
            "temperature": 0,
            "seed": plan.seed,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        Api::Completions => serde_json::json!({
            "model": model,
            "prompt": prompt,
            "max_tokens": p.max_tokens,
            "temperature": 0,
            "seed": plan.seed,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
    };
    Bytes::from(body.to_string())
}

/// The path (relative to the base URL) for a class's API.
pub fn api_path(api: Api) -> &'static str {
    match api {
        Api::Chat => "/chat/completions",
        Api::Completions => "/completions",
    }
}

pub fn is_protected(plan: &Plan, p: &Planned) -> bool {
    plan.mix.classes[p.class].priority == Priority::Protected
}
