//! The run-level evidence and the timeline, folded in the same pass over the trace as
//! the per-request checks: [`RunAcc`] sees every event and every finished request,
//! [`RunAcc::finish`] builds what the run-level verdicts read ([`RunLevel`]).

use super::capacity::adaptive::Search;
use super::capacity::{Window, WindowAcc};
use super::collect::EvidenceAcc;
use super::evidence::GwItem;
use super::facts::Evidence;
use super::history::{FaultRec, RequestRecord};
use super::retain::Keep;
use super::timeline::{self, Timeline};
use crate::metrics::{Measured, SecondStats};
use crate::plan::Plan;
use crate::trace::Event;

pub struct RunAcc {
    evidence: EvidenceAcc,
    window: WindowAcc,
}

/// What the run-level verdicts are judged from.
#[derive(Debug, Clone)]
pub struct RunLevel {
    pub evidence: Evidence,
    pub timeline: Timeline,
    /// Protected traffic sent after the fault (Capacity).
    pub window: Window,
    /// The capacity search (Q4), when the scenario has one.
    pub capacity: Option<Search>,
}

impl RunLevel {
    /// The protected traffic of the degraded interval, when a fault made one.
    pub fn degraded(&self) -> Option<Window> {
        self.timeline
            .faults
            .iter()
            .any(|f| f.removes)
            .then(|| self.window.clone())
    }
}

impl RunAcc {
    pub fn new(plan: &Plan, journal: bool, faults: &[FaultRec]) -> Self {
        Self::keeping(plan, journal, faults, Keep::Every)
    }

    /// As [`RunAcc::new`], keeping what `keep` says of the per-request items.
    pub fn keeping(plan: &Plan, journal: bool, faults: &[FaultRec], keep: Keep) -> Self {
        RunAcc {
            evidence: EvidenceAcc::new(plan, journal, faults, keep),
            window: WindowAcc::new(plan, faults),
        }
    }

    pub fn see(&mut self, e: &Event) {
        self.evidence.see(e);
    }

    /// [`RunAcc::see`] for a chunk: only its time counts here.
    pub fn see_t(&mut self, t: u64) {
        self.evidence.see_t(t);
    }

    pub fn gateway(&mut self, t: u64, item: &GwItem) {
        self.evidence.gateway(t, item);
    }

    /// `caught`: a fault caught the request in flight (Request-Fate judges it).
    pub fn request(&mut self, r: &RequestRecord, m: &Measured, faults: &[FaultRec], caught: bool) {
        self.evidence.request(r, faults);
        self.window.add(r, m, caught);
    }

    /// `capacity`: the run's capacity search, judged from its directory.
    pub fn finish(
        self,
        plan: &Plan,
        faults: &[FaultRec],
        seconds: &[SecondStats],
        capacity: Option<Search>,
    ) -> RunLevel {
        let evidence = self.evidence.finish(faults);
        let timeline = timeline::build(plan, &evidence, seconds);
        RunLevel {
            window: self.window.finish(),
            capacity,
            evidence,
            timeline,
        }
    }
}
