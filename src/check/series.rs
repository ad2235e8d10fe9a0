//! Time series over the run, in bins of one second (wider for long runs, so a run
//! never has more than [`MAX_BINS`] of them): TTFT and ITL p50/p95, throughput, errors,
//! rejections and requests in flight. Plotted in report.html and used to find when the
//! healthy latency envelope came back (Q11 full recovery).

use hdrhistogram::Histogram;
use serde::Serialize;

use super::history::RequestRecord;
use crate::scenario::Plan;
use crate::trace::Outcome;

/// Bins per run, at most (bins widen beyond this).
pub const MAX_BINS: u64 = 600;
/// A bin with fewer samples has no percentile (not evidence).
pub const MIN_BIN_SAMPLES: u64 = 3;
/// Latencies above this are recorded at this value (the histogram's top).
const TOP_US: u64 = 600_000_000;
/// No bin beyond this index is kept (a runaway trace cannot exhaust memory).
const BIN_LIMIT: usize = 20_000;

/// One bin, as reported. Times in seconds since the start of load; latencies in ms.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bin {
    pub t: f64,
    /// Requests dispatched in the bin.
    pub sent: u64,
    /// Requests that ended in the bin, by outcome.
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Completed inside the SLO's TTFT and E2E bounds.
    pub good: u64,
    /// Output deltas that arrived in the bin.
    pub tokens: u64,
    /// Average number of requests in flight.
    pub in_flight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p95: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p95: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Series {
    /// Bin width, seconds.
    pub bin_s: f64,
    pub bins: Vec<Bin>,
}

impl Series {
    /// The earliest bin start `>= from_s` after which every bin up to `until_s` with
    /// enough samples has p95 TTFT and ITL inside the SLO (ms).
    pub fn envelope_restored(
        &self,
        from_s: f64,
        until_s: f64,
        ttft_ms: f64,
        itl_ms: f64,
    ) -> Option<f64> {
        let bins: Vec<&Bin> = self
            .bins
            .iter()
            .filter(|b| b.t + self.bin_s > from_s && b.t < until_s)
            .collect();
        let ok = |b: &Bin| {
            b.ttft_p95.is_none_or(|v| v <= ttft_ms) && b.itl_p95.is_none_or(|v| v <= itl_ms)
        };
        let mut start = None;
        for b in &bins {
            if ok(b) {
                start.get_or_insert(b.t.max(from_s));
            } else {
                start = None;
            }
        }
        // Restored only if some bin after it actually measured latency.
        let measured = bins
            .iter()
            .any(|b| start.is_some_and(|s| b.t >= s - self.bin_s) && b.ttft_p95.is_some());
        start.filter(|_| measured)
    }
}

struct BinAcc {
    sent: u64,
    completed: u64,
    failed: u64,
    rejected: u64,
    good: u64,
    tokens: u64,
    in_flight_us: u64,
    ttft: Histogram<u32>,
    itl: Histogram<u32>,
}

fn hist() -> Histogram<u32> {
    // Fixed, valid bounds: this cannot fail.
    Histogram::new_with_bounds(1, TOP_US, 2).unwrap_or_else(|_| Histogram::new(2).expect("hdr"))
}

impl BinAcc {
    fn new() -> Self {
        BinAcc {
            sent: 0,
            completed: 0,
            failed: 0,
            rejected: 0,
            good: 0,
            tokens: 0,
            in_flight_us: 0,
            ttft: hist(),
            itl: hist(),
        }
    }
}

pub struct SeriesAcc {
    base: Option<u64>,
    width: u64,
    bins: Vec<BinAcc>,
    slo_ttft: u64,
    slo_e2e: u64,
}

impl SeriesAcc {
    pub fn new(plan: &Plan) -> Self {
        let secs = plan.total.as_secs().div_ceil(MAX_BINS).max(1);
        let slo = &plan.scenario.slo;
        SeriesAcc {
            base: None,
            width: secs * 1_000_000,
            bins: Vec::new(),
            slo_ttft: slo.ttft_p95.0.as_micros() as u64,
            slo_e2e: slo.e2e_p95.0.as_micros() as u64,
        }
    }

    /// The start of load (the first phase start): bins count from here.
    pub fn start_at(&mut self, t: u64) {
        self.base.get_or_insert(t);
    }

    fn idx(&self, t: u64) -> usize {
        (t.saturating_sub(self.base.unwrap_or(0)) / self.width) as usize
    }

    fn bin(&mut self, t: u64) -> Option<&mut BinAcc> {
        let i = self.idx(t);
        if i >= BIN_LIMIT {
            return None;
        }
        while self.bins.len() <= i {
            self.bins.push(BinAcc::new());
        }
        self.bins.get_mut(i)
    }

    pub fn add(&mut self, r: &RequestRecord) {
        let Some(end) = &r.end else { return };
        if let Some(b) = self.bin(r.dispatch) {
            b.sent += 1;
        }
        if let Some(f) = r.first_delta_t()
            && let Some(b) = self.bin(r.intended)
        {
            let _ = b.ttft.record(f.saturating_sub(r.intended).clamp(1, TOP_US));
        }
        for c in r.deltas() {
            if let Some(b) = self.bin(c.t) {
                b.tokens += 1;
            }
        }
        for (t, gap) in r.itl_gaps() {
            if let Some(b) = self.bin(t) {
                let _ = b.itl.record(gap.clamp(1, TOP_US));
            }
        }
        let good = end.outcome == Outcome::Completed
            && r.first_delta_t()
                .is_some_and(|f| f.saturating_sub(r.intended) <= self.slo_ttft)
            && end.t.saturating_sub(r.intended) <= self.slo_e2e;
        if let Some(b) = self.bin(end.t) {
            match end.outcome {
                Outcome::Completed => b.completed += 1,
                Outcome::Rejected => b.rejected += 1,
                Outcome::Cancelled => {}
                _ => b.failed += 1,
            }
            if good {
                b.good += 1;
            }
        }
        // Time in flight, spread over the bins the request spans.
        let (mut t, stop) = (r.dispatch, end.t);
        while t < stop {
            let i = self.idx(t);
            let edge = (self.base.unwrap_or(0) + (i as u64 + 1) * self.width).min(stop);
            let Some(b) = self.bin(t) else { break };
            b.in_flight_us += edge - t;
            t = edge.max(t + 1);
        }
    }

    pub fn finish(self) -> Series {
        let w = self.width as f64;
        let q = |h: &Histogram<u32>, p: f64| {
            (h.len() >= MIN_BIN_SAMPLES).then(|| h.value_at_quantile(p) as f64 / 1000.0)
        };
        Series {
            bin_s: w / 1e6,
            bins: self
                .bins
                .iter()
                .enumerate()
                .map(|(i, b)| Bin {
                    t: i as f64 * w / 1e6,
                    sent: b.sent,
                    completed: b.completed,
                    failed: b.failed,
                    rejected: b.rejected,
                    good: b.good,
                    tokens: b.tokens,
                    in_flight: (b.in_flight_us as f64 / w * 100.0).round() / 100.0,
                    ttft_p50: q(&b.ttft, 0.5),
                    ttft_p95: q(&b.ttft, 0.95),
                    itl_p50: q(&b.itl, 0.5),
                    itl_p95: q(&b.itl, 0.95),
                })
                .collect(),
        }
    }
}
