//! Tool side effects (M7): a tool call executed before a failure must not execute
//! again after it. From the tool service's log: the same idempotency key executed
//! twice, or the same logical action — same logical request and tool_call_id, or the
//! same tool with the same arguments for one logical request — executed twice under
//! different keys (a key derived from the GPU attempt instead of the logical action).
//!
//! Memory grows with the number of executed tool calls (not with chunks).

use std::collections::HashMap;

use super::{FindingKind, Out};
use crate::wire::journal::ToolExecution;

/// The first execution of a key, a call or an action.
#[derive(Clone)]
struct Exec {
    t: u64,
    call: String,
    key: String,
    attempt: Option<String>,
}

#[derive(Default)]
pub struct ToolCheck {
    /// idempotency key → first execution.
    keys: HashMap<String, Exec>,
    /// (logical request, tool_call_id) → first execution.
    calls: HashMap<(String, String), Exec>,
    /// (logical request, tool, arguments) → first execution.
    actions: HashMap<(String, String, String), Exec>,
}

impl ToolCheck {
    pub fn add(&mut self, t: u64, x: &ToolExecution, out: &mut Out) {
        if x.deduplicated {
            return; // the service returned the stored result: nothing ran again
        }
        let lr = &x.logical_request_id;
        let now = Exec {
            t,
            call: x.tool_call_id.clone(),
            key: x.idempotency_key.clone(),
            attempt: x.attempt.clone(),
        };
        let action = (lr.clone(), x.tool.clone(), x.arguments.clone());
        let call = (lr.clone(), x.tool_call_id.clone());
        let (what, first) = if let Some(e) = self.keys.get(&x.idempotency_key) {
            (
                format!(
                    "idempotency key `{}` executed twice: the tool service did not deduplicate",
                    x.idempotency_key
                ),
                e,
            )
        } else if let Some(e) = self.calls.get(&call) {
            (
                format!(
                    "tool call `{}` of `{lr}` executed twice under different keys `{}` and `{}`: the key must derive from the logical action (`<logical_request_id>:<tool_call_id>`), not the attempt",
                    x.tool_call_id, e.key, x.idempotency_key
                ),
                e,
            )
        } else if let Some(e) = self.actions.get(&action) {
            (
                format!(
                    "`{}` with the same arguments executed twice for `{lr}` (tool_call_ids `{}`, `{}`; keys `{}`, `{}`): one logical action, two side effects",
                    x.tool, e.call, x.tool_call_id, e.key, x.idempotency_key
                ),
                e,
            )
        } else {
            self.keys.insert(x.idempotency_key.clone(), now.clone());
            self.calls.entry(call).or_insert(now.clone());
            self.actions.entry(action).or_insert(now);
            return;
        };
        let by = match (&first.attempt, &now.attempt) {
            (Some(a), Some(b)) => format!(", asked by attempts `{a}` and `{b}`"),
            _ => String::new(),
        };
        let ms = t.saturating_sub(first.t) as f64 / 1000.0;
        let ids = match (&first.attempt, &now.attempt) {
            (Some(a), Some(b)) => vec![a.clone(), b.clone()],
            _ if first.key != now.key => vec![first.key.clone(), now.key.clone()],
            _ => vec![first.call.clone(), now.call.clone()],
        };
        out.find(
            FindingKind::DuplicateToolEffect,
            lr,
            format!("{what} ({ms:.0} ms apart{by})"),
        )
        .attempts(ids)
        .excerpt(super::excerpt(&format!("{}({})", x.tool, x.arguments)));
        self.keys.entry(x.idempotency_key.clone()).or_insert(now);
    }
}
