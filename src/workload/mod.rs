//! The request schedule: seeded, open loop, computed ahead of sending (never from
//! responses), lazily so a long run holds no schedule in memory. Same seed, same
//! requests at the same offsets (SPEC Q12: a production-like mix, replayable).

pub mod arrival;
pub mod body;
pub mod dist;
mod marker;

use std::sync::Arc;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::plan::inputs::Replay;
pub use arrival::RateProfile;
pub use body::{api_path, prompt_text, request_body};
use dist::Sampler;
pub use marker::BodyMarker;

use crate::scenario::{ArrivalProcess, Leave, Priority};

use crate::plan::Plan;
use crate::wire::hash::mix64;

pub use crate::plan::{MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS};

/// One turn of a multi-turn session.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub session: String,
    /// From 1.
    pub turn: u32,
    /// Earlier turns: (request index, prompt tokens, answer tokens).
    pub history: Vec<(u64, u32, u32)>,
}

/// One request the schedule wants sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub idx: u64,
    pub id: String,
    /// Offset from the start of load.
    pub at: Duration,
    pub class: usize,
    /// Tokens of the new prompt (the user message).
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    /// Index into `plan.phases`.
    pub phase: usize,
    pub stream: bool,
    /// Shared prefix: (group, tokens).
    pub prefix: Option<(u32, u32)>,
    pub session: Option<Turn>,
    /// Replayed Mooncake block hashes for the prompt.
    pub hash_ids: Option<Arc<[u32]>>,
    /// The client leaves early (the class's `abandon`, drawn for this request).
    pub leave: Option<Leave>,
    /// A planted prompt of `workload.cache_truth` (M6): which one.
    pub planted: Option<u32>,
}

impl Planned {
    /// Every prompt token sent: prefix, session history and the new message.
    pub fn total_prompt_tokens(&self) -> u32 {
        let history: u32 = self
            .session
            .iter()
            .flat_map(|s| s.history.iter())
            .map(|(_, p, o)| p + o)
            .sum();
        self.prompt_tokens + history + self.prefix.map(|p| p.1).unwrap_or(0)
    }
}

struct ClassDraw {
    prompt: Sampler,
    output: Sampler,
    /// Prefix length of each group (drawn once per group).
    prefix: Vec<u32>,
    turns: Option<Sampler>,
    parallel: u32,
}

struct OpenSession {
    n: u64,
    turns: u32,
    history: Vec<(u64, u32, u32)>,
}

struct ReplayPos {
    replay: Arc<Replay>,
    next: usize,
    offset_us: f64,
    scale: f64,
    repeat: bool,
}

/// Iterator over the schedule. Arrivals and request contents draw from separate
/// seeded streams, so changing the mix does not move the arrival times.
pub struct Schedule<'a> {
    plan: &'a Plan,
    arrivals: ChaCha8Rng,
    content: ChaCha8Rng,
    gaps: arrival::Gaps,
    /// Operational time (integral of the rate) of the next arrival, and its time.
    next_at: Option<f64>,
    replay: Option<ReplayPos>,
    idx: u64,
    cum_weights: Vec<f64>,
    draws: Vec<ClassDraw>,
    sessions: Vec<Vec<OpenSession>>,
    session_seq: u64,
}

