//! The continuous-batching scheduler, without time: which sequences run in the next
//! step and how many tokens each processes (vLLM V1 style: running sequences first,
//! then admissions from the waiting queue, under a token budget per step with chunked
//! prefill), KV blocks allocated as tokens are computed, preemption with recompute when
//! blocks run out, prefix-cache hits at admission. The engine loop adds the clock.

use std::collections::VecDeque;

use super::kv::Kv;

/// One sequence (request) in the engine, carrying the caller's job `T`.
pub struct Seq<T> {
    pub id: u64,
    pub job: T,
    pub prompt_tokens: u32,
    /// Hashes of the prompt's whole blocks.
    pub hashes: Vec<u64>,
    /// Output tokens sampled so far.
    pub generated: u32,
    /// Tokens whose KV is in the cache.
    computed: u32,
    /// Tokens to process in the step being run.
    planned: u32,
    private: u32,
    refs: Vec<u64>,
    published: bool,
    /// Scheduled at least once (its first prefill has begun).
    pub started: bool,
    pub preemptions: u32,
}

impl<T> Seq<T> {
    /// Prompt plus generated tokens: what must be in KV before the next sample.
    fn target(&self) -> u32 {
        self.prompt_tokens + self.generated
    }
    fn held(&self) -> u32 {
        self.private + self.refs.len() as u32
    }
    /// Context tokens attention reads this step.
    pub fn context(&self) -> u32 {
        self.computed
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_num_seqs: u32,
    pub max_batched_tokens: u32,
    pub block_size: u32,
}

/// What one step computes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Work {
    /// Sequences decoding one token.
    pub decode: u32,
    /// Their summed context (tokens).
    pub context: u64,
    /// Prompt (or recompute) tokens prefilled.
    pub prefill: u32,
}

impl Work {
    pub fn is_empty(&self) -> bool {
        self.decode == 0 && self.prefill == 0
    }
}

/// A scheduling event the engine journals.
pub enum Note<'a, T> {
    /// Left the waiting queue; `cached` prompt tokens came from the prefix cache.
    Scheduled {
        seq: &'a mut Seq<T>,
        cached: u32,
        recompute: bool,
    },
    /// Lost its KV and went back to the head of the queue (recompute later).
    Preempted { seq: &'a Seq<T> },
}

/// What the caller decides after a token was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Done: free its blocks (prompt blocks stay in the prefix cache).
    Finish,
}

pub struct Sched<T> {
    lim: Limits,
    pub kv: Kv,
    waiting: VecDeque<Seq<T>>,
    running: Vec<Seq<T>>,
    next_id: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub preemptions: u64,
}

fn blocks_for(tokens: u32, bs: u32) -> u32 {
    tokens.div_ceil(bs)
}

