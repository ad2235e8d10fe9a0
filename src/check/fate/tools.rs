//! Tool side effects (M7): a tool call executed before a failure must not execute
//! again after it. From the tool service's log: the same idempotency key executed
//! twice, or the same logical action — same logical request and tool_call_id, or the
//! same tool with the same arguments for one logical request — executed twice under
//! different keys (a key derived from the GPU attempt instead of the logical action).
//!
//! Memory grows with the number of executed tool calls (not with chunks).

use std::collections::HashMap;

use super::{FindingKind, Out};
use crate::trace::journal::ToolExecution;

#[derive(Default)]
pub struct ToolCheck {
    /// idempotency key → first execution (t, tool_call_id).
    keys: HashMap<String, (u64, String)>,
    /// (logical request, tool_call_id) → first execution (t, key).
    calls: HashMap<(String, String), (u64, String)>,
    /// (logical request, tool, arguments) → first execution (t, tool_call_id, key).
    actions: HashMap<(String, String, String), (u64, String, String)>,
}

impl ToolCheck {
    pub fn add(&mut self, t: u64, x: &ToolExecution, out: &mut Out) {
        if x.deduplicated {
            return; // the service returned the stored result: nothing ran again
        }
        let lr = &x.logical_request_id;
        let ms = |a: u64| format!("{:.0} ms", t.saturating_sub(a) as f64 / 1000.0);
        let finding = if let Some((t0, call0)) = self.keys.get(&x.idempotency_key) {
            Some((
                format!(
                    "idempotency key `{}` executed twice ({} apart; tool_call_ids `{call0}`, `{}`): the tool service did not deduplicate",
                    x.idempotency_key,
                    ms(*t0),
                    x.tool_call_id
                ),
                vec![call0.clone(), x.tool_call_id.clone()],
            ))
        } else if let Some((t0, key0)) = self.calls.get(&(lr.clone(), x.tool_call_id.clone())) {
            Some((
                format!(
                    "tool call `{}` of `{lr}` executed twice under different keys `{key0}` and `{}` ({} apart): the key must derive from the logical action (`<logical_request_id>:<tool_call_id>`), not the attempt",
                    x.tool_call_id,
                    x.idempotency_key,
                    ms(*t0)
                ),
                vec![key0.clone(), x.idempotency_key.clone()],
            ))
        } else if let Some((t0, call0, key0)) =
            self.actions
                .get(&(lr.clone(), x.tool.clone(), x.arguments.clone()))
        {
            Some((
                format!(
                    "`{}` with the same arguments executed twice for `{lr}` (tool_call_ids `{call0}`, `{}`; keys `{key0}`, `{}`; {} apart): one logical action, two side effects",
                    x.tool,
                    x.tool_call_id,
                    x.idempotency_key,
                    ms(*t0)
                ),
                vec![call0.clone(), x.tool_call_id.clone()],
            ))
        } else {
            None
        };
        if let Some((detail, ids)) = finding {
            out.find(FindingKind::DuplicateToolEffect, lr, detail)
                .attempts(ids)
                .excerpt(super::excerpt(&format!("{}({})", x.tool, x.arguments)));
        }
        self.keys
            .entry(x.idempotency_key.clone())
            .or_insert((t, x.tool_call_id.clone()));
        self.calls
            .entry((lr.clone(), x.tool_call_id.clone()))
            .or_insert((t, x.idempotency_key.clone()));
        self.actions
            .entry((lr.clone(), x.tool.clone(), x.arguments.clone()))
            .or_insert((t, x.tool_call_id.clone(), x.idempotency_key.clone()));
    }
}
