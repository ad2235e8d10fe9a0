//! A capacity search judged from its directory (issue 19; Q4, Q5, Q10), the same for
//! `haq capacity` and for `criteria.capacity.search` in a run (`RUN_DIR/capacity/`):
//! every step's run directory judged again (`<topology>-NN-<rate>/`,
//! `overload-NN-<rate>/`), each topology's bracket replayed from its steps in order
//! (so where it stopped, and why, is the steps' doing, not a figure the driver wrote
//! down; a degraded step whose faults did not all hold proves nothing: it is reported,
//! never read into the bracket, and ends its topology as it ended the driver's), then
//! C_healthy, C_degraded, headroom, failover reserve, the Capacity verdict
//! and the overload steps' Overload verdict ([`super::adaptive::conclude`],
//! [`super::excess::conclude`]). Reading the directory is all it does: judging a
//! step's run directory is the caller's (`check::judge_search_step`).

use std::path::Path;

use super::adaptive::{Context, RanStep, Search, TopologyResult, conclude};
use super::excess::{self, OverloadStep};
use super::steps::SearchStep;
use crate::check::Status;
use crate::plan::Plan;
use crate::plan::capacity::{self, Bracket, Params, Stop, Topology};

/// A step's run directory judged.
#[derive(Debug, Clone)]
pub enum Judged {
    Step(Box<SearchStep>),
    Overload(Box<OverloadStep>),
}

/// The judge of one step's run directory.
pub type JudgeStep<'a> = &'a dyn Fn(&Path) -> anyhow::Result<Judged>;

