//! haq: qualifies LLM inference clusters for high availability.
//!
//! Data flow (one direction): scenario → plan → run (target, workload, faults) →
//! trace → check → report. See DESIGN.md in the project docs.

pub mod client;
pub mod scenario;
pub mod sim;
pub mod trace;
pub mod wire;
pub mod workload;

pub mod bench;
pub mod capacity;
pub mod check;
pub mod cli;
pub mod engine;
pub mod faults;
pub mod metrics;
pub mod observe;
pub mod priority;
pub mod proxy;
pub mod report;
pub mod target;

pub use wire::tls::install_crypto_provider;
