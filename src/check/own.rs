//! Whether haq's own machine, not the target, was the limit of a phase (issue 19 item
//! 4): haq's CPU from the `own_load` lines the dispatcher writes at each phase edge,
//! and — when haq runs the sim — the sim engines' stalls from their journals (a step
//! published later than the next one was due to end: modelled time the machine did
//! not give the engine). A capacity-search step is marked "limit is the load
//! generator" by [`PhaseOwn::limits`] (`check::capacity::steps`); a plain run is not
//! judged by it (its validity rule reads haq's sends).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::trace::{Edge, Event};
use crate::wire::journal::WorkerEntry;

/// More than this share of one core used by haq's dispatcher thread, or of every
/// runtime worker's time busy: haq's client was the limit.
pub const CPU_MAX: f64 = 0.9;

/// More than this share of a sim engine's time lost to stalls: the machine haq runs
/// the sim on, not the modelled cluster, set the pace.
pub const SIM_LOST_MAX: f64 = 0.02;

/// haq's own load in one phase.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PhaseOwn {
    pub phase: String,
    /// Between the phase's two `own_load` lines (s).
    pub wall_s: f64,
    /// The dispatcher thread's CPU, in cores (0–1).
    pub dispatch_cpu: Option<f64>,
    /// The runtime workers' busy time, as a share of their time (0–1).
    pub runtime_busy: Option<f64>,
    pub workers: u32,
    /// haq's whole process, in cores (evidence; shared with whatever else runs in it).
    pub process_cpu: Option<f64>,
    /// Modelled time each sim worker lost to stalls in the phase (s), by worker.
    pub sim_lost_s: BTreeMap<String, f64>,
}

impl PhaseOwn {
    /// Why haq's client was the limit in this phase (empty: it was not).
    pub fn client_limits(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(c) = self.dispatch_cpu.filter(|c| *c > CPU_MAX) {
            out.push(format!(
                "haq's dispatcher thread used {:.0}% of a core in phase {} (above {:.0}%): haq's own client set the pace",
                c * 100.0,
                self.phase,
                CPU_MAX * 100.0
            ));
        }
        if let Some(b) = self.runtime_busy.filter(|b| *b > CPU_MAX) {
            out.push(format!(
                "haq's {} runtime worker(s) were busy {:.0}% of the time in phase {} (above {:.0}%): haq's own client set the pace",
                self.workers,
                b * 100.0,
                self.phase,
                CPU_MAX * 100.0
            ));
        }
        out
    }

    /// Why the machine haq runs the sim on was the limit in this phase (empty: it
    /// was not): a sim engine lost more than [`SIM_LOST_MAX`] of its time to stalls.
    pub fn machine_limits(&self) -> Vec<String> {
        let Some((w, lost)) = self
            .sim_lost_s
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .filter(|_| self.wall_s > 0.0)
        else {
            return Vec::new();
        };
        let share = lost / self.wall_s;
        if share <= SIM_LOST_MAX {
            return Vec::new();
        }
        vec![format!(
            "the sim engine {w} fell behind its model by {:.1}% of phase {} ({:.0} ms of stalls longer than a step; above {:.0}%): the machine haq runs the sim on, not the modelled cluster, set the pace",
            share * 100.0,
            self.phase,
            lost * 1000.0,
            SIM_LOST_MAX * 100.0
        )]
    }
}

/// Folds the `own_load` lines and the sim workers' stalls, by phase.
#[derive(Debug, Default)]
pub struct OwnAcc {
    /// The phase running now, and its start sample.
    open: Option<(String, Sample)>,
    /// The phase the next stall belongs to (the last one started).
    current: Option<String>,
    done: Vec<PhaseOwn>,
    lost: BTreeMap<String, BTreeMap<String, f64>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    t: u64,
    dispatch: u64,
    busy: u64,
    workers: u32,
    process: u64,
}

impl OwnAcc {
    pub fn observe(&mut self, ev: &Event) {
        match ev {
            Event::Phase {
                name,
                edge: Edge::Start,
                ..
            } => self.current = Some(name.clone()),
            Event::OwnLoad {
                t,
                phase,
                edge,
                dispatch_cpu_us,
                busy_us,
                workers,
                process_cpu_us,
            } => {
                let s = Sample {
                    t: *t,
                    dispatch: *dispatch_cpu_us,
                    busy: *busy_us,
                    workers: *workers,
                    process: *process_cpu_us,
                };
                match edge {
                    Edge::Start => self.open = Some((phase.clone(), s)),
                    Edge::End => self.close(phase, s),
                }
            }
            _ => {}
        }
    }

