//! The binary as a user runs it: exit codes and messages.

use std::process::Command;

use crate::support::{haq_bin, root, scratch};

pub fn haq(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(haq_bin())
        .args(args)
        .current_dir(root())
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_accepts_the_quickstart() {
    let (code, out, _) = haq(&["validate", "scenarios/quickstart.yaml"]);
    assert_eq!(code, 0);
    assert!(out.contains("valid"), "{out}");
}

#[test]
fn validate_rejects_a_broken_scenario_with_line_and_column() {
    let dir = scratch("broken");
    let f = dir.join("broken.yaml");
    let text = std::fs::read_to_string(root().join("scenarios/quickstart.yaml"))
        .expect("read")
        .replace("  ttft_p95: 1s", "  ttft_p95: 0s")
        .replace(
            "../workloads/chat.yaml",
            &root().join("workloads/chat.yaml").display().to_string(),
        );
    std::fs::write(&f, &text).expect("write");
    let line = text
        .lines()
        .position(|l| l.contains("ttft_p95: 0s"))
        .expect("line")
        + 1;
    let (code, _, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{err}");
    let want = format!("broken.yaml:{line}:13: `slo.ttft_p95`: must be greater than 0");
    assert!(err.contains(&want), "{err}\nwanted {want}");
    assert_eq!(err.lines().count(), 1, "one error: {err}");
}

#[test]
fn validate_rejects_a_bad_override() {
    let (code, _, err) = haq(&[
        "validate",
        "scenarios/quickstart.yaml",
        "--set",
        "target.replicas=0",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--set target.replicas=0"), "{err}");
}

#[test]
fn run_with_an_unusable_scenario_exits_2_and_starts_nothing() {
    let dir = scratch("unusable");
    let (code, _, err) = haq(&[
        "run",
        "scenarios/quickstart.yaml",
        "--set",
        "faults[0].target.replica=w9",
        "--reports-dir",
        dir.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("w9"), "{err}");
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "nothing written"
    );
}

#[test]
fn schema_and_init() {
    let (code, out, _) = haq(&["schema"]);
    assert_eq!(code, 0);
    let schema: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(schema["properties"]["faults"].is_object());
    let dir = scratch("init");
    let f = dir.join("s.yaml");
    let (code, _, _) = haq(&["init", f.to_str().expect("utf8")]);
    assert_eq!(code, 0);
    let (code, _, _) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 0);
    let (code, _, err) = haq(&["init", f.to_str().expect("utf8")]);
    assert_eq!(code, 2, "refuses to overwrite: {err}");
}

#[test]
fn check_on_a_missing_run_dir_exits_2() {
    let (code, _, err) = haq(&["check", "/nonexistent/run"]);
    assert_eq!(code, 2);
    assert!(err.contains("scenario.json"), "{err}");
}

#[test]
fn every_subcommand_is_documented() {
    let (_, out, _) = haq(&["--help"]);
    for c in ["run", "validate", "check", "schema", "init", "sim"] {
        assert!(out.contains(c), "{c} missing from --help");
    }
    let (_, out, _) = haq(&["sim", "--help"]);
    assert!(out.contains("up"));
    let (_, out, _) = haq(&["run", "--help"]);
    assert!(out.contains("--set") && out.contains("--seed") && out.contains("--out"));
}

/// A stored run re-judged with `criteria.require` added to its recorded scenario.
fn fixture_requiring(require: serde_json::Value) -> std::path::PathBuf {
    let dir = crate::report::fixture();
    let p = dir.join("scenario.json");
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
    s["criteria"]["require"] = require;
    std::fs::write(&p, serde_json::to_string_pretty(&s).expect("json")).expect("write");
    dir
}

#[test]
fn a_required_verdict_not_evaluated_fails_a_passing_run_and_says_why() {
    // The fixture run PASSes with Overload, Recovery and Maintenance NOT_EVALUATED.
    let dir = fixture_requiring(serde_json::json!(["Routing", "Capacity"]));
    let (code, out, _) = haq(&["check", dir.to_str().expect("utf8")]);
    assert_eq!(code, 0, "required verdicts judged: {out}");
    assert!(out.contains("result: PASS"), "{out}");
    let dir = fixture_requiring(serde_json::json!(["Routing", "Overload"]));
    let (code, out, _) = haq(&["check", dir.to_str().expect("utf8")]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL: Overload is NOT_EVALUATED (the scenario has no overload phase) but criteria.require lists it"),
        "{out}"
    );
    assert!(out.contains("result: FAIL"), "{out}");
    // The other reports say the same.
    let (code, _, _) = haq(&["report", dir.to_str().expect("utf8")]);
    assert_eq!(code, 1);
    let md = std::fs::read_to_string(dir.join("report.md")).expect("md");
    assert!(md.starts_with("# haq · sample · FAIL"), "{md}");
    assert!(md.contains("- ❌ **Overload is NOT_EVALUATED"), "{md}");
    let xml = std::fs::read_to_string(dir.join("junit.xml")).expect("xml");
    assert!(
        xml.contains("name=\"Overload\">\n      <failure type=\"REQUIRED\""),
        "{xml}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).expect("json"))
            .expect("json");
    assert_eq!(json["result"], "FAIL");
    assert_eq!(json["gates"]["unmet"][0]["verdict"], "Overload");
    crate::report::assert_valid_report(&json);
}

#[test]
fn a_misspelt_required_verdict_is_refused_with_its_place() {
    let (code, _, err) = haq(&[
        "validate",
        "scenarios/quickstart.yaml",
        "--set",
        "criteria.require=[Routng]",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`criteria.require[0]`: unknown variant `Routng`, expected one of `Failure-Domain`, `Routing`"),
        "{err}"
    );
}

#[test]
fn validate_warns_about_a_plan_that_cannot_pass() {
    let dir = scratch("cannot-pass");
    let f = dir.join("all-gone.yaml");
    let text = std::fs::read_to_string(root().join("scenarios/quickstart.yaml"))
        .expect("read")
        .replace(
            "../workloads/chat.yaml",
            &root().join("workloads/chat.yaml").display().to_string(),
        )
        + "  - {name: kill-w1, target: {replica: w1}, at: {phase: degraded, offset: 1s}}\n  - {name: kill-w3, target: {replica: w3}, at: {phase: degraded, offset: 2s}}\n";
    std::fs::write(&f, &text).expect("write");
    let line = text.lines().count();
    let (code, out, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 0, "a warning, not an error: {err}");
    assert!(out.contains("valid"), "{out}");
    let want = format!(
        "warning: {}:{line}:5: `faults[2]`: cannot pass: at +37s (degraded) every replica is out of service",
        f.display()
    );
    assert!(err.contains(&want), "{err}\nwanted {want}");
}
