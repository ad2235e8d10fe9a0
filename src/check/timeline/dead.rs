//! Traffic that reached a dead endpoint (Routing's removal time, Q11), from every
//! source: the requests routed to it ([`routed_to`]: gateway journal, observers, haq's
//! proxy, attribution headers), the connect attempts its proxy saw refused
//! (`proxy_refused`), and — where nothing in front of the endpoint would have seen the
//! attempt — the gateway's own error answers that say an upstream could not be reached.
//! And whether the run can tell that such traffic stopped: haq's proxy says nothing by
//! its silence while its listener was closed and the connects refused there could not
//! be seen.

use super::routed::routed_to;
use super::types::{CLIENT, Mark, PROXY, mark, ms};
use crate::check::facts::{Evidence, Healed, is_drain, removes_endpoint, says_unreachable};
use crate::check::history::FaultRec;
use crate::scenario::FaultAction;
use crate::trace::{RefusedHow, ReplacementStage};

/// What reached fault `f`'s endpoint in `[f.t, until)`.
pub(super) struct DeadTraffic {
    /// Every request, connect attempt and error answer, in time order.
    pub marks: Vec<Mark>,
    /// Of which connect attempts refused at its proxy.
    pub refused: u64,
    /// Error answers after the fault that another endpoint's outage could explain as
    /// well (several endpoints down at once): not counted for this one.
    pub unattributed: u64,
    /// Connects refused while no client request was looking for an upstream: the
    /// gateway's health checks or probes, not traffic routed to the endpoint.
    pub probes: u64,
}

/// The traffic that reached `f`'s endpoint in `[f.t, until)`; the gateway's error
/// answers are read only when `proxy_sees` is false (haq's proxy would have seen them
/// as attempts) and the run has no gateway journal (which names every attempt).
pub(super) fn reached_dead(
    ev: &Evidence,
    f: &FaultRec,
    until: u64,
    proxy_sees: bool,
) -> DeadTraffic {
    let mut marks = routed_to(ev, &f.replica, f.t, until);
    let mut n_refused = 0;
    // A gateway journal names every attempt itself; otherwise a connect is a
    // request's attempt only while a client request was looking for an upstream, and
    // not where it keeps the cadence of the connects that came with none (a health
    // check that happened to come while a request was being routed elsewhere).
    let mut probe_times = Vec::new();
    let mut pending = Vec::new();
    for r in ev
        .refused
        .iter()
        .filter(|r| r.replica == f.replica && r.t >= f.t && r.t < until)
        .filter(|_| ev.gateway.is_none())
    {
        match pending_at(ev, r.t) {
            Some(id) => pending.push((r, id)),
            None => probe_times.push(r.t),
        }
    }
    probe_times.sort_unstable();
    for (r, id) in pending {
        if on_cadence(&probe_times, r.t) {
            let at = probe_times.partition_point(|&p| p < r.t);
            probe_times.insert(at, r.t);
            continue;
        }
        let how = match r.how {
            RefusedHow::Refused => "refused (its proxy listener closed)",
            RefusedHow::Reset => "reset unread (accepted before the proxy knew)",
        };
        n_refused += 1;
        marks.push(mark(
            r.t,
            PROXY,
            format!(
                "connect from {} to {} {how}, while {id} had no upstream yet",
                r.peer, f.replica
            ),
        ));
    }
    let mut unattributed = 0;
    if !proxy_sees && ev.gateway.is_none() {
        for r in ev.requests.iter().filter(|r| {
            r.dispatch >= f.t
                && r.dispatch < until
                && r.worker.is_none()
                && says_unreachable(r)
                && !ev
                    .proxied
                    .iter()
                    .any(|p| p.id.as_deref() == Some(r.id.as_str()))
        }) {
            let down = down_at(ev, r.dispatch);
            if down == [f.replica.as_str()] {
                marks.push(mark(
                    r.dispatch,
                    CLIENT,
                    format!(
                        "{} answered {}: {}",
                        r.id,
                        r.status
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "an error".into()),
                        r.detail.as_deref().unwrap_or_default()
                    ),
                ));
            } else if down.contains(&f.replica.as_str()) {
                unattributed += 1;
            }
        }
    }
    marks.sort_by_key(|m| m.t);
    DeadTraffic {
        marks,
        refused: n_refused,
        unattributed,
        probes: probe_times.len() as u64,
    }
}

/// Whether a connect at `t` fills a hole in the periodic series of connects that came
/// while no request was looking for an upstream (`probes`, sorted): a gateway's health
/// checks keep their interval whether or not a client request is being routed at that
/// moment. The series' period is the median of its gaps around `t` (at least three
/// gaps, two thirds of them within the tolerance of it); `t` fills a hole when the
/// probes on either side of it are two periods apart and `t` lies one period from
/// either. A gateway that routes requests to the dead endpoint leaves no hole, so
/// its connects are counted however many health checks it also sends.
fn on_cadence(probes: &[u64], t: u64) -> bool {
    const AROUND: usize = 8;
    let at = probes.partition_point(|&p| p < t);
    if at == 0 || at == probes.len() {
        return false;
    }
    let (prev, next) = (probes[at - 1], probes[at]);
    let lo = at.saturating_sub(AROUND);
    let hi = (at + AROUND).min(probes.len());
    let mut gaps: Vec<u64> = probes[lo..hi]
        .windows(2)
        .filter(|w| w[0] != prev)
        .map(|w| w[1] - w[0])
        .collect();
    if gaps.len() < 3 {
        return false;
    }
    gaps.sort_unstable();
    let period = gaps[gaps.len() / 2];
    // Timer jitter on a busy machine: a tenth of the period, at least 10 ms.
    let tol = (period / 10).max(10_000);
    let near = |a: u64, b: u64| a.abs_diff(b) <= tol;
    let steady = gaps.iter().filter(|&&g| near(g, period)).count();
    period >= 50_000
        && steady * 3 >= gaps.len() * 2
        && near(next - prev, 2 * period)
        && (near(t - prev, period) || near(next - t, period))
}

