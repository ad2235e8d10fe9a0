//! What the fault tasks share ([`Env`]): the replicas, the heal guard, the trace, the
//! clocks of the load, how probe requests are sent; and what fired a fault ([`Fired`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::backend::Context;
use super::guard::Heals;
use crate::client::{self, Timeouts};
use crate::proxy::ProbeBoard;
use crate::target::registry::Registry;
use crate::trace::{Clock, TraceWriter};

/// How probe requests are sent.
#[derive(Clone)]
pub struct ProbeClient {
    pub http: client::Http,
    /// Full URL of the chat completions endpoint.
    pub url: String,
    pub model: String,
    pub timeouts: Timeouts,
    /// The marker the probe's body carries (its proxy attribution).
    pub marker: crate::workload::BodyMarker,
    /// How its response names the serving replica (`evidence.worker_header`).
    pub attribution: Option<Arc<client::Attribution>>,
}

/// Everything the fault tasks share.
pub struct Env {
    pub registry: Arc<Registry>,
    pub heals: Arc<Heals>,
    pub trace: TraceWriter,
    pub clock: Clock,
    pub run_dir: PathBuf,
    pub seed: u64,
    /// The proxies' probe board (none when no replica has a proxy).
    pub board: Option<Arc<ProbeBoard>>,
    pub probes: ProbeClient,
    /// For the replicas' own endpoints (readiness, admin hooks).
    pub admin: reqwest::Client,
    /// Progress lines for the person watching.
    pub say: Arc<dyn Fn(String) + Send + Sync>,
    pub load_start: Instant,
    /// The load ended (or was interrupted): stop waiting for triggers, heal on time.
    pub load_done: CancellationToken,
    /// Hard stop: probe requests still running are cancelled.
    pub stop: CancellationToken,
    /// The heal ledger (RUN_DIR/heals.jsonl).
    pub ledger: Arc<super::ledger::Ledger>,
}

impl Env {
    pub fn context(&self, probe: Option<String>) -> Context {
        Context {
            run_dir: self.run_dir.clone(),
            seed: self.seed,
            clock: self.clock,
            trace: self.trace.clone(),
            probe,
            http: self.admin.clone(),
            stop: self.stop.clone(),
            ledger: self.ledger.clone(),
        }
    }
}

/// What fired a fault, for the record.
pub struct Fired {
    pub trigger: String,
    /// Trace time the condition was met.
    pub t: u64,
    pub probe: Option<String>,
}

/// Waits `d` unless the load ends first (returns false then).
pub async fn wait(env: &Env, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = env.load_done.cancelled() => false,
    }
}
