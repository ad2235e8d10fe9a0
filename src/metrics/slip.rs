//! The load client's own health. haq measures from the schedule: if it sent requests
//! late, it was itself the bottleneck and its numbers are not evidence. A run whose
//! schedule slip p99 exceeds `client.max_slip_p99` (5 ms) or that sent any request more
//! than `client.max_late` (50 ms) late is INVALID. So is a run whose trace writer could
//! not keep up: an emit that waited for room in the writer's bounded buffer stalled the
//! client's read loop, so arrival stamps after it may be late (issue #4 item 5).

use hdrhistogram::Histogram;
use serde::Serialize;

use super::hist::{hist, rec};
use crate::scenario::ClientCfg;
use crate::trace::Event;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClientHealth {
    /// Requests measured.
    pub requests: u64,
    /// Schedule slip: dispatch − max(intended, admitted), ms.
    pub slip_p50_ms: f64,
    pub slip_p99_ms: f64,
    pub slip_max_ms: f64,
    /// Requests sent later than `max_late`.
    pub late: u64,
    pub max_slip_p99_ms: f64,
    pub max_late_ms: f64,
    /// Emits that waited for room in the trace writer's bounded buffer, and the
    /// longest wait (ms). Both zero in a valid run.
    pub trace_waits: u64,
    pub trace_wait_max_ms: f64,
    /// False when the client fell behind its own schedule: nothing measured is evidence.
    pub valid: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalid_reasons: Vec<String>,
}

pub struct SlipAcc {
    slip: Histogram<u64>,
    late: u64,
    max_late_us: u64,
    trace_waits: u64,
    trace_worst_us: u64,
    trace_waited_us: u64,
}

impl SlipAcc {
    pub fn new(c: &ClientCfg) -> Self {
        SlipAcc {
            slip: hist(),
            late: 0,
            max_late_us: c.max_late.0.as_micros() as u64,
            trace_waits: 0,
            trace_worst_us: 0,
            trace_waited_us: 0,
        }
    }

    /// Reads the trace writer's own record (`trace_stats`).
    pub fn observe(&mut self, ev: &Event) {
        if let Event::TraceStats {
            waits,
            waited_us,
            worst_us,
            ..
        } = ev
        {
            self.trace_waits += waits;
            self.trace_waited_us += waited_us;
            self.trace_worst_us = self.trace_worst_us.max(*worst_us);
        }
    }

    pub fn add(&mut self, slip_us: u64) {
        rec(&mut self.slip, slip_us.max(1));
        if slip_us > self.max_late_us {
            self.late += 1;
        }
    }

    pub fn finish(&self, c: &ClientCfg) -> ClientHealth {
        let ms = |v: u64| (v as f64).round() / 1000.0;
        let h = &self.slip;
        let p99 = if h.is_empty() {
            0
        } else {
            h.value_at_quantile(0.99)
        };
        let (max_p99, max_late) = (
            c.max_slip_p99.as_secs_f64() * 1e3,
            c.max_late.as_secs_f64() * 1e3,
        );
        let mut invalid_reasons = Vec::new();
        if ms(p99) > max_p99 {
            invalid_reasons.push(format!(
                "schedule slip p99 {:.2} ms > {max_p99} ms: haq could not keep its own schedule",
                ms(p99)
            ));
        }
        if self.late > 0 {
            invalid_reasons.push(format!(
                "{} request(s) sent more than {max_late} ms late (worst {:.1} ms)",
                self.late,
                ms(h.max())
            ));
        }
        if self.trace_waits > 0 {
            invalid_reasons.push(format!(
                "the trace writer fell behind: {} event(s) waited for room in its buffer ({:.1} ms in all, worst {:.1} ms), stalling the client's reads",
                self.trace_waits,
                ms(self.trace_waited_us),
                ms(self.trace_worst_us)
            ));
        }
        ClientHealth {
            requests: h.len(),
            slip_p50_ms: if h.is_empty() {
                0.0
            } else {
                ms(h.value_at_quantile(0.5))
            },
            slip_p99_ms: ms(p99),
            slip_max_ms: if h.is_empty() { 0.0 } else { ms(h.max()) },
            late: self.late,
            max_slip_p99_ms: max_p99,
            max_late_ms: max_late,
            trace_waits: self.trace_waits,
            trace_wait_max_ms: ms(self.trace_worst_us),
            valid: invalid_reasons.is_empty(),
            invalid_reasons,
        }
    }
}
