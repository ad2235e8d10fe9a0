//! Per-second metrics for plots and interval logs.
//!
//! Counters are keyed by when things happened (offered by intended time, dispatched,
//! ended, tokens by arrival). Latencies are keyed by the second a request was
//! *dispatched* and measured from its intended time, so a plot shows what the requests
//! sent during a fault went through. A second's histograms stay open only while a
//! request dispatched in it (or before) is in flight; then they are reduced to
//! percentiles and handed to the interval-log sink, so memory is bounded by the
//! longest request, not by the length of the run.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::hist::{INF_US, Ms, interval_hist, rec};
use super::request::Measured;
use crate::trace::record::RequestRecord;
use crate::trace::{Edge, Event, Outcome};

/// Receives each closed second's histogram: (second from the start of load, tag, µs).
pub type IntervalSink<'a> = &'a mut dyn FnMut(u64, &str, &Histogram<u64>);

/// Tags of the interval log, in the order written.
pub const TAGS: [&str; 5] = ["ttft", "ttft_dispatch", "itl", "e2e", "ttft_error_adjusted"];

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SecondStats {
    /// Second from the start of load.
    pub t: u64,
    /// Requests whose intended time falls in this second.
    pub offered: u64,
    pub dispatched: u64,
    /// Requests that ended in this second, by outcome class.
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    /// In flight at the end of the second.
    pub in_flight: u64,
    /// Output deltas that arrived in this second.
    pub output_deltas: u64,
    /// Of the requests dispatched in this second: completed inside the SLO targets.
    pub slo_met: u64,
    /// Latencies (ms, from intended time) of requests dispatched in this second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p95: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p95: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_p95: Option<f64>,
    /// Error-adjusted p95 TTFT (`"inf"` when more than 5% failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_error_adjusted_p95: Option<Ms>,
}

struct Window {
    h: [Histogram<u64>; 5],
}

impl Window {
    fn new() -> Self {
        Window {
            h: std::array::from_fn(|_| interval_hist()),
        }
    }
}

#[derive(Default)]
pub struct SeriesAcc {
    load_start: Option<u64>,
    now: u64,
    seconds: Vec<SecondStats>,
    ended: Vec<u64>,
    windows: BTreeMap<u64, Window>,
    /// Requests in flight by dispatch second.
    open: BTreeMap<u64, u64>,
    /// Seconds below this are closed.
    closed_below: u64,
    /// Windows of closed seconds, emptied, for the next seconds: a second's five
    /// histograms are ~130 KiB, and a long run would otherwise allocate (and fault in)
    /// fresh ones every second.
    spare: Vec<Window>,
}

/// Most emptied windows kept for reuse.
const SPARE_WINDOWS: usize = 8;

fn p(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| (h.value_at_quantile(q) as f64).round() / 1000.0)
}

impl SeriesAcc {
    fn sec(&self, t: u64) -> u64 {
        t.saturating_sub(self.load_start.unwrap_or(0)) / 1_000_000
    }

    fn at(&mut self, s: u64) -> &mut SecondStats {
        let i = s as usize;
        if self.seconds.len() <= i {
            let n = self.seconds.len() as u64;
            self.seconds.extend((n..=s).map(|t| SecondStats {
                t,
                ..Default::default()
            }));
            self.ended.resize(i + 1, 0);
        }
        &mut self.seconds[i]
    }

    /// Sees every trace event in file order (before it is folded).
    pub fn observe(&mut self, ev: &Event, sink: &mut Option<IntervalSink>) {
        match ev {
            Event::Phase {
                t,
                edge: Edge::Start,
                ..
            } if self.load_start.is_none() => self.load_start = Some(*t),
            Event::Request { t, intended, .. } => {
                let (s, i) = (self.sec(*t), self.sec(*intended));
                self.at(i).offered += 1;
                self.at(s).dispatched += 1;
                *self.open.entry(s).or_default() += 1;
            }
            _ => {}
        }
        self.tick(ev.t(), sink);
    }

