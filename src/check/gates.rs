//! The run's gates beyond the verdicts' own statuses: `criteria.require` (a required
//! verdict that ends NOT_EVALUATED or UNKNOWN fails the run, so a CI gate cannot pass
//! on what it never tested) and, without it, a warning for each verdict the plan
//! exercises ([`crate::plan::implied`]) that ended NOT_EVALUATED.

use serde::Serialize;

use super::verdict::{Status, Verdict, VerdictName};
use crate::plan::Plan;

/// What the gates found.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Gates {
    /// `criteria.require`, in report order.
    pub required: Vec<VerdictName>,
    /// Required verdicts that ended NOT_EVALUATED or UNKNOWN: each fails the run.
    pub unmet: Vec<Unmet>,
    /// Without `criteria.require`: the verdicts the scenario exercises that were not
    /// judged, and a run that exercises no fault at all.
    pub warnings: Vec<String>,
}

/// A required verdict that was not judged PASS or FAIL.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unmet {
    pub verdict: VerdictName,
    pub status: Status,
    /// The verdict's own reason.
    pub why: String,
}

impl Unmet {
    /// One line for the summaries: `Routing is NOT_EVALUATED (why)`.
    pub fn describe(&self) -> String {
        format!(
            "{} is {} ({}) but criteria.require lists it",
            self.verdict,
            self.status.as_str(),
            self.why
        )
    }
}

/// The gates of `verdicts` under `plan`'s criteria.
pub fn judge(plan: &Plan, verdicts: &[Verdict]) -> Gates {
    let mut required: Vec<VerdictName> = plan.scenario.criteria.require.clone();
    required.sort();
    required.dedup();
    let status = |n: VerdictName| verdicts.iter().find(|v| v.name == n);
    let unmet = required
        .iter()
        .filter_map(|&n| {
            let v = status(n)?;
            matches!(v.status, Status::NotEvaluated | Status::Unknown).then(|| Unmet {
                verdict: n,
                status: v.status,
                why: v.summary.clone(),
            })
        })
        .collect();
    let mut warnings = Vec::new();
    if required.is_empty() {
        if plan.faults.is_empty() {
            warnings.push(
                "the scenario injects no fault: only latency under load was judged, no HA property (add faults, or `criteria.require` to make the run fail on what it does not judge)"
                    .to_string(),
            );
        }
        for (n, why) in crate::plan::implied::exercised(plan) {
            if let Some(v) = status(n).filter(|v| v.status == Status::NotEvaluated) {
                warnings.push(format!(
                    "{n} was not judged although the scenario exercises it ({why}): {} — `criteria.require: [{n}]` would fail the run",
                    v.summary
                ));
            }
        }
    }
    Gates {
        required,
        unmet,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::RunResult;
    use crate::check::testkit::*;

    #[test]
    fn a_required_verdict_not_evaluated_fails_the_run() {
        // The standard run has no overload phase: Overload is NOT_EVALUATED.
        let p = plan(&["criteria.require=[Routing, Overload]"]);
        let j = standard(&p).judge(&p);
        assert_eq!(pick(&j, "Overload").status, Status::NotEvaluated);
        assert_eq!(pick(&j, "Routing").status, Status::Pass);
        assert_eq!(j.result(), RunResult::Fail, "{:?}", j.gates);
        assert_eq!(j.gates.unmet.len(), 1);
        assert_eq!(j.gates.unmet[0].verdict, VerdictName::Overload);
        assert!(
            j.gates.unmet[0]
                .describe()
                .starts_with("Overload is NOT_EVALUATED (the scenario has no overload phase)"),
            "{:?}",
            j.gates
        );
        // Without the requirement the same run passes.
        let p = plan(&["criteria.require=[Routing, Capacity]"]);
        let j = standard(&p).judge(&p);
        assert!(j.gates.unmet.is_empty() && j.gates.warnings.is_empty());
        assert_ne!(j.result(), RunResult::Fail, "{:?}", j.verdicts);
    }

    #[test]
    fn a_required_verdict_unknown_fails_the_run() {
        let p = plan(&["criteria.require=[Capacity]"]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.inject("kill-w2", "w2", us(13.0), false);
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        assert_eq!(pick(&j, "Capacity").status, Status::Unknown);
        assert_eq!(j.result(), RunResult::Fail);
        assert_eq!(j.gates.unmet[0].status, Status::Unknown);
    }

    #[test]
    fn without_require_an_exercised_verdict_not_judged_is_warned_about() {
        // A restart asks for a replacement: Recovery is exercised. With no replacement
        // in the trace, Recovery is still judged (UNKNOWN or FAIL), never silent; a
        // scenario without faults only warns that it tests no HA property.
        let p = plan(&["faults=[]"]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 31.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.run_end(us(32.0));
        let j = tb.judge(&p);
        assert_ne!(j.result(), RunResult::Fail);
        assert_eq!(j.gates.warnings.len(), 1, "{:?}", j.gates);
        assert!(j.gates.warnings[0].contains("injects no fault"));
        // A kill whose Routing verdict found nothing to judge is named.
        let p = plan(&[]);
        let verdicts: Vec<Verdict> = VerdictName::ALL
            .iter()
            .map(|&n| {
                let s = if n == VerdictName::Routing {
                    Status::NotEvaluated
                } else {
                    Status::Pass
                };
                Verdict::new(n, s, "why", Vec::new())
            })
            .collect();
        let g = judge(&p, &verdicts);
        assert_eq!(g.warnings.len(), 1, "{g:?}");
        assert!(
            g.warnings[0].starts_with(
                "Routing was not judged although the scenario exercises it (an endpoint taken out of service by kill-w2)"
            ),
            "{g:?}"
        );
    }
}
