//! Per-phase metrics (a request belongs to the phase its intended time falls in):
//! latency histograms, outcome counts, offered vs achieved rate, goodput and SLO
//! attainment (SPEC Q2, Q4, Q13).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::hist::{EaPcts, INF_US, Pcts, ea_pcts, hist, pcts, rec, rec_n};
use super::request::{Measured, Tally};
use crate::scenario::PhaseKind;
use crate::trace::Outcome;
use crate::trace::record::RequestRecord;

pub struct PhaseAcc {
    pub name: String,
    pub kind: PhaseKind,
    /// Phase length in seconds (rates are per second of phase).
    pub duration_s: f64,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    pub cancelled: u64,
    /// The client left on purpose (workload abandonment): neither a success nor a
    /// failure of the target (counted in `outcomes` as `abandoned`).
    pub abandoned: u64,
    /// Stopped by haq's interrupt (`interrupted`): neither served nor failed.
    pub interrupted: u64,
    /// haq's own host failed it (`local`): neither a success nor a failure of the
    /// target; the run is INVALID.
    pub local: u64,
    pub tokens: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub slo_met: u64,
    pub token_mismatch: u64,
    pub not_streamed: u64,
    pub tool_calls: u64,
    pub tool_args_invalid: u64,
    pub json_invalid: u64,
    /// µs, from the intended send time (coordinated-omission free).
    pub ttft: Histogram<u64>,
    /// µs, from the actual dispatch.
    pub ttft_dispatch: Histogram<u64>,
    pub ttfb: Histogram<u64>,
    pub itl: Histogram<u64>,
    pub itl_token: Histogram<u64>,
    pub tpot: Histogram<u64>,
    pub e2e: Histogram<u64>,
    pub e2e_dispatch: Histogram<u64>,
    pub queue: Histogram<u64>,
    /// Error-adjusted: failed requests at +inf.
    pub ea_ttft: Histogram<u64>,
    pub ea_e2e: Histogram<u64>,
}

impl PhaseAcc {
    pub fn new(name: &str, kind: PhaseKind) -> Self {
        PhaseAcc {
            name: name.into(),
            kind,
            duration_s: 0.0,
            requests: 0,
            completed: 0,
            failed: 0,
            rejected: 0,
            cancelled: 0,
            abandoned: 0,
            interrupted: 0,
            local: 0,
            tokens: 0,
            outcomes: BTreeMap::new(),
            slo_met: 0,
            token_mismatch: 0,
            not_streamed: 0,
            tool_calls: 0,
            tool_args_invalid: 0,
            json_invalid: 0,
            ttft: hist(),
            ttft_dispatch: hist(),
            ttfb: hist(),
            itl: hist(),
            itl_token: hist(),
            tpot: hist(),
            e2e: hist(),
            e2e_dispatch: hist(),
            queue: hist(),
            ea_ttft: hist(),
            ea_e2e: hist(),
        }
    }

    pub fn with_duration(mut self, d: std::time::Duration) -> Self {
        self.duration_s = d.as_secs_f64();
        self
    }

    /// Folds one finished request (measured against `m`).
    pub fn add_measured(&mut self, r: &RequestRecord, m: &Measured) {
        self.requests += 1;
        if !r.stream {
            self.not_streamed += 1;
        }
        let Some(end) = &r.end else { return };
        *self.outcomes.entry(end.outcome).or_default() += 1;
        match Tally::of(end.outcome) {
            Tally::Completed => self.completed += 1,
            Tally::Rejected => self.rejected += 1,
            Tally::Cancelled => self.cancelled += 1,
            Tally::Abandoned => self.abandoned += 1,
            Tally::Interrupted => self.interrupted += 1,
            Tally::Local => self.local += 1,
            Tally::Failed => self.failed += 1,
        }
        self.tool_calls += end.tool_calls.len() as u64;
        self.tool_args_invalid +=
            end.tool_calls.iter().filter(|t| !t.arguments_valid).count() as u64;
        if end.json_valid == Some(false) {
            self.json_invalid += 1;
        }
        if m.token_mismatch {
            self.token_mismatch += 1;
        }
        if let Some(q) = m.queue {
            rec(&mut self.queue, q);
        }
        if m.failed {
            if r.stream {
                rec(&mut self.ea_ttft, INF_US);
            }
            rec(&mut self.ea_e2e, INF_US);
        }
        if !m.ok {
            return;
        }
        self.tokens += m.tokens;
        if m.slo_met {
            self.slo_met += 1;
        }
        if let Some(v) = m.ttfb {
            rec(&mut self.ttfb, v);
        }
        if let (Some(a), Some(b)) = (m.ttft, m.ttft_dispatch) {
            rec(&mut self.ttft, a);
            rec(&mut self.ttft_dispatch, b);
            rec(&mut self.ea_ttft, a);
        }
        let per = m.tokens_per_delta.max(1.0);
        let weight = per.round().max(1.0) as u64;
        for g in &m.itl {
            rec(&mut self.itl, *g);
            rec_n(&mut self.itl_token, (*g as f64 / per) as u64, weight);
        }
        if let Some(v) = m.tpot {
            rec(&mut self.tpot, v);
        }
        if let (Some(a), Some(b)) = (m.e2e, m.e2e_dispatch) {
            rec(&mut self.e2e, a);
            rec(&mut self.e2e_dispatch, b);
            rec(&mut self.ea_e2e, a);
        }
    }
}

