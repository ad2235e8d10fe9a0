//! One output event published through the token-loop event hooks (M9): shared by the
//! token stream (`emit.rs`) and the tool-call deltas (`tool_call.rs`).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::faults::{Faults, Point};
use super::out::{AfterWrite, Ended, Out};

/// Publishes output event `k` of `out` through the event hooks: `before_event` fires
/// instead of writing it, `after_event` right after the connection flushed it.
pub fn publish_event(
    faults: &Arc<Faults>,
    out: &Out,
    k: u32,
    bytes: Bytes,
    due: Option<Instant>,
) -> Result<(), Ended> {
    if let Some(a) = faults.take(Point::BeforeEvent, k, &out.rid) {
        faults.fire(&a, &out.rid, out.attempt.as_deref());
    }
    let after = faults.take(Point::AfterEvent, k, &out.rid).map(|a| {
        let (f, rid, attempt) = (faults.clone(), out.rid.clone(), out.attempt.clone());
        let cb: AfterWrite = Box::new(move || f.fire(&a, &rid, attempt.as_deref()));
        cb
    });
    out.push_due(bytes, after, due)
}
