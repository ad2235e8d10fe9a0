//! The worker's side of the engine: turns sampled tokens into SSE events or whole
//! answers, runs the token-loop fault hooks (M9) at their exact points, hands finished
//! tool calls to the tool executor, and journals what happened to each request.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::api::Fmt;
use super::faults::{Faults, Point};
use super::out::{Ended, Out};
use super::publish::publish_event;
use super::request::GenRequest;
use super::tool_call::ToolWork;
use crate::sim::engine::Publisher;
use crate::sim::engine::sched::{Seq, Verdict};
use crate::sim::engine::stats::Stats;
use crate::sim::journal::Journal;
use crate::sim::text;
use crate::wire::journal::WorkerEntry;

/// One request inside the engine.
pub struct Job {
    pub out: Arc<Out>,
    pub fmt: Fmt,
    pub req: GenRequest,
    /// Prefix of tool idempotency keys (`x-haq-tool-key`; default: the request id).
    pub tool_key: Option<String>,
    /// Argument tokens of the tool call, when the request calls a tool.
    pub tool_tokens: u32,
    /// Output events published so far (the `k` of the event hooks).
    pub events: u32,
    /// Output text kept for whole answers, stop matching and tool arguments.
    pub text: String,
    /// Prompt tokens the prefix cache served at the last scheduling.
    pub cached_tokens: u32,
    /// The worker's own deep health check (`/health_generate`): not journaled, no hooks.
    pub quiet: bool,
}

impl Job {
    pub fn rid(&self) -> &str {
        &self.out.rid
    }
    pub fn attempt(&self) -> Option<&str> {
        self.out.attempt.as_deref()
    }
}

pub struct WorkerPublisher {
    pub worker: String,
    pub faults: Arc<Faults>,
    pub journal: Journal,
    pub stats: Arc<Stats>,
    pub tools: tokio::sync::mpsc::UnboundedSender<ToolWork>,
    /// FLAW `engine.corrupt_prefix_cache` (M6): a prefix-cache hit changes the answer.
    pub corrupt_cache: bool,
}

impl WorkerPublisher {
    fn record_finish(&self, j: &Job, reason: &str, why: Option<String>, generated: u32) {
        if j.quiet {
            return;
        }
        let c = &self.stats.c;
        match reason {
            "length" => c.finished_length.fetch_add(1, Ordering::Relaxed),
            "stop" => c.finished_stop.fetch_add(1, Ordering::Relaxed),
            "tool_calls" => c.finished_tool_calls.fetch_add(1, Ordering::Relaxed),
            _ => c.finished_abort.fetch_add(1, Ordering::Relaxed),
        };
        self.journal.write(WorkerEntry::Finished {
            req: j.rid().into(),
            attempt: j.attempt().map(str::to_string),
            reason: reason.into(),
            why,
            events: j.events,
            generated,
        });
    }

    fn abort(&self, j: &Job, e: Ended, generated: u32) -> Verdict {
        self.lease_ended(j, e);
        self.record_finish(j, "aborted", Some(e.as_str().into()), generated);
        Verdict::Finish
    }

    /// Journals an expiry (revocations are journaled where they are confirmed).
    fn lease_ended(&self, j: &Job, e: Ended) {
        if e == Ended::LeaseExpired {
            self.journal.write(WorkerEntry::LeaseExpired {
                req: j.rid().to_string(),
                attempt: j.attempt().unwrap_or_default().to_string(),
            });
        }
    }

    /// A tool-calling request finished decoding its arguments.
    fn tool_ready(&self, j: &mut Job, generated: u32) -> Verdict {
        let name = j.req.tool.clone().unwrap_or_default();
        let call_id = text::tool_call_id(j.req.prompt_hash, j.req.seed, 0);
        let args = serde_json::json!({"query": j.text.trim()}).to_string();
        let work = ToolWork {
            out: j.out.clone(),
            fmt: j.fmt.clone(),
            stream: j.req.stream,
            key_prefix: j.tool_key.clone(),
            call_id,
            name,
            args,
            completion: generated,
        };
        if self.tools.send(work).is_err() {
            j.out.close();
            self.record_finish(j, "aborted", Some("tool executor gone".into()), generated);
            return Verdict::Finish;
        }
        self.record_finish(j, "tool_calls", None, generated);
        Verdict::Finish
    }
}

/// Earliest stop string in `text` at or after byte `from`.
fn find_stop(text: &str, stops: &[String], from: usize) -> Option<usize> {
    stops
        .iter()
        .filter_map(|s| {
            let start = from.saturating_sub(s.len());
            let start = (start..=from)
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(from);
            text[start..].find(s.as_str()).map(|p| start + p)
        })
        .min()
}

impl Publisher for WorkerPublisher {
    type Job = Job;

    fn live(&self, j: &Job) -> bool {
        j.out.live()
    }

    fn submitted(&mut self, seq: &Seq<Job>) {
        if seq.job.quiet {
            return;
        }
        self.journal.write(WorkerEntry::Admitted {
            req: seq.job.rid().into(),
            attempt: seq.job.attempt().map(str::to_string),
            prompt_tokens: seq.prompt_tokens,
            resumed: seq.job.req.resumed,
        });
    }