/// One phase's numbers as reported. Latencies in ms.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseStats {
    pub name: String,
    pub kind: PhaseKind,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    pub cancelled: u64,
    pub output_tokens: u64,
    pub ttft_ms: Pcts,
    pub ttft_from_dispatch_ms: Pcts,
    pub itl_ms: Pcts,
    pub e2e_ms: Pcts,
    /// Count of each stream-end class.
    pub outcomes: BTreeMap<Outcome, u64>,
    pub duration_s: f64,
    /// Requests scheduled in the phase per second (offered load).
    pub offered_rps: f64,
    /// Completed requests per second.
    pub achieved_rps: f64,
    /// Requests that completed inside every per-request SLO target, per second.
    pub goodput_rps: f64,
    /// Share of requests (not counting haq-cancelled ones, nor those whose client left
    /// on purpose) inside the SLO targets.
    pub slo_attainment: f64,
    pub output_tokens_per_s: f64,
    pub ttfb_ms: Pcts,
    pub itl_per_token_ms: Pcts,
    pub tpot_ms: Pcts,
    pub e2e_from_dispatch_ms: Pcts,
    /// Server-reported queue time, where reported (count 0 otherwise).
    pub queue_ms: Pcts,
    /// Error-adjusted (failed requests count as +inf).
    pub ttft_error_adjusted_ms: EaPcts,
    pub e2e_error_adjusted_ms: EaPcts,
    /// Completed requests whose usage.completion_tokens differs from the counted deltas.
    pub token_count_mismatch: u64,
    pub not_streamed: u64,
    pub tool_calls: u64,
    pub tool_calls_invalid_arguments: u64,
    pub structured_output_invalid: u64,
}

impl From<&PhaseAcc> for PhaseStats {
    fn from(a: &PhaseAcc) -> Self {
        let per_s = |n: u64| {
            if a.duration_s > 0.0 {
                (n as f64 / a.duration_s * 1000.0).round() / 1000.0
            } else {
                0.0
            }
        };
        let judged = a
            .requests
            .saturating_sub(a.cancelled + a.abandoned + a.interrupted + a.local);
        PhaseStats {
            name: a.name.clone(),
            kind: a.kind,
            requests: a.requests,
            completed: a.completed,
            failed: a.failed,
            rejected: a.rejected,
            cancelled: a.cancelled,
            output_tokens: a.tokens,
            ttft_ms: pcts(&a.ttft),
            ttft_from_dispatch_ms: pcts(&a.ttft_dispatch),
            itl_ms: pcts(&a.itl),
            e2e_ms: pcts(&a.e2e),
            outcomes: a.outcomes.clone(),
            duration_s: a.duration_s,
            offered_rps: per_s(a.requests),
            achieved_rps: per_s(a.completed),
            goodput_rps: per_s(a.slo_met),
            slo_attainment: if judged > 0 {
                (a.slo_met as f64 / judged as f64 * 10_000.0).round() / 10_000.0
            } else {
                0.0
            },
            output_tokens_per_s: per_s(a.tokens),
            ttfb_ms: pcts(&a.ttfb),
            itl_per_token_ms: pcts(&a.itl_token),
            tpot_ms: pcts(&a.tpot),
            e2e_from_dispatch_ms: pcts(&a.e2e_dispatch),
            queue_ms: pcts(&a.queue),
            ttft_error_adjusted_ms: ea_pcts(&a.ea_ttft),
            e2e_error_adjusted_ms: ea_pcts(&a.ea_e2e),
            token_count_mismatch: a.token_mismatch,
            not_streamed: a.not_streamed,
            tool_calls: a.tool_calls,
            tool_calls_invalid_arguments: a.tool_args_invalid,
            structured_output_invalid: a.json_invalid,
        }
    }
}
