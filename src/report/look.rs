//! Where to look when a verdict did not pass: the doc section that says what the
//! verdict checks and needs, the requests behind it (by id: `grep <id> trace.jsonl`),
//! and the files of the run directory that hold its evidence. report.md and the
//! terminal print one line per FAIL or UNKNOWN verdict.

use crate::check::facts::Req;
use crate::check::{Judgement, Status, Verdict, VerdictName};
use crate::plan::Plan;
use crate::scenario::words::and_list;
use crate::trace::Outcome;

/// Request ids named at the most per verdict.
const IDS: usize = 5;

/// One verdict's pointers.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    pub verdict: VerdictName,
    pub status: Status,
    /// `docs/…md#anchor`.
    pub doc: String,
    pub requests: Vec<String>,
    /// Files of the run directory.
    pub files: Vec<&'static str>,
}

impl Look {
    /// One line: `Routing (FAIL): docs/requirements.md#routing · requests r1, r2 · gateway.jsonl, trace.jsonl`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({}): see {}",
            self.verdict,
            self.status.as_str(),
            self.doc
        );
        if !self.requests.is_empty() {
            s.push_str(&format!(
                " · requests {} (grep the id in trace.jsonl)",
                and_list(&self.requests)
            ));
        }
        s.push_str(&format!(
            " · in the run directory: {}",
            self.files.join(", ")
        ));
        s
    }
}

/// The doc section of a verdict (docs/requirements.md has one per verdict).
pub fn doc(v: VerdictName) -> &'static str {
    match v {
        VerdictName::FailureDomain => "docs/requirements.md#failure-domain",
        VerdictName::Routing => "docs/requirements.md#routing",
        VerdictName::RequestFate => "docs/request-fate.md#findings",
        VerdictName::Capacity => "docs/requirements.md#capacity",
        VerdictName::Latency => "docs/requirements.md#latency",
        VerdictName::Overload => "docs/requirements.md#overload",
        VerdictName::Recovery => "docs/requirements.md#recovery",
        VerdictName::Maintenance => "docs/requirements.md#maintenance",
    }
}

/// The run directory's files holding a verdict's evidence.
fn files(v: VerdictName) -> Vec<&'static str> {
    match v {
        VerdictName::FailureDomain => vec!["trace.jsonl (\"ev\":\"fault\" lines)", "heals.jsonl"],
        VerdictName::Routing => vec![
            "report.md (Timeline)",
            "gateway.jsonl",
            "trace.jsonl (proxy_request lines)",
        ],
        VerdictName::RequestFate => vec!["report.json (findings)", "trace.jsonl", "gateway.jsonl"],
        VerdictName::Capacity => vec!["report.md (Latency per phase)", "requests.csv"],
        VerdictName::Latency => vec![
            "report.md (Latency per phase)",
            "report.html",
            "requests.csv",
            "latency.hlog",
        ],
        VerdictName::Overload => vec!["report.md (Latency per phase)", "gateway.jsonl"],
        VerdictName::Recovery => vec!["report.md (Timeline)", "trace.jsonl (replacement lines)"],
        VerdictName::Maintenance => vec!["report.md (Timeline)", "gateway.jsonl", "trace.jsonl"],
    }
}

/// Where to look for each verdict that did not pass.
pub fn looks(plan: &Plan, j: &Judgement) -> Vec<Look> {
    j.verdicts
        .iter()
        .filter(|v| matches!(v.status, Status::Fail | Status::Unknown))
        .map(|v| Look {
            verdict: v.name,
            status: v.status,
            doc: finding_doc(v, j),
            requests: requests(plan, j, v),
            files: files(v.name),
        })
        .collect()
}

/// The doc, at the finding's own row for Request-Fate.
fn finding_doc(v: &Verdict, j: &Judgement) -> String {
    match (v.name, j.findings.first()) {
        (VerdictName::RequestFate, Some(f)) => {
            format!("{} (`{}`)", doc(v.name), f.kind.as_str())
        }
        _ => doc(v.name).to_string(),
    }
}

