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
    // `-` prints the same starter on stdout.
    let (code, out, _) = haq(&["init", "-"]);
    assert_eq!(code, 0);
    assert_eq!(out, std::fs::read_to_string(&f).expect("read"));
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
    crate::report::fixture_with(|s| s["criteria"]["require"] = require.clone())
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
        .replace(
            "\ncriteria:",
            "\n  - {name: kill-w1, target: {replica: w1}, at: {phase: degraded, offset: 1s}}\n  - {name: kill-w3, target: {replica: w3}, at: {phase: degraded, offset: 2s}}\n\ncriteria:",
        );
    std::fs::write(&f, &text).expect("write");
    let line = text
        .lines()
        .position(|l| l.contains("name: kill-w3"))
        .expect("line")
        + 1;
    let (code, out, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 0, "a warning, not an error: {err}");
    assert!(out.contains("valid"), "{out}");
    let want = format!(
        "warning: {}:{line}:5: `faults[2]`: cannot pass: at +37s (degraded) every replica is out of service",
        f.display()
    );
    assert!(err.contains(&want), "{err}\nwanted {want}");
}

/// The quickstart with its workload path made absolute, changed by `edit`, in a file.
fn quickstart_copy(name: &str, edit: impl Fn(String) -> String) -> std::path::PathBuf {
    let f = scratch(name).join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(root().join("scenarios/quickstart.yaml"))
        .expect("read")
        .replace(
            "../workloads/chat.yaml",
            &root().join("workloads/chat.yaml").display().to_string(),
        );
    std::fs::write(&f, edit(text)).expect("write");
    f
}

