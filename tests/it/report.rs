//! The reports people read, on a fixed stored run (tests/data/report-run): golden files
//! for report.md and junit.xml, the JSON Schema of report.json, the HTML in a browser.

use std::path::{Path, PathBuf};

use crate::support::{haq_bin, root, scratch};

/// A copy of the fixture run (judging writes latency.hlog next to the trace).
pub fn fixture() -> PathBuf {
    let src = root().join("tests/data/report-run");
    let dir = scratch("report-run");
    for f in [
        "scenario.json",
        "scenario.yaml",
        "trace.jsonl",
        "gateway.jsonl",
        "tools.jsonl",
        "worker-w1.jsonl",
        "worker-w2.jsonl",
        "worker-w3.jsonl",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).expect("copy fixture");
    }
    dir
}

/// Compares `got` with the golden file; `HAQ_BLESS=1` rewrites it instead. The copy's
/// own path (named in the evidence sources) reads `RUN_DIR`.
fn golden(name: &str, dir: &Path, got: &str) {
    let got = &got.replace(&dir.display().to_string(), "RUN_DIR");
    let path: PathBuf = root().join("tests/data/report-run/golden").join(name);
    if std::env::var_os("HAQ_BLESS").is_some() {
        std::fs::write(&path, got).expect("bless");
        return;
    }
    let want = std::fs::read_to_string(&path).expect("golden file (HAQ_BLESS=1 to create)");
    if want != *got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| want.lines().count().min(got.lines().count()));
        panic!(
            "{name} differs from {} at line {}:\n  want: {:?}\n  got:  {:?}\n(HAQ_BLESS=1 re-blesses after an intended change)",
            path.display(),
            line + 1,
            want.lines().nth(line),
            got.lines().nth(line)
        );
    }
}

fn judged(dir: &Path) -> (haq::plan::Plan, haq::check::Judgement) {
    haq::check::judge_dir(dir).expect("judge the fixture")
}

#[test]
fn report_md_matches_the_golden_file() {
    let dir = fixture();
    let (plan, j) = judged(&dir);
    let md = haq::report::markdown(&plan, &j);
    // What a reader needs is there: the verdicts, the timeline with its sources, the
    // per-phase latency, the worksheet.
    for want in [
        "# haq · sample · PASS",
        "| Routing | ✅ PASS | kill-w2: traffic removed from w2",
        "| w2 detected | gateway journal | upstream_removed w2",
        "## Latency per phase",
        "### Healthy vs degraded (Q2, Q4)",
        "### Request-fate matrix (Q8)",
    ] {
        assert!(md.contains(want), "report.md lacks {want:?}:\n{md}");
    }
    assert!(md.len() < 64 * 1024, "too big for a step summary");
    golden("report.md", &dir, &md);
}

#[test]
fn junit_xml_matches_the_golden_file() {
    let dir = fixture();
    let (plan, j) = judged(&dir);
    let xml = haq::report::junit(&plan, &j);
    assert_eq!(xml.matches("<testcase ").count(), 8);
    assert_eq!(xml.matches("<skipped ").count(), 3);
    assert!(!xml.contains("<failure"));
    golden("junit.xml", &dir, &xml);
}

#[test]
fn requests_csv_has_a_row_per_request() {
    let (_, j) = judged(&fixture());
    let text = haq::report::requests_csv(&j).expect("csv");
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), j.facts.requests.len());
    assert!(rows.len() > 50);
    let h = rd.headers().expect("header").clone();
    let col = |name: &str| h.iter().position(|x| x == name).expect(name);
    let cut: Vec<&csv::StringRecord> = rows
        .iter()
        .filter(|r| &r[col("outcome")] == "explicit_error")
        .collect();
    assert!(!cut.is_empty());
    for r in cut {
        assert_eq!(&r[col("caught_stage")], "streaming");
        assert_eq!(&r[col("caught_by")], "kill-w2");
        assert_eq!(&r[col("worker")], "w2");
    }
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join("schemas/report.schema.json")).expect("schema");
    let v: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&v).expect("schema is a valid JSON Schema")
}

/// Validates `report` against schemas/report.schema.json, listing every error.
pub fn assert_valid_report(report: &serde_json::Value) {
    let errors: Vec<String> = schema()
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "report.json does not match its schema:\n{}",
        errors.join("\n")
    );
}

