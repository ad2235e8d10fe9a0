//! What a fault backend is: an [`Injector`] applies a fault to one replica in the
//! run's [`Context`] and says what it did ([`Injected`]), verified.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::guard::Undo;
use crate::plan::FaultPlan;
use crate::target::registry::Replica;
use crate::trace::{Clock, TraceWriter};

/// How long a killed process may take to disappear, or a rule to be applied, before
/// the fault counts as not taken effect.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// What an injection did to one replica, as recorded in the trace.
#[derive(Debug, Clone)]
pub struct Injected {
    /// When the fault was applied (the signal sent, the rule added, the command run).
    pub at: Instant,
    pub pid: Option<u32>,
    pub verified: bool,
    pub detail: String,
}

impl Injected {
    pub fn failed(at: Instant, pid: Option<u32>, detail: impl Into<String>) -> Injected {
        Injected {
            at,
            pid,
            verified: false,
            detail: detail.into(),
        }
    }
}

/// The run's context a backend may need.
#[derive(Clone)]
pub struct Context {
    pub run_dir: PathBuf,
    pub seed: u64,
    pub clock: Clock,
    pub trace: TraceWriter,
    /// The probe request that fired the fault, when one did.
    pub probe: Option<String>,
    /// For the replicas' own endpoints (readiness, admin): built once, off the load's
    /// hot path.
    pub http: reqwest::Client,
    /// haq was interrupted (or the run's faults are being stopped): a command that
    /// injects or verifies ends at once. Heals are not stopped by it.
    pub stop: tokio_util::sync::CancellationToken,
    /// Where a fault that could outlive haq is written before it is applied.
    pub ledger: std::sync::Arc<super::ledger::Ledger>,
}

/// The client fault backends use to reach replicas directly (readiness, admin hooks).
pub fn admin_client() -> reqwest::Result<reqwest::Client> {
    crate::wire::tls::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
}

/// A fault backend: applies a fault to one replica and verifies it took effect;
/// returns how to undo it when it is reversible.
pub trait Injector: Send + Sync {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)>;
}
