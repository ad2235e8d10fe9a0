//! Judging: pure, deterministic functions over a stored trace (M10). `haq run` and
//! `haq check RUN_DIR` call the same code, so a stored run re-judges identically; it
//! makes no network call and writes no file (tests/it/layers.rs keeps it so).
//!
//! Verdicts compose as in Jepsen: a finding FAILs; missing evidence is UNKNOWN, never
//! PASS; a verdict this version does not judge is NOT_EVALUATED with the reason. The
//! eight are judged in one place, [`verdicts`].

pub mod agents;
pub mod cache_effects;
pub mod capacity;
pub mod collect;
#[cfg(test)]
mod dir_tests;
pub mod evidence;
pub mod facts;
pub mod failure_domain;
pub mod fate;
pub mod gates;
pub mod history;
mod judge;
mod judgement;
pub mod latency;
pub mod maintenance;
pub mod overload;
pub mod own;
pub mod recovery;
pub mod retain;
pub mod routing;
pub mod run;
#[cfg(test)]
pub mod testkit;
pub mod timeline;
pub mod validity;
mod verdict;
pub mod verdicts;

pub use crate::trace::files::SCENARIO_FILE;
pub use judge::{
    judge, judge_dir, judge_dir_keeping, judge_dir_with, judge_keeping, judge_search_dir,
    judge_search_step, judge_with,
};
pub use judgement::{Judgement, RunResult};
pub use retain::Keep;
pub use verdict::{Status, Verdict, VerdictName, conclude, judged, worst};

/// The eight verdicts of Q13, in report order.
pub const VERDICTS: [VerdictName; 8] = VerdictName::ALL;