#[test]
fn report_json_validates_against_its_schema() {
    let dir = fixture();
    let (plan, j) = judged(&dir);
    let v: serde_json::Value =
        serde_json::from_str(&haq::report::json(&plan, &j).expect("json")).expect("parse");
    assert_valid_report(&v);
    assert_eq!(v["verdicts"][1]["name"], "Routing");
    assert_eq!(
        v["timeline"]["faults"][0]["detected"]["source"],
        "gateway journal"
    );
    // The schema is not a rubber stamp: a broken report fails it.
    let mut bad = v.clone();
    bad["verdicts"][0]["status"] = "MAYBE".into();
    bad["timeline"]["faults"][0]["removal"]["sources"] = serde_json::json!([]);
    bad.as_object_mut().expect("object").remove("worksheet");
    let errors: Vec<String> = schema().iter_errors(&bad).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

/// Debian's chromium, if installed (.ci/run installs it and sets HAQ_REQUIRE_CHROMIUM).
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|b| {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(b))
                .find(|f| f.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os("HAQ_REQUIRE_CHROMIUM").is_none(),
            "HAQ_REQUIRE_CHROMIUM is set but no chromium is on PATH"
        );
        crate::support::skipped(
            "report::report_html_renders_its_plots_and_markers_in_a_real_browser",
            "no chromium on PATH (apt-get install -y chromium)",
        );
    }
    found
}

/// Runs headless chromium on `page` with `args`, bounded in time; returns stdout.
fn headless(bin: &Path, page: &Path, args: &[&str]) -> String {
    let profile = scratch("chromium-profile");
    let mut child = std::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    reader.join().expect("reader")
}

fn body_attr(dom: &str, name: &str) -> u64 {
    let body = &dom[dom.find("<body").expect("<body>")..];
    let body = &body[..body.find('>').expect("body tag end")];
    let key = format!("{name}=\"");
    let at = body
        .find(&key)
        .unwrap_or_else(|| panic!("{name} not set: {body}"))
        + key.len();
    body[at..at + body[at..].find('"').expect("quote")]
        .parse()
        .expect("number")
}

#[test]
fn report_html_renders_its_plots_and_markers_in_a_real_browser() {
    let dir = fixture();
    let (plan, j) = judged(&dir);
    let page = dir.join("report.html");
    std::fs::write(&page, haq::report::html(&plan, &j)).expect("write html");
    let Some(bin) = chromium() else { return };
    // The page's own check runs in the browser and writes what it measured on <body>.
    let dom = headless(&bin, &page, &["--dump-dom"]);
    assert_eq!(
        body_attr(&dom, "data-plots"),
        6,
        "TTFT, ITL, throughput, tokens, errors, in flight"
    );
    assert_eq!(body_attr(&dom, "data-plots-rendered"), 6);
    assert!(
        body_attr(&dom, "data-series-drawn") >= 10,
        "lines with geometry"
    );
    // Fault, detection and removal, on each of the six plots.
    assert_eq!(body_attr(&dom, "data-markers"), 18);
    for kind in ["fault", "detection", "removal"] {
        assert!(
            dom.contains(&format!("data-marker=\"{kind}\"")),
            "{kind} marker"
        );
    }
    let shot = dir.join("report.png");
    headless(
        &bin,
        &page,
        &[
            "--window-size=1000,2400",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 50_000,
        "{} bytes",
        png.len()
    );
}

#[test]
fn haq_report_rerenders_every_output_from_the_stored_trace() {
    let dir = fixture();
    let out = std::process::Command::new(crate::support::haq_bin())
        .args(["report", dir.to_str().expect("utf8")])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for f in [
        "report.json",
        "report.md",
        "junit.xml",
        "report.html",
        "requests.csv",
        "latency.hlog",
    ] {
        assert!(dir.join(f).is_file(), "{f} not written:\n{stdout}");
    }
    assert!(stdout.contains("result: PASS"), "{stdout}");
    // Re-rendering is deterministic: the same trace gives the same report.md.
    let (plan, j) = judged(&dir);
    assert_eq!(
        std::fs::read_to_string(dir.join("report.md")).expect("md"),
        haq::report::markdown(&plan, &j)
    );
    // A directory with no run in it is unusable: exit 2.
    let out = std::process::Command::new(crate::support::haq_bin())
        .args(["report", scratch("empty").to_str().expect("utf8")])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn haq_compare_exits_1_on_a_regression_beyond_the_threshold() {
    let dir = fixture();
    let d = dir.to_str().expect("utf8");
    let compare = |extra: &[&str]| {
        let out = std::process::Command::new(crate::support::haq_bin())
            .args(["compare", d, d])
            .args(extra)
            .output()
            .expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = compare(&[]);
    assert_eq!(code, Some(0), "a run against itself: {out}");
    assert!(
        out.contains("TTFT p95 (ms)") && out.contains("goodput"),
        "{out}"
    );
    // Healthy vs degraded of the fixture: p95 ITL rose 13.9%.
    let phases = ["--phase-a", "baseline", "--phase-b", "degraded"];
    let (code, out, _) = compare(&[&phases[..], &["--max-regression", "50%"]].concat());
    assert_eq!(code, Some(0), "{out}");
    let (code, out, _) = compare(&[&phases[..], &["--max-regression", "10%"]].concat());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("REGRESSED") && out.contains("+13.9%"), "{out}");
    let (code, _, err) = compare(&["--phase-a", "nope"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no phase `nope`"), "{err}");
}

#[test]
fn the_terminal_summary_has_phases_faults_timeline_and_every_verdict() {
    let dir = fixture();
    let (plan, j) = judged(&dir);
    let text = haq::report::terminal(&plan, &j, &dir);
    for name in haq::check::VERDICTS {
        assert!(text.contains(name.as_str()), "no {name} row:\n{text}");
    }
    for want in [
        "TTFT p50/p95 ms",
        "baseline",
        "degraded",
        "fault kill-w2 at +4.5s: kill w2",
        "timeline (Q11):",
        "w2 detected — gateway journal",
        "result: PASS",
    ] {
        assert!(
            text.contains(want),
            "terminal summary lacks {want:?}:\n{text}"
        );
    }
}

/// Every file of `dir` with its bytes and permissions, sorted.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| {
            let p = e.path();
            let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
            let bytes = if p.is_file() {
                std::fs::read(&p).expect("read")
            } else {
                Vec::new()
            };
            (e.file_name().to_string_lossy().into_owned(), bytes, mode)
        })
        .collect();
    out.sort();
    out
}

/// `haq check` judges a stored run from its directory alone (M10): on a read-only copy
/// it writes nothing (every file and its bytes as before: as root, a read-only mode
/// would not stop a write, the snapshot does) and needs no network (where this machine
/// lets a test make a network namespace with no interface up, it runs inside one).
#[test]
fn haq_check_writes_nothing_and_needs_no_network() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fixture();
    let (_, expected, _) = crate::cli::haq(&["check", &dir.display().to_string()]);
    let ro = |mode: u32| {
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode));
        }
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o111));
    };
    ro(0o444);
    let before = snapshot(&dir);
    let isolated = std::process::Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let mut cmd = if isolated {
        let mut c = std::process::Command::new("unshare");
        c.arg("-n").arg(haq_bin());
        c
    } else {
        crate::support::skipped(
            "report::haq_check_writes_nothing_and_needs_no_network (its no-network part)",
            "no network namespace here (unshare -n): haq check runs with the host's network",
        );
        std::process::Command::new(haq_bin())
    };
    let out = cmd
        .args(["check", &dir.display().to_string()])
        .output()
        .expect("runs");
    let after = snapshot(&dir);
    ro(0o644);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, expected, "the same judgement without network");
    assert!(stdout.contains("result: PASS"), "{stdout}");
    assert!(
        before == after,
        "haq check changed the run directory: {:?}",
        after.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
}