/// A client request that was looking for an upstream at `t`: sent, and neither
/// begun on any replica's proxy nor answered yet. The gateway's health checks come
/// whether or not one is; a request it routes to a dead endpoint is one.
fn pending_at(ev: &Evidence, t: u64) -> Option<&str> {
    ev.requests
        .iter()
        .filter(|q| q.dispatch <= t && q.head.unwrap_or(q.end) >= t)
        .find(|q| {
            !ev.proxied
                .iter()
                .any(|p| p.id.as_deref() == Some(q.id.as_str()) && p.t < t)
        })
        .map(|q| q.id.as_str())
}

/// The heal of fault record `f`, verified or not: its replica's (a node fault heals
/// each replica of its node), or the fault's when the line names no replica.
pub fn heal_of<'a>(ev: &'a Evidence, f: &FaultRec) -> Option<&'a Healed> {
    ev.heals.iter().find(|h| {
        h.name == f.name && h.t >= f.t && h.replica.as_ref().is_none_or(|r| *r == f.replica)
    })
}

/// The endpoints out of service at `t`: each verified removing fault's, from the
/// fault to its heal or its replacement's readiness.
fn down_at(ev: &Evidence, t: u64) -> Vec<&str> {
    let mut down: Vec<&str> = ev
        .faults
        .iter()
        .filter(|f| f.verified && removes_endpoint(f) && f.t <= t)
        .filter(|f| {
            let heal = heal_of(ev, f).map(|h| h.t);
            let ready = ev
                .replacements
                .iter()
                .find(|r| r.fault == f.name && r.stage == ReplacementStage::Ready)
                .map(|r| r.t);
            t < heal.into_iter().chain(ready).min().unwrap_or(u64::MAX)
        })
        .map(|f| f.replica.as_str())
        .collect();
    down.sort_unstable();
    down.dedup();
    down
}

/// Whether haq's proxy stood in front of `replica`.
pub(super) fn proxied(ev: &Evidence, replica: &str) -> bool {
    ev.replicas
        .iter()
        .any(|r| r.name == replica && r.proxy.is_some())
        || ev.summary.proxied_to.contains(replica)
        || ev.refused.iter().any(|r| r.replica == replica)
}

/// Why the silence of the proxy in front of `f`'s endpoint does not show that no
/// traffic reached it in `[f.t, until)`: its listener was closed (the replica dead)
/// while the connects refused there could not be seen. `None` when it does.
pub(super) fn proxy_blind(ev: &Evidence, f: &FaultRec, until: u64) -> Option<String> {
    let watch: Vec<_> = ev
        .proxy_states
        .iter()
        .filter(|s| s.replica.is_none())
        .collect();
    if watch.is_empty() {
        // A trace from before the watch: its proxy closed the listener of a replica
        // found dead, and nothing recorded the connects refused there.
        let dies = f.action == FaultAction::Kill || is_drain(f);
        return dies.then(|| {
            format!(
                "the trace does not say whether connects refused at {}'s closed proxy listener were seen (written before haq watched them)",
                f.replica
            )
        });
    }
    let watching_through = |from: u64, to: u64| {
        let before = watch.iter().rev().find(|s| s.t <= from).or(watch.first());
        let ok = before.is_some_and(|s| s.open)
            && !watch.iter().any(|s| !s.open && s.t > from && s.t < to);
        let why = watch
            .iter()
            .rev()
            .find(|s| !s.open && s.t < to)
            .map(|s| s.detail.clone())
            .unwrap_or_default();
        (ok, why)
    };
    // The listener's closed stretches, from its lines (open until one says closed).
    let lines: Vec<_> = ev
        .proxy_states
        .iter()
        .filter(|s| s.replica.as_deref() == Some(f.replica.as_str()))
        .collect();
    let mut closed_from: Option<u64> = None;
    let mut stretches = Vec::new();
    for s in &lines {
        match (s.open, closed_from) {
            (false, None) => closed_from = Some(s.t),
            (true, Some(c)) => {
                stretches.push((c, s.t));
                closed_from = None;
            }
            _ => {}
        }
    }
    if let Some(c) = closed_from {
        stretches.push((c, u64::MAX));
    }
    stretches
        .into_iter()
        .filter(|&(c0, c1)| c0 < until && c1 > f.t)
        .find_map(|(c0, c1)| {
            let from = c0.max(f.t);
            let (ok, why) = watching_through(from, c1.min(until));
            (!ok).then(|| {
                format!(
                    "{}'s proxy listener was closed from +{:.0} ms and the connects refused there could not be seen ({why})",
                    f.replica,
                    ms(f.t, from)
                )
            })
        })
}