impl<T> Sched<T> {
    pub fn new(lim: Limits, kv: Kv) -> Self {
        Sched {
            lim,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            preemptions: 0,
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// A queued sequence by id (newest first: it is usually the one just submitted).
    pub fn find_waiting(&self, id: u64) -> Option<&Seq<T>> {
        self.waiting.iter().rev().find(|s| s.id == id)
    }

    /// Queues a new sequence.
    pub fn submit(&mut self, job: T, prompt_tokens: u32, hashes: Vec<u64>) -> u64 {
        self.next_id += 1;
        self.waiting.push_back(Seq {
            id: self.next_id,
            job,
            prompt_tokens: prompt_tokens.max(1),
            hashes,
            generated: 0,
            computed: 0,
            planned: 0,
            private: 0,
            refs: Vec::new(),
            published: false,
            started: false,
            preemptions: 0,
        });
        self.next_id
    }

    fn free(kv: &mut Kv, s: &mut Seq<T>) {
        kv.release(s.private);
        for h in s.refs.drain(..) {
            kv.unref(h);
        }
        s.private = 0;
        s.computed = 0;
        s.planned = 0;
        s.published = false;
    }

    /// Drops every sequence for which `keep` is false (client gone, lease ended),
    /// freeing its blocks; returns them.
    pub fn retain(&mut self, mut keep: impl FnMut(&Seq<T>) -> bool) -> Vec<Seq<T>> {
        let mut gone = Vec::new();
        let kv = &mut self.kv;
        for q in [&mut self.running] {
            let mut i = 0;
            while i < q.len() {
                if keep(&q[i]) {
                    i += 1;
                } else {
                    let mut s = q.swap_remove(i);
                    Self::free(kv, &mut s);
                    gone.push(s);
                }
            }
        }
        // Keep FIFO order in the queue.
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for mut s in self.waiting.drain(..) {
            if keep(&s) {
                kept.push_back(s);
            } else {
                Self::free(kv, &mut s);
                gone.push(s);
            }
        }
        self.waiting = kept;
        // Running order is admission order: swap_remove broke it; restore by id.
        self.running.sort_unstable_by_key(|s| s.id);
        gone
    }

    /// Removes every sequence (running first, then the queue in order), freeing its
    /// blocks: the engine died with them in it.
    pub fn drain_all(&mut self) -> Vec<Seq<T>> {
        let mut out: Vec<Seq<T>> = self.running.drain(..).collect();
        out.extend(self.waiting.drain(..));
        for s in &mut out {
            Self::free(&mut self.kv, s);
        }
        out
    }

    /// Plans the next step.
    pub fn schedule(&mut self, mut note: impl FnMut(Note<'_, T>)) -> Work {
        let bs = self.lim.block_size;
        let mut budget = self.lim.max_batched_tokens;
        let mut work = Work::default();
        let mut i = 0;
        while i < self.running.len() {
            let want = {
                let s = &self.running[i];
                (s.target() - s.computed).min(budget)
            };
            if want == 0 {
                self.running[i].planned = 0;
                i += 1;
                continue;
            }
            let need = {
                let s = &self.running[i];
                blocks_for(s.computed + want, bs).saturating_sub(s.held())
            };
            // Out of blocks: preempt the most recently admitted sequence (maybe this one).
            let mut self_preempted = false;
            while need > self.kv.available() {
                let Some(mut victim) = self.running.pop() else {
                    break;
                };
                let is_self = self.running.len() == i;
                Self::free(&mut self.kv, &mut victim);
                victim.preemptions += 1;
                self.preemptions += 1;
                note(Note::Preempted { seq: &victim });
                self.waiting.push_front(victim);
                if is_self {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            if !self.kv.alloc(need) {
                break;
            }
            let s = &mut self.running[i];
            s.private += need;
            s.planned = want;
            budget -= want;
            if want == 1 && s.generated > 0 && s.computed + 1 == s.target() {
                work.decode += 1;
                work.context += u64::from(s.computed + 1);
            } else {
                work.prefill += want;
            }
            i += 1;
        }
        // Admissions, first come first served.
        while budget > 0 && (self.running.len() as u32) < self.lim.max_num_seqs {
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            let n_prompt_blocks = (s.prompt_tokens / bs) as usize;
            let hashes = &s.hashes[..s.hashes.len().min(n_prompt_blocks)];
            let refs = self.kv.lookup(hashes);
            let cached = (refs.len() as u32 * bs).min(s.target() - 1);
            let want = (s.target() - cached).min(budget);
            let need = blocks_for(cached + want, bs).saturating_sub(refs.len() as u32);
            if !self.kv.alloc(need) {
                for h in refs {
                    self.kv.unref(h);
                }
                self.waiting.push_front(s);
                break;
            }
            if !s.started || s.preemptions > 0 {
                self.prefix_queries += u64::from(s.prompt_tokens);
                self.prefix_hits += u64::from(cached.min(s.prompt_tokens));
            }
            s.refs = refs;
            s.private = need;
            s.computed = cached;
            s.planned = want;
            s.published = s.refs.len() as u32 * bs >= s.prompt_tokens;
            budget -= want;
            work.prefill += want;
            let recompute = s.started;
            s.started = true;
            note(Note::Scheduled {
                seq: &mut s,
                cached,
                recompute,
            });
            self.running.push(s);
        }
        work
    }

    /// Runs the planned step: advances every scheduled sequence and calls `sampled`
    /// with the index of each token sampled; finished sequences are removed.
    pub fn complete(
        &mut self,
        mut sampled: impl FnMut(&mut Seq<T>, u32) -> Verdict,
    ) -> Vec<Seq<T>> {
        let bs = self.lim.block_size;
        let kv = &mut self.kv;
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            if s.planned == 0 {
                i += 1;
                continue;
            }
            s.computed += s.planned;
            s.planned = 0;
            if !s.published && s.computed >= s.prompt_tokens {
                s.published = true;
                let full = (s.prompt_tokens / bs) as usize;
                for b in s.refs.len()..full.min(s.hashes.len()) {
                    if s.private > 0 && kv.publish(s.hashes[b]) {
                        s.private -= 1;
                        s.refs.push(s.hashes[b]);
                    }
                }
            }
            if s.computed < s.target() {
                i += 1;
                continue;
            }
            s.generated += 1;
            let idx = s.generated - 1;
            match sampled(s, idx) {
                Verdict::Continue => i += 1,
                Verdict::Finish => {
                    let mut s = self.running.remove(i);
                    Self::free(kv, &mut s);
                    done.push(s);
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(seqs: u32, batched: u32, blocks: u32) -> Sched<&'static str> {
        Sched::new(
            Limits {
                max_num_seqs: seqs,
                max_batched_tokens: batched,
                block_size: 4,
            },
            Kv::new(blocks, true),
        )
    }

    /// Runs steps until nothing is left; returns (steps, tokens sampled per job).
    fn drain(s: &mut Sched<&'static str>, max: u32) -> Vec<(&'static str, u32, u32)> {
        let mut out = Vec::new();
        for step in 0..1000 {
            let w = s.schedule(|_| {});
            if w.is_empty() {
                break;
            }
            s.complete(|seq, i| {
                out.push((seq.job, step, i));
                if i + 1 == max {
                    Verdict::Finish
                } else {
                    Verdict::Continue
                }
            });
        }
        out
    }

    #[test]
    fn a_queue_forms_beyond_max_num_seqs() {
        let mut s = sched(2, 64, 100);
        for j in ["a", "b", "c"] {
            s.submit(j, 8, vec![]);
        }
        let w = s.schedule(|_| {});
        assert_eq!((s.running(), s.waiting()), (2, 1));
        assert_eq!(w.prefill, 16);
        let out = drain(&mut s, 3);
        let first_c = out.iter().find(|(j, _, _)| *j == "c").map(|x| x.1);
        let last_a = out.iter().filter(|(j, _, _)| *j == "a").map(|x| x.1).max();
        assert!(first_c > last_a, "c starts after a finished: {out:?}");
    }

    #[test]
    fn chunked_prefill_spreads_a_long_prompt_over_steps() {
        let mut s = sched(4, 10, 100);
        s.submit("a", 25, vec![]);
        let mut prefill = Vec::new();
        for _ in 0..3 {
            prefill.push(s.schedule(|_| {}).prefill);
            s.complete(|_, _| Verdict::Continue);
        }
        assert_eq!(prefill, vec![10, 10, 5]);
        let w = s.schedule(|_| {});
        assert_eq!((w.decode, w.prefill, w.context), (1, 0, 26));
    }

    #[test]
    fn kv_exhaustion_preempts_the_newest_and_recomputes_it() {
        // 6 blocks of 4 tokens: two sequences of 8 prompt tokens fit (4 blocks), their
        // growth does not.
        let mut s = sched(4, 64, 6);
        s.submit("old", 8, vec![]);
        s.submit("new", 8, vec![]);
        let mut preempted = Vec::new();
        let mut recomputed = false;
        let mut done = Vec::new();
        for _ in 0..100 {
            let w = s.schedule(|n| match n {
                Note::Preempted { seq } => preempted.push(seq.job),
                Note::Scheduled { recompute, .. } => recomputed |= recompute,
            });
            if w.is_empty() {
                break;
            }
            done.extend(
                s.complete(|_, i| {
                    if i == 7 {
                        Verdict::Finish
                    } else {
                        Verdict::Continue
                    }
                })
                .into_iter()
                .map(|q| (q.job, q.generated)),
            );
        }
        assert_eq!(preempted.first(), Some(&"new"), "{preempted:?}");
        assert!(recomputed);
        assert_eq!(
            done,
            vec![("old", 8), ("new", 8)],
            "both complete, in order"
        );
        assert_eq!(s.kv.used(), 0);
    }

    #[test]
    fn a_repeated_prefix_skips_prefill_and_an_empty_cache_does_not() {
        let hashes: Vec<u64> = (1..=4).collect();
        let mut s = sched(4, 1000, 100);
        s.submit("first", 16, hashes.clone());
        assert_eq!(s.schedule(|_| {}).prefill, 16);
        s.complete(|_, _| Verdict::Finish);
        s.submit("second", 16, hashes.clone());
        let mut cached = 0;
        let w = s.schedule(|n| {
            if let Note::Scheduled { cached: c, .. } = n {
                cached = c;
            }
        });
        assert_eq!(
            (w.prefill, cached),
            (1, 15),
            "only the last token is recomputed"
        );
        assert_eq!((s.prefix_queries, s.prefix_hits), (32, 15));
        let mut cold = sched(4, 1000, 100);
        cold.submit("after-restart", 16, hashes);
        assert_eq!(cold.schedule(|_| {}).prefill, 16);
    }

    #[test]
    fn retain_frees_blocks_of_dropped_sequences() {
        let mut s = sched(4, 64, 10);
        s.submit("a", 8, vec![]);
        s.submit("b", 8, vec![]);
        s.schedule(|_| {});
        assert!(s.kv.used() > 0);
        let gone = s.retain(|q| q.job != "a");
        assert_eq!(gone.len(), 1);
        assert_eq!(s.kv.used(), 2);
        assert_eq!(s.running(), 1);
    }
}
