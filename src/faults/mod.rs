//! Fault injection (M4, M5, M9, Q3, Q6, Q7, Q11). Every injection is verified (the
//! process is gone or stopped, the proxy rule is applied by every live connection,
//! the user's verify command passed) and the verification is written to the trace: a
//! fault that did not take effect is recorded as such, never a silent pass. Every
//! reversible fault is registered with the [`guard::HealGuard`], which undoes it when
//! its duration ends, at the end of the run, on error, on panic and on SIGINT/SIGTERM.
//!
//! Backends implement [`Injector`]: [`process`] (signals to the sim's workers or to
//! declared pids / pid files), [`proxy`] (rules on haq's interposition proxy),
//! [`command`] (the user's shell commands), `kube` (the Kubernetes API). [`schedule`] fires the faults on the
//! load's clock: at a time, at a point of a probe request's token loop ([`probe`]),
//! or at a load level; [`replace`] starts replacements and records their Q11 stages.

mod backend;
pub mod command;
pub mod engine;
mod env;
mod fire;
pub mod guard;
pub mod hook;
mod kube;
pub mod ledger;
pub mod open_runs;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod replace;
pub mod schedule;
pub mod scrape;
mod shell;

use crate::scenario::FaultBackend;
pub use crate::target::registry::{Registry, Replica};
pub use backend::{Context, Injected, Injector, VERIFY_TIMEOUT, admin_client};
pub use env::{Env, Fired, ProbeClient};
pub use guard::{HealGuard, Healed, Heals, Undo};

/// The injector for a fault's backend.
pub fn injector(backend: FaultBackend) -> &'static dyn Injector {
    match backend {
        FaultBackend::Process => &process::ProcessInjector,
        FaultBackend::Proxy => &proxy::ProxyInjector,
        FaultBackend::Command => &command::CommandInjector,
        FaultBackend::Kubernetes => &kube::KubeInjector,
        FaultBackend::Engine => &engine::EngineInjector,
    }
}

#[cfg(test)]
mod tests;
