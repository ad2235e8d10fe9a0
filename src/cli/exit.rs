//! The process exit code of each outcome (README: 0 PASS · 1 FAIL or UNKNOWN · 2
//! unusable or INVALID · 3 interrupted).

use std::process::ExitCode;

use crate::check::Status;

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

fn exit_for(status: Status) -> Exit {
    match status {
        Status::Pass | Status::NotEvaluated => Exit::Pass,
        Status::Fail | Status::Unknown => Exit::Fail,
    }
}

/// Exit code of a judged run: interrupted (3) beats INVALID (2) beats the verdicts.
pub fn exit_for_run(j: &crate::check::Judgement, interrupted: bool) -> Exit {
    if interrupted {
        Exit::Interrupted
    } else if j.invalid() {
        Exit::Unusable
    } else {
        exit_for(j.overall())
    }
}
