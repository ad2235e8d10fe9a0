//! What the engine exposes while it runs: gauges and counters (atomics, read by
//! `/metrics` and `/admin/state` without a round trip to the engine thread) and latency
//! histograms.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use hdrhistogram::Histogram;

/// A histogram of microseconds, shared between the engine thread and HTTP handlers.
pub struct Hist(Mutex<Histogram<u64>>);

impl Default for Hist {
    fn default() -> Self {
        Hist::new()
    }
}

impl Hist {
    pub fn new() -> Hist {
        // 1 µs .. 1 h, 3 significant digits.
        #[allow(clippy::expect_used)]
        let h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid");
        Hist(Mutex::new(h))
    }

    pub fn record_us(&self, us: u64) {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(us.clamp(1, 3_600_000_000));
    }

    /// Forgets everything recorded (benchmark warm-up).
    pub fn reset(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).reset();
    }

    /// A copy, for reading without holding the lock.
    pub fn snapshot(&self) -> Histogram<u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[derive(Default)]
pub struct Counters {
    pub running: AtomicU32,
    pub waiting: AtomicU32,
    pub kv_used_blocks: AtomicU32,
    pub kv_total_blocks: AtomicU32,
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    pub preemptions: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub steps: AtomicU64,
    /// Modelled time the engine could not make up after stalls longer than a step
    /// (µs): the machine, not the model, set the pace then.
    pub lost_us: AtomicU64,
    pub finished_length: AtomicU64,
    pub finished_stop: AtomicU64,
    pub finished_tool_calls: AtomicU64,
    pub finished_abort: AtomicU64,
}

#[derive(Default)]
pub struct Stats {
    pub c: Counters,
    /// Time to first token (engine side: arrival to first token computed).
    pub ttft: Hist,
    /// Time between consecutive tokens of one sequence.
    pub itl: Hist,
    /// Arrival to finish.
    pub e2e: Hist,
    /// Queue time: arrival to first scheduled.
    pub queue: Hist,
    /// How late each step's outputs were published against the model's deadline
    /// (the sim's own timing error).
    pub step_lateness: Hist,
}

impl Stats {
    pub fn set(a: &AtomicU32, v: usize) {
        a.store(v.min(u32::MAX as usize) as u32, Ordering::Relaxed);
    }

    pub fn kv_usage(&self) -> f64 {
        let total = self.c.kv_total_blocks.load(Ordering::Relaxed);
        if total == 0 {
            0.0
        } else {
            f64::from(self.c.kv_used_blocks.load(Ordering::Relaxed)) / f64::from(total)
        }
    }
}
