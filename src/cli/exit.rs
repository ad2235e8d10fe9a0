//! The process exit code of each outcome (README: 0 PASS · 1 FAIL or UNKNOWN · 2
//! unusable or INVALID · 3 interrupted).

use std::process::ExitCode;

use crate::check::RunResult;

/// Process exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Pass = 0,
    Fail = 1,
    Unusable = 2,
    Interrupted = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// Exit code of a judged run: its one result ([`crate::check::Judgement::result`]).
pub fn exit_for_run(j: &crate::check::Judgement) -> Exit {
    match j.result() {
        RunResult::Pass => Exit::Pass,
        RunResult::Fail | RunResult::Unknown => Exit::Fail,
        RunResult::Invalid => Exit::Unusable,
        RunResult::Interrupted => Exit::Interrupted,
    }
}
