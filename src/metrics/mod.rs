//! Measurements from the trace: per request ([`request`]), per phase ([`phase`]), per
//! second ([`series`], with HdrHistogram interval logs in [`hlog`]), and the load
//! client's own health ([`slip`]). Every latency goes through an hdrhistogram.

pub mod hist;
pub mod hlog;
pub mod phase;
pub mod request;
pub mod series;
pub mod slip;

pub use hist::{EaPcts, Ms, Pcts, ea_pcts, p95_us, pcts};
pub use phase::{PhaseAcc, PhaseStats};
pub use request::Measured;
pub use series::{SecondStats, SeriesAcc};
pub use slip::{Sends, SlipAcc};
