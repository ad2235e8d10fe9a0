//! `haq schema` tells the truth (issue 20 item 3): `haq init`'s starter, every shipped
//! scenario, workload and example scenario validates against the JSON Schema it
//! prints, and a file haq refuses fails it too.

use std::path::{Path, PathBuf};

use crate::cli::haq;
use crate::support::{root, scratch};

/// The schema `haq schema` prints, compiled; with `def` the same document checking
/// one of its definitions (a workload file is a `Mix`).
fn validator(def: Option<&str>) -> jsonschema::Validator {
    let (code, out, err) = haq(&["schema"]);
    assert_eq!(code, 0, "{err}");
    let mut schema: serde_json::Value = serde_json::from_str(&out).expect("schema is JSON");
    if let Some(d) = def {
        let defs = schema["$defs"].clone();
        assert!(defs[d].is_object(), "no $defs/{d}");
        schema = serde_json::json!({"$ref": format!("#/$defs/{d}"), "$defs": defs});
    }
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

/// A YAML file's document in the JSON data model.
fn yaml(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("read");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn errors(v: &jsonschema::Validator, doc: &serde_json::Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

#[test]
fn the_starter_and_every_shipped_file_validate_against_haq_schema() {
    let scenario = validator(None);
    let mix = validator(Some("Mix"));
    let dir = scratch("schema-init");
    let starter = dir.join("s.yaml");
    let (code, _, err) = haq(&["init", starter.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{err}");
    let mut scenarios = vec![starter];
    scenarios.extend(files("scenarios", "yaml"));
    let mut bad = Vec::new();
    for f in &scenarios {
        // haq itself accepts it…
        let (code, _, err) = haq(&["validate", f.to_str().expect("utf8")]);
        assert_eq!(code, 0, "{}: {err}", f.display());
        // …and so does its schema.
        for e in errors(&scenario, &yaml(f)) {
            bad.push(format!("{}: {e}", f.display()));
        }
    }
    let workloads = files("workloads", "yaml");
    assert!(workloads.len() >= 3);
    for f in &workloads {
        for e in errors(&mix, &yaml(f)) {
            bad.push(format!("{}: {e}", f.display()));
        }
    }
    assert!(scenarios.len() >= 9, "{scenarios:?}");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The scenarios under examples/ (Kubernetes, the real stacks; the manifests beside
/// them are not scenarios) and in the real-cluster guide validate against the schema
/// too: they are what a user copies first.
/// `haq init > s.yaml && haq schema` (issue 20 item 3): with stdout a pipe and no path,
/// `haq init` prints the scenario and nothing else there, writes no file, and what it
/// printed validates against the schema and as a scenario.
#[test]
fn haq_init_piped_prints_a_scenario_the_schema_and_haq_validate_accept() {
    let dir = scratch("schema-init-piped");
    let out = std::process::Command::new(crate::support::haq_bin())
        .arg("init")
        .current_dir(&dir)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "nothing but the scenario: {err}");
    assert!(
        !dir.join("scenario.yaml").exists(),
        "stdout was not a terminal: no file"
    );
    let s = dir.join("s.yaml");
    std::fs::write(&s, &out.stdout).expect("write");
    assert_eq!(
        std::fs::read_to_string(&s).expect("read"),
        std::fs::read_to_string(root().join("src/starter.yaml")).expect("starter"),
        "the starter, byte for byte"
    );
    let e = errors(&validator(None), &yaml(&s));
    assert!(e.is_empty(), "{}", e.join("\n"));
    let (code, _, err) = haq(&["validate", s.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{err}");
    // A path given is written, whatever stdout is; the message goes to stderr.
    let f = dir.join("given.yaml");
    let (code, out, err) = haq(&["init", f.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty() && err.starts_with("wrote "), "{out}|{err}");
    assert_eq!(
        std::fs::read(&f).expect("written"),
        std::fs::read(&s).expect("read")
    );
}

#[test]
fn every_example_scenario_and_the_guides_validate_against_haq_schema() {
    let scenario = validator(None);
    let mut docs: Vec<(String, serde_json::Value)> = Vec::new();
    for dir in ["examples/kubernetes", "examples/real-stack/scenarios"] {
        for f in files(dir, "yaml") {
            let text = std::fs::read_to_string(&f).expect("read");
            if text.contains("apiVersion:") || !text.contains("\nphases:") {
                continue;
            }
            docs.push((f.display().to_string(), yaml(&f)));
        }
    }
    let examples = docs.len();
    for (k, text) in crate::dist::scenarios_in("docs/qualify-a-real-cluster.md")
        .into_iter()
        .enumerate()
    {
        let doc = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("guide #{k}: {e}"));
        docs.push((format!("docs/qualify-a-real-cluster.md scenario {k}"), doc));
    }
    assert!(examples >= 8 && docs.len() > examples, "{}", docs.len());
    let bad: Vec<String> = docs
        .iter()
        .flat_map(|(name, doc)| {
            errors(&scenario, doc)
                .into_iter()
                .map(move |e| format!("{name}: {e}"))
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_schema_refuses_what_haq_refuses() {
    let scenario = validator(None);
    let mut doc = yaml(&root().join("scenarios/quickstart.yaml"));
    assert!(errors(&scenario, &doc).is_empty());
    // A misspelt field, a length that is neither a number nor a distribution, an
    // unknown verdict name: three errors.
    doc["phases"][0]["duraton"] = "5s".into();
    doc["workload"]["mix"] = serde_json::json!({"classes": [
        {"name": "c", "prompt_tokens": "many", "output_tokens": 150}
    ]});
    doc["criteria"] = serde_json::json!({"require": ["Routng"]});
    let e = errors(&scenario, &doc);
    assert!(e.len() >= 3, "{e:#?}");
    for at in ["/phases/0", "/workload/mix", "/criteria/require/0"] {
        assert!(e.iter().any(|x| x.contains(at)), "nothing at {at}: {e:#?}");
    }
}
