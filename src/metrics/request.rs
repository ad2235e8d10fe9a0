//! What one finished request measured, in µs, read from its trace record.
//!
//! Definitions (SPEC Q2; each from the *intended* send time unless named "dispatch",
//! so a client or server stall is charged to the requests scheduled during it —
//! coordinated-omission free):
//! - TTFT: first content, reasoning or tool-call delta (streamed requests only);
//! - TTFB: response headers, from dispatch;
//! - ITL: every gap between consecutive output deltas; per token: each gap divided by
//!   the tokens a delta carries on average (usage / counted deltas), weighted by them;
//! - TPOT: (last delta − first delta) / (output tokens − 1);
//! - E2E: end of the stream;
//! - slip: dispatch − max(intended, admitted): how late haq itself sent the request.

use crate::scenario::Slo;
use crate::trace::Outcome;
use crate::trace::record::RequestRecord;

/// A request's TTFT as every figure has it (the phase table, the per-second series, the
/// progress line): its first output delta from its intended send time — for a request
/// that streamed and completed; a whole answer or a cut stream has none.
pub fn ttft_us(
    outcome: Outcome,
    stream: bool,
    intended: u64,
    first_delta: Option<u64>,
) -> Option<u64> {
    (outcome == Outcome::Completed && stream)
        .then_some(first_delta?)
        .map(|f| f.saturating_sub(intended))
}

/// How a finished request counts in the phase table and the progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    Completed,
    /// Rejected (429/503): counted apart from failures (`slo.rejection_rate_max`).
    Rejected,
    /// Stopped by haq at the drain timeout.
    Cancelled,
    /// The client left on purpose (workload abandonment): neither a success nor a
    /// failure of the target.
    Abandoned,
    /// Cut short by haq's own interrupt (SIGINT/SIGTERM): not the target's doing.
    Interrupted,
    /// Ended by haq's own machine (a local resource, a budget): not the target's doing.
    Local,
    /// Every other end: an error, a timeout, a cut stream.
    Failed,
}

impl Tally {
    pub fn of(o: Outcome) -> Tally {
        match o {
            Outcome::Completed => Tally::Completed,
            Outcome::Rejected => Tally::Rejected,
            Outcome::Cancelled => Tally::Cancelled,
            Outcome::Abandoned => Tally::Abandoned,
            Outcome::Interrupted => Tally::Interrupted,
            Outcome::Local => Tally::Local,
            _ => Tally::Failed,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    pub ok: bool,
    /// Counts in error-adjusted percentiles as +inf (failed, timed out, rejected).
    pub failed: bool,
    pub ttft: Option<u64>,
    pub ttft_dispatch: Option<u64>,
    pub ttfb: Option<u64>,
    pub itl: Vec<u64>,
    /// Tokens per delta, for per-token ITL.
    pub tokens_per_delta: f64,
    pub tpot: Option<u64>,
    pub e2e: Option<u64>,
    pub e2e_dispatch: Option<u64>,
    pub queue: Option<u64>,
    pub slip: u64,
    pub tokens: u64,
    /// usage.completion_tokens and the counted deltas disagree.
    pub token_mismatch: bool,
    pub slo_met: bool,
}

impl Measured {
    pub fn of(r: &RequestRecord, slo: &Slo) -> Measured {
        let slip = r
            .dispatch
            .saturating_sub(r.intended.max(r.admitted.unwrap_or(0)));
        let Some(end) = &r.end else {
            return Measured {
                slip,
                ..Default::default()
            };
        };
        let ok = end.outcome == Outcome::Completed;
        let mut m = Measured {
            ok,
            // haq's own host failing a request (`local`) and haq's interrupt stopping it
            // are not the target's failure.
            failed: !ok && !end.outcome.is_not_the_targets(),
            ttfb: r.response_t.map(|t| t.saturating_sub(r.dispatch)),
            queue: r.queue_us,
            slip,
            tokens: u64::from(end.tokens),
            tokens_per_delta: 1.0,
            ..Default::default()
        };
        if let (Some(u), Some(c)) = (end.usage.and_then(|u| u.completion), end.counted) {
            m.token_mismatch = u != c;
            if c > 0 && u > 0 {
                m.tokens_per_delta = f64::from(u) / f64::from(c);
            }
        }
        if !ok {
            return m;
        }
        m.e2e = Some(end.t.saturating_sub(r.intended));
        m.e2e_dispatch = Some(end.t.saturating_sub(r.dispatch));
        if r.stream {
            let mut first = None;
            let mut prev: Option<u64> = None;
            for c in r.deltas() {
                first.get_or_insert(c.t);
                if let Some(p) = prev {
                    m.itl.push(c.t.saturating_sub(p));
                }
                prev = Some(c.t);
            }
            m.ttft = ttft_us(end.outcome, r.stream, r.intended, first);
            if let Some(f) = first {
                m.ttft_dispatch = Some(f.saturating_sub(r.dispatch));
                if let (Some(l), true) = (prev, m.tokens > 1) {
                    m.tpot = Some(l.saturating_sub(f) / (m.tokens - 1));
                }
            }
        }
        let us = |d: std::time::Duration| d.as_micros() as u64;
        m.slo_met = m.ttft.is_none_or(|t| t <= us(slo.ttft_p95.0))
            && m.tpot.is_none_or(|t| t <= us(slo.itl_p95.0))
            && m.e2e.is_some_and(|t| t <= us(slo.e2e_p95.0));
        m
    }
}
