use std::time::{Duration, Instant};

use crate::wire::mono_ns;

/// The run's time base.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
    base_mono_ns: u64,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            base: Instant::now(),
            base_mono_ns: mono_ns(),
        }
    }

    /// Microseconds since the clock started.
    #[inline]
    pub fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    pub fn us_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_micros() as u64
    }

    pub fn instant_at(&self, us: u64) -> Instant {
        self.base + Duration::from_micros(us)
    }

    pub fn base_mono_ns(&self) -> u64 {
        self.base_mono_ns
    }

    /// Converts a CLOCK_MONOTONIC stamp from another process to trace time.
    pub fn us_from_mono_ns(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.base_mono_ns) / 1000
    }
}