/// The requests behind a verdict: its findings, or the slowest requests of the phases
/// it failed on, or the requests routed to a dead endpoint.
fn requests(plan: &Plan, j: &Judgement, v: &Verdict) -> Vec<String> {
    let reqs = &j.facts.requests;
    let mut ids: Vec<String> = match v.name {
        VerdictName::RequestFate | VerdictName::Maintenance => {
            j.findings.iter().map(|f| f.request.clone()).collect()
        }
        VerdictName::Latency => slowest(reqs, |r| over_in(plan, v, r)),
        VerdictName::Capacity => {
            let window = j
                .degraded
                .as_ref()
                .map(|w| w.phases.clone())
                .unwrap_or_default();
            let mut bad: Vec<String> = reqs
                .iter()
                .filter(|r| r.protected && window.contains(&r.phase))
                .filter(|r| r.outcome != Outcome::Completed && r.outcome != Outcome::Abandoned)
                .map(|r| r.id.clone())
                .collect();
            if bad.is_empty() {
                bad = slowest(reqs, |r| r.protected && window.contains(&r.phase));
            }
            bad
        }
        VerdictName::Routing => j
            .timeline
            .faults
            .iter()
            .flat_map(|f| {
                reqs.iter().filter(move |r| {
                    r.dispatch > f.injected
                        && r.dispatch < f.degraded_until
                        && (r.proxy_worker.as_deref() == Some(f.replica.as_str())
                            || r.worker.as_deref() == Some(f.replica.as_str()))
                })
            })
            .map(|r| r.id.clone())
            .collect(),
        VerdictName::FailureDomain | VerdictName::Overload | VerdictName::Recovery => Vec::new(),
    };
    ids.dedup();
    ids.truncate(IDS);
    ids
}

/// A request of a phase the Latency verdict names as outside the SLO.
fn over_in(_plan: &Plan, v: &Verdict, r: &Req) -> bool {
    r.probe.is_none() && v.summary.contains(&format!("{}: p95", r.phase))
}

/// The ids of the slowest completed requests (by E2E from the intended time) among
/// those `keep` selects, slowest first.
fn slowest(reqs: &[Req], keep: impl Fn(&Req) -> bool) -> Vec<String> {
    let mut v: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.probe.is_none() && r.outcome == Outcome::Completed && keep(r))
        .collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.end.saturating_sub(r.intended)));
    v.into_iter().take(IDS).map(|r| r.id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    #[test]
    fn a_failing_verdict_points_at_its_doc_its_requests_and_its_files() {
        // The standard run with slow answers in the degraded phase: Latency FAILs.
        let p = plan(&[]);
        let mut tb = standard(&p);
        for k in 0..20 {
            let t = 21.05 + f64::from(k) * 0.5;
            let slow = if k == 7 { 3000.0 } else { 900.0 };
            tb.request(R::ok(format!("slow{k}"), "degraded", t, "w1").ttft(slow));
        }
        let j = tb.judge(&p);
        let l = looks(&p, &j);
        let lat = l
            .iter()
            .find(|x| x.verdict == VerdictName::Latency)
            .expect("Latency fails");
        assert_eq!(lat.doc, "docs/requirements.md#latency");
        assert_eq!(
            lat.requests.first().map(String::as_str),
            Some("slow7"),
            "{lat:?}"
        );
        assert!(
            lat.requests.iter().all(|r| r.starts_with("slow")),
            "{lat:?}"
        );
        let line = lat.describe();
        assert!(
            line.starts_with("Latency (FAIL): see docs/requirements.md#latency · requests slow7, ")
                && line.contains("requests.csv"),
            "{line}"
        );
        // A verdict that passed has no pointer.
        assert!(
            !l.iter().any(|x| x.verdict == VerdictName::FailureDomain),
            "{l:?}"
        );
    }
}
