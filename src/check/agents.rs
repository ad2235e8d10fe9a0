//! The agents of a run (`haq run --agents N`, docs/agents.md) as judged: how each
//! ended, as the coordinator recorded it (`agent` observations, `trace::merge`), and
//! the requests of each share the merged trace holds. The validity rule
//! (`check::validity`, rule `agent`) makes the run INVALID, naming the agent, when one
//! was late (not ready by the start deadline), lost (died, was killed, exited
//! non-zero, or never recorded an end), or reported more or fewer sends than the trace
//! holds of its share: in each case the load offered was not the plan's.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::trace::Event;
use crate::trace::merge::{AgentNote, AgentState};
use crate::trace::record::RequestRecord;
use crate::workload::Share;

/// One agent as reported.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AgentHealth {
    pub name: String,
    /// `done`, `late`, `lost`, or `started` (no end recorded).
    pub state: &'static str,
    /// Requests of its share in the trace.
    pub sent: u64,
    /// What it reported sending, when it reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<u64>,
    /// How long before the start deadline it was ready (ms; negative: late).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_margin_ms: Option<f64>,
    /// Its wall clock against the coordinator's (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<f64>,
    /// An agent on another host: half the round trip of the clock exchange that set
    /// its trace time (ms), the most its stamps can be off the coordinator's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_sync_ms: Option<f64>,
    /// An agent on another host: how far its clock drifted from the coordinator's
    /// while it sent (ms, from a second exchange after its share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_drift_ms: Option<f64>,
    /// Its pod (`agents.kubernetes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The agents of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AgentsHealth {
    pub count: u64,
    pub agents: Vec<AgentHealth>,
}

impl AgentsHealth {
    /// How many agents sent what, in one line: `3 agents sent 18 + 17 + 17 requests
    /// (agent-0 18 · agent-1 17 · agent-2 17) · clock offsets within 0.006 ms`.
    pub fn describe(&self) -> String {
        let each: Vec<String> = self
            .agents
            .iter()
            .map(|a| match a.state {
                "done" => format!("{} {}", a.name, a.sent),
                state => format!("{} {} ({state})", a.name, a.sent),
            })
            .collect();
        let total: u64 = self.agents.iter().map(|a| a.sent).sum();
        let offset = self
            .agents
            .iter()
            .filter_map(|a| a.clock_offset_ms)
            .map(f64::abs)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        let sync = self
            .agents
            .iter()
            .filter_map(|a| a.clock_sync_ms)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        format!(
            "{} agents sent {} ({}){}{}",
            self.count,
            crate::scenario::words::plural(total, "request"),
            each.join(" · "),
            offset.map_or(String::new(), |o| format!(
                " · clock offsets within {o:.3} ms"
            )),
            sync.map_or(String::new(), |s| format!(
                " · clocks set over the network within ±{s:.3} ms"
            ))
        )
    }
}

#[derive(Debug, Clone)]
struct Seen {
    state: AgentState,
    note: AgentNote,
    requests: u64,
}

/// The fold: the coordinator's `agent` observations and every request's share.
#[derive(Debug, Clone, Default)]
pub struct AgentAcc {
    count: u64,
    by: BTreeMap<u64, Seen>,
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

impl AgentAcc {
    /// An `agent` observation (any other event is ignored).
    pub fn observe(&mut self, ev: &Event) {
        let Some((state, note)) = AgentNote::read(ev) else {
            return;
        };
        self.count = self.count.max(note.of);
        let seen = self.by.entry(note.share).or_insert(Seen {
            state,
            note: note.clone(),
            requests: 0,
        });
        if state != AgentState::Started {
            seen.state = state;
            seen.note = AgentNote {
                pid: seen.note.pid,
                deadline_us: note.deadline_us.or(seen.note.deadline_us),
                ..note
            };
        }
    }

    /// A request (probes are the coordinator's, not a share's).
    pub fn add(&mut self, r: &RequestRecord) {
        if self.count == 0 || r.probe.is_some() {
            return;
        }
        if let Some(s) = Share::of_id(&r.id, self.count)
            && let Some(seen) = self.by.get_mut(&s)
        {
            seen.requests += 1;
        }
    }

    /// `None` for a run of one process.
    pub fn health(&self) -> Option<AgentsHealth> {
        (self.count > 0).then(|| AgentsHealth {
            count: self.count,
            agents: (0..self.count).map(|k| self.one(k)).collect(),
        })
    }

