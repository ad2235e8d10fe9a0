//! haq's own sends, measured per phase. A send's lateness (schedule slip) is
//! dispatch − max(intended, admitted): how late haq itself sent the request. Per phase:
//! the lateness percentiles and the latest send, the sends later than
//! `client.max_late`, the requests due inside the phase's window against those haq
//! sent inside it (by dispatch time), and the phase's p95 TTFT and E2E with each
//! request's lateness taken out. Also the trace writer's own record: an emit that
//! waited for room in its bounded buffer stalled the client (issue #4 item 5).
//! `check::validity` judges from these whether haq's lateness could have changed a
//! verdict.

use hdrhistogram::Histogram;

use super::hist::{hist, rec};
use super::request::Measured;
use crate::plan::Plan;
use crate::trace::record::RequestRecord;
use crate::trace::{Edge, Event};

/// One phase's sends as haq made them (times in µs).
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSends {
    pub name: String,
    /// Requests of the phase (by their intended time) that haq sent; probes apart.
    pub sends: u64,
    pub late_p50_us: u64,
    pub late_p99_us: u64,
    pub late_max_us: u64,
    /// The latest send of the phase.
    pub latest: Option<String>,
    /// Sends later than `client.max_late`.
    pub over_max_late: u64,
    /// Requests due inside the phase's window (by `max(intended, admitted)`) and sent
    /// inside it (by dispatch time); `None` when the trace has no phase edge to place
    /// the windows by.
    pub due: Option<u64>,
    pub sent: Option<u64>,
    /// p95 TTFT and E2E with each request's lateness taken out (µs), as the Latency
    /// verdict's p95s are taken: completed requests, one histogram path.
    pub ttft_p95_on_time_us: Option<u64>,
    pub e2e_p95_on_time_us: Option<u64>,
}

/// Every phase's sends, and the run's.
#[derive(Debug, Clone, PartialEq)]
pub struct Sends {
    pub phases: Vec<PhaseSends>,
    /// Every send of the run (probes apart).
    pub requests: u64,
    pub late_p50_us: u64,
    pub late_p99_us: u64,
    pub late_max_us: u64,
    /// Sends later than `client.max_late`.
    pub over_max_late: u64,
    /// Sends dispatched after the last phase's window.
    pub after_load: u64,
    /// Emits that waited for room in the trace writer's bounded buffer; the time they
    /// waited in all and the longest wait (µs).
    pub trace_waits: u64,
    pub trace_waited_us: u64,
    pub trace_worst_us: u64,
}

struct PhaseAcc {
    name: String,
    /// Where the phase's window ends, from the start of load (µs); phases are back
    /// to back.
    to: u64,
    late: Histogram<u64>,
    latest: Option<(u64, String)>,
    over: u64,
    due: u64,
    sent: u64,
    ttft: Histogram<u64>,
    e2e: Histogram<u64>,
}

pub struct SlipAcc {
    all: Histogram<u64>,
    phases: Vec<PhaseAcc>,
    /// Trace time of the start of load: the first phase edge.
    start: Option<u64>,
    max_late_us: u64,
    /// The latest send's lateness, exact.
    max_us: u64,
    over: u64,
    after_load: u64,
    trace_waits: u64,
    trace_waited_us: u64,
    trace_worst_us: u64,
}

fn quantile(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

impl SlipAcc {
    pub fn new(plan: &Plan) -> Self {
        let us = |d: std::time::Duration| d.as_micros() as u64;
        SlipAcc {
            all: hist(),
            phases: plan
                .phases
                .iter()
                .map(|p| PhaseAcc {
                    name: p.name.clone(),
                    to: us(p.end()),
                    late: hist(),
                    latest: None,
                    over: 0,
                    due: 0,
                    sent: 0,
                    ttft: hist(),
                    e2e: hist(),
                })
                .collect(),
            start: None,
            max_late_us: us(plan.scenario.client.stall_bound(&plan.scenario.slo)),
            max_us: 0,
            over: 0,
            after_load: 0,
            trace_waits: 0,
            trace_waited_us: 0,
            trace_worst_us: 0,
        }
    }

    /// Reads the start of load (the first phase edge) and the trace writer's own
    /// record (`trace_stats`).
    pub fn observe(&mut self, ev: &Event) {
        match ev {
            Event::Phase {
                t,
                edge: Edge::Start,
                ..
            } => {
                self.start.get_or_insert(*t);
            }
            Event::TraceStats {
                waits,
                waited_us,
                worst_us,
                ..
            } => {
                self.trace_waits += waits;
                self.trace_waited_us += waited_us;
                self.trace_worst_us = self.trace_worst_us.max(*worst_us);
            }
            _ => {}
        }
    }

    /// The phase whose window holds trace time `t` (before the first: the first).
    fn window(&self, start: u64, t: u64) -> Option<usize> {
        let at = t.saturating_sub(start);
        self.phases.iter().position(|p| at < p.to)
    }

    /// Folds one sent request (probes are left out by the caller).
    pub fn add(&mut self, r: &RequestRecord, m: &Measured) {
        let late = m.slip;
        rec(&mut self.all, late);
        self.max_us = self.max_us.max(late);
        let over = late > self.max_late_us;
        if over {
            self.over += 1;
        }
        if let Some(start) = self.start {
            let due = r.intended.max(r.admitted.unwrap_or(0));
            if let Some(i) = self.window(start, due) {
                self.phases[i].due += 1;
            }
            match self.window(start, r.dispatch) {
                Some(i) => self.phases[i].sent += 1,
                None => self.after_load += 1,
            }
        }
        let Some(p) = self.phases.iter_mut().find(|p| p.name == r.phase) else {
            return;
        };
        rec(&mut p.late, late);
        if over {
            p.over += 1;
        }
        if p.latest.as_ref().is_none_or(|(l, _)| late > *l) {
            p.latest = Some((late, r.id.clone()));
        }
        if let Some(t) = m.ttft {
            rec(&mut p.ttft, t.saturating_sub(late));
        }
        if let Some(t) = m.e2e {
            rec(&mut p.e2e, t.saturating_sub(late));
        }
    }

    pub fn finish(&self) -> Sends {
        let placed = self.start.is_some();
        Sends {
            phases: self
                .phases
                .iter()
                .map(|p| PhaseSends {
                    name: p.name.clone(),
                    sends: p.late.len(),
                    late_p50_us: quantile(&p.late, 0.5),
                    late_p99_us: quantile(&p.late, 0.99),
                    late_max_us: p.latest.as_ref().map_or(0, |(l, _)| *l),
                    latest: p.latest.as_ref().map(|(_, id)| id.clone()),
                    over_max_late: p.over,
                    due: placed.then_some(p.due),
                    sent: placed.then_some(p.sent),
                    ttft_p95_on_time_us: (!p.ttft.is_empty()).then(|| quantile(&p.ttft, 0.95)),
                    e2e_p95_on_time_us: (!p.e2e.is_empty()).then(|| quantile(&p.e2e, 0.95)),
                })
                .collect(),
            requests: self.all.len(),
            late_p50_us: quantile(&self.all, 0.5),
            late_p99_us: quantile(&self.all, 0.99),
            late_max_us: self.max_us,
            over_max_late: self.over,
            after_load: self.after_load,
            trace_waits: self.trace_waits,
            trace_waited_us: self.trace_waited_us,
            trace_worst_us: self.trace_worst_us,
        }
    }
}
