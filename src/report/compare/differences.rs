//! What makes two runs not like for like, each named with both values: the scenario
//! recorded in each run directory (its plan, rebuilt from `scenario.json`), compared
//! section by section.
//!
//! The rule (README's `haq compare` row): what was *done* to the system — the request
//! mix, the arrival process, the offered load, the phases, the protected load, the
//! faults — differing makes the numbers mislead, and `haq compare` refuses it
//! ([`Effect::Refuse`], exit 2 unless `--allow-different`). What the system *is* (the
//! target) and how it is *judged* (SLO, request-fate policy, criteria, client timeouts,
//! evidence), and the scenario's name, are named beside the numbers ([`Effect::Warn`]).
//! The seed, the description, the report formats and the agents are not compared: two
//! runs of one scenario with other seeds are like for like.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::plan::{FaultPlan, Plan, Trigger};
use crate::wire::units::format_duration;

/// One thing that differs between A and B.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Difference {
    /// What differs: a path in the scenario (`slo.ttft_p95`,
    /// `workload.mix.classes[chat].output_tokens`) or a summary (`offered load`,
    /// `phases`, `faults`).
    pub what: String,
    /// A's value (`none`: not set).
    pub a: String,
    /// B's value.
    pub b: String,
    pub effect: Effect,
}

/// What a difference does to the comparison.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Other load or other faults: the comparison would mislead; refused without
    /// `--allow-different`.
    Refuse,
    /// Another target, objective or criterion: named beside the numbers.
    Warn,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} vs {}", self.what, self.a, self.b)
    }
}

/// What one side is: its plan and the phase compared (`None`: the whole run).
pub struct Of<'a> {
    pub plan: &'a Plan,
    pub phase: Option<&'a str>,
}

/// Everything that makes two sides not like for like, in this order: the scenario's
/// name, the request mix (class by class, field by field), the arrival process, the
/// offered load (of the phases compared, or of every phase), the phases (whole runs),
/// the protected load, the faults, the target, the SLO, the request-fate policy, the
/// criteria, the client and the evidence settings.
pub fn differences(a: &Of, b: &Of) -> Vec<Difference> {
    let (pa, pb) = (a.plan, b.plan);
    let (ja, jb) = (json(&pa.scenario.redacted()), json(&pb.scenario.redacted()));
    let mut out = Vec::new();
    let mut push = |effect: Effect, found: Vec<(String, String, String)>| {
        out.extend(
            found
                .into_iter()
                .map(|(what, a, b)| Difference { what, a, b, effect }),
        );
    };
    push(Effect::Warn, leaves("name", &ja["name"], &jb["name"]));
    push(
        Effect::Refuse,
        leaves(
            "workload.mix.classes",
            &json(&pa.mix.classes),
            &json(&pb.mix.classes),
        ),
    );
    let arrival = |j: &Value| {
        let mut v = j["workload"]["arrival"].clone();
        // The rate is judged as the offered load below, resolved per phase.
        if let Some(o) = v.as_object_mut() {
            o.remove("rate");
        }
        v
    };
    push(
        Effect::Refuse,
        leaves("workload.arrival", &arrival(&ja), &arrival(&jb)),
    );
    push(
        Effect::Refuse,
        leaves(
            "workload.cache_truth",
            &ja["workload"]["cache_truth"],
            &jb["workload"]["cache_truth"],
        ),
    );
    push(Effect::Refuse, offered(a, b));
    if a.phase.is_none() && b.phase.is_none() {
        let (x, y) = (phases(pa), phases(pb));
        if x != y {
            push(Effect::Refuse, vec![("phases".into(), x, y)]);
        }
    }
    push(
        Effect::Refuse,
        leaves(
            "protected_load",
            &ja["protected_load"],
            &jb["protected_load"],
        ),
    );
    push(Effect::Refuse, faults(pa, pb, &ja["faults"], &jb["faults"]));
    for section in ["target", "slo", "policy", "criteria", "client", "evidence"] {
        push(Effect::Warn, leaves(section, &ja[section], &jb[section]));
    }
    out
}

/// Whether any difference refuses the comparison.
pub fn refused(d: &[Difference]) -> bool {
    d.iter().any(|d| d.effect == Effect::Refuse)
}

fn json<T: Serialize>(x: &T) -> Value {
    serde_json::to_value(x).unwrap_or_default()
}

