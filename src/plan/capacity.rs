//! The sustainable-rate search under the SLO (Q4): C_healthy and C_degraded measured
//! at the scenario's request mix, streaming profile and SLO — never derived as
//! (N−1)/N of healthy capacity, which is shown only as the hypothesis it is.
//!
//! `criteria.capacity.search` expands, at validation, into a ladder of constant-rate
//! phases before the scenario's own phases (healthy topology), a settle phase, and the
//! same ladder after them (the topology the scenario's faults left). Each step is
//! judged from its phase's measurements (`check::capacity::search`). The run stays one
//! open-loop schedule with one trace, so `haq check` re-judges the search like any
//! other run.

use crate::scenario::{CapacitySearch, Phase, PhaseKind};
use crate::wire::units::{Dur, Rate};

pub const HEALTHY: &str = "cap-healthy";
pub const DEGRADED: &str = "cap-degraded";
pub const SETTLE: &str = "cap-settle";

/// The ladder's rates: `steps` geometric rates from `from` to `to`, with the protected
/// load added, ascending, rounded to 0.01/s.
pub fn ladder(s: &CapacitySearch, protected: f64) -> Vec<f64> {
    let (a, b) = (s.from.0, s.to.0);
    let n = s.steps.max(2);
    let mut r: Vec<f64> = (0..n)
        .map(|i| a * (b / a).powf(i as f64 / (n - 1) as f64))
        .chain([protected])
        .map(|x| (x * 100.0).round() / 100.0)
        .collect();
    r.sort_by(f64::total_cmp);
    r.dedup();
    r
}

fn step_phase(prefix: &str, i: usize, rate: f64, d: Dur) -> Phase {
    Phase {
        name: format!("{prefix}-{}", i + 1),
        kind: Some(PhaseKind::Capacity),
        duration: d,
        rate: Some(Rate(rate)),
        load: None,
    }
}

/// The phases a run executes: the scenario's, wrapped in the search's ladders.
pub fn expand(phases: &[Phase], search: Option<&CapacitySearch>, protected: f64) -> Vec<Phase> {
    let Some(s) = search else {
        return phases.to_vec();
    };
    let rates = ladder(s, protected);
    let mut out: Vec<Phase> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| step_phase(HEALTHY, i, *r, s.step))
        .collect();
    if !s.settle.0.is_zero() {
        out.push(Phase {
            name: SETTLE.into(),
            kind: Some(PhaseKind::Settle),
            duration: s.settle,
            rate: Some(Rate(protected)),
            load: None,
        });
    }
    out.extend(phases.iter().cloned());
    out.extend(
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| step_phase(DEGRADED, i, *r, s.step)),
    );
    out
}
