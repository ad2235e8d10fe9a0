//! One fault's timeline, stage by stage: injected, detected, traffic removed, the
//! requests in flight on the endpoint, the degraded interval, the replacement (or the
//! heal) that brought it back.

use super::dead::heal_of;
use super::detection::{detection, removal};
use super::replacement::{back_after_heal, replacement};
use super::routed::routing_sources;
use super::types::{FaultTimeline, InFlight, mark};
use crate::check::facts::{self, Evidence};
use crate::check::history::FaultRec;
use crate::scenario::PhaseKind;
use crate::trace::Outcome;

/// The timeline of fault `idx` (`f`) of the run.
pub(super) fn fault_timeline(ev: &Evidence, idx: usize, f: &FaultRec) -> FaultTimeline {
    let heal = heal_of(ev, f);
    let heal_mark = heal.map(|h| mark(h.t, "haq fault injector", h.detail.clone()));
    // An undo haq could not verify is no heal: the endpoint is not known to be back.
    let (healed, heal_unverified) = match heal {
        Some(h) if h.verified => (heal_mark, None),
        _ => (None, heal_mark),
    };
    let mut replacement = replacement(ev, f);
    if let Some(h) = &healed {
        replacement = back_after_heal(ev, f, h, replacement);
    }
    let sources = routing_sources(ev);
    let removes = facts::removes_endpoint(f);
    let removal = removes
        .then(|| {
            let back = replacement.ready.as_ref().map(|m| m.t).unwrap_or(u64::MAX);
            // Once haq tried to undo the fault, the endpoint is no longer known to be
            // dead: traffic after an unverified heal is not blamed on the gateway.
            let heal = heal.map(|h| h.t).unwrap_or(u64::MAX);
            removal(ev, f, sources, back, heal)
        })
        .flatten();
    FaultTimeline {
        fault: f.name.clone(),
        replica: f.replica.clone(),
        domain: f.domain,
        action: f.action,
        injected: f.t,
        verified: f.verified,
        drain: facts::is_drain(f),
        removes,
        detected: detection(ev, f),
        removal,
        in_flight: in_flight(ev, idx),
        degraded_until: degraded_until(&ev.phases, ev.load_end(), f.t),
        planned_until: planned_until(ev, f.t),
        replacement,
        healed,
        heal_unverified,
    }
}

/// The requests fault `idx` caught, and how they ended.
fn in_flight(ev: &Evidence, idx: usize) -> InFlight {
    let mut in_flight = InFlight::default();
    for r in ev
        .requests
        .iter()
        .filter(|r| r.caught.is_some_and(|c| c.1 == idx))
    {
        in_flight.caught += 1;
        match r.outcome {
            Outcome::Completed => in_flight.recovered += 1,
            o if o.is_not_the_targets() => in_flight.left += 1,
            _ => in_flight.terminated += 1,
        }
        in_flight.settled = in_flight.settled.max(Some(r.end));
    }
    in_flight
}

/// End of the degraded interval that contains `t`: the first later phase that is not
/// a fault, drain or degraded phase, or the end of load.
fn degraded_until(phases: &[facts::PhaseWindow], load_end: u64, t: u64) -> u64 {
    let Some(i) = phases.iter().rposition(|p| p.start <= t) else {
        return load_end;
    };
    phases[i + 1..]
        .iter()
        .find(|p| {
            !matches!(
                p.kind,
                PhaseKind::Fault | PhaseKind::Degraded | PhaseKind::Drain
            )
        })
        .map(|p| p.start)
        .unwrap_or(load_end)
}

/// The planned end of the degraded interval that contains `t`, when the run ended
/// more than a second before it (an interrupt): the plan's phases placed from the
/// start of load.
fn planned_until(ev: &Evidence, t: u64) -> Option<u64> {
    let planned_end = ev.planned.iter().map(|p| p.end).max()?;
    let planned = degraded_until(&ev.planned, planned_end, t);
    (planned > degraded_until(&ev.phases, ev.load_end(), t) + 1_000_000).then_some(planned)
}
