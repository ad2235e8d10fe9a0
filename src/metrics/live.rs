//! The live figures of a phase, for the progress line: the phase table's own
//! definitions ([`ttft_us`], [`Tally`], the same histogram and percentile), fed by
//! the engine as requests end instead of by the trace, so what the line says while
//! the run goes is what the table says after it (for the requests ended so far). A
//! request counts in the phase of its intended send time, as in the table.

use hdrhistogram::Histogram;

use super::hist::{hist, pcts, rec};
use super::request::{Tally, ttft_us};
use crate::trace::Outcome;

/// One phase's figures so far.
pub struct LivePhase {
    /// Requests offered in the phase (probes excluded, as in the table).
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Requests that ended, whatever their end.
    pub ended: u64,
    ttft: Histogram<u64>,
}

impl Default for LivePhase {
    fn default() -> Self {
        LivePhase {
            requests: 0,
            completed: 0,
            failed: 0,
            rejected: 0,
            ended: 0,
            ttft: hist(),
        }
    }
}

impl LivePhase {
    /// A request of the phase was offered.
    pub fn offered(&mut self) {
        self.requests += 1;
    }

    /// A request of the phase ended (`stream`: sent as a streaming request; times in
    /// trace µs).
    pub fn ended(&mut self, o: Outcome, stream: bool, intended: u64, first_delta: Option<u64>) {
        self.ended += 1;
        match Tally::of(o) {
            Tally::Completed => self.completed += 1,
            Tally::Rejected => self.rejected += 1,
            Tally::Failed => self.failed += 1,
            Tally::Cancelled | Tally::Abandoned | Tally::Interrupted | Tally::Local => {}
        }
        if let Some(t) = ttft_us(o, stream, intended, first_delta) {
            rec(&mut self.ttft, t);
        }
    }

    /// p95 TTFT (ms) of the streamed requests that completed, as the table computes it.
    pub fn ttft_p95_ms(&self) -> Option<f64> {
        (!self.ttft.is_empty()).then(|| pcts(&self.ttft).p95)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::metrics::{Measured, PhaseAcc, PhaseStats};
    use crate::scenario::PhaseKind;
    use crate::trace::record::{ChunkRec, EndRec, RequestRecord};
    use crate::wire::kinds::ChunkKind;

    /// A finished request: intended at `at` ms, first delta `ttft` ms later, ended.
    fn record(i: u64, o: Outcome, stream: bool, ttft: u64, e2e: u64) -> RequestRecord {
        let at = i * 100_000;
        RequestRecord {
            id: format!("r{i}"),
            phase: "fault".into(),
            intended: at,
            dispatch: at + 50,
            stream,
            chunks: vec![ChunkRec {
                t: at + ttft * 1000,
                n: 0,
                kind: ChunkKind::Content,
                text: Some("x".into()),
                cid: Some(Arc::from("c")),
                finish: None,
                raw: None,
            }],
            end: Some(EndRec {
                t: at + e2e * 1000,
                outcome: o,
                detail: None,
                tokens: 1,
                done: true,
                finish: None,
                counted: Some(1),
                usage: None,
                error: None,
                tool_calls: Vec::new(),
                json_valid: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_live_figures_are_the_phase_tables() {
        // Streamed answers in 40–80 ms; non-streamed best-effort answers whose whole
        // body (their "first delta") takes 2.7 s; cut streams and rejections.
        let slo: crate::scenario::Slo = serde_json::from_value(
            serde_json::json!({"ttft_p95": "1s", "itl_p95": "50ms", "e2e_p95": "10s"}),
        )
        .expect("slo");
        let mut recs = Vec::new();
        for i in 0..60u64 {
            recs.push(record(i, Outcome::Completed, true, 40 + i % 40, 400));
        }
        for i in 60..75u64 {
            recs.push(record(i, Outcome::Completed, false, 2700, 2700));
        }
        for i in 75..80u64 {
            recs.push(record(i, Outcome::ExplicitError, true, 30, 90));
        }
        for i in 80..84u64 {
            recs.push(record(i, Outcome::Rejected, true, 5000, 5000));
        }
        // Ends of haq's own (its host ran out, its interrupt): not the target's failures.
        for i in 84..87u64 {
            recs.push(record(i, Outcome::Local, true, 10, 10));
        }
        recs.push(record(87, Outcome::Interrupted, true, 10, 10));
        let mut table = PhaseAcc::new("fault", PhaseKind::Fault);
        let mut live = LivePhase::default();
        for r in &recs {
            table.add_measured(r, &Measured::of(r, &slo));
            live.offered();
            let end = r.end.as_ref().expect("end");
            live.ended(end.outcome, r.stream, r.intended, r.first_delta_t());
        }
        let t = PhaseStats::from(&table);
        assert_eq!(live.ttft_p95_ms(), Some(t.ttft_ms.p95));
        assert!(
            t.ttft_ms.p95 < 100.0,
            "non-streamed answers are not TTFT: {t:?}"
        );
        assert_eq!(
            (live.requests, live.completed, live.failed, live.rejected),
            (t.requests, t.completed, t.failed, t.rejected)
        );
        assert_eq!((t.completed, t.failed, t.rejected), (75, 5, 4));
        assert_eq!((table.local, table.interrupted), (3, 1));
    }
}