/// The step directories of a search of `kind` (`healthy`, `degraded`, `overload`),
/// in the order they ran.
pub fn step_dirs(dir: &Path, kind: &str) -> Vec<String> {
    let mut v: Vec<(usize, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| {
            let (k, i) = capacity::parse_step_dir(&n)?;
            (k == kind).then_some((i, n.clone()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|x| x.1).collect()
}

/// One topology's steps judged, its bracket replayed; the first step that cannot be
/// judged ends it (unfinished, named in `errors`).
fn topology(
    dir: &Path,
    topo: Topology,
    params: &Params,
    judge: JudgeStep<'_>,
    errors: &mut Vec<String>,
) -> TopologyResult {
    let mut b = Bracket::default();
    let mut steps = Vec::new();
    let mut broken = false;
    for name in step_dirs(dir, topo.as_str()) {
        match judge(&dir.join(&name)) {
            Ok(Judged::Step(s)) => {
                // A step that proves nothing (its faults did not all hold) is never
                // read into the bracket, and the search did not go on after it.
                let counts = s.counts();
                if let Some(o) = counts {
                    b.record(s.step.rate, o);
                }
                steps.push(RanStep {
                    dir: name,
                    judged: *s,
                });
                if counts.is_none() {
                    broken = true;
                    break;
                }
            }
            Ok(Judged::Overload(_)) => {
                errors.push(format!(
                    "{name}: an overload step among the {} steps",
                    topo.as_str()
                ));
                broken = true;
                break;
            }
            Err(e) => {
                errors.push(format!("{name}: {e:#}"));
                broken = true;
                break;
            }
        }
    }
    let stop = match b.next(&params.bisect) {
        Err(stop) if !broken => stop,
        _ => Stop::Unfinished,
    };
    TopologyResult::new(topo, &b, stop, steps)
}

/// The overload steps judged, each with its multiple of `c` (C_degraded).
fn overload_steps(
    dir: &Path,
    c: Option<f64>,
    judge: JudgeStep<'_>,
    errors: &mut Vec<String>,
) -> Vec<OverloadStep> {
    let mut out = Vec::new();
    for name in step_dirs(dir, capacity::OVERLOAD) {
        match judge(&dir.join(&name)) {
            Ok(Judged::Overload(s)) => {
                let mut s = *s;
                s.multiple = c.map(|c| (s.rate / c * 100.0).round() / 100.0);
                s.dir = name;
                out.push(s);
            }
            Ok(Judged::Step(_)) => errors.push(format!("{name}: not an overload step")),
            Err(e) => errors.push(format!("{name}: {e:#}")),
        }
    }
    out
}

/// Why no overload step was asked of a degraded topology whose capacity is `c`.
fn no_overload(plan: &Plan, params: &Params, c: Option<f64>) -> Option<String> {
    if params.overload.is_empty() {
        return Some("the search asked for no overload step (`overload: []`)".into());
    }
    let Some(c) = c else {
        return Some("no overload step: C_degraded was not measured".into());
    };
    let l = plan.scenario.protected_load.0;
    capacity::overload_rates(params, c, l).0.is_empty().then(|| {
        format!("no overload step: every multiple of C_degraded ({c:.2}/s) is within the protected load {l:.2}/s")
    })
}

/// The search in `dir` judged, for the scenario of `plan` (its own plan: protected
/// load, replicas, faults) and the search's `params`.
pub fn judge(dir: &Path, plan: &Plan, params: &Params, judge: JudgeStep<'_>) -> Search {
    let mut errors = Vec::new();
    let mut healthy = None;
    let mut degraded = None;
    for t in &params.topologies {
        let r = topology(dir, *t, params, judge, &mut errors);
        match t {
            Topology::Healthy => healthy = Some(r),
            Topology::Degraded => degraded = Some(r),
        }
    }
    let c = Context {
        protected_load: plan.scenario.protected_load.0,
        normal_peak: capacity::normal_peak(plan),
        replicas: plan.replicas.len(),
        lost: capacity::lost(plan),
    };
    let (status, mut summary, [hypothesis, headroom, failover_reserve]) =
        conclude(&c, healthy.as_ref(), degraded.as_ref());
    let cd = degraded.as_ref().and_then(|d| d.capacity);
    let overload = overload_steps(dir, cd, judge, &mut errors);
    let none = match degraded.as_ref() {
        Some(d) if d.stop != Stop::Unfinished => no_overload(plan, params, cd),
        Some(_) => None,
        None => Some("no overload step: the degraded topology was not searched".into()),
    };
    let (overload_status, overload_summary) = excess::conclude(&overload, none);
    if let Ok(why) = std::fs::read_to_string(dir.join(capacity::STOPPED)) {
        errors.push(format!("the search stopped: {}", why.trim()));
    }
    if !errors.is_empty() {
        summary.push_str(&format!(
            "; steps that could not be judged: {}",
            errors.join("; ")
        ));
    }
    Search {
        scenario: plan.scenario.name.clone(),
        precision: params.bisect.precision,
        max_steps: params.bisect.max_steps,
        step_s: params.step.as_secs_f64(),
        warmup_s: params.warmup.as_secs_f64(),
        protected_load: c.protected_load,
        normal_peak: c.normal_peak,
        replicas: c.replicas,
        lost: c.lost,
        gate: status == Status::Pass,
        healthy,
        degraded,
        hypothesis,
        headroom,
        failover_reserve,
        status,
        summary,
        overload,
        overload_status,
        overload_summary,
        model_per_replica: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::plan;
    use crate::plan::capacity::{Bisect, Outcome};

    fn params() -> Params {
        Params {
            topologies: vec![Topology::Healthy, Topology::Degraded],
            bisect: Bisect {
                start: 10.0,
                factor: 2.0,
                precision: 0.1,
                max_steps: 8,
                floor: 0.1,
            },
            step: std::time::Duration::from_secs(3),
            warmup: std::time::Duration::from_secs(1),
            overload: vec![1.5, 2.0],
        }
    }

    fn searched(steps: &[(&str, Outcome)], overload: &[(&str, Status)]) -> Search {
        searched_with(steps, overload, &[])
    }

    /// A search directory with a step directory per (name) and a judge that reads
    /// the outcome back from a table instead of a run; the steps named in `unproven`
    /// ran with their fault not verified.
    fn searched_with(
        steps: &[(&str, Outcome)],
        overload: &[(&str, Status)],
        unproven: &[&str],
    ) -> Search {
        let dir = std::env::temp_dir().join(format!(
            "haq-search-{}-{}",
            std::process::id(),
            unproven.len() * 10000 + steps.len() * 100 + overload.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (n, _) in steps {
            std::fs::create_dir_all(dir.join(n)).expect("dir");
        }
        for (n, _) in overload {
            std::fs::create_dir_all(dir.join(n)).expect("dir");
        }
        let p = plan(&[]);
        let step_of = |d: &Path| -> anyhow::Result<Judged> {
            let n = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let rate: f64 = n.rsplit('-').next().unwrap_or("0").parse()?;
            if let Some((_, st)) = overload.iter().find(|(m, _)| *m == n) {
                return Ok(Judged::Overload(Box::new(OverloadStep {
                    dir: String::new(),
                    multiple: None,
                    rate,
                    after_rate: 10.0,
                    status: *st,
                    summary: format!("{st:?}"),
                    evidence: Vec::new(),
                    after: None,
                    load_generator: Vec::new(),
                })));
            }
            let o = steps.iter().find(|(m, _)| *m == n).map(|x| x.1);
            let o = o.ok_or_else(|| anyhow::anyhow!("no such step"))?;
            let mut s = super::super::steps::fake(rate, o);
            if unproven.contains(&n) {
                s.proves_nothing = vec![format!(
                    "kill-w2 on w2 was not verified (SIGKILL sent; process still alive after 5s): the degraded topology is not the declared one"
                )];
            }
            Ok(Judged::Step(Box::new(s)))
        };
        let s = judge(&dir, &p, &params(), &step_of);
        let _ = std::fs::remove_dir_all(&dir);
        s
    }

    #[test]
    fn each_topologys_bracket_is_replayed_from_its_steps_in_order() {
        use Outcome::*;
        let s = searched(
            &[
                ("healthy-01-10.00", Sustained),
                ("healthy-02-20.00", Sustained),
                ("healthy-03-40.00", Broken),
                ("healthy-04-28.28", Sustained),
                ("healthy-05-33.64", Broken),
                ("healthy-06-30.84", Broken),
                ("degraded-01-10.00", Sustained),
                ("degraded-02-20.00", Broken),
                ("degraded-03-14.14", Sustained),
                ("degraded-04-16.82", Broken),
                ("degraded-05-15.42", Broken),
            ],
            &[
                ("overload-01-21.21", Status::Pass),
                ("overload-02-28.28", Status::Fail),
            ],
        );
        let (h, d) = (
            s.healthy.as_ref().expect("h"),
            s.degraded.as_ref().expect("d"),
        );
        assert_eq!(
            (h.capacity, h.bracket.1, h.stop),
            (Some(28.28), Some(30.84), Stop::Precise)
        );
        assert_eq!(
            (d.capacity, d.bracket.1, d.stop),
            (Some(14.14), Some(15.42), Stop::Precise)
        );
        assert_eq!(d.steps.len(), 5);
        // L_protected 10/s: PASS; headroom from the normal peak (10/s).
        assert_eq!(s.status, Status::Pass, "{}", s.summary);
        assert!(s.gate);
        assert!((s.failover_reserve.expect("reserve") - 4.14).abs() < 1e-9);
        assert!((s.headroom.expect("headroom") - 18.28).abs() < 1e-9);
        // The overload steps carry their multiples; one failed.
        assert_eq!(s.overload.len(), 2);
        assert_eq!(s.overload[0].multiple, Some(1.5));
        assert_eq!(s.overload[1].multiple, Some(2.0));
        assert_eq!(s.overload_status, Status::Fail);
    }

    #[test]
    fn a_search_cut_short_is_unfinished_and_its_gate_unknown() {
        use Outcome::*;
        let s = searched(
            &[
                ("healthy-01-10.00", Sustained),
                ("healthy-02-20.00", Broken),
                ("healthy-03-14.14", Sustained),
                ("healthy-04-16.82", Sustained),
                ("degraded-01-5.00", Sustained),
            ],
            &[],
        );
        let d = s.degraded.as_ref().expect("d");
        assert_eq!((d.stop, d.capacity), (Stop::Unfinished, None));
        // 5/s sustained, below L_protected (10/s), and nothing more: not measured.
        assert_eq!(s.status, Status::Unknown, "{}", s.summary);
        assert!(
            s.summary.contains("the search ended after 1 step"),
            "{}",
            s.summary
        );
        // The healthy bracket [16.82, 20) is 18.9% wide, not yet within 10%.
        assert_eq!(s.healthy.as_ref().map(|h| h.stop), Some(Stop::Unfinished));
        assert_eq!(s.overload_status, Status::Unknown);
    }

    /// The audit's case: every degraded step ran with its kill not verified — in
    /// another topology than the declared one. Read as measured they would make
    /// C_degraded 14.14/s and a PASS; each proves nothing, the first ends the search.
    #[test]
    fn a_degraded_step_whose_fault_did_not_hold_is_never_a_capacity() {
        use Outcome::*;
        let degraded = [
            ("degraded-01-10.00", Sustained),
            ("degraded-02-20.00", Broken),
            ("degraded-03-14.14", Sustained),
            ("degraded-04-16.82", Broken),
            ("degraded-05-15.42", Broken),
        ];
        let names: Vec<&str> = degraded.iter().map(|x| x.0).collect();
        let mut steps = vec![
            ("healthy-01-10.00", Sustained),
            ("healthy-02-20.00", Broken),
        ];
        steps.extend(degraded);
        let s = searched_with(&steps, &[], &names);
        let d = s.degraded.as_ref().expect("d");
        assert_eq!((d.capacity, d.stop), (None, Stop::Unfinished), "{d:?}");
        assert_eq!(d.steps.len(), 1, "nothing read after the first: {d:?}");
        assert_eq!(d.bracket, (None, None));
        assert_eq!(s.status, Status::Unknown, "{}", s.summary);
        assert!(!s.gate && s.failover_reserve.is_none());
        for want in [
            "C_degraded not measured: step degraded-01-10.00 proves nothing",
            "kill-w2 on w2 was not verified",
        ] {
            assert!(s.summary.contains(want), "{want}: {}", s.summary);
        }
        assert!(
            d.steps[0]
                .judged
                .outcome_text()
                .starts_with("proves nothing: kill-w2"),
            "{}",
            d.steps[0].judged.outcome_text()
        );
        // The overload steps never ran on it.
        assert_eq!(s.overload_status, Status::Unknown, "{}", s.overload_summary);
        // Held for the first two steps (10/s sustained: L_protected, 20/s broken): the
        // gate rests on them alone, and the step that proved nothing is named.
        let s = searched_with(&steps, &[], &names[2..]);
        let d = s.degraded.as_ref().expect("d");
        assert_eq!((d.capacity, d.steps.len()), (None, 3), "{d:?}");
        assert_eq!(d.bracket, (Some(10.0), Some(20.0)));
        assert_eq!(s.status, Status::Pass, "{}", s.summary);
        assert!(
            s.summary.contains("step degraded-03-14.14 proves nothing"),
            "{}",
            s.summary
        );
    }

    #[test]
    fn step_directories_sort_by_their_index_not_their_name() {
        let dir = std::env::temp_dir().join(format!("haq-search-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for n in [
            "healthy-10-3.00",
            "healthy-02-20.00",
            "healthy-01-10.00",
            "degraded-01-5.00",
            "notes",
        ] {
            std::fs::create_dir_all(dir.join(n)).expect("dir");
        }
        assert_eq!(
            step_dirs(&dir, "healthy"),
            ["healthy-01-10.00", "healthy-02-20.00", "healthy-10-3.00"]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