    fn scheduled(&mut self, seq: &mut Seq<Job>, cached: u32, recompute: bool) {
        seq.job.cached_tokens = cached;
        seq.job.fmt.cached_tokens = cached;
        if seq.job.quiet {
            return;
        }
        if let Some(a) = (!recompute)
            .then(|| self.faults.take(Point::Prefill, 0, seq.job.rid()))
            .flatten()
        {
            self.faults.fire(&a, seq.job.rid(), seq.job.attempt());
        }
        self.journal.write(WorkerEntry::Scheduled {
            req: seq.job.rid().into(),
            attempt: seq.job.attempt().map(str::to_string),
            cached_tokens: cached,
            recompute,
        });
    }

    fn stalled(&mut self, lost: std::time::Duration) {
        self.journal.write(WorkerEntry::Stalled {
            worker: self.worker.clone(),
            lost_us: lost.as_micros() as u64,
        });
    }

    fn preempted(&mut self, seq: &Seq<Job>) {
        if seq.job.quiet {
            return;
        }
        self.journal.write(WorkerEntry::Preempted {
            req: seq.job.rid().into(),
            attempt: seq.job.attempt().map(str::to_string),
            generated: seq.generated,
        });
    }

    fn token(&mut self, seq: &mut Seq<Job>, i: u32, _now: Instant, due: Instant) -> Verdict {
        let generated = i + 1;
        if i == 0 && !seq.job.quiet {
            self.journal.write(WorkerEntry::FirstToken {
                req: seq.job.rid().into(),
                attempt: seq.job.attempt().map(str::to_string),
                cached_tokens: seq.job.cached_tokens,
            });
        }
        let j = &mut seq.job;
        // A continuation goes on from the answer's token `resumed` (Q9).
        let hash = match self.corrupt_cache && j.cached_tokens > 0 {
            // FLAW corrupt_prefix_cache: the cached KV is not the prompt's.
            true => j.req.prompt_hash ^ 0x0bad_cac4_e000,
            false => j.req.prompt_hash,
        };
        let tok = text::token(hash, j.req.seed, i + j.req.resumed);
        if j.req.tool.is_some() {
            j.text.push_str(&tok);
            if generated >= j.tool_tokens.min(j.req.max_tokens) {
                return self.tool_ready(j, generated);
            }
            return Verdict::Continue;
        }
        let mut visible: &str = &tok;
        let mut finish = None;
        let keep_text = !j.req.stream || !j.req.stop.is_empty();
        if keep_text {
            let before = j.text.len();
            j.text.push_str(&tok);
            if let Some(p) = find_stop(&j.text, &j.req.stop, before) {
                j.text.truncate(p);
                finish = Some("stop");
            }
            visible = &j.text[before.min(j.text.len())..];
        }
        if finish.is_none() && generated >= j.req.max_tokens {
            finish = Some("length");
        }
        if j.req.stream {
            if !visible.is_empty() {
                let bytes = j.fmt.token(visible, j.events == 0);
                if let Err(e) = publish_event(&self.faults, &j.out, j.events, bytes, Some(due)) {
                    return self.abort(j, e, generated);
                }
                j.events += 1;
            }
            if let Some(f) = finish {
                for b in j.fmt.tail(f, generated) {
                    if let Err(e) = j.out.push(b, None) {
                        return self.abort(j, e, generated);
                    }
                }
                j.out.close();
                self.record_finish(j, f, None, generated);
                return Verdict::Finish;
            }
        } else if let Some(f) = finish {
            let body = j.fmt.whole(&j.text, f, generated);
            if let Err(e) = j.out.push(body, None) {
                return self.abort(j, e, generated);
            }
            j.out.close();
            self.record_finish(j, f, None, generated);
            return Verdict::Finish;
        }
        Verdict::Continue
    }

    fn engine_dead(&mut self, seq: Seq<Job>) {
        let j = &seq.job;
        let last = if j.req.stream {
            super::api::engine_dead_events().to_vec()
        } else {
            Vec::new()
        };
        j.out.engine_dead(&last);
        if j.quiet {
            return;
        }
        self.journal.write(WorkerEntry::Finished {
            req: j.rid().into(),
            attempt: j.attempt().map(str::to_string),
            reason: "aborted".into(),
            why: Some(Ended::EngineDead.as_str().into()),
            events: j.events,
            generated: seq.generated,
        });
    }

    fn dropped(&mut self, seq: Seq<Job>) {
        if seq.job.quiet {
            return;
        }
        let e = seq.job.out.ended().unwrap_or(Ended::ClientGone);
        self.lease_ended(&seq.job, e);
        self.journal.write(WorkerEntry::Finished {
            req: seq.job.rid().into(),
            attempt: seq.job.attempt().map(str::to_string),
            reason: "aborted".into(),
            why: Some(e.as_str().into()),
            events: seq.job.events,
            generated: seq.generated,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::find_stop;

    #[test]
    fn stop_strings_are_found_across_token_boundaries() {
        let stops = vec!["lo w".to_string()];
        assert_eq!(find_stop("hello world", &stops, 6), Some(3));
        assert_eq!(find_stop("hello", &stops, 3), None);
    }
}
