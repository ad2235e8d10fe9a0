//! When a fault's endpoint was seen unusable (detection) and when new traffic
//! stopped reaching it (removal: not the same as detection).

use super::routed::{routed_elsewhere, routed_to};
use super::types::{JOURNAL, Mark, Removal, mark};
use crate::check::facts::{Evidence, says_unusable};
use crate::check::history::FaultRec;
use crate::wire::journal::GatewayEntry;

/// The earliest sign that the endpoint is unusable: the gateway journal or the
/// system's observers, haq's own readiness poll only when nothing else saw it.
pub(super) fn detection(ev: &Evidence, f: &FaultRec) -> Option<Mark> {
    let journal = ev.gateway.iter().flatten().find_map(|g| match &g.entry {
        GatewayEntry::UpstreamRemoved { worker, why, .. } if *worker == f.replica && g.t >= f.t => {
            Some(mark(
                g.t,
                JOURNAL,
                format!("upstream_removed {worker}: {why}"),
            ))
        }
        _ => None,
    });
    // The system's observers (gateway, health checks, EndpointSlice watchers) date
    // the detection; haq's own readiness poll only when none of them saw it.
    let seen = |ours: bool| {
        ev.observed(&f.replica, f.t, says_unusable)
            .find(move |o| (o.source == crate::trace::READINESS) == ours)
    };
    let observed = seen(false).or_else(|| seen(true)).map(|o| {
        mark(
            o.t,
            &o.source,
            format!(
                "{}{}",
                o.what,
                o.detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        )
    });
    match (journal, observed) {
        (Some(j), Some(o)) if o.source == crate::trace::READINESS => Some(j),
        (j, o) => [j, o].into_iter().flatten().min_by_key(|m| m.t),
    }
}

/// Traffic reaching an endpoint this close before its heal was never taken out.
const HEAL_SLACK_US: u64 = 500_000;

/// When new traffic stopped reaching the faulted endpoint, from the routing evidence
/// (`sources`): traffic to the endpoint once it is back (a replacement ready at
/// `back`, a freeze healed at `heal`) is not traffic to the dead one.
pub(super) fn removal(
    ev: &Evidence,
    f: &FaultRec,
    sources: Vec<String>,
    back: u64,
    heal: u64,
) -> Removal {
    let routed = routed_to(ev, &f.replica, f.t, back.min(heal));
    let until_heal = heal < u64::MAX
        && routed
            .last()
            .is_some_and(|l| l.t.saturating_add(HEAL_SLACK_US) >= heal);
    let last = routed.last().cloned();
    let t = last.as_ref().map(|m| m.t).unwrap_or(f.t);
    Removal {
        t,
        routed_after_fault: routed.len() as u64,
        confirmed: routed_elsewhere(ev, &f.replica, t),
        last,
        sources,
        until_heal,
    }
}
