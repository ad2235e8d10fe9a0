//! Reading a judgement in assertions: a verdict by name, the Request-Fate verdict,
//! its findings and its table.

use crate::check::fate::{Finding, FindingKind, Stage};
use crate::check::{Judgement, Status, Verdict};

/// The verdict `name`.
pub fn pick(j: &Judgement, name: impl std::fmt::Display) -> Verdict {
    let name = name.to_string();
    j.verdicts
        .iter()
        .find(|v| v.name == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no verdict {name}"))
}

pub fn fate(j: &Judgement) -> &Verdict {
    j.verdicts
        .iter()
        .find(|v| v.name == "Request-Fate")
        .expect("Request-Fate verdict")
}

pub fn status(j: &Judgement) -> Status {
    fate(j).status
}

pub fn kinds(j: &Judgement) -> Vec<FindingKind> {
    let mut k: Vec<FindingKind> = j.findings.iter().map(|f| f.kind).collect();
    k.dedup();
    k
}

pub fn has(j: &Judgement, k: FindingKind) -> bool {
    j.findings.iter().any(|f| f.kind == k)
}

pub fn finding(j: &Judgement, k: FindingKind) -> &Finding {
    j.findings
        .iter()
        .find(|f| f.kind == k)
        .unwrap_or_else(|| panic!("no {k:?} in {:#?}", j.findings))
}

/// The stage of the one request caught, from the table.
pub fn stages(j: &Judgement) -> Vec<Stage> {
    j.fate_table.iter().map(|r| r.stage).collect()
}

/// `hay` contains `want` (with both shown when not).
pub fn contains(hay: &str, want: &str) {
    assert!(hay.contains(want), "`{want}` not in: {hay}");
}
