//! Every deserialization error of a scenario document in one pass, not only the first
//! (`haq validate` on a file with three mistakes reports three). serde stops at its
//! first error, so the document is deserialized again in pieces: each key of a struct
//! alone (an error inside it is that key's; the fields its JSON Schema requires and
//! the document lacks are missing), each element of the lists
//! (`phases`, `faults`, `workload.mix.classes`, `target.replicas`) alone. The pieces
//! are the scenario model's own types, so what is reported is what serde would say.
//! Hand-written: serde has no "collect every error" mode, and the table of sections
//! below names [`Scenario`]'s sections (a test checks each is one of its fields; a
//! section left out would still be probed whole, as a key of the scenario).

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::model::*;

/// One deserialization error: the field's dotted path, serde's message, and whether it
/// is an unknown field (placed at its key).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub field: String,
    pub message: String,
    pub unknown: bool,
}

/// The sections of a scenario that are probed piece by piece (the others as a whole).
pub const SECTIONS: [&str; 10] = [
    "target", "workload", "phases", "faults", "slo", "policy", "evidence", "criteria", "client",
    "report",
];

/// Every error deserializing `doc` as a [`Scenario`] finds, in no particular order.
pub fn scenario_errors(doc: &Value) -> Vec<Found> {
    let mut out = Vec::new();
    keyed::<Scenario>(doc, "", &SECTIONS, &mut out);
    let Some(obj) = doc.as_object() else {
        return out;
    };
    for (k, v) in obj {
        match k.as_str() {
            "target" => target(v, &mut out),
            "workload" => workload(v, &mut out),
            "phases" => each::<Phase>(v, "phases", &mut out),
            "faults" => each::<Fault>(v, "faults", &mut out),
            "slo" => keyed::<Slo>(v, "slo", &[], &mut out),
            "policy" => keyed::<FatePolicy>(v, "policy", &[], &mut out),
            "evidence" => keyed::<EvidenceCfg>(v, "evidence", &[], &mut out),
            "criteria" => keyed::<Criteria>(v, "criteria", &[], &mut out),
            "client" => keyed::<ClientCfg>(v, "client", &[], &mut out),
            "report" => keyed::<ReportCfg>(v, "report", &[], &mut out),
            _ => {}
        }
    }
    out
}

fn target(v: &Value, out: &mut Vec<Found>) {
    keyed::<Target>(v, "target", &["replicas"], out);
    if let Some(r) = v.get("replicas") {
        match r {
            Value::Array(_) => each::<ReplicaDecl>(r, "target.replicas", out),
            _ => whole::<Replicas>(r, "target.replicas", out),
        }
    }
}

fn workload(v: &Value, out: &mut Vec<Found>) {
    keyed::<Workload>(v, "workload", &["mix"], out);
    let Some(mix) = v.get("mix") else { return };
    if !mix.is_object() {
        whole::<MixRef>(mix, "workload.mix", out);
        return;
    }
    keyed::<Mix>(mix, "workload.mix", &["classes"], out);
    if let Some(c) = mix.get("classes") {
        each::<RequestClass>(c, "workload.mix.classes", out);
    }
}

/// `v` as a whole.
fn whole<T: DeserializeOwned>(v: &Value, prefix: &str, out: &mut Vec<Found>) {
    if let Err(e) = serde_path_to_error::deserialize::<_, T>(v) {
        out.push(found(prefix, &e));
    }
}

/// Each element of the list `v` on its own (the list as a whole if it is not one).
fn each<T: DeserializeOwned + JsonSchema>(v: &Value, prefix: &str, out: &mut Vec<Found>) {
    match v.as_array() {
        Some(items) => {
            for (i, x) in items.iter().enumerate() {
                keyed::<T>(x, &format!("{prefix}[{i}]"), &[], out);
            }
        }
        None => whole::<Vec<T>>(v, prefix, out),
    }
}

/// A struct's keys each on its own (but `skip`, probed by the caller), then the fields
/// its schema requires that are not there.
fn keyed<T: DeserializeOwned + JsonSchema>(
    v: &Value,
    prefix: &str,
    skip: &[&str],
    out: &mut Vec<Found>,
) {
    let Some(obj) = v.as_object() else {
        whole::<T>(v, prefix, out);
        return;
    };
    for (k, x) in obj {
        if skip.contains(&k.as_str()) {
            continue;
        }
        let one: Map<String, Value> = [(k.clone(), x.clone())].into_iter().collect();
        if let Err(e) = serde_path_to_error::deserialize::<_, T>(Value::Object(one))
            && !e.inner().to_string().starts_with("missing field")
        {
            out.push(found(prefix, &e));
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    for r in required.iter().filter_map(Value::as_str) {
        if !obj.contains_key(r) {
            out.push(Found {
                field: prefix.to_string(),
                message: format!("missing field `{r}`"),
                unknown: false,
            });
        }
    }
}

fn found(prefix: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> Found {
    let inner = e.path().to_string();
    let field = match (prefix, inner.as_str()) {
        (p, ".") => p.to_string(),
        ("", i) => i.to_string(),
        (p, i) if i.starts_with('[') => format!("{p}{i}"),
        (p, i) => format!("{p}.{i}"),
    };
    let message = e.inner().to_string();
    Found {
        unknown: message.starts_with("unknown field"),
        field,
        message: message.lines().next().unwrap_or(&message).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(yaml: &str) -> Value {
        serde_saphyr::from_str(yaml).expect("yaml")
    }

    /// `haq init`'s starter: a good scenario.
    const GOOD: &str = crate::scenario::STARTER;

    #[test]
    fn a_good_document_has_no_error() {
        assert_eq!(scenario_errors(&doc(GOOD)), Vec::new());
    }

    #[test]
    fn every_mistake_is_found_once_with_its_field() {
        let bad = GOOD
            .replace("  kind: sim ", "  replcas: 4\n  kind: sim ")
            .replace(
                "prompt_tokens: {uniform: [100, 500]}",
                "prompt_tokens: lots",
            )
            .replace(
                "{name: fault, duration: 10s}",
                "{name: fault, duration: soon}",
            )
            .replace("  e2e_p95: 8s", "  e2e_p95: 8s\n  ttft_p99: 2s")
            .replace("    action: kill ", "    backend: ssh\n    action: kill ");
        let mut got: Vec<(String, bool)> = scenario_errors(&doc(&bad))
            .into_iter()
            .map(|f| (f.field, f.unknown))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("faults[0].backend".to_string(), false),
                ("phases[1].duration".to_string(), false),
                ("slo.ttft_p99".to_string(), true),
                ("target.replcas".to_string(), true),
                ("workload.mix.classes[0].prompt_tokens".to_string(), false),
            ]
        );
    }

    #[test]
    fn a_missing_field_is_reported_but_not_for_a_key_that_is_wrong() {
        let bad = GOOD.replace("protected_load: 4/s ", "#").replace(
            "{name: baseline, duration: 15s}",
            "{name: baseline, duration: [5]}",
        );
        let got: Vec<String> = scenario_errors(&doc(&bad))
            .into_iter()
            .map(|f| format!("{}: {}", f.field, f.message))
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got.iter().any(|g| g.starts_with("phases[0].duration:")),
            "{got:?}"
        );
        assert!(
            got.iter().any(|g| g == ": missing field `protected_load`"),
            "{got:?}"
        );
    }

    #[test]
    fn the_sections_probed_are_the_scenarios_fields() {
        let schema = crate::scenario::json_schema();
        let props = schema["properties"].as_object().expect("properties");
        for s in SECTIONS {
            assert!(props.contains_key(s), "{s} is not a scenario field");
        }
    }
}
