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

    /// The clock another process of this host started at CLOCK_MONOTONIC `base_mono_ns`
    /// ([`Clock::base_mono_ns`]): an agent of `haq run --agents` stamps its events in
    /// the coordinator's trace time with it. `None` when that instant is in this
    /// process's future (another host's clock).
    pub fn resumed(base_mono_ns: u64) -> Option<Self> {
        let now_ns = mono_ns();
        let since = Duration::from_nanos(now_ns.checked_sub(base_mono_ns)?);
        Some(Clock {
            base: Instant::now().checked_sub(since)?,
            base_mono_ns,
        })
    }

    /// The clock of a process on another host whose trace time was `us` at this
    /// process's instant `at` (a clock exchange over the network: `at` is the middle
    /// of its round trip). `None` when that puts the clock's start before this host's
    /// monotonic clock began.
    pub fn synced(us: u64, at: Instant) -> Option<Self> {
        let base = at.checked_sub(Duration::from_micros(us))?;
        let since = Instant::now().saturating_duration_since(base);
        Some(Clock {
            base,
            base_mono_ns: mono_ns().checked_sub(since.as_nanos() as u64)?,
        })
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
