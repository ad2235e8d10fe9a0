//! Fault injection (M4, M5, M9, Q3, Q6, Q7, Q11). Every injection is verified (the
//! process is gone or stopped, the proxy rule is applied by every live connection,
//! the user's verify command passed) and the verification is written to the trace: a
//! fault that did not take effect is recorded as such, never a silent pass. Every
//! reversible fault is registered with the [`guard::HealGuard`], which undoes it when
//! its duration ends, at the end of the run, on error, on panic and on SIGINT/SIGTERM.
//!
//! Backends implement [`Injector`]: [`process`] (signals to the sim's workers or to
//! declared pids / pid files), [`proxy`] (rules on haq's interposition proxy),
//! [`command`] (the user's shell commands). [`schedule`] fires the faults on the
//! load's clock: at a time, at a point of a probe request's token loop ([`probe`]),
//! or at a load level; [`replace`] starts replacements and records their Q11 stages.

pub mod command;
pub mod guard;
pub mod hook;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod replace;
pub mod schedule;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::scenario::FaultBackend;

use crate::plan::FaultPlan;
pub use crate::target::registry::{Registry, Replica};
use crate::trace::{Clock, TraceWriter};
pub use guard::{HealGuard, Healed, Heals, Undo};

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

/// The injector for a fault's backend.
pub fn injector(backend: FaultBackend) -> &'static dyn Injector {
    match backend {
        FaultBackend::Process => &process::ProcessInjector,
        FaultBackend::Proxy => &proxy::ProxyInjector,
        FaultBackend::Command => &command::CommandInjector,
    }
}

#[cfg(test)]
mod tests;
