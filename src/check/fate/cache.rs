//! Cache truth (M6): the prompts `workload.cache_truth` planted — identical bodies at
//! temperature 0, spread over the run and so over replicas, phases, faults and cold
//! or warm prefix caches — must get one answer each. The first complete answer to a
//! planted prompt (per API: a chat template is another prompt) is the reference;
//! every later complete answer that differs is a `cache_divergence` finding, naming
//! both requests, their replicas and phases and the first word that differs. Cut
//! answers are not compared (their ends are the other checkers').

use std::collections::{BTreeSet, HashMap};

use super::model::{Ctx, FindingKind, Out};
use super::view::View;
use crate::scenario::Api;
use crate::trace::Outcome;

/// The first complete answer to one planted prompt.
struct Answer {
    request: String,
    worker: String,
    phase: String,
    text: String,
}

/// What the run's planted prompts got, as they finish.
#[derive(Default)]
pub struct CacheCheck {
    first: HashMap<(u32, bool), Answer>,
    /// Later answers compared with the first.
    pub compared: u64,
    pub replicas: BTreeSet<String>,
    pub phases: BTreeSet<String>,
}

impl CacheCheck {
    /// One finished request: compared when it carries a planted prompt and completed.
    pub fn add(&mut self, ctx: &Ctx, v: &View, out: &mut Out) {
        let Some((truth, apis)) = &ctx.cache_truth else {
            return;
        };
        let Some(k) =
            crate::workload::index_of(&v.r.id).and_then(|i| crate::workload::planted(truth, i))
        else {
            return;
        };
        let Some(api) = apis.iter().find(|(c, _)| *c == v.r.class).map(|x| x.1) else {
            return;
        };
        let finished = v.end.finish.is_some() || v.r.chunks.iter().any(|c| c.finish.is_some());
        if v.end.outcome != Outcome::Completed || !finished {
            return;
        }
        let text: String = (0..v.deltas.len()).map(|i| v.delta_text(i)).collect();
        let a = Answer {
            request: v.r.id.clone(),
            worker: v.r.worker.clone().unwrap_or_else(|| "?".into()),
            phase: v.r.phase.clone(),
            text: text.trim().to_string(),
        };
        self.replicas.insert(a.worker.clone());
        self.phases.insert(a.phase.clone());
        let key = (k, api == Api::Chat);
        let Some(first) = self.first.get(&key) else {
            self.first.insert(key, a);
            return;
        };
        self.compared += 1;
        if first.text == a.text {
            return;
        }
        let (at, was, now) = first_difference(&first.text, &a.text);
        out.find(
            FindingKind::CacheDivergence,
            &a.request,
            format!(
                "planted prompt {k} ({}) at temperature 0 answered differently: {} on {} in phase {} and {} on {} in phase {}; word {at} is `{was}`, then `{now}` (M6)",
                match api {
                    Api::Chat => "chat",
                    Api::Completions => "completions",
                },
                first.request,
                first.worker,
                first.phase,
                a.request,
                a.worker,
                a.phase
            ),
        )
        .attempts([first.request.clone(), a.request.clone()])
        .excerpt(super::excerpt(&a.text));
    }
}

/// The first word (from 0) where `a` and `b` differ, and the two words there.
fn first_difference<'t>(a: &'t str, b: &'t str) -> (usize, &'t str, &'t str) {
    let (mut x, mut y) = (a.split_whitespace(), b.split_whitespace());
    let mut i = 0;
    loop {
        match (x.next(), y.next()) {
            (Some(p), Some(q)) if p == q => i += 1,
            (p, q) => return (i, p.unwrap_or("(end)"), q.unwrap_or("(end)")),
        }
    }
}
