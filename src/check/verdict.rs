//! A verdict (Q13): which of the eight, its status, why, and the evidence; how the
//! statuses of a verdict judged in parts compose (Jepsen: FAIL beats UNKNOWN beats
//! PASS; missing evidence is never a PASS).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pass,
    Fail,
    Unknown,
    NotEvaluated,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Unknown => "UNKNOWN",
            Status::NotEvaluated => "NOT_EVALUATED",
        }
    }
}

pub use crate::scenario::VerdictName;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    pub name: VerdictName,
    pub status: Status,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

impl Verdict {
    pub fn new(
        name: VerdictName,
        status: Status,
        summary: impl Into<String>,
        evidence: Vec<String>,
    ) -> Self {
        Verdict {
            name,
            status,
            summary: summary.into(),
            evidence,
        }
    }
}

/// FAIL beats UNKNOWN beats PASS; nothing judged is UNKNOWN.
pub fn worst(it: impl IntoIterator<Item = Status>) -> Status {
    let mut out = None;
    for s in it {
        out = Some(match (out, s) {
            (_, Status::Fail) | (Some(Status::Fail), _) => Status::Fail,
            (_, Status::Unknown) | (Some(Status::Unknown), _) => Status::Unknown,
            (_, Status::Pass) | (Some(Status::Pass), _) => Status::Pass,
            _ => Status::NotEvaluated,
        });
    }
    out.unwrap_or(Status::Unknown)
}

/// A verdict judged in parts (one per fault or phase): the worst part decides, and
/// the summary names the parts that decided it (all of them on a PASS).
pub fn conclude(name: VerdictName, parts: &[(Status, String)], evidence: Vec<String>) -> Verdict {
    let status = worst(parts.iter().map(|p| p.0));
    let summary = judged(parts, status, || {
        parts
            .iter()
            .map(|p| p.1.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    });
    Verdict::new(name, status, summary, evidence)
}

/// The summary of a verdict judged in parts: the parts that decided a FAIL or an
/// UNKNOWN, or `pass()` when everything passed.
pub fn judged(parts: &[(Status, String)], status: Status, pass: impl FnOnce() -> String) -> String {
    match status {
        Status::Pass | Status::NotEvaluated => pass(),
        s => parts
            .iter()
            .filter(|p| p.0 == s)
            .map(|p| p.1.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    }
}