/// The offered load of each side: the phase compared, or every phase (one figure when
/// they all offer the same).
fn offered(a: &Of, b: &Of) -> Vec<(String, String, String)> {
    let load = |o: &Of| -> String {
        let rates: Vec<(&str, String)> = o
            .plan
            .phases
            .iter()
            .filter(|p| o.phase.is_none_or(|x| x == p.name))
            .map(|p| (p.name.as_str(), format!("{:.2}/s", p.rate)))
            .collect();
        match rates.first() {
            Some((_, r)) if rates.iter().all(|(_, x)| x == r) => r.clone(),
            _ => rates
                .iter()
                .map(|(n, r)| format!("{n} {r}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    };
    let (x, y) = (load(a), load(b));
    if x == y {
        return Vec::new();
    }
    let what = match (a.phase, b.phase) {
        (Some(p), Some(q)) if p == q => format!("offered load (phase {p})"),
        (Some(p), Some(q)) => format!("offered load (phases {p} and {q})"),
        _ => "offered load".into(),
    };
    vec![(what, x, y)]
}

/// The phases in order: name (kind, when it is not the name's) and duration.
fn phases(p: &Plan) -> String {
    p.phases
        .iter()
        .map(|x| {
            let kind = x.kind.to_string();
            let kind = if kind == x.name {
                String::new()
            } else {
                format!(" ({kind})")
            };
            format!("{}{kind} {}", x.name, format_duration(x.duration))
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The faults: one line each (name, action, target, trigger, backend) when those
/// differ, else field by field (`faults[kill-w2].duration`).
fn faults(pa: &Plan, pb: &Plan, ja: &Value, jb: &Value) -> Vec<(String, String, String)> {
    let list = |p: &Plan| -> String {
        match p.faults.is_empty() {
            true => "none".into(),
            false => p
                .faults
                .iter()
                .map(|f| fault(p, f))
                .collect::<Vec<_>>()
                .join(", "),
        }
    };
    let (x, y) = (list(pa), list(pb));
    if x != y {
        return vec![("faults".into(), x, y)];
    }
    // Same faults by their lines: what else differs, each under the fault's name.
    let named = |j: &Value, p: &Plan| -> Value {
        let mut v = j.clone();
        if let Some(items) = v.as_array_mut() {
            for (item, f) in items.iter_mut().zip(&p.faults) {
                if let Some(o) = item.as_object_mut() {
                    o.insert("name".into(), f.name.clone().into());
                }
            }
        }
        v
    };
    leaves("faults", &named(ja, pa), &named(jb, pb))
}

/// One fault in a line: `kill-w2 (kill w2 at in_flight 3 from fault +1.5s, process)`.
fn fault(p: &Plan, f: &FaultPlan) -> String {
    let targets = match (&f.node, f.replicas.is_empty()) {
        (_, true) => "the probe's replica".to_string(),
        (Some(n), false) => format!("node {n} ({})", f.replicas.join(", ")),
        (None, false) => f.replicas.join(", "),
    };
    let start = p
        .phases
        .iter()
        .find(|x| x.name == f.phase)
        .map_or(f.at, |x| x.start);
    let at = format!(
        "{} +{}",
        f.phase,
        format_duration(f.at.saturating_sub(start))
    );
    let when = match f.trigger {
        Trigger::Time => format!("at {at}"),
        Trigger::Probe { point, .. } => format!("at probe {} from {at}", point.describe()),
        Trigger::InFlight { n, .. } => format!("at in_flight {n} from {at}"),
    };
    format!("{} ({} {targets} {when}, {})", f.name, f.action, f.backend)
}

/// Every leaf that differs under `path`, with both values. Objects are compared key by
/// key (a missing one is `none`), lists of named objects name by name; any other
/// value as a whole.
fn leaves(path: &str, a: &Value, b: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    walk(path, a, b, &mut out);
    out
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<(String, String, String)>) {
    let empty = Map::new();
    let object = |v: &Value| match v {
        Value::Object(o) => Some(o.clone()),
        Value::Null => Some(empty.clone()),
        _ => None,
    };
    if a == b {
        return;
    }
    // `{fixed: 10}` vs `{uniform: [20, 40]}`: one variant against another, whole.
    let variant = |o: &Map<String, Value>| (o.len() == 1).then(|| o.keys().next().cloned());
    if (a.is_object() || b.is_object())
        && let (Some(oa), Some(ob)) = (object(a), object(b))
        && (oa.is_empty() || ob.is_empty() || variant(&oa) == variant(&ob))
    {
        let keys: BTreeSet<&String> = oa.keys().chain(ob.keys()).collect();
        for k in keys {
            let (x, y) = (
                oa.get(k).unwrap_or(&Value::Null),
                ob.get(k).unwrap_or(&Value::Null),
            );
            walk(&format!("{path}.{k}"), x, y, out);
        }
        return;
    }
    if let (Some(na), Some(nb)) = (names(a), names(b)) {
        if na != nb {
            out.push((path.to_string(), na.join(", "), nb.join(", ")));
        }
        for (i, n) in na.iter().enumerate() {
            if let Some(j) = nb.iter().position(|m| m == n) {
                walk(&format!("{path}[{n}]"), &a[i], &b[j], out);
            }
        }
        return;
    }
    out.push((path.to_string(), show(a), show(b)));
}

/// The names of a list whose items are all objects with a `name`.
fn names(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|x| x.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// A value as the scenario file writes it: strings bare, a missing value `none`, a
/// list of strings joined.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) => s.clone(),
        Value::Array(x) if x.is_empty() => "none".into(),
        Value::Array(x) if x.iter().all(Value::is_string) => x
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::plan;

    fn whole(p: &Plan) -> Of<'_> {
        Of {
            plan: p,
            phase: None,
        }
    }

    fn lines(d: &[Difference]) -> Vec<String> {
        d.iter().map(|d| format!("{:?} {d}", d.effect)).collect()
    }

    #[test]
    fn the_same_scenario_with_another_seed_is_like_for_like() {
        let (a, b) = (plan(&[]), plan(&["workload.seed=7", "description=again"]));
        assert_eq!(differences(&whole(&a), &whole(&b)), Vec::new());
    }

    #[test]
    fn other_load_refuses_and_each_difference_is_named_with_both_values() {
        let a = plan(&[]);
        let b = plan(&[
            "name=other",
            "workload.mix.classes[0].output_tokens=200",
            "workload.mix.classes[0].weight=2",
            "workload.mix.classes[0].prompt_tokens={uniform: [50, 150]}",
            "workload.arrival.rate=12/s",
            "workload.arrival.process=poisson",
        ]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&b))),
            [
                "Warn name: hand vs other",
                "Refuse workload.mix.classes[chat].output_tokens.fixed: 10 vs 200",
                "Refuse workload.mix.classes[chat].prompt_tokens: {\"fixed\":100} vs {\"uniform\":[50,150]}",
                "Refuse workload.mix.classes[chat].weight: 1.0 vs 2.0",
                "Refuse workload.arrival.process: constant vs poisson",
                "Refuse offered load: 10.00/s vs 12.00/s",
            ]
        );
        let c = plan(&["phases[2].duration=20s", "protected_load=8/s"]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&c))),
            [
                "Refuse phases: baseline 10s → fault 10s → degraded 10s vs baseline 10s → fault 10s → degraded 20s",
                "Refuse protected_load: 10/s vs 8/s",
            ]
        );
    }

    #[test]
    fn another_slo_target_or_criterion_only_warns() {
        let a = plan(&[]);
        let b = plan(&[
            "slo.ttft_p95=800ms",
            "target.gateway.policy=naive-retry",
            "criteria.require=[Routing]",
        ]);
        let d = differences(&whole(&a), &whole(&b));
        assert_eq!(
            lines(&d),
            [
                "Warn target.gateway.policy: reference vs naive-retry",
                "Warn slo.ttft_p95: 500ms vs 800ms",
                "Warn criteria.require: none vs Routing",
            ]
        );
        assert!(!refused(&d));
    }

    #[test]
    fn other_faults_are_named_in_a_line_each_or_field_by_field() {
        let a = plan(&[]);
        let none = plan(&["faults=[]"]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&none))),
            ["Refuse faults: kill-w2 (kill w2 at fault +2s, process) vs none"]
        );
        let b = plan(&["faults[0].when={in_flight: 3}"]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&b))),
            [
                "Refuse faults: kill-w2 (kill w2 at fault +2s, process) vs kill-w2 (kill w2 at in_flight 3 from fault +2s, process)"
            ]
        );
        let c = plan(&["faults[0].verify=false"]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&c))),
            ["Refuse faults[kill-w2].verify: true vs false"]
        );
    }

    #[test]
    fn phases_of_one_run_are_compared_by_their_own_offered_load() {
        let c = plan(&["phases[2].rate=20/s"]);
        let ph = |name| Of {
            plan: &c,
            phase: Some(name),
        };
        assert!(differences(&ph("baseline"), &ph("fault")).is_empty());
        assert_eq!(
            lines(&differences(&ph("baseline"), &ph("degraded"))),
            ["Refuse offered load (phases baseline and degraded): 10.00/s vs 20.00/s"]
        );
        // Whole runs: each phase's load, when they differ.
        let a = plan(&[]);
        assert_eq!(
            lines(&differences(&whole(&a), &whole(&c))),
            ["Refuse offered load: 10.00/s vs baseline 10.00/s, fault 10.00/s, degraded 20.00/s"]
        );
    }
}
