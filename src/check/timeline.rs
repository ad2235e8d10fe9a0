//! The failure timeline (Q11), per fault: injected, detected, traffic removed (when new
//! requests stopped reaching the endpoint — not the same as detection), in-flight
//! requests recovered or terminated, the degraded interval, the replacement stages
//! (requested → started → ready → receiving traffic) and full recovery. Every mark
//! names the evidence it was read from.

use serde::Serialize;

use super::facts::{self, Evidence, says_routed, says_unusable};
use super::history::FaultRec;
use crate::metrics::SecondStats;
use crate::plan::Plan;
use crate::scenario::{FailureDomain, FaultAction, PhaseKind};
use crate::trace::{Outcome, ReplacementStage};
use crate::wire::journal::GatewayEntry;

pub const JOURNAL: &str = "gateway journal";
pub const HEADER: &str = "x-haq-worker header";
pub const PROXY: &str = "haq proxy";
pub const BACKEND: &str = "haq fault backend";

/// A point on the timeline and what says so.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mark {
    pub t: u64,
    pub source: String,
    pub detail: String,
}

fn mark(t: u64, source: &str, detail: impl Into<String>) -> Mark {
    Mark {
        t,
        source: source.into(),
        detail: detail.into(),
    }
}

/// When new traffic stopped reaching the faulted endpoint.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Removal {
    /// The last new request routed to the endpoint after the fault, or the fault
    /// itself when none was.
    pub t: u64,
    /// Requests (attempts) routed to the endpoint after the fault.
    pub routed_after_fault: u64,
    pub last: Option<Mark>,
    /// The first request routed elsewhere after `t`: proof that traffic went on and
    /// avoided the endpoint (without it, the run may simply have ended).
    pub confirmed: Option<Mark>,
    /// The evidence sources consulted.
    pub sources: Vec<String>,
    /// A reversible fault (freeze, proxy rule) was healed while traffic still reached
    /// the endpoint: routing never took it out, the heal ended the outage. Traffic
    /// after the heal is not traffic to a dead endpoint.
    pub until_heal: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct InFlight {
    /// Requests in flight on the endpoint (or not yet committed) when it failed.
    pub caught: u64,
    /// ... that still completed (retried before their first delta, or drained).
    pub recovered: u64,
    /// ... that ended otherwise (explicit error, reset, …).
    pub terminated: u64,
    /// When the last of them ended.
    pub settled: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Replacement {
    pub requested: Option<Mark>,
    pub started: Option<Mark>,
    pub ready: Option<Mark>,
    /// The first request routed to the replacement once ready.
    pub serving: Option<Mark>,
    /// The backend could not start it, or it never became ready.
    pub failed: Option<Mark>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FaultTimeline {
    pub fault: String,
    pub replica: String,
    pub domain: FailureDomain,
    pub action: FaultAction,
    pub injected: u64,
    pub verified: bool,
    /// A planned drain (Q7) rather than an abrupt failure.
    pub drain: bool,
    /// The fault takes the endpoint out of service (routing applies).
    pub removes: bool,
    pub detected: Option<Mark>,
    /// `None` when the run has no routing evidence at all.
    pub removal: Option<Removal>,
    pub in_flight: InFlight,
    /// End of the degraded interval: the first later phase that is not a fault,
    /// drain or degraded phase, or the end of load.
    pub degraded_until: u64,
    pub replacement: Replacement,
    pub healed: Option<Mark>,
}

/// One row of the timeline as people read it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    pub t: u64,
    /// Seconds since the start of load.
    pub at_s: f64,
    /// Milliseconds since the fault this entry belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_fault_ms: Option<f64>,
    pub event: String,
    pub source: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Timeline {
    pub faults: Vec<FaultTimeline>,
    /// All replaced capacity ready and serving, and the healthy latency envelope back.
    pub full_recovery: Option<Mark>,
    pub entries: Vec<Entry>,
}

impl Timeline {
    pub fn fault(&self, name: &str) -> Option<&FaultTimeline> {
        self.faults.iter().find(|f| f.fault == name)
    }
}

pub fn ms(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1000.0
}

/// Requests routed to `replica` in `[from, until)`, from every source, in time order.
pub fn routed_to(ev: &Evidence, replica: &str, from: u64, until: u64) -> Vec<Mark> {
    let mut out: Vec<Mark> = ev
        .attempts_to(replica, from, until)
        .map(|(t, req)| mark(t, JOURNAL, format!("attempt of {req} sent to {replica}")))
        .collect();
    out.extend(
        ev.observed(replica, from, says_routed)
            .filter(|o| o.t < until)
            .map(|o| {
                mark(
                    o.t,
                    &o.source,
                    o.detail.clone().unwrap_or_else(|| o.what.clone()),
                )
            }),
    );
    out.extend(
        ev.proxied
            .iter()
            .filter(|p| p.replica == replica && p.t >= from && p.t < until)
            .map(|p| {
                mark(
                    p.t,
                    PROXY,
                    format!(
                        "{} forwarded to {replica}",
                        p.id.as_deref().unwrap_or("a request")
                    ),
                )
            }),
    );
    out.extend(
        ev.requests
            .iter()
            .filter(|r| {
                r.worker.as_deref() == Some(replica) && r.dispatch >= from && r.dispatch < until
            })
            .map(|r| mark(r.dispatch, HEADER, format!("{} served by {replica}", r.id))),
    );
    out.sort_by_key(|m| m.t);
    out
}

/// The first request after `t` routed to another endpoint than `replica`.
fn routed_elsewhere(ev: &Evidence, replica: &str, t: u64) -> Option<Mark> {
    let journal = ev.gateway.iter().flatten().find_map(|g| match &g.entry {
        GatewayEntry::AttemptStart { req, worker, .. } if g.t > t && worker != replica => Some(
            mark(g.t, JOURNAL, format!("attempt of {req} sent to {worker}")),
        ),
        _ => None,
    });
    let header = ev
        .requests
        .iter()
        .filter(|r| r.dispatch > t && r.worker.as_deref().is_some_and(|w| w != replica))
        .min_by_key(|r| r.dispatch)
        .map(|r| {
            mark(
                r.dispatch,
                HEADER,
                format!(
                    "{} served by {}",
                    r.id,
                    r.worker.as_deref().unwrap_or_default()
                ),
            )
        });
    let observed = ev
        .observations
        .iter()
        .find(|o| {
            o.t > t && says_routed(&o.what) && o.replica.as_deref().is_some_and(|x| x != replica)
        })
        .map(|o| mark(o.t, &o.source, o.detail.clone().unwrap_or_default()));
    let proxied = ev
        .proxied
        .iter()
        .find(|p| p.t > t && p.replica != replica)
        .map(|p| {
            mark(
                p.t,
                PROXY,
                format!(
                    "{} forwarded to {}",
                    p.id.as_deref().unwrap_or("a request"),
                    p.replica
                ),
            )
        });
    [journal, header, observed, proxied]
        .into_iter()
        .flatten()
        .min_by_key(|m| m.t)
}

/// Which routing evidence this run has.
pub fn routing_sources(ev: &Evidence) -> Vec<String> {
    let mut s = Vec::new();
    if ev.gateway.is_some() {
        s.push(JOURNAL.to_string());
    }
    let mut obs: Vec<String> = ev
        .observations
        .iter()
        .filter(|o| says_routed(&o.what))
        .map(|o| o.source.clone())
        .collect();
    obs.sort();
    obs.dedup();
    s.extend(obs);
    if ev.has_proxy {
        s.push(PROXY.to_string());
    }
    if ev.requests.iter().any(|r| r.worker.is_some()) {
        s.push(HEADER.to_string());
    }
    s
}

fn degraded_until(ev: &Evidence, t: u64) -> u64 {
    let Some(i) = ev.phases.iter().rposition(|p| p.start <= t) else {
        return ev.load_end();
    };
    ev.phases[i + 1..]
        .iter()
        .find(|p| {
            !matches!(
                p.kind,
                PhaseKind::Fault | PhaseKind::Degraded | PhaseKind::Drain
            )
        })
        .map(|p| p.start)
        .unwrap_or_else(|| ev.load_end())
}

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

fn replacement(ev: &Evidence, f: &FaultRec) -> Replacement {
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

fn detection(ev: &Evidence, f: &FaultRec) -> Option<Mark> {
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

/// A healed fault's endpoint back in service: with no readiness mark, the first
/// request routed to it after the heal shows it ready (and serving).
fn back_after_heal(ev: &Evidence, f: &FaultRec, healed: &Mark, mut r: Replacement) -> Replacement {
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

fn fault_timeline(ev: &Evidence, idx: usize, f: &FaultRec) -> FaultTimeline {
    let healed = ev
        .heals
        .iter()
        .find(|h| h.name == f.name && h.t >= f.t)
        .map(|h| mark(h.t, "haq fault injector", h.detail.clone()));
    let mut replacement = replacement(ev, f);
    if let Some(h) = &healed {
        replacement = back_after_heal(ev, f, h, replacement);
    }
    let sources = routing_sources(ev);
    let removes = facts::removes_endpoint(f);
    let removal = (removes && !sources.is_empty()).then(|| {
        // Traffic to the endpoint once it is back (a replacement ready, a freeze
        // healed) is not traffic to the dead one.
        let back = replacement.ready.as_ref().map(|m| m.t).unwrap_or(u64::MAX);
        let heal = healed.as_ref().map(|m| m.t).unwrap_or(u64::MAX);
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
    });
    let mut in_flight = InFlight::default();
    for r in ev
        .requests
        .iter()
        .filter(|r| r.caught.is_some_and(|c| c.1 == idx))
    {
        in_flight.caught += 1;
        if r.outcome == Outcome::Completed {
            in_flight.recovered += 1;
        } else {
            in_flight.terminated += 1;
        }
        in_flight.settled = in_flight.settled.max(Some(r.end));
    }
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
        in_flight,
        degraded_until: degraded_until(ev, f.t),
        replacement,
        healed,
    }
}

/// Traffic reaching an endpoint this close before its heal was never taken out.
const HEAL_SLACK_US: u64 = 500_000;

/// A second with fewer requests dispatched has no percentile worth judging.
const MIN_SECOND_SAMPLES: u64 = 3;

/// The earliest second `>= from_s` after which every second up to `until_s` with
/// enough samples has p95 TTFT and ITL inside the SLO (ms), if any measured.
pub fn envelope_restored(
    seconds: &[SecondStats],
    from_s: f64,
    until_s: f64,
    ttft_ms: f64,
    itl_ms: f64,
) -> Option<f64> {
    let mut start = None;
    let mut measured = false;
    for s in seconds
        .iter()
        .filter(|s| s.t as f64 + 1.0 > from_s && (s.t as f64) < until_s)
    {
        if s.dispatched < MIN_SECOND_SAMPLES {
            continue;
        }
        let ok = s.ttft_p95.is_none_or(|v| v <= ttft_ms) && s.itl_p95.is_none_or(|v| v <= itl_ms);
        if ok {
            start.get_or_insert((s.t as f64).max(from_s));
            measured |= s.ttft_p95.is_some();
        } else {
            start = None;
            measured = false;
        }
    }
    start.filter(|_| measured)
}

fn full_recovery(
    plan: &Plan,
    ev: &Evidence,
    faults: &[FaultTimeline],
    s: &[SecondStats],
) -> Option<Mark> {
    let removing: Vec<&FaultTimeline> = faults.iter().filter(|f| f.removes).collect();
    if removing.is_empty() {
        return None;
    }
    let serving = removing
        .iter()
        .map(|f| f.replacement.serving.as_ref().map(|m| m.t))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()?;
    let slo = &plan.scenario.slo;
    let from = ev.secs(serving);
    let back = envelope_restored(
        s,
        from,
        ev.secs(ev.load_end()),
        slo.ttft_p95.as_secs_f64() * 1000.0,
        slo.itl_p95.as_secs_f64() * 1000.0,
    )?;
    let t = serving.max(ev.load_start + (back * 1e6) as u64);
    Some(mark(
        t,
        "gateway journal + client latency series",
        format!(
            "{} endpoint(s) back (replaced or healed), ready and receiving traffic; p95 TTFT and ITL inside the SLO from +{:.1}s",
            removing.len(),
            back
        ),
    ))
}

pub fn build(plan: &Plan, ev: &Evidence, seconds: &[SecondStats]) -> Timeline {
    let faults: Vec<FaultTimeline> = ev
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| fault_timeline(ev, i, f))
        .collect();
    let full = full_recovery(plan, ev, &faults, seconds);
    let mut entries = Vec::new();
    let mut push = |t: u64, since: Option<u64>, event: String, m: (&str, String)| {
        entries.push(Entry {
            t,
            at_s: (ev.secs(t) * 1000.0).round() / 1000.0,
            after_fault_ms: since.map(|s| ms(s, t)),
            event,
            source: m.0.to_string(),
            detail: m.1,
        });
    };
    for p in &ev.phases {
        push(
            p.start,
            None,
            format!("phase {} starts", p.name),
            (
                "haq load",
                format!("{:?}, {}/s offered", p.kind, p.rate).to_lowercase(),
            ),
        );
    }
    for f in &faults {
        let at = Some(f.injected);
        fn m(x: &Mark) -> (&str, String) {
            (x.source.as_str(), x.detail.clone())
        }
        let inj = ev.faults.iter().find(|x| x.name == f.fault);
        push(
            f.injected,
            at,
            format!("{} injected ({} {})", f.fault, f.action, f.replica),
            (
                "haq fault injector",
                format!(
                    "verified: {}{}",
                    f.verified,
                    inj.map(|x| format!(" — {}", x.detail)).unwrap_or_default()
                ),
            ),
        );
        if let Some(d) = &f.detected {
            push(d.t, at, format!("{} detected", f.replica), m(d));
        }
        if let Some(r) = &f.removal {
            let detail = match &r.last {
                Some(l) => format!(
                    "last of {} requests routed to {} after the fault: {}",
                    r.routed_after_fault, f.replica, l.detail
                ),
                None => format!("no request was routed to {} after the fault", f.replica),
            };
            let event = if r.until_heal {
                format!("{} got traffic until the heal", f.replica)
            } else {
                format!("traffic removed from {}", f.replica)
            };
            push(
                r.t,
                at,
                event,
                (
                    r.last
                        .as_ref()
                        .map(|l| l.source.as_str())
                        .or(r.sources.first().map(String::as_str))
                        .unwrap_or(JOURNAL),
                    detail,
                ),
            );
        }
        if let Some(s) = f.in_flight.settled {
            push(
                s,
                at,
                "in-flight requests settled".into(),
                (
                    "client trace",
                    format!(
                        "{} caught: {} recovered, {} terminated",
                        f.in_flight.caught, f.in_flight.recovered, f.in_flight.terminated
                    ),
                ),
            );
        }
        // A healed fault's endpoint comes back itself: no replacement.
        let healed_back = f.healed.is_some() && f.replacement.requested.is_none();
        let stages = [
            ("replacement requested", &f.replacement.requested),
            ("replacement started", &f.replacement.started),
            (
                if healed_back {
                    "ready again"
                } else {
                    "replacement ready"
                },
                &f.replacement.ready,
            ),
            (
                if healed_back {
                    "receiving traffic again"
                } else {
                    "replacement receiving traffic"
                },
                &f.replacement.serving,
            ),
            ("replacement failed", &f.replacement.failed),
        ];
        for (label, s) in stages {
            if let Some(s) = s {
                push(s.t, at, format!("{} {label}", f.replica), m(s));
            }
        }
        if let Some(h) = &f.healed {
            push(h.t, at, format!("{} healed", f.fault), m(h));
        }
        push(
            f.degraded_until,
            at,
            "degraded interval ends".into(),
            (
                "haq load",
                format!(
                    "{:.1}s degraded after {}",
                    ms(f.injected, f.degraded_until) / 1000.0,
                    f.fault
                ),
            ),
        );
    }
    if let Some(fr) = &full {
        let first = faults.first().map(|f| f.injected);
        push(
            fr.t,
            first,
            "full recovery".into(),
            (fr.source.as_str(), fr.detail.clone()),
        );
    }
    entries.sort_by(|a, b| a.t.cmp(&b.t).then(a.event.cmp(&b.event)));
    Timeline {
        faults,
        full_recovery: full,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    #[test]
    fn the_standard_kill_has_every_stage_with_its_source() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.obs(13.2, "endpoint watcher", "w2", "not_ready");
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        assert_eq!(f.injected, us(13.0));
        let d = f.detected.as_ref().expect("detected");
        // The earliest observer wins: the gateway at +50 ms, not the watcher at +200.
        assert_eq!((d.t, d.source.as_str()), (us(13.05), JOURNAL));
        let r = f.removal.as_ref().expect("removal");
        assert_eq!(r.routed_after_fault, 0);
        assert_eq!(r.t, f.injected);
        assert!(r.confirmed.as_ref().is_some_and(|c| c.t == us(13.1)));
        assert_eq!(f.degraded_until, us(31.0));
        assert!(j.timeline.full_recovery.is_none());
        let events: Vec<&str> = j
            .timeline
            .entries
            .iter()
            .map(|e| e.event.as_str())
            .collect();
        assert!(events.contains(&"kill-w2 injected (kill w2)"), "{events:?}");
        assert!(events.contains(&"w2 detected"), "{events:?}");
        assert!(events.contains(&"traffic removed from w2"), "{events:?}");
        assert!(events.contains(&"degraded interval ends"), "{events:?}");
        let det = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "w2 detected")
            .expect("entry");
        assert_eq!(det.after_fault_ms, Some(50.0));
        assert_eq!(det.at_s, 12.05);
        // In time order.
        assert!(j.timeline.entries.windows(2).all(|w| w[0].t <= w[1].t));
    }

    #[test]
    fn requests_in_flight_at_the_kill_are_counted_as_recovered_or_terminated() {
        let p = plan(&[]);
        let mut tb = standard(&p);
        tb.req(R::ok("cut", "fault", 12.95, "w2").outcome(Outcome::ExplicitError));
        tb.req(R::ok("retried", "fault", 12.99, "w1").ttft(300.0));
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        assert_eq!(f.in_flight.caught, 1, "{:?}", f.in_flight);
        assert_eq!(f.in_flight.terminated, 1);
    }

    #[test]
    fn replacement_stages_and_full_recovery() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.fault("kill-w2", "w2", 13.0, true);
        tb.removed(13.05, "w2", "connection failed");
        tb.obs(13.5, "haq fault injector", "w2", "replacement_requested");
        tb.obs(14.0, "haq fault injector", "w2", "process_started");
        tb.ready(16.0, "w2");
        tb.steady("fault", 13.1, 16.5, 10.0, rr(&["w1", "w3"]));
        tb.steady("fault", 16.5, 21.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.end(32.0);
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        let rp = &f.replacement;
        assert_eq!(rp.requested.as_ref().map(|m| m.t), Some(us(13.5)));
        assert_eq!(rp.started.as_ref().map(|m| m.t), Some(us(14.0)));
        assert_eq!(
            rp.ready.as_ref().map(|m| (m.t, m.source.as_str())),
            Some((us(16.0), JOURNAL))
        );
        let s = rp.serving.as_ref().expect("serving");
        assert_eq!(s.t, us(16.6));
        // Removal ends at readiness: traffic to the replacement is not traffic to the dead.
        assert_eq!(f.removal.as_ref().map(|r| r.routed_after_fault), Some(0));
        let full = j.timeline.full_recovery.as_ref().expect("full recovery");
        assert!(full.t >= s.t, "{full:?}");
    }

    #[test]
    fn without_a_gateway_journal_the_observers_date_detection() {
        // A `url` target: health checker, readiness and EndpointSlice watchers are the
        // detection sources (docs/evidence.md); the earliest one dates the detection.
        let p = plan(&[]);
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.fault("kill-w2", "w2", 13.0, true);
        tb.obs(13.9, "EndpointSlice watcher", "w2", "endpoint_removed");
        tb.obs(13.4, "readiness probe", "w2", "not_ready");
        tb.obs(13.2, "health checker", "w2", "unhealthy");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.end(32.0);
        let j = tb.judge(&p);
        let f = j.timeline.fault("kill-w2").expect("fault");
        let d = f.detected.as_ref().expect("detected");
        assert_eq!((d.t, d.source.as_str()), (us(13.2), "health checker"));
        // Removal comes from the attribution headers, and says so.
        let r = f.removal.as_ref().expect("removal");
        assert_eq!(r.sources, [HEADER]);
        let e = j
            .timeline
            .entries
            .iter()
            .find(|e| e.event == "traffic removed from w2")
            .expect("removal entry");
        assert_eq!(e.source, HEADER);
    }

    #[test]
    fn haqs_readiness_watch_dates_detection_only_when_the_system_saw_nothing() {
        let watch = crate::trace::READINESS;
        let p = plan(&[]);
        // With the gateway journal: the gateway's detection (+50 ms) is the system's,
        // though haq's poll saw the replica down first.
        let mut tb = standard(&p);
        tb.obs(13.01, watch, "w2", "not_ready");
        let j = tb.judge(&p);
        let d = j.timeline.fault("kill-w2").and_then(|f| f.detected.clone());
        assert_eq!(d.map(|d| d.source), Some(JOURNAL.to_string()));
        // Without a journal or another observer: haq's poll, and it says so.
        let mut tb = Tb::new().without_journal();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.fault("kill-w2", "w2", 13.0, true);
        tb.obs(13.1, watch, "w2", "not_ready");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.end(32.0);
        let j = tb.judge(&p);
        let d = j.timeline.fault("kill-w2").and_then(|f| f.detected.clone());
        assert_eq!(
            d.map(|d| (d.t, d.source)),
            Some((us(13.1), watch.to_string()))
        );
    }
}
