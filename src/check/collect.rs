//! The fold of the run-level evidence ([`Evidence`]): every event, journal line and
//! finished request of the single pass over the trace. What it keeps of the
//! per-request items (requests, proxy legs, gateway attempts) is the retention rule's
//! ([`super::retain`]): an item with a request id waits, parked, until its request is
//! folded (kept with it, or for its own time and replica); the rest of every request
//! goes into [`super::facts::Summary`]. Journal kinds no verdict reads are not kept.

use std::collections::{HashMap, HashSet};

use super::evidence::GwItem;
use super::facts::{
    ENGINE_METRICS, EngineSample, Evidence, GwEntry, Healed, Observed, PhaseWindow, Proxied,
    ProxyState, Refused, Replaced, Req, says_routed,
};
use super::fate;
use super::history::{FaultRec, RequestRecord};
use super::retain::{Keep, Retention, Top};
use crate::plan::Plan;
use crate::scenario::PhaseKind;
use crate::trace::{Edge, Event, Outcome, ReplacementStage};
use crate::wire::journal::GatewayEntry;

/// The slowest requests kept per phase (report look lines name five).
const SLOWEST: usize = 5;

/// Where an open proxy leg is: kept (index into `legs`) or parked under its request.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    Kept(usize),
    Parked(String, u64),
}

/// Collects the evidence while the trace is folded.
pub struct EvidenceAcc {
    ev: Evidence,
    retry_after: HashMap<String, String>,
    phase_open: HashMap<String, u64>,
    /// Proxied exchanges not yet ended: (replica, conn) → where the leg is.
    open_legs: HashMap<(String, u64), Slot>,
    /// The run has a gateway journal (its entries arrive through [`Self::gateway`]).
    journal: bool,
    /// Kept items with their order of arrival (sorted by time, then it, at the end).
    gateway: Vec<(u64, GwEntry)>,
    legs: Vec<(u64, Proxied)>,
    /// Items waiting for their request to be folded.
    parked_gw: HashMap<String, Vec<(u64, GwEntry)>>,
    parked_legs: HashMap<String, Vec<(u64, Proxied)>>,
    /// Kept requests' ids and kept attempts (late items join them).
    kept_ids: HashSet<String>,
    kept_attempts: HashSet<String>,
    /// Order of arrival of each kept request, and the slowest of each phase.
    kept_seq: Vec<u64>,
    slowest: HashMap<(String, bool), Top<Req>>,
    /// Dispatch times of the requests in flight.
    dispatch: HashMap<String, u64>,
    seq: u64,
    first_fault: Option<u64>,
    retain: Retention,
    /// How the history checker places a request at a fault (shared with Request-Fate).
    ctx: fate::Ctx,
    plan_phases: Vec<(String, PhaseKind, f64)>,
    /// Each planned phase's (start, end) offset from the start of load, µs.
    plan_offsets: Vec<(u64, u64)>,
}

