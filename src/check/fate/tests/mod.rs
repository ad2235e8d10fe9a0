//! Hand-written histories for every finding, positive and negative, written with
//! the check tests' one builder (`crate::check::testkit::Tb`, from
//! `Tb::history()` or `Tb::journaled()`) and judged against the quickstart.

mod cache;
mod compose;
mod ending;
mod output;
mod policy;
mod protocol;
mod proxy;
mod side_effects;
mod sim_journal;
mod writers;

use crate::check::evidence::Sources;
use crate::check::fate::{FindingKind, Stage};
pub use crate::check::testkit::*;
use crate::check::{Status, judge_with};
use crate::trace::{ChunkKind, Event, FaultLine, Outcome};
