//! The second stage (ripgrep's lowargs → hiargs): a parsed scenario becomes a [`Plan`]
//! — validated, resolved, ready to run — or one error that says what and where;
//! nothing runs before the whole plan is valid.

pub mod budget;
pub mod capacity;
mod checks;
pub mod faults;
pub mod inputs;
mod phase;
pub mod rate;
mod types;
mod validate;
mod workload;

use std::path::Path;
use std::sync::Arc;

pub use faults::{FaultPlan, Trigger};
pub use types::*;
pub use validate::validate;

use crate::scenario::{self, Parsed, Scenario, ScenarioError};

/// Reads, overrides, resolves and validates a scenario file.
pub fn load(path: &Path, sets: &[String], seed: Option<u64>) -> Result<Plan, ScenarioError> {
    resolve(scenario::parse(path, sets, seed)?)
}

/// As [`load`], from text already read (`file` names it in errors, `base` resolves
/// relative workload paths).
pub fn load_str(
    text: &str,
    file: &str,
    base: &Path,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Plan, ScenarioError> {
    resolve(scenario::parse_str(text, file, base, sets, seed)?)
}

/// Validates a parsed scenario and reads the workload's data files.
fn resolve(parsed: Parsed) -> Result<Plan, ScenarioError> {
    let Parsed { scenario, place } = parsed;
    let mut plan = validate(scenario).map_err(|i| place.error(&i.field, i.value, i.reason))?;
    let inputs =
        inputs::load(&plan.scenario).map_err(|e| place.error(&e.field, Some(e.value), e.reason))?;
    if let Some(r) = &inputs.replay {
        // A replayed trace offers what it recorded: its mean rate over the run.
        let scale = plan
            .scenario
            .workload
            .arrival
            .trace
            .as_ref()
            .map_or(1.0, |t| t.time_scale);
        let span = (r.span_us as f64 * scale / 1e6).max(1e-3);
        plan.rate = r.entries.len() as f64 / span;
        plan.profile = rate::RateProfile::constant(plan.rate);
    }
    plan.inputs = Arc::new(inputs);
    Ok(plan)
}

/// Reads back the effective scenario recorded in a run directory.
pub fn from_recorded_json(text: &str) -> Result<Plan, String> {
    let mut s: Scenario = serde_json::from_str(text).map_err(|e| format!("scenario.json: {e}"))?;
    // A run recorded before issue 21 (it names max_slip_p99) is judged by today's
    // validity rule: with the old default of max_late (50ms) recorded, today's default.
    if s.client.max_slip_p99.take().is_some()
        && s.client.max_late == Some(crate::wire::units::Dur::millis(50))
    {
        s.client.max_late = None;
    }
    validate(s).map_err(|i| format!("scenario.json: `{}`: {}", i.field, i.reason))
}

#[cfg(test)]
mod tests;
