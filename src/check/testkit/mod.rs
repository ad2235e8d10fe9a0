//! Hand-written traces for the check tests: cheap, deterministic, and each shaped
//! to show a verdict or a finding PASS or FAIL for one stated reason. One builder,
//! [`Tb`], writes the trace (and, when asked, the gateway journal, the sim workers'
//! journals and the tool log) the way the client, haq, the sim gateway and the tool
//! service would, then judges it.
//!
//! Two starts: [`Tb::new`] is a run (a target of w1..w3, a gateway journal, the
//! events judged sorted by time); [`Tb::history`] and [`Tb::journaled`] are a
//! history (phase `baseline` from 0, the events judged in the order written). A
//! trace judged without a run end gets one 1 ms after its last event. Without a
//! gateway journal (`history`, `without_journal`) gateway lines are dropped, as no
//! gateway wrote them; the tool log exists from its first line.
//!
//! One writer per event. The event level (`client.rs`, `infra.rs`, `journals.rs`)
//! has one method per trace event or journal line, its shape in a small struct
//! (`req_as` + [`Ask`], `head_as` + [`Head`], `chunk_as` + [`Piece`], `end_as` +
//! [`Close`], `fault_as` + `FaultLine`) and short forms for the usual shape (`req`,
//! `head`, `chunk`, `deltas`, `finish`, `end`, `kill`, `fault`, `inject`, …).
//! The run level (`load.rs`: [`R`], `request`, `steady`, `phases`, [`standard`]) is
//! built on those writers. Each name means one thing: `req`/`end` are one event of
//! a request, `request(R)` a whole one; `fault` is the engine's line for a
//! time-triggered fault, `inject` the plan's fault by name; `run_end` the trace's
//! last line.
//!
//! Times: every method takes trace µs (`u64`; [`MS`] = 1 000, [`us`] converts
//! seconds), except the run level's load description, which is f64 — an [`R`]'s
//! time in s and its TTFT/ITL in ms, `steady`'s range in s and rate per s, the
//! plan's phases — converted with [`us`] where it calls the writers.
//!
//! The assertion helpers (`look.rs`) and the fate tests' recurring requests
//! (`stories.rs`) live here too; the plans in `plans.rs`.

mod client;
mod infra;
mod journals;
mod load;
mod look;
mod plans;
mod state;
mod stories;

pub use client::{Ask, Close, Head, Piece};
pub use load::{R, rr, standard};
pub use look::{contains, fate, finding, has, kinds, pick, stages, status};
pub use plans::{BASE, plan, plan_from, quickstart};
pub use state::{MONO, MS, Order, Tb, event, us};
pub use stories::{clean, cut_properly, refs, words};