#[test]
fn validate_reports_every_mistake_in_file_order() {
    // Three mistakes haq finds by checking values, in three sections.
    let f = quickstart_copy("three-mistakes", |t| {
        t.replace("  ttft_p95: 1s", "  ttft_p95: 0s")
            .replace(
                "{name: baseline, duration: 20s}",
                "{name: baseline, duration: 0s}",
            )
            .replace("target: {replica: w2}", "target: {replica: w9}")
    });
    let (code, _, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    for (l, want) in lines.iter().zip([
        "`slo.ttft_p95`: must be greater than 0",
        "`phases[0].duration`: must be greater than 0",
        "`faults[0].target.replica`: no such replica",
    ]) {
        assert!(
            l.starts_with("error: ") && l.contains(want),
            "{l}\nwanted {want}"
        );
    }
    let at = |l: &str| -> u64 {
        let rest = &l[l.find(".yaml:").expect("place") + 6..];
        rest.split(':')
            .next()
            .expect("line")
            .parse()
            .expect("number")
    };
    assert!(
        at(lines[0]) < at(lines[1]) && at(lines[1]) < at(lines[2]),
        "{err}"
    );
    // Three that the file's types refuse: a misspelt key, a value of the wrong type,
    // an unknown name; each at its own line and column.
    let f = quickstart_copy("three-typos", |t| {
        t.replace("  ttft_p95: 1s", "  ttft_p95: soon")
            .replace(
                "{name: fault, duration: 15s}",
                "{name: fault, duraton: 15s}",
            )
            .replace("    domain: worker", "    domain: wrker")
    });
    let (code, _, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{err}");
    for want in [
        "`slo.ttft_p95`: `soon` is not a duration",
        "`phases[1].duraton`: unknown field `duraton`",
        "`faults[0].domain`: unknown variant `wrker`",
    ] {
        assert!(err.contains(want), "{err}\nwanted {want}");
    }
    assert!(
        err.lines()
            .all(|l| l.starts_with("error: ") && l.contains(".yaml:")),
        "{err}"
    );
}

#[test]
fn validate_prints_the_effective_scenario_with_credentials_redacted() {
    let secret = "sk-live-0123456789abcdef";
    let auth = format!("target.headers={{authorization: \"Bearer {secret}\", x-team: ci}}");
    let args = |fmt: &'static str| {
        vec![
            "validate".to_string(),
            "scenarios/quickstart.yaml".into(),
            "-o".into(),
            fmt.into(),
            "--set".into(),
            "target.replicas=5".into(),
            "--set".into(),
            auth.clone(),
        ]
    };
    let run = |fmt| {
        let a = args(fmt);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        haq(&a)
    };
    let (code, out, err) = run("yaml");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("valid"), "the summary goes to stderr: {err}");
    assert!(!out.contains(secret) && !err.contains(secret), "{out}");
    let doc: serde_json::Value = serde_saphyr::from_str(&out).expect("YAML");
    assert_eq!(doc["target"]["replicas"], 5, "--set applied: {out}");
    assert_eq!(doc["target"]["headers"]["authorization"], "[redacted]");
    assert_eq!(doc["target"]["headers"]["x-team"], "ci");
    // Defaults filled, the workload inlined.
    assert_eq!(doc["client"]["max_load_error"], "5%", "{out}");
    assert_eq!(doc["workload"]["mix"]["classes"][0]["name"], "chat");
    // The output is itself a valid scenario.
    let f = scratch("effective").join("effective.yaml");
    std::fs::write(&f, &out).expect("write");
    let (code, _, err) = haq(&["validate", f.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run("json");
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["target"]["replicas"], 5);
    assert!(!out.contains(secret));
}

#[test]
fn run_dry_run_prints_the_plan_and_starts_nothing() {
    let dir = scratch("dry-run");
    let (code, out, err) = haq(&[
        "run",
        "scenarios/full.yaml",
        "--dry-run",
        "--reports-dir",
        dir.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "dry run of full: nothing was started",
        "embedded sim: starts 4 worker processes (w1, w2, w3 and w4)",
        "+15s     fault (fault) for 20s: 5.00/s, about 100 requests (Poisson arrivals)",
        "+45s     overload (overload) for 8s: 12.00/s",
        "kill-w2: process kill on w2 (domain worker)",
        "from +18s (fault +3s), fires once 2 requests are in flight on the target",
        "does: SIGKILL to sim worker w2's process",
        "then: a replacement 2s after the removal, cold start 8s",
        "does: SIGTERM (a planned drain) to sim worker w3's process",
        "Maintenance: judged from the planned drain drain-w3",
    ] {
        assert!(out.contains(want), "dry run lacks {want:?}:\n{out}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "nothing written"
    );
    // Probe triggers and command faults say what they will do.
    let (code, out, _) = haq(&["run", "scenarios/m9-4-network-cut.yaml", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("sends a probe request")
            && out.contains("fires when it reaches after_deltas k=3"),
        "{out}"
    );
    assert!(out.contains("forwards nothing either way"), "{out}");
}

#[test]
fn sim_up_listens_on_the_port_asked_prints_json_and_stops_on_ctrl_c() {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = scratch("sim-up");
    let mut child = Command::new(haq_bin())
        .args(["sim", "up", "--replicas", "1", "--json", "--port"])
        .arg(port.to_string())
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("one line");
    let j: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(j["api_url"], format!("http://127.0.0.1:{port}/v1"), "{j}");
    assert_eq!(j["workers"].as_array().map(Vec::len), Some(1), "{j}");
    assert!(
        j["workers"][0]["pid"].as_u64().is_some_and(|p| p > 1),
        "{j}"
    );
    assert!(
        j["gateway"]["pid"].as_u64().is_some() && j["tools"]["url"].is_string(),
        "{j}"
    );
    let models = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(models.is_ok(), "the gateway listens on {port}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("signal");
    let status = child.wait().expect("exits");
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopping the sim's processes"), "{err}");
    assert!(
        !err.contains("healing faults") && !err.contains("partial report"),
        "{err}"
    );
    let worker = j["workers"][0]["pid"].as_i64().expect("pid") as i32;
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), None).is_err(),
        "the worker was stopped"
    );
}
