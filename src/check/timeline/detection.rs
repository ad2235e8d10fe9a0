//! When a fault's endpoint was seen unusable (detection) and when new traffic
//! stopped reaching it (removal: not the same as detection).

use super::dead::{proxied, proxy_blind, reached_dead};
use super::routed::routed_elsewhere;
use super::types::{CLIENT, JOURNAL, Mark, PROXY, Removal, mark};
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
/// `back`, a freeze healed at `heal`) is not traffic to the dead one. `None` when the
/// run has no routing evidence at all.
pub(super) fn removal(
    ev: &Evidence,
    f: &FaultRec,
    mut sources: Vec<String>,
    back: u64,
    heal: u64,
) -> Option<Removal> {
    let until = back.min(heal);
    let blind = proxied(ev, &f.replica)
        .then(|| proxy_blind(ev, f, until))
        .flatten();
    let proxy_sees = proxied(ev, &f.replica) && ev.has_proxy && blind.is_none();
    let dead = reached_dead(ev, f, until, proxy_sees);
    // Sources that see every request to the endpoint: their silence is evidence.
    let complete = proxy_sees || sources.iter().any(|s| s != PROXY);
    if !proxy_sees && ev.gateway.is_none() {
        sources.push(CLIENT.to_string());
    }
    if !complete && dead.marks.is_empty() && dead.unattributed == 0 && !ev.has_proxy {
        return None;
    }
    let unseen = (!complete).then(|| {
        blind.unwrap_or_else(|| {
            format!(
                "no source sees every request routed to {} (no gateway journal, attribution header or haq proxy in front of it)",
                f.replica
            )
        })
    });
    let routed = dead.marks;
    let until_heal = heal < u64::MAX
        && routed
            .last()
            .is_some_and(|l| l.t.saturating_add(HEAL_SLACK_US) >= heal);
    let last = routed.last().cloned();
    let t = last.as_ref().map(|m| m.t).unwrap_or(f.t);
    Some(Removal {
        t,
        routed_after_fault: routed.len() as u64,
        confirmed: routed_elsewhere(ev, &f.replica, t),
        last,
        sources,
        until_heal,
        refused_connects: dead.refused,
        unseen,
        unattributed: dead.unattributed,
        probe_connects: dead.probes,
    })
}