    /// Sees the time of an event that counts for nothing else here (a chunk): the
    /// seconds before it close.
    pub fn tick(&mut self, t: u64, sink: &mut Option<IntervalSink>) {
        let now = self.sec(t);
        if now > self.now {
            self.now = now;
            self.close(now.saturating_sub(1), sink);
        }
    }

    /// Folds a finished request.
    pub fn add(&mut self, r: &RequestRecord, m: &Measured) {
        let s = self.sec(r.dispatch);
        if let Some(n) = self.open.get_mut(&s) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&s);
            }
        }
        for c in r.deltas() {
            let cs = self.sec(c.t);
            self.at(cs).output_deltas += 1;
        }
        if let Some(end) = &r.end {
            let es = self.sec(end.t);
            let e = self.at(es);
            match end.outcome {
                Outcome::Completed => e.completed += 1,
                Outcome::Rejected => e.rejected += 1,
                o if o.is_not_the_targets() => {}
                _ => e.failed += 1,
            }
            self.ended[es as usize] += 1;
        }
        if m.slo_met {
            self.at(s).slo_met += 1;
        }
        if s < self.closed_below {
            return; // dispatched in a second already closed (only when the trace is out of order)
        }
        let spare = &mut self.spare;
        let w = self
            .windows
            .entry(s)
            .or_insert_with(|| spare.pop().unwrap_or_else(Window::new));
        if let Some(v) = m.ttft {
            rec(&mut w.h[0], v);
            rec(&mut w.h[4], v);
        }
        if let Some(v) = m.ttft_dispatch {
            rec(&mut w.h[1], v);
        }
        for g in &m.itl {
            rec(&mut w.h[2], *g);
        }
        if let Some(v) = m.e2e {
            rec(&mut w.h[3], v);
        }
        if m.failed && r.stream {
            rec(&mut w.h[4], INF_US);
        }
    }

    /// Closes every second before `upto` that no in-flight request was dispatched in.
    fn close(&mut self, upto: u64, sink: &mut Option<IntervalSink>) {
        let limit = self
            .open
            .keys()
            .next()
            .copied()
            .unwrap_or(u64::MAX)
            .min(upto);
        while self.closed_below < limit {
            let s = self.closed_below;
            self.closed_below += 1;
            let Some(w) = self.windows.remove(&s) else {
                continue;
            };
            if let Some(f) = sink.as_mut() {
                for (tag, h) in TAGS.iter().zip(&w.h) {
                    if !h.is_empty() {
                        f(s, tag, h);
                    }
                }
            }
            let e = self.at(s);
            e.ttft_p50 = p(&w.h[0], 0.5);
            e.ttft_p95 = p(&w.h[0], 0.95);
            e.itl_p50 = p(&w.h[2], 0.5);
            e.itl_p95 = p(&w.h[2], 0.95);
            e.e2e_p95 = p(&w.h[3], 0.95);
            e.ttft_error_adjusted_p95 =
                (!w.h[4].is_empty()).then(|| Ms::from_us(w.h[4].value_at_quantile(0.95)));
            if self.spare.len() < SPARE_WINDOWS {
                let mut w = w;
                w.h.iter_mut().for_each(Histogram::reset);
                self.spare.push(w);
            }
        }
    }

    /// Closes everything and returns the series.
    pub fn finish(mut self, sink: &mut Option<IntervalSink>) -> Vec<SecondStats> {
        self.open.clear();
        let last = self
            .windows
            .keys()
            .next_back()
            .map(|s| s + 1)
            .unwrap_or(0)
            .max(self.seconds.len() as u64);
        self.close(last, sink);
        let mut in_flight: u64 = 0;
        for (e, ended) in self.seconds.iter_mut().zip(&self.ended) {
            in_flight = (in_flight + e.dispatched).saturating_sub(*ended);
            e.in_flight = in_flight;
        }
        self.seconds
    }
}