impl<'a> Schedule<'a> {
    pub fn new(plan: &'a Plan) -> Result<Self, String> {
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
        let inputs = &plan.inputs;
        let mut draws = Vec::new();
        for (i, c) in plan.mix.classes.iter().enumerate() {
            let prefix = match &c.shared_prefix {
                Some(sp) => {
                    let s = Sampler::new(&sp.tokens, MAX_PROMPT_TOKENS, inputs)?;
                    (0..sp.groups)
                        .map(|g| {
                            let key = mix64(plan.seed ^ 0x9F1) ^ mix64(i as u64) ^ u64::from(g);
                            s.draw(&mut ChaCha8Rng::seed_from_u64(key))
                        })
                        .collect()
                }
                None => Vec::new(),
            };
            draws.push(ClassDraw {
                prompt: Sampler::new(&c.prompt_tokens, MAX_PROMPT_TOKENS, inputs)?,
                output: Sampler::new(&c.output_tokens, MAX_OUTPUT_TOKENS, inputs)?,
                prefix,
                turns: match &c.session {
                    Some(s) => Some(Sampler::new(&s.turns, 10_000, inputs)?),
                    None => None,
                },
                parallel: c.session.as_ref().map(|s| s.parallel.max(1)).unwrap_or(0),
            });
        }
        let a = &plan.scenario.workload.arrival;
        let gaps = arrival::Gaps::new(a).map_err(|i| format!("{}: {}", i.field, i.reason))?;
        let replay = match (a.process, &a.trace) {
            (ArrivalProcess::Trace, Some(t)) => Some(ReplayPos {
                replay: inputs
                    .replay
                    .clone()
                    .ok_or_else(|| format!("{} was not loaded", t.file))?,
                next: 0,
                offset_us: 0.0,
                scale: t.time_scale,
                repeat: t.repeat,
            }),
            _ => None,
        };
        let mut s = Schedule {
            plan,
            arrivals: ChaCha8Rng::seed_from_u64(plan.seed),
            content: ChaCha8Rng::seed_from_u64(plan.seed ^ 0x9E37_79B9_7F4A_7C15),
            gaps,
            next_at: Some(0.0),
            replay,
            idx: 0,
            cum_weights,
            sessions: plan.mix.classes.iter().map(|_| Vec::new()).collect(),
            draws,
            session_seq: 0,
        };
        s.next_at = s.advance(0.0);
        Ok(s)
    }

    /// The time of the arrival after one at `t` (seconds from the start of load).
    fn advance(&mut self, t: f64) -> Option<f64> {
        let g = self.gaps.draw(&mut self.arrivals);
        self.plan.profile.advance(t, g)
    }

    /// Next replayed entry: (offset s, input, output, hash ids).
    fn next_replayed(&mut self) -> Option<(f64, u32, u32, Arc<[u32]>)> {
        let r = self.replay.as_mut()?;
        if r.next >= r.replay.entries.len() {
            if !r.repeat || r.replay.entries.is_empty() {
                return None;
            }
            let n = r.replay.entries.len() as f64;
            let gap = if n > 1.0 {
                r.replay.span_us as f64 / (n - 1.0)
            } else {
                1e6
            };
            r.offset_us += (r.replay.span_us as f64 + gap) * r.scale;
            r.next = 0;
        }
        let e = &r.replay.entries[r.next];
        r.next += 1;
        let at = (e.at_us as f64 * r.scale + r.offset_us) / 1e6;
        Some((at, e.input, e.output, e.hash_ids.clone()))
    }

    fn pick_class(&mut self) -> usize {
        let total = self.cum_weights.last().copied().unwrap_or(1.0);
        let pick = self.content.random::<f64>() * total;
        self.cum_weights
            .iter()
            .position(|w| pick < *w)
            .unwrap_or(self.cum_weights.len().saturating_sub(1))
    }

    /// Continues (or opens) a session of `class` for request `idx`.
    fn turn(&mut self, class: usize, idx: u64, prompt: u32, output: u32) -> Option<Turn> {
        let d = &self.draws[class];
        let turns = d.turns.as_ref()?;
        let pool = &mut self.sessions[class];
        while pool.len() < d.parallel as usize {
            self.session_seq += 1;
            pool.push(OpenSession {
                n: self.session_seq,
                turns: turns.draw(&mut self.content).max(1),
                history: Vec::new(),
            });
        }
        let k = self.content.random_range(0..pool.len());
        let s = &mut pool[k];
        let t = Turn {
            session: format!("s{:05}", s.n),
            turn: s.history.len() as u32 + 1,
            history: s.history.clone(),
        };
        s.history.push((idx, prompt, output));
        if s.history.len() as u32 >= s.turns {
            pool.swap_remove(k);
        }
        Some(t)
    }
}

