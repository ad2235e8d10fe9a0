//! Fault hooks at the token-loop points of SPEC M9, armed through `POST /admin/faults`.
//! A hook fires once: the worker journals the firing (flushed to disk), prints one line
//! on stderr and SIGKILLs itself at that exact point.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::sim::journal::Journal;
use crate::wire::journal::WorkerEntry;

/// Where in the token loop a hook fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// During the prefill of the request, before any byte of its stream body.
    Prefill,
    /// Output event `k` computed, its SSE event not written.
    BeforeEvent,
    /// Right after SSE event `k` was written and flushed to the socket.
    AfterEvent,
    /// Right after the tool call was executed at the tool service, before its delta is
    /// written.
    AfterToolCall,
}

impl Point {
    pub fn as_str(self) -> &'static str {
        match self {
            Point::Prefill => "prefill",
            Point::BeforeEvent => "before_event",
            Point::AfterEvent => "after_event",
            Point::AfterToolCall => "after_tool_call",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// SIGKILL the worker process.
    #[default]
    Crash,
}

/// Body of `POST /admin/faults`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmRequest {
    pub point: Point,
    /// Output event index (0-based) for `before_event` / `after_event`.
    #[serde(default)]
    pub k: u32,
    /// Only the request with this `x-request-id`; absent = the next request that
    /// reaches the point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default)]
    pub action: Action,
}

/// An armed hook, as `GET /admin/state` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Armed {
    pub id: String,
    #[serde(flatten)]
    pub spec: ArmRequest,
}

pub struct Faults {
    worker: String,
    any: AtomicBool,
    seq: AtomicU64,
    armed: Mutex<Vec<Armed>>,
    journal: Journal,
}

impl Faults {
    pub fn new(worker: String, journal: Journal) -> Faults {
        Faults {
            worker,
            any: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            armed: Mutex::new(Vec::new()),
            journal,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Armed>> {
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn arm(&self, spec: ArmRequest) -> String {
        let id = format!("f{}", self.seq.fetch_add(1, Ordering::Relaxed) + 1);
        self.journal.write(WorkerEntry::FaultArmed {
            worker: self.worker.clone(),
            id: id.clone(),
            point: spec.point.as_str().into(),
            k: spec.k,
            request_id: spec.request_id.clone(),
        });
        let mut g = self.lock();
        g.push(Armed {
            id: id.clone(),
            spec,
        });
        self.any.store(true, Ordering::Release);
        id
    }

    /// Disarms every hook; returns how many were armed.
    pub fn disarm_all(&self) -> usize {
        let mut g = self.lock();
        let n = g.len();
        g.clear();
        self.any.store(false, Ordering::Release);
        n
    }

    pub fn list(&self) -> Vec<Armed> {
        self.lock().clone()
    }

    /// Takes the first hook armed for `point` (and event `k` for the event points) that
    /// matches request `rid`. Cheap when nothing is armed.
    pub fn take(&self, point: Point, k: u32, rid: &str) -> Option<Armed> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut g = self.lock();
        let i = g.iter().position(|a| {
            a.spec.point == point
                && (!matches!(point, Point::BeforeEvent | Point::AfterEvent) || a.spec.k == k)
                && a.spec.request_id.as_deref().is_none_or(|r| r == rid)
        })?;
        let a = g.remove(i);
        self.any.store(!g.is_empty(), Ordering::Release);
        Some(a)
    }

    /// Fires a hook: journal line on disk, one stderr line, SIGKILL to this process.
    pub fn fire(&self, a: &Armed, rid: &str, attempt: Option<&str>) -> ! {
        self.journal.write(WorkerEntry::FaultFired {
            worker: self.worker.clone(),
            id: a.id.clone(),
            point: a.spec.point.as_str().into(),
            k: a.spec.k,
            req: rid.into(),
            attempt: attempt.map(str::to_string),
        });
        self.journal.flush();
        eprintln!(
            "haq sim worker {}: fault {} fired at {} (k={}) for request {rid}; SIGKILL",
            self.worker,
            a.id,
            a.spec.point.as_str(),
            a.spec.k
        );
        // SAFETY: kill(2) on our own pid with SIGKILL; nothing is touched afterwards.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(point: Point, k: u32, rid: Option<&str>) -> ArmRequest {
        ArmRequest {
            point,
            k,
            request_id: rid.map(str::to_string),
            action: Action::Crash,
        }
    }

    #[test]
    fn hooks_match_point_event_and_request_once() {
        let f = Faults::new("w1".into(), Journal::none());
        assert!(f.take(Point::Prefill, 0, "r1").is_none());
        f.arm(spec(Point::AfterEvent, 3, Some("r2")));
        f.arm(spec(Point::Prefill, 9, None));
        assert!(
            f.take(Point::AfterEvent, 3, "r1").is_none(),
            "other request"
        );
        assert!(f.take(Point::AfterEvent, 2, "r2").is_none(), "other event");
        assert!(f.take(Point::BeforeEvent, 3, "r2").is_none(), "other point");
        assert!(f.take(Point::AfterEvent, 3, "r2").is_some());
        assert!(f.take(Point::AfterEvent, 3, "r2").is_none(), "fires once");
        assert!(
            f.take(Point::Prefill, 0, "any").is_some(),
            "k ignored for prefill"
        );
        assert_eq!(f.disarm_all(), 0);
    }

    #[test]
    fn arm_request_parses_the_documented_shape() {
        let a: ArmRequest = serde_json::from_str(
            r#"{"point":"before_event","k":2,"request_id":"r7","action":"crash"}"#,
        )
        .expect("parses");
        assert_eq!((a.point, a.k), (Point::BeforeEvent, 2));
        let d: ArmRequest = serde_json::from_str(r#"{"point":"prefill"}"#).expect("defaults");
        assert_eq!((d.k, d.request_id, d.action), (0, None, Action::Crash));
        assert!(serde_json::from_str::<ArmRequest>(r#"{"point":"nowhere"}"#).is_err());
    }
}
