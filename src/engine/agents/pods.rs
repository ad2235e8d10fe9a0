//! How each agent of the Indexed Job ended, from the results it returned to the
//! endpoint and what its pod did (listed every `poll`): done or late when its result
//! came; lost when its pod failed, or exited without its result having come, or when
//! the coordinator stops waiting (the load over, the drain and the grace past) with no
//! result — the pod still pending (never started: unschedulable, image not pulled),
//! still running, or never made. Each end is written to the trace as it is known.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::ObjectList;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::assignment::{AgentResult, LOG_FILE, RESULT_FILE};
use super::setup::{self, Api};
use crate::target::kube::jobs::{self, AgentPod};
use crate::trace::merge::{AgentNote, AgentState};
use crate::trace::{Clock, TraceWriter};

/// What the watch needs.
pub(super) struct Watch {
    pub api: Arc<Api>,
    pub token: String,
    /// Each share's note as started.
    pub notes: Vec<AgentNote>,
    pub clock: Clock,
    pub tw: TraceWriter,
    pub poll: std::time::Duration,
}

/// The watch's end.
#[derive(Debug, Default)]
pub(super) struct Ended {
    /// The last time a client of any agent went away before its answer ended.
    pub left_us: u64,
    /// The agent pods last seen (their logs are copied).
    pub pods: Vec<AgentPod>,
}

struct State {
    w: Watch,
    /// Shares not yet ended, with their pod as last seen.
    open: BTreeMap<u64, Option<AgentPod>>,
    /// Pods seen succeeded with no result yet (given one more poll).
    succeeded: BTreeMap<u64, u32>,
    pods: BTreeMap<String, AgentPod>,
    left_us: u64,
    /// The last error listing the pods.
    list_error: Option<String>,
}

impl State {
    fn end(&mut self, k: u64, state: AgentState, note: AgentNote) {
        if self.open.remove(&k).is_some() {
            self.w.tw.emit(note.event(self.w.clock.now_us(), state));
        }
    }

    fn note(&self, k: u64) -> AgentNote {
        let mut n = self.w.notes[k as usize].clone();
        n.pod = self.open.get(&k).cloned().flatten().map(|p| p.name);
        n
    }

    fn result(&mut self, k: u64, r: AgentResult) {
        if !self.open.contains_key(&k) {
            return;
        }
        self.left_us = self.left_us.max(r.left_us);
        let (state, note) = setup::reported(self.note(k), &r);
        self.end(k, state, note);
    }

    fn lost(&mut self, k: u64, reason: String) {
        let mut note = self.note(k);
        note.reason = Some(reason);
        self.end(k, AgentState::Lost, note);
    }

    /// The pods listed, each its share's (the pods of ended shares kept for their logs).
    fn seen(&mut self, list: ObjectList<Pod>) {
        for p in list.items.iter().map(AgentPod::of) {
            self.pods.insert(p.name.clone(), p.clone());
            if let Some(k) = p.index.filter(|k| self.open.contains_key(k)) {
                self.open.insert(k, Some(p));
            }
        }
    }

    /// A failed pod's agent is lost; a succeeded one's, when its result has not come
    /// by the next poll.
    fn judge(&mut self) {
        let open: Vec<(u64, AgentPod)> = self
            .open
            .iter()
            .filter_map(|(k, p)| Some((*k, p.clone()?)))
            .collect();
        for (k, p) in open {
            match p.phase.as_str() {
                "Failed" => self.lost(k, format!("its {} (its log: {LOG_FILE})", p.describe())),
                "Succeeded" => {
                    let seen = self.succeeded.entry(k).or_insert(0);
                    *seen += 1;
                    if *seen > 1 {
                        self.lost(
                            k,
                            format!(
                                "its pod {} exited 0 but its {RESULT_FILE} never reached haq",
                                p.name
                            ),
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The coordinator stopped waiting: every share still open is lost.
    fn give_up(&mut self) {
        let open: Vec<(u64, Option<AgentPod>)> =
            self.open.iter().map(|(k, p)| (*k, p.clone())).collect();
        for (k, pod) in open {
            let why = match pod {
                Some(p) if p.phase == "Pending" => format!("never started: its {}", p.describe()),
                Some(p) => format!(
                    "returned no result by the end of the run: its {}",
                    p.describe()
                ),
                None => format!(
                    "never started: no pod of its index was seen{}",
                    self.list_error
                        .as_ref()
                        .map(|e| format!(" (listing the pods: {e})"))
                        .unwrap_or_default()
                ),
            };
            self.lost(k, why);
        }
    }
}

/// Watches until every agent ended or `stop`; writes each end to the trace.
pub(super) async fn watch(
    w: Watch,
    mut results: mpsc::UnboundedReceiver<(u64, AgentResult)>,
    stop: CancellationToken,
) -> Ended {
    let n = w.notes.len() as u64;
    let mut s = State {
        w,
        open: (0..n).map(|k| (k, None)).collect(),
        succeeded: BTreeMap::new(),
        pods: BTreeMap::new(),
        left_us: 0,
        list_error: None,
    };
    while !s.open.is_empty() {
        let call = jobs::list_agent_pods(&s.w.api.ns, &s.w.token);
        match s.w.api.send::<ObjectList<Pod>>(call).await {
            Ok(list) => s.seen(list),
            Err(e) => s.list_error = Some(e.to_string()),
        }
        // A result sent before its pod exited is taken before the pod's end.
        while let Ok((k, r)) = results.try_recv() {
            s.result(k, r);
        }
        s.judge();
        if s.open.is_empty() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(s.w.poll) => {}
            Some((k, r)) = results.recv() => s.result(k, r),
            _ = stop.cancelled() => {
                while let Ok((k, r)) = results.try_recv() {
                    s.result(k, r);
                }
                s.give_up();
            }
        }
    }
    Ended {
        left_us: s.left_us,
        pods: s.pods.into_values().collect(),
    }
}