    fn close(&mut self, phase: &str, end: Sample) {
        let Some((name, start)) = self.open.take().filter(|o| o.0 == phase) else {
            return;
        };
        let wall = end.t.saturating_sub(start.t) as f64;
        let share = |a: u64, b: u64, per: f64| {
            (wall > 0.0 && b >= a).then(|| (b - a) as f64 / (wall * per))
        };
        self.done.push(PhaseOwn {
            phase: name,
            wall_s: wall / 1e6,
            dispatch_cpu: share(start.dispatch, end.dispatch, 1.0),
            runtime_busy: share(start.busy, end.busy, f64::from(end.workers.max(1))),
            workers: end.workers,
            process_cpu: share(start.process, end.process, 1.0),
            sim_lost_s: BTreeMap::new(),
        });
    }

    /// A sim worker's journal line: its stalls count in the phase running then.
    pub fn worker(&mut self, e: &WorkerEntry) {
        if let (WorkerEntry::Stalled { worker, lost_us }, Some(p)) = (e, &self.current) {
            *self
                .lost
                .entry(p.clone())
                .or_default()
                .entry(worker.clone())
                .or_default() += *lost_us as f64 / 1e6;
        }
    }

    pub fn finish(mut self) -> Vec<PhaseOwn> {
        for p in &mut self.done {
            if let Some(l) = self.lost.remove(&p.phase) {
                p.sim_lost_s = l;
            }
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(t: u64, phase: &str, edge: Edge, dispatch: u64, busy: u64) -> Event {
        Event::OwnLoad {
            t,
            phase: phase.into(),
            edge,
            dispatch_cpu_us: dispatch,
            busy_us: busy,
            workers: 2,
            process_cpu_us: dispatch * 2,
        }
    }

    /// 10 s of phase `step`: the dispatcher used `dispatch` µs of CPU, the two
    /// runtime workers were busy `busy` µs in all, sim worker w1 lost `lost` µs.
    fn phase(dispatch: u64, busy: u64, lost: u64) -> PhaseOwn {
        let mut a = OwnAcc::default();
        a.observe(&Event::Phase {
            t: 1_000_000,
            name: "step".into(),
            edge: Edge::Start,
        });
        a.observe(&own(1_000_000, "step", Edge::Start, 5_000, 7_000));
        a.worker(&WorkerEntry::Stalled {
            worker: "w1".into(),
            lost_us: lost,
        });
        a.observe(&own(
            11_000_000,
            "step",
            Edge::End,
            5_000 + dispatch,
            7_000 + busy,
        ));
        let v = a.finish();
        assert_eq!(v.len(), 1);
        v[0].clone()
    }

    #[test]
    fn a_phase_where_haqs_client_used_a_whole_core_is_its_own_limit() {
        // 3 s of CPU in 10 s, workers busy 40%: not the limit.
        let p = phase(3_000_000, 8_000_000, 0);
        assert_eq!(p.wall_s, 10.0);
        assert_eq!(p.dispatch_cpu, Some(0.3));
        assert_eq!(p.runtime_busy, Some(0.4));
        assert!(p.client_limits().is_empty() && p.machine_limits().is_empty());
        // The dispatcher thread on a core 95% of the time: the load generator.
        let p = phase(9_500_000, 8_000_000, 0);
        let why = p.client_limits();
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].contains("dispatcher thread used 95% of a core in phase step"),
            "{why:?}"
        );
        // Every runtime worker busy 92% of the time: the load generator too.
        let p = phase(1_000_000, 18_400_000, 0);
        assert!(
            p.client_limits()[0].contains("busy 92% of the time"),
            "{:?}",
            p.client_limits()
        );
    }

    #[test]
    fn a_sim_engine_that_lost_more_than_2_percent_to_stalls_is_the_machines_limit() {
        // 150 ms of 10 s (1.5%): within; 350 ms (3.5%): the machine set the pace.
        assert!(phase(0, 0, 150_000).machine_limits().is_empty());
        let why = phase(0, 0, 350_000).machine_limits();
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].contains("w1 fell behind its model by 3.5% of phase step"),
            "{why:?}"
        );
        assert!(why[0].contains("350 ms"), "{why:?}");
    }
}