impl EvidenceAcc {
    pub fn new(plan: &Plan, journal: bool, faults: &[FaultRec], keep: Keep) -> Self {
        EvidenceAcc {
            ev: Evidence {
                every: (keep == Keep::Every).then(Vec::new),
                ..Evidence::default()
            },
            retry_after: HashMap::new(),
            phase_open: HashMap::new(),
            open_legs: HashMap::new(),
            journal,
            gateway: Vec::new(),
            legs: Vec::new(),
            parked_gw: HashMap::new(),
            parked_legs: HashMap::new(),
            kept_ids: HashSet::new(),
            kept_attempts: HashSet::new(),
            kept_seq: Vec::new(),
            slowest: HashMap::new(),
            dispatch: HashMap::new(),
            seq: 0,
            first_fault: faults.iter().map(|f| f.t).min(),
            retain: Retention::new(plan, faults, keep),
            ctx: {
                let mut c = fate::Ctx::new(plan);
                c.journal = journal;
                c
            },
            plan_phases: plan
                .phases
                .iter()
                .map(|p| (p.name.clone(), p.kind, p.rate))
                .collect(),
            plan_offsets: plan
                .phases
                .iter()
                .map(|p| (p.start.as_micros() as u64, p.end().as_micros() as u64))
                .collect(),
        }
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Sees every event before the request fold does.
    pub fn see(&mut self, e: &Event) {
        self.see_t(e.t());
        match e {
            Event::Target { replicas, .. } => self.ev.replicas = replicas.clone(),
            Event::Phase { t, name, edge } => self.see_phase(*t, name, *edge),
            Event::Request { t, id, .. } => {
                self.dispatch.insert(id.clone(), *t);
            }
            Event::Response {
                id,
                retry_after,
                worker,
                ..
            } => {
                if let Some(ra) = retry_after {
                    self.retry_after.insert(id.clone(), ra.clone());
                }
                // Traffic to a faulted endpoint dates the first request sent elsewhere.
                if let Some(&d) = self.dispatch.get(id)
                    && self.retain.on_faulted(worker.as_deref(), d)
                {
                    self.retain.mark(d);
                }
            }
            Event::Heal {
                t,
                name,
                detail,
                replica,
                verified,
            } => {
                self.retain.back(*t, name);
                self.ev.heals.push(Healed {
                    t: *t,
                    name: name.clone(),
                    detail: detail.clone(),
                    replica: replica.clone(),
                    verified: verified.unwrap_or(true),
                })
            }
            Event::Replacement {
                t,
                fault,
                replica,
                stage,
                pid,
                detail,
            } => {
                if *stage == ReplacementStage::Ready {
                    self.retain.back(*t, fault);
                }
                self.retain.mark(*t);
                self.ev.replacements.push(Replaced {
                    t: *t,
                    fault: fault.clone(),
                    replica: replica.clone(),
                    stage: *stage,
                    pid: *pid,
                    detail: detail.clone(),
                })
            }
            Event::ProxyRequest { .. }
            | Event::ProxyEnd { .. }
            | Event::ProxyRefused { .. }
            | Event::ProxyLocal { .. }
            | Event::ProxyWatch { .. }
            | Event::ProxyListener { .. } => self.see_proxy(e),
            Event::Observation {
                t,
                source,
                replica,
                what,
                detail,
            } => {
                if !says_routed(what) {
                    self.retain.mark(*t);
                }
                self.ev.observations.push(Observed {
                    t: *t,
                    source: source.clone(),
                    replica: replica.clone(),
                    what: what.clone(),
                    detail: detail.clone(),
                })
            }
            Event::EngineMetrics { t, replica, m, .. } => {
                self.ev.engine_metrics.push(EngineSample {
                    t: *t,
                    replica: replica.clone(),
                    v: ENGINE_METRICS.map(|k| m.get(k).copied().unwrap_or(f64::NAN)),
                })
            }
            _ => {}
        }
    }

    fn see_phase(&mut self, t: u64, name: &str, edge: Edge) {
        self.retain.phase(t, name, edge == Edge::Start);
        match edge {
            Edge::Start => {
                self.phase_open.insert(name.to_string(), t);
            }
            Edge::End => {
                if let Some(start) = self.phase_open.remove(name) {
                    self.close_phase(name, start, t);
                }
            }
        }
    }

    /// What haq's proxy wrote: its legs, the connects it saw refused, and what it
    /// could see (its watch, each listener).
    fn see_proxy(&mut self, e: &Event) {
        match e {
            Event::ProxyRequest {
                t,
                replica,
                id,
                conn,
                ..
            } => self.see_leg(*t, replica, id, *conn),
            Event::ProxyRefused {
                t,
                replica,
                peer,
                how,
            } => {
                self.ev.has_proxy = true;
                if !self.journal {
                    // Without a journal, a refused connect is dead traffic when a
                    // request was in flight looking for an upstream.
                    self.retain.point(*t);
                    self.retain.mark(*t);
                }
                self.ev.refused.push(Refused {
                    t: *t,
                    replica: replica.clone(),
                    peer: peer.clone(),
                    how: *how,
                });
            }
            Event::ProxyWatch {
                t,
                watching,
                detail,
            } => {
                self.retain.mark(*t);
                self.ev.proxy_states.push(ProxyState {
                    t: *t,
                    replica: None,
                    open: *watching,
                    detail: detail.clone(),
                })
            }
            Event::ProxyListener { t, replica, open } => {
                self.retain.mark(*t);
                self.ev.proxy_states.push(ProxyState {
                    t: *t,
                    replica: Some(replica.clone()),
                    open: *open,
                    detail: String::new(),
                })
            }
            Event::ProxyEnd {
                t,
                replica,
                conn,
                status,
                end,
                ..
            } => {
                let leg = match self.open_legs.remove(&(replica.clone(), *conn)) {
                    Some(Slot::Kept(i)) => self.legs.get_mut(i).map(|l| &mut l.1),
                    Some(Slot::Parked(id, seq)) => self
                        .parked_legs
                        .get_mut(&id)
                        .and_then(|v| v.iter_mut().find(|l| l.0 == seq))
                        .map(|l| &mut l.1),
                    None => None,
                };
                if let Some(p) = leg {
                    p.status = *status;
                    p.end = Some((*t, *end));
                }
            }
            _ => {}
        }
    }

    /// A request haq's proxy forwarded: kept now, or parked under its request.
    fn see_leg(&mut self, t: u64, replica: &str, id: &Option<String>, conn: u64) {
        self.ev.has_proxy = true;
        self.ev.summary.proxied_to.insert(replica.to_string());
        if self.retain.on_faulted(Some(replica), t) {
            self.retain.mark(t);
        }
        let leg = Proxied {
            t,
            replica: replica.to_string(),
            id: id.clone(),
            conn,
            status: None,
            end: None,
        };
        let seq = self.next();
        let key = (replica.to_string(), conn);
        match id {
            Some(id) if self.retain.bounded() => {
                self.parked_legs
                    .entry(id.clone())
                    .or_default()
                    .push((seq, leg));
                self.open_legs.insert(key, Slot::Parked(id.clone(), seq));
            }
            _ if self.keeps_item(t, replica) => {
                self.open_legs.insert(key, Slot::Kept(self.legs.len()));
                self.legs.push((seq, leg));
            }
            _ => {
                self.open_legs.remove(&key);
            }
        }
    }

    /// An item at `t` routed to `replica`, on its own (not its request's) account.
    fn keeps_item(&self, t: u64, replica: &str) -> bool {
        self.retain.keeps(t, t, [Some(replica), None])
    }

    /// Sees the time of an event that says nothing else to these checks (a chunk).
    pub fn see_t(&mut self, t: u64) {
        self.ev.last_t = self.ev.last_t.max(t);
    }

    /// A gateway journal line at trace time `t`: the kinds the verdicts read.
    pub fn gateway(&mut self, t: u64, item: &GwItem) {
        let GwItem::Known(entry) = item else {
            return;
        };
        let seq = self.next();
        let g = GwEntry {
            t,
            entry: entry.clone(),
        };
        if !self.retain.bounded() {
            self.gateway.push((seq, g));
            return;
        }
        match entry {
            GatewayEntry::UpstreamRemoved { .. } | GatewayEntry::UpstreamReady { .. } => {
                self.retain.mark(t);
                self.gateway.push((seq, g));
            }
            GatewayEntry::AttemptStart { req, worker, .. }
            | GatewayEntry::AttemptEnd { req, worker, .. } => {
                if matches!(entry, GatewayEntry::AttemptStart { .. })
                    && self.retain.on_faulted(Some(worker), t)
                {
                    self.retain.mark(t);
                }
                self.parked_gw
                    .entry(req.clone())
                    .or_default()
                    .push((seq, g));
            }
            _ => {}
        }
    }

    fn close_phase(&mut self, name: &str, start: u64, end: u64) {
        let (kind, rate) = self
            .plan_phases
            .iter()
            .find(|p| p.0 == name)
            .map(|p| (p.1, p.2))
            .unwrap_or((PhaseKind::Baseline, 0.0));
        self.ev.phases.push(PhaseWindow {
            name: name.into(),
            kind,
            start,
            end,
            rate,
        });
    }

    /// A request the verdicts read on its own: caught by a fault, a probe, not simply
    /// completed, in an overload phase, or in a kept window.
    fn keeps(&self, q: &Req) -> bool {
        !self.retain.bounded()
            || q.caught.is_some()
            || q.probe.is_some()
            || q.outcome != Outcome::Completed
            || q.truncated()
            || self.retain.overload_phase(&q.phase)
            || self.retain.keeps(
                q.dispatch,
                q.end,
                [q.worker.as_deref(), q.proxy_worker.as_deref()],
            )
    }

    pub fn request(&mut self, r: &RequestRecord, faults: &[FaultRec]) {
        self.dispatch.remove(&r.id);
        let ra = self.retry_after.remove(&r.id);
        let mut kept = false;
        if let Some(mut q) = Req::from_record(&self.ctx, r, faults) {
            q.retry_after = ra;
            self.ev.summary.add(&q, self.first_fault);
            if let Some(all) = self.ev.every.as_mut() {
                all.push(q.clone());
            }
            let seq = self.next();
            kept = self.keeps(&q);
            if kept {
                self.kept_ids.insert(q.id.clone());
                self.kept_seq.push(seq);
                self.ev.requests.push(q);
            } else if q.probe.is_none() {
                self.offer_slowest(seq, q);
            }
        }
        self.settle(&r.id, kept);
    }

    /// A completed request not kept: among the slowest of its phase, for the report.
    fn offer_slowest(&mut self, seq: u64, q: Req) {
        let e2e = q.e2e();
        if q.protected {
            self.slowest
                .entry((q.phase.clone(), true))
                .or_insert_with(|| Top::new(SLOWEST))
                .offer(e2e, seq, || q.clone());
        }
        self.slowest
            .entry((q.phase.clone(), false))
            .or_insert_with(|| Top::new(SLOWEST))
            .offer(e2e, seq, || q);
    }

    /// The parked items of request `id`, now that it is folded (`kept`: with it).
    fn settle(&mut self, id: &str, kept: bool) {
        for (seq, leg) in self.parked_legs.remove(id).unwrap_or_default() {
            let key = (leg.replica.clone(), leg.conn);
            let open = self.open_legs.get(&key) == Some(&Slot::Parked(id.to_string(), seq));
            if kept || self.keeps_item(leg.t, &leg.replica) {
                if open {
                    self.open_legs.insert(key, Slot::Kept(self.legs.len()));
                }
                self.legs.push((seq, leg));
            } else if open {
                self.open_legs.remove(&key);
            }
        }
        let items = self.parked_gw.remove(id).unwrap_or_default();
        for (seq, g) in &items {
            if let GatewayEntry::AttemptStart {
                attempt, worker, ..
            } = &g.entry
                && (kept || self.keeps_item(g.t, worker))
            {
                self.kept_attempts.insert(attempt.clone());
                self.gateway.push((*seq, g.clone()));
            }
        }
        for (seq, g) in items {
            if let GatewayEntry::AttemptEnd {
                attempt, worker, ..
            } = &g.entry
                && (kept || self.kept_attempts.contains(attempt) || self.keeps_item(g.t, worker))
            {
                self.gateway.push((seq, g));
            }
        }
    }

    /// What it holds per request: requests, legs, journal entries, parked items and
    /// requests in flight (the regression test's measure).
    pub fn held(&self) -> usize {
        self.ev.requests.len()
            + self.legs.len()
            + self.gateway.len()
            + self.parked_gw.values().map(Vec::len).sum::<usize>()
            + self.parked_legs.values().map(Vec::len).sum::<usize>()
            + self.kept_ids.len()
            + self.kept_attempts.len()
            + self.dispatch.len()
            + self.retry_after.len()
            + self.slowest.values().map(Top::len).sum::<usize>()
            + self.retain.held()
    }

    pub fn finish(mut self, faults: &[FaultRec]) -> Evidence {
        // Items whose request never ended (or came after it): kept for their own time,
        // or for a kept request.
        let parked: Vec<String> = self
            .parked_legs
            .keys()
            .chain(self.parked_gw.keys())
            .cloned()
            .collect();
        for id in parked {
            let kept = self.kept_ids.contains(&id);
            self.settle(&id, kept);
        }
        self.place_phases();
        self.ev.faults = faults.to_vec();
        self.ev.observations.sort_by_key(|o| o.t);
        self.ev.replacements.sort_by_key(|r| r.t);
        self.legs.sort_by_key(|(seq, p)| (p.t, *seq));
        self.ev.proxied = self.legs.drain(..).map(|l| l.1).collect();
        self.ev.refused.sort_by_key(|r| r.t);
        self.ev.proxy_states.sort_by_key(|p| p.t);
        self.ev.heals.sort_by_key(|h| h.t);
        if self.journal {
            self.gateway.sort_by_key(|(seq, g)| (g.t, *seq));
            self.ev.gateway = Some(self.gateway.drain(..).map(|g| g.1).collect());
        }
        self.merge_slowest();
        self.ev
    }

    /// The slowest requests not kept join the kept ones, in their order of arrival.
    fn merge_slowest(&mut self) {
        if self.slowest.is_empty() {
            return;
        }
        let mut all: Vec<(u64, Req)> = std::mem::take(&mut self.kept_seq)
            .into_iter()
            .zip(std::mem::take(&mut self.ev.requests))
            .collect();
        for top in std::mem::take(&mut self.slowest).into_values() {
            all.extend(top.into_items());
        }
        all.sort_by_key(|(seq, _)| *seq);
        all.dedup_by_key(|(seq, _)| *seq);
        self.ev.requests = all.into_iter().map(|(_, q)| q).collect();
    }

    /// Phases cut short (an interrupted run) end at the last time seen; the plan's
    /// phases are placed from the start of load.
    fn place_phases(&mut self) {
        let open: Vec<(String, u64)> = self.phase_open.drain().collect();
        for (name, start) in open {
            let end = self.ev.last_t;
            self.close_phase(&name, start, end);
        }
        self.ev.phases.sort_by_key(|p| p.start);
        self.ev.load_start = self.ev.phases.first().map(|p| p.start).unwrap_or(0);
        let at = self.ev.load_start;
        self.ev.planned = self
            .plan_phases
            .iter()
            .zip(&self.plan_offsets)
            .map(|((name, kind, rate), (s, e))| PhaseWindow {
                name: name.clone(),
                kind: *kind,
                start: at + s,
                end: at + e,
                rate: *rate,
            })
            .collect();
    }
}