impl Iterator for Schedule<'_> {
    type Item = Planned;

    fn next(&mut self) -> Option<Planned> {
        let (at_s, replayed) = if self.replay.is_some() {
            let (at, i, o, h) = self.next_replayed()?;
            (at, Some((i, o, h)))
        } else {
            let at = self.next_at?;
            self.next_at = self.advance(at);
            (at, None)
        };
        let at = Duration::from_secs_f64(at_s);
        if at >= self.plan.total {
            self.next_at = None;
            self.replay = None;
            return None;
        }
        let class = self.pick_class();
        let c = &self.plan.mix.classes[class];
        let d = &self.draws[class];
        let (mut prompt_tokens, mut max_tokens) = (
            d.prompt.draw(&mut self.content),
            d.output.draw(&mut self.content),
        );
        let mut hash_ids = None;
        if let Some((i, o, h)) = replayed {
            (prompt_tokens, max_tokens) = (i, o);
            hash_ids = (!h.is_empty()).then_some(h);
        }
        let stream = c.stream.0 >= 1.0 || self.content.random::<f64>() < c.stream.0;
        let prefix = (!d.prefix.is_empty()).then(|| {
            let g = self.content.random_range(0..d.prefix.len());
            (g as u32, d.prefix[g])
        });
        let idx = self.idx;
        self.idx += 1;
        let session = self.turn(class, idx, prompt_tokens, max_tokens);
        let leave = leaves(self.plan.seed, idx, stream, c.abandon.as_ref());
        let truth = self.plan.scenario.workload.cache_truth.as_ref();
        let planted = truth.and_then(|t| planted(t, idx));
        // A planted prompt keeps the request's arrival and class; its text is fixed.
        let (prefix, session, hash_ids, leave) = match (planted, truth) {
            (Some(_), Some(t)) => {
                (prompt_tokens, max_tokens) = (t.prompt_tokens, t.output_tokens);
                (None, None, None, None)
            }
            _ => (prefix, session, hash_ids, leave),
        };
        let phase = self
            .plan
            .phases
            .iter()
            .position(|p| at < p.end())
            .unwrap_or(self.plan.phases.len().saturating_sub(1));
        Some(Planned {
            idx,
            id: format!("r{idx:06}"),
            at,
            class,
            prompt_tokens,
            max_tokens,
            phase,
            stream,
            prefix,
            session,
            hash_ids,
            leave,
            planted,
        })
    }
}

/// One agent's part of the schedule (`haq run --agents N`): request `idx` belongs to
/// share `idx mod count`, so the shares of `0..count` together are exactly the
/// single-process schedule, each request in one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub index: u64,
    pub count: u64,
}

impl Share {
    /// The whole schedule (one process).
    pub const WHOLE: Share = Share { index: 0, count: 1 };

    /// Whether request `idx` is this share's.
    pub fn holds(self, idx: u64) -> bool {
        idx % self.count.max(1) == self.index
    }

    /// The share of the request with id `id` among `count` (`None`: not a schedule id).
    pub fn of_id(id: &str, count: u64) -> Option<u64> {
        index_of(id).map(|i| i % count.max(1))
    }
}

/// How agent `index` of `haq run --agents` is named in the trace and the reports.
pub fn agent_name(index: u64) -> String {
    format!("agent-{index}")
}

/// Which planted prompt of `workload.cache_truth` request `idx` carries (M6): request
/// `every`·k − 1 carries prompt k mod `prompts` — from the index alone, so the checker
/// finds the planted requests from their ids.
pub fn planted(t: &crate::scenario::CacheTruth, idx: u64) -> Option<u32> {
    let every = u64::from(t.every.max(2));
    (idx + 1)
        .is_multiple_of(every)
        .then(|| ((idx / every) % u64::from(t.prompts.max(1))) as u32)
}

/// The schedule index of the request with id `id` (`r000123`), for the checks.
pub fn index_of(id: &str) -> Option<u64> {
    let digits = id.strip_prefix('r')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Whether request `idx` leaves early, and when: drawn from the seed and the index
/// alone, so abandonment moves no other draw of the schedule. Only streamed requests
/// leave (a whole answer has no mid-stream to leave in).
fn leaves(
    seed: u64,
    idx: u64,
    stream: bool,
    abandon: Option<&crate::scenario::Abandon>,
) -> Option<Leave> {
    let a = abandon.filter(|_| stream)?;
    let draw = mix64(mix64(seed ^ 0xABA4_D0E5) ^ idx) >> 11;
    let unit = draw as f64 / (1u64 << 53) as f64;
    (unit < a.share.0).then(|| a.leave()).flatten()
}

pub fn is_protected(plan: &Plan, p: &Planned) -> bool {
    plan.mix.classes[p.class].priority == Priority::Protected
}

/// The value of the priority header for a request.
pub fn priority_value(plan: &Plan, p: &Planned) -> &'static str {
    match plan.mix.classes[p.class].priority {
        Priority::Protected => "protected",
        Priority::BestEffort => "best_effort",
    }
}

#[cfg(test)]
mod tests;
