//! The binary as a user runs it: exit codes and messages.

use std::process::Command;

use crate::support::{haq_bin, root, scratch};

pub fn haq(args: &[&str]) -> (i32, String, String) {
    haq_env(args, &[], &[])
}

/// As [`haq`], with variables set and removed in the child's environment.
pub fn haq_env(args: &[&str], set: &[(&str, &str)], remove: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(haq_bin());
    c.args(args).current_dir(root()).envs(set.iter().copied());
    for k in remove {
        c.env_remove(k);
    }
    let out = c.output().expect("runs");
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
