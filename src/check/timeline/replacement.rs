//! A removed endpoint's way back: the replacement stages (requested → started →
//! ready → receiving traffic, or failed) from the observers, the gateway journal and
//! the backend's own records; a healed fault's endpoint serving again.

use super::routed::routed_to;
use super::types::{BACKEND, JOURNAL, Mark, Replacement, mark};
use crate::check::facts::Evidence;
use crate::check::history::FaultRec;
use crate::trace::ReplacementStage;
use crate::wire::journal::GatewayEntry;

fn first_observed(
    ev: &Evidence,
    replica: &str,
    from: u64,
    words: &[&str],
    label: &str,
) -> Option<Mark> {
    ev.observed(replica, from, |w| words.contains(&w))
        .next()
        .map(|o| {
            mark(
                o.t,
                &o.source,
                o.detail
                    .clone()
                    .unwrap_or_else(|| format!("{label}: {}", o.what)),
            )
        })
}

/// The backend's own record of a replacement stage for this fault's replica.
fn staged(ev: &Evidence, f: &FaultRec, stage: ReplacementStage) -> Option<Mark> {
    ev.replacements
        .iter()
        .find(|r| r.fault == f.name && r.replica == f.replica && r.stage == stage && r.t >= f.t)
        .map(|r| {
            mark(
                r.t,
                BACKEND,
                r.detail
                    .clone()
                    .unwrap_or_else(|| format!("{stage:?}").to_lowercase()),
            )
        })
}

fn earliest(ms: impl IntoIterator<Item = Option<Mark>>) -> Option<Mark> {
    ms.into_iter().flatten().min_by_key(|m| m.t)
}

/// The replacement stages of a fault's replica, each from its earliest evidence.
pub(super) fn replacement(ev: &Evidence, f: &FaultRec) -> Replacement {
    let r = &f.replica;
    let requested = first_observed(
        ev,
        r,
        f.t,
        &["replacement_requested", "restart_requested", "requested"],
        "requested",
    );
    let started = first_observed(
        ev,
        r,
        f.t,
        &[
            "replacement_started",
            "process_started",
            "started",
            "restarted",
        ],
        "started",
    );
    let journal_ready = ev.gateway.iter().flatten().find_map(|g| match &g.entry {
        GatewayEntry::UpstreamReady { worker, why } if worker == r && g.t > f.t => Some(mark(
            g.t,
            JOURNAL,
            format!("upstream_ready {worker}: {why}"),
        )),
        _ => None,
    });
    let observed_ready = first_observed(
        ev,
        r,
        f.t,
        &[
            "ready",
            "replacement_ready",
            "endpoint_ready",
            "upstream_ready",
        ],
        "ready",
    );
    let ready = earliest([
        journal_ready,
        observed_ready,
        staged(ev, f, ReplacementStage::Ready),
    ]);
    let routed = ready
        .as_ref()
        .and_then(|m| routed_to(ev, r, m.t, u64::MAX).into_iter().next());
    let serving = earliest([routed, staged(ev, f, ReplacementStage::FirstRequestServed)]);
    Replacement {
        requested: earliest([requested, staged(ev, f, ReplacementStage::Requested)]),
        started: earliest([started, staged(ev, f, ReplacementStage::ProcessStarted)]),
        ready,
        serving,
        failed: staged(ev, f, ReplacementStage::Failed),
    }
}

/// A healed fault's endpoint back in service: with no readiness mark, the first
/// request routed to it after the heal shows it ready (and serving).
pub(super) fn back_after_heal(
    ev: &Evidence,
    f: &FaultRec,
    healed: &Mark,
    mut r: Replacement,
) -> Replacement {
    if r.ready.is_none()
        && let Some(first) = routed_to(ev, &f.replica, healed.t, u64::MAX)
            .into_iter()
            .next()
    {
        r.ready = Some(mark(
            first.t,
            &first.source,
            format!(
                "ready (inferred: traffic again after the heal): {}",
                first.detail
            ),
        ));
        r.serving = Some(first);
    }
    r
}