/// A copy of the fixture run whose recorded scenario `edit` changes.
pub fn fixture_with(edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let dir = fixture();
    let p = dir.join("scenario.json");
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
    edit(&mut s);
    std::fs::write(&p, serde_json::to_string_pretty(&s).expect("json")).expect("write");
    dir
}

#[test]
fn haq_compare_refuses_runs_that_are_not_like_for_like_and_names_why() {
    let a = fixture();
    let b = fixture_with(|s| {
        s["workload"]["mix"]["classes"][0]["output_tokens"] = serde_json::json!(400);
        s["workload"]["arrival"]["rate"] = "12/s".into();
    });
    let (a, b) = (a.to_str().expect("utf8"), b.to_str().expect("utf8"));
    let (code, out, err) = crate::cli::haq(&["compare", a, b]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(
            "error: not like for like: workload.mix.classes[chat].output_tokens: {\"uniform\":[20,40]} vs {\"fixed\":400}"
        ),
        "{err}"
    );
    assert!(
        err.contains("error: not like for like: offered load: 8.00/s vs 12.00/s"),
        "{err}"
    );
    assert!(out.is_empty(), "refused: no table\n{out}");
    let (code, out, _) = crate::cli::haq(&["compare", a, b, "--allow-different"]);
    assert!(code == 0 || code == 1, "{out}");
    assert!(
        out.contains("warning: not like for like: offered load: 8.00/s vs 12.00/s"),
        "{out}"
    );
    assert!(out.contains("but the runs are not like for like"), "{out}");
    let (_, out, _) = crate::cli::haq(&["compare", a, b, "--allow-different", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(j["differences"].as_array().map(Vec::len), Some(2), "{j}");
    assert_eq!(
        j["differences"][1],
        serde_json::json!({"what": "offered load", "a": "8.00/s", "b": "12.00/s", "effect": "refuse"})
    );
    assert_eq!(j["refused"], false);
    assert_eq!(j["verdicts"].as_array().map(Vec::len), Some(8), "{j}");
    assert!(j["rows"].as_array().is_some_and(|r| !r.is_empty()));
}

#[test]
fn haq_compare_of_one_scenario_with_another_seed_finds_no_difference() {
    let a = fixture();
    let b = fixture_with(|s| s["workload"]["seed"] = 7.into());
    let (a, b) = (a.to_str().expect("utf8"), b.to_str().expect("utf8"));
    let (code, out, err) = crate::cli::haq(&["compare", a, b]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains("warning") && !err.contains("warning"),
        "{out}{err}"
    );
    let (_, out, _) = crate::cli::haq(&["compare", a, b, "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(j["differences"], serde_json::json!([]));
}

#[test]
fn haq_compare_refuses_other_faults_and_its_json_says_so() {
    let a = fixture();
    // The same trace, its fault declared half a second later: another experiment.
    let b = fixture_with(|s| s["faults"][0]["at"]["offset"] = "2s".into());
    let (a, b) = (a.to_str().expect("utf8"), b.to_str().expect("utf8"));
    let (code, out, err) = crate::cli::haq(&["compare", a, b, "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    let named = "faults: kill-w2 (kill w2 at fault +1500ms, process) vs kill-w2 (kill w2 at fault +2s, process)";
    assert!(
        err.contains(&format!("error: not like for like: {named}")),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_str(&out).expect("the refused comparison");
    assert_eq!(j["refused"], true, "{j}");
    let d = &j["differences"];
    assert_eq!(d.as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(
        format!("{}: {} vs {}", d[0]["what"], d[0]["a"], d[0]["b"]).replace('"', ""),
        named
    );
    assert_eq!(d[0]["effect"], "refuse");
}

#[test]
fn haq_compare_shows_the_verdict_diff_and_a_worse_verdict_regresses() {
    let a = fixture();
    // The same run judged against a 10 ms TTFT objective: Latency FAILs in B. Another
    // SLO is named, a warning: the comparison goes on.
    let b = fixture_with(|s| s["slo"]["ttft_p95"] = "10ms".into());
    let (a, b) = (a.to_str().expect("utf8"), b.to_str().expect("utf8"));
    let (code, out, err) = crate::cli::haq(&["compare", a, b]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("warning: the runs differ: slo.ttft_p95: 2s vs 10ms\n"),
        "{out}"
    );
    assert!(out.contains("│ Latency"), "{out}");
    assert!(out.contains("WORSE"), "{out}");
    assert!(
        out.contains("result: B regressed against A (") && out.contains("Latency PASS → FAIL"),
        "{out}"
    );
    assert!(
        out.contains("with the differences warned about above"),
        "{out}"
    );
    let (code, out, _) = crate::cli::haq(&["compare", a, b, "--json"]);
    assert_eq!(code, 1);
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    let lat = j["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|r| r["verdict"] == "Latency"))
        .expect("Latency row");
    assert_eq!(
        (&lat["a"], &lat["b"], &lat["worse"]),
        (&"PASS".into(), &"FAIL".into(), &true.into())
    );
    assert_eq!(j["regressed"], true);
    assert_eq!(
        j["differences"],
        serde_json::json!([{"what": "slo.ttft_p95", "a": "2s", "b": "10ms", "effect": "warn"}])
    );
}

#[test]
fn a_failing_verdict_says_where_to_look_in_report_md_and_the_terminal() {
    // The fixture run judged against a 10 ms TTFT objective: Latency FAILs.
    let dir = fixture_with(|s| s["slo"]["ttft_p95"] = "10ms".into());
    let (plan, j) = judged(&dir);
    let md = haq::report::markdown(&plan, &j);
    let line = md
        .lines()
        .find(|l| l.starts_with("- **Latency** (FAIL): see `docs/requirements.md#latency`"))
        .unwrap_or_else(|| panic!("no pointer for Latency:\n{md}"));
    assert!(line.contains(" · requests `r0000"), "{line}");
    assert!(line.contains("requests.csv"), "{line}");
    let text = haq::report::terminal(&plan, &j, &dir);
    assert!(
        text.contains("look: Latency (FAIL): see docs/requirements.md#latency · requests r0000"),
        "{text}"
    );
    // The doc and its anchor exist in the repository.
    let doc = std::fs::read_to_string(root().join("docs/requirements.md")).expect("doc");
    assert!(
        doc.contains("<a id=\"latency\"></a>"),
        "docs/requirements.md has no #latency"
    );
}