    fn one(&self, k: u64) -> AgentHealth {
        let Some(s) = self.by.get(&k) else {
            return AgentHealth {
                name: crate::workload::agent_name(k),
                state: "lost",
                sent: 0,
                reported: None,
                ready_margin_ms: None,
                clock_offset_ms: None,
                clock_sync_ms: None,
                clock_drift_ms: None,
                pod: None,
                reason: Some("never started".into()),
            };
        };
        let n = &s.note;
        AgentHealth {
            name: n.agent.clone(),
            state: match s.state {
                AgentState::Started => "started",
                AgentState::Done => "done",
                AgentState::Late => "late",
                AgentState::Lost => "lost",
            },
            sent: s.requests,
            reported: n.sent,
            ready_margin_ms: n
                .ready_us
                .zip(n.deadline_us)
                .map(|(r, d)| ms(d as i64 - r as i64)),
            clock_offset_ms: n.offset_us.map(ms),
            clock_sync_ms: n.sync_rtt_us.map(|r| ms(r as i64) / 2.0),
            clock_drift_ms: n.sync_drift_us.map(ms),
            pod: n.pod.clone(),
            reason: n.reason.clone(),
        }
    }

    /// One sentence per agent that makes the run INVALID.
    pub fn breaches(&self) -> Vec<String> {
        let Some(h) = self.health() else {
            return Vec::new();
        };
        let of = h.count;
        h.agents
            .iter()
            .enumerate()
            .filter_map(|(k, a)| {
                let why = a.reason.as_deref().unwrap_or("no reason recorded");
                let what = match a.state {
                    "done" if a.reported == Some(a.sent) => return None,
                    "done" => format!(
                        "reported {} request(s) sent where the trace holds {} of its share",
                        a.reported.unwrap_or(0),
                        a.sent
                    ),
                    "late" => format!("was late: {why}"),
                    "started" => "recorded no end (the coordinator stopped before it)".into(),
                    _ => format!(
                        "was lost: {why}; {} request(s) of its share in the trace",
                        a.sent
                    ),
                };
                Some(format!(
                    "{} (share {k} of {of}) {what}: the load offered was not the plan's",
                    a.name
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(share: u64) -> AgentNote {
        AgentNote {
            agent: crate::workload::agent_name(share),
            share,
            of: 2,
            deadline_us: Some(2_000_000),
            ..Default::default()
        }
    }

    fn acc(ends: &[(AgentState, AgentNote)]) -> AgentAcc {
        let mut a = AgentAcc::default();
        for k in 0..2 {
            a.observe(&note(k).event(10, AgentState::Started));
        }
        for (s, n) in ends {
            a.observe(&n.event(9_000_000, *s));
        }
        a
    }

    fn done(share: u64, sent: u64) -> (AgentState, AgentNote) {
        let mut n = note(share);
        n.sent = Some(sent);
        n.ready_us = Some(500_000);
        n.offset_us = Some(-12);
        (AgentState::Done, n)
    }

    #[test]
    fn agents_that_sent_their_share_break_nothing() {
        // Neither sent a request (reported 0, the trace holds 0 of each share).
        let a = acc(&[done(0, 0), done(1, 0)]);
        assert!(a.breaches().is_empty(), "{:?}", a.breaches());
        let h = a.health().expect("agents");
        assert_eq!(h.agents[0].ready_margin_ms, Some(1500.0));
        assert_eq!(h.agents[1].clock_offset_ms, Some(-0.012));
        assert!(
            h.describe()
                .starts_with("2 agents sent 0 requests (agent-0 0 · agent-1 0)"),
            "{}",
            h.describe()
        );
        assert!(
            AgentAcc::default().health().is_none(),
            "one process: no agents"
        );
    }

    #[test]
    fn a_late_lost_silent_or_miscounted_agent_is_named() {
        let mut late = note(1);
        late.reason = Some("ready 0.300 s after the start deadline, so it sent nothing".into());
        let a = acc(&[done(0, 0), (AgentState::Late, late)]);
        let b = a.breaches();
        assert_eq!(b.len(), 1, "{b:?}");
        assert!(
            b[0].starts_with("agent-1 (share 1 of 2) was late: ready 0.300 s"),
            "{}",
            b[0]
        );
        let mut lost = note(0);
        lost.reason = Some("killed by signal 9".into());
        let b = acc(&[(AgentState::Lost, lost), done(1, 0)]).breaches();
        assert!(
            b[0].contains("agent-0") && b[0].contains("was lost: killed by signal 9"),
            "{b:?}"
        );
        // No end recorded for agent-1; agent-0 reported sends the trace does not hold.
        let b = acc(&[done(0, 5)]).breaches();
        assert_eq!(b.len(), 2, "{b:?}");
        assert!(
            b[0].contains("reported 5 request(s) sent where the trace holds 0"),
            "{}",
            b[0]
        );
        assert!(
            b[1].contains("agent-1") && b[1].contains("recorded no end"),
            "{}",
            b[1]
        );
    }
}
