//! The plans the tests judge against: a hand-written base scenario, or the
//! quickstart, each with `--set` overrides.

use crate::plan::Plan;

/// The base scenario: 3 sim replicas, 10/s offered = protected, baseline 10s, fault
/// 10s (w2 killed 2s in), degraded 10s; SLO TTFT 500ms, ITL 50ms, E2E 3s.
pub const BASE: &str = r#"
name: hand
target: {kind: sim, replicas: 3}
workload:
  seed: 1
  mix: {classes: [{name: chat, prompt_tokens: 100, output_tokens: 10}]}
  arrival: {process: constant, rate: 10/s}
protected_load: 10/s
slo: {ttft_p95: 500ms, itl_p95: 50ms, e2e_p95: 3s, error_rate_max: 5%, rejection_rate_max: 1%}
phases:
  - {name: baseline, duration: 10s}
  - {name: fault, duration: 10s}
  - {name: degraded, duration: 10s}
faults:
  - {name: kill-w2, domain: worker, action: kill, target: {replica: w2}, at: {phase: fault, offset: 2s}}
"#;

/// [`BASE`] with overrides.
pub fn plan(sets: &[&str]) -> Plan {
    plan_from(BASE, sets)
}

pub fn plan_from(yaml: &str, sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    crate::plan::load_str(yaml, "hand.yaml", std::path::Path::new("."), &sets, None)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The quickstart (one kill of w2) with overrides.
pub fn quickstart(sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    crate::plan::load(&p, &sets, None).unwrap_or_else(|e| panic!("{e}"))
}
