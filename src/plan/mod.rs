//! The second stage (ripgrep's lowargs → hiargs): a parsed scenario becomes a [`Plan`]
//! — validated, resolved, ready to run — or one error that says what and where;
//! nothing runs before the whole plan is valid.

mod agents;
pub mod budget;
pub mod capacity;
mod checks;
pub mod describe;
pub mod faults;
pub mod implied;
pub mod inputs;
pub mod kubernetes;
mod phase;
pub mod rate;
mod target;
mod types;
mod validate;
pub mod warnings;
mod workload;

use std::path::Path;
use std::sync::Arc;

pub use faults::{FaultPlan, Trigger};
pub use types::*;
pub use validate::validate;

use crate::scenario::{self, Parsed, Scenario, ScenarioError};

/// Reads, overrides, resolves and validates a scenario file; its first problem in file
/// order.
pub fn load(path: &Path, sets: &[String], seed: Option<u64>) -> Result<Plan, ScenarioError> {
    resolve(scenario::parse_all(path, sets, seed))
        .map(|(plan, _)| plan)
        .map_err(scenario::first)
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
    resolve(scenario::parse_str_all(text, file, base, sets, seed))
        .map(|(plan, _)| plan)
        .map_err(scenario::first)
}

/// A valid plan with the warnings about it: what makes it unable to pass
/// ([`warnings`]), each placed at file:line:col like an error.
pub struct Checked {
    pub plan: Plan,
    pub warnings: Vec<ScenarioError>,
}

/// As [`load`], with every problem in file order, or the plan with its warnings
/// (`haq validate`, `haq run`).
pub fn check(
    path: &Path,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Checked, Vec<ScenarioError>> {
    let (plan, place) = resolve(scenario::parse_all(path, sets, seed))?;
    let mut warnings: Vec<ScenarioError> = warnings::warnings(&plan)
        .into_iter()
        .map(|i| place.error(&i.field, i.value, i.reason))
        .collect();
    scenario::error::sort_in_file_order(&mut warnings, place.file());
    Ok(Checked { plan, warnings })
}

/// Validates a parsed scenario (every issue, placed, in file order) and reads the
/// workload's data files; keeps what places issues in the scenario's files.
fn resolve(
    parsed: Result<Parsed, Vec<ScenarioError>>,
) -> Result<(Plan, scenario::Place), Vec<ScenarioError>> {
    let Parsed { scenario, place } = parsed?;
    let mut plan = validate::validate_all(scenario).map_err(|all| {
        let mut e: Vec<ScenarioError> = all
            .into_iter()
            .map(|i| place.error(&i.field, i.value, i.reason))
            .collect();
        scenario::error::sort_in_file_order(&mut e, place.file());
        e
    })?;
    // The context a kubernetes target acts in, inside its allow-list (the kubeconfig
    // is read, no network).
    if let Some(k) = &plan.scenario.target.kubernetes {
        kubernetes::check_context(k, &kubernetes::ContextSource::read())
            .map_err(|i| vec![place.error(&i.field, i.value, i.reason)])?;
    }
    let inputs = inputs::load(&plan.scenario)
        .map_err(|e| vec![place.error(&e.field, Some(e.value), e.reason)])?;
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
    Ok((plan, place))
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
