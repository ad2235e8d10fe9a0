//! Whether the faults of a run held the degraded topology they declare: the plain
//! Capacity check asks it of the first removing fault, each capacity search step of
//! every fault it holds.

use crate::check::history::FaultRec;
use crate::plan::Plan;

/// Why a fault's record does not show the degraded topology it declares — `None` when
/// it was applied and verified. `what` names it (`kill-w2`, `kill-w2 on w2`);
/// `not_applied`: why the injector never applied it ([`FaultRec::not_applied`]);
/// `detail`: what the injector said of an applied one. The plain check asks it of the
/// first removing fault; a capacity search step, of every fault it holds
/// ([`faults_not_held`]): a degraded topology that is not the declared one proves
/// nothing of it.
pub fn not_held(
    what: &str,
    verified: bool,
    not_applied: Option<&str>,
    detail: Option<&str>,
) -> Option<String> {
    if verified {
        return None;
    }
    let how = match (not_applied, detail.filter(|d| !d.is_empty())) {
        (Some(why), _) => format!("was not applied ({why})"),
        (None, Some(d)) => format!("was not verified ({d})"),
        (None, None) => "was not verified".into(),
    };
    Some(format!(
        "{what} {how}: the degraded topology is not the declared one"
    ))
}

/// Every fault `plan` declares whose records in the run (`faults`) do not show it
/// applied and verified, each named with why ([`not_held`]); a declared fault the
/// trace has no record of at all is one of them. Empty for a plan without faults.
pub fn faults_not_held(plan: &Plan, faults: &[FaultRec]) -> Vec<String> {
    let mut out = Vec::new();
    for d in &plan.faults {
        let recs: Vec<&FaultRec> = faults.iter().filter(|f| f.name == d.name).collect();
        if recs.is_empty() {
            out.push(format!(
                "{} was never applied (the trace has no record of it): the degraded topology is not the declared one",
                d.name
            ));
        }
        for r in recs {
            let what = match r.replica.as_str() {
                "" => r.name.clone(),
                on => format!("{} on {on}", r.name),
            };
            out.extend(not_held(
                &what,
                r.verified,
                r.not_applied(),
                Some(&r.detail),
            ));
        }
    }
    out
}
