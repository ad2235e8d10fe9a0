//! `haq run --dry-run`: the plan in words ([`crate::plan::describe`]) and what the
//! target will do before and during the load — nothing is started. A target kind with
//! actions of its own (API calls, processes it launches) adds its lines in
//! [`target_lines`]: it sits here, above every stage, so it may ask the target's own
//! code what it would do.

use crate::plan::Plan;
use crate::plan::describe::{Block, describe, render as render_blocks};
use crate::scenario::TargetKind;

/// The dry run's text.
pub fn render(plan: &Plan) -> String {
    let mut blocks = describe(plan);
    let extra = target_lines(plan);
    if !extra.is_empty() {
        blocks.insert(
            1,
            Block {
                title: "the target will".into(),
                lines: extra,
            },
        );
    }
    format!(
        "dry run of {}: nothing was started\n{}",
        plan.scenario.name,
        render_blocks(&blocks)
    )
}

/// What the target itself will do, beyond the plan's phases and faults: one arm per
/// target kind.
pub fn target_lines(plan: &Plan) -> Vec<String> {
    let t = &plan.scenario.target;
    match t.kind {
        TargetKind::Sim => vec![
            "start the sim's tool service, workers and gateway as child processes of haq (logs and journals in the run directory)".into(),
            "stop every one of them at the end of the run, on error and on Ctrl-C".into(),
        ],
        TargetKind::Url => {
            let mut v = vec![
                "check each declared process exists and each upstream accepts connections".into(),
                "bind haq's proxy on every `listen` address (point the gateway's upstreams there for the run)".into(),
            ];
            if t.headers.values().any(|h| !matches!(h, crate::scenario::HeaderSource::Value(_))) {
                v.push("read the headers' credentials from their environment variables and files".into());
            }
            v
        }
        TargetKind::Kubernetes => vec![
            "discover the serving pods by their label selector and watch the serving Service's EndpointSlices".into(),
            "make the Kubernetes API calls listed below for each fault and its heal (none is made now)".into(),
        ],
    }
}
