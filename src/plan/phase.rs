//! One phase of the run as planned: when it starts, how long, at what rate.

use std::time::Duration;

use serde::Serialize;

use crate::scenario::PhaseKind;

#[derive(Debug, Clone, Serialize)]
pub struct PhasePlan {
    pub name: String,
    pub kind: PhaseKind,
    /// Offset from the start of load.
    pub start: Duration,
    pub duration: Duration,
    /// Offered rate in this phase (req/s).
    pub rate: f64,
}

impl PhasePlan {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}
